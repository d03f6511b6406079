"""The attention's sum-free softmax (`softmax_m`: e and m only, the row sum formed by the O^T GEMM from a ones row
of V^T), the ones row (`fill_f16`) and O's division by that sum (`to_f32_scaled_l`: l read as the f16 after each
O row's columns) on the simulator: bit-exact against their numpy semantics, the same e and m as `softmax_e`, the
estimates exact (even and odd atom counts, one atom, idle workers)."""

from __future__ import annotations

import numpy as np
import pytest
from test_kernel_softmax_e import CASES, _scores  # noqa: E402  (pytest puts tests/unit on sys.path)

from ipu.backend.kernels import gemm as gm
from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.harness import run_call
from ipu.backend.target import Target
from ipu.runtime.semantics import recip_f32
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = R.library_asm(TARGET.sram_base)
X, OUT, ML, FRAME = 0x60000, 0x70000, 0x7C000, 0x5C000


def _run(k: R.Rows, mem: dict) -> tuple[Simulator, int]:
    sim = Simulator(TARGET)
    cyc, _ = run_call(sim, LIB, FRAME, k.frame, k.entry, mem)
    assert R.cycles(k) == cyc, (R.cycles(k), cyc)
    return sim, cyc


@pytest.mark.parametrize("rows,n,valid", CASES + [(6, 24, 21), (2, 20, 17)])
def test_softmax_m(rows, n, valid):
    """e and m bit-identical to `softmax_e`'s; the words beside each m (where `softmax_e` puts l) untouched."""
    x = _scores(rows, n, valid, rows * 7 + n + valid)
    k = R.Rows("softmax_m", rows, n, in0=X, out=OUT, st0=ML, valid=valid)
    mem = {X: x, OUT: np.full(rows * n, np.nan, np.float16), ML: np.full(2 * rows, np.nan, np.float32)}
    sim, cyc = _run(k, mem)
    got = sim.read(OUT, rows * n * 2, np.float16, tiles=[0]).reshape(rows, n)
    ml = sim.read(ML, rows * 8, np.float32, tiles=[0]).reshape(rows, 2)
    want = R.semantics(k, x)
    ref = R.semantics(R.Rows("softmax_e", rows, n, valid=valid), x)
    np.testing.assert_array_equal(got.view(np.uint16), want["out"].view(np.uint16))
    np.testing.assert_array_equal(want["out"].view(np.uint16), ref["out"].view(np.uint16))
    np.testing.assert_array_equal(ml[:, 0], ref["ml"][:, 0])
    assert np.isnan(ml[:, 1]).all()
    if -(-valid // 4) >= 8:  # the sum's passes gone: well below softmax_e
        assert cyc < 0.8 * R.cycles(R.Rows("softmax_e", rows, n, valid=valid, st0=0))


@pytest.mark.parametrize("rows,n,value", [(3, 16, 1.0), (46, 16, 1.0), (1, 4, -2.5), (7, 40, 0.5)])
def test_fill_f16(rows, n, value):
    """Every row's n halves set to the value; the bytes after the rows untouched."""
    k = R.Rows("fill_f16", rows, n, out=OUT, scale=value)
    sim, _ = _run(k, {OUT: np.full(rows * n + 4, np.nan, np.float16)})
    got = sim.read(OUT, (rows * n + 4) * 2, np.float16, tiles=[0]).reshape(-1)
    np.testing.assert_array_equal(got[: rows * n], R.semantics(k, None)["out"].reshape(-1))
    assert (got[: rows * n] == np.float16(value)).all() and np.isnan(got[rows * n :]).all()


@pytest.mark.parametrize(
    "rows,n,pad", [(16, 72, 8), (1, 8, 8), (7, 40, 8), (3, 4, 12), (2, 12, 4), (32, 36, 12)]
)
def test_to_f32_scaled_l(rows, n, pad):
    """O rows of n + pad halves with l at column n (O^T's ones row, transposed): y = f32(x) * (1 / f32(l)) and
    l stored as f32 at byte st0 of each output row ([o | m | l] rows); m untouched."""
    rng = np.random.default_rng(rows * n + pad)
    x = (rng.standard_normal((rows, n + pad)) * 30).astype(np.float16)
    x[:, n] = rng.uniform(1, 700, rows).astype(np.float16)
    x[:, n + 1 :] = rng.standard_normal((rows, pad - 1))  # anything: not read but the half after l
    out = np.full((rows, n + 2), np.nan, np.float32)
    out[:, n] = rng.standard_normal(rows)
    k = R.Rows(
        "to_f32_scaled_l",
        rows,
        n,
        in0=X,
        out=OUT,
        in_stride=(n + pad) * 2,
        out_stride=(n + 2) * 4,
        st0=n * 4 + 4,
    )
    sim, _ = _run(k, {X: x, OUT: out})
    got = sim.read(OUT, out.size * 4, np.float32, tiles=[0]).reshape(rows, n + 2)
    want = R.semantics(k, x)
    lsum = x[:, n].astype(np.float32)
    np.testing.assert_array_equal(want["l"], lsum)
    np.testing.assert_array_equal(got[:, :n].view(np.uint32), want["out"].view(np.uint32))
    np.testing.assert_array_equal(got[:, n + 1], lsum)
    np.testing.assert_array_equal(got[:, n], out[:, n])
    want2 = x[:, :n].astype(np.float32) * recip_f32(lsum)[:, None]
    np.testing.assert_array_equal(got[:, :n], want2)
    np.testing.assert_allclose(got[:, :n], x[:, :n].astype(np.float64) / lsum[:, None], rtol=1e-6)


def test_to_f32_scaled_l_needs_room_for_l():
    with pytest.raises(ValueError, match="to_f32_scaled_l: l is read"):
        R.Rows("to_f32_scaled_l", 2, 16, in_stride=32)


@pytest.mark.parametrize(
    "m,seq,d,softmax,rows",
    [
        (32, 183, 72, None, 73),
        (32, 183, 72, "softmax_e", 72),
        (32, 183, 64, None, 64),
        (16, 16, 72, None, 80),
    ],
)
def test_ot_gemm_rows(m, seq, d, softmax, rows):
    """O^T = V^T P^T computes V^T's used rows only: d, plus the ones row of `softmax_m` (So400m: 73 of 80), with
    no V^T zero rows call; where S^T's rows do not cover dpad rows of C (16 keys, d = 72) all dpad rows, the zero
    rows written, as before (O^T's rows past the used ones become O's unread columns: they must hold what this
    program wrote)."""
    from ipu.backend.lower import nnops
    from ipu.backend.target import IPU21

    sz = nnops.attention_sizes(m, seq, d, IPU21.region1_element_bytes)
    kw = dict(qa=0, ka=0x1000, va=0x2000, m=m, out=0x3000, scale=0.125, c_area=0x80000, a_area=0x88000,
              panels=0x90000, esizes=(2, 2, 2, 4), stats=True, o_stride=(d + 2) * 4, pv_transposed=True,
              panels_of=(24, 24, 24) if d == 72 else (None, None, None))  # fmt: skip
    prog = nnops.attention_program(sz, softmax=softmax, **kw)
    from ipu.backend.kernels import gemm as gm

    gemms = [call for label, call in prog if "O^T" in label and isinstance(call, gm.Gemm)]
    assert gemms and all(g.m == rows for g in gemms)
    ones = any(call.op in ("softmax_m", "softmax_mt") for label, call in prog if label == "softmax")
    assert ones == (softmax is None and d % 16 != 0)
    zero_rows = any("V^T zero rows" in label for label, _ in prog)
    assert zero_rows == (rows > d + ones)  # only where all dpad rows are computed


@pytest.mark.parametrize(
    "rows,n,valid",
    CASES
    + [
        (17, 32, 17),
        (23, 192, 183),
        (16, 48, 33),
        (31, 64, 50),
        (1, 16, 16),
        (12, 32, 20),
        (40, 48, 45),
        (200, 32, 13),
        (7, 64, 20),
        (3, 48, 5),
    ],
)
def test_softmax_mt(rows, n, valid):
    """softmax_m's e and m, its rows written as the O^T GEMM's weight panels P^T (`pt_offsets`: what
    `gemm.pack_weights` makes of P^T) with zeros for the padded keys; every other byte of the panels (engines past
    the rows) untouched; the estimate exact (rows across 16-row column blocks, a worker's rows across two of them,
    zero key blocks after the masked atom's,
    every position of the masked atom in its key block, no whole blocks before it)."""
    x = _scores(rows, n, valid, rows * 5 + n + valid)
    k = R.Rows("softmax_mt", rows, n, in0=X, out=OUT, st0=ML, valid=valid)
    nb = -(-rows // 16)
    size = nb * 16 * n * 2
    mem = {X: x, OUT: np.full(size // 2, np.nan, np.float16), ML: np.full(2 * rows, np.nan, np.float32)}
    sim, _ = _run(k, mem)
    got = sim.read(OUT, size, np.float16, tiles=[0]).reshape(-1)
    want = R.semantics(k, x)
    ref = R.semantics(R.Rows("softmax_m", rows, n, valid=valid), x)
    np.testing.assert_array_equal(want["out"].view(np.uint16), ref["out"].view(np.uint16))
    pt = np.zeros((nb * 16, n), np.float16)
    pt[:rows] = want["out"]
    panels = gm.pack_weights(pt.T.copy(), gm.F16).view(np.float16)
    written = np.zeros(size // 2, bool)
    offs = R.pt_offsets(rows, n)
    for lane in range(4):
        written[(offs // 2 + lane).reshape(-1)] = True
    assert written.sum() == rows * n
    np.testing.assert_array_equal(got[written].view(np.uint16), panels[written].view(np.uint16))
    assert np.isnan(got[~written]).all()
    ml = sim.read(ML, rows * 8, np.float32, tiles=[0]).reshape(rows, 2)
    np.testing.assert_array_equal(ml[:, 0], ref["m"])
    assert np.isnan(ml[:, 1]).all()


def test_softmax_mt_needs_whole_key_blocks():
    with pytest.raises(ValueError, match="softmax_mt writes whole 16-key weight blocks"):
        R.Rows("softmax_mt", 4, 40, valid=33)


@pytest.mark.parametrize("m,seq", [(25, 183), (18, 27), (2, 40), (16, 100), (32, 183), (7, 16)])
def test_pt_zero_columns_cover_what_softmax_mt_leaves(m, seq):
    """P^T's panels [qn / 16][spad / 16][16 engines][16 keys]: `softmax_mt` writes the block's m rows' slots,
    "P^T zero query columns" every other slot (the engines past m in the last column block), each byte once."""
    from ipu.backend.lower import nnops
    from ipu.backend.target import IPU21

    sz = nnops.attention_sizes(m, seq, 72, IPU21.region1_element_bytes, v_direct=True)
    pt = 0x1000
    fill = nnops.pt_zero_columns(sz, m, pt)
    size = sz.qn * sz.spad * 2
    hits = np.zeros(size // 8, np.int64)  # per atom
    np.add.at(hits, (R.pt_offsets(m, sz.spad) // 8).reshape(-1), 1)
    for r in range(fill.rows):
        start = (fill.out - pt) // 8 + r * fill.ostride // 8
        hits[start : start + fill.n // 4] += 1
    assert fill.op == "pad_f16" and fill.nvalid == 0
    assert (hits == 1).all()
    assert (fill.rows == 0) == (m == sz.qn)


@pytest.mark.parametrize(
    "rows,n,qn",
    [
        (32, 72, 32),
        (25, 72, 32),
        (31, 40, 32),
        (1, 72, 16),
        (3, 24, 16),
        (16, 72, 16),
        (7, 4, 16),
        (18, 8, 32),
    ],
)
def test_to_f32_scaled_t(rows, n, qn):
    """O^T [n + 1, qn] (the O^T GEMM's C: row n the ones row's sums l) -> `to_f32_scaled_l`'s rows bit for bit:
    y[q] = f32(O^T[:n, q]) * (1 / f32(l_q)), l_q stored as f32 at byte st0 of row q; the word before it (m)
    untouched, nothing past the rows written. The columns past the rows hold what the attention leaves there
    (zeros, l = 0: their products are NaN, stored only where a valid row's store overwrites them)."""
    rng = np.random.default_rng(rows * n + qn)
    ot = (rng.standard_normal((n + 1, qn)) * 30).astype(np.float16)
    ot[n] = rng.uniform(1, 700, qn).astype(np.float16)
    ot[:, rows:] = 0
    stride = (n + 2) * 4
    out = np.full((rows + 1, n + 2), np.nan, np.float32)
    out[:, n] = rng.standard_normal(rows + 1)  # m
    k = R.Rows("to_f32_scaled_t", rows, n, in0=X, out=OUT, in_stride=qn * 2, out_stride=stride, st0=n * 4 + 4)
    sim, _ = _run(k, {X: ot, OUT: out})
    got = sim.read(OUT, out.size * 4, np.float32, tiles=[0]).reshape(rows + 1, n + 2)
    rows_l = np.ascontiguousarray(
        np.concatenate([ot[:n].T, ot[n][:, None], np.zeros((qn, 3), np.float16)], 1)
    )
    want = R.semantics(R.Rows("to_f32_scaled_l", rows, n, in_stride=(n + 4) * 2), rows_l[:rows])
    np.testing.assert_array_equal(R.semantics(k, ot)["out"].view(np.uint32), want["out"].view(np.uint32))
    np.testing.assert_array_equal(got[:rows, :n].view(np.uint32), want["out"].view(np.uint32))
    np.testing.assert_array_equal(got[:rows, n + 1], want["l"])
    np.testing.assert_array_equal(got[:, n], out[:, n])
    assert np.isnan(got[rows]).sum() == n + 1  # the row after the block: only its m set


def test_to_f32_scaled_t_checks_the_input_stride():
    with pytest.raises(ValueError, match="to_f32_scaled_t: the input rows"):
        R.Rows("to_f32_scaled_t", 20, 72, in_stride=32, out_stride=296, st0=292)
