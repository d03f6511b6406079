"""Exchange executed in time (runtime/semantics.py `deliver_exchange`): sends depart and arrive at computed cycles,
receive windows accept the atoms of their mux's tile that arrive after they open, and the phase is resolved and
checked (E1-E5) at the next internal sync. Every program runs on both paths (reference=True and the fast path) with
identical results.

A supervisor instruction costs 1 cycle, a control or system one (put, sync, br) 6, `delay d` d + 1 and
`send $a+=, n - 1` 1 + 8 + 2n. The programs dispatch
on $TILE_ID first; each tile's block starts with an internal sync (all tiles leave it at the same clock R0) and
ends with one (the phase's end), so a block's instruction i starts at R0 + i plus the earlier sends' and delays'
extra cycles. With the default target, atom k of a send at clock c0 arrives at c0 + 8 + 16 + 2k."""

import dataclasses
import re

import numpy as np

from ipu.backend.asm_text import parse_program
from ipu.backend.target import Target
from ipu.runtime import semantics
from ipu.runtime.errors import SimError
from ipu.runtime.simulator import Recorder, Simulator

# The shared receive bus modelled (off on the default targets), so that its check is exercised too.
T4 = dataclasses.replace(Target.small(tiles=4), exchange_shared_receive_bus=True)
SRC, DST = 0x60000, 0x64000
LAT = T4.exchange_send_latency + T4.exchange_fabric_cycles  # departure latency + fabric: 24


def program(blocks: dict[int, list[str]], tiles: int = 4, end_sync: bool | str = True) -> str:
    """end_sync: True (an internal sync closes the phase), "recv" (each tile's `sync TEXCH_SYNCZONE_RECV`, as the
    backend's timed exchange ends, then `after[t]` if given as a block's "after" lines) or False."""
    lines = [".globl main", ".supervisor", "main:", "    get $m0, $TILE_ID"]
    for t in range(1, tiles):
        lines += [f"    cmpeq $m1, $m0, {t}", f"    brnz $m1, .Lt{t}"]
    for t in range(tiles):
        lines += [f".Lt{t}:", "    sync TEXCH_SYNCZONE_INTERNAL"]
        lines += [f"    {x}" for x in blocks.get(t, [])]
        if end_sync == "recv":
            lines.append("    sync TEXCH_SYNCZONE_RECV")
            lines += [f"    {x}" for x in AFTER.get(t, [])]
        elif end_sync:
            lines.append("    sync TEXCH_SYNCZONE_INTERNAL")
        lines.append("    br $lr")
    return "\n".join(lines) + "\n"


AFTER: dict[int, list[str]] = {}  # lines after a tile's RECV sync (set by a test, reset after it)


def send(n: int, addr: int = SRC, delay: int = 0) -> list[str]:
    """setzi at R0 + i, [delay], send: c0 = R0 + i + 1 (+ delay + 1)."""
    return [f"setzi $m2, {addr:#x}"] + ([f"delay {delay}"] if delay else []) + [f"send $m2+=, {n - 1}"]


def window(mux: int, count: int, base: int = DST, delay: int = 0) -> list[str]:
    """Receive set-up: put $INCOMING_MUX at R0 + i + 1, $INCOMING_BASE at + 8, $INCOMING_DCOUNT at + 15 (+ delay +
    1); the next instruction 6 cycles later."""
    return [
        f"setzi $m3, {mux}",
        "put $INCOMING_MUX, $m3",
        f"setzi $m3, {base:#x}",
        "put $INCOMING_BASE, $m3",
        f"setzi $m3, {count}",
        *([f"delay {delay}"] if delay else []),
        "put $INCOMING_DCOUNT, $m3",
    ]


def data(tile: int, n: int = 64) -> np.ndarray:
    return (np.arange(n, dtype=np.uint64) + 1) * 0x1000 + np.uint64(tile) * 0x100_0000


def release0(sim) -> int:
    """The first internal sync's release (per tile the recorder's events are START, ARRIVE, RELEASE, ...; the
    blocks' syncs are at different PCs, so no `trace()`)."""
    assert sim.recorder.kind[2] == Recorder.RELEASE
    return int(sim.recorder.clock[2, 0])


