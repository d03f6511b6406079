"""Milestone B of the asm lowering: a chain of two nn.linear ops with a relayout between them (the first's
result layout is not the second's operand layout, and the f32 result is cast to f16 on the tiles), exchanged by
exchange instructions on the simulator, against the device-mode reference."""

from __future__ import annotations

import numpy as np
import pytest
from test_lower_linear import run_passes  # noqa: E402  (pytest puts tests/unit on sys.path)
from xdsl.builder import Builder
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.ir import Block, Region
from xdsl.rewriter import InsertPoint

from ipu.backend.lower import lower_to_package
from ipu.dialects import exchange as ex
from ipu.dialects import nn
from ipu.frontend.reference import evaluate
from ipu.runtime.host import Session

M, K, H, N = 24, 64, 96, 32


def chain_model() -> ModuleOp:
    block = Block()
    b = Builder(InsertPoint.at_end(block))
    x = b.insert(nn.InputOp("x", TensorType(f32, [M, K]))).result
    w1 = b.insert(nn.ParamOp("w1", TensorType(f32, [H, K]))).result
    b1 = b.insert(nn.ParamOp("b1", TensorType(f32, [H]))).result
    w2 = b.insert(nn.ParamOp("w2", TensorType(f32, [N, H]))).result
    b2 = b.insert(nn.ParamOp("b2", TensorType(f32, [N]))).result
    h = b.insert(nn.LinearOp(x, w1, b1, TensorType(f32, [M, H]))).result
    y = b.insert(nn.LinearOp(h, w2, b2, TensorType(f32, [M, N]))).result
    b.insert(nn.OutputOp("y", y))
    b.insert(func.ReturnOp())
    return ModuleOp([func.FuncOp("chain", ((), ()), Region(block))])


@pytest.mark.parametrize("tiles", [16, 1472])
def test_two_linears_with_relayout(tiles):
    opts = f"{{tiles={tiles} sram_kib=624}}"
    module = run_passes(chain_model(), f"nn-quantize-weights,nn-to-exchange-pipeline{opts},memory-plan{opts}")
    phases = [op for op in module.walk() if isinstance(op, ex.PhaseOp)]
    assert len(phases) >= 2 and any(len(p.recv_table()) for p in phases[1:])  # a real relayout between them
    pkg = lower_to_package(module)
    rng = np.random.default_rng(0)
    params = {
        "w1": (rng.standard_normal((H, K)) * 0.15).astype(np.float32),
        "b1": rng.standard_normal(H).astype(np.float32),
        "w2": (rng.standard_normal((N, H)) * 0.15).astype(np.float32),
        "b2": rng.standard_normal(N).astype(np.float32),
    }
    x = rng.standard_normal((M, K)).astype(np.float32)
    session = Session(pkg)
    session.upload_parameters(params)
    results = [session.run({"x": x}) for _ in range(2)]
    ref = evaluate(run_passes(chain_model(), "nn-quantize-weights"), {"x": x}, params, mode="device")
    ref = ref.outputs["y"]
    np.testing.assert_allclose(results[0].outputs["y"], ref, rtol=0, atol=8 * np.abs(ref).max() * 2.0**-11)
    np.testing.assert_array_equal(results[0].outputs["y"], results[1].outputs["y"])
