"""Compiled kernels (numba) for the fast path's hottest instructions (issue 23).

One kernel per instruction step, over the contexts of a group, doing exactly what the numpy semantics do in the
same order (checks for every context, then the stores, then the loads and register updates), so a group's
result does not depend on which path ran it. A kernel changes nothing and returns False when any check would
fail: the numpy semantics then run and report the failure exactly. `semantics.py` stays the reference: these
kernels are used only when `Simulator.fast` is set, numba is installed and IPU_SIM_NO_JIT is unset;
tests/unit/test_sim_fast_path.py compares the paths.
"""

from __future__ import annotations

import os

import numpy as np

try:  # pragma: no cover - numba is a dependency, but the numpy path works without it
    if os.environ.get("IPU_SIM_NO_JIT", "") not in ("", "0"):
        raise ImportError("disabled by IPU_SIM_NO_JIT")
    import numba
except ImportError:  # pragma: no cover
    numba = None

M21 = 0x1FFFFF
M32 = 0xFFFFFFFF


def _pace_kernel(
    m, a64, flat_state, flat64, word_base, idx, areg, stride_reg, nl, store, src_pair, s0, s1, s2, base,
    end, r1, e0, e1, check_poison, word_stride, out,
):  # fmt: skip
    """The pace forms (semantics._pace): addresses 0..nl-1 loaded into out[k], address 2 stored from the ARF
    pair src_pair (if store), then addresses k with s_k >= 0 post-incremented by selector s_k."""
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
    for j in range(n):
        c = idx[j]
        lo = np.int64(m[c, areg])
        hi = np.int64(m[c, areg + 1])
        acc[j, 0] = lo & M21
        acc[j, 1] = hi & M21
        acc[j, 2] = ((lo >> 21) | (((hi >> 21) & 0x7F) << 11)) << 3
        # bank conflicts between every two used addresses (semantics._bank_conflict)
        for p in range(nu):
            for q in range(p + 1, nu):
                x = acc[j, used[p]]
                d = x ^ acc[j, used[q]]
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
    # poison and protection, after every address checked (the numpy order: bounds, alignment, poison, protected)
    for j in range(n):
        if check_poison:
            for k in range(nl):
                if (flat_state[words[j, k]] & 3) != 3:
                    return False
        if store and (flat_state[words[j, 2]] & 4) != 0:
            return False
    if store:
        for j in range(n):
            w = words[j, 2]
            flat_state[w] |= 3
            flat64[w] = a64[idx[j], src_pair]
    for j in range(n):
        c = idx[j]
        for k in range(nl):
            out[k, j] = flat64[words[j, k]]
        stride = np.int64(m[c, stride_reg])
        for k in range(3):
            s = s0 if k == 0 else (s1 if k == 1 else s2)
            if s < 0:
                continue
            if s == 0:
                inc = 8
            else:
                f = (stride >> (10 * (s - 1))) & 0x3FF
                inc = (f - 1024 if f & 0x200 else f) * 8
            acc[j, k] = (acc[j, k] + inc) & M32
        w2 = acc[j, 2] >> 3
        m[c, areg] = np.uint32((acc[j, 0] & M21) | ((w2 & 0x7FF) << 21))
        m[c, areg + 1] = np.uint32((acc[j, 1] & M21) | (((w2 >> 11) & 0x7F) << 21))
    return True


pace_kernel = numba.njit(cache=True, nogil=True)(_pace_kernel) if numba is not None else None


def _amp_flush_f16(ctx, xraw, kind, acc_cur, w, f16_to_f32, workers):
    """semantics.amp_flush for the contexts of ctx with pending F16 AMP inputs (kind 1): acc_cur[c] += the
    float64 sum of the exact products x[c] * w[tile(c)], rounded once to float32 (inputs and weights are halves:
    every product is exact in float64, and so, for any but extreme exponent spreads, is the sum in any order)."""
    x = np.empty(16, np.float64)
    for j in range(ctx.shape[0]):
        c = ctx[j]
        if kind[c] != 1:
            continue
        t = c // workers
        for p in range(4):
            v = xraw[c, p]
            for h in range(4):
                x[4 * p + h] = f16_to_f32[(v >> np.uint64(16 * h)) & np.uint64(0xFFFF)]
        wt = w[t]
        for e in range(16):  # per engine: the sum over the inputs in order (a fused multiply-add rounds as a
            s = 0.0  # multiply and an add: every product of two halves is exact in float64)
            for i in range(16):
                s += x[i] * wt[i, e]
            acc_cur[c, e] += np.float32(s)


amp_flush_f16 = (
    numba.njit(cache=True, nogil=True, fastmath={"contract"})(_amp_flush_f16) if numba is not None else None
)


def _amp_step_f16(
    idx, phase, xpair, ppair, a64, amp_kind, acc_cur, acc_bits, next_raw, done_raw, xraw, f16_to_f32, out
):
    """semantics._amp for f16v4hihov4amp after the flush: at phase 0 finished <- in-progress rounded to half
    (round to nearest even, as numpy), in-progress <- next partials, next partials <- 0; then out[j] <- the
    finished halves of `phase`, and the partials and inputs of `phase` are kept. False (nothing changed) when a
    phase-0 sum is NaN (its half encoding is left to numpy)."""
    n = idx.shape[0]
    if phase == 0:
        for j in range(n):
            c = idx[j]
            for e in range(16):
                if np.isnan(acc_cur[c, e]):
                    return False
        for j in range(n):
            c = idx[j]
            for q in range(4):
                bits = np.uint64(0)
                for h in range(4):
                    b = np.int64(acc_bits[c, 4 * q + h])
                    mag = b & 0x7FFFFFFF
                    if mag >= 0x38800000:  # a normal half, or overflow to infinity
                        r = (mag + 0xFFF + ((mag >> 13) & 1)) >> 13
                        v = min(r - 0x1C000, 0x7C00)
                    else:  # zero or a subnormal half: multiples of 2^-24, ties to even (exact in float64)
                        v = np.int64(np.rint(abs(np.float64(acc_cur[c, 4 * q + h])) * 16777216.0))
                    v |= (b >> 16) & 0x8000
                    bits |= np.uint64(v) << np.uint64(16 * h)
                done_raw[c, q] = bits
            for q in range(4):
                w = next_raw[c, q]
                for h in range(4):
                    acc_cur[c, 4 * q + h] = f16_to_f32[(w >> np.uint64(16 * h)) & np.uint64(0xFFFF)]
                next_raw[c, q] = 0
    for j in range(n):
        c = idx[j]
        out[j] = done_raw[c, phase]
        next_raw[c, phase] = a64[c, ppair]
        xraw[c, phase] = a64[c, xpair]
        amp_kind[c] = 1
    return True


amp_step_f16 = numba.njit(cache=True, nogil=True)(_amp_step_f16) if numba is not None else None
