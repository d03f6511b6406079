"""The package: everything a device needs to run a compiled model, in one file (`.ipupkg`).

A package holds the target it was compiled for, the code image (one image shared by every tile: tiles differ by
their data, i.e. per-tile frames, vertex states and exchange tables, never by code), per-tile data segments,
protected ranges, the entry symbol, and the bindings of host tensors (parameters, inputs, outputs) to tile
memory.

A binding says where each element of a host tensor lives on the device: a table of chunks, one row per contiguous
run on a tile, `(tile, address, source element offset, count, source stride)`: tile memory at `address` holds, in
order, the host tensor's (flat, row-major) elements `offset + i * stride` for `i < count`, converted to the
binding's device element type (f32, f16, or FP8 F143/F152 with a power-of-two scale: stored = round(x * 2^-scale),
saturating). Row-major blocks use stride 1; AMP micro-panels stored column by column use the row length as stride.
A parameter binding may name a stacked parameter (`encoder.layers.*.<suffix>`): its host tensor is [L, ...].

File format (version 2): a zip archive holding `manifest.json` and numpy `.npy` arrays under `arrays/`; each
array is stored, or deflated when that saves at least a tenth of its bytes (segment tables are mostly zeros):

    manifest.json  {"format": "ipupkg", "version": 2,
                    "target": {Target fields},
                    "code": {"base": int, "kernels": {name: [address, is_supervisor]}, "labels": {name: address},
                             "image": "arrays/code.npy"},
                    "entry": str,
                    "segments": [{"name", "address", "rows": int, "bytes": int,
                                  "unique": "arrays/..npy" | null, "index": "arrays/..npy" | null,
                                  "tiles": "arrays/..npy" | null}],
                    "protected": [[start, end, "what"], ...],
                    "parameters" | "inputs" | "outputs" | "debug": [{"name", "shape", "dtype", "scale", "chunks",
                                                                  ["via", "via_scale"]}],
                    "metadata": {...}}

A segment's data is uint8 [rows, bytes] (see `Segment`), stored per class of identical rows: `unique` is uint8
[u, bytes], the distinct rows that are not all zero, in order of first appearance (null when u == 0); `index` is
int32 [rows], row i = unique[index[i]], or zeros where index[i] == -1 (null: row i = unique[i], i.e. every row
distinct and non-zero).
With `tiles` null, row 0 goes to every tile (rows == 1) or row t to tile t (rows == tiles); with `tiles` an int32
array, row i goes to tile tiles[i]. (So the 1472-tile package of a model stores each kernel frame or exchange
table once per distinct content, not once per tile; loading is one gather per segment.)

Version history: 1 = stored arrays, each segment as its whole [rows, bytes] array (not readable any more:
recompile the model); 2 = segments per class of identical rows, deflated arrays.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

from ipu.backend.target import IPU21, Target

FORMAT_VERSION = 2
# Members of a package unpack to at most this: twice the whole IPU21's SRAM (code and segment images of every
# tile, the manifest and memory map); a larger declared size is a damaged or hostile archive, refused at open.
MAX_PACKAGE_BYTES = 2 * IPU21.total_sram_bytes
DEFLATE_MIN_SAVING = 0.1  # deflate an array when that saves at least this fraction

DEVICE_DTYPES: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "f8e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),  # Graphcore F143
    "f8e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),  # Graphcore F152
}
# A chunk writes `count` consecutive device elements from `address` on `tile`; device element i of it is host
# element offset + (i // inner) * outer + (i % inner) * stride (flat index into the host tensor): runs of `inner`
# elements `stride` apart, the runs `outer` apart (a 2-D piece of the host tensor, e.g. a 16 x 32 block of an
# `ampw` weight panel). Chunk tables of one-level runs (inner = count) may have the first five columns only.
CHUNK_COLUMNS = ("tile", "address", "offset", "count", "stride", "inner", "outer")
ONE_LEVEL_COLUMNS = 5


def as_chunk_table(chunks) -> np.ndarray:
    """A chunk table as int64 [n, 7] (CHUNK_COLUMNS): five-column rows (one-level runs) get inner = count,
    outer = 0."""
    c = np.asarray(chunks, dtype=np.int64)
    if c.ndim == 2 and c.shape[1] == len(CHUNK_COLUMNS):
        return c
    c = c.reshape(-1, ONE_LEVEL_COLUMNS)
    return np.concatenate([c, c[:, 3:4], np.zeros((len(c), 1), np.int64)], axis=1)


class PackageError(ValueError):
    """A malformed package or a host tensor that does not match its binding (names the binding)."""


def to_device(values: np.ndarray, dtype: str, scale: int = 0) -> np.ndarray:
    """Host values -> the device element type: f16 rounds to nearest even; FP8 scales by 2^-scale, saturates at
    the format's largest finite value (the IPU's NaN-on-overflow off), then rounds to nearest even."""
    dt = DEVICE_DTYPES[dtype]
    x = np.asarray(values, dtype=np.float32)
    if dtype.startswith("f8"):
        x = x * np.float32(2.0**-scale)
        big = float(ml_dtypes.finfo(dt).max)
        x = np.clip(x, -big, big)
        return x.astype(dt)
    with np.errstate(over="ignore"):
        out = x.astype(dt)
    over = np.isfinite(x) & ~np.isfinite(out)  # finite values past the format's range (f16: 65504)
    if over.any():
        i = int(np.flatnonzero(over.reshape(-1))[0])
        raise PackageError(
            f"{int(over.sum())} finite values exceed the {dtype} range (largest {float(np.finfo(dt).max):g}), "
            f"e.g. element {i} = {float(x.reshape(-1)[i]):g}"
        )
    return out


def from_device(raw: np.ndarray, dtype: str, scale: int = 0) -> np.ndarray:
    """Device elements -> float32 host values (FP8: decode * 2^scale)."""
    x = np.asarray(raw).astype(np.float32)
    if dtype.startswith("f8"):
        x = x * np.float32(2.0**scale)
    return x


def dumps_indent1(obj) -> str:
    """`json.dumps(obj, indent=1)`, the same text, faster: json's indenting encoder is pure Python, so long lists
    of numbers (the memory map's placements and occupancy, binding tables) are written here with one join per
    list. Anything but dicts with string keys, lists, str, int, float, bool and None: json.dumps itself."""
    try:
        parts: list[str] = []
        _emit(obj, 0, parts)
    except _Unsupported:
        return json.dumps(obj, indent=1)
    return "".join(parts)


class _Unsupported(Exception):
    pass


_SCALARS = (str, int, float, bool, type(None))


def _emit(obj, depth: int, out: list[str]) -> None:
    if isinstance(obj, str):
        out.append(json.encoder.encode_basestring_ascii(obj))
    elif obj is None or isinstance(obj, bool | int | float):
        out.append(json.dumps(obj) if isinstance(obj, float | bool) or obj is None else int.__repr__(obj))
    elif isinstance(obj, list | tuple):
        if not obj:
            out.append("[]")
            return
        inner = "\n" + " " * (depth + 1)
        if all(type(x) is int for x in obj):
            out.append("[" + inner + ("," + inner).join(map(int.__repr__, obj)) + "\n" + " " * depth + "]")
            return
        out.append("[")
        for i, x in enumerate(obj):
            out.append(inner if i == 0 else "," + inner)
            _emit(x, depth + 1, out)
        out.append("\n" + " " * depth + "]")
    elif isinstance(obj, dict):
        if not obj:
            out.append("{}")
            return
        inner = "\n" + " " * (depth + 1)
        out.append("{")
        for i, (k, v) in enumerate(obj.items()):
            if not isinstance(k, str):
                raise _Unsupported
            out.append((inner if i == 0 else "," + inner) + json.encoder.encode_basestring_ascii(k) + ": ")
            _emit(v, depth + 1, out)
        out.append("\n" + " " * depth + "}")
    else:
        raise _Unsupported


@dataclass
class Binding:
    """A host tensor's place on the device (see the module docstring)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    chunks: np.ndarray  # int64 [n, 7]: CHUNK_COLUMNS (given [n, 5]: one-level runs)
    scale: int = 0
    # Host-side rounding before the device conversion: values pass through this FP8 format (with `via_scale`)
    # first, e.g. FP8-quantized weights stored as f16 for an F16 kernel ("" = none).
    via: str = ""
    via_scale: int = 0

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        for dt in (self.dtype, self.via or self.dtype):
            if dt not in DEVICE_DTYPES:
                raise PackageError(f"binding {self.name!r}: unknown device dtype {dt!r}")
        self.chunks = as_chunk_table(self.chunks)
        size = int(np.prod(self.shape, dtype=np.int64))
        c = self.chunks
        if len(c):
            inner = np.maximum(c[:, 5], 1)
            last = c[:, 2] + (c[:, 3] - 1) // inner * c[:, 6] + (np.minimum(c[:, 3], inner) - 1) * c[:, 4]
            bad_rows = (c[:, 2] < 0) | (last >= size) | (c[:, 3] <= 0) | (c[:, 5] <= 0)
            if bad_rows.any():
                bad = int(np.nonzero(bad_rows)[0][0])
                row = c[bad].tolist()
                if row[5] == row[3]:  # a one-level run: its five columns
                    row = row[:ONE_LEVEL_COLUMNS]
                raise PackageError(
                    f"binding {self.name!r}: chunk #{bad} {row} reaches outside the tensor of shape "
                    f"{list(self.shape)}"
                )

    @property
    def itemsize(self) -> int:
        return DEVICE_DTYPES[self.dtype].itemsize

    def element_index(self) -> np.ndarray:
        """The flat host index of every device element, chunk after chunk (int64)."""
        c = self.chunks
        counts = c[:, 3]
        starts = np.repeat(c[:, 2], counts)
        step = np.repeat(c[:, 4], counts)
        within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        if (c[:, 5] == c[:, 3]).all():  # one-level runs
            return starts + within * step
        inner = np.repeat(c[:, 5], counts)
        return starts + within // inner * np.repeat(c[:, 6], counts) + within % inner * step

    def to_json(self, arrays: dict[str, np.ndarray], kind: str) -> dict:
        key = f"arrays/{kind}/{len(arrays)}.npy"
        one_level = (self.chunks[:, 5] == self.chunks[:, 3]).all()
        arrays[key] = np.ascontiguousarray(self.chunks[:, :ONE_LEVEL_COLUMNS]) if one_level else self.chunks
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "scale": self.scale,
            "chunks": key,
            **({"via": self.via, "via_scale": self.via_scale} if self.via else {}),
        }

    @classmethod
    def from_json(cls, d: dict, arrays) -> Binding:
        return cls(
            d["name"],
            tuple(d["shape"]),
            d["dtype"],
            arrays(d["chunks"]),
            int(d.get("scale", 0)),
            d.get("via", ""),
            int(d.get("via_scale", 0)),
        )


