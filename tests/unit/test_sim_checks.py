"""Every simulator check fires, with a message naming tile, context, PC, instruction and address."""

import numpy as np
import pytest

from ipu.backend.asm_text import parse_program
from ipu.backend.target import Target
from ipu.runtime.errors import SimError
from ipu.runtime.simulator import Simulator
from ipu.runtime.testing import run_worker_snippet

T = Target.small(tiles=2, sram_kib=256)
MEM, MEM_OTHER, IL = 0x60000, 0x64000, 0x80000


def fails(body, check, *, memory=None, m=None, supervisor="", workers=1):
    with pytest.raises(SimError) as e:
        run_worker_snippet(T, body, memory=memory, m=m, supervisor=supervisor, workers=workers)
    assert e.value.check == check, str(e.value)
    return e.value


def test_poison_load_of_unwritten_memory_names_everything():
    e = fails(f"setzi $m0, {MEM}\nld64 $a0:1, $m0, $mzero, 1", "poison", memory={MEM: np.zeros(1, np.uint64)})
    msg = str(e)
    assert "never written" in msg
    assert "tile 0" in msg and "worker 0" in msg and f"address {MEM + 8:#x}" in msg
    assert "`ld64 $a0:1, $m0, $mzero, 1`" in msg and "pc 0x4c" in msg
    assert e.tile == 0 and e.address == MEM + 8 and e.context == "worker 0"


def test_poison_tracks_32_bit_halves_and_can_be_disabled():
    fails(f"setzi $m0, {MEM}\nst32 $m0, $m0, $mzero, 0\nld32 $m1, $m0, $mzero, 1", "poison")
    sim = run_worker_snippet(T, f"setzi $m0, {MEM}\nst32 $m0, $m0, $mzero, 0\nld32 $m1, $m0, $mzero, 0")
    assert sim.m[0, 1] == MEM
    sim = run_worker_snippet(T, f"setzi $m0, {MEM}\nld64 $a0:1, $m0, $mzero, 9", check_poison=False)
    assert sim.a64[0, 0] == 0


def test_bank_conflict_in_region0_element():
    e = fails(
        f"setzi $m4, {MEM}\nsetzi $m5, {MEM + 0x1000}\ntapack $m0:1, $m4, $m5, $mzero\n"
        "ld2x64pace $a0:1, $a2:3, $m0:1+=, $mzero, 0",
        "bank-conflict",
        memory={MEM: np.zeros(1024, np.uint64)},
    )
    assert "same memory bank" in str(e) and e.address == MEM + 0x1000


def test_interleaved_memory_allows_alternate_halves_only():
    body = (
        "setzi $m4, {a}\nsetzi $m5, {b}\nsetzi $m6, {c}\ntapack $m0:1, $m4, $m5, $m6\n"
        "ld2xst64pace $a0:3, $a4:5, $m0:1+=, $mzero, 0"
    )
    mem = {IL: np.zeros(512, np.uint64), MEM: np.zeros(8, np.uint64)}
    # partials read at IL and store at IL + 8: the two halves of one 128-bit element -> different banks
    run_worker_snippet(T, body.format(a=MEM, b=IL, c=IL + 8), memory=mem)
    # partials read and store both on bit 3 == 0 of the same element -> same bank
    fails(body.format(a=MEM, b=IL, c=IL + 16), "bank-conflict", memory=mem)


@pytest.mark.parametrize(
    "body",
    [
        f"setzi $m0, {MEM + 4}\nld64 $a0:1, $m0, $mzero, 0",
        f"setzi $m0, {MEM + 2}\nst32 $m0, $m0, $mzero, 0",
        f"setzi $m0, {IL + 8}\nld128 $a0:3, $m0, $mzero, 0",
    ],
)
def test_misaligned_accesses(body):
    e = fails(body, "alignment", memory={MEM: np.zeros(8, np.uint64), IL: np.zeros(8, np.uint64)})
    assert "misaligned" in str(e)


def test_ld128_outside_interleaved_memory():
    e = fails(
        f"setzi $m0, {MEM}\nld128 $a0:3, $m0, $mzero, 0", "interleave", memory={MEM: np.zeros(4, np.uint64)}
    )
    assert "ld128" in str(e) and "region 1" in str(e)
    fails(
        "",
        "interleave",
        supervisor=f"    setzi $m0, {MEM}\n    put $CCCSLOAD, $m0\n    ld128putcs 0",
        memory={MEM: np.zeros(4, np.uint64)},
    )


