"""Issue 23: the fast path runs supervisor code per context in one compiled call (`jit.sup_run`,
`Simulator._run_ctx`). A supervisor program whose tiles diverge on data (a per-tile table driving a loop with a
computed branch, per-tile counts, every integer instruction form, loads and stores and their step forms, call,
get / put, exchange set-ups, a send and an internal sync) runs through the reference path and the fast path:
memory, per-word state, registers, CSRs, cycles and instructions must be identical, and the compiled calls must
have executed most of it. A failing check inside such code gives the reference path's error."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.asm_text import parse_program
from ipu.backend.target import Target
from ipu.runtime import jit
from ipu.runtime.errors import SimError
from ipu.runtime.simulator import Simulator

pytestmark = pytest.mark.skipif(jit.sup_run is None, reason="numba is not installed")

T = Target.small(tiles=8, sram_kib=256)
TAB, OUT, RECV, SEND = 0x60000, 0x61000, 0x62000, 0x63000
ALU = ("add", "sub", "mul", "and", "or", "xor", "shl", "shr", "shrs", "cmpeq", "cmpne", "cmpslt", "cmpult", "min",
       "max")  # fmt: skip
IMM = {"add": -7, "sub": 300, "mul": -3, "and": 0xF0F, "or": 0x801, "xor": 0xFFF, "shl": 5, "shr": 31, "shrs": 3,
       "cmpeq": 5, "cmpne": -1, "cmpslt": -2, "cmpult": 4000, "min": -100, "max": 1000}  # fmt: skip


def _program(tiles: int) -> str:
    alu = "\n".join(
        f"    {op} $m12, $m4, $m5\n    add $m5, $m5, $m12\n    {op} $m12, $m4, {IMM[op]}\n    xor $m5, $m5, $m12"
        for op in ALU
    )
    return f"""
.globl main
.supervisor
main:
    get $m0, $TILE_ID
    add $m1, $m0, 1
    and $m1, $m1, {tiles - 1}
    put $INCOMING_MUX, $m1            // receive 2 atoms from the next tile
    setzi $m1, {RECV}
    put $INCOMING_BASE, $m1
    setzi $m1, 2
    put $INCOMING_DCOUNT, $m1
    setzi $m1, {TAB}
    ld32 $m2, $m1, $mzero, 0          // this tile's count
    setzi $m3, 4
    setzi $m5, 1
    setzi $m8, {OUT}
    setzi $m9, 0
.Lloop:
    brz $m2, .Ldone
    sub $m2, $m2, 1
    ld32step $m4, $m1, $m3+=, 1       // the next entry
    and $m6, $m4, 3
    shl $m6, $m6, 3
    setzi $m7, .Lcases
    add $m6, $m6, $m7
    br $m6                            // a computed branch: the tiles diverge
.Lcases:
    mul $m5, $m5, 3
    bri .Lnext
    xor $m5, $m5, $m4
    bri .Lnext
    call $m13, .Lsub
    bri .Lnext
    delay 7
    bri .Lnext
.Lnext:
{alu}
    st32step $m5, $m8, $m9+=, 1
    bri .Lloop
.Lsub:
    shrs $m12, $m4, 3
    add $m5, $m5, $m12
    br $m13
.Ldone:
    setzi $m12, 2
    ld32 $m11, $m1, $mzero, $m12      // register offset forms
    st32 $m11, $m8, $mzero, $m12
    put $CCCSLOAD, $m5
    get $m7, $CCCSLOAD
    st32 $m7, $m8, $mzero, 3
    setzi $m6, 3
    brnzdec $m6, .Ldone2
.Ldone2:
    brnzdec $m6, .Ldone2
    setzi $m1, {SEND}
    st32 $m5, $m1, $mzero, 0
    st32 $m0, $m1, $mzero, 1
    st32 $m7, $m1, $mzero, 2
    st32 $m2, $m1, $mzero, 3
    send $m1+=, 1
    delay 300
    sync TEXCH_SYNCZONE_INTERNAL
    setzi $m1, {RECV}
    setzi $m3, 0
    ld32step $m4, $m1, $m3+=, 1
    ld32 $m6, $m1, $mzero, 3
    add $m5, $m5, $m4
    st32step $m5, $m8, $m9+=, 1
    st32 $m6, $m8, $m9, 0
    br $lr
