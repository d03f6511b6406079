"""SigLIP vision towers as `nn` IR: configs and the builder.

The builder emits exactly the computation of Hugging Face's `SiglipVisionModel` (see
`shared/reference/SIGLIP.md`): patch embedding as patchify + linear, learned position embeddings, pre-LN encoder
layers (attention, GELU-tanh MLP), post layer norm, and the MAP head (probe attention over the last hidden state,
attention-output residual around LN + MLP). Parameter names are the checkpoint's keys without `vision_model.`, and
parameters keep the checkpoint's shapes (the patch kernel is reshaped in IR), so a safetensors file binds them
directly. Batch size is 1: `pixel_values` is [1, C, H, W].
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from xdsl.builder import Builder, InsertPoint
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType, f32
from xdsl.ir import Block, Region, SSAValue

from ipu.dialects import nn


@dataclass(frozen=True)
class SiglipVisionConfig:
    """The vision tower's hyper-parameters, named as in Hugging Face's `SiglipVisionConfig`."""

    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_attention_heads: int = 16
    num_hidden_layers: int = 27
    image_size: int = 384
    patch_size: int = 14
    num_channels: int = 3
    layer_norm_eps: float = 1e-6
    hidden_act: str = "gelu_pytorch_tanh"
    vision_use_head: bool = True

    def __post_init__(self) -> None:
        problems = []
        for f in fields(self):
            v = getattr(self, f.name)
            kind = type(f.default)
            if kind is int and (type(v) is not int or not 0 < v <= MAX_SIZE):
                problems.append(f"{f.name} must be a positive integer (at most {MAX_SIZE}), got {v!r}")
            elif kind is float and (
                isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 < v < 1
            ):
                problems.append(f"{f.name} must be a finite number in (0, 1), got {v!r}")
            elif kind is str and not isinstance(v, str):
                problems.append(f"{f.name} must be a string, got {v!r}")
            elif kind is bool and not isinstance(v, bool):
                problems.append(f"{f.name} must be true or false, got {v!r}")
        if problems:
            raise ValueError("invalid SigLIP vision config: " + "; ".join(problems))
        if self.hidden_size % self.num_attention_heads:
            problems.append(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}"
            )
        if self.patch_size > self.image_size:
            problems.append(f"patch_size {self.patch_size} exceeds image_size {self.image_size}")
        if self.hidden_act not in ACTIVATIONS:
            problems.append(f"hidden_act {self.hidden_act!r} is not one of {sorted(ACTIVATIONS)}")
        if problems:
            raise ValueError("invalid SigLIP vision config: " + "; ".join(problems))

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def grid(self) -> int:
        """Patches per image side; pixels beyond grid * patch_size are ignored."""
        return self.image_size // self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid**2

    @property
    def patch_dim(self) -> int:
        return self.num_channels * self.patch_size**2

    @property
    def attention_scale(self) -> float:
        return self.head_dim**-0.5

    @property
    def gelu_approximate(self) -> str:
        return ACTIVATIONS[self.hidden_act]

    @classmethod
    def from_dict(cls, d: dict) -> SiglipVisionConfig:
        """From a Hugging Face config dict: a `SiglipVisionConfig`, or a full `SiglipConfig` (its `vision_config`)."""
        if not isinstance(d, dict):
            raise ValueError(f"a SigLIP config must be a JSON object, got a {type(d).__name__}")
        if "vision_config" in d and isinstance(d["vision_config"], dict):
            d = d["vision_config"]
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_json(cls, path: str | Path) -> SiglipVisionConfig:
        """From a config.json; errors name the file (and the key)."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None

    def to_dict(self) -> dict:
        return asdict(self)

    def with_layers(self, n: int) -> SiglipVisionConfig:
        return replace(self, num_hidden_layers=n)


# Largest size a config may name (a dimension product must stay far inside int64 and the IR's int32 fields).
MAX_SIZE = 1 << 16

# Hugging Face activation names -> nn.gelu's `approximate`.
ACTIVATIONS = {"gelu_pytorch_tanh": "tanh", "gelu_new": "tanh", "gelu": "none"}

PRESETS: dict[str, SiglipVisionConfig] = {
    # google/siglip-so400m-patch14-384, vision tower (SIGLIP.md section 2).
    "so400m-patch14-384": SiglipVisionConfig(),
    # Small configs for tests: same structure, every dimension small.
    "tiny": SiglipVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2,
        num_hidden_layers=2,
        image_size=32,
        patch_size=8,
    ),
    "tiny-1layer": SiglipVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2,
        num_hidden_layers=1,
        image_size=32,
        patch_size=8,
    ),
}
PRESETS["siglip-tiny"] = PRESETS["tiny"]
PRESETS["siglip-so400m"] = PRESETS["so400m-patch14-384"]

# The builder's module attribute holding the config as JSON (`SiglipVisionConfig.to_dict`); the lowering copies
# it into `Package.metadata["config"]`.
MODEL_CONFIG_ATTR = "ipu.model_config"