def run(blocks, *, reference: bool, target: Target = T4, end_sync: bool = True):
    """('ok', R0, DST words [tiles, 64], tile cycles) or ('error', R0, check, message, tile, pc, address)."""
    sim = Simulator(target, reference=reference)
    sim.load(parse_program(program(blocks, target.num_tiles, end_sync), target.sram_base))
    for t in range(target.num_tiles):
        sim.write(SRC, data(t), tiles=[t])
        sim.write(DST, np.zeros(64, np.uint64), tiles=[t])
    sim.recorder = Recorder(target.num_tiles, [])
    try:
        r = sim.run("main")
    except SimError as e:
        return ("error", release0(sim), e.check, str(e), e.tile, e.pc, e.address)
    r0 = release0(sim)
    assert (sim.cycles[sim.NW :] >= 0).all()
    dcount = sim.csr[sim.NW :, semantics._col(semantics.SC["INCOMING_DCOUNT"])]
    assert (dcount == 0).all()
    return ("ok", r0, sim.read(DST, 512, np.uint64), r.tile_cycles.tolist())


def both(blocks, **kw):
    """The outcome, the same on both paths; the fast path resolves passing phases itself (no fallback)."""
    calls = []
    fast = semantics._x_resolve_fast

    def spy(sim, release):
        ok = fast(sim, release)
        calls.append(ok)
        return ok

    semantics._x_resolve_fast = spy
    try:
        got = run(blocks, reference=False, **kw)
    finally:
        semantics._x_resolve_fast = fast
    want = run(blocks, reference=True, **kw)
    if got[0] == "ok":
        assert all(calls), calls
        assert want[0] == "ok" and want[1] == got[1] and want[3] == got[3]
        np.testing.assert_array_equal(want[2], got[2])
    else:
        assert got == want
    return got


def ok(blocks, **kw):
    out = both(blocks, **kw)
    assert out[0] == "ok", out[3]
    return out[1], out[2]


def fails(blocks, check, **kw):
    out = both(blocks, **kw)
    assert out[0] == "error", "expected an error"
    assert out[2] == check, out[3]
    return out[1], out[3], out[4], out[5], out[6]


def test_window_timing_decides_which_atoms_arrive():
    """Tile 0 sends 6 atoms at c0 = R0 + 12 (first arrival R0 + 36). Tile 1 opens at R0 + 15, tile 2 at R0 + 36
    (the first atom's arrival: accepted), tile 3 at R0 + 37: it gets atoms 1..5 (atom 0 went by)."""
    r0, mem = ok(
        {0: send(6, delay=10), 1: window(0, 6), 2: window(0, 6, delay=20), 3: window(0, 5, delay=21)}
    )
    src = data(0)
    np.testing.assert_array_equal(mem[1, :6], src[:6])
    np.testing.assert_array_equal(mem[2, :6], src[:6])
    np.testing.assert_array_equal(mem[3, :5], src[1:6])
    assert (mem[3, 5:] == 0).all() and (mem[0] == 0).all()


def test_window_opened_after_the_atoms_went_by_is_no_sender():
    blocks = {0: send(6, delay=10), 1: window(0, 6), 3: window(0, 6, delay=21)}
    r0, msg, tile, pc, addr = fails(blocks, "exchange-no-sender")
    t = r0 + 37
    assert tile == 3 and f"opened at cycle {t}" in msg and "received 5" in msg and "from tile 0" in msg
    assert addr == DST and re.search(r"the sync at pc 0x[0-9a-f]+", msg) and f"pc {pc:#x}" in msg


def test_multicast_to_every_tile():
    _, mem = ok({0: send(8), 1: window(0, 8), 2: window(0, 8), 3: window(0, 8, base=DST + 64)})
    np.testing.assert_array_equal(mem[1, :8], data(0)[:8])
    np.testing.assert_array_equal(mem[2, :8], data(0)[:8])
    np.testing.assert_array_equal(mem[3, 8:16], data(0)[:8])


def test_window_spans_several_sends_and_leaves_the_rest():
    """Two sends of 3 atoms; a window of 4 takes the first send and one atom of the second; unaccepted atoms
    are lost without an error."""
    blocks = {0: ["setzi $m2, 0x60000", "send $m2+=, 2", "send $m2+=, 2"], 1: window(0, 4)}
    _, mem = ok(blocks)
    np.testing.assert_array_equal(mem[1, :4], data(0)[:4])
    assert (mem[1, 4:] == 0).all()


