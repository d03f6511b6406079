"""Weights: seeded random initialisation, and Hugging Face safetensors checkpoints, memory-mapped.

A `WeightStore` is a read-only mapping from parameter name (checkpoint key without `vision_model.`) to a numpy
array. Checkpoint tensors are `np.memmap` views into the file: importing the 1.7 GB So400m checkpoint reads only
its JSON header. Stacked names, as `nn-outline-repeat` creates them (`encoder.layers.*.mlp.fc1.weight`), resolve to
a `LazyStack`: indexing it with a layer number returns that layer's array, and only `np.asarray` materialises the
whole stack.

The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, a JSON
header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw little-endian
tensor bytes, offsets relative to the end of the header.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import ml_dtypes
import numpy as np

from ipu.frontend.siglip import LAYER_PREFIX, SiglipVisionConfig, layer_param_shapes, param_shapes

# safetensors dtype codes for the floating formats a checkpoint may hold.
SAFETENSORS_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
}
_DTYPE_CODES = {v: k for k, v in SAFETENSORS_DTYPES.items()}

VISION_PREFIX = "vision_model."
# Keys of a full SiglipModel checkpoint that are not part of the vision tower.
IGNORED_PREFIXES = ("text_model.", "logit_scale", "logit_bias")

STACK_MARK = "*"


class CheckpointError(ValueError):
    """A checkpoint that does not match the model: names the key, the expected and the found shape or dtype."""


def stacked_name(suffix: str) -> str:
    """The name of a parameter stacked over all encoder layers, e.g. `encoder.layers.*.mlp.fc1.weight`."""
    return f"{LAYER_PREFIX}.{STACK_MARK}.{suffix}"


_STACKED_RE = re.compile(rf"^{re.escape(LAYER_PREFIX)}\.\*\.(.+)$")


class LazyStack:
    """A [layers, ...] parameter whose layers stay separate arrays until someone asks for the whole stack."""

    def __init__(self, name: str, layers: list[np.ndarray]):
        if not layers:
            raise CheckpointError(f"stacked parameter {name!r} has no layers")
        shapes = {a.shape for a in layers}
        if len(shapes) != 1:
            raise CheckpointError(
                f"stacked parameter {name!r}: layers have different shapes {sorted(shapes)}"
            )
        self.name = name
        self.layers = layers
        self.shape = (len(layers), *layers[0].shape)
        self.dtype = layers[0].dtype
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, index):
        if isinstance(index, int | np.integer):
            return self.layers[index]
        return np.asarray(self)[index]

    def __array__(self, dtype=None, copy=None):
        out = np.stack(self.layers)
        return out if dtype is None else out.astype(dtype, copy=False)


class WeightStore(Mapping):
    """Parameter name -> array, with stacked names resolved lazily (see module docstring)."""

    def __init__(
        self, tensors: Mapping[str, np.ndarray], source: str = "<memory>", keep_alive: object = None
    ):
        self._tensors = dict(tensors)
        self.source = source
        self._keep_alive = keep_alive

    def __getitem__(self, name: str):
        if name in self._tensors:
            return self._tensors[name]
        m = _STACKED_RE.match(name)
        if m:
            layers = []
            i = 0
            while (key := f"{LAYER_PREFIX}.{i}.{m.group(1)}") in self._tensors:
                layers.append(self._tensors[key])
                i += 1
            if layers:
                return LazyStack(name, layers)
        raise KeyError(f"parameter {name!r} is not in the weights ({self.source})")

    def __contains__(self, name: object) -> bool:
        try:
            self[name]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._tensors.values())

    def validate(self, cfg: SiglipVisionConfig) -> None:
        """Every parameter the config needs is present with its shape and a floating dtype."""
        check_params(self._tensors, cfg, self.source)


def check_params(tensors: Mapping[str, np.ndarray], cfg: SiglipVisionConfig, source: str) -> None:
    expected = param_shapes(cfg)
    missing = [k for k in expected if k not in tensors]
    if missing:
        shown = ", ".join(f"{k} (expected shape {list(expected[k])})" for k in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise CheckpointError(f"{source}: missing key {shown}{more}")
    for k, shape in expected.items():
        a = tensors[k]
        if tuple(a.shape) != shape:
            raise CheckpointError(f"{source}: key {k!r} has shape {list(a.shape)}, expected {list(shape)}")
        if a.dtype not in _DTYPE_CODES:
            raise CheckpointError(
                f"{source}: key {k!r} has dtype {a.dtype}, expected a floating dtype ({', '.join(SAFETENSORS_DTYPES)})"
            )


# ----------------------------------------------------------------------------------------------------------------
# Random initialisation


def random_weights(cfg: SiglipVisionConfig, seed: int = 0, perturbed: bool = True) -> WeightStore:
    """Seeded random float32 weights in the shapes of `param_shapes(cfg)`.

    The base is Hugging Face's SigLIP initialisation (Xavier-uniform linears, LeCun-normal patch kernel, position
    embeddings N(0, 1/D), zero biases, LayerNorm 1/0). With `perturbed` (the default), as SIGLIP.md recommends so
    that a dropped or swapped parameter shows: biases N(0, 0.02^2), LayerNorm weights 1 + N(0, 0.1^2) and biases
    N(0, 0.1^2), q and k weights doubled, probe N(0, 1).
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}

    def normal(shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32, copy=False)

    for name, shape in param_shapes(cfg).items():
        leaf = name.rsplit(".", 1)[-1]
        is_ln = "layer_norm" in name or "layernorm" in name
        if name == "embeddings.patch_embedding.weight":
            fan_in = math.prod(shape[1:])
            a = normal(shape, math.sqrt(1.0 / fan_in))
        elif name == "embeddings.position_embedding.weight":
            a = normal(shape, 1.0 / math.sqrt(cfg.hidden_size))
        elif name == "head.probe":
            a = normal(shape, 1.0) if perturbed else _xavier(rng, (shape[-1], shape[-1]))[:1].reshape(shape)
        elif is_ln and leaf == "weight":
            a = 1.0 + normal(shape, 0.1) if perturbed else np.ones(shape, np.float32)
        elif is_ln and leaf == "bias":
            a = normal(shape, 0.1) if perturbed else np.zeros(shape, np.float32)
        elif leaf in ("bias", "in_proj_bias"):
            a = normal(shape, 0.02) if perturbed else np.zeros(shape, np.float32)
        else:  # linear weights [out, in]
            a = _xavier(rng, shape)
            if perturbed and (".q_proj." in name or ".k_proj." in name):
                a *= 2.0
            if perturbed and leaf == "in_proj_weight":
                a[: 2 * cfg.hidden_size] *= 2.0  # the head's q and k rows
        out[name] = np.ascontiguousarray(a, dtype=np.float32)
    return WeightStore(out, source=f"random(seed={seed}, perturbed={perturbed})")


