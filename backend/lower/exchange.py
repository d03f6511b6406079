"""An `exchange.phase` as data for one shared exchange routine: receive/send rounds and on-tile copies.

The simulator's exchange (runtime/semantics.py `deliver_exchange`) delivers, at each internal sync, to every tile
whose $INCOMING_DCOUNT > 0, the atoms sent since the last sync by the one tile named in its $INCOMING_MUX, at
$INCOMING_BASE upwards. So a phase becomes *rounds*: in a round every tile sends at most one stream (one send of
the phase's table, to all its receivers that are free in that round) and receives at most one. Rounds are packed
greedily in the phase's scheduled order; a multicast whose receivers cannot all listen in one round is sent again
in a later round to those that missed it.

Per tile, the routine `xch_rounds` reads a table at one address shared by all tiles (contents differ per tile):
word 0 = rounds - 1, then one 5-word row per round: incoming mux (sender tile), receive address, atoms to
receive (0: none), send address, atoms to send (0: none). The on-tile copies (`xch_copy`): word 0 = rows, then
rows of (source address, destination address, words - 1).

Simplifications: sizes and addresses must be whole 8-byte atoms (the verifier's tables for the tiny SigLIP are);
the cycle schedule of `exchange-schedule` only orders the rounds (the simulator has no cycle-level exchange), and
a round costs a full internal sync.
"""

from __future__ import annotations

import numpy as np

from ipu.dialects import exchange as ex

ROUND_WORDS = 5
COPY_WORDS = 3


class ExchangeLoweringError(ValueError):
    pass


def rounds(sends: np.ndarray, recvs: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """[(send index, receive indices)] per round, as a list of rounds."""
    order = np.lexsort((np.arange(len(sends)), sends[:, 4]))
    pending = {int(s): list(np.nonzero(recvs[:, 3] == s)[0]) for s in order}
    out = []
    while any(pending.values()):
        busy_send: set[int] = set()
        busy_recv: set[int] = set()
        this = []
        for s in order:
            s = int(s)
            todo = pending[s]
            if not todo or int(sends[s, 0]) in busy_send:
                continue
            take = [r for r in todo if int(recvs[r, 0]) not in busy_recv]
            if not take:
                continue
            # A receiving tile cannot listen to two senders in a round; one receive per tile per send.
            seen: set[int] = set()
            take = [r for r in take if not (int(recvs[r, 0]) in seen or seen.add(int(recvs[r, 0])))]
            busy_send.add(int(sends[s, 0]))
            busy_recv.update(int(recvs[r, 0]) for r in take)
            pending[s] = [r for r in todo if r not in take]
            this.append((s, np.array(take, np.int64)))
        out.append(this)
    return out


def phase_tables(
    phase: ex.PhaseOp, src_addr: list[np.ndarray], dst_addr: list[np.ndarray], num_tiles: int
) -> tuple[np.ndarray | None, np.ndarray, int]:
    """(rounds table [tiles, words] uint32 or None, copy table [tiles, words] uint32, number of rounds)."""
    sends, recvs, copies = phase.send_table(), phase.recv_table(), phase.copy_table()
    nbytes = sends[:, 3]
    if len(sends) and ((nbytes % 8).any() or (sends[:, 2] % 8).any() or (recvs[:, 2] % 8).any()):
        raise ExchangeLoweringError(
            "exchange.phase: a transfer is not whole 8-byte atoms (the simulator's exchange moves atoms)"
        )
    rtab = None
    plan = rounds(sends, recvs) if len(sends) else []
    if plan:
        rtab = np.zeros((num_tiles, 1 + ROUND_WORDS * len(plan)), np.uint32)
        rtab[:, 0] = len(plan) - 1
        for k, rnd in enumerate(plan):
            c = 1 + ROUND_WORDS * k
            for s, rs in rnd:
                st, buf, off = (int(x) for x in sends[s, :3])
                rtab[st, c + 3] = src_addr[buf][st] + off
                rtab[st, c + 4] = nbytes[s] // 8
                for r in rs:
                    rt, rbuf, roff = (int(x) for x in recvs[r, :3])
                    rtab[rt, c + 0] = st
                    rtab[rt, c + 1] = dst_addr[rbuf][rt] + roff
                    rtab[rt, c + 2] = nbytes[s] // 8
    if len(copies) and (copies[:, 2:5] % 4).any():
        raise ExchangeLoweringError("exchange.phase: an on-tile copy is not whole 4-byte words")
    per = np.bincount(copies[:, 0], minlength=num_tiles) if len(copies) else np.zeros(num_tiles, np.int64)
    ctab = np.zeros((num_tiles, 1 + COPY_WORDS * int(per.max(initial=0))), np.uint32)
    ctab[:, 0] = per
    fill = np.zeros(num_tiles, np.int64)
    for t, buf, so, do, n in copies.tolist():
        c = 1 + COPY_WORDS * fill[t]
        ctab[t, c : c + 3] = [src_addr[buf][t] + so, dst_addr[buf][t] + do, n // 4 - 1]
        fill[t] += 1
    return rtab, ctab, len(plan)


ROUTINES = """
.globl xch_rounds
.supervisor
xch_rounds:
    ld32 $m2, $m0, $mzero, 0
.Lxr_round:
    ld32 $m3, $m0, $mzero, 1
    put $INCOMING_MUX, $m3
    ld32 $m3, $m0, $mzero, 2
    put $INCOMING_BASE, $m3
    ld32 $m3, $m0, $mzero, 3
    put $INCOMING_DCOUNT, $m3
    ld32 $m4, $m0, $mzero, 4
    ld32 $m5, $m0, $mzero, 5
    brz $m5, .Lxr_sync
    shr $m6, $m5, 4
    and $m5, $m5, 15
    brz $m6, .Lxr_tail
    sub $m6, $m6, 1
.Lxr_block:
    send $m4+=, 15
    brnzdec $m6, .Lxr_block
.Lxr_tail:
    brz $m5, .Lxr_sync
    sub $m5, $m5, 1
.Lxr_atom:
    send $m4+=, 0
    brnzdec $m5, .Lxr_atom
.Lxr_sync:
    sync TEXCH_SYNCZONE_INTERNAL
    add $m0, $m0, 20
    brnzdec $m2, .Lxr_round
    br $lr

.globl xch_copy
.supervisor
xch_copy:
    ld32 $m2, $m0, $mzero, 0
    brz $m2, .Lxc_done
    sub $m2, $m2, 1
.Lxc_row:
    ld32 $m3, $m0, $mzero, 1
    ld32 $m4, $m0, $mzero, 2
    ld32 $m5, $m0, $mzero, 3
.Lxc_word:
    ld32step $m6, $mzero, $m3+=, 1
    st32step $m6, $mzero, $m4+=, 1
    brnzdec $m5, .Lxc_word
    add $m0, $m0, 12
    brnzdec $m2, .Lxc_row
.Lxc_done:
    br $lr
"""
