"""The `ipu-run` command: its model path, its errors."""

import pytest

from ipu.tools.ipu_run import main, metrics


def test_model_path_runs_and_says_what_it_did(capsys):
    assert main(["--model", "siglip-tiny", "--seed", "3"]) == 0
    out, err = capsys.readouterr()
    assert "nn.repeat" in out and "nn.cast" in out  # the nn passes ran
    lines = [line for line in out.splitlines() if "device precision vs fp32" in line]
    assert len(lines) == 2
    cosines = [float(line.split("cosine")[1].split()[0]) for line in lines]
    assert all(0.95 < c <= 1.0 for c in cosines)
    if "NOTE" in err:  # until the lowering lands, the placeholder says so
        assert "reference evaluator" in err


def test_errors_are_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "missing.ipupkg")]) == 1
    assert "ipu-run: error:" in capsys.readouterr().err
    assert main(["--model", "no-such-model"]) == 1
    assert "unknown SigLIP config 'no-such-model'" in capsys.readouterr().err
    assert main(["--model", "siglip-tiny", "--pipeline", "no-such-pass"]) == 1
    assert "bad --pipeline" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([])


def test_metrics():
    import numpy as np

    a = np.array([1.0, 2.0, 3.0])
    assert metrics(a, a) == pytest.approx((1.0, 0.0))
    cos, rel = metrics(-a, a)
    assert cos == pytest.approx(-1.0) and rel == pytest.approx(2.0)
