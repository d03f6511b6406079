"""The `.ipupkg` file format (version 2): segments stored per class of identical rows, deflated where it pays;
a file of another version or a corrupted one is refused with a clear error."""

import io
import json
import zipfile

import numpy as np
import pytest

from ipu.backend.asm_text import parse_program
from ipu.backend.encoding import encode_program
from ipu.backend.target import Target
from ipu.runtime.package import (
    FORMAT_VERSION,
    Binding,
    Package,
    PackageError,
    Segment,
    decode_rows,
    encode_rows,
)

TILES = 1472


def big_package() -> Package:
    """A 1472-tile package shaped like the lowering's: kernel frames with a few classes of identical rows (an
    active word and addresses), a sparse per-tile exchange table (a few tiles busy per round), zero fills, a
    broadcast row and a segment for a subset of tiles."""
    target = Target.ipu21()
    program = parse_program(".globl main\n.supervisor\nmain:\n    br $lr\n", 0x4C000)
    rng = np.random.default_rng(0)
    segments = []
    base = 0x50000
    for k in range(6):  # frames: 3 classes of rows (inactive = zero, two kinds of active tiles)
        frame = np.zeros((TILES, 2 + 20), np.uint32)
        frame[: 64 * (k + 1), 0] = 1
        frame[: 64 * (k + 1), 2:] = rng.integers(0, 2**32, 20, dtype=np.uint32)
        frame[7 * k : 7 * k + 5, 2:] = rng.integers(0, 2**32, 20, dtype=np.uint32)
        segments.append(Segment(f"frame {k}", base, frame))
        base += frame.shape[1] * 4
    rounds = 40
    table = np.zeros((TILES, 1 + 5 * rounds), np.uint32)  # every tile's own table (distinct rows)
    table[:, 0] = rounds - 1
    for r in range(rounds):
        busy = rng.choice(TILES, 30, replace=False)
        table[busy, 1 + 5 * r : 6 + 5 * r] = rng.integers(1, 2**20, (30, 5), dtype=np.uint32)
    segments.append(Segment("exchange rounds", base, table))
    base += table.shape[1] * 4
    segments.append(Segment("zeros", 0x80000, np.zeros((1, 4096), np.uint8)))
    segments.append(Segment("zeros per tile", 0x81000, np.zeros((TILES, 256), np.uint8)))
    segments.append(Segment("broadcast", 0x82000, np.arange(64, dtype=np.uint8)))
    sub = np.array([5, 3, 900], np.int32)
    segments.append(
        Segment("subset", 0x83000, np.array([[1, 2, 3, 4], [0, 0, 0, 0], [1, 2, 3, 4]], np.uint8), sub)
    )
    chunks = np.stack(
        [np.arange(TILES), np.full(TILES, 0x90000), np.arange(TILES) * 4, np.full(TILES, 4), np.ones(TILES)],
        1,
    )
    return Package(
        target=target,
        code=encode_program(program),
        code_base=program.base,
        kernels=program.kernels,
        labels=program.labels,
        entry="main",
        segments=segments,
        parameters=[Binding("p", (TILES, 4), "f16", chunks)],
        inputs=[Binding("x", (TILES, 4), "f32", chunks + [0, 0x100, 0, 0, 0])],
        outputs=[Binding("y", (TILES, 4), "f32", chunks + [0, 0x200, 0, 0, 0])],
        metadata={"model": "format-test"},
    )


def assert_same(a: Package, b: Package) -> None:
    assert a.code == b.code and a.labels == b.labels and a.target == b.target and a.metadata == b.metadata
    assert [s.name for s in a.segments] == [s.name for s in b.segments]
    for s, t in zip(a.segments, b.segments):
        assert s.address == t.address and s.data.dtype == t.data.dtype == np.uint8
        np.testing.assert_array_equal(s.data, t.data)
        assert (s.tiles is None) == (t.tiles is None)
        if s.tiles is not None:
            np.testing.assert_array_equal(s.tiles, t.tiles)
    for kind in ("parameters", "inputs", "outputs"):
        for x, y in zip(getattr(a, kind), getattr(b, kind)):
            assert (x.name, x.shape, x.dtype) == (y.name, y.shape, y.dtype)
            np.testing.assert_array_equal(x.chunks, y.chunks)


