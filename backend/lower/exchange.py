"""An `exchange.phase` as data for the shared exchange routines: one timed transfer table and on-tile copies.

A phase is one statically timed exchange (`ipu.backend.lower.timed`: the routine `xch_timed`, its table, the
schedule): one internal sync opens it, every tile then runs its own rows (sends and receive set-ups at compiled
cycles, no sync between them), one internal sync closes it. The transfers are grouped into *rounds* first
(`receive_rounds`): in a round every tile sends at most one stream (one send, to all its receivers that are free in
that round) and receives at most one; rounds are packed greedily in the phase's scheduled order, a multicast whose
receivers cannot all listen in one round is sent again in a later round to those that missed it, and a phase of
unicast sends gets the fewest rounds possible (a bipartite edge colouring, `unicast_rounds`) when the greedy needs
more. A round is only a grouping: each of its transmissions starts as soon as its own tiles are free.

The on-tile copies go through the worker copy kernel (`backend/kernels/copy.py`, `copy_sup`); single halves through
`xch_half` (read-modify-write of a word). Transfers that are not whole aligned 8-byte atoms are staged: copied
(4-byte words) into a send staging area before the phase, received into a staging area and copied into place after.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ipu.backend.kernels import copy as ck
from ipu.backend.lower import timed as tm
from ipu.backend.target import Target
from ipu.dialects import exchange as ex


class ExchangeLoweringError(ValueError):
    pass


def receive_rounds(sends: np.ndarray, recvs: np.ndarray) -> tuple[np.ndarray, int]:
    """The round of every receive (int64 [receives]) and the number of rounds, packed greedily (all-unicast
    phases: by `unicast_rounds` when that takes fewer rounds): rounds are
    filled one after the other, each by scanning the sends in scheduled order (column 4, then index); a send
    whose tile is free in the round sends to every pending receiver whose tile is free (the first of several
    receivers on one tile), and then its tile is busy.

    Computed send by send instead of round by round: a send's rounds depend only on the sends before it in the
    scan order (within a round they are scanned first, and the rounds before are theirs too), so each receiver
    simply takes the first round in which neither its sender's tile (busy from earlier sends) nor its own tile
    (busy from earlier sends and from this send's earlier receivers on the same tile) is taken. Busy rounds are
    kept per tile as bit sets (Python ints): one step per receive, no scan over idle sends, and the result is
    the round-by-round greedy's exactly."""
    nr = len(recvs)
    out = np.zeros(nr, np.int64)
    if nr == 0:
        return out, 0
    key = _rounds_key(sends, recvs)
    hit = _ROUNDS_CACHE.pop(key, None)
    if hit is not None:
        _ROUNDS_CACHE[key] = hit  # most recently used last
        return hit[0].astype(np.int64), hit[1]
    order = np.lexsort((np.arange(len(sends)), sends[:, 4]))
    pos = np.empty(len(sends), np.int64)
    pos[order] = np.arange(len(sends))
    # Receives in scan order: by their send's position, then by index; the first of each send carries its sender.
    seq = np.lexsort((np.arange(nr), pos[recvs[:, 3]]))
    s_of = recvs[seq, 3]
    starts = np.r_[True, s_of[1:] != s_of[:-1]]
    sender = np.where(starts, sends[s_of, 0], -1).tolist()
    tiles = 1 + int(max(sends[:, 0].max(), recvs[:, 0].max()))
    sbusy = [0] * tiles  # per tile: bit k set = busy sending in round k
    rbusy = [0] * tiles  # per tile: bit k set = busy receiving in round k
    bits = [0] * nr
    j, a, sb, used = 0, -1, 0, 0
    for first, t in zip(sender, recvs[seq, 0].tolist()):
        if first >= 0:  # a new send: its tile's busy rounds from the sends before it
            if a >= 0:
                sbusy[a] = sb | used
            a, sb, used = first, sbusy[first], 0
        rb = rbusy[t]
        m = sb | rb
        bit = ~m & (m + 1)  # the lowest round free for both the sender and this receiver
        rbusy[t] = rb | bit
        used |= bit
        bits[j] = bit
        j += 1
    out[seq] = [b.bit_length() - 1 for b in bits]
    n = int(out.max()) + 1
    # Every send with one receiver: the fewest rounds exist and are cheap to find (the greedy may take up to twice
    # as many: So400m's residual-stream gathers 34 rounds instead of 19).
    if n > 1 and len(sends) == nr and (np.bincount(recvs[:, 3], minlength=len(sends)) == 1).all():
        exact = unicast_rounds(sends[recvs[:, 3], 0], recvs[:, 0], seq)
        m = int(exact.max()) + 1
        if m < n:
            out, n = exact, m
    _ROUNDS_CACHE[key] = (out.astype(np.int32), n)
    while sum(len(v[0]) for v in _ROUNDS_CACHE.values()) > _ROUNDS_CACHE_RECEIVES and len(_ROUNDS_CACHE) > 1:
        _ROUNDS_CACHE.pop(next(iter(_ROUNDS_CACHE)))  # least recently used first
    return out, n


def unicast_rounds(src: np.ndarray, dst: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Rounds of unicast transfers (transfer i from tile src[i] to tile dst[i]) in as many rounds as the busiest
    port needs (the most transfers one tile sends or receives: fewer cannot be), by bipartite edge colouring
    (Konig): transfers taken in `order`; each gets a round free at its sender and at its receiver, after
    swapping two rounds along the alternating path from its receiver when no round is free at both (in a
    bipartite graph that path never reaches the sender)."""
    n = len(src)
    out = np.full(n, -1, np.int64)
    at: dict[tuple[int, int], dict[int, int]] = {}  # (side, tile) -> round -> transfer

    def free(node) -> int:
        used = at.setdefault(node, {})
        c = 0
        while c in used:
            c += 1
        return c

    for i in order.tolist():
        u, v = (0, int(src[i])), (1, int(dst[i]))
        a, b = free(u), free(v)
        if a not in at[v]:
            c = a
        elif b not in at[u]:
            c = b
        else:
            # The path from v along rounds a, b, a, ...: swap a and b on it; then a is free at v (and at u).
            path, node, col = [], v, a
            while col in at[node]:
                e = at[node][col]
                path.append(e)
                other = (0, int(src[e])) if node[0] == 1 else (1, int(dst[e]))
                node, col = other, (b if col == a else a)
            for e in path:
                for side in ((0, int(src[e])), (1, int(dst[e]))):
                    at[side].pop(int(out[e]), None)
            for e in path:
                out[e] = b if out[e] == a else a
                at[(0, int(src[e]))][int(out[e])] = e
                at[(1, int(dst[e]))][int(out[e])] = e
            c = a
        out[i] = c
        at[u][c] = i
        at[v][c] = i
    return out


# A phase inside a tile.repeat body is lowered once per iteration with the same transfers: plan it once.
_ROUNDS_CACHE: dict[bytes, tuple[np.ndarray, int]] = {}  # key -> (int32 round per receive, rounds)
_ROUNDS_CACHE_RECEIVES = 1 << 24  # at most 64 MiB of cached rounds (an So400m layer's phases fit)


_SCHEDULE_CACHE: dict[bytes, tm.Schedule] = {}


def timed_schedule(
    sends: np.ndarray, recvs: np.ndarray, atoms: np.ndarray, target: Target | None
) -> tm.Schedule:
    """The phase's timed schedule (`ipu.backend.lower.timed.schedule`), its transmissions grouped as the
    `receive_rounds` rounds; cached (a loop body's phase is lowered for several iterations)."""
    target = target or Target.ipu21()
    h = hashlib.blake2b(_rounds_key(sends, recvs), digest_size=20)
    h.update(np.ascontiguousarray(atoms, np.int64).tobytes())
    h.update(
        repr(
            (target.exchange_fabric_cycles, target.exchange_shared_receive_bus, target.tiles_per_exchange_bus)
        ).encode()
    )
    key = h.digest()
    hit = _SCHEDULE_CACHE.get(key)
    if hit is None:
        rr, _ = receive_rounds(sends, recvs)
        hit = tm.schedule(sends[:, 0], atoms, recvs[:, 0], recvs[:, 3], rr, target)
        if len(_SCHEDULE_CACHE) > 256:
            _SCHEDULE_CACHE.pop(next(iter(_SCHEDULE_CACHE)))
        _SCHEDULE_CACHE[key] = hit
    return hit


def _rounds_key(sends: np.ndarray, recvs: np.ndarray) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for a in (sends[:, 0], sends[:, 4], recvs[:, 0], recvs[:, 3]):
        a = np.ascontiguousarray(a, dtype=np.int64)
        h.update(len(a).to_bytes(8, "little"))
        h.update(a.tobytes())
    return h.digest()


def rounds(sends: np.ndarray, recvs: np.ndarray) -> list[list[tuple[int, np.ndarray]]]:
    """The rounds as lists of (send index, receive indices), sends in scan order (see `receive_rounds`)."""
    rr, n = receive_rounds(sends, recvs)
    order = np.lexsort((np.arange(len(sends)), sends[:, 4]))
    pos = np.empty(len(sends), np.int64)
    pos[order] = np.arange(len(sends))
    out: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(n)]
    idx = np.lexsort((np.arange(len(recvs)), pos[recvs[:, 3]], rr)) if len(recvs) else np.zeros(0, np.int64)
    if len(idx):
        k, s = rr[idx], recvs[idx, 3]
        cut = np.nonzero((np.diff(k) != 0) | (np.diff(s) != 0))[0] + 1
        for grp in np.split(idx, cut):
            out[int(rr[grp[0]])].append((int(recvs[grp[0], 3]), grp.astype(np.int64)))
    return out


def _absolute(table: np.ndarray, addr: list[np.ndarray]) -> np.ndarray:
    """Rows (tile, buffer, offset, ...) -> address of the buffer on the tile + offset (int64)."""
    out = np.zeros(len(table), np.int64)
    for b in np.unique(table[:, 1]).tolist():
        sel = table[:, 1] == b
        out[sel] = np.asarray(addr[b], np.int64)[table[sel, 0]] + table[sel, 2]
    return out


def _stage(tiles: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Offsets into per-tile staging areas: each tile's entries one after the other, in index order."""
    order = np.argsort(tiles, kind="stable")
    st, sz = tiles[order], sizes[order]
    ends = np.cumsum(sz)
    group_start = np.r_[True, st[1:] != st[:-1]] if len(st) else np.zeros(0, bool)
    base = np.maximum.accumulate(np.where(group_start, ends - sz, 0)) if len(st) else ends
    out = np.empty(len(tiles), np.int64)
    out[order] = ends - sz - base
    return out


def _per_tile(tiles: np.ndarray, rows: np.ndarray) -> dict[int, list[tuple[int, int, int]]]:
    """{tile: [(source, destination, bytes)]} in row order; tiles in order of first appearance."""
    if not len(tiles):
        return {}
    order = np.argsort(tiles, kind="stable")
    st = tiles[order]
    cut = np.nonzero(st[1:] != st[:-1])[0] + 1
    lo, hi = np.r_[0, cut], np.r_[cut, len(st)]
    flat = list(zip(*(c.tolist() for c in np.asarray(rows)[order].T)))  # tuples of Python ints
    groups = {t: flat[a:b] for t, a, b in zip(st[lo].tolist(), lo.tolist(), hi.tolist())}
    return {t: groups[t] for t in dict.fromkeys(tiles.tolist())}


def phase_tables(*args):
    """(rounds table or None, pre-copies, post-copies, number of rounds) of a phase that needs no half-word shifted
    staging (`staged_phase_tables`, which the lowering calls, has the shifted staging's table too)."""
    rtab, pre, stab, post, sched = staged_phase_tables(*args)
    if stab is not None:
        raise ExchangeLoweringError(
            "exchange.phase: needs half-word shifted send staging (staged_phase_tables)"
        )
    return rtab, pre, post, sched.rounds if sched is not None else 0


def _whole_end_words(tiles, src, dst, nbytes, copies, dst_addr) -> np.ndarray:
    """Receivers' copies from their staging slots (source, destination, bytes [n, 3]), each widened to whole words
    at an end that is a half word when the word's other half is no other copy's of the phase on that tile: that
    half is then no data (a phase's result holds what the phase writes; a word of an 8-byte aligned buffer is
    the buffer's), and the slot's word is written memory (the received atoms), so one word copy replaces a
    read-modify-write of a word that may never have been written (`xch_half`: a simulator poison error)."""
    src, dst, nbytes = src.copy(), dst.copy(), nbytes.copy()
    # Every destination range of the phase's copies on each tile (receives and on-tile copies), sorted.
    c_dst = _absolute(copies[:, [0, 1, 3]], dst_addr) if len(copies) else np.zeros(0, np.int64)
    t_all = np.r_[tiles, copies[:, 0]].astype(np.int64)
    lo_all = np.r_[dst, c_dst].astype(np.int64)
    hi_all = lo_all + np.r_[nbytes, copies[:, 4]].astype(np.int64)
    key = t_all << 32
    o = np.argsort(key + lo_all, kind="stable")
    starts, ends = (key + lo_all)[o], np.maximum.accumulate((key + hi_all)[o])

    def covered(t, a):  # byte a on tile t inside some destination range
        q = (t << 32) + a
        k = np.searchsorted(starts, q, side="right") - 1
        return (k >= 0) & (ends[np.maximum(k, 0)] > q)

    matched = (src % 4 == dst % 4) & (dst % 2 == 0) & (nbytes % 2 == 0) & (nbytes > 0)
    tiles = np.asarray(tiles, np.int64)
    lead = matched & (dst % 4 == 2)
    lead &= ~covered(tiles, dst - 2)
    end = dst + nbytes
    tail = matched & (end % 4 == 2)
    tail &= ~covered(tiles, end)
    src, dst, nbytes = src - 2 * lead, dst - 2 * lead, nbytes + 2 * lead + 2 * tail
    return np.stack([src, dst, nbytes], 1)


def staged_phase_tables(
    phase: ex.PhaseOp,
    src_addr: list[np.ndarray],
    dst_addr: list[np.ndarray],
    num_tiles: int,
    send_stage: int,
    recv_stage: int,
    stage_bytes: int,
    target: Target | None = None,
):
    """(timed table [tiles, words] uint32 or None (`ipu.backend.lower.timed`), pre-copies, shifted pre-copies (a
    `copy_shift_sup` table or None), post-copies, the timed schedule (`ipu.backend.lower.timed.Schedule`) or None); the copies are {tile: [(source, destination, bytes)]}: the phase's
    on-tile copies, and the staging of transfers that are not whole aligned atoms (copied to `send_stage` before
    sending, received at `recv_stage` and copied into place).

    A staged send's data sits in its 8-byte aligned slot at a phase h (0..3): at the source's own phase (the
    slot takes the words holding the transfer whole: every such word holds bytes of it, so it is written memory,
    and the other bytes go nowhere), or, for f16 data whose first receiver's destination is two bytes off the
    source's word phase, at the destination's phase through `copy_shift_rows` (half-word shifted words), so that
    the receivers copy whole words into place (but for a half at either end) instead of every element alone."""
    sends, recvs, copies = phase.send_table(), phase.recv_table(), phase.copy_table()
    sends = np.asarray(sends, np.int64).reshape(-1, 5)
    recvs = np.asarray(recvs, np.int64).reshape(-1, 5)
    copies = np.asarray(copies, np.int64).reshape(-1, 5)
    nbytes = sends[:, 3]
    src_abs = _absolute(sends, src_addr)
    dst_abs = _absolute(recvs, dst_addr)
    # The phase of each send's data in the atoms it sends (0 unless staged). A send of whole atoms from an atom
    # is staged too when its first receiver is two bytes off its word phase (the shift is the sender's, once).
    first = np.full(len(sends), -1, np.int64)
    first[recvs[::-1, 3]] = np.arange(len(recvs))[::-1]
    dst0 = np.where(first >= 0, dst_abs[np.maximum(first, 0)], src_abs)
    even = (src_abs % 2 == 0) & (dst0 % 2 == 0) & (nbytes % 2 == 0)
    staged = (src_abs % 8 != 0) | (nbytes % 8 != 0) | (even & (dst0 % 4 != src_abs % 4))
    phase_of = np.where(staged, np.where(even, dst0 % 4, src_abs % 4), 0)
    shifted = staged & (phase_of != src_abs % 4)
    atoms = (phase_of + nbytes + 7) // 8
    staged_src = src_abs.copy()
    sel = np.nonzero(staged)[0]
    cur = _stage(sends[sel, 0], 8 * atoms[sel])
    staged_src[sel] = send_stage + cur
    plain, shift = ~shifted[sel], shifted[sel]
    lo = src_abs[sel] - src_abs[sel] % 4  # the words holding the transfer, whole
    hi = (src_abs[sel] + nbytes[sel] + 3) // 4 * 4
    pre = _per_tile(sends[sel, 0][plain], np.stack([lo, send_stage + cur, hi - lo], 1)[plain])
    stab = None
    if shift.any():
        try:
            stab = ck.tables(
                sends[sel, 0][shift],
                src_abs[sel][shift],
                (send_stage + cur + phase_of[sel])[shift],
                nbytes[sel][shift],
                num_tiles,
                shift=True,
            )
        except ValueError as e:
            raise ExchangeLoweringError(f"exchange.phase: send staging: {e}") from None
    high = [(cur + 8 * atoms[sel], sends[sel, 0], "sends")]
    staged_dst = dst_abs.copy()
    rbytes = nbytes[recvs[:, 3]]
    rphase = phase_of[recvs[:, 3]]
    sel = np.nonzero((dst_abs % 8 != 0) | (rbytes % 8 != 0) | (rphase != 0))[0]
    cur = _stage(recvs[sel, 0], 8 * atoms[recvs[sel, 3]])
    staged_dst[sel] = recv_stage + cur
    rows = _whole_end_words(
        recvs[sel, 0], recv_stage + cur + rphase[sel], dst_abs[sel], rbytes[sel], copies, dst_addr
    )
    post = _per_tile(recvs[sel, 0], rows)
    high.append((cur + 8 * atoms[recvs[sel, 3]], recvs[sel, 0], "receives"))
    for ends, tiles, side in high:
        if len(ends) and int(ends.max()) > stage_bytes:
            i = int(np.argmax(ends))
            raise ExchangeLoweringError(
                f"exchange.phase: tile {int(tiles[i])} {side} {int(ends[i])} B of transfers that are not whole "
                f"aligned 8-byte atoms (staged whole, one after the other), more than the {stage_bytes}-B staging "
                "area (one kernel scratch element); the phase is not staged in parts: more tiles (smaller shards "
                "per tile) or even-sized, 8-byte aligned blocks would help"
            )
    rtab = sched = None
    if len(sends) and len(recvs):
        if num_tiles >= tm.SEND_MARK:
            raise ExchangeLoweringError(
                f"exchange.phase: {num_tiles} tiles do not fit the {tm.MUX_BITS}-bit mux field"
            )
        sched = timed_schedule(sends, recvs, atoms, target)
        try:
            rtab = tm.table(
                sched, num_tiles, atoms[recvs[:, 3]], sends[recvs[:, 3], 0], staged_src, staged_dst
            )
        except ValueError as e:
            raise ExchangeLoweringError(f"exchange.phase: {e}") from None
    if len(copies):
        cp = np.stack(
            [
                _absolute(copies[:, [0, 1, 2]], src_addr),
                _absolute(copies[:, [0, 1, 3]], dst_addr),
                copies[:, 4],
            ],
            1,
        )
        for t, rows in _per_tile(copies[:, 0], cp).items():
            post.setdefault(t, []).extend(rows)
    return rtab, pre, stab, post, sched


# The routines: the timed exchange (`ipu.backend.lower.timed`) and the half-word copy.
ROUTINES = (
    tm.ROUTINE
    + """
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
)
HALF_WORDS = 5  # xch_half row: source word, source shift, destination word, keep mask, destination shift


def transfer_summary(sends: np.ndarray, recvs: np.ndarray, copies: np.ndarray, buffers: int) -> dict:
    """What a phase's transfer tables move, for its profile sites (`ipu.backend.lower.sites.phase_detail`), in
    numbers that do not grow with the tiles: bytes sent (a multicast once), received (once per receiver) and
    copied on tiles, per buffer (source i -> result i) its bytes sent, received and copied and its sends, how
    many tiles send and receive, the busiest receiver and sender (tile, bytes, transfers), the busiest port's
    words (a lower bound on the phase's exchange cycles at one word per cycle and port) and the rounds of
    `receive_rounds` (the lowering's; cached, so the lowering does not pay twice)."""
    s = np.asarray(sends, np.int64).reshape(-1, 5)
    r = np.asarray(recvs, np.int64).reshape(-1, 5)
    c = np.asarray(copies, np.int64).reshape(-1, 5)
    rb = s[r[:, 3], 3]  # bytes of each receive
    per_buf = []
    for b in range(buffers):
        ss, rr, cc = s[:, 1] == b, r[:, 1] == b, c[:, 1] == b
        per_buf.append(
            dict(
                bytes=int(s[ss, 3].sum()),
                received=int(rb[rr].sum()),
                copied=int(c[cc, 4].sum()),
                sends=int(ss.sum()),
            )
        )

    def busiest(tiles: np.ndarray, nbytes: np.ndarray) -> list[int] | None:
        if not len(tiles):
            return None
        by = np.bincount(tiles, weights=nbytes.astype(np.float64))
        t = int(np.argmax(by))  # the lowest tile of the most bytes
        return [t, int(by[t]), int((tiles == t).sum())]

    words_out = np.bincount(s[:, 0], weights=ex.words(s[:, 3]).astype(np.float64)) if len(s) else np.zeros(1)
    words_in = np.bincount(r[:, 0], weights=ex.words(rb).astype(np.float64)) if len(r) else np.zeros(1)
    nrounds = receive_rounds(s, r)[1] if len(s) and len(r) else 0
    return dict(
        bytes=int(s[:, 3].sum()),
        received=int(rb.sum()),
        copied=int(c[:, 4].sum()),
        transfers=int(len(s)),
        receives=int(len(r)),
        copies=int(len(c)),
        buffers=per_buf,
        src_tiles=int(len(np.unique(s[:, 0]))),
        dst_tiles=int(len(np.unique(r[:, 0]))),
        busiest_receiver=busiest(r[:, 0], rb),
        busiest_sender=busiest(s[:, 0], s[:, 3]),
        port_words=int(max(words_out.max(), words_in.max())),
        rounds=int(nrounds),
    )
