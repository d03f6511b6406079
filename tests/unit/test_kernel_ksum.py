"""The fused K-split sum (`ksum`) on the simulator: bit-exact against its numpy semantics, the estimate equal to the
simulated cycles; the semantics equal to the unfused calls it replaces (pairwise `add_f16`, `bias_f16`,
`cast_f16_f32`), so that the lowering's results do not change."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from ipu.backend.kernels import elementwise as E
from ipu.backend.kernels import ksum as K
from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.harness import run_call
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
# The strided bodies the lowering calls (q / k / v: 6 partials + bias, Q scaled) and a few others.
STRIDED_KINDS = [(g, b, o, sc, True) for g in (1, 3, 6, 8) for b in (False, True) for o in ("f16", "f32")
                 for sc in (False, True) if not (sc and o == "f32")]  # fmt: skip
EW_LIB = E.library_asm(TARGET.sram_base)  # the supervisor `ew_sup` (and the unfused calls)


@cache
def _lib(kind: tuple) -> str:
    """`ew_sup` and the one worker body of `kind` (assembling every kind's body for each call is slow)."""
    return EW_LIB + "\n" + K.library_asm([kind])


X, B, OUT, FRAME = 0x60000, 0x70000, 0x80000, 0x5C000
ADD = (0x88000, 0x90000)  # addend blocks (f32, laid out as the result)


def _inputs(parts, units, row, rng, scale=4.0):
    x = (rng.standard_normal(parts * units * 4) * scale).astype(np.float16)
    return x, rng.standard_normal(max(row, 4)).astype(np.float16)


def _run(k: K.KSum, x, bias, addends=()):
    sim = Simulator(TARGET)
    mem = {X: x, B: bias} if k.bias else {X: x}
    mem.update(zip(k.addends, addends))
    cyc, _ = run_call(sim, _lib(k.kind), FRAME, k.frame, k.entry, mem)
    ref = np.ascontiguousarray(K.semantics(k, x, bias, tuple(addends)))
    out = sim.read(OUT, ref.nbytes, ref.dtype, tiles=[0]).reshape(ref.shape)
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))
    assert K.cycles(k) == cyc
    return cyc


@pytest.mark.parametrize("kind", K.KINDS, ids=lambda k: K.worker_name(*k))
@pytest.mark.parametrize("rows,row", [(1, 4), (7, 24)])
def test_ksum_kinds(kind, rows, row):
    """Every worker body: one unit (five idle workers) and rows that do not split evenly over the workers."""
    parts, bias, out = kind
    rng = np.random.default_rng(parts * 100 + rows)
    units = rows * row // 4
    x, b = _inputs(parts, units, row, rng)
    _run(K.KSum(parts, units, X, OUT, B if bias else 0, row if bias else 0, out), x, b)


@pytest.mark.parametrize("kind", K.SCALED_KINDS, ids=lambda k: K.worker_name(*k))
@pytest.mark.parametrize("rows,row", [(1, 4), (7, 24)])
def test_ksum_scaled_kinds(kind, rows, row):
    """The scaled bodies (the attention's Q scale applied by Q's K-split sum): bit-exact and the estimate exact,
    and the same bits as the unscaled sum followed by the attention program's `scale_f16` call (f16(q * f16(s)))
    that they replace."""
    parts, bias, out, _ = kind
    rng = np.random.default_rng(parts * 100 + rows + 7)
    units = rows * row // 4
    x, b = _inputs(parts, units, row, rng)
    scale = 72**-0.5
    k = K.KSum(parts, units, X, OUT, B if bias else 0, row if bias else 0, out, scale=scale)
    plain = K.KSum(parts, units, X, OUT, B if bias else 0, row if bias else 0, out)
    # The multiply shares the adds' bundles (II unchanged); the scale's load and a longer epilogue per segment.
    assert K.schedule(*k.kind).ii == K.schedule(*plain.kind).ii
    assert K.cycles(plain) < K.cycles(k) <= K.cycles(plain) + 6 * (1 + 2 * 3)
    _run(k, x, b)
    then = E.semantics(E.Elementwise("scale_f16", units, scalar=scale), K.semantics(plain, x, b))
    np.testing.assert_array_equal(K.semantics(k, x, b).view(np.uint16), then.view(np.uint16))


