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
from ipu.runtime import jit
from ipu.runtime.halfconv import F16_TO_F32
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


@pytest.mark.skipif(jit.amp_step_f16 is None, reason="numba is not installed")
def test_compiled_amp_rounds_to_half_as_numpy():
    """The compiled AMP step's float32 -> half rounding (phase 0: finished <- in-progress) against numpy's, on
    every half's neighbourhood: each half value, the ties halfway to the next, and one float32 step either side
    (normals, subnormals, zeros, overflow to infinity, infinities; NaN is left to numpy)."""
    with np.errstate(over="ignore"):
        _check_half_rounding()


def _check_half_rounding():
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    h = h[np.isfinite(h) | np.isinf(h)]
    lo = h.astype(np.float32)
    hi = np.nextafter(h, np.float16(np.inf)).astype(np.float32)
    mid = ((lo.astype(np.float64) + hi.astype(np.float64)) / 2).astype(np.float32)
    vals = np.concatenate(
        [lo, mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]
    )
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    vals = np.concatenate([vals, bits, [np.float32(65520), np.float32(-65520), np.float32(65519.996)]])
    vals = vals[~np.isnan(vals)].astype(np.float32)
    vals = np.concatenate([vals, np.zeros(-len(vals) % 16, np.float32)])
    n = len(vals) // 16
    acc = vals.reshape(n, 16).copy()
    done = np.zeros((n, 4), np.uint64)
    z = np.zeros((n, 4), np.uint64)
    a64 = np.zeros((n, 8), np.uint64)
    out = np.zeros(n, np.uint64)
    ok = jit.amp_step_f16(
        np.arange(n), 0, 0, 1, a64, np.zeros(n, np.int8), acc, acc.view(np.uint32), z.copy(), done, z.copy(),
        F16_TO_F32, out,
    )  # fmt: skip
    assert ok
    want = np.ascontiguousarray(vals.astype(np.float16)).view(np.uint64).reshape(n, 4)
    np.testing.assert_array_equal(done, want)
