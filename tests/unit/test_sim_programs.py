"""Small hand-written programs on the simulator, checked against numpy, and the three program sources."""

import numpy as np
import pytest

from ipu.backend.asm_text import print_program
from ipu.backend.encoding import decode_program, encode_program
from ipu.backend.isa_program import layout
from ipu.backend.target import Target
from ipu.dialects.asm import kernels_to_module, module_to_kernels
from ipu.runtime import examples as ex
from ipu.runtime import fp8
from ipu.runtime.simulator import Simulator

T = Target.small(tiles=3, sram_kib=256)
VS, X, Y, OUT = 0x5C000, 0x61000, 0x62000, 0x63000


def _dot_sim(program, n, x, y):
    sim = Simulator(T)
    sim.load(program)
    tiles = np.arange(T.num_tiles)
    vs = np.zeros((T.num_tiles, 6, 4), np.uint32)
    for w in range(6):
        vs[:, w] = [X + w * n * 4, Y + w * n * 4, n // 2, OUT + 4 * w]
    sim.write(VS, vs.reshape(T.num_tiles, -1), tiles=tiles)
    sim.write(X, x.reshape(T.num_tiles, -1), tiles=tiles)
    sim.write(Y, y.reshape(T.num_tiles, -1), tiles=tiles)
    return sim, sim.run("main")


def test_dot_product_matches_numpy_and_reports_cycles():
    n = 32
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T.num_tiles, 6, n)).astype(np.float32)
    y = rng.standard_normal((T.num_tiles, 6, n)).astype(np.float32)
    sim, res = _dot_sim(ex.dot_f32_program(T, VS), n, x, y)
    out = sim.read(OUT, 24, np.float32)
    # Reference in the program's order: two f32 lanes (even/odd elements) accumulated in turn, then added.
    prod = (x * y).astype(np.float32)
    lanes = np.zeros((T.num_tiles, 6, 2), np.float32)
    for k in range(0, n, 2):
        lanes = (lanes + prod[..., k : k + 2]).astype(np.float32)
    np.testing.assert_array_equal(out, lanes[..., 0] + lanes[..., 1])
    np.testing.assert_allclose(out, np.einsum("twn,twn->tw", x.astype(np.float64), y), rtol=1e-5, atol=1e-5)
    # Cycles: each worker issues 4 setup loads + 4 setzi + rpt (+ alignment nop) + 4 bundles x n/2 + 3; 6 cycles each.
    units = 4 + 4 + 1 + 4 * (n // 2) + 3
    worker_busy = res.context_cycles[:, 1:] - res.context_cycles[:, 1:].min()
    assert (worker_busy == 0).all()  # SIMT: identical work, identical clocks
    start = 1 + 1 + 6  # supervisor: two setzi (1 cycle each) + runall (6: a system instruction stalls)
    assert res.context_cycles[0, 1] in (start + 6 * units, start + 6 * (units + 1))
    assert (res.tile_cycles == res.context_cycles[:, 1] + T.sync_local_cycles + 6).all()


@pytest.mark.parametrize("n_groups", [1, 6])
def test_amp_16x16_f16_matches_numpy(n_groups):
    rng = np.random.default_rng(n_groups)
    w = rng.standard_normal((T.num_tiles, 16, 16)).astype(np.float16)
    x = rng.standard_normal((T.num_tiles, 6, n_groups, 16)).astype(np.float16)
    p = rng.standard_normal((T.num_tiles, 6, n_groups, 16)).astype(np.float16)
    sim = Simulator(T)
    sim.load(ex.amp_program(T))
    ex.amp_setup(sim, n_groups, w.view(np.uint8).reshape(T.num_tiles, -1), x.view(np.uint8), p)
    res = sim.run("main")
    y = ex.amp_outputs(sim, n_groups)
    ref = np.einsum("twnk,tek->twne", x.astype(np.float64), w.astype(np.float64)) + p
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-3, atol=2e-3)
    # each worker: 4 (n + 2) AMP bundles plus setup/tail instructions
    assert (res.instructions[:, 1:] == res.instructions[0, 1]).all()
    assert res.instructions[0, 1] == 2 * 4 * (n_groups + 2) + 12


