"""Compiled kernels (numba) for the fast path's hottest instructions (issue 23).

One kernel per instruction step, over the contexts of a group, doing exactly what the numpy semantics do in the
same order (checks for every context, then the stores, then the loads and register updates), so a group's
result does not depend on which path ran it. A kernel changes nothing and returns False when any check would
fail: the numpy semantics then run and report the failure exactly. `semantics.py` stays the reference: these
kernels are used only when `Simulator.fast` is set, numba is installed and IPU_SIM_NO_JIT is unset;
tests/unit/test_sim_fast_path.py compares the paths. `rpt_loop` runs a whole rpt loop (every iteration of every
context of the group) in one call; `sup_run` runs supervisor and worker scalar code per context until an
instruction it does not take (the caller regroups the contexts where they stopped); with more than one thread
(`set_threads`, IPU_SIM_THREADS) large groups are split into runs of whole tiles (tests/unit/test_sim_threads.py
compares 1 and 2 threads with the reference).
"""

from __future__ import annotations

import os

import numpy as np

# Idle kernel threads sleep instead of spinning (GNU OpenMP, numba's default threading layer here): on a shared
# 2-core machine a spinning thread takes the core the simulator's own thread needs between parallel kernels.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:  # pragma: no cover - numba is a dependency, but the numpy path works without it
    if os.environ.get("IPU_SIM_NO_JIT", "") not in ("", "0"):
        raise ImportError("disabled by IPU_SIM_NO_JIT")
    import numba
except ImportError:  # pragma: no cover
    numba = None

M21 = 0x1FFFFF
M32 = 0xFFFFFFFF

# Both cores (issue 23, deliverable 3): each kernel is compiled twice, serial and with numba's `parallel=True`, and
# splits its contexts into `nchunks` runs of whole tiles (prange over the runs). Contexts of different tiles touch
# different SRAM words (word-major SRAM: a tile's words are its own column) and their own registers and AMP state,
# and every kernel keeps its phases (every check, then every store, then the loads and register updates) across
# all runs, so the result is the serial kernel's bit for bit whatever the number of threads. Groups smaller than
# PARALLEL_MIN contexts run serially (a parallel region costs ~10-30 us to start).
PARALLEL_MIN = 1024
_threads = 1


def set_threads(n: int | None = None) -> int:
    """Threads the kernels may use (None: IPU_SIM_THREADS, else 1); returns the number set. One by default: on
    the shared 2-core machine of BENCHMARKS.md ("Simulator: both cores") a second thread did not pay."""
    global _threads
    if numba is None:
        _threads = 1
        return 1
    if n is None:
        env = os.environ.get("IPU_SIM_THREADS", "")
        n = int(env) if env else 1
    _threads = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    if _threads > 1:
        numba.set_num_threads(_threads)
    return _threads


def threads() -> int:
    return _threads


def idle_cores(window: float = 0.3) -> float | None:
    """Cores left idle by every process over the next `window` seconds (Linux /proc/stat: idle + iowait jiffies of
    all CPUs over the total; this process sleeps meanwhile); None where that cannot be read."""
    import time

    def sample():
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)

    try:
        total0, idle0 = sample()
        time.sleep(window)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    cpus = os.cpu_count() or 1
    return cpus * (idle1 - idle0) / max(total1 - total0, 1)


def auto_threads() -> int:
    """Threads for a long simulation when none were chosen (IPU_SIM_THREADS unset): one per core that other
    processes leave idle, measured now (on the quiet 2-core machine two threads simulate So400m 1.5x faster,
    BENCHMARKS.md "Simulator threads by default where cores are idle"; on a loaded one a second thread did not
    pay, "Simulator: both cores")."""
    env = os.environ.get("IPU_SIM_THREADS", "")
    if env:
        return set_threads(int(env))
    idle = idle_cores()
    return set_threads(1 if idle is None else max(1, int(idle + 0.25)))


def chunks(n: int) -> int:
    """How many runs of tiles a kernel over n contexts uses (1: the serial kernel)."""
    return _threads if _threads > 1 and n >= PARALLEL_MIN else 1


