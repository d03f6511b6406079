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
from ipu.dialects import tile as tl
from ipu.frontend.reference import evaluate
from ipu.passes import cost_model as cm
from ipu.runtime.host import Session

M, K, H, N = 24, 64, 96, 32


def chain_model(m: int = M, k: int = K, h: int = H, n: int = N) -> ModuleOp:
    block = Block()
    b = Builder(InsertPoint.at_end(block))
    x = b.insert(nn.InputOp("x", TensorType(f32, [m, k]))).result
    w1 = b.insert(nn.ParamOp("w1", TensorType(f32, [h, k]))).result
    b1 = b.insert(nn.ParamOp("b1", TensorType(f32, [h]))).result
    w2 = b.insert(nn.ParamOp("w2", TensorType(f32, [n, h]))).result
    b2 = b.insert(nn.ParamOp("b2", TensorType(f32, [n]))).result
    hid = b.insert(nn.LinearOp(x, w1, b1, TensorType(f32, [m, h]))).result
    y = b.insert(nn.LinearOp(hid, w2, b2, TensorType(f32, [m, n]))).result
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


def test_column_panel_a_chunks_read_in_place(monkeypatch):
    """The second GEMM's A arrives in column panels of 32 (K = 1168: 36 full panels and a 16-wide last one) and runs
    in three K chunks: [0, 400) and [400, 800) (starting inside a panel) are read in place by the GEMM (no `A chunk
    rows` copies), [800, 1168) touches the narrow last panel and still gathers its rows. Against the reference (as
    above) and bit-exactly against the same model lowered with every chunk gathered."""
    m, k, h, n, tiles = 48, 32, 1168, 16, 40
    opts = f"{{tiles={tiles} sram_kib=624}}"
    spec = f"nn-quantize-weights,nn-to-exchange-pipeline{opts},memory-plan{opts}"
    module = run_passes(chain_model(m, k, h, n), spec)
    second = [op for op in module.walk() if isinstance(op, nn.LinearOp)][1]
    assert tl.col_panel_width(tl.layout_of(second.operands[0])) == 32
    pkg = lower_to_package(module)
    whats = [site["what"] for site in pkg.metadata["profile_sites"]]
    assert [w for w in whats if "A chunk rows" in w] == ["nn.linear (unnamed) [K 800:1168]: A chunk rows"]
    assert sum(w.endswith(": GEMM") for w in whats) == 4
    # Reference lowering: panels of 32 over the kernel's row stride limit, so every chunk is gathered.
    with monkeypatch.context() as mp:
        mp.setattr(cm, "GEMM_MAX_A_ROW_BYTES", 63)
        gathered = lower_to_package(run_passes(chain_model(m, k, h, n), spec))
    assert sum("A chunk rows" in site["what"] for site in gathered.metadata["profile_sites"]) == 3
    rng = np.random.default_rng(1)
    params = {
        "w1": (rng.standard_normal((h, k)) * 0.15).astype(np.float32),
        "b1": rng.standard_normal(h).astype(np.float32),
        "w2": (rng.standard_normal((n, h)) * 0.05).astype(np.float32),
        "b2": rng.standard_normal(n).astype(np.float32),
    }
    x = rng.standard_normal((m, k)).astype(np.float32)
    outs = []
    for p in (pkg, gathered):
        session = Session(p)
        session.upload_parameters(params)
        outs.append(session.run({"x": x}).outputs["y"])
    np.testing.assert_array_equal(outs[0], outs[1])
    ref = evaluate(
        run_passes(chain_model(m, k, h, n), "nn-quantize-weights"), {"x": x}, params, mode="device"
    )
    ref = ref.outputs["y"]
    np.testing.assert_allclose(outs[0], ref, rtol=0, atol=8 * np.abs(ref).max() * 2.0**-11)