def switch(delay: int) -> dict[int, list[str]]:
    """Tile 2 receives 4 atoms from tile 0 (arrivals R0 + 25 .. R0 + 31, window end R0 + 33), then from tile 1
    (sent at R0 + 32, arrivals from R0 + 56): its second put $INCOMING_MUX is at R0 + 23 + delay, its second
    window opens 14 cycles later."""
    return {
        0: send(4),
        1: send(4, delay=30),
        2: window(0, 4) + [f"delay {delay}"] + window(1, 4, base=DST + 32),
    }


def test_receiver_switches_senders_back_to_back():
    _, mem = ok(switch(10))  # $INCOMING_MUX written at R0 + 33: the first window's end
    np.testing.assert_array_equal(mem[2, :4], data(0)[:4])
    np.testing.assert_array_equal(mem[2, 4:8], data(1)[:4])


def test_receiver_switching_too_early_is_overlap():
    r0, msg, tile, pc, addr = fails(switch(9), "exchange-overlap")
    assert (
        tile == 2 and f"$INCOMING_MUX written at cycle {r0 + 32}" in msg and f"ends at cycle {r0 + 33}" in msg
    )
    assert "the sync at pc" in msg and addr == DST


def test_window_opened_during_a_window_is_overlap():
    """The second set-up starts inside the first window (arrivals R0 + 25 .. R0 + 31): its $INCOMING_MUX put at
    R0 + 22."""
    blocks = {0: send(4), 1: send(4, delay=30), 2: window(0, 4) + window(1, 4, base=DST + 32)}
    r0, msg, tile, _, _ = fails(blocks, "exchange-overlap")
    assert tile == 2 and f"$INCOMING_MUX written at cycle {r0 + 22}" in msg


def bus(receivers: dict[int, int], senders=(0, 1)) -> dict[int, list[str]]:
    """Two tiles send 4 atoms each at R0 + 1 (the same cycles); receivers[t] = the tile t listens to."""
    blocks = {s: send(4) for s in senders}
    for t, m in receivers.items():
        blocks[t] = window(m, 4)
    return blocks


def test_shared_receive_bus_is_overlap():
    r0, msg, tile, _, _ = fails(bus({2: 0, 3: 1}), "exchange-overlap")  # tiles 2 and 3 share a bus
    assert "two sends arriving on one receive bus in one cycle" in msg
    assert (
        "tile 3 receives from tile 1" in msg
        and "tile 2 from tile 0" in msg
        and f"[{r0 + 25}, {r0 + 33})" in msg
    )
    assert tile == 3


def test_shared_receive_bus_allows_multicast_and_other_buses():
    ok(bus({2: 0, 3: 0}))  # the same atoms on both tiles of a bus: multicast
    _, mem = ok(bus({1: 0, 3: 2}, senders=(0, 2)))  # tiles 1 and 3 are on different buses
    np.testing.assert_array_equal(mem[1, :4], data(0)[:4])
    np.testing.assert_array_equal(mem[3, :4], data(2)[:4])
    _, mem = ok(bus({2: 0, 3: 1}), target=dataclasses.replace(T4, exchange_shared_receive_bus=False))
    np.testing.assert_array_equal(mem[2, :4], data(0)[:4])
    np.testing.assert_array_equal(mem[3, :4], data(1)[:4])


def test_bus_senders_in_different_cycles_are_fine():
    """Tiles 2 and 3 receive from different senders, tile 1's atoms after tile 0's have gone by."""
    blocks = {
        0: send(4),
        1: send(4, delay=8),
        2: window(0, 4),
        3: window(1, 4),
    }  # tile 1's arrive from R0 + 34
    _, mem = ok(blocks)
    np.testing.assert_array_equal(mem[3, :4], data(1)[:4])
    blocks[1] = send(4, delay=6)  # from R0 + 32: one cycle with tile 0's last atom
    fails(blocks, "exchange-overlap")