def _bounds(idx, tile_of, nchunks):
    """Run boundaries [nchunks + 1] over idx (sorted contexts) that never split a tile: run q is
    idx[b[q]:b[q + 1]]. `tile_of[c]` is context c's tile (or anything equal exactly for contexts of one tile)."""
    n = idx.shape[0]
    b = np.empty(nchunks + 1, np.int64)
    b[0] = 0
    b[nchunks] = n
    for q in range(1, nchunks):
        x = max(q * n // nchunks, b[q - 1])
        while 0 < x < n and tile_of[idx[x]] == tile_of[idx[x - 1]]:
            x += 1
        b[q] = x
    return b


def _addresses_ok(m, c, areg, used, nu, r1, e0, e1, base, limit, word_stride, word_base, acc, words, j):
    """A pace form's address checks for context c: its three addresses unpacked from the pair at areg into row j
    of acc; no bank conflict between two used addresses (semantics._bank_conflict), each in bounds and 8-byte
    aligned, its word index into row j of words. False at the first failed check."""
    lo = np.int64(m[c, areg])
    hi = np.int64(m[c, areg + 1])
    acc[j, 0] = lo & M21
    acc[j, 1] = hi & M21
    acc[j, 2] = ((lo >> 21) | (((hi >> 21) & 0x7F) << 11)) << 3
    for p in range(nu):
        for r in range(p + 1, nu):
            x = acc[j, used[p]]
            d = x ^ acc[j, used[r]]
            if x >= r1:
                if d < e1 and (d & 8) == 0:
                    return False
            elif d < e0:
                return False
    for p in range(nu):
        addr = acc[j, used[p]]
        off = (addr - base) & M32
        if off > limit or (addr & 7) != 0:
            return False
        words[j, used[p]] = (off >> 3) * word_stride + word_base[c]
    return True


def _memory_ok(flat_state, words, j, nl, store, check_poison):
    """A pace form's memory checks for row j of words: its loads read written memory (with check_poison), its
    store does not hit protected memory."""
    if check_poison:
        for k in range(nl):
            if (flat_state[words[j, k]] & 3) != 3:
                return False
    return not (store and (flat_state[words[j, 2]] & 4) != 0)


def _advance(m, c, areg, stride_reg, s0, s1, s2, acc, j):
    """A pace form's post-increments for context c (row j of acc, its three unpacked addresses): address k with
    selector s_k >= 0 advances by 8 bytes (s_k = 0) or by the signed 10-bit field s_k of the stride register;
    the packed address pair is written back to areg, areg + 1 (semantics._pace)."""
    stride = np.int64(m[c, stride_reg])
    for k in range(3):
        sk = s0 if k == 0 else (s1 if k == 1 else s2)
        if sk < 0:
            continue
        if sk == 0:
            inc = 8
        else:
            f = (stride >> (10 * (sk - 1))) & 0x3FF
            inc = (f - 1024 if f & 0x200 else f) * 8
        acc[j, k] = (acc[j, k] + inc) & M32
    w2 = acc[j, 2] >> 3
    m[c, areg] = np.uint32((acc[j, 0] & M21) | ((w2 & 0x7FF) << 21))
    m[c, areg + 1] = np.uint32((acc[j, 1] & M21) | (((w2 >> 11) & 0x7F) << 21))


_advance_jit, _addresses_ok_jit, _memory_ok_jit = (
    tuple(
        numba.njit(cache=True, nogil=True, inline="always")(fn)
        for fn in (_advance, _addresses_ok, _memory_ok)
    )
    if numba is not None
    else (None, None, None)
)


def _pace_kernel(
    m, a64, flat_state, flat64, word_base, idx, areg, stride_reg, nl, store, src_pair, s0, s1, s2, base,
    end, r1, e0, e1, check_poison, word_stride, out, nchunks,
):  # fmt: skip
    """The pace forms (semantics._pace): addresses 0..nl-1 loaded into out[k], address 2 stored from the ARF
    pair src_pair (if store), then addresses k with s_k >= 0 post-incremented by selector s_k. Over `nchunks`
    runs of whole tiles (see _bounds), every check of every run before any store."""
    n = idx.shape[0]
    used = np.empty(3, np.int64)
    nu = 0
    for k in range(nl):
        used[nu] = k
        nu += 1
    if store:
        used[nu] = 2
        nu += 1
    acc = np.empty((n, 3), np.int64)
    words = np.empty((n, 3), np.int64)
    limit = end - base - 8
    b = _bounds_jit(idx, word_base, nchunks)
    bad = np.zeros(nchunks, np.int64)
    for q in numba.prange(nchunks):
        for j in range(b[q], b[q + 1]):
            c = idx[j]
            ok = _addresses_ok_jit(
                m, c, areg, used, nu, r1, e0, e1, base, limit, word_stride, word_base, acc, words, j
            )
            if not ok:
                bad[q] = 1
                break
    if bad.sum():
        return False
    # poison and protection, after every address checked (the numpy order: bounds, alignment, poison, protected)
    for q in numba.prange(nchunks):
        for j in range(b[q], b[q + 1]):
            if not _memory_ok_jit(flat_state, words, j, nl, store, check_poison):
                bad[q] = 1
                break
    if bad.sum():
        return False
    for q in numba.prange(nchunks):
        j0, j1 = b[q], b[q + 1]
        if store:  # a run's stores, then its loads: other runs' stores are other tiles' words
            for j in range(j0, j1):
                w = words[j, 2]
                flat_state[w] |= 3
                flat64[w] = a64[idx[j], src_pair]
        for j in range(j0, j1):
            c = idx[j]
            for k in range(nl):
                out[k, j] = flat64[words[j, k]]
            _advance_jit(m, c, areg, stride_reg, s0, s1, s2, acc, j)
    return True


def _both(fn, **opts):
    """fn compiled serially and with parallel=True (None, None without numba)."""
    if numba is None:
        return None, None
    return numba.njit(cache=True, nogil=True, **opts)(fn), numba.njit(
        cache=True, nogil=True, parallel=True, **opts
    )(fn)


_bounds_jit = numba.njit(cache=True, nogil=True)(_bounds) if numba is not None else None
_pace_serial, _pace_parallel = _both(_pace_kernel)


def _pace_call(*args):
    """pace_kernel(m, a64, ..., out): the serial or the parallel kernel (see chunks)."""
    q = chunks(args[5].shape[0])
    return (_pace_parallel if q > 1 else _pace_serial)(*args, q)


pace_kernel = _pace_call if numba is not None else None


def _products(x, w, t, acc_cur, c):
    """acc_cur[c, e] += float32(sum over i in order of x[i] * w[t, i, e]) for the 16 engines e, as eight
    independent sums at a time (each engine's additions in the same order from 0.0; a fused multiply-add rounds
    as a multiply and an add: every product of two halves is exact in float64)."""
    for e0 in range(0, 16, 8):
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
        for i in range(16):
            xi = x[i]
            s0 += xi * w[t, i, e0]
            s1 += xi * w[t, i, e0 + 1]
            s2 += xi * w[t, i, e0 + 2]
            s3 += xi * w[t, i, e0 + 3]
            s4 += xi * w[t, i, e0 + 4]
            s5 += xi * w[t, i, e0 + 5]
            s6 += xi * w[t, i, e0 + 6]
            s7 += xi * w[t, i, e0 + 7]
        acc_cur[c, e0] += np.float32(s0)
        acc_cur[c, e0 + 1] += np.float32(s1)
        acc_cur[c, e0 + 2] += np.float32(s2)
        acc_cur[c, e0 + 3] += np.float32(s3)
        acc_cur[c, e0 + 4] += np.float32(s4)
        acc_cur[c, e0 + 5] += np.float32(s5)
        acc_cur[c, e0 + 6] += np.float32(s6)
        acc_cur[c, e0 + 7] += np.float32(s7)


_products_jit = (
    numba.njit(cache=True, nogil=True, inline="always", fastmath={"contract"})(_products)
    if numba is not None
    else None
)


def _products32(x, w, t, acc_cur, c):
    """_products for the FP8 AMP's 32 inputs (8 per phase): the same in-order float64 sums per engine. FP8
    F143 products scaled by a power of two are exact in float64 and so is their sum (at most 47 significant
    bits), so the order is that of the numpy reference's matmul in effect."""
    for e0 in range(0, 16, 8):
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
        for i in range(32):
            xi = x[i]
            s0 += xi * w[t, i, e0]
            s1 += xi * w[t, i, e0 + 1]
            s2 += xi * w[t, i, e0 + 2]
            s3 += xi * w[t, i, e0 + 3]
            s4 += xi * w[t, i, e0 + 4]
            s5 += xi * w[t, i, e0 + 5]
            s6 += xi * w[t, i, e0 + 6]
            s7 += xi * w[t, i, e0 + 7]
        acc_cur[c, e0] += np.float32(s0)
        acc_cur[c, e0 + 1] += np.float32(s1)
        acc_cur[c, e0 + 2] += np.float32(s2)
        acc_cur[c, e0 + 3] += np.float32(s3)
        acc_cur[c, e0 + 4] += np.float32(s4)
        acc_cur[c, e0 + 5] += np.float32(s5)
        acc_cur[c, e0 + 6] += np.float32(s6)
        acc_cur[c, e0 + 7] += np.float32(s7)


_products32_jit = (
    numba.njit(cache=True, nogil=True, inline="always", fastmath={"contract"})(_products32)
    if numba is not None
    else None
)


def _amp_flush_f16(ctx, xraw, kind, acc_cur, w, f16_to_f32, workers, nchunks):
    """semantics.amp_flush for the contexts of ctx with pending F16 AMP inputs (kind 1): acc_cur[c] += the
    float64 sum of the exact products x[c] * w[tile(c)], rounded once to float32 (inputs and weights are halves:
    every product is exact in float64, and so, for any but extreme exponent spreads, is the sum in any order).
    Each context writes only its own sums: the contexts are split into `nchunks` even runs."""
    n = ctx.shape[0]
    for q in numba.prange(nchunks):
        x = np.empty(16, np.float64)
        for j in range(q * n // nchunks, (q + 1) * n // nchunks):
            c = ctx[j]
            if kind[c] != 1:
                continue
            t = c // workers
            for p in range(4):
                v = xraw[c, p]
                for h in range(4):
                    x[4 * p + h] = f16_to_f32[(v >> np.uint64(16 * h)) & np.uint64(0xFFFF)]
            _products_jit(x, w, t, acc_cur, c)  # per engine e the sum over the inputs i in order


_flush_serial, _flush_parallel = _both(_amp_flush_f16, fastmath={"contract"})


def _amp_flush_f8(ctx, xraw, kind, amp_scale, acc_cur, w, f8_dec, workers, which):
    """semantics.amp_flush for the contexts of ctx with pending FP8 AMP inputs of kind `which` (2: F143, 3: F152
    weights w): acc_cur[c] += the float64 sum of the exact products (inputs through the input format's table
    f8_dec, times 2^(their scale)) rounded once to float32, as _rpt_loop's flush; only the pending state of
    those contexts is cleared."""
    x8 = np.empty(32, np.float64)
    for j in range(ctx.shape[0]):
        c = ctx[j]
        if kind[c] != which:
            continue
        t = c // workers
        sc = 2.0 ** np.float64(amp_scale[c])
        for p in range(4):
            v = xraw[c, p]
            for h in range(8):
                x8[8 * p + h] = f8_dec[(v >> np.uint64(8 * h)) & np.uint64(0xFF)] * sc
        _products32_jit(x8, w, t, acc_cur, c)


amp_flush_f8 = (
    numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})(_amp_flush_f8)
    if numba is not None
    else None
)