def test_amp_16x16_fp8_matches_numpy():
    n_groups, xfmt, wfmt, scale = 3, fp8.F143, fp8.F143, -4
    rng = np.random.default_rng(7)
    wv = rng.standard_normal((T.num_tiles, 16, 32)).astype(np.float32) * 8
    xv = rng.standard_normal((T.num_tiles, 6, n_groups, 32)).astype(np.float32) * 4
    p = rng.standard_normal((T.num_tiles, 6, n_groups, 16)).astype(np.float16)
    wb, xb = fp8.encode(wv, wfmt), fp8.encode(xv, xfmt)
    sim = Simulator(T)
    sim.load(ex.amp_program(T, fp8_formats=(xfmt, wfmt), fp8_scale=scale))
    ex.amp_setup(sim, n_groups, wb.reshape(T.num_tiles, -1), xb, p)
    sim.run("main")
    y = ex.amp_outputs(sim, n_groups)
    ref = (
        np.einsum("twnk,tek->twne", fp8.decode(xb, xfmt).astype(np.float64), fp8.decode(wb, wfmt))
        * 2.0**scale
        + p
    )
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-3, atol=2e-3)


def test_ir_text_and_binary_programs_simulate_identically():
    """The same program from the asm IR, from printed text, and from the binary image: same SRAM, same cycles."""
    n = 16
    rng = np.random.default_rng(1)
    x = rng.standard_normal((T.num_tiles, 6, n)).astype(np.float32)
    y = rng.standard_normal((T.num_tiles, 6, n)).astype(np.float32)
    prog = ex.dot_f32_program(T, VS)
    from_ir = layout(module_to_kernels(kernels_to_module(prog.to_kernels())), T.sram_base)
    from_text = ex.parse_program(print_program(prog), T.sram_base)
    from_bin = decode_program(encode_program(prog), T.sram_base, prog.kernels)
    runs = [_dot_sim(p, n, x, y) for p in (prog, from_ir, from_text, from_bin)]
    for sim, res in runs[1:]:
        assert np.array_equal(sim.sram, runs[0][0].sram)
        assert np.array_equal(res.context_cycles, runs[0][1].context_cycles)


def test_simulator_memory_stays_near_sram_size():
    t = Target.small(tiles=64, sram_kib=624)
    sim = Simulator(t)
    state = sim.state_bytes()
    # per-word poison/protection state is 1/8 of SRAM; registers, CSRs and accumulators are small
    assert state["sram"] == 64 * 624 * 1024
    assert state["word_state"] == state["sram"] // 8
    assert state["other"] < 0.01 * state["sram"]


def test_results_are_per_run_while_clocks_keep_counting():
    n = 8
    rng = np.random.default_rng(2)
    x = rng.standard_normal((T.num_tiles, 6, n)).astype(np.float32)
    sim, first = _dot_sim(ex.dot_f32_program(T, VS), n, x, x)
    second = sim.run("main")
    assert np.array_equal(first.tile_cycles, second.tile_cycles)
    assert np.array_equal(first.instructions, second.instructions)
    assert (sim.cycles[sim.NW :] == 2 * first.tile_cycles).all()


def test_load_from_text_module_and_image():
    from ipu.backend.asm_text import parse_to_module
    from ipu.backend.encoding import encode_program

    text = ".globl main\n.supervisor\nmain:\n  setzi $m1, 41\n  add $m1, $m1, 1\n  br $lr\n"
    sims = [Simulator(T) for _ in range(3)]
    p = sims[0].load_text(text)
    sims[1].load_module(parse_to_module(text))
    sims[2].load_image(encode_program(p), p.kernels)
    for sim in sims:
        sim.run("main")
        assert (sim.m[sim.NW :, 1] == 42).all()
