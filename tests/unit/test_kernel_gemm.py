"""AMP GEMM kernels on the simulator: bit-exact against the numpy semantics, cycle estimate within 5% (in fact
exact), over a grid of shapes with remainder rows, idle workers, both modes, both coefficient-load modes, row-major
and panel operand orders, F16 and FP8 (both formats, scales)."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.asm_text import parse_program
from ipu.backend.kernels import gemm as G
from ipu.backend.kernels.harness import code_bytes, run_call
from ipu.backend.target import Target
from ipu.runtime import fp8
from ipu.runtime.errors import SimError
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = G.library_asm(TARGET.sram_base)
FRAME, A_ADDR, W64_ADDR, C_ADDR, W128_ADDR = 0x5C000, 0x60000, 0x70000, 0x80000, 0xA0000


def _f16(rng, shape):
    # multiples of 1/16 in [-4, 4): every f32 sum of products is exact, so the result does not depend on the
    # order of accumulation (bit-exact comparisons are meaningful)
    return (rng.integers(-64, 64, shape) / 16).astype(np.float16)


def _fp8(rng, shape):
    # magnitudes in [2^-3, 2^4] for both formats, random signs (exact f32 sums, as above)
    bits = rng.integers(0, 256, shape).astype(np.uint8)
    vals = fp8.DECODE[fp8.F143][bits]
    ok = (np.abs(vals) >= 0.125) & (np.abs(vals) <= 16)
    return np.where(ok, bits, np.uint8(0x40)).astype(np.uint8)


def _to_format(bits, fmt):
    """Re-encode F143 bits in `fmt` (same values)."""
    return fp8.encode(fp8.DECODE[fp8.F143][bits], fmt)


def run_gemm(g: G.Gemm, a, b, c0=None):
    sim = Simulator(TARGET)
    mem = {A_ADDR: a, g.weights: G.pack_weights(b, g.prec)}
    if c0 is not None:
        mem[C_ADDR] = c0
    cyc, _ = run_call(sim, LIB, FRAME, g.frame, g.entry, mem)
    rows = g.m if g.c_row_stride is None else g.m * g.nblocks
    out = sim.read(C_ADDR, rows * (g.crs if g.c_row_stride is None else 32), np.float16, tiles=[0])
    return out, cyc


def _check(g, a, b, c0, a_dev, out_raw, cyc):
    if g.c_row_stride is None:
        out = out_raw.reshape(g.m, g.n)
    else:  # [N/16][M][16] panels
        out = out_raw.reshape(g.nblocks, g.m, 16).transpose(1, 0, 2).reshape(g.m, g.n)
    ref = G.semantics(g, a, b, c0)
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))
    est = G.cycles(g)
    assert abs(est - cyc) <= 0.05 * cyc, (est, cyc)
    return est


SHAPES = [  # (M, K, N): remainders, idle workers, one worker, several blocks
    (3, 16, 16),
    # one worker idle while the others use the AMP: regression test of a simulator fix (amp_flush with mixed
    # AMP kinds indexed an empty selection)
    (16, 16, 32),
    (19, 32, 16),
    (37, 48, 32),
    (64, 16, 16),
]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("mode", ["init", "acc"])
def test_f16_gemm(m, k, n, mode):
    rng = np.random.default_rng(m * 1000 + k + n)
    a, b, c0 = _f16(rng, (m, k)), _f16(rng, (k, n)), _f16(rng, (m, n))
    g = G.Gemm(m, k, n, G.F16, mode, "ld128", a=A_ADDR, weights=W128_ADDR, c=C_ADDR)
    out, cyc = run_gemm(g, a, b, c0 if mode == "acc" else None)
    assert _check(g, a, b, c0, a, out, cyc) == cyc  # the estimate is exact on this model


@pytest.mark.parametrize("m,k,n", [(20, 32, 32), (7, 64, 16)])
def test_f16_gemm_ld64_and_panels(m, k, n):
    """ld64 coefficient loads (weights in region 0) with A and C in panel order."""
    rng = np.random.default_rng(7)
    a, b, c0 = _f16(rng, (m, k)), _f16(rng, (k, n)), _f16(rng, (m, n))
    a_panels = np.ascontiguousarray(a.reshape(m, k // 16, 16).transpose(1, 0, 2))
    c_panels = np.ascontiguousarray(c0.reshape(m, n // 16, 16).transpose(1, 0, 2))
    g = G.Gemm(
        m,
        k,
        n,
        G.F16,
        "acc",
        "ld64",
        a=A_ADDR,
        weights=W64_ADDR,
        c=C_ADDR,
        a_row_stride=32,
        a_block_step=32 * m,
        c_row_stride=32,
        c_block_step=32 * m,
    )
    out, cyc = run_gemm(g, a_panels, b, c_panels)
    _check(g, a, b, c0, a_panels, out, cyc)


def _col_panels(a, p):
    """[M, K] -> column panels of p columns ([K/p][M][p], the last one narrower), each row-major, flat."""
    return np.concatenate([a[:, j : j + p].reshape(-1) for j in range(0, a.shape[1], p)])


@pytest.mark.parametrize(
    "m,p,ktot,k0,kw,n,mode",
    [
        (20, 32, 128, 0, 128, 32, "init"),  # q = 2, whole panels, two column blocks
        (19, 32, 144, 16, 80, 32, "acc"),  # starts mid-panel (first = 1), 5 blocks per column block
        (7, 48, 200, 16, 128, 48, "init"),  # q = 3, first = 1, idle workers, a narrow last panel left alone
        (37, 48, 192, 32, 112, 16, "acc"),  # first = 2: the first jump after one block
        (64, 16, 64, 16, 48, 32, "acc"),  # q = 1: a jump after every block
    ],
)
def test_f16_gemm_a_column_panels(m, p, ktot, k0, kw, n, mode):
    """A read in place from column panels of p (the panel jump), for a K range [k0, k0 + kw) that may start and
    end inside panels; a second column block restarts the countdown. Bit-exact, estimate exact."""
    rng = np.random.default_rng(m * 7 + p + k0)
    a_full, b, c0 = _f16(rng, (m, ktot)), _f16(rng, (kw, n)), _f16(rng, (m, n))
    q = p // 16
    g = G.Gemm(
        m,
        kw,
        n,
        G.F16,
        mode,
        "ld128",
        a=A_ADDR + ((k0 // p) * p * m + k0 % p) * 2,
        weights=W128_ADDR,
        c=C_ADDR,
        a_row_stride=2 * p,
        a_panel_blocks=q,
        a_panel_step=p * m * 2,
        a_first_block=(k0 % p) // 16,
    )
    a = a_full[:, k0 : k0 + kw]
    out, cyc = run_gemm(g, _col_panels(a_full, p), b, c0 if mode == "acc" else None)
    assert _check(g, a, b, c0, None, out, cyc) == cyc


def test_a_panel_fields_are_checked():
    with pytest.raises(ValueError, match="a_first_block"):
        G.Gemm(8, 32, 16, a_row_stride=64, a_panel_blocks=2, a_panel_step=1024, a_first_block=2)
    with pytest.raises(ValueError, match="a_panel_step"):
        G.Gemm(8, 32, 16, a_row_stride=64, a_panel_blocks=2, a_panel_step=0)
    with pytest.raises(ValueError, match="a_panel_blocks"):
        G.Gemm(8, 32, 16, a_row_stride=64, a_panel_blocks=0, a_panel_step=1024)
    with pytest.raises(ValueError, match="need a_panel_blocks"):
        G.Gemm(8, 32, 16, a_panel_step=1024)


@pytest.mark.parametrize(
    "m,k,n,fmts,scales",
    [
        (3, 32, 16, (fp8.F143, fp8.F143), (0, 0)),
        (17, 64, 32, (fp8.F152, fp8.F143), (-3, 1)),
        (40, 32, 16, (fp8.F143, fp8.F152), (2, -4)),
    ],
)
@pytest.mark.parametrize("mode", ["init", "acc"])
def test_fp8_gemm(m, k, n, fmts, scales, mode):
    rng = np.random.default_rng(m + k)
    a = _to_format(_fp8(rng, (m, k)), fmts[0])
    b = _to_format(_fp8(rng, (k, n)), fmts[1])
    c0 = _f16(rng, (m, n))
    g = G.Gemm(
        m,
        k,
        n,
        G.FP8,
        mode,
        "ld128",
        a=A_ADDR,
        weights=W128_ADDR,
        c=C_ADDR,
        in_format=fmts[0],
        w_format=fmts[1],
        in_scale=scales[0],
        w_scale=scales[1],
    )
    out, cyc = run_gemm(g, a, b, c0 if mode == "acc" else None)
    _check(g, a, b, c0, a, out, cyc)


def test_semantics_is_a_matmul():
    """The semantics against a plain float64 product (exact data); C is rounded to half after every K block."""
    rng = np.random.default_rng(1)
    a, b, c0 = _f16(rng, (5, 32)), _f16(rng, (32, 16)), _f16(rng, (5, 16))
    one = G.Gemm(5, 16, 16, mode="acc")
    want = (a[:, :16].astype(np.float64) @ b[:16].astype(np.float64) + c0).astype(np.float16)
    np.testing.assert_array_equal(G.semantics(one, a[:, :16], b[:16], c0), want)
    two = G.semantics(G.Gemm(5, 32, 16, mode="acc"), a, b, c0)
    np.testing.assert_array_equal(two, G.semantics(one, a[:, 16:], b[16:], want))


def test_row_split():
    assert G.row_split(128) == (21, 2, 6)
    assert G.row_split(16) == (3, 1, 5)  # one worker idle: every active one needs 3 rows
    assert G.row_split(3) == (3, 0, 1)
    with pytest.raises(ValueError):
        G.row_split(2)


def test_c_outside_interleaved_memory_is_a_bank_conflict():
    """Partials and results share C's element: it must be interleaved (documented constraint)."""
    rng = np.random.default_rng(2)
    a, b, c0 = _f16(rng, (8, 16)), _f16(rng, (16, 16)), _f16(rng, (8, 16))
    g = G.Gemm(8, 16, 16, mode="acc", a=A_ADDR, weights=W128_ADDR, c=0x68000)
    sim = Simulator(TARGET)
    mem = {A_ADDR: a, W128_ADDR: G.pack_weights(b, G.F16), 0x68000: c0}
    with pytest.raises(SimError, match="bank"):
        run_call(sim, LIB, FRAME, g.frame, g.entry, mem)


