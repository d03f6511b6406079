"""Configs, the SigLIP builder, random weights and the safetensors importer."""

import json
import struct

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.dialects.func import Func
from xdsl.parser import Parser

from ipu.dialects import nn
from ipu.frontend.siglip import (
    PRESETS,
    SiglipVisionConfig,
    build_vision_model,
    get_config,
    num_parameters,
    param_shapes,
)
from ipu.frontend.weights import (
    CheckpointError,
    LazyStack,
    load_checkpoint,
    random_weights,
    read_safetensors,
    save_checkpoint,
    write_safetensors,
)

TINY = PRESETS["tiny"]


def parse(text: str):
    ctx = Context()
    for d in (Builtin, Func, nn.NN):
        ctx.load_dialect(d)
    m = Parser(ctx, text).parse_module()
    m.verify()
    return m


def test_so400m_preset_matches_spec():
    cfg = PRESETS["so400m-patch14-384"]
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_hidden_layers) == (
        1152,
        4304,
        16,
        27,
    )
    assert (cfg.head_dim, cfg.num_patches, cfg.patch_dim) == (72, 729, 588)
    assert cfg.layer_norm_eps == 1e-6 and cfg.gelu_approximate == "tanh"
    # SIGLIP.md: checked against model.parameters().
    assert num_parameters(cfg) == 428_225_600


def test_config_from_hf_json(tmp_path):
    full = {
        "model_type": "siglip",
        "text_config": {"hidden_size": 7},
        "vision_config": {
            "hidden_size": 96,
            "intermediate_size": 160,
            "num_attention_heads": 3,
            "num_hidden_layers": 1,
            "image_size": 28,
            "patch_size": 7,
            "hidden_act": "gelu_pytorch_tanh",
            "unknown_key": 1,
        },
    }
    (tmp_path / "config.json").write_text(json.dumps(full))
    cfg = get_config(str(tmp_path))
    assert cfg.hidden_size == 96 and cfg.head_dim == 32 and cfg.num_patches == 16
    with pytest.raises(ValueError, match="not divisible by num_attention_heads"):
        SiglipVisionConfig(hidden_size=10, num_attention_heads=3)
    with pytest.raises(ValueError, match="unknown SigLIP config"):
        get_config("no-such-model")


def test_builder_structure_and_roundtrip():
    m = build_vision_model(TINY)
    m.verify()
    ops = [op for op in m.walk() if op.dialect_name() == "nn"]
    kinds = [op.name for op in ops]
    layers = TINY.num_hidden_layers
    assert kinds.count("nn.attention") == layers + 1  # encoder layers + MAP head
    assert kinds.count("nn.layer_norm") == 2 * layers + 2  # two per layer, post, head
    assert kinds.count("nn.gelu") == layers + 1
    assert (
        kinds.count("nn.linear") == 6 * layers + 1 + 6
    )  # per layer 6, patch embedding, head q/k/v/out/fc1/fc2
    params = {op.param_name: tuple(op.result.type.get_shape()) for op in ops if isinstance(op, nn.ParamOp)}
    assert params == param_shapes(TINY)
    outputs = {op.sym.data: tuple(op.value.type.get_shape()) for op in ops if isinstance(op, nn.OutputOp)}
    assert outputs == {"last_hidden_state": (1, 16, 64), "pooler_output": (1, 64)}
    text = str(m)
    assert str(parse(text)) == text


def test_builder_without_head():
    cfg = SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=48,
        num_attention_heads=2,
        num_hidden_layers=1,
        image_size=16,
        patch_size=4,
        vision_use_head=False,
    )
    m = build_vision_model(cfg)
    names = [op.sym.data for op in m.walk() if isinstance(op, nn.OutputOp)]
    assert names == ["last_hidden_state"]


def test_random_weights_seeded_and_perturbed():
    a, b = random_weights(TINY, seed=3), random_weights(TINY, seed=3)
    c = random_weights(TINY, seed=4)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["head.probe"], c["head.probe"])
    assert {k: v.shape for k, v in a.items()} == param_shapes(TINY)
    plain = random_weights(TINY, seed=3, perturbed=False)
    assert np.all(plain["encoder.layers.0.layer_norm1.weight"] == 1.0)
    assert np.all(plain["encoder.layers.0.self_attn.q_proj.bias"] == 0.0)
    ln = a["encoder.layers.0.layer_norm1.weight"]
    assert 0.02 < np.std(ln) < 0.3 and abs(np.mean(ln) - 1) < 0.1
    # q and k doubled: their spread is twice v's (same Xavier bound).
    ratio = (
        np.abs(a["encoder.layers.1.self_attn.q_proj.weight"]).max()
        / np.abs(a["encoder.layers.1.self_attn.v_proj.weight"]).max()
    )
    assert 1.8 < ratio < 2.2


