"""The nn-level passes on the builder's SigLIP: structure of the rewritten IR, and the model's outputs preserved.

Numerics use the NumPy reference evaluator: fusion and outlining only reorder the same float32 arithmetic (the
fused GEMM sums in another order), so fp32 outputs agree to ~1e-6 relative; quantized IR evaluated in device
mode must differ from fp32 (the FP8 rounding is real) but stay close.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from ipu.dialects import nn
from ipu.dialects.registry import all_dialects
from ipu.frontend.reference import evaluate
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.frontend.weights import random_weights
from ipu.passes.nn_canonicalize import NNCanonicalizePass
from ipu.passes.nn_fuse_qkv import NNFuseQKVPass
from ipu.passes.nn_outline_repeat import NNOutlineRepeatPass
from ipu.passes.nn_quantize import NNQuantizeWeightsPass

TINY = PRESETS["tiny"]
LAYER_PARAM = re.compile(r'"encoder\.layers\.\d+\.')


def _context() -> Context:
    ctx = Context()
    for name, factory in all_dialects():
        ctx.register_dialect(name, factory)
    return ctx


def _run(module: ModuleOp, *passes: ModulePass) -> ModuleOp:
    ctx = _context()
    for p in passes:
        p.apply(ctx, module)
        module.verify()
    return module


def _ops(module: ModuleOp, kind: type) -> list:
    return [op for op in module.walk() if isinstance(op, kind)]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def weights():
    return random_weights(TINY, seed=0)


@pytest.fixture(scope="module")
def pixels():
    shape = (1, TINY.num_channels, TINY.image_size, TINY.image_size)
    return {"pixel_values": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}


@pytest.fixture(scope="module")
def reference(weights, pixels):
    return evaluate(build_vision_model(TINY), pixels, weights, mode="fp32").outputs


def _assert_same_outputs(got: dict, want: dict, rtol: float = 1e-5) -> None:
    assert got.keys() == want.keys()
    for name in want:
        scale = float(np.abs(want[name]).max())
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=rtol * scale, err_msg=name)


# ----------------------------------------------------------------------------------------------------------------
# Outputs preserved


EXACT_PIPELINES = {
    "fuse": [NNFuseQKVPass()],
    "fuse-kv": [NNFuseQKVPass(fuse_kv=True)],
    "fuse-any": [NNFuseQKVPass(require_attention=False)],
    "outline": [NNOutlineRepeatPass(strict=True)],
    "fuse,outline": [NNFuseQKVPass(), NNOutlineRepeatPass(strict=True)],
    "outline,fuse": [NNOutlineRepeatPass(strict=True), NNFuseQKVPass()],
    "canonicalize": [NNCanonicalizePass()],
    "fuse,outline,canonicalize": [NNFuseQKVPass(), NNOutlineRepeatPass(strict=True), NNCanonicalizePass()],
}


@pytest.mark.parametrize("pipeline", EXACT_PIPELINES, ids=list(EXACT_PIPELINES))
def test_fp32_outputs_preserved(pipeline, weights, pixels, reference):
    module = _run(build_vision_model(TINY), *EXACT_PIPELINES[pipeline])
    _assert_same_outputs(evaluate(module, pixels, weights, mode="fp32").outputs, reference)


QUANTIZED_PIPELINES = {
    "quantize": [NNQuantizeWeightsPass()],
    "quantize-f152": [NNQuantizeWeightsPass(format="f152", scale=-2, activations="none")],
    "quantize,fuse,outline": [NNQuantizeWeightsPass(), NNFuseQKVPass(), NNOutlineRepeatPass(strict=True)],
    "outline,quantize,fuse": [NNOutlineRepeatPass(strict=True), NNQuantizeWeightsPass(), NNFuseQKVPass()],
    "fuse,quantize,outline": [NNFuseQKVPass(), NNQuantizeWeightsPass(), NNOutlineRepeatPass(strict=True)],
}


@pytest.mark.parametrize("pipeline", QUANTIZED_PIPELINES, ids=list(QUANTIZED_PIPELINES))
def test_quantized_outputs_close(pipeline, weights, pixels, reference):
    module = _run(build_vision_model(TINY), *QUANTIZED_PIPELINES[pipeline])
    # In fp32 mode casts are the identity: the rewritten graph is still the same model.
    _assert_same_outputs(evaluate(module, pixels, weights, mode="fp32").outputs, reference)
    device = evaluate(module, pixels, weights, mode="device").outputs
    for name, want in reference.items():
        assert np.abs(device[name] - want).max() > 1e-4 * np.abs(want).max(), (
            f"{name}: FP8 rounding has no effect"
        )
        # F152 keeps 2 mantissa bits to F143's 3: measured cosine 0.985 on the tiny model, 0.996 for F143.
        assert _cosine(device[name], want) > (0.97 if "f152" in pipeline else 0.99), name


def test_quantized_pipelines_agree_in_device_mode(weights, pixels):
    """Fusion and outlining commute with quantization: same FP8 values, same device-mode outputs."""
    outs = [
        evaluate(
            _run(build_vision_model(TINY), *QUANTIZED_PIPELINES[p]), pixels, weights, mode="device"
        ).outputs
        for p in ("quantize", "quantize,fuse,outline", "outline,quantize,fuse")
    ]
    for other in outs[1:]:
        _assert_same_outputs(other, outs[0], rtol=1e-5)


# ----------------------------------------------------------------------------------------------------------------
# nn-fuse-qkv


def test_fuse_qkv_structure():
    module = build_vision_model(TINY)
    linears_before = len(_ops(module, nn.LinearOp))
    _run(module, NNFuseQKVPass())
    # Each encoder layer loses two linears; the MAP head (q from the probe) is left alone.
    assert len(_ops(module, nn.LinearOp)) == linears_before - 2 * TINY.num_hidden_layers
    d = TINY.hidden_size
    fused = [op for op in _ops(module, nn.LinearOp) if op.weight.type.get_shape()[0] == 3 * d]
    assert len(fused) == TINY.num_hidden_layers
    for lin in fused:
        assert isinstance(lin.weight.owner, nn.ConcatOp) and isinstance(lin.bias.owner, nn.ConcatOp)
        slices = sorted(u.operation.static_offsets[-1] for u in lin.result.uses)
        assert slices == [0, d, 2 * d]
    head = _ops(module, nn.AttentionOp)[-1]
    assert all(isinstance(v.owner, nn.LinearOp) for v in head.operands)


def test_fuse_kv_fuses_map_head_pair():
    module = _run(build_vision_model(TINY), NNFuseQKVPass(fuse_kv=True))
    head = _ops(module, nn.AttentionOp)[-1]
    assert isinstance(head.query.owner, nn.LinearOp)
    k, v = head.key.owner, head.value.owner
    assert isinstance(k, nn.SliceOp) and isinstance(v, nn.SliceOp) and k.input is v.input


def test_fuse_is_idempotent():
    module = _run(build_vision_model(TINY), NNFuseQKVPass())
    text = str(module)
    assert str(_run(module, NNFuseQKVPass())) == text


# ----------------------------------------------------------------------------------------------------------------
# nn-quantize-weights


def test_quantize_structure():
    module = _run(build_vision_model(TINY), NNQuantizeWeightsPass(scale=-5))
    for lin in _ops(module, nn.LinearOp):
        cast = lin.weight.owner
        assert isinstance(cast, nn.CastOp) and cast.fp8_scale == -5
        assert str(lin.weight.type.element_type) == "f8E4M3FNUZ"
        assert str(lin.input.type.element_type) == "f16"
        assert lin.bias is None or str(lin.bias.type.element_type) == "f32"
        # f32 results, but an MLP's hidden activation: fc1 and its GELU in f16 (fc2 reads it as its f16 input).
        users = [u.operation for u in lin.result.uses]
        if str(lin.result.type.element_type) == "f16":
            assert len(users) == 1 and isinstance(users[0], nn.GeluOp)
            assert str(users[0].results[0].type.element_type) == "f16"
        else:
            assert str(lin.result.type.element_type) == "f32"
    assert any(str(g.results[0].type.element_type) == "f16" for g in _ops(module, nn.GeluOp))
    # Attention keeps its activations: no FP8 anywhere else.
    fp8_users = {
        u.operation.name for c in _ops(module, nn.CastOp) if c.scale is not None for u in c.result.uses
    }
    assert fp8_users == {"nn.linear"}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"format": "f999"}, "option 'format'"),
        ({"scale": 32}, "option 'scale'"),
        ({"scale": -33}, "option 'scale'"),
        ({"activations": "bf16"}, "option 'activations'"),
    ],
)
def test_quantize_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        NNQuantizeWeightsPass(**options)


# ----------------------------------------------------------------------------------------------------------------
# nn-outline-repeat


def test_outline_structure(weights):
    module = _run(build_vision_model(TINY), NNOutlineRepeatPass())
    (repeat,) = _ops(module, nn.RepeatOp)
    assert repeat.iterations == TINY.num_hidden_layers
    assert len(repeat.carried) == 1
    assert not LAYER_PARAM.search(str(module))
    # Every stacked operand is a stacked parameter the weight store resolves.
    for v in repeat.stacked:
        assert isinstance(v.owner, nn.ParamOp)
        assert weights[v.owner.param_name].shape == tuple(v.type.get_shape())


def test_outline_after_quantize_and_fuse_moves_casts_into_body():
    module = _run(build_vision_model(TINY), NNQuantizeWeightsPass(), NNFuseQKVPass(), NNOutlineRepeatPass())
    (repeat,) = _ops(module, nn.RepeatOp)
    body_ops = list(repeat.body.block.ops)
    assert sum(isinstance(op, nn.ConcatOp) for op in body_ops) == 2  # fused q/k/v weight and bias
    assert (
        sum(isinstance(op, nn.CastOp) and op.scale is not None for op in body_ops) == 4
    )  # qkv, out, fc1, fc2
    assert not LAYER_PARAM.search(str(module))


def _with_layer_changed(layer: int) -> ModuleOp:
    """The tiny model with layer `layer`'s GELU switched to the exact form: no longer identical layers."""
    module = build_vision_model(TINY)
    gelus = _ops(module, nn.GeluOp)
    gelus[layer].properties["approximate"] = type(gelus[layer].approximate)("none")
    return module


