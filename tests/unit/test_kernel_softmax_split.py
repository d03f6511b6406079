"""`softmax_split` (every row split across the six workers) on the simulator: bit-exact against its numpy
semantics (output and partials), close to a float64 softmax and to the whole-row kernel, valid lengths (a masked
last atom, padded inputs without influence, zeros after the valid columns), in place and strided, estimate exact,
well below the whole-row kernel for one row; and the attention lowering's choice between the two."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.harness import run_call
from ipu.backend.lower import nnops
from ipu.backend.target import IPU21, Target
from ipu.runtime.semantics import exp_f32, recip_f32
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = R.library_asm(TARGET.sram_base)
X, OUT, PARTS, FRAME = 0x60000, 0x70000, 0x7C000, 0x5C000


def _scores(rows, n, valid, seed):
    """Scores with garbage in the padding: the last valid atom's other lanes anything but NaN (min-masked to -inf),
    the atoms after it NaN (never read)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, n)) * 4).astype(np.float16)
    va = 4 * -(-valid // 4)
    x[:, valid:va] = np.array([np.inf, 60000.0, -np.inf], np.float16)[: va - valid]
    x[:, va:] = np.nan
    return x


def _run(k: R.Rows, mem: dict, out_words: int):
    """Runs k with the output area pre-filled with NaN; (output f16 [out_words], partials [rows, 12] u32 (one per
    64-bit word), cycles). The estimate must equal the simulator's count."""
    sim = Simulator(TARGET)
    mem = {OUT: np.full(out_words, np.nan, np.float16), **mem}
    cyc, _ = run_call(sim, LIB, FRAME, k.frame, k.entry, mem)
    assert R.cycles(k) == cyc, (R.cycles(k), cyc)
    out = sim.read(OUT, out_words * 2, np.float16, tiles=[0]).reshape(-1)
    parts = sim.read(PARTS, k.rows * R.SMS_PART, np.uint32, tiles=[0]).reshape(k.rows, -1)[:, ::2]
    return out, parts, cyc


def _softmax64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


# (rows, n, valid): So400m's 729 of 736 (1 and 8 query rows per tile), the fewest valid elements (21: one atom per
# worker, 1 valid lane in the last), valid % 4 == 2 and 3, no padding, unequal slices (va = 20: 4, 4, 3, 3, 3, 3).
CASES = [(1, 736, 729), (8, 736, 729), (3, 32, 21), (4, 96, 82), (2, 48, 47), (2, 64, 64), (5, 80, 80)]


@pytest.mark.parametrize("rows,n,valid", CASES)
def test_softmax_split(rows, n, valid):
    x = _scores(rows, n, valid, rows * 1000 + n + valid)
    k = R.Rows("softmax_split", rows, n, in0=X, out=OUT, st0=PARTS, valid=valid)
    got, parts, _ = _run(k, {X: x}, rows * n)
    got = got.reshape(rows, n)
    want = R.semantics(k, x)
    np.testing.assert_array_equal(got.view(np.uint16), want["out"].view(np.uint16))
    np.testing.assert_array_equal(parts, want["partials"].view(np.uint32))
    assert (got[:, valid:].view(np.uint16) == 0).all()  # padded columns (masked lanes, zero atoms): +0
    np.testing.assert_allclose(
        got[:, :valid].astype(np.float64), _softmax64(x[:, :valid]), atol=2e-3, rtol=3e-3
    )
    # The partials: each slice's max (their max is the row max) and sum of e (their sum is the row sum of the
    # stored f16 e, each within an f16 rounding of the float64 exponential, up to the f16 roundings of the pair
    # sums: pass 2 adds two atoms' e in f16 before the f32 sums, ~2^-12 relative each).
    p = want["partials"]
    np.testing.assert_array_equal(p[:, :6].max(1), x[:, :valid].astype(np.float32).max(1))
    e = np.exp(x[:, :valid].astype(np.float64) - x[:, :valid].max(1, keepdims=True))
    np.testing.assert_allclose(p[:, 6:].sum(1), e.sum(1), rtol=1e-3)
    e16 = np.exp((x[:, :valid] - x[:, :valid].max(1, keepdims=True)).astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(p[:, 6:].sum(1), e16.astype(np.float64).sum(1), rtol=5e-4)


def test_softmax_split_models_the_sum_order():
    """The six partial sums are combined in worker order: on these scores, combining them in reverse order gives
    another 1/sum that changes an output's rounding, and the kernel matches the worker order."""
    rows, n, valid = 8, 736, 729
    x = _scores(rows, n, valid, 2)
    k = R.Rows("softmax_split", rows, n, in0=X, out=OUT, st0=PARTS, valid=valid)
    got, parts, _ = _run(k, {X: x}, rows * n)
    got = got.reshape(rows, n)
    np.testing.assert_array_equal(got.view(np.uint16), R.semantics(k, x)["out"].view(np.uint16))
    sums = parts[:, 6:].view(np.float32)
    rev = sums[:, 5]
    for w in range(4, -1, -1):
        rev = rev + sums[:, w]
    xs = x[:, :n].astype(np.float32)
    xs[:, valid:] = -np.inf
    e16 = exp_f32(xs - xs.max(1, keepdims=True)).astype(np.float16)
    other = (e16.astype(np.float32) * recip_f32(rev)[:, None]).astype(np.float16)
    assert (other.view(np.uint16) != got.view(np.uint16)).sum() >= 1


def test_softmax_split_padding_has_no_influence():
    """Other garbage in the padded columns (the masked lanes, the atoms after them): the same bits."""
    rows, n, valid = 2, 736, 729
    x = _scores(rows, n, valid, 11)
    k = R.Rows("softmax_split", rows, n, in0=X, out=OUT, st0=PARTS, valid=valid)
    want = R.semantics(k, x)["out"]
    x2 = x.copy()
    x2[:, valid:] = np.float16(-1.0)
    np.testing.assert_array_equal(R.semantics(k, x2)["out"].view(np.uint16), want.view(np.uint16))
    got, _, _ = _run(k, {X: x2}, rows * n)
    np.testing.assert_array_equal(got.reshape(rows, n).view(np.uint16), want.view(np.uint16))


def test_softmax_split_strided_in_place():
    """Rows inside wider buffers (the attention's S / P scratch), in place: only the rows' elements change."""
    rows, n, valid, stride = 3, 96, 90, 224
    rng = np.random.default_rng(9)
    buf = (rng.standard_normal((rows, stride // 2)) * 3).astype(np.float16)
    k = R.Rows(
        "softmax_split",
        rows,
        n,
        in0=OUT,
        out=OUT,
        st0=PARTS,
        valid=valid,
        in_stride=stride,
        out_stride=stride,
    )
    got, _, _ = _run(k, {OUT: buf}, buf.size)
    got = got.reshape(rows, stride // 2)
    want = R.semantics(R.Rows("softmax_split", rows, n, st0=PARTS, valid=valid), buf[:, :n].copy())["out"]
    np.testing.assert_array_equal(got[:, :n].view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(got[:, n:].view(np.uint16), buf[:, n:].view(np.uint16))  # untouched


def test_softmax_split_matches_whole_row_kernel_closely():
    """`softmax` works in f32 (e = exp(f32(x) - m), y = f16(e / sum)), `softmax_split` in f16 (x - m rounded to
    f16, f16 exp, y = e * f16(1 / sum)): where x - m is exact (within 2 of the max) the results are within two
    f16 ulps; further out the f16 difference's rounding grows with |x - m| (~2^-11 |x - m| relative), on values
    below e^-2 of the row's largest."""
    rows, n, valid = 8, 736, 729
    x = _scores(rows, n, valid, 7)
    kw = dict(in0=X, out=OUT, valid=valid)
    split = R.semantics(R.Rows("softmax_split", rows, n, st0=PARTS, **kw), x)["out"]
    whole = R.semantics(R.Rows("softmax", rows, n, **kw), x)["out"]
    ulps = np.abs(split.view(np.int16).astype(np.int32) - whole.view(np.int16).astype(np.int32))
    near = (x.astype(np.float32) >= x[:, :valid].max(1, keepdims=True).astype(np.float32) - 2)[:, :n]
    near[:, valid:] = False
    assert near.sum() > rows and ulps[near].max() <= 2
    d = np.abs(x[:, :valid].astype(np.float32) - x[:, :valid].max(1, keepdims=True))
    w = whole[:, :valid].astype(np.float64)
    err = np.abs(split[:, :valid].astype(np.float64) - w)
    assert (err <= w * (d * 2.0**-10 + 2.0**-9) + 2.0**-23).all()  # + two subnormal ulps


@pytest.mark.parametrize("rows", [1, 8])
def test_softmax_split_cycles_below_whole_row_kernel(rows):
    """So400m's attention softmax over 729 keys (padded 736): one row (the MAP head) runs on one worker in the
    whole-row kernel, on six split; 8 rows (encoder blocks) run as 2 rows on the slowest worker vs 8 split.
    Estimates (= simulated): 1 x 736 26,667 -> 4,095 cycles; 8 x 736 53,211 -> 30,471."""
    n, valid = 736, 729
    x = _scores(rows, n, valid, 3)
    whole = R.Rows("softmax", rows, n, in0=X, out=OUT, valid=valid)
    split = R.Rows("softmax_split", rows, n, in0=X, out=OUT, st0=PARTS, valid=valid)
    sim = Simulator(TARGET)
    c_whole, _ = run_call(sim, LIB, FRAME, whole.frame, whole.entry, {X: x})
    assert R.cycles(whole) == c_whole
    _, _, c_split = _run(split, {X: x}, rows * n)
    assert c_split * (6 if rows == 1 else 1.5) < c_whole, (c_split, c_whole)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(rows=1, n=32, valid=20), ">= 21 valid"),
        (dict(rows=1, n=20), ">= 21 valid"),
        (dict(rows=0, n=64), "rows >= 1"),
        (dict(rows=1, n=64, st0=PARTS + 4), "8-byte aligned"),
        (dict(rows=1, n=64, valid=65), "valid length 65"),
    ],
)
def test_softmax_split_rejects(kwargs, match):
    kwargs = {"st0": PARTS, **kwargs}
    with pytest.raises(ValueError, match=match):
        R.Rows("softmax_split", **kwargs)


# --- the attention lowering's choice --------------------------------------------------------------------------------


def _softmax_call(m, seq, d):
    sz = nnops.attention_sizes(m, seq, d, IPU21.region1_element_bytes)
    prog = nnops.attention_program(sz, 0, 0, 0, m, 0, d**-0.5, 0x80000, 0x88000, 0x60000)
    (k,) = [k for label, k in prog if label == "softmax"]
    return sz, k


@pytest.mark.parametrize("m", [8, 1])
def test_attention_takes_the_split_softmax_at_so400m_size(m):
    """So400m: 8 query rows per tile (and the last block's 1) over 729 keys, the MAP head 1 row: split, partials in
    the aux panels (8-byte aligned), the block's rows."""
    sz, k = _softmax_call(m, 729, 72)
    assert (k.op, k.entry, k.rows, k.n, k.valid, k.st0) == (
        "softmax_split",
        "rows_sms_sup",
        m,
        736,
        729,
        0x60000,
    )
    assert R.cycles(k) < R.cycles(R.Rows("softmax", m, 736, valid=729))


@pytest.mark.parametrize("m,seq", [(1, 81), (11, 81), (4, 81), (3, 24), (16, 20), (9, 32)])
def test_attention_softmax_choice_is_the_cheaper_for_mpad_rows(m, seq):
    """The choice depends on the block's mpad rows only (the same on every tile of a call): the cheaper estimate
    for mpad rows; seq < 21 keeps the whole-row kernel."""
    sz, k = _softmax_call(m, seq, 24)
    kw = dict(valid=seq, st0=0x60000)
    rows = m if sz.transposed else sz.mpad
    assert (k.rows, k.valid) == (rows, seq)
    if seq < R.SMS_MIN_VALID:
        assert k.op == "softmax"
        return
    split = R.cycles(R.Rows("softmax_split", sz.mpad, sz.spad, **kw))
    whole = R.cycles(R.Rows("softmax", sz.mpad, sz.spad, valid=seq))
    assert k.op == ("softmax_split" if split < whole else "softmax"), (split, whole)
    # A smaller block on another tile of the same call takes the same kernel.
    if sz.transposed and m > 1:
        prog = nnops.attention_program(sz, 0, 0, 0, 1, 0, 0.2, 0x80000, 0x88000, 0x60000)
        assert [k2.op for label, k2 in prog if label == "softmax"] == [k.op]


def test_attention_softmax_choice_takes_both_kernels():
    """Not vacuous: some block sizes take the whole-row kernel (many rows), others the split one."""
    ops = {_softmax_call(m, seq, 24)[1].op for m, seq in [(1, 81), (16, 32), (12, 24)]}
    assert ops == {"softmax", "softmax_split"}, ops


@pytest.mark.parametrize(
    "rows,n,valid", [(16, 368, 365), (8, 736, 729), (3, 32, 21), (2, 48, 47), (5, 80, 80)]
)
def test_softmax_split_e(rows, n, valid):
    """`softmax_split_e` (the key-split attention's: the sum divides O, not P): passes max and exp as
    `softmax_split`'s, y = e unnormalized, then only the zero atoms after the valid ones (the last worker); bit-exact
    against its semantics (y = softmax_split's e), partials the same, estimate exact, cheaper by the scale pass."""
    x = _scores(rows, n, valid, rows + n + valid)
    k = R.Rows("softmax_split_e", rows, n, in0=X, out=OUT, st0=PARTS, valid=valid)
    got, parts, cyc = _run(k, {X: x}, rows * n)
    got = got.reshape(rows, n)
    want = R.semantics(k, x)
    np.testing.assert_array_equal(got.view(np.uint16), want["out"].view(np.uint16))
    np.testing.assert_array_equal(parts, want["partials"].view(np.uint32))
    assert (got[:, valid:].view(np.uint16) == 0).all()
    full = R.Rows("softmax_split", rows, n, in0=X, out=OUT, st0=PARTS, valid=valid)
    ref = R.semantics(full, x)
    np.testing.assert_array_equal(want["partials"], ref["partials"])
    total = want["partials"][:, 6:].sum(1, dtype=np.float64)
    np.testing.assert_allclose(
        got[:, :valid] / total[:, None], _softmax64(x[:, :valid]), atol=2e-3, rtol=3e-3
    )
    assert cyc < R.cycles(full)
    if (rows, n) == (16, 368):  # So400m's key-split attention block: 18,099 -> 13,443
        assert R.cycles(full) - cyc > 4000, (R.cycles(full), cyc)


@pytest.mark.parametrize("rows,n", [(16, 72), (1, 8), (7, 40), (3, 4), (2, 12), (32, 72)])
def test_to_f32_scaled(rows, n):
    """`to_f32_scaled`: y = f32(x) * (1 / l) with l the f32 at byte st0 of each output row ([o | m | l] rows of
    n + 2 f32); m and l untouched; bit-exact, estimate exact."""
    rng = np.random.default_rng(rows * n)
    x = (rng.standard_normal((rows, n)) * 30).astype(np.float16)
    ml = np.stack([rng.standard_normal(rows), rng.uniform(1, 300, rows)], 1).astype(np.float32)
    out = np.full((rows, n + 2), np.nan, np.float32)
    out[:, n:] = ml
    k = R.Rows("to_f32_scaled", rows, n, in0=X, out=OUT, out_stride=(n + 2) * 4, st0=n * 4 + 4)
    sim = Simulator(TARGET)
    cyc, _ = run_call(sim, LIB, FRAME, k.frame, k.entry, {X: x, OUT: out})
    assert R.cycles(k) == cyc, (R.cycles(k), cyc)
    got = sim.read(OUT, out.size * 4, np.float32, tiles=[0]).reshape(rows, n + 2)
    want = R.semantics(k, x, state={"l": ml[:, 1]})["out"]
    np.testing.assert_array_equal(got[:, :n].view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(got[:, n:], ml)
    np.testing.assert_allclose(got[:, :n], x.astype(np.float64) / ml[:, 1:], rtol=1e-6)
