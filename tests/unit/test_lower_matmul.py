"""A 2-D `nn.matmul` (B as [K, N] rows, activations on both sides: the MAP head's P @ X after
`nn-fold-probe-attention`) planned as a GEMM by tile-plan ([K, pn] column blocks of B), lowered with `WeightsF16`
weight panels, run on the simulator and compared with the device-mode reference."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.builder import Builder
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f16, f32
from xdsl.ir import Block, Region
from xdsl.rewriter import InsertPoint

from ipu.backend.lower import compile_model
from ipu.backend.target import Target
from ipu.dialects import nn
from ipu.frontend.reference import evaluate
from ipu.runtime.host import Session


def matmul_model(m: int, k: int, n: int, a_f16: bool = True) -> ModuleOp:
    block = Block()
    b = Builder(InsertPoint.at_end(block))
    a = b.insert(nn.InputOp("a", TensorType(f32, [m, k]))).result
    x = b.insert(nn.InputOp("x", TensorType(f32, [k, n]))).result
    a16 = b.insert(nn.CastOp(a, TensorType(f16, [m, k]))).result if a_f16 else a
    x16 = b.insert(nn.CastOp(x, TensorType(f16, [k, n]))).result
    y = b.insert(nn.MatmulOp(a16, x16, TensorType(f32, [m, n]))).result
    b.insert(nn.OutputOp("y", y))
    b.insert(func.ReturnOp())
    return ModuleOp([func.FuncOp("mm", ((), ()), Region(block))])


@pytest.mark.parametrize(
    "tiles, m, k, n, a_f16",
    [(16, 16, 64, 64, True), (16, 16, 729, 96, False), (8, 5, 45, 40, False), (8, 5, 48, 40, True)],
    ids=[
        "whole 16-blocks",
        "K = 729, f32 A: the last K chunk padded with zero rows",
        "ragged M, K and N, f32 A",
        "ragged M and N, f16 A",
    ],
)
def test_matmul_matches_reference(tiles, m, k, n, a_f16):
    pkg = compile_model(matmul_model(m, k, n, a_f16), Target.small(tiles=tiles, sram_kib=624))
    plan = next(op for op in pkg_ops(m, k, n, tiles, a_f16) if isinstance(op, nn.MatmulOp)).attributes[
        "tile.plan"
    ]
    assert plan.name == "tile.gemm"
    rng = np.random.default_rng(0)
    feeds = {"a": rng.random((m, k)).astype(np.float32), "x": rng.standard_normal((k, n)).astype(np.float32)}
    got = Session(pkg).run(feeds).outputs["y"]
    ref = evaluate(matmul_model(m, k, n, a_f16), feeds, {}, mode="device").outputs["y"]
    # f16 partials per 16-deep block and between K chunks.
    tol = 4 * np.abs(ref).max() * 2.0**-11 * max(1.0, np.sqrt(k / 256))
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)
    assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max()


def pkg_ops(m, k, n, tiles, a_f16):
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.backend.lower.lowering import pipeline_spec
    from ipu.passes.registry import all_passes

    module = matmul_model(m, k, n, a_f16)
    spec = pipeline_spec(Target.small(tiles=tiles, sram_kib=624)).split(",nn-to-exchange")[0]
    spec += f",tile-plan{{tiles={tiles} sram_kib=624}}"
    PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), module)
    return list(module.walk())


def test_f32_lhs_limits():
    """An f32 lhs is staged as padded f16 rows in the A scratch on every tile: tile-plan keeps the staged block
    within the scratch (more row panels), and rows too long for the kernel once cast are refused with the op's
    name instead of being packed in place over themselves."""
    from xdsl.utils.exceptions import PassFailedException

    from ipu.backend.lower import LoweringError

    m, k, n = 48, 768, 16
    ops = pkg_ops(m, k, n, 4, False)
    plan = next(op for op in ops if isinstance(op, nn.MatmulOp)).attributes["tile.plan"]
    pm = plan.get("panel")[0]
    assert max(pm, 3) * k * 2 <= Target.small(tiles=4, sram_kib=624).region1_element_bytes, pm
    pkg = compile_model(matmul_model(m, k, n, False), Target.small(tiles=4, sram_kib=624))
    rng = np.random.default_rng(1)
    feeds = {"a": rng.random((m, k)).astype(np.float32), "x": rng.standard_normal((k, n)).astype(np.float32)}
    got = Session(pkg).run(feeds).outputs["y"]
    ref = evaluate(matmul_model(m, k, n, False), feeds, {}, mode="device").outputs["y"]
    assert np.abs(got - ref).max() <= 4 * np.abs(ref).max() * 2.0**-11 * np.sqrt(k / 256)
    # On 2 tiles the staged block (24 rows) would not fit the A scratch; K = 2064 not the kernel's row stride.
    for (mm, kk), tiles in (((48, 768), 2), ((2, 2064), 4)):
        with pytest.raises((LoweringError, PassFailedException), match="nn.matmul"):
            compile_model(matmul_model(mm, kk, 16, False), Target.small(tiles=tiles, sram_kib=624))
