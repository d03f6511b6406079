"""bench/bench_layer_breakdown.py: the loop iteration's figures and the body's compute split by kind, from a
profile's `repeats` and `steps` (a synthetic profile with every kind of step)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `bench` is not installed
from bench.bench_layer_breakdown import breakdown  # noqa: E402


def _step(kind, kernel, label, cycles, repeat=0, tiles=None):
    return {"kind": kind, "kernel": kernel, "name": kernel, "label": label, "cycles": cycles, "repeat": repeat,
            "tile_cycles": tiles or [cycles]}  # fmt: skip


def test_breakdown_splits_the_body_by_kind():
    profile = {
        "repeats": [
            {"iterations": [{"cycles": 1}, {"cycles": 500, "compute": 300, "exchange": 180, "sync": 20}]}
        ],
        "steps": [
            _step("compute", "rows_sup", "before the loop", 999, repeat=None),
            _step("compute", "gemm_f16_sup_ld128", "nn.linear_partials: GEMM", 200),
            _step("compute", "copy_sup", "exchange copies", 30, tiles=[30, 45]),
            _step("compute", "copy_sup", "nn.linear_partials: result rows", 20),
            _step("compute", "ew_sup", "nn.add", 50),
            _step("exchange", "xch_timed", "exchange timed", 180),
            _step("repeat-rest", "tile.repeat", "iterations 2..2", 500),
        ],
    }
    b = breakdown(profile)
    assert (b["iteration"], b["compute"], b["exchange"], b["sync"]) == (500, 300, 180, 20)
    assert (b["gemm"], b["copies"], b["other"]) == (200, 30, 70)  # result rows are not the exchange's copies
    assert [s[3] for s in b["steps"]] == [200, 30, 20, 50, 180] and b["steps"][1][4] == 45


def test_breakdown_needs_a_loop():
    with pytest.raises(SystemExit, match="no layer loop"):
        breakdown({"repeats": [], "steps": []})
