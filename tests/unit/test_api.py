"""The Python API (`ipu.compile`, `ipu.Session`, `ipu-run --save-outputs`) and the README's example of it."""

import io
import re
from pathlib import Path

import numpy as np
import pytest

import ipu
from ipu.frontend.reference import evaluate
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.frontend.weights import random_weights, save_checkpoint
from ipu.progress import CompileProgress
from ipu.tools.ipu_run import main as ipu_run
from ipu.tools.ipu_run import metrics

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def tiny():
    phases = []
    pkg = ipu.compile("siglip-tiny", tiles=16, progress=lambda *a: phases.append(a))
    return pkg, phases


@pytest.fixture(scope="module")
def first_run(tiny):
    """(session, x, outputs of its first run) with the Session's default weights."""
    session = ipu.Session(tiny[0])
    x = np.random.default_rng(5).uniform(-1, 1, session.input_shape).astype(np.float32)
    return session, x, session.run(x)


def test_compile_reports_every_phase_in_order(tiny):
    pkg, phases = tiny
    names = [p[0] for p in phases]
    assert names[0] == "nn-fold-probe-attention" and "memory-plan" in names and names[-2] == "asm lowering"
    assert [p[1] for p in phases] == list(range(len(phases)))  # done counts up by one
    total = phases[0][2]
    assert all(p[2] == total for p in phases) and phases[-1][1] == total
    assert pkg.target.num_tiles == 16


def test_session_runs_many_times_against_the_reference(first_run):
    session, x, first = first_run
    cfg = PRESETS["tiny"]
    assert session.input_shape == (1, cfg.num_channels, cfg.image_size, cfg.image_size)
    assert sorted(first) == ["last_hidden_state", "pooler_output"]
    assert first["last_hidden_state"].shape == (1, cfg.num_patches, cfg.hidden_size)
    cycles = session.cycles
    assert cycles > 0
    second = session.run(x)
    assert session.inferences == 2 and session.cycles == cycles
    assert all(np.array_equal(first[k], second[k]) for k in first)
    # The Session's default weights are ipu-run's: seeded random weights of the package's config.
    ref = evaluate(
        build_vision_model(cfg), {"pixel_values": x}, random_weights(cfg, seed=0), mode="fp32"
    ).outputs
    for name in ref:
        cos, _ = metrics(first[name], ref[name])
        assert cos > 0.99, (name, cos)


def test_weights_and_ir_inputs(tmp_path, tiny, first_run):
    pkg, _ = tiny
    _, x, default = first_run
    cfg = PRESETS["tiny"]
    w = random_weights(cfg, seed=7)
    save_checkpoint(w, cfg, tmp_path / "ckpt")
    # nn IR text compiles to the same program as the preset; a checkpoint directory is accepted as weights.
    from_ir = ipu.compile(str(build_vision_model(cfg)), tiles=16, weights=tmp_path / "ckpt")
    assert from_ir.code == pkg.code
    with_ckpt = ipu.Session(from_ir).run(x)  # the weights given to compile
    ref = evaluate(build_vision_model(cfg), {"pixel_values": x}, w, mode="fp32").outputs
    assert metrics(with_ckpt["pooler_output"], ref["pooler_output"])[0] > 0.99
    assert not np.allclose(default["pooler_output"], with_ckpt["pooler_output"], atol=1e-3)
    with pytest.raises(TypeError):
        ipu.compile(3.5)
    with pytest.raises(ValueError, match="unknown SigLIP config"):
        ipu.compile("no-such-model", tiles=16)


def test_save_outputs_match_the_session(tmp_path, tiny, first_run, capsys):
    pkg, _ = tiny
    _, x, expected = first_run
    path = tmp_path / "tiny.ipupkg"
    pkg.save(path)
    np.save(tmp_path / "x.npy", x)
    assert (
        ipu_run([str(path), "--input", str(tmp_path / "x.npy"), "--save-outputs", str(tmp_path / "out")]) == 0
    )
    assert "output written to" in capsys.readouterr().out
    for name, value in expected.items():
        saved = np.load(tmp_path / "out" / f"{name}.npy")
        assert saved.dtype == np.float32 and np.array_equal(saved, value)


def test_progress_only_on_a_terminal():
    stream = io.StringIO()  # not a terminal: nothing drawn
    with CompileProgress(stream=stream) as bar:
        bar("a", 0, 2)
        bar("b", 1, 2)
        bar("done", 2, 2)
    assert not bar.enabled and stream.getvalue() == ""
    assert [p[0] for p in bar.phases] == ["a", "b"]
    stream = io.StringIO()
    with CompileProgress(enabled=True, stream=stream) as bar:
        bar("tile-plan", 0, 1)
    assert bar.enabled and "compiling" in stream.getvalue()


def test_readme_python_example(tmp_path, monkeypatch, capsys):
    text = README.read_text()
    section = text.split("## The Python API", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and printed[0] == printed[1]
    assert "'pooler_output': (1, 64)" in printed[0] and printed[0].endswith(" cycles")
    assert ipu.load(tmp_path / "tiny.ipupkg").target.num_tiles == 16