@dataclass
class Segment:
    """Initial data for tile memory (frames, vertex states, exchange tables, constants)."""

    name: str
    address: int
    data: np.ndarray  # uint8 [rows, bytes]
    tiles: np.ndarray | None = (
        None  # which tile each row goes to; None: broadcast (1 row) or one row per tile
    )

    def __post_init__(self) -> None:
        self.data = np.ascontiguousarray(self.data).view(np.uint8)
        if self.data.ndim == 1:
            self.data = self.data.reshape(1, -1)
        if self.tiles is not None:
            self.tiles = np.asarray(self.tiles, dtype=np.int32)
            if len(self.tiles) != self.data.shape[0]:
                raise PackageError(
                    f"segment {self.name!r}: {self.data.shape[0]} rows of data for {len(self.tiles)} tiles"
                )


@dataclass
class Package:
    target: Target
    code: bytes
    code_base: int
    kernels: dict[str, tuple[int, bool]]
    labels: dict[str, int]
    entry: str
    segments: list[Segment] = field(default_factory=list)
    protected: list[tuple[int, int, str]] = field(default_factory=list)
    parameters: list[Binding] = field(default_factory=list)
    inputs: list[Binding] = field(default_factory=list)
    outputs: list[Binding] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    # Intermediate values kept for debugging (compile_model(debug_values=True)): read with Session.read.
    debug: list[Binding] = field(default_factory=list)

    def validate(self) -> None:
        """Everything lands inside the target's SRAM; segments don't write into protected ranges."""
        t = self.target
        if self.entry not in self.labels:
            raise PackageError(f"entry symbol {self.entry!r} is not a label of the code")
        if not t.in_sram(self.code_base, len(self.code)) or not t.is_executable(
            self.code_base + len(self.code) - 1
        ):
            raise PackageError(
                f"code image [{self.code_base:#x}, {self.code_base + len(self.code):#x}) is not inside region 0"
            )
        for s in self.segments:
            if not t.in_sram(s.address, s.data.shape[1]):
                raise PackageError(
                    f"segment {s.name!r} at {s.address:#x} (+{s.data.shape[1]} B) is outside SRAM"
                )
            for lo, hi, what in self.protected:
                if s.address < hi and lo < s.address + s.data.shape[1]:
                    raise PackageError(
                        f"segment {s.name!r} at {s.address:#x} overlaps protected range {what!r}"
                    )
        for kind in ("parameters", "inputs", "outputs", "debug"):
            for b in getattr(self, kind):
                c = b.chunks
                if len(c) == 0:
                    continue
                end = c[:, 1] + c[:, 3] * b.itemsize
                if (c[:, 0] < 0).any() or (c[:, 0] >= t.num_tiles).any():
                    raise PackageError(
                        f"{kind[:-1]} {b.name!r}: a chunk names a tile outside [0, {t.num_tiles})"
                    )
                if (c[:, 1] < t.sram_base).any() or (end > t.sram_end).any():
                    bad = int(np.nonzero((c[:, 1] < t.sram_base) | (end > t.sram_end))[0][0])
                    raise PackageError(
                        f"{kind[:-1]} {b.name!r}: chunk on tile {int(c[bad, 0])} at {int(c[bad, 1]):#x} is outside SRAM"
                    )

    # ------------------------------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        path = Path(path)
        self._write(path)
        return path

    def to_bytes(self) -> bytes:
        """The `.ipupkg` file's bytes (what `save` writes)."""
        buf = io.BytesIO()
        self._write(buf)
        return buf.getvalue()

    def _write(self, dest: Path | io.BytesIO) -> None:
        arrays: dict[str, np.ndarray] = {"arrays/code.npy": np.frombuffer(self.code, dtype=np.uint8)}
        segs = []
        for i, s in enumerate(self.segments):
            unique, index = encode_rows(s.data)
            key = f"arrays/segments/{i}"
            entry = {"name": s.name, "address": s.address, "rows": int(s.data.shape[0])}
            entry["bytes"] = int(s.data.shape[1])
            entry["unique"] = entry["index"] = entry["tiles"] = None
            if len(unique):
                arrays[f"{key}.unique.npy"] = unique
                entry["unique"] = f"{key}.unique.npy"
            if index is not None:
                arrays[f"{key}.index.npy"] = index
                entry["index"] = f"{key}.index.npy"
            if s.tiles is not None:
                arrays[f"{key}.tiles.npy"] = s.tiles
                entry["tiles"] = f"{key}.tiles.npy"
            segs.append(entry)
        manifest = {
            "format": "ipupkg",
            "version": FORMAT_VERSION,
            "target": dataclasses.asdict(self.target),
            "code": {
                "base": self.code_base,
                "kernels": {k: [a, s] for k, (a, s) in self.kernels.items()},
                "labels": self.labels,
                "image": "arrays/code.npy",
            },
            "entry": self.entry,
            "segments": segs,
            "protected": [list(p) for p in self.protected],
            "parameters": [b.to_json(arrays, "parameters") for b in self.parameters],
            "inputs": [b.to_json(arrays, "inputs") for b in self.inputs],
            "outputs": [b.to_json(arrays, "outputs") for b in self.outputs],
            "metadata": self.metadata,
            "debug": [b.to_json(arrays, "debug") for b in self.debug],
        }
        with zipfile.ZipFile(dest, "w") as z:
            z.writestr(_member("manifest.json"), dumps_indent1(manifest), compress_type=zipfile.ZIP_DEFLATED)
            for key, arr in arrays.items():
                buf = io.BytesIO()
                np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
                raw = buf.getbuffer()
                # Deflate where it pays (level 1: fast; the tables are mostly zeros and compress 100x).
                deflate = len(raw) > 512 and _deflate_pays(raw)
                kind = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
                z.writestr(_member(key), raw, compress_type=kind, compresslevel=1 if deflate else None)

    @classmethod
    def load(cls, path: str | Path) -> Package:
        path = Path(path)
        try:
            z = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, FileNotFoundError, IsADirectoryError) as e:
            raise PackageError(f"{path}: not a package ({e})") from None
        with z:
            # Sizes the archive declares, before anything is inflated: a few-MB file can declare gigabytes.
            infos = z.infolist()
            total = sum(i.file_size for i in infos)
            if total > MAX_PACKAGE_BYTES:
                big = max(infos, key=lambda i: i.file_size)
                raise PackageError(
                    f"{path}: the archive's members unpack to {total} bytes ({big.filename!r}: {big.file_size}), "
                    f"more than a package of the whole IPU21 can hold ({MAX_PACKAGE_BYTES})"
                )
            try:
                manifest = json.loads(z.read("manifest.json"))
            except KeyError:
                raise PackageError(f"{path}: no manifest.json: not a package") from None
            except (zipfile.BadZipFile, zlib.error, ValueError) as e:
                raise PackageError(f"{path}: corrupted manifest.json ({e})") from None
            if not isinstance(manifest, dict) or manifest.get("format") != "ipupkg":
                raise PackageError(f"{path}: manifest.json is not an ipupkg manifest")
            version = manifest.get("version")
            if version != FORMAT_VERSION:
                old = isinstance(version, int) and version < FORMAT_VERSION
                raise PackageError(
                    f"{path}: ipupkg format version {version!r}, this runtime reads version {FORMAT_VERSION}"
                    + (": written by an older ipu-vit, recompile the model" if old else "")
                )

            def array(key: str) -> np.ndarray:
                try:
                    return np.load(io.BytesIO(z.read(key)), allow_pickle=False)
                except KeyError:
                    raise PackageError(f"{path}: manifest names {key!r}, which the archive lacks") from None
                except (zipfile.BadZipFile, zlib.error, ValueError, EOFError, OSError) as e:
                    raise PackageError(f"{path}: array {key!r} is corrupted ({e})") from None

            check_manifest(manifest, path)
            try:
                code = manifest["code"]
                pkg = cls(
                    target=manifest_target(manifest["target"], path),
                    code=array(code["image"]).tobytes(),
                    code_base=int(code["base"]),
                    kernels={k: (int(a), bool(s)) for k, (a, s) in code["kernels"].items()},
                    labels={k: int(v) for k, v in code["labels"].items()},
                    entry=manifest["entry"],
                    segments=[_load_segment(s, array, path) for s in manifest["segments"]],
                    protected=[(int(a), int(b), str(w)) for a, b, w in manifest["protected"]],
                    parameters=[Binding.from_json(b, array) for b in manifest["parameters"]],
                    inputs=[Binding.from_json(b, array) for b in manifest["inputs"]],
                    outputs=[Binding.from_json(b, array) for b in manifest["outputs"]],
                    metadata=manifest.get("metadata", {}),
                    debug=[Binding.from_json(b, array) for b in manifest.get("debug", [])],
                )
            except (KeyError, TypeError, ValueError, OverflowError) as e:
                if isinstance(e, PackageError):
                    raise PackageError(f"{path}: {e}") from None
                raise PackageError(f"{path}: malformed manifest ({type(e).__name__}: {e})") from None
        try:
            pkg.validate()
            pkg.check_contents()
        except PackageError as e:
            raise PackageError(f"{path}: {e}") from None
        return pkg

    def check_contents(self) -> None:
        """The manifest agrees with the contents: labels and kernels inside the code image, segment rows and tile
        lists for the target's tiles, and the bindings in the shapes of the model config the metadata names."""
        t = self.target
        code_end = self.code_base + len(self.code)
        for kind, table in (("label", self.labels), ("kernel", {k: a for k, (a, _) in self.kernels.items()})):
            for name, addr in table.items():
                if not self.code_base <= addr < max(code_end, self.code_base + 1):
                    raise PackageError(
                        f"{kind} {name!r} at {addr:#x} is outside the code image [{self.code_base:#x}, {code_end:#x})"
                    )
        for s in self.segments:
            rows = s.data.shape[0]
            if s.tiles is None:
                if rows not in (1, t.num_tiles):
                    raise PackageError(
                        f"segment {s.name!r}: {rows} rows without a tile list: need 1 (broadcast) or {t.num_tiles}"
                    )
            elif len(s.tiles) and (s.tiles.min() < 0 or s.tiles.max() >= t.num_tiles):
                raise PackageError(
                    f"segment {s.name!r}: tile list names tile {int(s.tiles.max() if s.tiles.max() >= t.num_tiles else s.tiles.min())}, "
                    f"outside [0, {t.num_tiles})"
                )
        config = self.metadata.get("config")
        if config is None:
            return
        from ipu.frontend.siglip import SiglipVisionConfig, param_shapes

        try:
            cfg = SiglipVisionConfig.from_dict(config)
        except ValueError as e:
            raise PackageError(f"metadata 'config': {e}") from None
        expected = param_shapes(cfg)
        layers = cfg.num_hidden_layers
        for b in self.inputs:
            want = (1, cfg.num_channels, cfg.image_size, cfg.image_size)
            if b.name == "pixel_values" and b.shape != want:
                raise PackageError(
                    f"input 'pixel_values' has shape {list(b.shape)}, the metadata's config implies {list(want)}"
                )
        for b in self.parameters:
            name = b.name
            if ".*." in name:
                want = expected.get(name.replace(".*.", ".0.", 1))
                want = None if want is None else (layers, *want)
            else:
                want = expected.get(name)
            # Derived parameters (ipu.runtime.derived) have names of their own and are computed from these.
            if want is not None and b.shape != want:
                raise PackageError(
                    f"parameter {name!r} has shape {list(b.shape)}, the metadata's config implies {list(want)}"
                )