@pytest.mark.parametrize("with_prefix", [False, True])
def test_checkpoint_roundtrip_both_key_styles(tmp_path, with_prefix):
    w = random_weights(TINY, seed=1)
    save_checkpoint(w, TINY, tmp_path, with_prefix=with_prefix)
    keys = read_safetensors(tmp_path / "model.safetensors").keys()
    assert all(k.startswith("vision_model.") == with_prefix for k in keys)
    store, cfg = load_checkpoint(tmp_path)
    assert cfg == TINY
    assert set(store) == set(w)
    for k in w:
        assert isinstance(store[k], np.memmap), k  # memory-mapped, not copied
        np.testing.assert_array_equal(store[k], w[k])


def test_checkpoint_matches_official_safetensors_reader(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    w = random_weights(TINY, seed=2)
    save_checkpoint(w, TINY, tmp_path, with_prefix=True)
    official = safetensors_numpy.load_file(str(tmp_path / "model.safetensors"))
    assert all(np.array_equal(official["vision_model." + k], w[k]) for k in w)
    # And files written by the official writer read back here, f16 included.
    extra = {"vision_model." + k: np.asarray(v) for k, v in w.items()}
    extra["text_model.embeddings.weight"] = np.ones((3, 4), np.float32)
    extra["logit_scale"] = np.ones((1,), np.float32)
    extra["vision_model.head.probe"] = extra["vision_model.head.probe"].astype(np.float16)
    safetensors_numpy.save_file(extra, str(tmp_path / "model.safetensors"))
    store, _ = load_checkpoint(tmp_path)  # text_model.* and logit_* are ignored
    assert store["head.probe"].dtype == np.float16


def _broken_checkpoint(tmp_path, mutate):
    w = dict(random_weights(TINY, seed=0))
    mutate(w)
    (tmp_path / "config.json").write_text(json.dumps(TINY.to_dict()))
    write_safetensors(w, tmp_path / "model.safetensors")
    return tmp_path


def test_checkpoint_missing_key(tmp_path):
    _broken_checkpoint(tmp_path, lambda w: w.pop("encoder.layers.1.mlp.fc2.bias"))
    with pytest.raises(
        CheckpointError, match=r"missing key encoder.layers.1.mlp.fc2.bias \(expected shape \[64\]\)"
    ):
        load_checkpoint(tmp_path)


def test_checkpoint_wrong_shape(tmp_path):
    _broken_checkpoint(tmp_path, lambda w: w.update({"head.probe": np.zeros((1, 64), np.float32)}))
    with pytest.raises(CheckpointError, match=r"key 'head.probe' has shape \[1, 64\], expected \[1, 1, 64\]"):
        load_checkpoint(tmp_path)


def test_checkpoint_wrong_dtype(tmp_path):
    path = _broken_checkpoint(tmp_path, lambda w: None) / "model.safetensors"
    # Rewrite one tensor's dtype code to an integer type of the same size.
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header["post_layernorm.bias"]["dtype"] = "I32"
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + raw[8 + n :])
    with pytest.raises(
        CheckpointError, match=r"key 'post_layernorm.bias' has dtype I32, expected a floating dtype"
    ):
        load_checkpoint(tmp_path)


def test_checkpoint_unexpected_key(tmp_path):
    _broken_checkpoint(
        tmp_path, lambda w: w.update({"encoder.layers.5.mlp.fc1.bias": np.zeros(3, np.float32)})
    )
    with pytest.raises(CheckpointError, match="unexpected key encoder.layers.5.mlp.fc1.bias"):
        load_checkpoint(tmp_path)


def test_stacked_names_are_lazy():
    w = random_weights(TINY, seed=0)
    s = w["encoder.layers.*.mlp.fc1.weight"]
    assert isinstance(s, LazyStack) and s.shape == (2, 128, 64)
    assert s[1] is w["encoder.layers.1.mlp.fc1.weight"]
    np.testing.assert_array_equal(np.asarray(s)[0], w["encoder.layers.0.mlp.fc1.weight"])
    with pytest.raises(KeyError, match="not in the weights"):
        w["encoder.layers.*.nope"]