def test_shared_code_is_small():
    # two precisions x (2 supervisors + 2 workers); the supervisors' unrolled per-call worker-base setup and
    # per-column C0 updates are ~110 bytes each
    assert code_bytes(LIB, TARGET) < 2800


@pytest.mark.parametrize("prec,target", [(G.F16, 0.75), (G.FP8, 0.70)])
def test_efficiency_target_128(prec, target):
    """Issue 4's targets on one tile at 128^3 (init mode, ld128, row-major): bit-exact, estimate exact."""
    rng = np.random.default_rng(128)
    gen = _f16 if prec == G.F16 else _fp8
    a, b = gen(rng, (128, 128)), gen(rng, (128, 128))
    g = G.Gemm(128, 128, 128, prec, "init", "ld128", a=A_ADDR, weights=W128_ADDR, c=C_ADDR)
    out, cyc = run_gemm(g, a, b)
    assert _check(g, a, b, None, a, out, cyc) == cyc
    assert G.macs(g) / cyc / G.PEAK_MACS[prec] >= target


def test_frame_is_reusable():
    """The supervisor rewrites the records' C rows per column block itself: calling twice with the same frame gives
    the same C (with stale C rows the second call would write column block 0 into the last one)."""
    rng = np.random.default_rng(5)
    m, k, n = 24, 32, 48
    a, b = _f16(rng, (m, k)), _f16(rng, (k, n))
    g = G.Gemm(m, k, n, G.F16, "init", "ld128", a=A_ADDR, weights=W128_ADDR, c=C_ADDR)
    main = f"""
.globl main
.supervisor
main:
    add $m9, $lr, 0
    setzi $m0, {FRAME}
    call $lr, {g.entry}
    setzi $m0, {FRAME}
    call $lr, {g.entry}
    br $m9
"""
    prog = parse_program(main + LIB, TARGET.sram_base)
    sim = Simulator(TARGET)
    sim.load(prog)
    sim.write(A_ADDR, a.view(np.uint8).reshape(-1), tiles=[0])
    sim.write(W128_ADDR, G.pack_weights(b, G.F16), tiles=[0])
    sim.write(FRAME, g.frame(prog.labels).view(np.uint8), tiles=[0])
    sim.run("main", tiles=[0])
    out = sim.read(C_ADDR, m * n * 2, np.float16, tiles=[0]).reshape(m, n)
    np.testing.assert_array_equal(out.view(np.uint16), G.semantics(g, a, b).view(np.uint16))


