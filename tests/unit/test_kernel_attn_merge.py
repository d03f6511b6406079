"""The key-split attention's kernels on the simulator, bit-exact against their numpy semantics and estimates:
`sms_stats` ((m, l) per row from `softmax_split`'s partials) and `attn_merge2/3/4` (the chunks' weighted sum); and
the merge of chunk softmaxes equals one softmax over all keys (float64)."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.harness import run_call
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = R.library_asm(TARGET.sram_base)
X, OUT, PARTS, FRAME = 0x60000, 0x70000, 0x7C000, 0x5C000


def _run(k: R.Rows, mem: dict, out_bytes: int) -> np.ndarray:
    sim = Simulator(TARGET)
    mem = {OUT: np.full(out_bytes // 4, np.nan, np.float32), **mem}
    cyc, _ = run_call(sim, LIB, FRAME, k.frame, k.entry, mem)
    assert R.cycles(k) == cyc, (R.cycles(k), cyc)
    return sim.read(OUT, out_bytes, np.float32, tiles=[0]).reshape(-1)


@pytest.mark.parametrize("rows,n,valid", [(8, 368, 365), (16, 368, 364), (1, 32, 21)])
def test_sms_stats_after_softmax_split(rows, n, valid):
    rng = np.random.default_rng(rows + n)
    x = (rng.standard_normal((rows, n)) * 4).astype(np.float16)
    x[:, valid:] = 0
    sms = R.Rows("softmax_split", rows, n, in0=X, out=X, st0=PARTS, valid=valid)
    parts = R.semantics(sms, x)["partials"]  # [rows, 12]: the words at 8-byte steps
    words = np.zeros((rows, R.SMS_PART // 4), np.float32)
    words[:, ::2] = parts
    words[:, 1::2] = np.nan  # never read (the kernel reads the even words only)
    stride = 8 * 37  # (m, l) at the end of 74-word rows, like the partial attention's result rows
    k = R.Rows("sms_stats", rows, 4, in0=PARTS, out=OUT + 8 * 36, in_stride=R.SMS_PART, out_stride=stride)
    got = _run(k, {PARTS: words}, rows * stride).reshape(rows, -1)[:, 72:74]
    want = R.semantics(k, words)["out"]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    xv = x[:, :valid].astype(np.float64)
    np.testing.assert_array_equal(got[:, 0], xv.max(1))
    np.testing.assert_allclose(
        got[:, 1], np.exp(xv - xv.max(1, keepdims=True)).sum(1), rtol=1e-3
    )  # the sum of the stored f16 e


def _chunks(nc, rows, n, seed):
    """Partials of nc key chunks of one softmax attention (float64 truth alongside)."""
    rng = np.random.default_rng(seed)
    keys = 40
    s = rng.standard_normal((nc, rows, keys)) * 3 + rng.standard_normal((nc, 1, 1)) * 4
    v = rng.standard_normal((nc, keys, n))
    m = s.max(-1)
    e = np.exp(s - m[..., None])
    lsum = e.sum(-1)
    o = (e / lsum[..., None]) @ v
    parts = np.concatenate([o, m[..., None], lsum[..., None]], -1).astype(np.float32)
    p_all = np.exp(s - s.max((0, 2), keepdims=True).max(0))
    full = np.einsum("jrk,jkn->rn", p_all, v) / p_all.sum((0, 2))[:, None]
    return parts, full


@pytest.mark.parametrize(
    "nc,rows,n", [(2, 8, 72), (2, 1, 72), (3, 7, 24), (2, 13, 4), (4, 8, 72), (4, 3, 12)]
)
def test_attn_merge(nc, rows, n):
    parts, full = _chunks(nc, rows, n, nc * 100 + rows + n)
    k = R.Rows(f"attn_merge{nc}", rows, n, in0=X, out=OUT, in_stride=4 * (n + 2), st0=4 * (n + 2) * rows)
    got = _run(k, {X: parts}, rows * n * 4).reshape(rows, n)
    want = R.semantics(k, parts)["out"]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(got, full, rtol=1e-4, atol=1e-5)


def test_attn_merge_rows_strided():
    """Rows of the output with a stride, chunk rows with a wider step (a block's rows inside a larger buffer)."""
    nc, rows, n = 2, 5, 8
    parts, full = _chunks(nc, rows, n, 7)
    step = 4 * (n + 2) * 8  # chunk j's rows 8 rows apart
    buf = np.full((nc, 8, n + 2), np.nan, np.float32)
    buf[:, :rows] = parts
    k = R.Rows("attn_merge2", rows, n, in0=X, out=OUT, in_stride=4 * (n + 2), out_stride=4 * 16, st0=step)
    got = _run(k, {X: buf}, rows * 16 * 4).reshape(rows, 16)
    np.testing.assert_array_equal(got[:, :n].view(np.uint32), R.semantics(k, parts)["out"].view(np.uint32))
    assert np.isnan(got[:, n:]).all()  # nothing written past each row
    np.testing.assert_allclose(got[:, :n], full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rows", [8, 9, 20, 2, 1])
def test_attn_merge_row_parts(rows):
    """Rows that do not share out over the six workers (So400m's 8-row merge blocks: two workers with two rows
    while four have one): each worker takes rows // 6 whole rows and a part of a leftover row, whose coefficients
    it computes again; bit-exact, the estimate exact, and fewer cycles than whole rows."""
    nc, n = 4, 72
    parts, full = _chunks(nc, rows, n, rows + 5)
    k = R.Rows(f"attn_merge{nc}", rows, n, in0=X, out=OUT, in_stride=4 * (n + 2), st0=4 * (n + 2) * rows)
    split = k.merge_split()
    assert all(part is not None for _, _, part in split)
    covered = sorted((p[0], p[1] + i) for _, _, p in split for i in range(p[2]))
    assert covered == [
        (r, i) for r in range(6 * (rows // 6), rows) for i in range(n // 2)
    ]  # the leftover rows
    whole = R.SUP + 6 * max(R.merge_thread_cycles(k, c, None) for _, c in R.split(rows))
    assert R.cycles(k) < whole
    got = _run(k, {X: parts}, rows * n * 4).reshape(rows, n)
    np.testing.assert_array_equal(got.view(np.uint32), R.semantics(k, parts)["out"].view(np.uint32))
    np.testing.assert_allclose(got, full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "nc,rb,hb,n", [(4, 4, 2, 72), (2, 3, 2, 24), (4, 2, 4, 24), (3, 1, 2, 12), (4, 8, 2, 72)]
)
def test_attn_merge_heads(nc, rb, hb, n):
    """One call over hb heads' operand blocks ([chunks, rb, n + 2] each, `head_step` bytes apart, as tile-plan's
    merge of a result block [rb, hb n] stores them): row i is head i % hb's row i // hb, written at i * n, so
    each output row holds the heads side by side. Bit-exact against the semantics of the interleaved rows (the
    same per-row operations as one head's call), the estimate exact."""
    blocks = [_chunks(nc, rb, n, 31 * nc + 7 * rb + h) for h in range(hb)]
    step = nc * rb * (n + 2) * 4 + 64  # a gap between the blocks: never read
    buf = np.full(hb * step // 4, np.nan, np.float32)
    for h, (parts, _) in enumerate(blocks):
        buf[h * step // 4 : h * step // 4 + parts.size] = parts.reshape(-1)
    k = R.Rows(
        f"attn_merge{nc}", rb * hb, n, in0=X, out=OUT, in_stride=4 * (n + 2), st0=4 * (n + 2) * rb,
        heads=hb, head_step=step,
    )  # fmt: skip
    got = _run(k, {X: buf}, rb * hb * n * 4).reshape(rb, hb * n)
    rows = np.stack([blocks[i % hb][0][:, i // hb] for i in range(rb * hb)], 1)  # [chunks, rows, n + 2]
    want = R.semantics(k, rows)["out"].reshape(rb, hb * n)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    for h, (_, full) in enumerate(blocks):
        np.testing.assert_allclose(got[:, h * n : (h + 1) * n], full, rtol=1e-4, atol=1e-5)


def test_attn_merge_heads_checked():
    with pytest.raises(ValueError, match="power of two dividing the 6 rows"):
        R.Rows("attn_merge2", 6, 8, heads=3)
    with pytest.raises(ValueError, match="for attn_merge only"):
        R.Rows("softmax", 6, 8, heads=2)