_TARGET_FIELDS = {f.name: f for f in dataclasses.fields(Target)}
# Target fields a package may set; every other field must be the IPU21's (the simulator models that machine).
_VARIABLE_TARGET_FIELDS = ("name", "num_tiles", "sram_bytes")


def manifest_target(d: object, path: Path) -> Target:
    """The manifest's target, each field of the type Target declares, the machine an IPU21 variant."""
    if not isinstance(d, dict):
        raise PackageError(f"manifest 'target' must be an object, got {type(d).__name__}")
    unknown = sorted(set(d) - set(_TARGET_FIELDS))
    if unknown:
        raise PackageError(f"manifest 'target' has unknown fields {unknown}")
    ipu21 = Target()
    values = {}
    for k, v in d.items():
        default = getattr(ipu21, k)
        if isinstance(default, tuple):
            ok = isinstance(v, list) and len(v) == len(default) and all(type(x) is int for x in v)
            v = tuple(v) if ok else v
        elif isinstance(default, float):
            ok = type(v) in (int, float) and v > 0 and v == v and v != float("inf")
        else:
            ok = type(v) is type(default)
        if not ok:
            raise PackageError(f"manifest 'target.{k}' must be {type(default).__name__}, got {v!r}")
        if k not in _VARIABLE_TARGET_FIELDS and v != default:
            raise PackageError(
                f"manifest 'target.{k}' is {v!r}; this runtime simulates {default!r} (the IPU21's)"
            )
        values[k] = v
    t = Target(**values)
    if not 1 <= t.num_tiles <= ipu21.num_tiles:
        raise PackageError(
            f"manifest 'target.num_tiles' must be in [1, {ipu21.num_tiles}], got {t.num_tiles}"
        )
    if t.sram_bytes % (16 * 1024) or not t.host_aperture[1] - t.sram_base <= t.sram_bytes <= ipu21.sram_bytes:
        raise PackageError(
            f"manifest 'target.sram_bytes' {t.sram_bytes} is not a multiple of 16 KiB up to 624 KiB"
        )
    return t


