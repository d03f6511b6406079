"""Issue 23: the simulator's fast path (the default) against its reference path (`Simulator(reference=True)`, or
IPU_SIM_REFERENCE=1). Compiled tiny SigLIP packages (1 and 2 layers, 8 and 16 tiles, two seeds) run through both,
profiled and plain, and everything a run shows must be identical: the outputs, every tile's and every context's
cycles, the instructions issued, the profile trace, and the whole SRAM, per-word state, registers, CSRs and AMP
state afterwards. The fast path must also take fewer group steps (it is not the reference path under another
name)."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.lower import compile_model
from ipu.backend.target import Target
from ipu.frontend.siglip import PRESETS
from ipu.frontend.weights import random_weights
from ipu.runtime import jit
from ipu.runtime.halfconv import F16_TO_F32
from ipu.runtime.host import Session
from ipu.runtime.simulator import Simulator

STATE = (
    "mem64",
    "wstate",
    "m",
    "a",
    "csr",
    "cwei",
    "acc_cur",
    "amp_next_raw",
    "amp_done_raw",
    "cycles",
    "issued",
)


def _run(pkg, cfg, seed: int, reference: bool):
    sim = Simulator(pkg.target, reference=reference)
    assert sim.fast is not reference
    session = Session(pkg, sim)
    session.upload_parameters(random_weights(cfg, seed=seed))
    x = np.random.default_rng(seed).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    steps = [0]
    step = sim._step

    def count(g):
        steps[0] += 1
        return step(g)

    sim._step = count
    runs = [session.run({"pixel_values": x}, profile=True), session.run({"pixel_values": x})]
    return runs, sim, steps[0]


def _width256():
    """A SigLIP layer wide enough for K-split linears on 64 tiles (with activations fp8: on the FP8 AMP)."""
    from ipu.frontend.siglip import SiglipVisionConfig

    base = PRESETS["siglip-tiny"].to_dict()
    return SiglipVisionConfig(
        **{**base, "image_size": 64, "num_hidden_layers": 1, "hidden_size": 256, "intermediate_size": 512,
           "num_attention_heads": 4}
    )  # fmt: skip


@pytest.mark.parametrize(
    "model,layers,tiles,seed,activations",
    [("tiny", 1, 8, 1, "f16"), ("tiny", 2, 16, 0, "f16"), ("width256", 1, 64, 2, "fp8")],
)
def test_fast_path_equals_reference(model, layers, tiles, seed, activations, monkeypatch):
    """fp8: the K splits' GEMMs on the FP8 AMP, whose rpt loops the fast path fuses (jit.AUX_AMP_F8)."""
    cfg = (PRESETS["tiny"] if model == "tiny" else _width256()).with_layers(layers)
    pkg = compile_model(cfg, Target.small(tiles=tiles, sram_kib=624), activations=activations)
    ref_runs, ref_sim, ref_steps = _run(pkg, cfg, seed, reference=True)
    aux = []
    if jit.rpt_loop is not None:
        loop = jit.rpt_loop
        monkeypatch.setattr(jit, "rpt_loop", lambda args: aux.extend(args[9][:, jit.B_AMP]) or loop(args))
    fast_runs, fast_sim, fast_steps = _run(pkg, cfg, seed, reference=False)
    if jit.rpt_loop is not None:
        assert (jit.AUX_AMP_F8 in aux) is (activations == "fp8")
    for ref, fast in zip(ref_runs, fast_runs):
        assert ref.outputs.keys() == fast.outputs.keys()
        for name in ref.outputs:
            np.testing.assert_array_equal(fast.outputs[name], ref.outputs[name], err_msg=name)
        np.testing.assert_array_equal(fast.run.tile_cycles, ref.run.tile_cycles)
        np.testing.assert_array_equal(fast.run.context_cycles, ref.run.context_cycles)
        np.testing.assert_array_equal(fast.run.instructions, ref.run.instructions)
    ref_trace, fast_trace = ref_runs[0].trace, fast_runs[0].trace
    assert len(ref_trace.pc) > 0
    for field in ("clock", "pc", "kind"):
        np.testing.assert_array_equal(getattr(fast_trace, field), getattr(ref_trace, field), err_msg=field)
    for name in STATE:
        np.testing.assert_array_equal(getattr(fast_sim, name), getattr(ref_sim, name), err_msg=name)
    assert fast_steps < ref_steps


@pytest.mark.skipif(jit.amp_step_f16 is None, reason="numba is not installed")
def test_compiled_amp_rounds_to_half_as_numpy():
    """The compiled AMP step's float32 -> half rounding (phase 0: finished <- in-progress) against numpy's, on
    every half's neighbourhood: each half value, the ties halfway to the next, and one float32 step either side
    (normals, subnormals, zeros, overflow to infinity, infinities; NaN is left to numpy)."""
    with np.errstate(over="ignore"):
        _check_half_rounding()