def _flush_call(ctx, *args):
    q = chunks(ctx.shape[0])
    return (_flush_parallel if q > 1 else _flush_serial)(ctx, *args, q)


amp_flush_f16 = _flush_call if numba is not None else None


def _amp_step_f16(
    idx, phase, xpair, ppair, a64, amp_kind, acc_cur, acc_bits, next_raw, done_raw, xraw, f16_to_f32, out,
    nchunks,
):  # fmt: skip
    """semantics._amp for f16v4hihov4amp after the flush: at phase 0 finished <- in-progress rounded to half
    (round to nearest even, as numpy), in-progress <- next partials, next partials <- 0; then out[j] <- the
    finished halves of `phase`, and the partials and inputs of `phase` are kept. False (nothing changed) when a
    phase-0 sum is NaN (its half encoding is left to numpy). Per context only: `nchunks` even runs."""
    n = idx.shape[0]
    if phase == 0:
        bad = np.zeros(nchunks, np.int64)
        for q in numba.prange(nchunks):
            for j in range(q * n // nchunks, (q + 1) * n // nchunks):
                c = idx[j]
                for e in range(16):
                    if np.isnan(acc_cur[c, e]):
                        bad[q] = 1
        if bad.sum():
            return False
    for q in numba.prange(nchunks):
        for j in range(q * n // nchunks, (q + 1) * n // nchunks):
            c = idx[j]
            if phase == 0:
                for r in range(4):
                    bits = np.uint64(0)
                    for h in range(4):
                        b = np.int64(acc_bits[c, 4 * r + h])
                        mag = b & 0x7FFFFFFF
                        if mag >= 0x38800000:  # a normal half, or overflow to infinity
                            rr = (mag + 0xFFF + ((mag >> 13) & 1)) >> 13
                            v = min(rr - 0x1C000, 0x7C00)
                        else:  # zero or a subnormal half: multiples of 2^-24, ties to even (exact in float64)
                            v = np.int64(np.rint(abs(np.float64(acc_cur[c, 4 * r + h])) * 16777216.0))
                        v |= (b >> 16) & 0x8000
                        bits |= np.uint64(v) << np.uint64(16 * h)
                    done_raw[c, r] = bits
                for r in range(4):
                    w = next_raw[c, r]
                    for h in range(4):
                        acc_cur[c, 4 * r + h] = f16_to_f32[(w >> np.uint64(16 * h)) & np.uint64(0xFFFF)]
                    next_raw[c, r] = 0
            out[j] = done_raw[c, phase]
            next_raw[c, phase] = a64[c, ppair]
            xraw[c, phase] = a64[c, xpair]
            amp_kind[c] = 1
    return True


_step_serial, _step_parallel = _both(_amp_step_f16)


def _step_call(idx, *args):
    q = chunks(idx.shape[0])
    return (_step_parallel if q > 1 else _step_serial)(idx, *args, q)


amp_step_f16 = _step_call if numba is not None else None


set_threads()


# The fused rpt body (issue 23): a whole rpt loop whose every bundle is a pace form with an AMP (or an fnop)
# beside it, every iteration of every context in one call. Row of `body` per bundle (BODY_* columns):
(B_NL, B_STORE, B_SRC, B_D0, B_D1, B_AREG, B_STRIDE, B_S0, B_S1, B_S2) = range(10)  # the pace form
# the AUX instruction (B_AMP: AUX_NONE an fnop or none, AUX_AMP_F16 / AUX_AMP_F8 the F16 / FP8 AMP with B_ADST,
# B_AX, B_AP, B_PHASE, AUX_F8TOF16 f8v4tof16 from the ARF register B_AX into the pair B_ADST), the unit's cycles
# and instructions issued (2: a bundle, 1: a pace form alone)
B_AMP, B_ADST, B_AX, B_AP, B_PHASE, B_COST, B_ISSUE = range(10, 17)
BODY_COLS = 17
AUX_NONE, AUX_AMP_F16, AUX_F8TOF16, AUX_AMP_F8 = 0, 1, 2, 3


def _rpt_loop(
    m, a64, flat_state, flat64, word_base, idx, left, done, status, body, base, end, r1, e0, e1,
    check_poison, word_stride, amp_kind, acc_cur, acc_bits, next_raw, done_raw, xraw, w, f16_to_f32, workers,
    cycles, issued, a32, f8_bits, amp_scale, f8_dec, akind, ascale,
):  # fmt: skip
    """Simulator._step over every bundle of the body for the contexts idx (their iterations left in `left`), the
    fast path's way: iteration by iteration, each bundle as one step of the group (the AMP of the bundle, its
    register write deferred, then the pace form: checks, stores, loads; then the AMP's write), contexts whose
    count is done leave the group into done[] (the fast path's parked part). Stops before a bundle when one of
    its checks would fail or a phase-0 sum is NaN (after that bundle's flush, which is then a no-op): returns
    the bundle's index (the group's state is then that of the step path just before it: idx[:status[0]] with
    left[:status[0]] still in the loop, done[:status[1]] out of it), or -1 when every context left the loop."""
    n = idx.shape[0]
    nb = body.shape[0]
    nd = 0
    acc = np.empty((n, 3), np.int64)
    words = np.empty((n, 3), np.int64)
    tmp = np.empty(n, np.uint64)
    ld = np.empty((2, n), np.uint64)
    x = np.empty(16, np.float64)
    x8 = np.empty(32, np.float64)
    limit = end - base - 8
    used = np.empty(3, np.int64)
    while n > 0:
        for bi in range(nb):
            nl = body[bi, B_NL]
            store = body[bi, B_STORE] != 0
            areg = body[bi, B_AREG]
            nu = 0
            for k in range(nl):
                used[nu] = k
                nu += 1
            if store:
                used[nu] = 2
                nu += 1
            # 1. the pace form's checks (independent of the AMP's effects: addresses, memory state)
            for j in range(n):
                c = idx[j]
                ok = _addresses_ok_jit(
                    m, c, areg, used, nu, r1, e0, e1, base, limit, word_stride, word_base, acc, words, j
                )
                if not ok:
                    status[0], status[1] = n, nd
                    return bi
            for j in range(n):
                if not _memory_ok_jit(flat_state, words, j, nl, store, check_poison):
                    status[0], status[1] = n, nd
                    return bi
            # 2. the AMP (semantics._amp): flush at phase 0, then the step; its register write deferred. One AMP
            # kind per body (akind: 1 F16, 2/3 FP8 with F143/F152 weights, issued with the scale ascale); the
            # group's pending products are of that kind or none (Simulator._fusable)
            amp = body[bi, B_AMP] == AUX_AMP_F16 or body[bi, B_AMP] == AUX_AMP_F8
            conv = body[bi, B_AMP] == AUX_F8TOF16
            phase = body[bi, B_PHASE]
            if amp and phase == 0:
                for j in range(n):
                    c = idx[j]
                    if amp_kind[c] == 1:
                        t = c // workers
                        for p in range(4):
                            v = xraw[c, p]
                            for h in range(4):
                                x[4 * p + h] = f16_to_f32[(v >> np.uint64(16 * h)) & np.uint64(0xFFFF)]
                        _products_jit(x, w, t, acc_cur, c)
                    elif amp_kind[c] > 1:  # FP8 inputs [phase * 8 + byte], times 2^(their scale)
                        t = c // workers
                        sc = 2.0 ** np.float64(amp_scale[c])
                        for p in range(4):
                            v = xraw[c, p]
                            for h in range(8):
                                x8[8 * p + h] = f8_dec[(v >> np.uint64(8 * h)) & np.uint64(0xFF)] * sc
                        _products32_jit(x8, w, t, acc_cur, c)
                    for p in range(4):
                        xraw[c, p] = 0
                    amp_kind[c] = 0
                for j in range(n):
                    c = idx[j]
                    for e in range(16):
                        if np.isnan(acc_cur[c, e]):
                            status[0], status[1] = n, nd
                            return bi
            if amp:
                xpair = body[bi, B_AX]
                ppair = body[bi, B_AP]
                for j in range(n):
                    c = idx[j]
                    if phase == 0:
                        for r in range(4):
                            bits = np.uint64(0)
                            for h in range(4):
                                b = np.int64(acc_bits[c, 4 * r + h])
                                mag = b & 0x7FFFFFFF
                                if mag >= 0x38800000:
                                    rr = (mag + 0xFFF + ((mag >> 13) & 1)) >> 13
                                    v = min(rr - 0x1C000, 0x7C00)
                                else:
                                    v = np.int64(np.rint(abs(np.float64(acc_cur[c, 4 * r + h])) * 16777216.0))
                                v |= (b >> 16) & 0x8000
                                bits |= np.uint64(v) << np.uint64(16 * h)
                            done_raw[c, r] = bits
                        for r in range(4):
                            wv = next_raw[c, r]
                            for h in range(4):
                                acc_cur[c, 4 * r + h] = f16_to_f32[
                                    (wv >> np.uint64(16 * h)) & np.uint64(0xFFFF)
                                ]
                            next_raw[c, r] = 0
                    tmp[j] = done_raw[c, phase]
                    next_raw[c, phase] = a64[c, ppair]
                    xraw[c, phase] = a64[c, xpair]
                    amp_kind[c] = akind
                    if akind > 1:
                        amp_scale[c] = ascale
            if conv:  # semantics.sem_f8v4tof16 (the table: _f8_table's halves as bits)
                xreg = body[bi, B_AX]
                for j in range(n):
                    v = a32[idx[j], xreg]
                    tmp[j] = (
                        f8_bits[v & 0xFF]
                        | (f8_bits[(v >> 8) & 0xFF] << np.uint64(16))
                        | (f8_bits[(v >> 16) & 0xFF] << np.uint64(32))
                        | (f8_bits[(v >> 24) & 0xFF] << np.uint64(48))
                    )
            # 3. the pace form's stores, loads and address updates, its register writes, then the AMP's
            if store:
                src = body[bi, B_SRC]
                for j in range(n):
                    wd = words[j, 2]
                    flat_state[wd] |= 3
                    flat64[wd] = a64[idx[j], src]
            stride_reg = body[bi, B_STRIDE]
            s0, s1, s2 = body[bi, B_S0], body[bi, B_S1], body[bi, B_S2]
            d0, d1 = body[bi, B_D0], body[bi, B_D1]
            for j in range(n):
                c = idx[j]
                for k in range(nl):
                    ld[k, j] = flat64[words[j, k]]
                _advance_jit(m, c, areg, stride_reg, s0, s1, s2, acc, j)
            wcost = body[bi, B_COST]
            nissue = body[bi, B_ISSUE]
            for j in range(n):
                c = idx[j]
                if nl > 0:
                    a64[c, d0] = ld[0, j]
                if nl > 1:
                    a64[c, d1] = ld[1, j]
                if amp or conv:
                    a64[c, body[bi, B_ADST]] = tmp[j]
                cycles[c] += wcost
                issued[c] += nissue
        # the end of the body (Simulator._rpt_end): contexts with iterations left run it again
        k = 0
        for j in range(n):
            lj = left[j] - 1
            if lj > 0:
                idx[k] = idx[j]
                left[k] = lj
                k += 1
            else:
                done[nd] = idx[j]
                nd += 1
        n = k
    status[0], status[1] = 0, nd
    return -1


_rpt_core = (
    numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})(_rpt_loop)
    if numba is not None
    else None
)


