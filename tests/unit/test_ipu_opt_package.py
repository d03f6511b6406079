"""`ipu-opt` reaches a package: the nn IR file through `ipu-compile-pipeline` and `-t ipu-package` gives the same
bytes as `ipu-run --model ... -o` (both run the same named pass), and the package runs the same."""

from __future__ import annotations

import re

import pytest

from ipu.backend.lower import compile_model
from ipu.backend.lower.lowering import pipeline_spec
from ipu.backend.target import IPU21, Target
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.passes.compile_pipeline import IpuCompilePipelinePass
from ipu.runtime.package import Package
from ipu.tools import ipu_opt, ipu_run


def _cycles(out: str) -> list[int]:
    return [int(c) for c in re.findall(r"inference \d+: (\d+) cycles", out)]


def _ipu_opt_package(tmp_path, mlir, pipeline: str, name: str = "a.ipupkg"):
    out = tmp_path / name
    rc = ipu_opt.main(
        [str(mlir), f"--pass-pipeline=builtin.module({pipeline})", "-t", "ipu-package", "-o", str(out)]
    )
    assert rc == 0
    return out


def test_tiny_16_tiles_byte_identical_to_ipu_run(tmp_path, capsys):
    mlir = tmp_path / "model.mlir"
    assert ipu_run.main(["--model", "siglip-tiny", "--emit-nn", str(mlir)]) == 0
    assert mlir.read_text().startswith("builtin.module attributes {ipu.model_config")
    a = _ipu_opt_package(tmp_path, mlir, "ipu-compile-pipeline{tiles=16}")
    b = tmp_path / "b.ipupkg"
    capsys.readouterr()
    assert ipu_run.main(["--model", "siglip-tiny", "--tiles", "16", "-o", str(b)]) == 0
    cycles_b = _cycles(capsys.readouterr().out)
    assert a.read_bytes() == b.read_bytes()
    pkg = Package.load(a)
    assert pkg.metadata["config"] == PRESETS["tiny"].to_dict()
    assert pkg.target.num_tiles == 16
    # The package from ipu-opt runs on the simulator (random weights from its config) with the same cycles.
    assert ipu_run.main([str(a), "--inferences", "1"]) == 0
    cycles_a = _cycles(capsys.readouterr().out)
    assert len(cycles_a) == len(cycles_b) == 1 and cycles_a == cycles_b


def _width256():
    from ipu.frontend.siglip import SiglipVisionConfig

    base = PRESETS["siglip-tiny"].to_dict()
    return SiglipVisionConfig(
        **{**base, "image_size": 64, "num_hidden_layers": 1, "hidden_size": 256, "intermediate_size": 512,
           "num_attention_heads": 4}
    )  # fmt: skip


@pytest.mark.parametrize(
    ("model", "options", "tiles", "kwargs"),
    [
        # nn-split-k's many-row splits change this package (split_rows matters: not the default by accident).
        ("tiny", "tiles=16 sram_kib=624", 16, {}),
        ("tiny", "tiles=8 split_rows=false repeat=false", 8, {"split_rows": False, "repeat": False}),
        # K splits on the FP8 AMP: the lowering's storage measured on the provisional plan must hold on the
        # final one (no re-plan in compile_model, none possible in -t ipu-package)
        ("width256", "tiles=64 activations=fp8", 64, {"activations": "fp8"}),
    ],
)
def test_other_shapes_byte_identical_to_compile_model(tmp_path, model, options, tiles, kwargs):
    # A one-layer model, with the pass's defaults and with its other options (IR text in, bytes out).
    cfg = PRESETS["tiny"].with_layers(1) if model == "tiny" else _width256()
    mlir = tmp_path / "model.mlir"
    mlir.write_text(str(build_vision_model(cfg)) + "\n")
    a = _ipu_opt_package(tmp_path, mlir, f"ipu-compile-pipeline{{{options}}}")
    ref = compile_model(cfg, Target.small(tiles=tiles, sram_kib=624), **kwargs)
    assert not [n for n in ref.metadata.get("notes", []) if "planned again" in n]
    assert a.read_bytes() == ref.to_bytes()
    assert Package.load(a).metadata["config"] == cfg.to_dict()


def test_options_change_the_package(tmp_path):
    # Not the same bytes whatever the options: repeat=false unrolls the two layers (more code, no loop).
    mlir = tmp_path / "model.mlir"
    mlir.write_text(str(build_vision_model(PRESETS["tiny"])) + "\n")
    looped = _ipu_opt_package(tmp_path, mlir, "ipu-compile-pipeline{tiles=16}", "looped.ipupkg")
    unrolled = _ipu_opt_package(
        tmp_path, mlir, "ipu-compile-pipeline{tiles=16 repeat=false}", "unrolled.ipupkg"
    )
    assert looped.read_bytes() != unrolled.read_bytes()
    assert len(Package.load(unrolled).code) > len(Package.load(looped).code)