@pytest.mark.parametrize(
    "m,p,panels,n,mode", [(37, 24, 3, 32, "init"), (20, 20, 2, 16, "acc"), (7, 28, 1, 16, "init")]
)
def test_f16_gemm_a_overlapping_panel_blocks(m, p, panels, n, mode):
    """A in column panels of 16 < p < 32 halves (row stride 2p, not a multiple of 32 bytes) read in place as two
    overlapping K blocks per panel, columns [0, 16) and [p - 16, p) (a_block_step 2 (p - 16)): bit-exact against
    the semantics of the A those blocks form, estimate exact."""
    rng = np.random.default_rng(m + p + panels)
    a_full, c0 = _f16(rng, (m, p * panels)), _f16(rng, (m, n))
    cols = np.concatenate([[j * p + c for c in [*range(16), *range(p - 16, p)]] for j in range(panels)])
    b = _f16(rng, (len(cols), n))
    g = G.Gemm(m, len(cols), n, G.F16, mode, "ld128", a=A_ADDR, weights=W128_ADDR, c=C_ADDR, a_row_stride=2 * p,
               a_block_step=2 * (p - 16), a_panel_blocks=2, a_panel_step=p * m * 2)  # fmt: skip
    out, cyc = run_gemm(g, _col_panels(a_full, p), b, c0 if mode == "acc" else None)
    assert _check(g, a_full[:, cols], b, c0, None, out, cyc) == cyc


def test_row_strides_are_checked():
    with pytest.raises(ValueError, match="A's row stride"):
        G.Gemm(8, 32, 16, a_row_stride=44)
    with pytest.raises(ValueError, match="C's row stride"):
        G.Gemm(8, 32, 16, c_row_stride=48)
    G.Gemm(8, 32, 16, a_row_stride=48)