def _rpt_runs(
    m, a64, flat_state, flat64, word_base, idx, left, done, status, body, base, end, r1, e0, e1,
    check_poison, word_stride, amp_kind, acc_cur, acc_bits, next_raw, done_raw, xraw, w, f16_to_f32, workers,
    cycles, issued, a32, f8_bits, amp_scale, f8_dec, akind, ascale, bounds, stops,
):  # fmt: skip
    """_rpt_loop over runs of whole tiles, one per thread: run q is idx[bounds[q]:bounds[q + 1]] (likewise left,
    done; status[q] its counts), stops[q] its result. The runs share no memory word, register or AMP state, so
    each is exactly the serial loop restricted to its tiles."""
    for q in numba.prange(bounds.shape[0] - 1):
        j0, j1 = bounds[q], bounds[q + 1]
        stops[q] = _rpt_core(
            m, a64, flat_state, flat64, word_base, idx[j0:j1], left[j0:j1], done[j0:j1], status[q], body, base,
            end, r1, e0, e1, check_poison, word_stride, amp_kind, acc_cur, acc_bits, next_raw, done_raw, xraw, w,
            f16_to_f32, workers, cycles, issued, a32, f8_bits, amp_scale, f8_dec, akind, ascale,
        )  # fmt: skip


_rpt_parallel = numba.njit(cache=True, nogil=True, parallel=True)(_rpt_runs) if numba is not None else None


