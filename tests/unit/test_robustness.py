"""Bad input (issue 24): one diagnostic and a non-zero exit, never a traceback, a hang or silently wrong numbers."""

import json
import struct
import zipfile

import numpy as np
import pytest

from ipu.dialects.parsing import SourceError, check_string_literals
from ipu.frontend.siglip import PRESETS, SiglipVisionConfig
from ipu.frontend.weights import CheckpointError, load_checkpoint, random_weights, save_checkpoint
from ipu.tools import boundary
from ipu.tools.ipu_opt import main as opt_main
from ipu.tools.ipu_run import main as run_main

CFG = PRESETS["tiny-1layer"]


def _opt(capsys, *argv):
    rc = opt_main(list(argv))
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and "internal error" not in cap.err
    return rc, cap.out, cap.err


# ----------------------------------------------------------------------------------------------------------------
# The error boundary


def test_internal_error_is_one_line_with_a_hint_and_its_own_exit_code(capsys, monkeypatch):
    def bug():
        raise KeyError("oops")

    monkeypatch.delenv(boundary.TRACEBACK_ENV, raising=False)
    assert boundary.guarded("ipu-x", bug) == boundary.INTERNAL_ERROR_EXIT
    err = capsys.readouterr().err
    assert err.startswith("ipu-x: internal error: KeyError: 'oops'") and "IPU_TRACEBACK=1" in err
    assert "Traceback" not in err
    monkeypatch.setenv(boundary.TRACEBACK_ENV, "1")
    assert boundary.guarded("ipu-x", bug) == boundary.INTERNAL_ERROR_EXIT
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_known_errors_are_one_diagnostic(capsys):
    def bad():
        raise CheckpointError("ckpt.safetensors: key 'x' is wrong")

    assert boundary.guarded("ipu-x", bad) == 1
    assert capsys.readouterr().err == "ipu-x: error: ckpt.safetensors: key 'x' is wrong\n"


