"""Exchange send staging of transfers that start at a half word (f16 blocks with an odd number of columns, e.g.
a GEMM's 13- or 73-column panels): the half-word shifted copy kernel (`copy_shift_sup` / `copy_shift_rows`) on
the simulator against its numpy semantics and its cycle estimate, its host checks, and end to end the shapes
that failed with "exchange send staging: copy of N B at ... is not whole aligned words" (BENCHMARKS.md, "Exchange
staging of odd shapes"), compiled, simulated and compared with the device-precision reference."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.passes import PassPipeline

from ipu.backend.kernels import copy as C
from ipu.backend.kernels.harness import run_call
from ipu.backend.lower import compile_model
from ipu.backend.target import Target
from ipu.frontend.reference import evaluate
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.frontend.weights import random_weights
from ipu.passes.nn_quantize import DEFAULT_SPEC
from ipu.passes.registry import all_passes
from ipu.runtime.host import Session
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = C.library_asm(TARGET.sram_base)
TABLE = 0x58000
LO, HI = 0x60000, 0xA0000
R0, R1 = 0x60000, 0x90000


def _run_shift(copies, seed: int = 0) -> int:
    tab = C.table(copies, shift=True)
    sim = Simulator(TARGET)
    mem = np.random.default_rng(seed).integers(0, 256, HI - LO, dtype=np.uint8)
    cyc, _ = run_call(sim, LIB, TABLE, lambda labels: tab, C.SHIFT_ENTRY, {LO: mem})
    got = sim.read(LO, HI - LO, np.uint8, tiles=[0]).reshape(-1)
    np.testing.assert_array_equal(got, C.shift_semantics(mem, LO, copies))
    assert C.shift_cycles(tab) == cyc, (C.shift_cycles(tab), cyc)
    return cyc


@pytest.mark.parametrize(
    "src,dst",
    [
        (R1 + 2, R1 + 0x2000),  # source at 2 mod 4: the word before its first half read, its low half dropped
        (R1 + 6, R1 + 0x2004),
        (R1, R1 + 0x2002),  # destination at 2 mod 4: the first half a row of its own
        (R0 + 0x1004, R1 + 0x3006),
        (R1 + 0x1002, R0),
    ],
)
@pytest.mark.parametrize("nbytes", [2, 4, 6, 26, 146, 148, 1002, 4098])
def test_shifted_copy(src, dst, nbytes):
    _run_shift([(src, dst, nbytes)])


def test_shifted_many_rows():
    """13-element f16 rows of a 13-column block (every other row at 2 mod 4) into 8-byte slots, at either phase."""
    rows = [(R1 + 26 * i, R1 + 0x4000 + 32 * i + 2 * ((i + 1) % 2), 26) for i in range(24)]
    _run_shift(rows)
    _run_shift([(R1 + 26 * i, R1 + 0x4000 + 28 * i + 2 * ((i + 1) % 2), 26) for i in range(40)], seed=1)


def test_shifted_checks():
    with pytest.raises(ValueError, match="not a half-word shifted copy"):
        C.table([(R1, R1 + 0x100, 8)], shift=True)  # same word phase: a plain copy
    with pytest.raises(ValueError, match="not a half-word shifted copy"):
        C.table([(R1 + 1, R1 + 0x103, 8)], shift=True)  # odd bytes
    with pytest.raises(ValueError, match="overlap"):
        C.table([(R1 + 2, R1 + 0x100, 6), (R1 + 0x40, R1 + 0x106, 6)], shift=True)  # one word written twice


def _device_reference(cfg, x, w):
    params = {k: np.asarray(w[k]) for k in w.keys()}
    module = build_vision_model(cfg)
    PassPipeline.parse_spec(dict(all_passes()), DEFAULT_SPEC).apply(Context(), module)
    return evaluate(module, {"pixel_values": x}, params, mode="device").outputs


def _cosine(a, b) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize(
    "tiles,changes",
    [
        (32, {}),  # fc1's output in 13-column panels gathered into whole rows for fc2
        (16, {"intermediate_size": 2336}),  # two MLP parts of 1168 = 16 x 73 columns
    ],
    ids=["tiny-32-tiles", "mlp-2336-16-tiles"],
)
def test_odd_panels_end_to_end(tiles, changes):
    cfg = replace(PRESETS["tiny"], num_hidden_layers=1, **changes)
    w = random_weights(cfg, seed=0)
    pkg = compile_model(cfg, Target.small(tiles=tiles, sram_kib=624), weights=w)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    session = Session(pkg)
    session.upload_parameters(w)
    got = session.run({"pixel_values": x}).outputs
    want = _device_reference(cfg, x, w)
    for name in ("last_hidden_state", "pooler_output"):
        for g, d in zip(got[name].reshape(-1, cfg.hidden_size), want[name].reshape(-1, cfg.hidden_size)):
            assert _cosine(g, d) >= 0.9999, (name, _cosine(g, d))
            assert np.linalg.norm(g - d) <= 0.02 * np.linalg.norm(d), name
