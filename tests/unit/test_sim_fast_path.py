"""Issue 23: the simulator's fast path (the default) against its reference path (`Simulator(reference=True)`, or
IPU_SIM_REFERENCE=1). Compiled tiny SigLIP packages (1 and 2 layers, 8 and 16 tiles, two seeds) run through both,
profiled and plain, and everything a run shows must be identical: the outputs, every tile's and every context's
cycles, the instructions issued, the profile trace, and the whole SRAM, per-word state, registers, CSRs and AMP
state afterwards. The fast path must also take fewer group steps (it is not the reference path under another
name)."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.lower import compile_model
from ipu.backend.target import Target
from ipu.frontend.siglip import PRESETS
from ipu.frontend.weights import random_weights
from ipu.runtime.host import Session
from ipu.runtime.simulator import Simulator

STATE = (
    "mem64",
    "wstate",
    "m",
    "a",
    "csr",
    "cwei",
    "acc_cur",
    "amp_next_raw",
    "amp_done_raw",
    "cycles",
    "issued",
)


def _run(pkg, cfg, seed: int, reference: bool):
    sim = Simulator(pkg.target, reference=reference)
    assert sim.fast is not reference
    session = Session(pkg, sim)
    session.upload_parameters(random_weights(cfg, seed=seed))
    x = np.random.default_rng(seed).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    steps = [0]
    step = sim._step

    def count(g):
        steps[0] += 1
        return step(g)

    sim._step = count
    runs = [session.run({"pixel_values": x}, profile=True), session.run({"pixel_values": x})]
    return runs, sim, steps[0]


@pytest.mark.parametrize("layers,tiles,seed", [(1, 8, 1), (2, 16, 0)])
def test_fast_path_equals_reference(layers, tiles, seed):
    cfg = PRESETS["tiny"].with_layers(layers)
    pkg = compile_model(cfg, Target.small(tiles=tiles, sram_kib=624))
    ref_runs, ref_sim, ref_steps = _run(pkg, cfg, seed, reference=True)
    fast_runs, fast_sim, fast_steps = _run(pkg, cfg, seed, reference=False)
    for ref, fast in zip(ref_runs, fast_runs):
        assert ref.outputs.keys() == fast.outputs.keys()
        for name in ref.outputs:
            np.testing.assert_array_equal(fast.outputs[name], ref.outputs[name], err_msg=name)
        np.testing.assert_array_equal(fast.run.tile_cycles, ref.run.tile_cycles)
        np.testing.assert_array_equal(fast.run.context_cycles, ref.run.context_cycles)
        np.testing.assert_array_equal(fast.run.instructions, ref.run.instructions)
    ref_trace, fast_trace = ref_runs[0].trace, fast_runs[0].trace
    assert len(ref_trace.pc) > 0
    for field in ("clock", "pc", "kind"):
        np.testing.assert_array_equal(getattr(fast_trace, field), getattr(ref_trace, field), err_msg=field)
    for name in STATE:
        np.testing.assert_array_equal(getattr(fast_sim, name), getattr(ref_sim, name), err_msg=name)
    assert fast_steps < ref_steps