def _is_int(v: object) -> bool:
    return type(v) is int


def check_manifest(m: dict, path: Path) -> None:
    """The manifest's structure and field types (what `Package.load` reads), with the key that is wrong."""

    def need(cond: bool, key: str, what: str) -> None:
        if not cond:
            raise PackageError(f"{path}: manifest {key!r} must be {what}")

    for key, kind in (("target", dict), ("code", dict), ("segments", list), ("protected", list)):
        need(isinstance(m.get(key), kind), key, f"a JSON {'object' if kind is dict else 'array'}")
    for key in ("parameters", "inputs", "outputs", "debug"):
        need(isinstance(m.get(key, []), list), key, "a JSON array")
    need(isinstance(m.get("metadata", {}), dict), "metadata", "a JSON object")
    need(isinstance(m.get("entry"), str), "entry", "a string")
    code = m["code"]
    need(_is_int(code.get("base")), "code.base", "an integer")
    need(isinstance(code.get("image"), str), "code.image", "an array name")
    need(
        isinstance(code.get("labels"), dict) and all(_is_int(v) for v in code["labels"].values()),
        "code.labels",
        "an object of integer addresses",
    )
    need(
        isinstance(code.get("kernels"), dict)
        and all(isinstance(v, list) and len(v) == 2 and _is_int(v[0]) for v in code["kernels"].values()),
        "code.kernels",
        "an object of [address, is_supervisor]",
    )
    for i, s in enumerate(m["segments"]):
        key = f"segments[{i}]"
        need(isinstance(s, dict), key, "an object")
        need(isinstance(s.get("name"), str), f"{key}.name", "a string")
        for f in ("address", "rows", "bytes"):
            need(_is_int(s.get(f)) and s[f] >= 0, f"{key}.{f}", "a non-negative integer")
        for f in ("unique", "index", "tiles"):
            need(s.get(f) is None or isinstance(s.get(f), str), f"{key}.{f}", "an array name or null")
    for i, p in enumerate(m["protected"]):
        need(
            isinstance(p, list) and len(p) == 3 and _is_int(p[0]) and _is_int(p[1]) and isinstance(p[2], str),
            f"protected[{i}]",
            "[start, end, what]",
        )
    for kind in ("parameters", "inputs", "outputs", "debug"):
        for i, b in enumerate(m.get(kind, [])):
            key = f"{kind}[{i}]"
            need(isinstance(b, dict), key, "an object")
            need(isinstance(b.get("name"), str), f"{key}.name", "a string")
            need(
                isinstance(b.get("shape"), list) and all(_is_int(d) and 0 <= d < 2**31 for d in b["shape"]),
                f"{key}.shape",
                "a list of non-negative integers",
            )
            need(isinstance(b.get("dtype"), str), f"{key}.dtype", "a string")
            need(isinstance(b.get("chunks"), str), f"{key}.chunks", "an array name")
            for f in ("scale", "via_scale"):
                need(_is_int(b.get(f, 0)) and -64 <= b.get(f, 0) < 64, f"{key}.{f}", "an integer FP8 scale")
            need(isinstance(b.get("via", ""), str), f"{key}.via", "a string")