"""


def _sim(reference: bool, counts=None, poison_tile=None):
    sim = Simulator(T, reference=reference)
    sim.load(parse_program(_program(T.num_tiles), T.sram_base))
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 40, T.num_tiles) if counts is None else np.asarray(counts)
    tab = rng.integers(0, 1 << 32, (T.num_tiles, 64), dtype=np.uint64).astype(np.uint32)
    tab[:, 0] = counts
    sim.write(TAB, tab, tiles=np.arange(T.num_tiles))
    if poison_tile is not None:  # the entries from counts[tile] - 3 on were never written
        tile = poison_tile
        w0 = (TAB + 4 * (int(counts[tile]) - 2) - sim.base) // 8
        sim.wstate[w0:, tile] &= ~np.uint8(3)
    return sim


STATE = ("mem64", "wstate", "m", "a", "csr", "cycles", "issued")


def test_supervisor_code_per_context_equals_reference(monkeypatch):
    calls = []
    run = jit.sup_run
    monkeypatch.setattr(jit, "sup_run", lambda *a: calls.append(len(a[7])) or run(*a))
    sims, results, steps = [], [], []
    for reference in (True, False):
        sim = _sim(reference)
        n = [0]
        step = sim._step

        def count(g, step=step, n=n):
            n[0] += 1
            return step(g)

        sim._step = count
        results.append(sim.run("main"))
        sims.append(sim)
        steps.append(n[0])
    ref, fast = results
    for name in ("tile_cycles", "context_cycles", "instructions"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(ref, name), err_msg=name)
    for name in STATE:
        np.testing.assert_array_equal(getattr(sims[1], name), getattr(sims[0], name), err_msg=name)
    # the exchange happened: each tile received the next tile's two atoms
    recv = sims[1].read(RECV, 16, np.uint32)
    sent = sims[1].read(SEND, 16, np.uint32)
    np.testing.assert_array_equal(recv, np.roll(sent, -1, axis=0))
    assert calls, "jit.sup_run was not used"
    assert steps[1] * 10 < steps[0], steps  # the per-context runs replaced most group steps


@pytest.mark.parametrize("tile", [0, 5])
def test_failing_check_in_supervisor_code_gives_the_reference_error(tile):
    """A load of never-written memory in the divergent loop of one tile: the compiled run stops before it and
    the numpy semantics report the reference path's error; that tile's registers and clock are the same."""
    counts = np.full(T.num_tiles, 6)
    counts[tile] = 30
    errors, sims = [], []
    for reference in (True, False):
        sim = _sim(reference, counts=counts, poison_tile=tile)
        with pytest.raises(SimError) as e:
            sim.run("main")
        errors.append(str(e.value))
        sims.append(sim)
    assert "poison" in errors[0] and errors[1] == errors[0]
    ctx = sims[0].NW + tile
    for name in ("m", "csr", "cycles", "issued"):
        np.testing.assert_array_equal(getattr(sims[1], name)[ctx], getattr(sims[0], name)[ctx], err_msg=name)


def test_misaligned_store_in_supervisor_code_gives_the_reference_error():
    errors = []
    for reference in (True, False):
        sim = Simulator(T, reference=reference)
        sim.load(
            parse_program(
                ".globl main\n.supervisor\nmain:\n  get $m0, $TILE_ID\n  setzi $m1, 0x60000\n"
                "  add $m1, $m1, $m0\n  brz $m0, .La\n  delay 3\n.La:\n  st32 $m0, $m1, $mzero, 0\n  br $lr\n",
                T.sram_base,
            )
        )
        with pytest.raises(SimError) as e:
            sim.run("main")
        errors.append((str(e.value), e.value.check, e.value.tile))
    assert errors[0][1] == "alignment" and errors[1] == errors[0]


WORKER = """
    get $m0, $WSR
    shl $m1, $m0, 8
    setzi $m3, {tab}
    add $m1, $m1, $m3               // this worker's table: [count, entries ...]
    ld32 $m2, $m1, $mzero, 0
    add $m2, $m2, $m4               // plus a per-worker, per-tile count
    and $m2, $m2, 31
    setzi $m3, 4
    setzi $m5, 1
    shl $m8, $m0, 8
    setzi $m9, {out}
    add $m8, $m8, $m9
    setzi $m9, 0
.Lw:
    brz $m2, .Lwdone
    sub $m2, $m2, 1
    ld32step $m6, $m1, $m3+=, 1
    and $m7, $m6, 1
    brnz $m7, .Lodd
    mul $m5, $m5, $m6
    bri .Lnext
.Lodd:
    xor $m5, $m5, $m6
    shrs $m7, $m5, 5
    add $m5, $m5, $m7
.Lnext:
    tapack $m10:11, $m5, $m6, $m8
    st32step $m5, $m8, $m9+=, 1
    st32step $m10, $m8, $m9+=, 1
    and $m9, $m9, 252
    bri .Lw
.Lwdone:
    cmpult $m7, $m5, $m6
    st32 $m7, $m8, $mzero, 63
"""


def test_worker_scalar_code_per_context_equals_reference(monkeypatch):
    """Worker code diverging per worker and tile (counts, branches on data), every worker of every tile: the
    same state, cycles and instructions as the reference path, with the worker groups run by jit.sup_run."""
    from ipu.runtime.testing import run_worker_snippet

    calls = []
    run = jit.sup_run
    monkeypatch.setattr(jit, "sup_run", lambda *a: calls.append(int(a[7][0])) or run(*a))
    rng = np.random.default_rng(9)
    tab = rng.integers(0, 1 << 32, (T.num_tiles, 6 * 64), dtype=np.uint64).astype(np.uint32)
    m4 = rng.integers(0, 40, T.num_tiles * 6)
    body = WORKER.format(tab=TAB, out=OUT)
    sims = []
    for reference in (True, False):
        sim = Simulator(T, reference=reference)
        sims.append(run_worker_snippet(sim, body, workers=6, memory={TAB: tab}, m={4: m4}))
    for name in ("tile_cycles", "context_cycles", "instructions"):
        a, b = getattr(sims[1].last_result, name), getattr(sims[0].last_result, name)
        np.testing.assert_array_equal(a, b, err_msg=name)
    for name in STATE:
        np.testing.assert_array_equal(getattr(sims[1], name), getattr(sims[0], name), err_msg=name)
    assert any(c < sims[1].NW for c in calls), "no worker group went through jit.sup_run"