@pytest.mark.parametrize(
    ("target", "repeat", "scratch", "split_rows"),
    [(Target.small(tiles=16, sram_kib=624), True, True, True), (IPU21, False, False, False)],
)
def test_pass_applies_pipeline_spec(target, repeat, scratch, split_rows):
    p = IpuCompilePipelinePass(
        tiles=target.num_tiles,
        sram_kib=target.sram_bytes // 1024,
        repeat=repeat,
        scratch=scratch,
        split_rows=split_rows,
        activations="f16",  # the default, `mlp`, is resolved per module (test_compile_policy)
        sum_addends="sums",  # the default, `auto`, too (test_fused_sums)
    )
    assert p.target == target
    spec = pipeline_spec(target, repeat, scratch=scratch, split_rows=split_rows)
    assert p.pipeline_text() == spec
    assert [q.name for q in p.passes()] == [s.split("{")[0] for s in re.split(r",(?![^{]*\})", spec)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("tiles=0", "option 'tiles' must be positive, got 0"),
        ("sram_kib=-16", "option 'sram_kib' must be positive, got -16"),
        ("tiles=2000", "tiles must be in [1, 1472], got 2000"),
        ("sram_kib=100", "sram_kib must be a multiple of 16"),
    ],
)
def test_bad_options_one_line(tmp_path, capsys, options, message):
    mlir = tmp_path / "model.mlir"
    mlir.write_text(str(build_vision_model(PRESETS["tiny"])) + "\n")
    assert ipu_opt.main([str(mlir), "-p", f"ipu-compile-pipeline{{{options}}}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("sram_kib", [256, 288])
def test_target_without_three_scratch_elements_one_line(tmp_path, capsys, sram_kib):
    """A target whose SRAM holds fewer than three interleaved elements (the kernels' C, A and aux scratch): one
    diagnostic naming the smallest target that has them, from ipu-opt and from compile_model alike (not a copy
    kernel's overlap error from deep in the lowering)."""
    from ipu.backend.lower import LoweringError

    mlir = tmp_path / "model.mlir"
    mlir.write_text(str(build_vision_model(PRESETS["tiny"])) + "\n")
    out = tmp_path / "x.ipupkg"
    pipeline = f"builtin.module(ipu-compile-pipeline{{tiles=16 sram_kib={sram_kib}}})"
    rc = ipu_opt.main([str(mlir), f"--pass-pipeline={pipeline}", "-t", "ipu-package", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err and not out.exists()
    assert f"its {sram_kib} KiB of SRAM per tile hold" in err and "at least 304 KiB per tile" in err
    with pytest.raises(LoweringError, match="C, A and aux scratch need 3"):
        compile_model("siglip-tiny", Target.small(tiles=16, sram_kib=sram_kib))


def test_unplaced_input_and_stdout_refused(tmp_path, capsys):
    mlir = tmp_path / "model.mlir"
    mlir.write_text(str(build_vision_model(PRESETS["tiny"])) + "\n")
    out = tmp_path / "u.ipupkg"
    assert ipu_opt.main([str(mlir), "-t", "ipu-package", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert (
        "not placed IR (@siglip_vision has no memory.plan): run memory-plan or ipu-compile-pipeline first"
        in err
    )
    assert not out.exists()  # nothing written on an error
    assert ipu_opt.main([str(mlir), "-t", "ipu-asm"]) == 1
    assert "has no asm.program or asm.kernel ops and is not placed IR" in capsys.readouterr().err
    assert ipu_opt.main([str(mlir), "-p", "ipu-compile-pipeline{tiles=16}", "-t", "ipu-package"]) == 1
    assert "give -o FILE" in capsys.readouterr().err


def test_two_steps_through_placed_ir_and_asm(tmp_path, capsys):
    # nn IR -> placed IR text -> package: the bytes of the one-call route; -t ipu-asm on the placed text prints
    # what `python -m ipu.backend.lower placed.mlir --print-asm` prints (full=true: the whole code image).
    from ipu.backend.lower.__main__ import main as lower_main

    cfg = PRESETS["tiny"].with_layers(1)
    mlir, placed = tmp_path / "model.mlir", tmp_path / "placed.mlir"
    mlir.write_text(str(build_vision_model(cfg)) + "\n")
    one = _ipu_opt_package(tmp_path, mlir, "ipu-compile-pipeline{tiles=16}", "one.ipupkg")
    assert ipu_opt.main([str(mlir), "-p", "ipu-compile-pipeline{tiles=16}", "-o", str(placed)]) == 0
    two = tmp_path / "two.ipupkg"
    assert ipu_opt.main([str(placed), "-t", "ipu-package", "-o", str(two)]) == 0
    assert one.read_bytes() == two.read_bytes()
    capsys.readouterr()
    assert lower_main([str(placed), "--print-asm"]) == 0
    main_text = capsys.readouterr().out
    assert ipu_opt.main([str(placed), "-t", "ipu-asm"]) == 0
    assert capsys.readouterr().out == main_text and main_text.startswith(".globl main\n")
    assert ipu_opt.main([str(placed), "-t", "ipu-asm{full=true}"]) == 0
    full = capsys.readouterr().out
    assert full.startswith(main_text) and "\nxch_timed:" in full and "\nxch_timed:" not in main_text
