"""The asm lowering (ipu.backend.lower) on one nn.linear (f16 activations x FP8 weights + bias): planned by
tile-plan, scheduled, placed, lowered to a package, run instruction by instruction on the simulator through the
host Session, and compared with the reference evaluator (device mode) to f16 rounding."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.builder import Builder
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.ir import Block, Region
from xdsl.passes import PassPipeline
from xdsl.rewriter import InsertPoint

from ipu.backend.lower import LoweringError, lower_to_package
from ipu.dialects import nn
from ipu.frontend.reference import evaluate
from ipu.passes.registry import all_passes
from ipu.runtime.host import Session
from ipu.runtime.package import Package


def linear_model(m: int, k: int, n: int, bias: bool = True) -> ModuleOp:
    block = Block()
    b = Builder(InsertPoint.at_end(block))
    x = b.insert(nn.InputOp("x", TensorType(f32, [m, k]))).result
    w = b.insert(nn.ParamOp("w", TensorType(f32, [n, k]))).result
    bb = b.insert(nn.ParamOp("b", TensorType(f32, [n]))).result if bias else None
    y = b.insert(nn.LinearOp(x, w, bb, TensorType(f32, [m, n]))).result
    b.insert(nn.OutputOp("y", y))
    b.insert(func.ReturnOp())
    return ModuleOp([func.FuncOp("lin", ((), ()), Region(block))])


def run_passes(module: ModuleOp, spec: str) -> ModuleOp:
    PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), module)
    return module


def placed(m, k, n, tiles, bias=True):
    opts = f"{{tiles={tiles} sram_kib=624}}"
    return run_passes(
        linear_model(m, k, n, bias),
        f"nn-quantize-weights,nn-to-exchange-pipeline{opts},memory-plan{opts}",
    )


def reference(m, k, n, feeds, params, bias=True):
    ref = run_passes(linear_model(m, k, n, bias), "nn-quantize-weights")
    return evaluate(ref, feeds, params, mode="device").outputs["y"]


def data(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) * 0.2).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return x, w, b


@pytest.mark.parametrize(
    "tiles, m, k, n",
    [(16, 24, 64, 64), (16, 24, 40, 24), (1472, 24, 64, 64), (16, 1, 2160, 64)],
    ids=[
        "16 tiles",
        "16 tiles, padded K and N",
        "1472 tiles, M < 3 per tile",
        "one row, K > 2056: A in K-block panels with zero padding rows",
    ],
)
def test_linear_matches_reference(tiles, m, k, n, tmp_path):
    pkg = lower_to_package(placed(m, k, n, tiles))
    pkg = Package.load(pkg.save(tmp_path / "lin.ipupkg"))  # the file round trip is part of the contract
    x, w, b = data(m, k, n)
    session = Session(pkg)
    session.upload_parameters({"w": w, "b": b})
    got = session.run({"x": x})
    ref = reference(m, k, n, {"x": x}, {"w": w, "b": b})
    # f16 rounding: the AMP rounds partials to f16 per 16-deep block, and the bias is added in f16; long K runs in
    # chunks whose partial sums are kept in f16 between chunks (more roundings: the bound grows with sqrt(K)).
    tol = 4 * np.abs(ref).max() * 2.0**-11 * max(1.0, np.sqrt(k / 256))
    np.testing.assert_allclose(got.outputs["y"], ref, rtol=0, atol=tol)
    assert got.cycles > 0
    # Parameters stay resident: a second inference with another input needs no upload.
    x2 = data(m, k, n, seed=1)[0]
    again = session.run({"x": x2})
    np.testing.assert_allclose(again.outputs["y"], reference(m, k, n, {"x": x2}, {"w": w, "b": b}), atol=tol)
    assert np.isfinite(got.outputs["y"]).all()


def test_panels_of_whole_atoms(tmp_path):
    """600 columns on 8 tiles: panels of 76 (152-byte f16 rows), not 75, so that no result row starts at a half
    word (75 needed 36 KB of single-half copy table per tile, more than region 0 holds in a 3-layer model); the
    package still matches the reference."""
    from ipu.dialects import tile as tl

    m, k, n, tiles = 49, 168, 600, 8
    module = placed(m, k, n, tiles)
    lin = next(o for o in module.walk() if isinstance(o, nn.LinearOp))
    pm, _, pn = lin.attributes[tl.PLAN_ATTR].get("panel")
    assert pn % 4 == 0 and -(-n // pn) <= tiles, (pm, pn)
    pkg = lower_to_package(module)
    x, w, b = data(m, k, n)
    session = Session(pkg)
    session.upload_parameters({"w": w, "b": b})
    got = session.run({"x": x}).outputs["y"]
    ref = reference(m, k, n, {"x": x}, {"w": w, "b": b})
    np.testing.assert_allclose(got, ref, rtol=0, atol=4 * np.abs(ref).max() * 2.0**-11)


def chain_model(m: int, k1: int, k2: int, n: int) -> ModuleOp:
    """x [m, k1] -> linear -> h [m, k2] -> linear -> y [m, n]: the second GEMM gathers its A rows from the
    first one's column panels."""
    block = Block()
    b = Builder(InsertPoint.at_end(block))
    x = b.insert(nn.InputOp("x", TensorType(f32, [m, k1]))).result
    w1 = b.insert(nn.ParamOp("w1", TensorType(f32, [k2, k1]))).result
    w2 = b.insert(nn.ParamOp("w2", TensorType(f32, [n, k2]))).result
    h = b.insert(nn.LinearOp(x, w1, None, TensorType(f32, [m, k2]))).result
    y = b.insert(nn.LinearOp(h, w2, None, TensorType(f32, [m, n]))).result
    b.insert(nn.OutputOp("y", y))
    b.insert(func.ReturnOp())
    return ModuleOp([func.FuncOp("chain", ((), ()), Region(block))])