def get_config(name_or_path: str) -> SiglipVisionConfig:
    """A preset by name, or a `config.json` (a file, or a directory holding one)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    p = Path(name_or_path)
    if p.is_dir():
        p = p / "config.json"
    if p.is_file():
        return SiglipVisionConfig.from_json(p)
    raise ValueError(
        f"unknown SigLIP config {name_or_path!r}: not a preset ({', '.join(PRESETS)}) nor a config.json"
    )


# ----------------------------------------------------------------------------------------------------------------
# Parameter names and shapes: the contract between the builder, the random initialiser and the importer.

LAYER_PREFIX = "encoder.layers"


def layer_param_shapes(cfg: SiglipVisionConfig) -> dict[str, tuple[int, ...]]:
    """Per-layer parameter names (relative to `encoder.layers.{i}.`) and shapes, PyTorch [out, in] layout."""
    d, m = cfg.hidden_size, cfg.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"layer_norm1.weight": (d,), "layer_norm1.bias": (d,)}
    for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
        shapes[f"self_attn.{proj}.weight"] = (d, d)
        shapes[f"self_attn.{proj}.bias"] = (d,)
    shapes |= {
        "layer_norm2.weight": (d,),
        "layer_norm2.bias": (d,),
        "mlp.fc1.weight": (m, d),
        "mlp.fc1.bias": (m,),
        "mlp.fc2.weight": (d, m),
        "mlp.fc2.bias": (d,),
    }
    return shapes


def param_shapes(cfg: SiglipVisionConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter of the vision tower, named as in the checkpoint without the `vision_model.` prefix."""
    d, m, p, c = cfg.hidden_size, cfg.intermediate_size, cfg.patch_size, cfg.num_channels
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.patch_embedding.weight": (d, c, p, p),
        "embeddings.patch_embedding.bias": (d,),
        "embeddings.position_embedding.weight": (cfg.num_patches, d),
    }
    per_layer = layer_param_shapes(cfg)
    for i in range(cfg.num_hidden_layers):
        for name, shape in per_layer.items():
            shapes[f"{LAYER_PREFIX}.{i}.{name}"] = shape
    shapes |= {"post_layernorm.weight": (d,), "post_layernorm.bias": (d,)}
    if cfg.vision_use_head:
        shapes |= {
            "head.probe": (1, 1, d),
            "head.attention.in_proj_weight": (3 * d, d),
            "head.attention.in_proj_bias": (3 * d,),
            "head.attention.out_proj.weight": (d, d),
            "head.attention.out_proj.bias": (d,),
            "head.layernorm.weight": (d,),
            "head.layernorm.bias": (d,),
            "head.mlp.fc1.weight": (m, d),
            "head.mlp.fc1.bias": (m,),
            "head.mlp.fc2.weight": (d, m),
            "head.mlp.fc2.bias": (d,),
        }
    return shapes


def num_parameters(cfg: SiglipVisionConfig) -> int:
    import math

    return sum(math.prod(s) for s in param_shapes(cfg).values())


# ----------------------------------------------------------------------------------------------------------------
# The builder


class _Emitter:
    """Appends nn ops to one block, deduplicating parameter ops by name."""

    def __init__(self, block: Block, cfg: SiglipVisionConfig):
        self.b = Builder(InsertPoint.at_end(block))
        self.cfg = cfg
        self._params: dict[str, SSAValue] = {}

    def param(self, name: str, shape: tuple[int, ...]) -> SSAValue:
        if name not in self._params:
            op = self.b.insert(nn.ParamOp(name, TensorType(f32, list(shape))))
            op.result.name_hint = _hint(name)
            self._params[name] = op.result
        return self._params[name]

    def linear(self, x: SSAValue, w: SSAValue, b: SSAValue | None) -> SSAValue:
        rows = x.type.get_shape()[:-1]
        out = w.type.get_shape()[0]
        return self.b.insert(nn.LinearOp(x, w, b, TensorType(f32, [*rows, out]))).result

    def layer_norm(self, x: SSAValue, prefix: str) -> SSAValue:
        d = self.cfg.hidden_size
        w, b = self.param(f"{prefix}.weight", (d,)), self.param(f"{prefix}.bias", (d,))
        return self.b.insert(nn.LayerNormOp(x, w, b, self.cfg.layer_norm_eps)).result

    def mlp(self, x: SSAValue, prefix: str) -> SSAValue:
        cfg = self.cfg
        d, m = cfg.hidden_size, cfg.intermediate_size
        h = self.linear(x, self.param(f"{prefix}.fc1.weight", (m, d)), self.param(f"{prefix}.fc1.bias", (m,)))
        h = self.b.insert(nn.GeluOp(h, cfg.gelu_approximate)).result
        return self.linear(
            h, self.param(f"{prefix}.fc2.weight", (d, m)), self.param(f"{prefix}.fc2.bias", (d,))
        )

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.b.insert(nn.AddOp(a, b)).result

    def attention(self, q: SSAValue, k: SSAValue, v: SSAValue) -> SSAValue:
        cfg = self.cfg
        return self.b.insert(nn.AttentionOp(q, k, v, cfg.num_attention_heads, cfg.attention_scale)).result

    def reshape(self, x: SSAValue, shape: list[int]) -> SSAValue:
        return self.b.insert(nn.ReshapeOp(x, TensorType(x.type.element_type, shape))).result

    def slice_rows(self, x: SSAValue, start: int, rows: int) -> SSAValue:
        shape = list(x.type.get_shape())
        offsets = [start] + [0] * (len(shape) - 1)
        return self.b.insert(
            nn.SliceOp(x, offsets, TensorType(x.type.element_type, [rows, *shape[1:]]))
        ).result

    def encoder_layer(self, h: SSAValue, prefix: str) -> SSAValue:
        d = self.cfg.hidden_size
        y = self.layer_norm(h, f"{prefix}.layer_norm1")
        q, k, v = (
            self.linear(
                y,
                self.param(f"{prefix}.self_attn.{p}.weight", (d, d)),
                self.param(f"{prefix}.self_attn.{p}.bias", (d,)),
            )
            for p in ("q_proj", "k_proj", "v_proj")
        )
        a = self.attention(q, k, v)
        o = self.linear(
            a,
            self.param(f"{prefix}.self_attn.out_proj.weight", (d, d)),
            self.param(f"{prefix}.self_attn.out_proj.bias", (d,)),
        )
        h = self.add(h, o)
        return self.add(h, self.mlp(self.layer_norm(h, f"{prefix}.layer_norm2"), f"{prefix}.mlp"))