def run_rpt_loop(args: tuple) -> list[tuple[int, int, int, int, int]]:
    """args: _rpt_loop's arguments. The serial loop, or runs of tiles over threads (see chunks, _rpt_runs).
    Returns the runs, each (start, stop, n, nd, bundle): contexts idx[start:stop] ran, idx[start:start + n] (with
    left[start:start + n]) stopped before `bundle` (-1: none left in the loop), done[start:start + nd] left it."""
    idx, status = args[5], args[8]
    n = idx.shape[0]
    q = chunks(n)
    if q == 1:
        b = _rpt_core(*args)
        return [(0, n, int(status[0]), int(status[1]), int(b))]
    bounds = _bounds_jit(idx, args[4], q)
    st = np.zeros((q, 2), np.int64)
    stops = np.zeros(q, np.int64)
    _rpt_parallel(*args[:8], st, *args[9:], bounds, stops)
    return [
        (int(bounds[r]), int(bounds[r + 1]), int(st[r, 0]), int(st[r, 1]), int(stops[r]))
        for r in range(q)
        if bounds[r + 1] > bounds[r]
    ]


rpt_loop = run_rpt_loop if numba is not None else None


def _deliver(mem64, wstate, atoms, src_first, rt, n, w0, nchunks):
    """semantics._x_resolve_fast's writes: receive window i (on tile rt[i]) gets atoms[src_first[i] + k] at word
    w0[i] + k, k < n[i], marked written. False (nothing changed) if any of those words is protected. Windows
    write disjoint words (the exchange-overwrite check runs first), so `nchunks` even runs of windows never
    write one word twice, also when several windows are on one tile."""
    r = rt.shape[0]
    bad = np.zeros(nchunks, np.int64)
    for q in numba.prange(nchunks):
        for i in range(q * r // nchunks, (q + 1) * r // nchunks):
            t = rt[i]
            for k in range(n[i]):
                if wstate[w0[i] + k, t] & 4:
                    bad[q] = 1
    if bad.sum():
        return False
    for q in numba.prange(nchunks):
        for i in range(q * r // nchunks, (q + 1) * r // nchunks):
            t = rt[i]
            for k in range(n[i]):
                mem64[w0[i] + k, t] = atoms[src_first[i] + k]
                wstate[w0[i] + k, t] |= 3
    return True


_deliver_serial, _deliver_parallel = _both(_deliver)


def _deliver_call(mem64, wstate, atoms, src_first, rt, n, w0):
    q = _threads if _threads > 1 and rt.shape[0] >= 64 else 1
    return (_deliver_parallel if q > 1 else _deliver_serial)(mem64, wstate, atoms, src_first, rt, n, w0, q)


deliver = _deliver_call if numba is not None else None


def _decode_weights(cwei, tiles, w, f16_to_f32, f8_dec, kind):
    """Simulator._cwei_matrix64's decode for the tiles listed: w[t, phase * K + k, engine] = value k of common
    weight slot engine * 4 + phase of tile t (kind 1: F16 halves, K = 4, through f16_to_f32; 2 / 3: FP8 bytes,
    K = 8, through the format's table f8_dec), as float64 (every float32 value exactly)."""
    for i in range(tiles.shape[0]):
        t = tiles[i]
        for e in range(16):
            for p in range(4):
                s = e * 4 + p
                if kind == 1:
                    for k in range(4):
                        h = np.int64(cwei[t, s, 2 * k]) | (np.int64(cwei[t, s, 2 * k + 1]) << 8)
                        w[t, p * 4 + k, e] = f16_to_f32[h]
                else:
                    for k in range(8):
                        w[t, p * 8 + k, e] = f8_dec[cwei[t, s, k]]


decode_weights = numba.njit(cache=True, nogil=True)(_decode_weights) if numba is not None else None


def _f16v4_arith(op, x, y, f16_to_f32, r32, out):
    """semantics._f16v4_fast compiled: out[j] = the four halves of x[j] op y[j] (0 add, 1 subtract, 2 multiply),
    each half to float32 (exact), the float32 operation, rounded to half (nearest even, as numpy's cast). False
    (out undefined) when an input or a result is a NaN (which NaN numpy gives is left to numpy). r32: float32
    scratch [4 * len(x)]."""
    n = x.shape[0]
    for j in range(n):
        xv = x[j]
        yv = y[j]
        for h in range(4):
            a = np.int64((xv >> np.uint64(16 * h)) & np.uint64(0xFFFF))
            b = np.int64((yv >> np.uint64(16 * h)) & np.uint64(0xFFFF))
            if (a & 0x7FFF) > 0x7C00 or (b & 0x7FFF) > 0x7C00:
                return False
            fa = f16_to_f32[a]
            fb = f16_to_f32[b]
            if op == 0:
                r32[4 * j + h] = fa + fb
            elif op == 1:
                r32[4 * j + h] = fa - fb
            else:
                r32[4 * j + h] = fa * fb
    bits32 = r32.view(np.uint32)
    for j in range(n):
        res = np.uint64(0)
        for h in range(4):
            bb = np.int64(bits32[4 * j + h])
            mag = bb & 0x7FFFFFFF
            if mag > 0x7F800000:
                return False
            if mag >= 0x38800000:  # a normal half, or overflow to infinity
                rr = (mag + 0xFFF + ((mag >> 13) & 1)) >> 13
                v = min(rr - 0x1C000, 0x7C00)
            else:  # zero or a subnormal half: multiples of 2^-24, ties to even (exact in float64)
                v = np.int64(np.rint(abs(np.float64(r32[4 * j + h])) * 16777216.0))
            v |= (bb >> 16) & 0x8000
            res |= np.uint64(v) << np.uint64(16 * h)
        out[j] = res
    return True


f16v4_arith = numba.njit(cache=True, nogil=True)(_f16v4_arith) if numba is not None else None


# Scalar code per context (issue 23): the supervisors of different tiles diverge on data (the exchange
# program's table-driven receive and send loops: a computed branch per entry), so the step path runs them in
# groups of a few contexts at ~20-60 us a step. `sup_run` runs each context of a group (supervisors; workers
# with a table without the supervisor-only forms) on its own
# through the scalar instructions below until one it does not take (send, sync, run, ...), a check that would
# fail, a profile mark, or its budget; the caller regroups the contexts at the PCs where they stopped, and the
# step path runs those instructions (and reports a failing check exactly). Row of `tab` per code word (unit
# index), SUP_* columns; S_STOP for every PC it does not take.
(SUP_OP, SUP_SUB, SUP_X0, SUP_X1, SUP_X2, SUP_X3, SUP_COST) = range(7)
SUP_COLS = 7
(S_STOP, S_NOP, S_DELAY, S_SETZI, S_ALU, S_LD32, S_LD32STEP, S_ST32, S_ST32STEP, S_BR, S_BRI, S_BRZ, S_BRNZ,
 S_BRNZDEC, S_PUT, S_GET, S_CALL, S_TAPACK) = range(18)  # fmt: skip
# S_ALU sub-operations (semantics._ALU); SUP_X2 an immediate (SUP_X3 = 1) or a register (SUP_X3 = 0)
ALU_OPS = ("add", "sub", "mul", "and", "or", "xor", "shl", "shr", "shrs", "cmpeq", "cmpne", "cmpslt", "cmpult",
           "min", "max")  # fmt: skip
# S_PUT kinds (SUP_SUB): a plain CSR write, or an exchange set-up recorded as an event (semantics._exchange_setup)
PUT_PLAIN, PUT_MUX, PUT_BASE, PUT_DCOUNT = 0, 1, 2, 3
EV_COLS = 8  # event rows: context, clock before the put, pc, CSR index, value, mux, base, kind (PUT_*)


def _i32(v):
    return v - 0x100000000 if v & 0x80000000 else v


def _alu(op, a, b):
    """semantics._ALU on uint32 values held in int64, the result as uint32 in int64."""
    if op == 0:
        return (a + b) & M32
    if op == 1:
        return (a - b) & M32
    if op == 2:
        return (a * b) & M32  # int64 wraps; the low 32 bits are exact
    if op == 3:
        return a & b
    if op == 4:
        return a | b
    if op == 5:
        return a ^ b
    if op == 6:
        return (a << (b & 31)) & M32
    if op == 7:
        return a >> (b & 31)
    if op == 8:
        return (_i32_jit(a) >> (b & 31)) & M32
    if op == 9:
        return np.int64(a == b)
    if op == 10:
        return np.int64(a != b)
    if op == 11:
        return np.int64(_i32_jit(a) < _i32_jit(b))
    if op == 12:
        return np.int64(a < b)
    if op == 13:
        return min(_i32_jit(a), _i32_jit(b)) & M32
    return max(_i32_jit(a), _i32_jit(b)) & M32


_i32_jit = numba.njit(cache=True, nogil=True, inline="always")(_i32) if numba is not None else None
_alu_jit = numba.njit(cache=True, nogil=True, inline="always")(_alu) if numba is not None else None


def _sup_run(
    m, csr, cycles, issued, flat32, flat_state, word_base, idx, tab, stop, pbase, base, end, word_stride,
    check_poison, col_mux, col_base, col_dcount, budget, out_pc, out_n, ev, ev_n, pc0,
):  # fmt: skip
    """Each context idx[j] from pc0 through the instructions of `tab` (semantics.py's steps for one context:
    the same register, memory, per-word state and CSR updates, cycles and issue counts), until a PC whose row is
    S_STOP or whose `stop` flag is set, an instruction whose check would fail (left unexecuted), an exchange
    set-up with the event buffer `ev` full, or `budget` instructions. out_pc[j]: where it stopped; out_n[j]:
    instructions executed. Exchange set-ups are appended to ev (ev_n[0] rows) in each context's program order."""
    nunits = tab.shape[0]
    limit4 = end - base - 4
    cap = ev.shape[0]
    for j in range(idx.shape[0]):
        c = idx[j]
        pc = pc0
        cnt = 0
        while cnt < budget:
            k = (pc - pbase) >> 2
            if pc & 3 or k < 0 or k >= nunits or stop[k]:
                break
            op = tab[k, SUP_OP]
            x0, x1, x2, x3 = tab[k, SUP_X0], tab[k, SUP_X1], tab[k, SUP_X2], tab[k, SUP_X3]
            nxt = pc + 4
            if op == S_STOP:
                break
            elif op == S_NOP:
                pass
            elif op == S_DELAY:
                cycles[c] += x0
            elif op == S_SETZI:
                m[c, x0] = np.uint32(x1)
            elif op == S_ALU:
                a = np.int64(m[c, x1])
                b = x2 if x3 else np.int64(m[c, x2])
                m[c, x0] = np.uint32(_alu_jit(tab[k, SUP_SUB], a, b))
            elif op == S_LD32 or op == S_LD32STEP or op == S_ST32 or op == S_ST32STEP:
                # ld32/st32 d/s, base, delta, off: EA = base + delta + off * 4 (off: register if SUB else zimm12);
                # the step forms: EA = base + delta, then delta += stride * 4 (register if SUB, else simm8)
                step = op == S_LD32STEP or op == S_ST32STEP
                store = op == S_ST32 or op == S_ST32STEP
                delta = np.int64(m[c, x2])
                ea = np.int64(m[c, x1]) + delta
                inc = (np.int64(m[c, x3]) if tab[k, SUP_SUB] else x3) * 4
                if not step:
                    ea += inc
                ea &= M32
                off = (ea - base) & M32
                if off > limit4 or ea & 3:
                    break
                w = (off >> 3) * word_stride + word_base[c]
                h = (ea >> 2) & 1
                st = flat_state[w]
                if store:
                    if st & 4:
                        break
                elif check_poison and (st & (1 << h)) == 0:
                    break
                vals = np.uint32(m[c, x0])  # a store's source is read before a step form's delta update
                if step:
                    m[c, x2] = np.uint32((delta + inc) & M32)
                if store:
                    flat_state[w] = st | (1 << h)
                    flat32[2 * w + h] = vals
                else:
                    m[c, x0] = flat32[2 * w + h]
            elif op == S_BR:
                t = np.int64(m[c, x0])
                if t == 0:  # a supervisor's return to the host: the step path ends the context
                    break
                nxt = t
            elif op == S_BRI:
                nxt = x0
            elif op == S_TAPACK:  # semantics.pack_triple of x1, x2, x3 into x0, x0 + 1
                w2 = np.int64(m[c, x3]) >> 3
                lo = (np.int64(m[c, x1]) & M21) | ((w2 & 0x7FF) << 21)
                hi = (np.int64(m[c, x2]) & M21) | (((w2 >> 11) & 0x7F) << 21)
                m[c, x0] = np.uint32(lo)
                m[c, x0 + 1] = np.uint32(hi)
            elif op == S_CALL:
                m[c, x0] = np.uint32(pc + 4)
                nxt = x1
            elif op == S_BRZ:
                if m[c, x0] == 0:
                    nxt = x1
            elif op == S_BRNZ:
                if m[c, x0] != 0:
                    nxt = x1
            elif op == S_BRNZDEC:
                v = np.int64(m[c, x0])
                if v != 0:
                    m[c, x0] = np.uint32(v - 1)
                    nxt = x1
            elif op == S_PUT:
                kind = tab[k, SUP_SUB]
                v = np.int64(m[c, x1])
                if kind != PUT_PLAIN:
                    if ev_n[0] >= cap:
                        break
                    e = ev_n[0]
                    ev[e, 0], ev[e, 1], ev[e, 2], ev[e, 3] = c, cycles[c], pc, x0
                    ev[e, 4], ev[e, 5], ev[e, 6], ev[e, 7] = v, csr[c, col_mux], csr[c, col_base], kind
                    ev_n[0] = e + 1
                csr[c, x2] = np.uint32(v)
            elif op == S_GET:
                m[c, x0] = np.uint32(0) if x2 else csr[c, x1]
            else:
                break
            cycles[c] += tab[k, SUP_COST]
            issued[c] += 1
            pc = nxt
            cnt += 1
        out_pc[j] = pc
        out_n[j] = cnt


sup_run = numba.njit(cache=True, nogil=True)(_sup_run) if numba is not None else None