def test_lower_entry_reports_parse_and_verify_errors(tmp_path, capsys):
    from ipu.backend.lower.__main__ import main as lower_main

    p = tmp_path / "bad.mlir"
    p.write_text('func.func @f() {\n  %0 = "test.op"() : () -> i32\n  func.return\n')
    assert lower_main([str(p)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err and str(p) in err


# ----------------------------------------------------------------------------------------------------------------
# The parse entry


@pytest.mark.parametrize(
    "text, why",
    [
        ('%0 = "test.op"() {a = dense<"0x0A0B0C0D0E0F', "the input ends inside it"),
        ('%0 = "test.op"() {a = "abc\n', "reaches the end of the line"),
        ('%0 = "test.op"() {a = "ab\\q"}', "invalid escape sequence"),
    ],
)
def test_unterminated_string_literal_is_located(text, why):
    with pytest.raises(SourceError, match=why) as e:
        check_string_literals(text, "in.mlir")
    assert str(e.value).startswith("in.mlir:1:")


def test_string_scan_skips_comments_and_closed_strings():
    check_string_literals('// a "quote in a comment\n%0 = "test.op"() {a = "x\\"y\\0A"} : () -> ()\n')


def test_truncated_hex_dense_does_not_hang(tmp_path, capsys):
    from ipu.tools.fuzz import Workdir

    w = Workdir(tmp_path / "w")
    text = w.levels["exchange"]
    start = text.index('dense<"0x')
    p = tmp_path / "cut.mlir"
    p.write_text(text[: start + 60])  # 60 characters into the hex: days of backtracking in xDSL 0.74's regex
    rc, _, err = _opt(capsys, str(p))
    assert rc == 1 and "unterminated string literal" in err and f"{p}:" in err


def test_use_before_definition_is_refused(tmp_path, capsys):
    p = tmp_path / "ubd.mlir"
    p.write_text(
        "func.func @f(%a: i32) -> i32 {\n  %c = arith.addi %b, %a : i32\n  %b = arith.addi %a, %a : i32\n"
        "  func.return %c : i32\n}\n"
    )
    rc, _, err = _opt(capsys, str(p))
    assert rc == 1
    assert f"{p}:2:3: error: 'arith.addi' op operand #0 (%b) is used before its definition" in err


@pytest.mark.parametrize(
    "edit, message",
    [
        (("eps=1.000000e-06", "eps=1.0e+300"), "cannot parse this value (OverflowError"),
        (("#tile.affine<0, 1, 0>", "#tile.affine<4294967296, 1, 0>"), "does not fit in 32 bits"),
        (("#tile.affine<0, 1, 0>", "#tile.affine<0, 2147483647, 0>"), "is outside [0, 2^31)"),
        (("heads=2 scale=0.176776692", "heads=2 scale=0x7FC00000 : f32"), "error"),
        (("heads = 2 : i64", "heads = -2 : i64"), "'heads' must be a positive integer"),
    ],
)
def test_values_that_cannot_be_meant_are_refused(tmp_path, capsys, edit, message):
    from ipu.tools.fuzz import Workdir

    w = Workdir(tmp_path / "w")
    text = w.levels["exchange"]
    assert edit[0] in text
    p = tmp_path / "m.mlir"
    p.write_text(text.replace(edit[0], edit[1], 1))
    rc, _, err = _opt(capsys, str(p))
    assert rc == 1 and message in err, err


@pytest.fixture(scope="module")
def levels(tmp_path_factory):
    from ipu.tools.fuzz import Workdir

    return Workdir(tmp_path_factory.mktemp("levels")).levels


_BOUNDED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from ipu.tools.fuzz import call
kind, rc, out, err = call(sys.argv[1], sys.argv[2:])
sys.stderr.write(err)
sys.exit(0 if kind == "clean" else 1)
"""


@pytest.mark.parametrize(
    "level, old, new, tool, message",
    [
        (
            "exchange",
            "tiles = 4 : i64",
            "tiles = 2147483647 : i64",
            "ipu-opt",
            "exchange.phase: tiles = 2147483647 ",
        ),
        ("exchange", "tiles = 4 : i64", "tiles = 2147483647 : i64", "profile", "is outside [1, 1472]"),
        (
            "memory",
            "tiles = 4 : i64",
            "tiles = 2147483647 : i64",
            "placement",
            "memory.plan: tiles = 2147483647 ",
        ),
        (
            "memory",
            "#tile.affine<0, 1, 0>",
            "#tile.affine<2147483000, 1, 0>",
            "lower",
            "outside the target's tiles",
        ),
        (
            "exchange",
            "#tile.affine<0, 1, 0>",
            "#tile.affine<1472, 1, 0>",
            "profile",
            "outside the target's tiles",
        ),
    ],
)
def test_tile_counts_and_ids_past_the_target_are_refused_before_allocating(
    levels, tmp_path, level, old, new, tool, message
):
    # Each was accepted, or allocated per-tile arrays of 2^31 entries (the kernel's OOM killer, not an error).
    # Run in a child with a 3 GiB address space: without the check the child reports "out of memory".
    import subprocess
    import sys

    text = levels[level]
    assert old in text
    p = tmp_path / "m.mlir"
    p.write_text(text.replace(old, new, 1))
    argv = {
        "ipu-opt": ["ipu-opt", str(p)],
        "profile": ["ipu-report", "profile", str(p), "-o", str(tmp_path / "r")],
        "placement": ["ipu-report", "placement", str(p), "-o", str(tmp_path / "r")],
        "lower": ["lower", str(p), "-o", str(tmp_path / "p.ipupkg")],
    }[tool]
    r = subprocess.run([sys.executable, "-c", _BOUNDED, *argv], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and message in r.stderr and "out of memory" not in r.stderr, r.stderr


@pytest.fixture(scope="module")
def two_layers(tmp_path_factory):
    from ipu.frontend.siglip import build_vision_model

    d = tmp_path_factory.mktemp("two")
    (d / "nn.mlir").write_text(str(build_vision_model(PRESETS["tiny"])))
    spec = "ipu-compile-pipeline{tiles=4 sram_kib=624 stop_after=nn-to-exchange-pipeline}"
    assert opt_main([str(d / "nn.mlir"), "-p", spec, "-o", str(d / "ex.mlir")]) == 0
    return (d / "ex.mlir").read_text()


@pytest.mark.parametrize(
    "count, message",
    [
        (
            "2147483647",
            "stacked operand #0 has shape [2, 64]; its leading dimension must be the count 2147483647",
        ),
        ("0", "tile.repeat: count must be positive, got 0"),
    ],
)
def test_tile_repeat_count_must_match_its_stacked_operands(two_layers, tmp_path, capsys, count, message):
    assert "tile.repeat 2 carried" in two_layers
    p = tmp_path / "r.mlir"
    p.write_text(two_layers.replace("tile.repeat 2 carried", f"tile.repeat {count} carried", 1))
    rc, _, err = _opt(capsys, str(p))
    assert rc == 1 and message in err, err


def test_profile_refuses_more_iterations_than_it_lists(two_layers, tmp_path, capsys, monkeypatch):
    from ipu.runtime.reports import profile
    from ipu.tools.ipu_report import main as report_main

    p = tmp_path / "r.mlir"
    p.write_text(two_layers)
    monkeypatch.setattr(profile, "MAX_LISTED_ITERATIONS", 1)
    assert report_main(["profile", str(p), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "tile.repeat x2: more iterations than a profile lists (1)" in err and "internal error" not in err


def test_attribute_check_refuses_nan_and_out_of_type_values():
    from xdsl.dialects.builtin import FloatAttr, IntAttr, IntegerAttr, f32, i8

    from ipu.dialects.parsing import _attribute_problem

    assert _attribute_problem(FloatAttr(float("nan"), f32)) == "nan is not finite"
    assert _attribute_problem(FloatAttr(1.0, f32)) is None
    assert _attribute_problem(IntAttr(2**31)) == "2147483648 does not fit in 32 bits"
    assert _attribute_problem(IntAttr(2**31 - 1)) is None
    assert _attribute_problem(IntegerAttr(5, i8)) is None


# ----------------------------------------------------------------------------------------------------------------
# Pass options


@pytest.mark.parametrize(
    "spec, message",
    [
        ("memory-plan{tiles=4 sram_kib=-1}", "option 'sram_kib' must be at least 1, got -1"),
        ("nn-split-k{max_rows=0}", "option 'max_rows' must be at least 1, got 0"),
        ("nn-split-mlp{min-rows=-1}", "option 'min_rows' must be at least 0, got -1"),
        ("exchange-schedule{max-slowdown=-1.0}", "option 'max_slowdown' must be finite and non-negative"),
        ("memory-plan{tiles=4 tiles=8}", "memory-plan: option 'tiles' is given twice"),
        ("memory-plan{tiles=4 sram-kib=256 sram_kib=256}", "option 'sram_kib' is given twice"),
        ("nn-split-k{tiles=4294967296}", "must fit in 32 bits"),
        ("nn-quantize-weights{keep_f16=q_proj,q_proj}", "lists 'q_proj' twice"),
        ("nn-split-k{tiles=4 max-rows=x}", "nn-split-k: option 'max_rows' = 'x' has the wrong type"),
        ("tile-plan{memory_fraction=nan}", "tile-plan: option 'memory_fraction' = 'nan' has the wrong type"),
    ],
)
def test_pass_options_are_range_checked(tmp_path, capsys, spec, message):
    p = tmp_path / "f.mlir"
    p.write_text("func.func @f() {\n  func.return\n}\n")
    rc, _, err = _opt(capsys, str(p), "-p", spec)
    assert rc == 1 and message in err, err


@pytest.fixture(scope="module")
def tiny_nn(tmp_path_factory):
    from ipu.frontend.siglip import build_vision_model

    p = tmp_path_factory.mktemp("nn") / "nn.mlir"
    p.write_text(str(build_vision_model(CFG)))
    return p


@pytest.mark.parametrize("names", ["q_prj", "q_proj,bogus", "layer_norm1"])
def test_keep_f16_names_matching_no_linear_are_refused(tiny_nn, capsys, names):
    rc, out, err = _opt(capsys, str(tiny_nn), "-p", f"nn-quantize-weights{{keep_f16={names}}}")
    bad = [n for n in names.split(",") if n != "q_proj"]
    assert rc == 1 and out == "", err
    assert (
        f"option 'keep_f16': {', '.join(map(repr, bad))} is part of no linear's weight parameter name" in err
    )
    assert "encoder.layers.*.self_attn.q_proj.weight" in err  # the known linear names, layers folded


def test_keep_f16_default_policy_names_apply_to_models_without_them(tmp_path, capsys):
    # The default policy names the head; a headless model compiles with it (and `fc1` matches a linear).
    from dataclasses import replace

    from ipu.frontend.siglip import build_vision_model
    from ipu.passes.nn_quantize import KEEP_F16_DEFAULT

    p = tmp_path / "headless.mlir"
    p.write_text(str(build_vision_model(replace(CFG, vision_use_head=False))))
    spec = f"nn-quantize-weights{{keep_f16={','.join(KEEP_F16_DEFAULT)},fc1}}"
    rc, out, err = _opt(capsys, str(p), "-p", spec)
    assert rc == 0 and "nn.cast" in out, err


def test_repeated_options_are_found_outside_strings():
    from ipu.passes.options import repeated_options

    assert repeated_options('a{x=1 y="x=2"},b{x=1}') == []
    assert repeated_options("a{x=1},b{x=1 x=2}") == [("b", "x")]


# ----------------------------------------------------------------------------------------------------------------
# Configs, checkpoints, inputs


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("hidden_size", "64", "hidden_size must be a positive integer"),
        ("hidden_size", None, "hidden_size must be a positive integer"),
        ("hidden_size", [64], "hidden_size must be a positive integer"),
        ("layer_norm_eps", -1.0, "layer_norm_eps must be a finite number in (0, 1)"),
        ("layer_norm_eps", float("nan"), "layer_norm_eps must be a finite number"),
        ("vision_use_head", 1, "vision_use_head must be true or false"),
    ],
)
def test_config_json_is_type_checked(tmp_path, capsys, key, value, message):
    d = CFG.to_dict()
    d[key] = value
    (tmp_path / "config.json").write_text(json.dumps(d))
    assert run_main(["--model", str(tmp_path), "--emit-nn", str(tmp_path / "o.mlir")]) == 1
    err = capsys.readouterr().err
    assert message in err and str(tmp_path / "config.json") in err and "Traceback" not in err
    with pytest.raises(ValueError, match=message.split(" must")[0]):
        SiglipVisionConfig.from_dict(d)


@pytest.fixture
def ckpt(tmp_path):
    d = tmp_path / "ckpt"
    save_checkpoint(random_weights(CFG, seed=1), CFG, d)
    return d


def _rewrite(path, edit):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8 : 8 + n]), bytearray(raw[8 + n :])
    header = edit(header, data)
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(data))


def _first_key(h):
    return next(k for k in h if k != "__metadata__")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda h, d: list(h.items()), "the safetensors header is a JSON list, not an object"),
        (lambda h, d: {**h, _first_key(h): "F32"}, "entry must be an object"),
        (lambda h, d: (h[_first_key(h)].pop("dtype"), h)[1], "entry lacks dtype"),
        (
            lambda h, d: (
                h[_first_key(h)].update(data_offsets=[-8, h[_first_key(h)]["data_offsets"][1] - 8]),
                h,
            )[1],
            "data_offsets must be [begin, end] (non-negative integers)",
        ),
        (lambda h, d: (h[_first_key(h)].update(data_offsets=[0, 4]), h)[1], "do not match shape"),
    ],
)
def test_checkpoint_header_is_validated_before_any_weight_is_read(ckpt, edit, message):
    _rewrite(ckpt / "model.safetensors", edit)
    with pytest.raises(
        CheckpointError,
        match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]"),
    ):
        load_checkpoint(ckpt)


def test_repeated_header_keys_and_uncovered_data_are_refused(ckpt):
    path = ckpt / "model.safetensors"
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = raw[8 : 8 + n].decode(), raw[8 + n :]
    key = _first_key(json.loads(header))
    entry = json.dumps(json.loads(header)[key])
    twice = header[:-1] + f', "{key}": {entry}' + "}"  # json.loads keeps the last one silently
    path.write_bytes(struct.pack("<Q", len(twice)) + twice.encode() + data)
    with pytest.raises(CheckpointError, match=f"has key '{key}' twice"):
        load_checkpoint(ckpt)
    path.write_bytes(raw + bytes(16))  # bytes no tensor names
    with pytest.raises(CheckpointError, match=f"cover {len(data)} of the {len(data) + 16} data bytes"):
        load_checkpoint(ckpt)


def test_overlapping_offsets_are_refused(ckpt):
    def overlap(h, d):
        keys = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
        a, b = h[keys[0]], h[keys[1]]
        size = b["data_offsets"][1] - b["data_offsets"][0]
        if a["data_offsets"][1] - a["data_offsets"][0] >= size:
            b["data_offsets"] = [a["data_offsets"][0], a["data_offsets"][0] + size]
        return h

    _rewrite(ckpt / "model.safetensors", overlap)
    with pytest.raises(CheckpointError, match="overlap in the data"):
        load_checkpoint(ckpt)


def test_nonfinite_weights_are_refused_by_name(ckpt, capsys):
    name = "encoder.layers.0.mlp.fc1.weight"

    def poison(h, d):
        b = h[name]["data_offsets"][0]
        d[b + 8 : b + 12] = struct.pack("<f", float("nan"))
        return h

    _rewrite(ckpt / "model.safetensors", poison)
    assert run_main(["--model", str(ckpt), "--weights", str(ckpt), "--reference-only"]) == 1
    err = capsys.readouterr().err
    assert f"key '{name}' holds non-finite values (first at [0, 2]: nan)" in err
    assert (
        run_main(["--weights", str(ckpt), "--model", str(ckpt), "--reference-only", "--allow-nonfinite"]) == 0
    )


def test_checkpoint_config_must_agree_with_model(ckpt, capsys):
    assert run_main(["--model", "so400m-patch14-384", "--weights", str(ckpt), "--reference-only"]) == 1
    err = capsys.readouterr().err
    assert "the checkpoint's config disagrees with --model so400m-patch14-384: hidden_size 64" in err


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda p: np.save(p, np.zeros((1, 3, 16, 64), np.float32)),
            "shape [1, 3, 16, 64], the model expects [1, 3, 32, 32]",
        ),
        (
            lambda p: np.save(p, np.zeros((2, 3, 32, 32), np.float32)),
            "shape [2, 3, 32, 32], the model expects [1, 3, 32, 32] [1, C, H, W]; the package is compiled for batch 1",
        ),
        (lambda p: np.save(p, np.full((1, 3, 32, 32), np.nan, np.float32)), "non-finite pixel values"),
        (lambda p: np.save(p, np.zeros((1, 3, 32, 32), np.complex64)), "must be real numbers"),
        (lambda p: np.save(p, np.array([{"a": 1}]), allow_pickle=True), "not a readable .npy array"),
        (lambda p: p.write_bytes(b"garbage"), "not a readable .npy array"),
    ],
)
def test_input_files_are_checked(tmp_path, capsys, make, message):
    p = tmp_path / "x.npy"
    make(p)
    assert run_main(["--model", "tiny-1layer", "--reference-only", "--input", str(p)]) == 1
    err = capsys.readouterr().err
    assert message in err and str(p) in err, err


def test_input_must_be_npy(tmp_path, capsys):
    p = tmp_path / "x.npz"
    np.savez(p, x=np.zeros((1, 3, 32, 32)))
    assert run_main(["--model", "tiny-1layer", "--reference-only", "--input", str(p)]) == 1
    assert "expected a .npy file" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------
# Packages and flags


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    from ipu.tools.fuzz import Workdir

    return Workdir(tmp_path_factory.mktemp("pkg")).package


def _edit_manifest(src, dst, edit):
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    m = json.loads(members["manifest.json"])
    edit(m)
    members["manifest.json"] = json.dumps(m).encode()
    with zipfile.ZipFile(dst, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["target"].update(num_tiles="4"), "manifest 'target.num_tiles' must be int, got '4'"),
        (lambda m: m.update(metadata=[]), "manifest 'metadata' must be a JSON object"),
        (
            lambda m: m["target"].update(num_workers=12),
            "'target.num_workers' is 12; this runtime simulates 6",
        ),
        (lambda m: m["target"].update(num_tiles=2), "outside [0, 2)"),
        (lambda m: m["metadata"]["config"].update(hidden_size=128), "the metadata's config implies"),
        (
            lambda m: m["inputs"][0].update(shape=[1, 3, 64, 64]),
            "has shape [1, 3, 64, 64], the metadata's config implies",
        ),
    ],
)
def test_package_manifest_is_checked_at_open(package, tmp_path, capsys, edit, message):
    from ipu.runtime.package import Package, PackageError

    p = tmp_path / "bad.ipupkg"
    _edit_manifest(package, p, edit)
    with pytest.raises(PackageError) as e:
        Package.load(p)
    assert message in str(e.value) and str(p) in str(e.value)
    assert run_main([str(p)]) == 1
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tiles", "3"], "--tiles: only with --model"),
        (["--layers", "1"], "--layers: only with --model"),
        (["-o", "x.ipupkg"], "-o: only with --model"),
        (["--pipeline", "nn-fuse-qkv"], "--pipeline: only with --model"),
    ],
)
def test_flags_that_do_not_apply_to_a_package_run_are_errors(package, capsys, extra, message):
    with pytest.raises(SystemExit) as e:
        run_main([str(package), *extra])
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--model", "tiny-1layer", "--tiles", "4", "--pipeline", "nn-fuse-qkv"],
            "--pipeline applies to --reference-only",
        ),
        (["--model", "tiny-1layer", "--tiles", "0"], "--tiles must be at least 1"),
        (["--model", "tiny-1layer", "--layers", "0", "--reference-only"], "--layers must be at least 1"),
        (["--model", "tiny-1layer", "--reference-only", "--threshold", "nan"], "--threshold must be finite"),
        # Flags the chosen run would not read.
        (
            ["--model", "tiny-1layer", "--tiles", "4", "--threshold", "0.5"],
            "--threshold applies to --per-op only",
        ),
        (["--model", "tiny-1layer", "--tiles", "4", "--profile-merge-rounds"], "applies to --profile only"),
        (
            ["--model", "tiny-1layer", "--reference-only", "--inferences", "5"],
            "--reference-only evaluates once and always compares with fp32: --inferences does not apply",
        ),
        (
            ["--model", "tiny-1layer", "--reference-only", "--compare-reference", "--save-outputs", "d"],
            "--compare-reference, --save-outputs do not apply",
        ),
        (
            ["--model", "tiny-1layer", "--emit-nn", "-", "--seed", "2", "--input", "x.npy"],
            "--emit-nn stops after writing the nn IR: --input, --seed do not apply",
        ),
    ],
)
def test_model_flags_are_checked(capsys, argv, message):
    with pytest.raises(SystemExit):
        run_main(argv)
    assert message in capsys.readouterr().err


def test_layers_with_weights_is_an_error(ckpt, capsys):
    with pytest.raises(SystemExit):
        run_main(["--model", str(ckpt), "--weights", str(ckpt), "--layers", "3", "--reference-only"])
    assert "--layers does not apply with --weights" in capsys.readouterr().err


def test_compile_failure_of_ipu_run_model_is_a_diagnostic(capsys):
    # 3 tiles cannot hold the tiny model's two heads' attention plan: a pass fails during compilation.
    rc = run_main(["--model", "tiny-1layer", "--tiles", "3", "--layers", "1"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    assert rc == 0 or (rc == 1 and err.startswith("ipu-run: error:")), err


def test_nonfinite_outputs_are_reported(package, capsys):
    from ipu.tools.ipu_run import nonfinite_outputs

    assert nonfinite_outputs({"y": np.array([1.0, np.nan, np.inf])}) == [
        "output 'y': 1 NaN and 1 infinite of 3 values"
    ]
    assert nonfinite_outputs({"y": np.zeros(3)}) == []


@pytest.mark.parametrize(
    "report, source, extra, message",
    [
        (
            "profile",
            "exchange",
            ["--memory-plan", "tiles=4"],
            "--memory-plan applies to the placement report only",
        ),
        (
            "placement",
            "memory",
            ["--memory-plan", "tiles=4"],
            "--memory-plan does not apply: @siglip_vision has",
        ),
        ("profile", "package", [], "a package; the profile report reads MLIR"),
        (
            "placement",
            "package",
            ["-p", "nn-fuse-qkv"],
            "a package is already compiled: -p and --memory-plan",
        ),
    ],
)
def test_ipu_report_flags_that_do_not_apply_are_errors(
    levels, package, tmp_path, capsys, report, source, extra, message
):
    from ipu.tools.ipu_report import main as report_main

    if source == "package":
        src = str(package)
    else:
        src = str(tmp_path / "in.mlir")
        (tmp_path / "in.mlir").write_text(levels[source])
    assert report_main([report, src, "-o", str(tmp_path / "out"), *extra]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_package_declaring_more_than_the_machine_holds_is_refused_before_inflating(package, monkeypatch):
    # A zip member's declared size is checked before it is read (a 2 MB archive can declare 2 GiB of zeros).
    from ipu.runtime import package as pk

    total = sum(i.file_size for i in zipfile.ZipFile(package).infolist())
    monkeypatch.setattr(pk, "MAX_PACKAGE_BYTES", total - 1)
    with pytest.raises(pk.PackageError, match=f"unpack to {total} bytes"):
        pk.Package.load(package)
    monkeypatch.setattr(pk, "MAX_PACKAGE_BYTES", total)
    pk.Package.load(package)


def test_finite_values_past_the_device_format_are_refused_by_name(package, tmp_path, capsys):
    # 70000 is finite in f32 but infinite as the device's f16: refused at upload, not NaN outputs later.
    p = tmp_path / "big.npy"
    np.save(p, np.full((1, CFG.num_channels, CFG.image_size, CFG.image_size), 7.0e4, np.float32))
    assert run_main([str(package), "--input", str(p)]) == 1
    err = capsys.readouterr().err
    assert "'pixel_values': 3072 finite values exceed the f16 range (largest 65504)" in err, err
    assert "RuntimeWarning" not in err and "NaN" not in err