@pytest.mark.parametrize("layer", [0, 1])
def test_outline_leaves_different_layers_alone(layer):
    module = _with_layer_changed(layer)
    text = str(module)
    _run(module, NNOutlineRepeatPass())
    assert str(module) == text


def test_outline_strict_names_first_difference():
    with pytest.raises(PassFailedException, match=r"layer 1: no op matches layer 0's .*nn\.gelu"):
        _run(_with_layer_changed(1), NNOutlineRepeatPass(strict=True))


def test_outline_without_layers_is_a_no_op():
    module = _run(build_vision_model(PRESETS["tiny-1layer"]), NNOutlineRepeatPass(strict=False))
    assert not _ops(module, nn.RepeatOp)
    with pytest.raises(PassFailedException, match="fewer than min-layers"):
        _run(build_vision_model(PRESETS["tiny-1layer"]), NNOutlineRepeatPass(strict=True))


def test_outline_so400m_27_layers_roundtrip():
    cfg = PRESETS["so400m-patch14-384"]
    module = build_vision_model(cfg)
    start = time.perf_counter()
    _run(module, NNOutlineRepeatPass(strict=True))
    elapsed = time.perf_counter() - start
    (repeat,) = _ops(module, nn.RepeatOp)
    assert repeat.iterations == 27
    assert elapsed < 10, f"outlining 27 layers took {elapsed:.1f} s"
    text = str(module)
    assert not LAYER_PARAM.search(text)
    reparsed = Parser(_context(), text).parse_module()
    reparsed.verify()
    assert str(reparsed) == text
