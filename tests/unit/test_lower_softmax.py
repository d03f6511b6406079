"""A stand-alone `nn.softmax` over the last axis (`#tile.map<rows>`), lowered to the row kernels
(`NnOps.softmax`) and run on the simulator: bit-exact against the chosen kernel's numpy semantics on the
padded f16 rows, close to the device-mode reference, rows summing to 1. Rows of n % 4 != 0 (padded to a
multiple of 4, masked by the kernel's valid length), one or several rows per tile, f32 and f16 on either
side."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.builder import Builder
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f16, f32
from xdsl.ir import Block, Region
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import PassFailedException

from ipu.backend.kernels import rowwise as rw
from ipu.backend.lower import compile_model
from ipu.backend.lower.lowering import LoweringError
from ipu.backend.target import Target
from ipu.dialects import nn
from ipu.frontend.reference import evaluate
from ipu.runtime.host import Session

DTYPES = {"f32": f32, "f16": f16}


def softmax_model(shape: list[int], din: str, dout: str) -> ModuleOp:
    block = Block()
    b = Builder(InsertPoint.at_end(block))
    x = b.insert(nn.InputOp("x", TensorType(DTYPES[din], shape))).result
    y = b.insert(nn.SoftmaxOp(x, -1, TensorType(DTYPES[dout], shape))).result
    y.name_hint = "probs"
    b.insert(nn.OutputOp("y", y))
    b.insert(func.ReturnOp())
    return ModuleOp([func.FuncOp("softmax", ((), ()), Region(block))])


def kernel_expected(x: np.ndarray, kernel: str) -> np.ndarray:
    """The row kernel's bits for f16(x), rows zero-padded to a multiple of 4 (the lowering's staging)."""
    rows, n = x.shape
    p = -(-n // 4) * 4
    xp = np.zeros((rows, p), np.float16)
    xp[:, :n] = x.astype(np.float16)
    op = "softmax_split" if kernel == "rows_sms_sup" else "softmax"
    return rw.semantics(rw.Rows(op, rows, p, valid=n), xp)["out"][:, :n]


def run_softmax(shape, tiles, din, dout, seed=0):
    pkg = compile_model(softmax_model(shape, din, dout), Target.small(tiles=tiles, sram_kib=624))
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(np.float32)
    if din == "f16":
        x = x.astype(np.float16).astype(np.float32)
    session = Session(pkg)
    runs = [session.run({"x": x}) for _ in range(2)]
    return pkg, x, runs


CASES = [
    # (shape, tiles, operand, result): rows of n % 4 != 0 with one row per tile (So400m's [16, 729]) ...
    ([16, 729], 16, "f32", "f16"),
    ([16, 729], 20, "f32", "f16"),
    ([16, 729], 16, "f32", "f32"),
    ([16, 729], 16, "f16", "f16"),
    # ... whole atoms ...
    ([6, 64], 16, "f32", "f32"),
    ([16, 64], 4, "f16", "f16"),
    ([6, 64], 16, "f16", "f32"),
    # ... and several rows per tile: odd n (f16 rows start mid-word), n % 4 == 2, uneven rows per tile.
    ([12, 37], 4, "f32", "f32"),
    ([12, 37], 4, "f16", "f16"),
    ([12, 37], 4, "f32", "f16"),
    ([12, 37], 4, "f16", "f32"),
    ([8, 38], 2, "f32", "f16"),
    ([8, 38], 2, "f16", "f16"),
    ([40, 37], 16, "f32", "f16"),
    ([5, 3], 2, "f32", "f32"),
    ([4, 3], 4, "f32", "f16"),
]


@pytest.mark.parametrize(("shape", "tiles", "din", "dout"), CASES)
def test_softmax_matches_kernel_and_reference(shape, tiles, din, dout):
    pkg, x, runs = run_softmax(shape, tiles, din, dout)
    y = runs[0].outputs["y"]
    if dout == "f16":
        np.testing.assert_array_equal(y, y.astype(np.float16).astype(y.dtype))
    (kernel,) = {
        s["kernel"] for s in pkg.metadata["profile_sites"] if s["what"] == "nn.softmax (probs): rows"
    }
    np.testing.assert_array_equal(y.astype(np.float32), kernel_expected(x, kernel).astype(np.float32))
    ref = evaluate(softmax_model(shape, din, dout), {"x": x}, {}, mode="device").outputs["y"]
    assert np.abs(y.astype(np.float64) - ref).max() <= 2e-3
    np.testing.assert_allclose(y.astype(np.float64).sum(-1), 1.0, rtol=0, atol=2e-3)
    np.testing.assert_array_equal(y, runs[1].outputs["y"])


def test_one_row_per_tile_is_split_across_workers():
    """[16, 729] on 16 tiles: one row per tile, so `softmax_split` (all six workers) is chosen, writing the
    f16 result straight into the output buffer (no result copies); its estimate is the lower one."""
    pkg, _, runs = run_softmax([16, 729], 16, "f32", "f16")
    sites = [s for s in pkg.metadata["profile_sites"] if s["what"].startswith("nn.softmax")]
    assert [s["kernel"] for s in sites if s["what"].endswith(": rows")] == ["rows_sms_sup"]
    assert not any("result" in s["what"] for s in sites)
    split = rw.cycles(rw.Rows("softmax_split", 1, 732, valid=729))
    assert split < rw.cycles(rw.Rows("softmax", 1, 732, valid=729))
    assert runs[0].cycles < 2 * split


def test_debug_values_keep_the_softmax():
    shape = [12, 37]
    pkg = compile_model(
        softmax_model(shape, "f32", "f16"), Target.small(tiles=4, sram_kib=624), debug_values=True
    )
    (kept,) = [b for b in pkg.debug if "nn.softmax" in b.name]
    session = Session(pkg)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    y = session.run({"x": x}).outputs["y"]
    np.testing.assert_array_equal(session.read(kept), y)


def test_rows_over_a_scratch_element_are_rejected():
    # Met first by lowering-storage's measuring lowering (a pass failure), else by the lowering.
    with pytest.raises(
        (LoweringError, PassFailedException), match=r"nn\.softmax \(probs\).*exceeds a scratch element"
    ):
        compile_model(softmax_model([2, 20000], "f32", "f32"), Target.small(tiles=2, sram_kib=624))