def _check_half_rounding():
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    h = h[np.isfinite(h) | np.isinf(h)]
    lo = h.astype(np.float32)
    hi = np.nextafter(h, np.float16(np.inf)).astype(np.float32)
    mid = ((lo.astype(np.float64) + hi.astype(np.float64)) / 2).astype(np.float32)
    vals = np.concatenate(
        [lo, mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]
    )
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    vals = np.concatenate([vals, bits, [np.float32(65520), np.float32(-65520), np.float32(65519.996)]])
    vals = vals[~np.isnan(vals)].astype(np.float32)
    vals = np.concatenate([vals, np.zeros(-len(vals) % 16, np.float32)])
    n = len(vals) // 16
    acc = vals.reshape(n, 16).copy()
    done = np.zeros((n, 4), np.uint64)
    z = np.zeros((n, 4), np.uint64)
    a64 = np.zeros((n, 8), np.uint64)
    out = np.zeros(n, np.uint64)
    ok = jit.amp_step_f16(
        np.arange(n), 0, 0, 1, a64, np.zeros(n, np.int8), acc, acc.view(np.uint32), z.copy(), done, z.copy(),
        F16_TO_F32, out,
    )  # fmt: skip
    assert ok
    want = np.ascontiguousarray(vals.astype(np.float16)).view(np.uint64).reshape(n, 4)
    np.testing.assert_array_equal(done, want)


# A worker's straight run of pace forms outside any rpt loop (as a GEMM's prologue and epilogue): pace forms alone
# and beside an fnop, f8v4tof16 and F16 AMPs; the fast path runs it as one jit.rpt_loop call (_run_straight).
STRAIGHT = """
.globl main
.supervisor
main:
    setzi $m1, straight
    setzi $m2, {vs_rel}
    runall $m1, $m2, 4
    sync TEXCH_SYNCZONE_LOCAL
    br $lr

.globl straight
.worker
straight:
    ld32 $m5, $mvertex_base, $mzero, 0
    ld32 $m6, $mvertex_base, $mzero, 1
    ld32 $m7, $mvertex_base, $mzero, 2
    tapack $m2:3, $m5, $m6, $m7
    {{ ld2x64pace $a0:1, $a2:3, $m2:3+=, $mzero, 0 ; fnop }}
    {{ ldst64pace $a4:5, $a2:3, $m2:3+=, $mzero, 0 ; f8v4tof16 $a6:7, $a0 }}
    {{ ld2xst64pace $a0:3, $a6:7, $m2:3+=, $mzero, 0 ; f16v4hihov4amp $a4:5, $a0:1, $a2:3, TAMP_F16V4_E4_P0 }}
    {{ ld2xst64pace $a0:3, $a4:5, $m2:3+=, $mzero, 0 ; f16v4hihov4amp $a6:7, $a0:1, $a2:3, TAMP_F16V4_E4_P1 }}
    st64pace $a6:7, $m2:3+=, $mzero, 0
    st64pace $a4:5, $m2:3+=, $mzero, 0
    {{ ld2x64pace $a0:1, $a2:3, $m2:3+=, $mzero, 0 ; f16v4hihov4amp $a4:5, $a0:1, $a2:3, TAMP_F16V4_E4_P2 }}
    {{ ldst64pace $a0:1, $a4:5, $m2:3+=, $mzero, 0 ; f16v4hihov4amp $a6:7, $a0:1, $a2:3, TAMP_F16V4_E4_P3 }}
    {{ st64pace $a6:7, $m2:3+=, $mzero, 0 ; f16v4hihov4amp $a4:5, $a0:1, $a2:3, TAMP_F16V4_E4_P0 }}
    st64pace $a4:5, $m2:3+=, $mzero, 0
    exitz $mzero
"""


