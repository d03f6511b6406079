"""`layernorm_split` (every row split across the six workers) on the simulator: bit-exact against its numpy
semantics, close to a float64 layer norm, estimate exact, well below the whole-row kernel for one row; and the
lowering's choice between the two (few rows per tile: split; many: whole rows)."""

from __future__ import annotations

import numpy as np
import pytest
from test_lower_linear import run_passes  # noqa: E402  (pytest puts tests/unit on sys.path)
from xdsl.builder import Builder
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.ir import Block, Region
from xdsl.rewriter import InsertPoint

from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.harness import run_call
from ipu.backend.lower import lower_to_package
from ipu.backend.target import Target
from ipu.dialects import nn
from ipu.frontend.reference import evaluate
from ipu.runtime.host import Session
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = R.library_asm(TARGET.sram_base)
X, Y, Z, OUT, PARTS, FRAME = 0x60000, 0x68000, 0x6A000, 0x70000, 0x7C000, 0x5C000


def _data(rows, n, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, n)) * 3 + 1.5).astype(np.float16)
    w = rng.standard_normal(n).astype(np.float16)
    b = rng.standard_normal(n).astype(np.float16)
    return x, w, b


def _run(k: R.Rows, x, w, b):
    """Simulated output rows [rows, n] (contiguous), the partials [rows, 12] (one f32 per 64-bit word) and kernel
    cycles; the estimate must equal the simulator's count."""
    sim = Simulator(TARGET)
    cyc, _ = run_call(sim, LIB, FRAME, k.frame, k.entry, {X: x, Y: w, Z: b})
    assert R.cycles(k) == cyc, (R.cycles(k), cyc)
    out = sim.read(OUT, k.rows * k.n * 2, np.float16, tiles=[0]).reshape(k.rows, k.n)
    parts = sim.read(PARTS, k.rows * R.LNS_PART, np.uint32, tiles=[0]).reshape(k.rows, -1)[:, ::2]
    return out, parts, cyc


def _run_whole(k: R.Rows, x, w, b) -> int:
    """The whole-row `layernorm` kernel's simulated cycles (bit-exact output, exact estimate)."""
    sim = Simulator(TARGET)
    cyc, _ = run_call(sim, LIB, FRAME, k.frame, k.entry, {X: x, Y: w, Z: b})
    assert R.cycles(k) == cyc
    got = sim.read(OUT, x.size * 2, np.float16, tiles=[0]).reshape(x.shape)
    np.testing.assert_array_equal(got.view(np.uint16), R.semantics(k, x, w, b)["out"].view(np.uint16))
    return cyc


def _ref64(x, w, b, eps):
    xd = x.astype(np.float64)
    return (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + eps) * w + b


# n = 1000: 250 atoms, slices of 42 and 41 atoms (n / 6 is not a multiple of 4); n = 24: one atom per worker.
@pytest.mark.parametrize("n", [1152, 64, 1000, 24])
@pytest.mark.parametrize("rows", [1, 3])
def test_layernorm_split(rows, n):
    x, w, b = _data(rows, n, rows * 31 + n)
    k = R.Rows("layernorm_split", rows, n, in0=X, in1=Y, in2=Z, out=OUT, st0=PARTS, eps=1e-5)
    got, parts, _ = _run(k, x, w, b)
    want = R.semantics(k, x, w, b)
    np.testing.assert_array_equal(got.view(np.uint16), want["out"].view(np.uint16))
    # The partials (the centered ones depend on the mean: on the order the six sums are combined in), bit-exact.
    np.testing.assert_array_equal(parts, want["partials"].view(np.uint32))
    np.testing.assert_allclose(want["out"].astype(np.float64), _ref64(x, w, b, 1e-5), atol=2e-2, rtol=1e-2)