def test_accesses_outside_sram():
    fails(f"setzi $m0, {T.sram_end - 4}\nld64 $a0:1, $m0, $mzero, 0", "bounds")  # straddles the end
    e = fails(f"setzi $m0, {T.sram_end}\nld32 $m1, $m0, $mzero, 0", "bounds")
    assert e.address == T.sram_end
    fails("setzi $m0, 0x1000\nst32 $m0, $m0, $mzero, 0", "bounds")


def test_instruction_fetch_outside_region0():
    sim = Simulator(T)
    sim.load(parse_program(".globl main\n.supervisor\nmain:\n  br $lr\n", 0x80000))  # code in region 1
    with pytest.raises(SimError) as e:
        sim.run("main")
    assert e.value.check == "fetch" and "region 0" in str(e.value)
    # a worker started at a non-executable address
    fails("", "fetch", supervisor="    setzi $m1, 0x80000\n    run $m1, $mzero, 0")
    # a branch to an address that holds no instruction
    fails("setzi $m0, 0x60000\nbr $m0", "fetch")


def test_writes_into_code_and_reserved_ranges():
    e = fails("setzi $m0, snippet\nst32 $m0, $m0, $mzero, 0", "protected")
    assert "code or a reserved range" in str(e)
    sim = Simulator(T)
    sim.protect(0x50000, 0x58000)  # e.g. the host aperture while a host transfer is pending
    with pytest.raises(SimError, match="protected"):
        run_worker_snippet(sim, "setzi $m0, 0x57FF8\nst64 $a0:1, $m0, $mzero, 0")


@pytest.mark.parametrize("bad", ["brnz $m0, .Lx", "get $m1, $WSR", "exitz $mzero"])
def test_illegal_instruction_in_rpt_body(bad):
    e = fails(f"rpt 2, 1\n{{ nop ; fnop }}\n{bad}\n.Lx:", "rpt")
    assert "inside an rpt body" in str(e) and bad.split()[0] in str(e)


def test_register_class_misuse_at_run_time():
    # the supervisor branches into worker code and meets an AUX (ARF) instruction
    sim = Simulator(T)
    sim.load(
        parse_program(
            ".globl main\n.supervisor\nmain:\n  bri w\n.globl w\n.worker\nw:\n"
            "  f32add $a0, $a0, $a0\n  exitz $mzero\n",
            T.sram_base,
        )
    )
    with pytest.raises(SimError) as e:
        sim.run("main")
    assert e.value.check == "register-class" and "supervisor cannot issue" in str(e.value)
    assert e.value.context == "supervisor"
    fails(
        "ld2x64pace $a0:1, $a0:1, $m0:1+=, $mzero, 0",
        "register-class",
        m={0: MEM, 1: MEM_OTHER},
        memory={MEM: np.zeros(2, np.uint64), MEM_OTHER: np.zeros(2, np.uint64)},
    )


def test_runall_with_active_workers_and_sync_deadlock():
    fails("", "run", supervisor="    setzi $m1, snippet\n    run $m1, $mzero, 0\n    runall $m1, $mzero, 0")
    sim = Simulator(T)
    sim.load(
        parse_program(
            ".globl main\n.supervisor\nmain:\n  sync TEXCH_SYNCZONE_INTERNAL\n  br $lr\n", T.sram_base
        )
    )
    sim.run("main", tiles=[0, 1])  # both tiles meet at the barrier: fine
    with pytest.raises(SimError, match="deadlock"):
        sim2 = Simulator(T)
        sim2.load(
            parse_program(
                ".globl main\n.supervisor\nmain:\n  sync TEXCH_SYNCZONE_INTERNAL\n  br $lr\n"
                ".globl other\n.supervisor\nother:\n  sync TEXCH_SYNCZONE_LOCAL\n  bri other\n",
                T.sram_base,
            )
        )
        sim2.active[sim2.NW + 1] = True  # tile 1 is busy elsewhere and never reaches the barrier
        sim2._groups = []
        sim2.run("main", tiles=[0])
    with pytest.raises(SimError, match="infinite loop"):
        sim3 = Simulator(T)
        sim3.load(parse_program(".globl main\n.supervisor\nmain:\n  bri main\n", T.sram_base))
        sim3.run("main", max_rounds=100)