def _member(name: str) -> zipfile.ZipInfo:
    """A zip member with a fixed timestamp: the same package saves to the same bytes (reproducible builds; a
    package compiled from a checkpoint can be compared with the builder's byte for byte)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = 0o644 << 16
    return info


def _deflate_pays(raw: memoryview) -> bool:
    """Whether deflating saves DEFLATE_MIN_SAVING: tried on the whole array, or on 16 evenly spaced 64 KiB pieces
    of a large one (the trial is not the compression that gets written)."""
    piece = 1 << 16
    if len(raw) > 32 * piece:
        step = (len(raw) - piece) // 15
        raw = b"".join(raw[i * step : i * step + piece] for i in range(16))
    return len(zlib.compress(raw, 1)) <= (1 - DEFLATE_MIN_SAVING) * len(raw)


def encode_rows(data: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """uint8 [rows, bytes] -> (unique [u, bytes]: the distinct rows that are not all zero, index int32 [rows]:
    row i = unique[index[i]], -1 for a zero row; None when that is the identity). See the module docstring."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    n, nbytes = data.shape
    nonzero = data.any(axis=1) if nbytes else np.zeros(n, bool)
    index = np.full(n, -1, np.int32)
    if nonzero.all() and n <= 1:
        return data, None
    rows = data[nonzero]
    if len(rows) > 1:
        # Rows as opaque byte strings: np.unique sorts them (memcmp) and gives each row its class.
        keys = rows.view(np.dtype((np.void, nbytes))).reshape(-1)
        ukeys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        # Classes numbered by first appearance (a stable, content-independent order of the stored rows).
        rank = np.empty(len(ukeys), np.int32)
        rank[np.argsort(first, kind="stable")] = np.arange(len(ukeys), dtype=np.int32)
        index[nonzero] = rank[inverse.reshape(-1)]
        unique = rows[np.sort(first)]
    else:
        index[nonzero] = 0
        unique = rows
    if len(unique) == n:
        return unique, None
    return unique, index


