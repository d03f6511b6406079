"""The package file format and the host API, on a hand-written program: out = param + input, per tile."""

import numpy as np
import pytest

from ipu.backend.asm_text import parse_program
from ipu.backend.encoding import encode_program
from ipu.backend.target import Target
from ipu.runtime.host import Session
from ipu.runtime.package import Binding, Package, PackageError, Segment, from_device, to_device

ADD_PROGRAM = """
.globl main
.supervisor
main:
    setzi $m1, work
    setzi $m2, {vs_rel}
    runall $m1, $m2, 4
    sync TEXCH_SYNCZONE_LOCAL
    br $lr

.globl work
.worker
work:
    ld32 $m0, $mvertex_base, $mzero, 0      // x (f32)
    ld32 $m2, $mvertex_base, $mzero, 2      // out (f32)
    ld32 $m3, $mvertex_base, $mzero, 3      // elements - 1
    setzi $m4, 0
loop:
    ld32 $a0, $m0, $m4, 0
    ld32 $a1, $m2, $m4, 0
    f32add $a0, $a0, $a1
    st32 $a0, $m2, $m4, 0
    add $m4, $m4, 4
    brnzdec $m3, loop
    exitz $mzero
"""

VS, X, OUT = 0x5C000, 0x60000, 0x62000
ELEMS = 4  # per worker


def make_package(tiles: int = 3) -> Package:
    """Input x and parameter p, both [tiles, 24] f32 with row t on tile t: each worker adds its 4 elements of x
    into out, where the parameter binding put p. (Accumulating in place keeps the program trivial; it makes the
    package good for one inference per upload.)"""
    target = Target.small(tiles=tiles, sram_kib=256)
    program = parse_program(ADD_PROGRAM.replace("{vs_rel}", str(VS - target.sram_base)), target.sram_base)
    vs = np.zeros((6, 4), np.uint32)
    for w in range(6):
        vs[w] = [X + 16 * w, 0, OUT + 16 * w, ELEMS - 1]
    n = 6 * ELEMS
    t = np.arange(tiles)
    # Row-major [tiles, n] tensors: tile t holds row t.
    per_tile = np.stack([t, np.full(tiles, X), t * n, np.full(tiles, n), np.ones(tiles)], 1)
    x_bind = Binding("x", (tiles, n), "f32", per_tile)
    p_bind = Binding("p", (tiles, n), "f32", per_tile + [0, OUT - X, 0, 0, 0])
    out_bind = Binding("out", (tiles, n), "f32", per_tile + [0, OUT - X, 0, 0, 0])
    return Package(
        target=target,
        code=encode_program(program),
        code_base=program.base,
        kernels=program.kernels,
        labels=program.labels,
        entry="main",
        segments=[Segment("vertex_state", VS, vs.view(np.uint8).reshape(1, -1))],
        protected=[],
        parameters=[p_bind],
        inputs=[x_bind],
        outputs=[out_bind],
        metadata={"model": "test-add"},
    )


def test_package_roundtrip_and_run(tmp_path):
    pkg = make_package()
    path = pkg.save(tmp_path / "add.ipupkg")
    loaded = Package.load(path)
    assert loaded.code == pkg.code and loaded.labels == pkg.labels and loaded.target == pkg.target
    assert [s.name for s in loaded.segments] == ["vertex_state"]
    np.testing.assert_array_equal(loaded.parameters[0].chunks, pkg.parameters[0].chunks)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 24)).astype(np.float32)
    p = rng.standard_normal((3, 24)).astype(np.float32)
    session = Session(loaded)
    session.upload_parameters({"p": p})
    result = session.run({"x": x})
    np.testing.assert_array_equal(result.outputs["out"], x + p)
    assert result.cycles > 0


def test_binding_strided_chunks_and_fp8():
    # A [4, 3] tensor stored column by column on one tile: three chunks of 4 elements with stride 3.
    b = Binding("w", (4, 3), "f8e4m3fnuz", [[0, 0x60000 + 4 * c, c, 4, 3] for c in range(3)], scale=-4)
    np.testing.assert_array_equal(b.element_index(), [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11])
    x = np.array([0.01, 1.0, 100.0, -1e6], np.float32)
    back = from_device(to_device(x, "f8e4m3fnuz", -4), "f8e4m3fnuz", -4)
    assert back[1] == 1.0 and np.isfinite(back).all()
    assert back[3] == -240 * 2.0**-4  # saturates at the format's largest value instead of NaN


def test_errors_name_the_binding(tmp_path):
    with pytest.raises(PackageError, match=r"binding 'w': chunk #0 \[0, 393216, 10, 4, 1\] reaches outside"):
        Binding("w", (4, 3), "f32", [[0, 0x60000, 10, 4, 1]])
    pkg = make_package()
    session = Session(pkg)
    with pytest.raises(PackageError, match="run before upload_parameters"):
        session.run({"x": np.zeros((3, 24), np.float32)})
    with pytest.raises(PackageError, match=r"parameter 'p' \(shape \[3, 24\]\) is missing"):
        session.upload_parameters({})
    session.upload_parameters({"p": np.zeros((3, 24), np.float32)})
    with pytest.raises(
        PackageError, match=r"'x': host tensor has shape \[2, 24\], the package expects \[3, 24\]"
    ):
        session.run({"x": np.zeros((2, 24), np.float32)})
    (tmp_path / "junk.ipupkg").write_bytes(b"not a zip")
    with pytest.raises(PackageError, match="not a package"):
        Package.load(tmp_path / "junk.ipupkg")
    pkg.segments.append(Segment("oops", 0x4C000 + 256 * 1024 - 4, np.zeros(8, np.uint8)))
    with pytest.raises(PackageError, match="segment 'oops' at .* is outside SRAM"):
        pkg.validate()