def _hint(param_name: str) -> str:
    """A readable SSA name for a parameter: `encoder.layers.0.mlp.fc1.weight` -> `l0_mlp_fc1_weight`."""
    s = param_name.replace("encoder.layers.", "l").replace("embeddings.", "emb_").replace("self_attn.", "")
    out = "".join(ch if ch.isalnum() else "_" for ch in s)
    return out if out[0].isalpha() else "p" + out


def build_vision_model(cfg: SiglipVisionConfig, func_name: str = "siglip_vision") -> ModuleOp:
    """The whole vision tower as one `func.func` of `nn` ops, layers unrolled (`nn-outline-repeat` folds them).

    Outputs: `last_hidden_state` [1, T, D] and, with the head, `pooler_output` [1, D]. The module records the
    config (`MODEL_CONFIG_ATTR`, JSON): the lowering copies it into the package's `metadata["config"]`, so a
    package compiled from the IR text (`ipu-opt ... -t ipu-package`) lets a runner make random weights too.
    """
    cfg_p, c, s = cfg.patch_size, cfg.num_channels, cfg.image_size
    d, t = cfg.hidden_size, cfg.num_patches
    block = Block()
    e = _Emitter(block, cfg)

    x = e.b.insert(nn.InputOp("pixel_values", TensorType(f32, [1, c, s, s]))).result
    x.name_hint = "pixel_values"
    patches = e.b.insert(nn.PatchifyOp(x, cfg_p, TensorType(f32, [t, cfg.patch_dim]))).result
    kernel = e.reshape(e.param("embeddings.patch_embedding.weight", (d, c, cfg_p, cfg_p)), [d, cfg.patch_dim])
    h = e.linear(patches, kernel, e.param("embeddings.patch_embedding.bias", (d,)))
    h = e.add(h, e.param("embeddings.position_embedding.weight", (t, d)))

    for i in range(cfg.num_hidden_layers):
        h = e.encoder_layer(h, f"{LAYER_PREFIX}.{i}")

    last = e.layer_norm(h, "post_layernorm")
    last.name_hint = "last_hidden_state"
    e.b.insert(nn.OutputOp("last_hidden_state", e.reshape(last, [1, t, d])))

    if cfg.vision_use_head:
        probe = e.reshape(e.param("head.probe", (1, 1, d)), [1, d])
        w_in = e.param("head.attention.in_proj_weight", (3 * d, d))
        b_in = e.param("head.attention.in_proj_bias", (3 * d,))
        q = e.linear(probe, e.slice_rows(w_in, 0, d), e.slice_rows(b_in, 0, d))
        k = e.linear(last, e.slice_rows(w_in, d, d), e.slice_rows(b_in, d, d))
        v = e.linear(last, e.slice_rows(w_in, 2 * d, d), e.slice_rows(b_in, 2 * d, d))
        a = e.attention(q, k, v)
        a = e.linear(
            a,
            e.param("head.attention.out_proj.weight", (d, d)),
            e.param("head.attention.out_proj.bias", (d,)),
        )
        # The residual is the attention output, not the probe (SIGLIP.md).
        pooled = e.add(a, e.mlp(e.layer_norm(a, "head.layernorm"), "head.mlp"))
        pooled.name_hint = "pooler_output"
        e.b.insert(nn.OutputOp("pooler_output", pooled))

    e.b.insert(func.ReturnOp())
    f = func.FuncOp(func_name, ((), ()), Region(block))
    return ModuleOp([f], attributes={MODEL_CONFIG_ATTR: StringAttr(json.dumps(cfg.to_dict()))})


def iter_nn_ops(module: ModuleOp) -> Iterator:
    """Every nn op of the module, nested ones included."""
    for op in module.walk():
        if op.dialect_name() == "nn":
            yield op