def test_encode_rows_classes():
    data = np.array([[0, 0, 0], [1, 2, 3], [4, 5, 6], [1, 2, 3], [0, 0, 0]], np.uint8)
    unique, index = encode_rows(data)
    np.testing.assert_array_equal(unique, [[1, 2, 3], [4, 5, 6]])  # by first appearance, no zero row
    np.testing.assert_array_equal(index, [-1, 0, 1, 0, -1])
    np.testing.assert_array_equal(decode_rows(unique, index, 5, 3), data)
    distinct = np.array([[9, 9], [1, 0]], np.uint8)
    u, i = encode_rows(distinct)
    assert i is None
    np.testing.assert_array_equal(decode_rows(u, i, 2, 2), distinct)
    u, i = encode_rows(np.zeros((4, 8), np.uint8))
    assert u.shape == (0, 8)
    np.testing.assert_array_equal(decode_rows(u, i, 4, 8), np.zeros((4, 8), np.uint8))


def test_roundtrip_1472_tiles_is_compact(tmp_path):
    pkg = big_package()
    path = pkg.save(tmp_path / "big.ipupkg")
    back = Package.load(path)
    assert_same(pkg, back)
    # What the classes of rows need: each distinct non-zero row once, plus an int32 index per row.
    raw = sum(s.data.nbytes for s in pkg.segments)
    classes = 0
    for s in pkg.segments:
        rows = s.data[s.data.any(axis=1)]
        classes += len(np.unique(rows, axis=0)) * s.data.shape[1] + 4 * s.data.shape[0]
    with zipfile.ZipFile(path) as z:
        stored = sum(i.compress_size for i in z.infolist() if i.filename.startswith("arrays/segments/"))
        manifest = json.loads(z.read("manifest.json"))
    assert manifest["version"] == FORMAT_VERSION == 2
    npy_headers = 128 * 3 * len(pkg.segments)
    assert stored <= classes + npy_headers, (stored, classes)
    assert classes < raw / 2  # the data really has few classes (the test is not vacuous)
    assert path.stat().st_size < raw / 20, (path.stat().st_size, raw)
    # The sparse exchange table has only distinct rows: deflating is what shrinks it.
    table = next(e for e in manifest["segments"] if e["name"] == "exchange rounds")
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(table["unique"])
    assert info.compress_type == zipfile.ZIP_DEFLATED and info.compress_size < info.file_size / 5


def test_saving_is_reproducible(tmp_path, monkeypatch):
    """The same package saves to the same bytes, whenever it is saved (zip members carry a fixed timestamp)."""
    import time

    pkg = big_package()
    first = pkg.save(tmp_path / "a.ipupkg").read_bytes()
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 3 * 86400)  # zipfile stamps members with the local time
    monkeypatch.setattr(time, "localtime", lambda *a: time.gmtime(now + 3 * 86400))
    assert pkg.save(tmp_path / "b.ipupkg").read_bytes() == first


def _rewrite(path, out, edit):
    """Copy a package archive with edit(name, bytes) -> bytes applied to each entry."""
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(out, "w") as w:
        for info in z.infolist():
            w.writestr(info.filename, edit(info.filename, z.read(info.filename)))
    return out


