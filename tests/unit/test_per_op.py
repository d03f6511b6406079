"""Per-op accuracy bisection (issue 7 item 3): compile_model(debug_values=True) keeps every device-computed nn op
result, `ipu-run --per-op` compares each with the reference evaluator and names the first divergence."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ipu.backend.lower import compile_model
from ipu.backend.target import Target
from ipu.frontend.siglip import PRESETS
from ipu.frontend.weights import random_weights
from ipu.runtime.host import Session
from ipu.runtime.package import Package
from ipu.tools.ipu_run import first_divergence, main, per_op

THRESHOLD = 0.02


@pytest.fixture(scope="module")
def run():
    cfg = PRESETS["siglip-tiny"]
    params = random_weights(cfg, seed=0)
    x = np.random.default_rng(1).uniform(-1, 1, (1, cfg.num_channels, cfg.image_size, cfg.image_size))
    x = x.astype(np.float32)
    pkg = compile_model(cfg, Target.small(tiles=16, sram_kib=624), params, debug_values=True)
    session = Session(pkg)
    session.upload_parameters(params)
    session.run({"pixel_values": x})
    return cfg, params, x, pkg, session


def test_every_op_matches_device_reference(run):
    cfg, params, x, pkg, session = run
    rows = per_op(session, pkg, cfg, params, x)
    kinds = {r[0].split()[1] for r in rows}
    assert {"nn.linear", "nn.add", "nn.layer_norm", "nn.gelu", "nn.attention", "nn.cast"} <= kinds
    assert len(rows) >= 40
    for name, _, rel_d, cos_d, rel_f, _ in rows:
        assert rel_d < THRESHOLD and cos_d > 0.9999, (name, rel_d, cos_d)
        assert rel_f > rel_d  # fp32 differs by the quantization (FP8 weights, f16 activations)
    assert first_divergence(rows, THRESHOLD) is None
    assert rows[-1][0].startswith("#") and rows[-1][0].endswith(" nn.add %pooler_output")  # the last op


def test_corrupted_value_is_named_first(run):
    cfg, params, x, pkg, session = run
    victim = next(b for b in pkg.debug if "nn.attention" in b.name)
    rng = np.random.default_rng(7)
    for tile, address, _, count in victim.chunks[:, :4].tolist():
        garbage = rng.uniform(-50, 50, count).astype(np.float32).view(np.uint8)
        session.device.write(int(address), garbage, tiles=[int(tile)])
    rows = per_op(session, pkg, cfg, params, x)
    assert first_divergence(rows, THRESHOLD) == victim.name
    assert [r[0] for r in rows if r[2] > THRESHOLD] == [victim.name]  # a copy: later ops are unaffected


def test_debug_bindings_survive_save_load(run, tmp_path):
    *_, pkg, _ = run
    back = Package.load(pkg.save(tmp_path / "m.ipupkg"))
    assert [b.name for b in back.debug] == [b.name for b in pkg.debug]
    assert all(np.array_equal(a.chunks, b.chunks) for a, b in zip(back.debug, pkg.debug))
    assert back.metadata["debug_positions"] == pkg.metadata["debug_positions"]


def test_cli_per_op(capsys):
    assert main(["--model", "siglip-tiny", "--tiles", "16", "--compare-reference", "--per-op"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"#\d+ nn\.attention", out) and "no op diverges" in out


def test_cli_per_op_needs_compare_reference():
    with pytest.raises(SystemExit):
        main(["--model", "siglip-tiny", "--tiles", "16", "--per-op"])