@pytest.mark.parametrize("kind", K.GELU_KINDS, ids=lambda k: K.worker_name(*k))
@pytest.mark.parametrize("rows,row,scale", [(1, 4, 4.0), (7, 24, 4.0), (35, 32, 2.0), (9, 16, 3e3)])
def test_ksum_gelu_kinds(kind, rows, row, scale):
    """The GELU bodies (the MLP's fc1 sum and its GELU in one pass): bit-exact and the estimate exact on the
    simulator (so400m's [35, 32] blocks of 3 partials among the shapes; scale 3e3: sums that overflow to inf), the
    same bits as the plain sum followed by rowwise's `gelu` call they replace, and fewer cycles than the two."""
    parts, bias = kind[:2]
    rng = np.random.default_rng(parts * 100 + rows + 11)
    units = rows * row // 4
    x, b = _inputs(parts, units, row, rng, scale=scale)
    k = K.KSum(parts, units, X, OUT, B if bias else 0, row if bias else 0, "f16", gelu=True)
    plain = K.KSum(parts, units, X, OUT, B if bias else 0, row if bias else 0, "f16")
    _run(k, x, b)
    gelu = R.Rows("gelu", units)
    then = R.semantics(gelu, K.semantics(plain, x, b))["out"]
    np.testing.assert_array_equal(K.semantics(k, x, b).view(np.uint16), then.view(np.uint16))
    if units >= 60:
        assert K.cycles(k) < K.cycles(plain) + R.cycles(gelu)


def test_ksum_gelu_is_f16_unscaled_only():
    with pytest.raises(ValueError, match="unscaled f16"):
        K.KSum(2, 4, X, OUT, out_type="f32", gelu=True).frame({"ksum2_f16_f32_gelu": 0})
    with pytest.raises(ValueError, match="unscaled f16"):
        K.schedule(2, False, "f16", True, True)


def test_ksum_scale_is_f16_only():
    with pytest.raises(ValueError, match="f16 results only"):
        K.KSum(2, 4, X, OUT, out_type="f32", scale=0.5).frame({"ksum2_f16_f32_scaled": 0})


# The blocks the lowering gives So400m's K-split linears (rows x columns per tile, their G and result type) and
# their ragged neighbours (odd row counts, a row of 1 atom, rows longer than a worker's range).
SHAPES = [
    (6, "f16", 25, 24),
    (6, "f16", 4, 24),
    (8, "f32", 10, 64),
    (8, "f32", 9, 64),
    (3, "f16", 35, 32),
    (3, "f16", 29, 16),
    (8, "f32", 19, 32),
    (8, "f32", 7, 32),
    (5, "f32", 13, 48),
    (5, "f32", 1, 48),
    (2, "f16", 3, 4),
    (7, "f16", 11, 12),
]