# n = 1000: slices of 42 and 41 atoms; n = 24: one atom per worker (the loops' epilogues alone).
@pytest.mark.parametrize("n", [1152, 1000, 64, 24])
@pytest.mark.parametrize("rows", [1, 3])
def test_layernorm_split32(rows, n):
    """`layernorm_split32` reads f32 rows (no cast to f16 before it): bit-exact against its numpy semantics (the
    sums of f32 x, the normalize pass on f16(x)), the partials too, estimate exact; close to float64 and to the
    f16-input kernel on f16(x); cheaper than that kernel plus the f32 -> f16 cast it replaces."""
    from ipu.backend.kernels import elementwise as ew

    x16, w, b = _data(rows, n, rows + n)
    x = x16.astype(np.float32) + np.random.default_rng(n).standard_normal((rows, n)).astype(np.float32) * 1e-3
    k = R.Rows("layernorm_split32", rows, n, in0=X, in1=Y, in2=Z, out=OUT, st0=PARTS)
    got, parts, cyc = _run(k, x, w, b)
    want = R.semantics(k, x, w, b)
    np.testing.assert_array_equal(got.view(np.uint16), want["out"].view(np.uint16))
    np.testing.assert_array_equal(parts, want["partials"].view(np.uint32))
    np.testing.assert_allclose(got.astype(np.float64), _ref64(x, w, b, 1e-6), atol=2e-2, rtol=1e-2)
    k16 = R.Rows("layernorm_split", rows, n, in0=X, in1=Y, in2=Z, out=OUT, st0=PARTS)
    via16 = R.semantics(k16, x.astype(np.float16), w, b)["out"].astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), via16, atol=1e-2, rtol=4e-3)
    assert cyc < R.cycles(k16) + ew.cycles(ew.Elementwise("cast_f32_f16", rows * n // 4))


def test_layernorm_split_strided_rows():
    """Rows inside wider buffers (strides > row bytes): only the row elements are read and written."""
    rows, n = 3, 64
    xw, w, b = _data(rows, 80, 5)
    x = xw[:, :n]
    k = R.Rows(
        "layernorm_split", rows, n, in0=X, in1=Y, in2=Z, out=OUT, st0=PARTS, in_stride=160, out_stride=144
    )
    sim = Simulator(TARGET)
    cyc, _ = run_call(
        sim, LIB, FRAME, k.frame, k.entry, {X: xw, Y: w[:n], Z: b[:n], OUT: np.zeros(216, np.float16)}
    )
    assert R.cycles(k) == cyc
    got = sim.read(OUT, rows * 144, np.float16, tiles=[0]).reshape(rows, 72)
    want = R.semantics(k, x, w[:n], b[:n])["out"]
    np.testing.assert_array_equal(got[:, :n].view(np.uint16), want.view(np.uint16))
    assert not got[:, n:].any()


def test_layernorm_split_matches_whole_row_kernel_closely():
    """Same formulas as `layernorm`, only the order of the f32 sums differs: results within an f16 ulp or two."""
    x, w, b = _data(3, 1152, 7)
    kw = dict(in0=X, in1=Y, in2=Z, out=OUT, eps=1e-6)
    split = R.semantics(R.Rows("layernorm_split", 3, 1152, st0=PARTS, **kw), x, w, b)["out"].astype(
        np.float64
    )
    whole = R.semantics(R.Rows("layernorm", 3, 1152, **kw), x, w, b)["out"].astype(np.float64)
    np.testing.assert_allclose(split, whole, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("offset", [0.0, 200.0, -3000.0])
def test_layernorm_split_f16_normalize_is_accurate_with_a_large_mean(offset):
    """The normalize pass in f16 (x - hi - lo, hi + lo the f32 mean in two halves): with rows whose mean is large
    against their spread (up to 3000 +- 3: x itself then holds only ~0.5-2 ulps of spread) the simulated result
    stays within a few f16 ulps of the f32-normalizing whole-row `layernorm` and of float64 on the same f16 x."""
    rows, n = 3, 1152
    x, w, b = _data(rows, n, 11)
    x = (x.astype(np.float32) + offset).astype(np.float16)
    k = R.Rows("layernorm_split", rows, n, in0=X, in1=Y, in2=Z, out=OUT, st0=PARTS, eps=1e-6)
    got, _, _ = _run(k, x, w, b)
    np.testing.assert_array_equal(got.view(np.uint16), R.semantics(k, x, w, b)["out"].view(np.uint16))
    whole = R.semantics(R.Rows("layernorm", rows, n, in0=X, in1=Y, in2=Z, out=OUT, eps=1e-6), x, w, b)["out"]
    ref = _ref64(x, w, b, 1e-6)
    scale = np.abs(ref).max()
    for y in (got, whole):
        np.testing.assert_allclose(y.astype(np.float64), ref, rtol=0, atol=6 * scale * 2.0**-11)
    assert (
        np.abs(got.astype(np.float64) - ref).mean() < 2 * np.abs(whole.astype(np.float64) - ref).mean() + 1e-3
    )


@pytest.mark.parametrize("rows", [1, 3])
def test_layernorm_split_cycles_below_whole_row_kernel(rows):
    """One row of 1152 (So400m, one row per tile): the whole-row kernel runs on one worker, the split on six.
    Simulated: 1 x 1152 45,237 -> 5,811 cycles; 3 x 1152 45,237 -> 16,851 (7,203 / 21,027 with the
    normalize pass in f32)."""
    n = 1152
    x, w, b = _data(rows, n, 3)
    whole = R.Rows("layernorm", rows, n, in0=X, in1=Y, in2=Z, out=OUT)
    split = R.Rows("layernorm_split", rows, n, in0=X, in1=Y, in2=Z, out=OUT, st0=PARTS)
    c_whole = _run_whole(whole, x, w, b)
    _, _, c_split = _run(split, x, w, b)
    assert c_split * (5.5 / rows) < c_whole, (c_split, c_whole)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(rows=1, n=20), "n >= 24"),
        (dict(rows=0, n=64), "rows >= 1"),
        (dict(rows=1, n=64, st0=PARTS + 4), "8-byte aligned"),
        (dict(rows=1, n=66), "n % 4 == 0"),
        (dict(rows=1, n=64, eps=1e-12), "f16 rstd"),
    ],
)
def test_layernorm_split_rejects(kwargs, match):
    kwargs = {"st0": PARTS, **kwargs}
    with pytest.raises(ValueError, match=match):
        R.Rows("layernorm_split", **kwargs)