def _straight_sim(reference: bool, poison: tuple[int, int, int] | None = None):
    """The STRAIGHT program on 4 tiles with random half inputs, partials and AMP weights; poison = (tile, worker,
    atom): that input atom left unwritten."""
    from ipu.backend.asm_text import parse_program
    from ipu.runtime import examples as ex

    t = Target.small(tiles=4, sram_kib=624)
    lay = ex.AmpLayout()
    sim = Simulator(t, reference=reference)
    sim.load(parse_program(STRAIGHT.format(vs_rel=lay.vertex_state - t.sram_base), t.sram_base))
    rng = np.random.default_rng(7)
    T, W = sim.T, sim.W
    tiles = np.arange(T)
    sim.cwei[:] = rng.standard_normal((T, 64, 4)).astype(np.float16).view(np.uint8)
    vs = np.zeros((T, W, 4), np.uint32)
    for w in range(W):
        vs[:, w, :3] = [lay.inputs + w * lay.worker_stride, lay.partials + w * lay.worker_stride,
                        lay.outputs + w * lay.worker_stride]  # fmt: skip
        for base in (lay.inputs, lay.partials):
            data = rng.standard_normal((T, 64)).astype(np.float16)
            sim.write(base + w * lay.worker_stride, data, tiles=tiles)
    sim.write(lay.vertex_state, vs.reshape(T, -1), tiles=tiles)
    if poison is not None:
        tile, w, atom = poison
        sim.wstate[(lay.inputs + w * lay.worker_stride + 8 * atom - sim.base) // 8, tile] = 0
    return sim


def test_straight_run_equals_reference(monkeypatch):
    if jit.rpt_loop is None:
        pytest.skip("numba is not installed")
    calls = []
    loop = jit.rpt_loop
    monkeypatch.setattr(jit, "rpt_loop", lambda args: calls.append(len(args[9])) or loop(args))
    sims = [_straight_sim(reference) for reference in (True, False)]
    res = [sim.run("main") for sim in sims]
    assert calls == [10]  # the fast path ran the ten units in one call
    for name in ("tile_cycles", "context_cycles", "instructions"):
        np.testing.assert_array_equal(getattr(res[1], name), getattr(res[0], name), err_msg=name)
    for name in (*STATE, "amp_xraw", "amp_kind"):
        np.testing.assert_array_equal(getattr(sims[1], name), getattr(sims[0], name), err_msg=name)


@pytest.mark.parametrize("atom", [0, 1, 3, 4])  # loaded by the units 0, 1, 3 (an AMP beside), 6
def test_straight_run_stops_at_the_failing_unit(atom):
    """A load of never-written memory in a straight run (atom k is loaded by the unit k of the run): the fast
    path stops before that unit and the numpy semantics report the reference path's error, with the same state
    of every context."""
    from ipu.runtime.errors import SimError

    errors, sims = [], []
    for reference in (True, False):
        sim = _straight_sim(reference, poison=(2, 4, atom))
        with pytest.raises(SimError) as e:
            sim.run("main")
        errors.append(str(e.value))
        sims.append(sim)
    assert "poison" in errors[0] and errors[1] == errors[0]
    for name in (*STATE, "amp_xraw", "amp_kind"):
        np.testing.assert_array_equal(getattr(sims[1], name), getattr(sims[0], name), err_msg=name)


@pytest.mark.parametrize("compiled", [True, False])
def test_fast_f16v4_arithmetic_equals_numpy(compiled, monkeypatch):
    """semantics._f16v4_fast (float32 arithmetic rounded to half; compiled: jit.f16v4_arith, else numpy) against
    numpy's float16 add, subtract and multiply: every half against a spread of second operands (zeros,
    subnormals, normals, infinities: NaN results too) and random pairs; an input NaN is left to numpy (None)."""
    from ipu.runtime import semantics

    if not compiled:
        monkeypatch.setattr(jit, "f16v4_arith", None)
    elif jit.f16v4_arith is None:
        pytest.skip("numba is not installed")

    a = np.arange(1 << 16, dtype=np.uint16)
    a = a[(a & 0x7FFF) <= 0x7C00]
    a = np.concatenate([a, np.zeros(-len(a) % 4, np.uint16)])
    rng = np.random.default_rng(3)
    seconds = [0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x3C00, 0xBC01, 0x7BFF, 0x7C00, 0xFC00, 0x1234]
    pairs = [(a, np.full(len(a), b, np.uint16)) for b in seconds]
    pairs += [(a, rng.permutation(a)), (a, (a ^ 0x8000) + rng.integers(0, 3, len(a)).astype(np.uint16))]
    for x, y in pairs:
        y = np.where((y & 0x7FFF) > 0x7C00, np.uint16(0), y)
        for fn in (np.add, np.subtract, np.multiply):
            with np.errstate(all="ignore"):
                want = fn(x.view(np.float16), y.view(np.float16)).view(np.uint16)
            got = semantics._f16v4_fast(fn, x.view(np.uint64), y.view(np.uint64))
            np.testing.assert_array_equal(got.view(np.uint16), want, err_msg=fn.__name__)
    nan = a.copy()
    nan[5] = 0x7E00
    assert semantics._f16v4_fast(np.add, nan.view(np.uint64), a.view(np.uint64)) is None
    if compiled:  # the compiled kernel itself took a NaN-free case (not only the numpy fallback)
        out = np.empty(len(a) // 4, np.uint64)
        assert jit.f16v4_arith(
            2, a.view(np.uint64), a.view(np.uint64), F16_TO_F32, np.empty(len(a), np.float32), out
        )
        with np.errstate(over="ignore"):
            want = (a.view(np.float16) * a.view(np.float16)).view(np.uint16)
        np.testing.assert_array_equal(out.view(np.uint16), want)


@pytest.mark.parametrize("kind", [1, 2, 3])
def test_compiled_weight_decode_equals_numpy(kind, monkeypatch):
    """Simulator._cwei_matrix64 through jit.decode_weights against its numpy decode: every byte value (NaNs and
    infinities too, compared as bits), all tiles, then only the tiles whose slots a set_cwei changed."""
    if jit.decode_weights is None:
        pytest.skip("numba is not installed")
    t = Target.small(tiles=8, sram_kib=624)
    rng = np.random.default_rng(kind)
    sims = [Simulator(t), Simulator(t)]
    raw = rng.integers(0, 256, sims[0].cwei.shape, dtype=np.uint8)
    raw.reshape(-1)[:256] = np.arange(256, dtype=np.uint8)
    new = rng.integers(0, 256, (3, 8 * 5), dtype=np.uint8)
    out = []
    for compiled, sim in zip((True, False), sims):
        if not compiled:
            monkeypatch.setattr(jit, "decode_weights", None)
        sim.cwei[:] = raw
        with np.errstate(invalid="ignore"):  # numpy's cast of NaN halves
            first = sim._cwei_matrix64(kind).copy()
            sim.set_cwei(np.array([1, 4, 6]), 7, new)
            out.append((first, sim._cwei_matrix64(kind).copy()))
    for a, b in zip(*out):
        np.testing.assert_array_equal(a.view(np.uint64), b.view(np.uint64))
    assert not np.array_equal(out[0][0].view(np.uint64), out[0][1].view(np.uint64))


@pytest.mark.parametrize("xfmt", [0, 1])
def test_compiled_amp_flush_equals_numpy(xfmt, monkeypatch):
    """semantics.amp_flush of pending F16 and FP8 (F143 / F152 weights) products with per-context input scales,
    kinds mixed over the contexts (as a coefficient load flushes them): the fast path (jit.amp_flush_f16 and
    jit.amp_flush_f8) against the reference path's numpy products, the sums, inputs and kinds left equal."""
    from ipu.runtime import semantics

    if jit.amp_flush_f8 is None:
        pytest.skip("numba is not installed")
    calls = []
    flush = jit.amp_flush_f8
    monkeypatch.setattr(jit, "amp_flush_f8", lambda *a: calls.append(a[-1]) or flush(*a))
    t = Target.small(tiles=6, sram_kib=624)
    rng = np.random.default_rng(11 + xfmt)
    sims = [Simulator(t, reference=True), Simulator(t)]
    cw = rng.integers(0, 256, sims[0].cwei.shape, dtype=np.uint8)
    cw[cw == 0x80] = 0  # no FP8 NaN (which NaN a sum gives is not what is compared here)
    cw.view(np.uint16)[(cw.view(np.uint16) & 0x7C00) == 0x7C00] = 0x3C00  # no F16 NaN or infinity
    x = rng.integers(0, 256, sims[0].amp_xraw.shape + (8,), dtype=np.uint8)
    x[x == 0x80] = 1
    x.view(np.uint16)[(x.view(np.uint16) & 0x7C00) == 0x7C00] = 0x3800
    kind = rng.integers(0, 4, sims[0].amp_kind.shape)
    scale = rng.integers(-8, 9, sims[0].amp_scale.shape)
    acc = rng.standard_normal(sims[0].acc_cur.shape).astype(np.float32)
    for sim in sims:
        sim.cwei[:] = cw
        sim.amp_xraw[:] = x.view(np.uint64).reshape(sim.amp_xraw.shape)
        sim.amp_kind[:] = kind
        sim.amp_scale[:] = scale
        sim.amp_xfmt = xfmt
        sim.acc_cur[:] = acc
        semantics.amp_flush(sim, np.arange(3, sim.NW - 4))
    assert sorted(set(calls)) == [2, 3]
    for name in ("acc_cur", "amp_xraw", "amp_kind"):
        np.testing.assert_array_equal(getattr(sims[1], name), getattr(sims[0], name), err_msg=name)
    assert not np.array_equal(sims[1].acc_cur, acc)


@pytest.mark.parametrize("name", ["exp_f16", "tanh_f16"])
def test_half_tables_equal_the_functions(name):
    """The fast path's f16v2exp / f16v2tanh look results up (semantics.half_table): every half through the
    function in groups of other sizes, orders and strides gives the table's bits."""
    from ipu.runtime import semantics

    fn = getattr(semantics, name)
    table = semantics.half_table(fn)
    bits = np.arange(1 << 16, dtype=np.uint16)
    rng = np.random.default_rng(5)
    for x in (bits, rng.permutation(bits), bits[::3], rng.permutation(bits)[:4097]):
        want = np.ascontiguousarray(fn(x.view(np.float16))).view(np.uint16)
        np.testing.assert_array_equal(table[x], want)