def test_mux_naming_a_silent_tile_is_no_sender():
    r0, msg, tile, _, addr = fails({0: send(4), 1: window(3, 4)}, "exchange-no-sender")
    assert tile == 1 and f"opened at cycle {r0 + 15}" in msg and "from tile 3" in msg and "received 0" in msg


def test_window_without_a_closing_sync_is_no_sender():
    out = run({1: window(0, 2)}, reference=True, end_sync=False)
    assert (
        out[0] == "error" and out[2] == "exchange-no-sender" and "no internal sync ends the phase" in out[3]
    )
    assert run({1: window(0, 2)}, reference=False, end_sync=False) == out


def test_relay_within_a_phase_is_early_send():
    """Tile 1 receives 2 atoms from tile 0 at DST and sends from DST + 8 in the same phase."""
    blocks = {0: send(2), 1: window(0, 2) + ["delay 40", *send(2, addr=DST + 8)], 2: window(1, 2)}
    r0, msg, tile, _, addr = fails(blocks, "exchange-early-send")
    assert tile == 1 and addr == DST + 8 and f"a send at cycle {r0 + 63}" in msg


def test_two_windows_writing_one_address_is_overwrite():
    blocks = {
        0: [
            "setzi $m2, 0x60000",
            "send $m2+=, 1",
            "delay 30",
            "send $m2+=, 1",
        ],  # arrivals R0 + 25, 27, 69, 71
        1: window(0, 2) + ["delay 10"] + window(0, 2, base=DST + 8),  # the second set-up from R0 + 33
    }
    r0, msg, tile, _, addr = fails(blocks, "exchange-overwrite")
    assert tile == 1 and addr == DST + 8 and f"address {DST + 8:#x}" in msg


def test_atom_after_the_release_is_late():
    target = dataclasses.replace(T4, sync_internal_cycles=0)
    blocks = {0: send(4), 1: window(0, 4)}  # tile 1 reaches the sync last (R0 + 27), the last atom R0 + 31
    r0, msg, tile, _, addr = fails(blocks, "exchange-late", target=target)
    assert tile == 1 and f"last atom at cycle {r0 + 31}" in msg and f"release at cycle {r0 + 27}" in msg
    assert addr == DST + 24
    ok(blocks)  # with the 150-cycle sync it arrives in time


def test_rounds_like_phases_still_deliver():
    """Several phases in a row (the old round-per-sync pattern with the windows opened first): each resolved at
    its own sync."""
    blocks = {
        0: send(3) + ["sync TEXCH_SYNCZONE_INTERNAL"] + window(2, 2),
        1: window(0, 3) + ["sync TEXCH_SYNCZONE_INTERNAL"],
        2: ["sync TEXCH_SYNCZONE_INTERNAL", "delay 10", *send(2, addr=SRC + 16)],
        3: ["sync TEXCH_SYNCZONE_INTERNAL"],
    }
    _, mem = ok(blocks)
    np.testing.assert_array_equal(mem[1, :3], data(0)[:3])
    np.testing.assert_array_equal(mem[0, :2], data(2)[2:4])


def random_blocks(seed: int, tiles: int = 8) -> dict[int, list[str]]:
    """Some tiles send (1-2 sends of 1-5 atoms, the second possibly much later), the others open a window on a
    random sender early (its first send's atoms or fewer), and sometimes a second one later: phases that pass and
    phases that fail E1 or E2."""
    rng = np.random.default_rng(seed)
    role = rng.random(tiles) < 0.4
    role[0] = True
    senders = np.flatnonzero(role)
    first, blocks = {}, {}
    for t in senders:
        lines = []
        for k in range(int(rng.integers(1, 3))):
            n = int(rng.integers(1, 6))
            lines += send(n, addr=SRC + 64 * k, delay=int(rng.integers(0, 10 if k == 0 else 60)))
            first.setdefault(int(t), n)
        blocks[int(t)] = lines
    for t in np.flatnonzero(~role):
        m = int(rng.choice(senders))
        lines = window(m, int(rng.integers(1, first[m] + 1)), delay=int(rng.integers(0, 4)))
        if rng.random() < 0.4:
            m = int(rng.choice(senders))
            lines += [f"delay {int(rng.integers(0, 30))}", *window(m, int(rng.integers(1, 3)), base=DST + 64)]
        blocks[int(t)] = lines
    return blocks