@pytest.mark.parametrize("parts,out,rows,row", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_ksum_shapes(parts, out, rows, row, seed):
    rng = np.random.default_rng(seed * 1000 + parts * 37 + rows)
    units = rows * row // 4
    x, b = _inputs(parts, units, row, rng, scale=[4.0, 3e3][seed])  # seed 1: sums that overflow to inf
    for bias in (True, False):
        _run(K.KSum(parts, units, X, OUT, B if bias else 0, row if bias else 0, out), x, b)


def _unfused(parts, units, row, out, x, bias):
    """The calls the lowering made before the fusion, by their own semantics (elementwise.py)."""
    n = units * 4
    blocks = [x[i * n : (i + 1) * n] for i in range(parts)]
    live = parts
    while live > 1:
        h = live // 2
        add = E.Elementwise("add_f16", n // 4)
        for i in range(h):
            blocks[i] = E.semantics(add, blocks[i], blocks[i + live - h])
        live -= h
    s = blocks[0]
    if row:
        s = E.semantics(E.Elementwise("bias_f16", n // row, row=row), s, bias).reshape(-1)
    if out == "f32":
        s = E.semantics(E.Elementwise("cast_f16_f32", n // 4), s)
    return s


@pytest.mark.parametrize("parts", range(1, K.MAX_PARTS + 1))
@pytest.mark.parametrize("out", ["f16", "f32"])
def test_ksum_semantics_as_unfused(parts, out):
    rng = np.random.default_rng(parts)
    row, units = 24, 60
    x, b = _inputs(parts, units, row, rng, scale=300.0)
    for r in (row, 0):
        k = K.KSum(parts, units, X, OUT, B if r else 0, r, out)
        want = _unfused(parts, units, r, out, x, b)
        np.testing.assert_array_equal(K.semantics(k, x, b).view(np.uint8), want.view(np.uint8))


def test_tree_is_the_lowerings_order():
    assert K.tree(1) == []
    assert K.tree(3) == [(0, 2), (0, 1)]
    assert K.tree(6) == [(0, 3), (1, 4), (2, 5), (0, 2), (0, 1)]
    assert K.tree(8) == [(0, 4), (1, 5), (2, 6), (3, 7), (0, 2), (1, 3), (0, 1)]


def test_ksum_fewer_passes():
    """The point of the fusion: So400m's q/k/v site (6 partials, 25 x 24 halves + bias) against the unfused
    calls' estimates (three add_f16 calls, the odd block's copy aside, bias_f16)."""
    k = K.KSum(6, 150, X, OUT, B, 24, "f16")
    unfused = sum(E.cycles(E.Elementwise("add_f16", u)) for u in (450, 150, 150)) + E.cycles(
        E.Elementwise("bias_f16", 25, row=24)
    )
    assert K.cycles(k) < 0.6 * unfused


def test_frame_rejects():
    labels = {K.worker_name(g, b, o): 0 for g, b, o in K.KINDS}
    with pytest.raises(ValueError, match="partials"):
        K.KSum(K.MAX_PARTS + 1, 6, X, OUT).frame(labels)
    with pytest.raises(ValueError, match="whole atoms"):
        K.KSum(2, 6, X, OUT, B, 6).frame(labels)
    with pytest.raises(ValueError, match="whole rows"):
        K.KSum(2, 7, X, OUT, B, 8).frame(labels)


@pytest.mark.parametrize("kind", STRIDED_KINDS, ids=lambda k: K.worker_name(*k))
@pytest.mark.parametrize("rows,out_row,in_row,col", [(1, 24, 48, 0), (13, 24, 48, 24), (7, 8, 20, 12)])
def test_ksum_strided(kind, rows, out_row, in_row, col):
    """Result rows of out_row halves from the columns col.. of partial rows of in_row halves (a 24-wide head
    block of a 48-wide q / k / v panel's partials): bit-exact, the estimate exact, and the same bits as the
    contiguous call on those columns copied out."""
    parts, bias, out, scaled, _ = kind
    rng = np.random.default_rng(parts * 100 + rows + out_row)
    units = rows * out_row // 4
    full = (rng.standard_normal(parts * rows * in_row) * 4.0).astype(np.float16)
    b = rng.standard_normal(out_row).astype(np.float16)
    scale = 0.125 if scaled else None
    k = K.KSum(parts, units, X + col * 2, OUT, B if bias else 0, out_row if bias else 0, out, scale,
               in_row=in_row, out_row=out_row)  # fmt: skip
    x = full[col:]  # what the call reads from in0 on
    sim = Simulator(TARGET)
    mem = {X: full, B: b} if bias else {X: full}
    cyc, _ = run_call(sim, _lib(k.kind), FRAME, k.frame, k.entry, mem)
    ref = np.ascontiguousarray(K.semantics(k, np.concatenate([x, np.zeros(col, np.float16)]), b))
    got = sim.read(OUT, ref.nbytes, ref.dtype, tiles=[0]).reshape(ref.shape)
    np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))
    assert K.cycles(k) == cyc
    cols = full.reshape(parts, rows, in_row)[:, :, col : col + out_row].reshape(-1)
    plain = K.KSum(parts, units, X, OUT, B if bias else 0, out_row if bias else 0, out, scale)
    np.testing.assert_array_equal(ref.view(np.uint8), K.semantics(plain, cols, b).view(np.uint8))
    assert k.partial_bytes <= (parts * rows * in_row - col) * 2


def test_strided_frame_rejects():
    with pytest.raises(ValueError, match="strided partial rows"):
        K.KSum(2, 6, X, OUT, B, 24, in_row=20, out_row=24).frame({})
    with pytest.raises(ValueError, match="strided partial rows"):
        K.KSum(2, 6, X, OUT, B, 8, in_row=48, out_row=24).frame({})


@pytest.mark.parametrize("kind", STRIDED_KINDS, ids=lambda k: K.worker_name(*k))
@pytest.mark.parametrize(
    "panels,rows,out_row,in_row", [(2, 13, 24, 48), (2, 1, 24, 48), (3, 5, 8, 28), (2, 7, 8, 20)]
)
def test_ksum_strided_panels(kind, panels, rows, out_row, in_row):
    """One call over `panels` result blocks, block p of the partial rows' columns p * out_row .. (both 24-wide
    head blocks of a 48-wide q / k / v panel's partials): each panel's units over 6 / panels workers, its own
    bias columns. Bit-exact, the estimate exact, and the blocks the same bits as one strided call per block."""
    parts, bias, out, scaled, _ = kind
    rng = np.random.default_rng(parts * 1000 + panels * 100 + rows)
    units = panels * rows * out_row // 4
    full = (rng.standard_normal(parts * rows * in_row) * 4.0).astype(np.float16)
    b = rng.standard_normal(panels * out_row).astype(np.float16)
    scale = 0.125 if scaled else None
    k = K.KSum(parts, units, X, OUT, B if bias else 0, out_row if bias else 0, out, scale, in_row=in_row,
               out_row=out_row, panels=panels)  # fmt: skip
    sim = Simulator(TARGET)
    cyc, _ = run_call(sim, _lib(k.kind), FRAME, k.frame, k.entry, {X: full, B: b} if bias else {X: full})
    ref = np.ascontiguousarray(K.semantics(k, full, b))
    got = sim.read(OUT, ref.nbytes, ref.dtype, tiles=[0]).reshape(ref.shape)
    np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))
    assert K.cycles(k) == cyc
    per = rows * out_row
    for p in range(panels):
        one = K.KSum(parts, units // panels, X + p * out_row * 2, OUT, B if bias else 0, out_row if bias else 0,
                     out, scale, in_row=in_row, out_row=out_row)  # fmt: skip
        tail = np.concatenate([full[p * out_row :], np.zeros(p * out_row, np.float16)])
        want = K.semantics(one, tail, b[p * out_row : (p + 1) * out_row])
        np.testing.assert_array_equal(ref[p * per : (p + 1) * per].view(np.uint8), want.view(np.uint8))
    assert k.partial_bytes <= parts * rows * in_row * 2


def test_ksum_panels_checked():
    with pytest.raises(ValueError, match="result panels"):
        K.KSum(2, 24, X, OUT, B, 24, in_row=96, out_row=24, panels=4).frame({})
    with pytest.raises(ValueError, match="strided partial rows"):
        K.KSum(2, 12, X, OUT, B, 24, in_row=40, out_row=24, panels=2).frame({})


@pytest.mark.parametrize("kind", K.ADDEND_KINDS, ids=lambda k: K.worker_name(*k))
@pytest.mark.parametrize("rows,row", [(1, 4), (7, 24), (29, 48)])
def test_ksum_addend_kinds(kind, rows, row):
    """The addend bodies (a residual add or an MLP part's sum folded into the f32 store): bit-exact, the estimate
    exact, and the same bits as the plain f32 sum followed by one `add_f32` call per addend (the unfused
    lowering's `nn.add`s: addend first, as `nn.add(%part0, %sum)` adds)."""
    parts, bias, out, _sc, _st, _g, na = kind
    rng = np.random.default_rng(parts * 1000 + rows * 10 + na)
    units = rows * row // 4
    x, b = _inputs(parts, units, row, rng)
    adds = [(rng.standard_normal(units * 4) * 8).astype(np.float32) for _ in range(na)]
    k = K.KSum(parts, units, X, OUT, B if bias else 0, row if bias else 0, out, addends=ADD[:na])
    plain = K.KSum(parts, units, X, OUT, B if bias else 0, row if bias else 0, out)
    cyc = _run(k, x, bias=b, addends=adds)
    want = K.semantics(plain, x, b)
    for a in adds:
        want = E.semantics(E.Elementwise("add_f32", units * 2), a, want)
    got = K.semantics(k, x, b, tuple(adds))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert cyc > K.cycles(plain) - K.SUP  # the addends' loads are not free


def test_ksum_addends_checked():
    """Addends are for unscaled f32 results without a GELU, at most MAX_ADDENDS of them."""
    with pytest.raises(ValueError, match="addends"):
        K.KSum(2, 4, X, OUT, out_type="f16", addends=ADD[:1]).frame({})
    with pytest.raises(ValueError, match="addends"):
        K.KSum(2, 4, X, OUT, out_type="f32", addends=(*ADD, 0xA0000)).frame({})
    with pytest.raises(ValueError, match="addends"):
        K.schedule(2, False, "f16", False, False, 1)


@pytest.mark.parametrize("kind", K.FP8_KINDS, ids=lambda k: K.worker_name(*k))
@pytest.mark.parametrize("rows,row,fmt,scale", [(1, 8, 0, 0), (7, 24, 0, -2), (13, 40, 1, 3)])
def test_ksum_fp8_kinds(kind, rows, row, fmt, scale):
    """The FP8 bodies (two units per repetition, one `f16v8tof8` over both): bit-exact, the estimate exact, and
    the bits of the f16 sum (and GELU) followed by `cast_f16_fp8` at the same format and scale."""
    from ipu.runtime import fp8

    parts, bias, _out, _sc, _st, gelu = kind
    rng = np.random.default_rng(parts * 100 + rows + 7 * gelu)
    units = rows * row // 4
    x, b = _inputs(parts, units, row, rng, scale=2.0 if gelu else 4.0)
    k = K.KSum(parts, units, X, OUT, B if bias else 0, row if bias else 0, "fp8", gelu=gelu, fp8_fmt=fmt,
               fp8_scale=scale)  # fmt: skip
    _run(k, x, b)
    plain = K.semantics(
        K.KSum(parts, units, X, OUT, B if bias else 0, row if bias else 0, "f16", gelu=gelu), x, b
    )
    cast = E.semantics(E.Elementwise("cast_f16_fp8", units // 2, fmt=fmt, scale=scale), plain)
    np.testing.assert_array_equal(K.semantics(k, x, b), cast)
    assert fp8.F143 == 0 and fp8.F152 == 1  # the formats the parametrization names by number


def test_ksum_fp8_checked():
    """FP8 results take whole pairs of units: an odd unit count, bias rows of an odd number of units, strided
    partials or addends are refused by name."""
    with pytest.raises(ValueError, match="pairs of units"):
        K.KSum(2, 5, X, OUT, out_type="fp8").frame({})
    with pytest.raises(ValueError, match="pairs of units"):
        K.KSum(2, 6, X, OUT, B, 12, out_type="fp8").frame({})
    with pytest.raises(ValueError, match="pairs of units"):
        K.KSum(2, 12, X, OUT, B, 24, out_type="fp8", in_row=48, out_row=24).frame({})