def test_column_panel_a_rows(tmp_path):
    """The second GEMM's A rows arrive in column panels of the first GEMM's 76-column blocks (`cols76`: the last
    panel 68 wide); its K chunks (K = 1208, padded to 1216) start inside panels, and its 2-row blocks are padded
    to the kernel's 3 rows: the per-chunk gathers on the tile must reproduce the reference."""
    from ipu.dialects import tile as tl

    m, k1, k2, n = 6, 32, 1208, 16
    opts = "{tiles=16 sram_kib=624}"
    spec = f"nn-quantize-weights,nn-to-exchange-pipeline{opts},memory-plan{opts}"
    mod = run_passes(chain_model(m, k1, k2, n), spec)
    second = [op for op in mod.walk() if isinstance(op, nn.LinearOp)][1]
    assert tl.layout_of(second.operands[0]).order.data == "cols76"
    pkg = lower_to_package(mod)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, k1)).astype(np.float32)
    w1 = (rng.standard_normal((k2, k1)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((n, k2)) * 0.2).astype(np.float32)
    session = Session(pkg)
    session.upload_parameters({"w1": w1, "w2": w2})
    got = session.run({"x": x}).outputs["y"]
    ref_mod = run_passes(chain_model(m, k1, k2, n), "nn-quantize-weights")
    ref = evaluate(ref_mod, {"x": x}, {"w1": w1, "w2": w2}, mode="device").outputs["y"]
    tol = 4 * np.abs(ref).max() * 2.0**-11 * np.sqrt(k2 / 256)
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


def test_wrong_weights_are_seen():
    """The comparison above can fail: weights bound to the wrong place or order change the result."""
    m, k, n = 24, 64, 64
    pkg = lower_to_package(placed(m, k, n, 16))
    x, w, b = data(m, k, n)
    session = Session(pkg)
    session.upload_parameters({"w": w[::-1].copy(), "b": b})
    got = session.run({"x": x}).outputs["y"]
    ref = reference(m, k, n, {"x": x}, {"w": w, "b": b})
    assert np.abs(got - ref).max() > 0.1


def test_needs_memory_plan():
    with pytest.raises(LoweringError, match="no memory.plan: run memory-plan first"):
        lower_to_package(linear_model(24, 64, 64))


def test_compile_model_one_call():
    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target

    m, k, n = 24, 64, 64
    x, w, b = data(m, k, n)
    pkg = compile_model(linear_model(m, k, n), Target.small(tiles=16, sram_kib=624), weights={"w": w, "b": b})
    session = Session(pkg)
    session.upload_parameters({"w": w, "b": b})
    ref = reference(m, k, n, {"x": x}, {"w": w, "b": b})
    np.testing.assert_allclose(session.run({"x": x}).outputs["y"], ref, atol=4 * np.abs(ref).max() * 2.0**-11)
    with pytest.raises(LoweringError, match=r"weights lack parameters \['b'\]"):
        compile_model(linear_model(m, k, n), Target.small(tiles=16, sram_kib=624), weights={"w": w})


def test_tiny_siglip_layer_loop_lowers_as_one_body():
    """With the layers outlined into one tile.repeat, the package has one copy of the body's code (a supervisor
    loop with per-iteration frame patching; tests/unit/test_e2e_repeat.py runs it against the unrolled one)."""
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.backend.lower import lower_to_package
    from ipu.backend.lower.lowering import pipeline_spec
    from ipu.backend.target import Target
    from ipu.frontend.siglip import PRESETS, build_vision_model
    from ipu.passes.registry import all_passes

    target = Target.small(tiles=16, sram_kib=624)
    module = build_vision_model(PRESETS["tiny"])
    PassPipeline.parse_spec(dict(all_passes()), pipeline_spec(target, outline_repeat=True)).apply(
        Context(), module
    )
    pkg = lower_to_package(module, target)
    assert "rep_patch" in pkg.labels
    assert any(n.startswith("tile.repeat x2") for n in pkg.metadata["notes"])