def _xavier(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    fan_out, fan_in = shape[0], math.prod(shape[1:])
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------------
# safetensors


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of one safetensors file as read-only memory maps (nothing is read but the header).

    The header is validated before any tensor is mapped (`parse_safetensors_header`): a JSON object whose
    entries each have a dtype, a shape of non-negative integers and data offsets [begin, end] inside the data,
    pairwise disjoint, of the size the shape and dtype imply."""
    path = Path(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (header_len,) = struct.unpack("<Q", raw)
        file_size = path.stat().st_size
        if header_len > min(100_000_000, file_size - 8):
            raise CheckpointError(
                f"{path}: implausible safetensors header length {header_len} (the file has {file_size} bytes)"
            )
        blob = f.read(header_len)
    data_start = 8 + header_len
    entries = parse_safetensors_header(blob, file_size - data_start, str(path))
    out: dict[str, np.ndarray] = {}
    for key, (code, shape, begin, _end) in entries.items():
        dtype = SAFETENSORS_DTYPES.get(code)
        if dtype is None:
            # Kept as raw bytes so that validation can name the key and its dtype.
            out[key] = _UnsupportedTensor(key, code, shape)
            continue
        if math.prod(shape) == 0:
            out[key] = np.zeros(shape, dtype)
        else:
            out[key] = np.memmap(path, dtype=dtype, mode="r", offset=data_start + begin, shape=shape)
    return out


# Element sizes of the safetensors dtype codes (those this project does not read too, to check their offsets).
_CODE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
_CODE_BYTES.update({"U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1})


def parse_safetensors_header(
    blob: bytes, data_bytes: int, source: str
) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """key -> (dtype code, shape, begin, end) of a safetensors header, every entry checked (see read_safetensors);
    raises CheckpointError naming the file and the key."""

    def no_repeats(pairs: list[tuple[str, object]]) -> dict:
        seen = set()
        for k, _ in pairs:
            if k in seen:  # json.loads would keep the last entry of a key silently
                raise CheckpointError(f"{source}: the safetensors header has key {k!r} twice")
            seen.add(k)
        return dict(pairs)

    try:
        header = json.loads(blob, object_pairs_hook=no_repeats)
    except (UnicodeDecodeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{source}: the safetensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(
            f"{source}: the safetensors header is a JSON {type(header).__name__}, not an object"
        )
    out: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
    for key, info in header.items():
        if key == "__metadata__":
            if not isinstance(info, dict):
                raise CheckpointError(f"{source}: '__metadata__' must be an object of strings")
            continue
        where = f"{source}: key {key!r}"
        if not isinstance(info, dict):
            raise CheckpointError(
                f"{where}: entry must be an object with dtype, shape, data_offsets, got {info!r}"
            )
        missing = [k for k in ("dtype", "shape", "data_offsets") if k not in info]
        if missing:
            raise CheckpointError(f"{where}: entry lacks {', '.join(missing)}")
        code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(code, str) or code not in _CODE_BYTES:
            raise CheckpointError(f"{where}: unknown dtype {code!r} (known: {', '.join(_CODE_BYTES)})")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise CheckpointError(f"{where}: shape must be a list of non-negative integers, got {shape!r}")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int and o >= 0 for o in offsets)
        ):
            raise CheckpointError(
                f"{where}: data_offsets must be [begin, end] (non-negative integers), got {offsets!r}"
            )
        begin, end = offsets
        size = math.prod(shape) * _CODE_BYTES[code]
        if end - begin != size:
            raise CheckpointError(
                f"{where}: data offsets {begin}..{end} ({end - begin} bytes) do not match shape {shape} of "
                f"{code} ({size} bytes)"
            )
        if end > data_bytes:
            raise CheckpointError(
                f"{where}: data offsets {begin}..{end} reach past the end of the data ({data_bytes} bytes)"
            )
        out[key] = (code, tuple(shape), begin, end)
    spans = sorted((b, e, k) for k, (_, _, b, e) in out.items() if e > b)
    for (b0, e0, k0), (b1, e1, k1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise CheckpointError(
                f"{source}: keys {k0!r} ({b0}..{e0}) and {k1!r} ({b1}..{e1}) overlap in the data"
            )
    # The tensors cover the data exactly, as safetensors requires: bytes no tensor names are a damaged or
    # hand-edited file (an offset moved, a tensor dropped from the header).
    covered = sum(e - b for b, e, _ in spans)
    if covered != data_bytes:
        raise CheckpointError(
            f"{source}: the header's tensors cover {covered} of the {data_bytes} data bytes (safetensors data is "
            "the tensors back to back, nothing else)"
        )
    return out


def check_finite(weights: Mapping[str, np.ndarray], chunk: int = 1 << 22) -> None:
    """Raises CheckpointError naming the first parameter holding a NaN or an infinity (read in chunks: a
    memory-mapped checkpoint is not loaded whole)."""
    for name in weights:
        a = weights[name]
        flat = np.asarray(a).reshape(-1)
        for i in range(0, flat.size, chunk):
            part = np.asarray(flat[i : i + chunk], dtype=np.float32)
            bad = ~np.isfinite(part)
            if bad.any():
                j = i + int(np.argmax(bad))
                idx = [int(v) for v in np.unravel_index(j, np.shape(a))]
                raise CheckpointError(
                    f"{getattr(weights, 'source', '<weights>')}: key {name!r} holds non-finite values (first at "
                    f"{idx}: {flat[j]}); --allow-nonfinite to run anyway"
                )


class _UnsupportedTensor:
    """Stands for a tensor whose dtype this project does not read (e.g. integers): only its metadata."""

    def __init__(self, key: str, dtype_code: str, shape: tuple[int, ...]):
        self.key, self.dtype, self.shape = key, np.dtype("V1"), shape
        self.dtype_code = dtype_code
        self.nbytes = 0


def write_safetensors(
    tensors: Mapping[str, np.ndarray],
    path: str | Path,
    prefix: str = "",
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Writes tensors (keys prefixed by `prefix`) one at a time, so a LazyStack or memmap is never copied whole."""
    header: dict[str, object] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    names = list(tensors)
    for name in names:
        a = tensors[name]
        dtype = np.dtype(a.dtype)
        if dtype.newbyteorder("<") not in _DTYPE_CODES and dtype not in _DTYPE_CODES:
            raise CheckpointError(f"cannot write key {name!r}: dtype {dtype} has no safetensors code here")
        size = math.prod(a.shape) * dtype.itemsize
        header[prefix + name] = {
            "dtype": _DTYPE_CODES[dtype],
            "shape": list(a.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # keep tensor data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name]).tobytes())


def _checkpoint_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(
                f"{index}: not a safetensors index with a 'weight_map' object ({e})"
            ) from None
        if not all(isinstance(s, str) and s and "/" not in s and s != ".." for s in shards):
            raise CheckpointError(f"{index}: weight_map names shards that are not file names beside it")
        return [path / s for s in shards]
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    found = sorted(path.glob("*.safetensors"))
    if not found:
        raise CheckpointError(
            f"{path}: no safetensors checkpoint (model.safetensors or a sharded index) found"
        )
    return found


def load_checkpoint(
    path: str | Path, cfg: SiglipVisionConfig | None = None
) -> tuple[WeightStore, SiglipVisionConfig]:
    """Imports a SigLIP vision checkpoint: a `.safetensors` file, or a directory (config.json + weights).

    Accepts both key styles (with and without `vision_model.`), ignores `text_model.*` and `logit_*`. The config
    comes from `cfg`, else from a config.json beside the weights. Tensors stay memory-mapped.
    """
    path = Path(path)
    if cfg is None:
        cfg_file = (path if path.is_dir() else path.parent) / "config.json"
        if not cfg_file.is_file():
            raise CheckpointError(f"{path}: no config given and no config.json beside the checkpoint")
        cfg = SiglipVisionConfig.from_json(cfg_file)
    tensors: dict[str, np.ndarray] = {}
    unexpected: list[str] = []
    for file in _checkpoint_files(path):
        for key, arr in read_safetensors(file).items():
            if key.startswith(IGNORED_PREFIXES):
                continue
            name = key[len(VISION_PREFIX) :] if key.startswith(VISION_PREFIX) else key
            if name.startswith(IGNORED_PREFIXES):
                continue
            if name in tensors:
                raise CheckpointError(
                    f"{path}: key {name!r} appears twice (with and without {VISION_PREFIX!r}?)"
                )
            tensors[name] = arr
    expected = param_shapes(cfg)
    for name in tensors:
        if name not in expected:
            unexpected.append(name)
    for name, a in tensors.items():
        if isinstance(a, _UnsupportedTensor) and name in expected:
            raise CheckpointError(
                f"{path}: key {name!r} has dtype {a.dtype_code}, expected a floating dtype ({', '.join(SAFETENSORS_DTYPES)})"
            )
    if unexpected:
        shown = ", ".join(unexpected[:5]) + (
            f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else ""
        )
        raise CheckpointError(
            f"{path}: unexpected key {shown}: not a parameter of this SigLIP vision config "
            f"({cfg.num_hidden_layers} layers, hidden size {cfg.hidden_size})"
        )
    store = WeightStore({k: tensors[k] for k in expected if k in tensors}, source=str(path))
    store.validate(cfg)
    return store, cfg


def save_checkpoint(
    weights: Mapping[str, np.ndarray],
    cfg: SiglipVisionConfig,
    directory: str | Path,
    with_prefix: bool = False,
) -> Path:
    """Writes `config.json` + `model.safetensors` in Hugging Face's layout (keys optionally `vision_model.`-prefixed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    hf = {"model_type": "siglip_vision_model", "architectures": ["SiglipVisionModel"], **cfg.to_dict()}
    (directory / "config.json").write_text(json.dumps(hf, indent=2))
    names = list(param_shapes(cfg))
    write_safetensors(
        {n: weights[n] for n in names},
        directory / "model.safetensors",
        prefix=VISION_PREFIX if with_prefix else "",
    )
    return directory / "model.safetensors"


__all__ = [
    "CheckpointError",
    "LazyStack",
    "check_finite",
    "WeightStore",
    "layer_param_shapes",
    "load_checkpoint",
    "random_weights",
    "read_safetensors",
    "save_checkpoint",
    "stacked_name",
    "write_safetensors",
]