def decode_rows(unique: np.ndarray, index: np.ndarray | None, rows: int, nbytes: int) -> np.ndarray:
    """The inverse of `encode_rows`: uint8 [rows, bytes] (one gather)."""
    if index is None:
        if unique.shape != (rows, nbytes):
            raise PackageError(
                f"{unique.shape[0]} stored rows of {unique.shape[1]} B for {rows} x {nbytes} B"
            )
        return np.ascontiguousarray(unique, dtype=np.uint8)
    if index.shape != (rows,) or unique.ndim != 2 or unique.shape[1] != nbytes:
        raise PackageError(
            f"row index {index.shape} / stored rows {unique.shape} do not make {rows} x {nbytes} B"
        )
    if len(index) and (index.max() >= len(unique) or index.min() < -1):
        raise PackageError(f"row index names rows outside the {len(unique)} stored ones")
    table = np.concatenate([np.asarray(unique, np.uint8), np.zeros((1, nbytes), np.uint8)])
    return table[index]  # -1: the zero row appended last


def _load_segment(s: dict, array, path: Path) -> Segment:
    rows, nbytes = int(s["rows"]), int(s["bytes"])
    unique = array(s["unique"]) if s["unique"] else np.zeros((0, nbytes), np.uint8)
    index = array(s["index"]) if s["index"] else None
    if unique.dtype != np.uint8 or (index is not None and index.dtype.kind != "i"):
        raise PackageError(f"{path}: segment {s['name']!r}: stored rows {unique.dtype} / index of wrong type")
    try:
        data = decode_rows(unique, index, rows, nbytes)
    except PackageError as e:
        raise PackageError(f"{path}: segment {s['name']!r}: {e}") from None
    return Segment(s["name"], int(s["address"]), data, array(s["tiles"]) if s["tiles"] else None)