# --- the lowering's choice ------------------------------------------------------------------------------------------


def _ln_model(rows: int, n: int) -> ModuleOp:
    block = Block()
    bld = Builder(InsertPoint.at_end(block))
    x = bld.insert(nn.InputOp("x", TensorType(f32, [rows, n]))).result
    w = bld.insert(nn.ParamOp("w", TensorType(f32, [n]))).result
    b = bld.insert(nn.ParamOp("b", TensorType(f32, [n]))).result
    y = bld.insert(nn.LayerNormOp(x, w, b, 1e-6)).result
    bld.insert(nn.OutputOp("y", y))
    bld.insert(func.ReturnOp())
    return ModuleOp([func.FuncOp("ln", ((), ()), Region(block))])


@pytest.mark.parametrize("activations", ["f16", "none"])
@pytest.mark.parametrize("rows,n,entry", [(24, 1152, "rows_lns_sup"), (192, 64, "rows_sup")])
def test_lowering_picks_the_cheaper_layer_norm(rows, n, entry, activations):
    """16 tiles: 24 rows of 1152 (1-2 rows per tile) take the split kernel, 192 rows of 64 (12 per tile) whole
    rows (the split one on the f32 rows, without the f16 cast of x); both match the device-mode reference. With nn-quantize-weights' f16 activations the weight and bias
    are f16 parameters the kernel reads in place; otherwise the lowering casts the f32 ones per inference."""
    opts = "{tiles=16 sram_kib=624}"
    quantize = f"nn-quantize-weights{{activations={activations}}}"
    spec = f"{quantize},nn-to-exchange-pipeline{opts},memory-plan{opts}"
    pkg = lower_to_package(run_passes(_ln_model(rows, n), spec))
    kernels = {s["kernel"] for s in pkg.metadata["profile_sites"] if s["what"].endswith(": rows")}
    assert kernels == {entry}
    # The split kernel reads the f32 rows itself (`layernorm_split32`): no cast of x before it.
    x_casts = [s for s in pkg.metadata["profile_sites"] if s["what"].endswith("x to f16")]
    assert bool(x_casts) == (entry == "rows_sup")
    casts = [
        s["what"]
        for s in pkg.metadata["profile_sites"]
        if s["what"].endswith(("weight to f16", "bias to f16"))
    ]
    assert len(casts) == (0 if activations == "f16" else 2)
    rng = np.random.default_rng(rows)
    params = {"w": rng.standard_normal(n).astype(np.float32), "b": rng.standard_normal(n).astype(np.float32)}
    x = (rng.standard_normal((rows, n)) * 2 + 1).astype(np.float32)
    session = Session(pkg)
    session.upload_parameters(params)
    y = session.run({"x": x}).outputs["y"]
    ref = evaluate(run_passes(_ln_model(rows, n), quantize), {"x": x}, params, mode="device")
    ref = ref.outputs["y"]
    np.testing.assert_allclose(y, ref, rtol=0, atol=8 * np.abs(ref).max() * 2.0**-11)