def test_exchange_receive_without_send():
    sim = Simulator(T)
    src = f"""
.globl main
.supervisor
main:
    get $m0, $TILE_ID
    brnz $m0, .Lrecv
    setzi $m1, {MEM}
    send $m1+=, 1                 // tile 0 sends two atoms
    bri .Lsync
.Lrecv:
    setzi $m2, 0
    put $INCOMING_MUX, $m2        // tile 1 listens to tile 0
    setzi $m2, {MEM_OTHER}
    put $INCOMING_BASE, $m2
    setzi $m2, {{count}}
    put $INCOMING_DCOUNT, $m2
.Lsync:
    sync TEXCH_SYNCZONE_INTERNAL
    br $lr
"""
    data = np.array([[11, 22], [0, 0]], dtype=np.uint64)
    sim.load(parse_program(src.replace("{count}", "2"), T.sram_base))
    sim.write(MEM, data, tiles=[0, 1])
    r = sim.run("main")
    assert sim.read(MEM_OTHER, 16, np.uint64, tiles=1)[0].tolist() == [11, 22]
    assert r.tile_cycles[0] == r.tile_cycles[1]  # the barrier aligns the tiles
    sim = Simulator(T)
    sim.load(parse_program(src.replace("{count}", "3"), T.sram_base))
    sim.write(MEM, data, tiles=[0, 1])
    with pytest.raises(
        SimError, match="a window for 3 atoms from tile 0 opened at cycle 27 .* received 2"
    ) as e:
        sim.run("main")
    assert e.value.check == "exchange-no-sender" and e.value.tile == 1


def test_rpt_body_check_is_redone_for_a_new_program():
    sim = run_worker_snippet(T, "rpt 2, 0\n{ nop ; fnop }")
    with pytest.raises(SimError, match="inside an rpt body"):
        run_worker_snippet(sim, "rpt 2, 0\nbri .Lx\n.Lx:")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_write_runs_is_write_run_by_run(seed, monkeypatch):
    """`write_runs` (a parameter upload's batched write) leaves the bytes and the written-word state that one
    `write` per run leaves, across batch boundaries (a small WRITE_BATCH_BYTES) and unaligned runs."""
    rng = np.random.default_rng(seed)
    target = Target.small(tiles=5, sram_kib=64)
    counts = rng.integers(1, 40, 60)
    tiles = rng.integers(0, 5, 60)
    # non-overlapping runs per tile: each run after the previous one of its tile, with random gaps
    addrs = np.zeros(60, np.int64)
    nxt = np.full(5, target.sram_base + 8 * int(rng.integers(0, 100)))
    for i, (t, c) in enumerate(zip(tiles, counts)):
        addrs[i] = nxt[t] + int(rng.integers(0, 20))
        nxt[t] = addrs[i] + c
    raw = rng.integers(0, 256, int(counts.sum()), dtype=np.uint8)
    one, batched = Simulator(target), Simulator(target)
    starts = np.concatenate([[0], np.cumsum(counts)])
    for t, a, lo, hi in zip(tiles, addrs, starts[:-1], starts[1:]):
        one.write(int(a), raw[lo:hi], tiles=[int(t)])
    monkeypatch.setattr(Simulator, "WRITE_BATCH_BYTES", 97)
    batched.write_runs(tiles, addrs, counts, raw)
    assert np.array_equal(one.mem64, batched.mem64)
    assert np.array_equal(one.wstate, batched.wstate)
    assert batched.wstate.any()


def test_write_runs_outside_sram_is_named():
    sim = Simulator(T)
    with pytest.raises(SimError, match=r"write of 16 bytes at 0x[0-9a-f]+ is outside SRAM"):
        sim.write_runs([0, 1], [T.sram_base, T.sram_end - 8], [8, 16], np.zeros(24, np.uint8))
    with pytest.raises(SimError, match="tile 7"):
        sim.write_runs([7], [T.sram_base], [8], np.zeros(8, np.uint8))
