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

Transfers that are not whole aligned 8-byte atoms are staged: copied (4-byte words) into a send staging area
before the rounds, received into a staging area and copied into place after. Simplifications: the cycle schedule of `exchange-schedule` only orders the rounds (the simulator has no cycle-level exchange), and
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
    phase: ex.PhaseOp,
    src_addr: list[np.ndarray],
    dst_addr: list[np.ndarray],
    num_tiles: int,
    send_stage: int,
    recv_stage: int,
    stage_bytes: int,
):
    """(rounds table [tiles, words] uint32 or None, pre-copies, post-copies, number of rounds); the copies are
    {tile: [(source, destination, bytes)]}: the phase's on-tile copies, and the staging of transfers that are not
    whole aligned atoms (copied to `send_stage` before sending, received at `recv_stage` and copied into place)."""
    sends, recvs, copies = phase.send_table(), phase.recv_table(), phase.copy_table()
    nbytes = sends[:, 3]
    atoms = (nbytes + 7) // 8
    pre: dict[int, list] = {}
    post: dict[int, list] = {}
    src_abs = np.array([src_addr[b][t] + o for t, b, o in sends[:, :3].tolist()], np.int64).reshape(-1)
    staged_src = src_abs.copy()
    cursor: dict[int, int] = {}
    for s in np.nonzero((src_abs % 8 != 0) | (nbytes % 8 != 0))[0]:
        t = int(sends[s, 0])
        c = cursor.get(t, 0)
        pre.setdefault(t, []).append((int(src_abs[s]), send_stage + c, int(nbytes[s])))
        staged_src[s] = send_stage + c
        cursor[t] = c + 8 * int(atoms[s])
    rcursor: dict[int, int] = {}
    dst_abs = np.array([dst_addr[b][t] + o for t, b, o in recvs[:, :3].tolist()], np.int64).reshape(-1)
    staged_dst = dst_abs.copy()
    for r in np.nonzero((dst_abs % 8 != 0) | (nbytes[recvs[:, 3]] % 8 != 0))[0] if len(recvs) else []:
        t, s = int(recvs[r, 0]), int(recvs[r, 3])
        c = rcursor.get(t, 0)
        post.setdefault(t, []).append((recv_stage + c, int(dst_abs[r]), int(nbytes[s])))
        staged_dst[r] = recv_stage + c
        rcursor[t] = c + 8 * int(atoms[s])
    if max(list(cursor.values()) + list(rcursor.values()) + [0]) > stage_bytes:
        raise ExchangeLoweringError("exchange.phase: unaligned transfers exceed the staging area")
    rtab = None
    plan = rounds(sends, recvs) if len(sends) else []
    if plan:
        rtab = np.zeros((num_tiles, 1 + ROUND_WORDS * len(plan)), np.uint32)
        rtab[:, 0] = len(plan) - 1
        for k, rnd in enumerate(plan):
            c = 1 + ROUND_WORDS * k
            for s, rs in rnd:
                st = int(sends[s, 0])
                rtab[st, c + 3] = staged_src[s]
                rtab[st, c + 4] = atoms[s]
                for r in rs:
                    rt = int(recvs[r, 0])
                    rtab[rt, c : c + 3] = [st, staged_dst[r], atoms[s]]
    for t, buf, so, do, n in copies.tolist():
        post.setdefault(t, []).append((int(src_addr[buf][t] + so), int(dst_addr[buf][t] + do), int(n)))
    return rtab, pre, post, len(plan)


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

.globl xch_half
.supervisor
xch_half:
    ld32 $m2, $m0, $mzero, 0
    brz $m2, .Lxh_done
    sub $m2, $m2, 1
.Lxh_row:
    ld32 $m3, $m0, $mzero, 1
    ld32 $m3, $m3, $mzero, 0
    ld32 $m4, $m0, $mzero, 2
    shr $m3, $m3, $m4
    shl $m3, $m3, 16
    shr $m3, $m3, 16
    ld32 $m4, $m0, $mzero, 5
    shl $m3, $m3, $m4
    ld32 $m5, $m0, $mzero, 3
    ld32 $m6, $m5, $mzero, 0
    ld32 $m4, $m0, $mzero, 4
    and $m6, $m6, $m4
    or $m6, $m6, $m3
    st32 $m6, $m5, $mzero, 0
    add $m0, $m0, 20
    brnzdec $m2, .Lxh_row
.Lxh_done:
    br $lr
"""
HALF_WORDS = 5  # xch_half row: source word, source shift, destination word, keep mask, destination shift