def test_random_phases_agree_on_both_paths():
    """Random phases on 8 tiles, with and without the shared-bus check: both paths give the same data and
    cycles, or the same error; passing ones are resolved by the fast path itself (see `both`)."""
    target = dataclasses.replace(Target.small(tiles=8), exchange_shared_receive_bus=True)
    seen = set()
    for seed in range(16):
        blocks = random_blocks(seed)
        for tg in (target, dataclasses.replace(target, exchange_shared_receive_bus=False)):
            out = both(blocks, target=tg)
            seen.add(out[0] if out[0] == "ok" else out[2])
    assert {"ok", "exchange-no-sender", "exchange-overlap"} <= seen


def test_recv_sync_releases_each_tile_at_its_own_last_window():
    """`sync TEXCH_SYNCZONE_RECV` ends the phase without a barrier: tile 0 sends 6 atoms at c0 = R0 + 12 (the last
    arrives at R0 + 46, the windows end at R0 + 48); tiles 1 and 2 leave their RECV sync at R0 + 48 + 6, tile 0
    (sending only) and tile 3 (idle) at their own clocks + 6. The received words are in memory when a tile reads
    them right after its sync (tile 1 copies word 0 to DST + 0x100), on both paths."""
    AFTER[1] = [f"setzi $m4, {DST:#x}", "ld32 $m5, $m4, $mzero, 0", "st32 $m5, $m4, $mzero, 64"]
    try:
        r0, mem = ok({0: send(6, delay=10), 1: window(0, 6), 2: window(0, 6, delay=20)}, end_sync="recv")
        cycles = run({0: send(6, delay=10), 1: window(0, 6), 2: window(0, 6, delay=20)}, reference=False,
                     end_sync="recv")[3]  # fmt: skip
    finally:
        AFTER.clear()
    np.testing.assert_array_equal(mem[2, :6], data(0)[:6])
    assert int(mem[1, 32]) & 0xFFFFFFFF == int(data(0)[0]) & 0xFFFFFFFF
    stall, recv = (
        6,
        T4.sync_recv_cycles,
    )  # a control instruction's cost (the sync's issue, `br $lr`); the RECV wait's
    assert cycles[3] - r0 == stall + recv + stall  # idle: its own clock, no barrier
    assert cycles[2] - r0 == 48 + recv + stall  # its window's end
    assert cycles[1] - r0 == 48 + recv + 3 + stall  # + setzi, ld32, st32 (1 cycle each) after the sync
    # tile 0: setzi, delay 10 (11), the send of 6 atoms (1 + 8 + 12): left before the windows end
    assert cycles[0] - r0 == 1 + 11 + 21 + stall + recv + stall < cycles[2] - r0


def test_recv_sync_with_an_unfilled_window_is_no_sender():
    blocks = {0: send(6, delay=10), 1: window(0, 6), 3: window(0, 6, delay=21)}
    _, msg, tile, _, _ = fails(blocks, "exchange-no-sender", end_sync="recv")
    assert tile == 3 and "received 5" in msg


def test_recv_and_internal_syncs_ending_one_phase_is_an_error():
    """A phase that some tiles end with RECV and others with an internal sync: named, not silently resolved."""
    src = program({0: send(4), 1: window(0, 4)}, end_sync="recv").replace(
        ".Lt0:\n    sync TEXCH_SYNCZONE_INTERNAL\n    setzi $m2, 0x60000\n    send $m2+=, 3\n    sync TEXCH_SYNCZONE_RECV",
        ".Lt0:\n    sync TEXCH_SYNCZONE_INTERNAL\n    setzi $m2, 0x60000\n    send $m2+=, 3\n    sync TEXCH_SYNCZONE_INTERNAL",
    )
    assert src.count("sync TEXCH_SYNCZONE_RECV") == 3
    for reference in (True, False):
        sim = Simulator(T4, reference=reference)
        sim.load(parse_program(src, T4.sram_base))
        for t in range(T4.num_tiles):
            sim.write(SRC, data(t), tiles=[t])
            sim.write(DST, np.zeros(64, np.uint64), tiles=[t])
        try:
            sim.run("main")
        except SimError as e:
            assert e.check == "sync" and "RECV" in str(e)
        else:
            raise AssertionError("expected a sync error")
