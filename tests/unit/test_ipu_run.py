"""The `ipu-run` command: compile-and-run, package runs, the reference-only path, its errors."""

import os

import numpy as np
import pytest

from ipu.tools.ipu_run import main, metrics


def test_compile_and_run_on_16_tiles(tmp_path, capsys):
    pkg = tmp_path / "tiny.ipupkg"
    assert main(["--model", "siglip-tiny", "--tiles", "16", "--inferences", "2", "-o", str(pkg)]) == 0
    out = capsys.readouterr().out
    assert "compiled SigLIP vision (2 layers, width 64, 16 tokens) for small-16x624k (16 tiles)" in out
    assert "inference 2:" in out and "outputs identical to the previous inference" in out
    cycles = int(out.split("inference 1: ")[1].split()[0])
    assert cycles > 0
    # The written package runs by itself, with random weights for the config it carries.
    assert main([str(pkg), "--compare-reference"]) == 0
    out = capsys.readouterr().out
    assert f"inference 1: {cycles} cycles" in out
    cosines = [
        float(line.split("cosine")[1].split()[0]) for line in out.splitlines() if "vs fp32 reference" in line
    ]
    assert len(cosines) == 2 and all(0.95 < c <= 1.0 for c in cosines)
    # Per embedding (issue 6: every embedding >= 0.99 vs fp32): 16 token rows and 1 pooled row.
    per_row = [
        float(line.split("min cosine ")[1].split(",")[0])
        for line in out.splitlines()
        if "per embedding" in line
    ]
    assert len(per_row) == 2 and all(0.99 <= c <= 1.0 for c in per_row), per_row
    assert "(16)" in out and "(1)" in out


def test_reference_only_path(capsys):
    assert main(["--model", "siglip-tiny", "--reference-only", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "nn.repeat" in out and "nn.cast" in out  # the nn passes ran
    lines = [line for line in out.splitlines() if "device precision vs fp32" in line]
    assert len(lines) == 2


def test_errors_are_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "missing.ipupkg")]) == 1
    assert "ipu-run: error:" in capsys.readouterr().err
    assert main(["--model", "no-such-model", "--reference-only"]) == 1
    assert "unknown SigLIP config 'no-such-model'" in capsys.readouterr().err
    assert main(["--model", "siglip-tiny", "--reference-only", "--pipeline", "no-such-pass"]) == 1
    assert "bad --pipeline" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([])
    with pytest.raises(SystemExit):  # a calibration only sets FP8 activations' scales
        main(["--model", "siglip-tiny", "--activations", "f16", "--calibrate"])
    assert (
        "--calibrate sets the FP8 activations' scales: it needs --activations fp8 or mlp"
        in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):  # the FP8-activation linears are a subset of --activations fp8's
        main(["--model", "siglip-tiny", "--fp8-linears", "fc2"])
    assert "--fp8-linears chooses the linears with FP8 activations" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--model", "siglip-tiny", "--activations", "fp8", "--fp8-linears", " , "])
    assert "--fp8-linears needs at least one parameter-name substring" in capsys.readouterr().err


def test_metrics():
    a = np.array([1.0, 2.0, 3.0])
    assert metrics(a, a) == pytest.approx((1.0, 0.0))
    cos, rel = metrics(-a, a)
    assert cos == pytest.approx(-1.0) and rel == pytest.approx(2.0)


def test_weights_order_changes_the_program_not_the_outputs(tmp_path, capsys):
    """`--weights-order row_major` keeps the weights row-major (prepared into panels on the device every
    inference); the default stores them as the AMP reads them: fewer cycles, the same output bits."""
    cycles, outputs = {}, {}
    for order in ("row_major", "auto"):
        out_dir = tmp_path / order
        argv = [
            "--model",
            "siglip-tiny",
            "--tiles",
            "16",
            "--weights-order",
            order,
            "--save-outputs",
            str(out_dir),
        ]
        assert main(argv) == 0
        out = capsys.readouterr().out
        cycles[order] = int(out.split("inference 1: ")[1].split()[0])
        outputs[order] = {p.name: np.load(p) for p in sorted(out_dir.glob("*.npy"))}
    assert cycles["auto"] < cycles["row_major"]
    assert outputs["auto"].keys() == outputs["row_major"].keys() and outputs["auto"]
    for name, x in outputs["auto"].items():
        assert np.array_equal(x, outputs["row_major"][name]), name
    with pytest.raises(SystemExit):
        main(["--model", "siglip-tiny", "--weights-order", "columns"])


def test_threads_option(tmp_path, capsys, monkeypatch):
    """--threads N sets the simulator's threads, auto takes IPU_SIM_THREADS or the idle cores; a bad count is a
    one-line error; the cycles and outputs are the same bits whatever the count."""
    from ipu.runtime import jit

    pkg = tmp_path / "t.ipupkg"
    assert main(["--model", "siglip-tiny", "--tiles", "16", "-o", str(pkg), "--quiet", "--threads", "2"]) == 0
    two = capsys.readouterr().out
    assert "simulating on 2 threads" in two or jit.numba is None
    assert main([str(pkg), "--quiet", "--threads", "1"]) == 0
    one = capsys.readouterr().out
    assert "simulating on 1 thread" in one
    cycles = [line for line in (one + two).splitlines() if line.startswith("inference 1:")]
    assert len(cycles) == 2 and cycles[0].split(" (")[0] == cycles[1].split(" (")[0]
    monkeypatch.setenv("IPU_SIM_THREADS", "1")
    assert main([str(pkg), "--quiet"]) == 0
    assert "simulating on 1 thread" in capsys.readouterr().out
    monkeypatch.delenv("IPU_SIM_THREADS")
    idle = jit.idle_cores(0.05)
    assert idle is None or 0 <= idle <= (os.cpu_count() or 1) + 0.01
    with pytest.raises(SystemExit):
        main([str(pkg), "--threads", "0"])
    assert "--threads must be auto or a count of 1 to 64, got '0'" in capsys.readouterr().err
    jit.set_threads(1)
