"""Issue 23, both cores: the fast path's compiled kernels split their contexts over threads (runtime/jit.py,
`jit.set_threads`, IPU_SIM_THREADS). Every group is forced through the parallel kernels here (PARALLEL_MIN = 1)
and the run must equal the reference path's bit for bit: outputs, cycles, instructions, the profile trace and the
whole final state; and a 2-thread run must equal a 1-thread run."""

from __future__ import annotations

import numpy as np
import pytest
from test_sim_fast_path import STATE, _run  # noqa: E402  (pytest puts tests/unit on sys.path)

from ipu.backend.lower import compile_model
from ipu.backend.target import Target
from ipu.frontend.siglip import PRESETS
from ipu.runtime import jit
from ipu.runtime.simulator import Simulator

pytestmark = pytest.mark.skipif(jit.pace_kernel is None, reason="numba is not installed")


@pytest.fixture
def threads():
    old_threads, old_min = jit.threads(), jit.PARALLEL_MIN

    def use(n: int, parallel_min: int = 1) -> int:
        jit.PARALLEL_MIN = parallel_min
        return jit.set_threads(n)

    yield use
    jit.PARALLEL_MIN = old_min
    jit.set_threads(old_threads)


def _same(a, b):
    (a_runs, a_sim, _), (b_runs, b_sim, _) = a, b
    for x, y in zip(a_runs, b_runs):
        for name in x.outputs:
            np.testing.assert_array_equal(y.outputs[name], x.outputs[name], err_msg=name)
        np.testing.assert_array_equal(y.run.tile_cycles, x.run.tile_cycles)
        np.testing.assert_array_equal(y.run.context_cycles, x.run.context_cycles)
        np.testing.assert_array_equal(y.run.instructions, x.run.instructions)
    for field in ("clock", "pc", "kind"):
        np.testing.assert_array_equal(getattr(b_runs[0].trace, field), getattr(a_runs[0].trace, field))
    for name in STATE:
        np.testing.assert_array_equal(getattr(b_sim, name), getattr(a_sim, name), err_msg=name)


def test_parallel_kernels_equal_reference_and_one_thread(threads):
    cfg = PRESETS["tiny"].with_layers(1)
    pkg = compile_model(cfg, Target.small(tiles=16, sram_kib=624))
    ref = _run(pkg, cfg, 3, reference=True)
    if threads(2) < 2:
        pytest.skip("one core: numba has a single thread")
    calls, loops = [], []
    par, rpt = jit._pace_parallel, jit._rpt_parallel
    jit._pace_parallel = lambda *a: calls.append(a[-1]) or par(*a)
    jit._rpt_parallel = lambda *a: loops.append(len(a[-2]) - 1) or rpt(*a)
    straight = Simulator._run_straight
    try:
        two = _run(pkg, cfg, 3, reference=False)
        # without the straight runs (which take every pace step outside rpt loops here), single pace steps
        # go through the parallel pace kernel
        Simulator._run_straight = lambda self, g: False
        two_steps = _run(pkg, cfg, 3, reference=False)
    finally:
        jit._pace_parallel, jit._rpt_parallel = par, rpt
        Simulator._run_straight = straight
    # the parallel kernels ran, over two runs of tiles: single pace steps and whole fused rpt loops
    assert calls and min(calls) == 2
    assert loops and min(loops) == 2
    threads(1)
    one = _run(pkg, cfg, 3, reference=False)
    _same(ref, two)
    _same(ref, two_steps)
    _same(one, two)


@pytest.mark.parametrize("n,tiles", [(96, 16), (7, 3), (1, 1), (13, 13)])
def test_tile_runs_never_split_a_tile(n, tiles):
    """_bounds: runs cover the contexts in order and a tile's contexts are in one run."""
    rng = np.random.default_rng(n)
    idx = np.sort(rng.choice(np.arange(tiles * 6), size=min(n, tiles * 6), replace=False))
    tile_of = np.arange(tiles * 6) // 6
    for q in (1, 2, 3, 8):
        b = jit._bounds(idx, tile_of, q)
        assert b[0] == 0 and b[-1] == len(idx) and (np.diff(b) >= 0).all()
        for x in b[1:-1]:
            assert x in (0, len(idx)) or tile_of[idx[x]] != tile_of[idx[x - 1]]


def _amp_sim(reference: bool, tiles: int = 4, groups: int = 9):
    from ipu.runtime import examples as ex
    from ipu.runtime.simulator import Simulator

    t = Target.small(tiles=tiles, sram_kib=624)
    lay = ex.BENCH_LAYOUT
    rng = np.random.default_rng(0)
    w = rng.standard_normal((tiles, 16, 16)).astype(np.float16)
    x = rng.standard_normal((tiles, 6, groups, 16)).astype(np.float16)
    p = rng.standard_normal((tiles, 6, groups, 16)).astype(np.float16)
    sim = Simulator(t, reference=reference)
    sim.load(ex.amp_program(t, lay=lay))
    ex.amp_setup(sim, groups, w.view(np.uint8).reshape(tiles, -1), x.view(np.uint8), p, lay=lay)
    return sim, lay


@pytest.mark.parametrize("nthreads", [1, 2])
def test_fused_loop_stops_at_the_failing_bundle(threads, nthreads):
    """A load of never-written memory in the middle of the AMP loop (jit.rpt_loop's body): the fused loop stops
    before that bundle and the numpy semantics report the same error as the reference path, with the same state
    of every other context."""
    from ipu.runtime.errors import SimError

    threads(nthreads)
    errors, sims = [], []
    for reference in (True, False):
        sim, lay = _amp_sim(reference)
        word = (lay.partials + 2 * lay.worker_stride + 5 * 32 - sim.base) // 8  # worker 2, group 5
        sim.wstate[word, 3] = 0  # tile 3: unwritten
        with pytest.raises(SimError) as e:
            sim.run("main")
        errors.append(str(e.value))
        sims.append(sim)
    assert "poison" in errors[0] and errors[1] == errors[0]
    for name in (
        "acc_cur",
        "amp_done_raw",
        "m",
        "a",
    ):  # the failing tile's contexts, stopped at the same step
        ref, fast = getattr(sims[0], name), getattr(sims[1], name)
        np.testing.assert_array_equal(fast[18:24], ref[18:24], err_msg=name)