def test_old_version_and_corruption_are_refused(tmp_path):
    pkg = big_package()
    path = pkg.save(tmp_path / "big.ipupkg")

    def v1(name, data):
        if name != "manifest.json":
            return data
        m = json.loads(data)
        m["version"] = 1
        return json.dumps(m).encode()

    old = _rewrite(path, tmp_path / "old.ipupkg", v1)
    with pytest.raises(PackageError, match="format version 1, .* reads version 2: written by an older"):
        Package.load(old)

    def bad_index(name, data):
        if name.endswith(".index.npy"):
            arr = np.load(io.BytesIO(data))
            arr[0] = 10_000
            buf = io.BytesIO()
            np.save(buf, arr)
            return buf.getvalue()
        return data

    with pytest.raises(PackageError, match="segment 'frame 0': row index names rows outside"):
        Package.load(_rewrite(path, tmp_path / "idx.ipupkg", bad_index))

    def short(name, data):
        return data[: len(data) // 2] if name.endswith(".unique.npy") else data

    with pytest.raises(PackageError, match="array 'arrays/segments/0.unique.npy' is corrupted"):
        Package.load(_rewrite(path, tmp_path / "short.ipupkg", short))

    # Flipped bytes inside a deflated member: the zip layer's CRC / inflate fails, reported as corruption.
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("arrays/segments/6.unique.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for i in range(start + 10, start + 40):
        raw[i] ^= 0xFF
    (tmp_path / "flip.ipupkg").write_bytes(bytes(raw))
    with pytest.raises(PackageError, match="array 'arrays/segments/6.unique.npy' is corrupted"):
        Package.load(tmp_path / "flip.ipupkg")

    (tmp_path / "cut.ipupkg").write_bytes(path.read_bytes()[:1000])
    with pytest.raises(PackageError, match="not a package"):
        Package.load(tmp_path / "cut.ipupkg")


def test_deflate_decision_on_large_arrays():
    from ipu.runtime.package import _deflate_pays

    rng = np.random.default_rng(1)
    noise = rng.integers(0, 256, 4 << 20, dtype=np.uint8)
    sparse = np.zeros(4 << 20, np.uint8)
    sparse[::4096] = noise[: len(sparse[::4096])]
    assert _deflate_pays(memoryview(sparse.tobytes()))  # sampled: 16 pieces of 64 KiB
    assert not _deflate_pays(memoryview(noise.tobytes()))
    assert not _deflate_pays(memoryview(noise[:4096].tobytes()))  # small: tried whole


def _random_json(rng, depth=0):
    kind = int(rng.integers(0, 9 if depth < 4 else 5))
    if kind == 0:
        return int(rng.integers(-(10**12), 10**12))
    if kind == 1:
        return float(rng.choice([0.5, -0.0, 1e300, float("nan"), float("inf"), 3.25]))
    if kind == 2:
        return bool(rng.random() < 0.5) if rng.random() < 0.7 else None
    if kind == 3:
        return str(rng.choice(["", "a", 'q"uote', "tab\t", "\u00e9\u4e2d", "</script>"]))
    if kind == 4:
        return [int(x) for x in rng.integers(-5, 1000, int(rng.integers(0, 6)))]
    if kind in (5, 6):
        return [_random_json(rng, depth + 1) for _ in range(int(rng.integers(0, 5)))]
    if kind == 7:
        return tuple(_random_json(rng, depth + 1) for _ in range(int(rng.integers(0, 3))))
    return {f"k{i}": _random_json(rng, depth + 1) for i in range(int(rng.integers(0, 5)))}


@pytest.mark.parametrize("seed", range(40))
def test_manifest_text_is_json_dumps_indent_1(seed):
    """The manifest writer (`dumps_indent1`) gives json.dumps(indent=1)'s text exactly; what it does not handle
    itself (non-string keys, other types) goes to json.dumps."""
    from ipu.runtime.package import dumps_indent1

    rng = np.random.default_rng(seed)
    obj = {"root": _random_json(rng), "list": [_random_json(rng) for _ in range(3)]}
    assert dumps_indent1(obj) == json.dumps(obj, indent=1)
    odd = {"a": [1, {2: "int key"}]}
    assert dumps_indent1(odd) == json.dumps(odd, indent=1)
    with pytest.raises(TypeError):
        dumps_indent1({"a": np.int64(1)})


def test_manifest_of_a_real_package_is_json_dumps_indent_1():
    from ipu.backend.lower import compile_model
    from ipu.runtime.package import dumps_indent1

    pkg = compile_model("tiny", Target.small(tiles=16, sram_kib=624))
    with zipfile.ZipFile(io.BytesIO(pkg.to_bytes())) as z:
        text = z.read("manifest.json").decode()
    assert text == json.dumps(json.loads(text), indent=1)
    assert dumps_indent1(json.loads(text)) == text
