"""Instruction semantics: one function per ISA form (`sem_<form key>`), vectorised over a group of contexts.

Each function takes (sim, group, sel, instr): `sel` selects the group's contexts in the per-context arrays (a slice
when contiguous). It returns None to fall through, or one of:
("branch", next_pcs), ("rpt", counts, body_start, body_end), ("exit",), ("wait", sync_zone).

Semantics are the project's reading of Graphcore's ISA text (S2) and poplibs (S1); choices of ours are [own]:

Addresses. `ld/st` EA = base + delta + offset * size; `...step` forms use EA = base + delta, then
delta += stride * size (size 4 for 32-bit, 8 for 64-bit forms). Pace forms take a triple-packed MRF pair
(written by `tapack`); the packed format is [own] (Graphcore's is not public): low register = addr0 in bits [20:0],
high register = addr1 in bits [20:0], and the 64-bit word index of addr2 (18 bits) split over bits [31:21] of the
low register (its low 11 bits) and bits [27:21] of the high one. Each address is post-incremented by a 2-bit
selector: 0 -> +1 atom (8 bytes), 1/2/3 -> field 0/1/2 of the stride register (three signed 10-bit atom counts at
bits [9:0], [19:10], [29:20]) (S1 inlineAssemblerConv.hpp [C]). Selector order (low bits first):
ld2x64pace (addr0, addr1); ld2xst64pace (addr0 = input, addr1 = partials, addr2 = store); ldst64pace
(addr0 = load, addr2 = store); st64pace (addr2).

AMP (f16v4hihov4amp, f8v8hihov4amp), per worker context, with the tile's common weights CW[engine, phase, k]
(16 engines x 4 phases x 4 halves or 8 fp8; CWEI slot = engine * 4 + phase [own layout]). The flags name the
phase p (TAMP_*_E4_P<p>; only E4 = all 16 engines is simulated). One instruction at phase p:
  1. if p == 0, a new group of 4 instructions starts: finished <- in-progress, in-progress <- next-partials,
     next-partials <- 0;
  2. d <- the finished results of engines 4p..4p+3, rounded to half;
  3. next-partials[4p..4p+3] <- the 4 half partials of operand p;
  4. in-progress[e] += sum_k x[k] * CW[e, p, k] for all 16 engines (FP8: times 2^$FP_ISCL).
So partials enter one group early and results leave one group late (S2 f16v4hihoamp example table [D]): a run
over N groups takes 4 (N + 2) instructions: a warm-up group, N groups, a drain group (S1 loops prime and drain).
The internal accumulation is float32 [I: hardware is a wider fixed-point, S4 TAMP widths]; `uput $FP_CLR, ZAACC`
zeroes all three accumulator sets of the context.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

from ipu.backend.isa import (
    FORMS_BY_KEY,
    FP_CLR_ZAACC,
    FP_CTL_NANOO,
    M_VERTEX_BASE,
    M_WORKER_BASE,
    SUPERVISOR_CSRS,
)
from ipu.backend.isa import WORKER_CSRS as WC
from ipu.runtime import fp8
from ipu.runtime.errors import SimError
from ipu.runtime.halfconv import F16_TO_F32, f16_bits_to_f32, f32_to_f16_bits


def _lazy_module(name: str):
    """`name`, imported on its first attribute access (importlib's LazyLoader)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# The compiled kernels (numba, ~0.25 s to import) load when the simulator first asks for one: the compiler uses
# this module's numerics (kernels' reference functions) and never simulates.
jit = _lazy_module("ipu.runtime.jit")

WRITTEN_LO, WRITTEN_HI, PROTECTED = 1, 2, 4
WRITTEN = 3
SC = SUPERVISOR_CSRS
U32 = np.uint32


def _col(index: int) -> int:
    from ipu.runtime.simulator import CSR_COLUMN

    c = int(CSR_COLUMN[index])
    if c < 0:
        raise SimError("csr", f"CSR index {index:#x} does not exist")
    return c


# ----------------------------------------------------------------------------------------------------------------
# Registers
# ----------------------------------------------------------------------------------------------------------------


def _m(sim, sel, r):
    return sim.m[sel, r]


def _set_m(sim, sel, r, vals):
    sim.m[sel, r] = vals


def _set_a(sim, sel, r, vals):
    if sim._defer is not None:
        sim._defer.append((sim.a, sel, r, np.array(vals, dtype=U32)))
    else:
        sim.a[sel, r] = vals


def _set_a64(sim, sel, r, vals):
    """Write an ARF pair (r even) from uint64 values."""
    if sim._defer is not None:
        sim._defer.append((sim.a64, sel, r // 2, np.array(vals, dtype=np.uint64)))
    else:
        sim.a64[sel, r // 2] = vals


def _a64(sim, sel, r):
    return sim.a64[sel, r // 2]


def _h4(u64):
    """uint64 [n] -> float16 [n, 4]"""
    return np.ascontiguousarray(u64).view(np.float16).reshape(-1, 4)


def _f2(u64):
    return np.ascontiguousarray(u64).view(np.float32).reshape(-1, 2)


def _u64(x):
    return np.ascontiguousarray(x).view(np.uint64).reshape(-1)


def _src2(sim, sel, ins):
    v = ins.ops[2]
    if ins.form.key.endswith("_ri"):
        return U32(int(v) & 0xFFFFFFFF)
    return sim.m[sel, v]


# ----------------------------------------------------------------------------------------------------------------
# Integer and address arithmetic
# ----------------------------------------------------------------------------------------------------------------


def _binop(fn):
    def sem(sim, g, sel, ins):
        a = sim.m[sel, ins.ops[1]]
        b = _src2(sim, sel, ins)
        _set_m(sim, sel, ins.ops[0], fn(a, b).astype(U32))

    return sem


def _i32(x):
    return np.asarray(x).astype(U32).view(np.int32)


_ALU = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "shl": lambda a, b: np.left_shift(a, np.asarray(b) & U32(31)),
    "shr": lambda a, b: np.right_shift(a, np.asarray(b) & U32(31)),
    "shrs": lambda a, b: np.right_shift(_i32(a), _i32(np.asarray(b) & U32(31))).view(U32),
    "cmpeq": lambda a, b: a == b,
    "cmpne": lambda a, b: a != b,
    "cmpslt": lambda a, b: _i32(a) < _i32(b),
    "cmpult": lambda a, b: a < b,
    "min": lambda a, b: np.minimum(_i32(a), _i32(b)),
    "max": lambda a, b: np.maximum(_i32(a), _i32(b)),
}
for _name, _fn in _ALU.items():
    globals()[f"sem_{_name}_rr"] = _binop(_fn)
    globals()[f"sem_{_name}_ri"] = _binop(_fn)


def sem_setzi_m(sim, g, sel, ins):
    _set_m(sim, sel, ins.ops[0], U32(ins.ops[1]))


sem_setzi_ml = sem_setzi_m


def sem_setzi_a(sim, g, sel, ins):
    _set_a(sim, sel, ins.ops[0], np.full(_n(sim, sel), ins.ops[1], dtype=U32))


def sem_nop(sim, g, sel, ins):
    return None


sem_fnop = sem_nop


def _n(sim, sel):
    return sel.stop - sel.start if isinstance(sel, slice) else len(sel)


def pack_triple(a0, a1, a2):
    """The triple-packed pair (low, high) of three byte addresses ([own] format, see module docstring)."""
    a0, a1, a2 = (np.asarray(a, dtype=np.int64).astype(U32) for a in (a0, a1, a2))
    w2 = a2 >> 3
    lo = (a0 & 0x1FFFFF) | ((w2 & 0x7FF) << 21)
    hi = (a1 & 0x1FFFFF) | (((w2 >> 11) & 0x7F) << 21)
    return lo, hi


def _pack_u32(a0, a1, a2):
    w2 = a2 >> 3
    return (a0 & 0x1FFFFF) | ((w2 & 0x7FF) << 21), (a1 & 0x1FFFFF) | (((w2 >> 11) & 0x7F) << 21)


def unpack_triple(lo, hi):
    """-> three byte addresses (uint32) of a triple-packed pair."""
    lo = np.asarray(lo, dtype=U32)
    hi = np.asarray(hi, dtype=U32)
    return lo & 0x1FFFFF, hi & 0x1FFFFF, ((lo >> 21) | (((hi >> 21) & 0x7F) << 11)) << 3


def sem_tapack(sim, g, sel, ins):
    d, a0, a1, a2 = ins.ops
    lo, hi = pack_triple(sim.m[sel, a0], sim.m[sel, a1], sim.m[sel, a2])
    _set_m(sim, sel, d, lo)
    _set_m(sim, sel, d + 1, hi)


# ----------------------------------------------------------------------------------------------------------------
# Memory access with checks
# ----------------------------------------------------------------------------------------------------------------


def _first(mask) -> int:
    return int(np.argmax(mask))


def _words(sim, g, sel, ins, addr, size, *, store=False, interleaved=False):
    """Flat 64-bit word indices of per-context byte addresses (uint32), after the checks; marks stores written."""
    addr = np.asarray(addr, dtype=U32)
    off = addr - U32(sim.base)  # wraps: an address below SRAM becomes a huge offset
    if (off > sim.end - sim.base - size).any():
        bad = (addr < sim.base) | (off > sim.end - sim.base - size)
        i = _first(bad)
        sim.fail("bounds", f"{size}-byte access outside tile SRAM", g, ins, i, addr[i])
    if np.bitwise_and(addr, size - 1).any():
        i = _first((addr & (size - 1)) != 0)
        sim.fail("alignment", f"misaligned {size}-byte access", g, ins, i, addr[i])
    if interleaved:
        low = addr < sim.r1
        if low.any():
            i = _first(low)
            sim.fail(
                "interleave", f"'{ins.mnemonic}' needs interleaved memory (region 1)", g, ins, i, addr[i]
            )
    words = (off >> 3) * U32(sim.word_stride) + sim.ctx_word_base[sel]  # int64 (word-major SRAM)
    if store:
        st = np.take(sim.flat_state, words, mode="clip")  # indices were checked: 'clip' is just faster
        if np.bitwise_and(st, PROTECTED).any():
            i = _first((st & PROTECTED) != 0)
            sim.fail("protected", "store into code or a reserved range", g, ins, i, addr[i])
        if size >= 8:
            st |= WRITTEN
        else:
            st |= (1 << ((addr >> 2) & 1)).astype(np.uint8)
        sim.flat_state[words] = st
        if size == 16:
            sim.flat_state[words + sim.word_stride] |= WRITTEN
    elif sim.check_poison:
        st = np.take(sim.flat_state, words, mode="clip")
        if size >= 8:
            if size == 16:
                st = st & sim.flat_state[words + sim.word_stride]
            bad = np.bitwise_and(st, WRITTEN) != WRITTEN
        else:
            bad = (st & (1 << ((addr >> 2) & 1)).astype(np.uint8)) == 0
        if bad.any():
            i = _first(bad)
            sim.fail("poison", "load of memory never written since load", g, ins, i, addr[i])
    return words


def _ea(sim, sel, ins, scale):
    """Effective address of base + delta + offset*scale forms (offset: register or zimm12), 32-bit wrapping."""
    ea = sim.m[sel, ins.ops[1]] + sim.m[sel, ins.ops[2]]
    off = ins.ops[3]
    if ins.form.key.endswith(("_r", "_mr", "_ar")):
        return ea + sim.m[sel, off] * U32(scale)
    return ea + U32(off * scale)


def _step_ea(sim, sel, ins, scale):
    """EA = base + delta, then delta += stride * scale (stride: register (signed) or simm8), 32-bit wrapping."""
    dreg = ins.ops[2]
    delta = sim.m[sel, dreg]
    ea = sim.m[sel, ins.ops[1]] + delta
    stride = ins.ops[3]
    if ins.form.key.endswith(("_r", "_mr", "_ar")):
        inc = sim.m[sel, stride] * U32(scale)
    else:
        inc = U32((stride * scale) & 0xFFFFFFFF)
    _set_m(sim, sel, dreg, delta + inc)
    return ea


def _ld32(sim, g, sel, ins, addr):
    w = _words(sim, g, sel, ins, addr, 4)
    return sim.flat32[w * 2 + ((addr >> 2) & 1)]


def _st32(sim, g, sel, ins, addr, vals):
    w = _words(sim, g, sel, ins, addr, 4, store=True)
    sim.flat32[w * 2 + ((addr >> 2) & 1)] = vals


def _load_to(sim, sel, ins, vals):
    if ins.form.key.startswith(("ld32_a", "ld32step_a")):
        _set_a(sim, sel, ins.ops[0], vals)
    else:
        _set_m(sim, sel, ins.ops[0], vals)


def _store_from(sim, sel, ins):
    if ins.form.key.startswith(("st32_a", "st32step_a")):
        return sim.a[sel, ins.ops[0]]
    return sim.m[sel, ins.ops[0]]


def sem_ld32_mr(sim, g, sel, ins):
    _load_to(sim, sel, ins, _ld32(sim, g, sel, ins, _ea(sim, sel, ins, 4)))


sem_ld32_mi = sem_ld32_ar = sem_ld32_ai = sem_ld32_mr


def sem_ld32step_mr(sim, g, sel, ins):
    _load_to(sim, sel, ins, _ld32(sim, g, sel, ins, _step_ea(sim, sel, ins, 4)))


sem_ld32step_mi = sem_ld32step_ar = sem_ld32step_ai = sem_ld32step_mr


def sem_st32_mr(sim, g, sel, ins):
    _st32(sim, g, sel, ins, _ea(sim, sel, ins, 4), _store_from(sim, sel, ins))


sem_st32_mi = sem_st32_ar = sem_st32_ai = sem_st32_mr


def sem_st32step_mr(sim, g, sel, ins):
    vals = _store_from(sim, sel, ins).copy()
    _st32(sim, g, sel, ins, _step_ea(sim, sel, ins, 4), vals)


sem_st32step_mi = sem_st32step_ar = sem_st32step_ai = sem_st32step_mr


def sem_ld64_r(sim, g, sel, ins):
    w = _words(sim, g, sel, ins, _ea(sim, sel, ins, 8), 8)
    _set_a64(sim, sel, ins.ops[0], sim.flat64[w])


sem_ld64_i = sem_ld64_r


def sem_ld64step_r(sim, g, sel, ins):
    w = _words(sim, g, sel, ins, _step_ea(sim, sel, ins, 8), 8)
    _set_a64(sim, sel, ins.ops[0], sim.flat64[w])


sem_ld64step_i = sem_ld64step_r


def sem_ld128_r(sim, g, sel, ins):
    w = _words(sim, g, sel, ins, _ea(sim, sel, ins, 16), 16, interleaved=True)
    _set_a64(sim, sel, ins.ops[0], sim.flat64[w])
    _set_a64(sim, sel, ins.ops[0] + 2, sim.flat64[w + sim.word_stride])


sem_ld128_i = sem_ld128_r


def sem_st64_r(sim, g, sel, ins):
    vals = _a64(sim, sel, ins.ops[0])
    w = _words(sim, g, sel, ins, _ea(sim, sel, ins, 8), 8, store=True)
    sim.flat64[w] = vals


sem_st64_i = sem_st64_r


def sem_st64step_r(sim, g, sel, ins):
    vals = _a64(sim, sel, ins.ops[0])
    w = _words(sim, g, sel, ins, _step_ea(sim, sel, ins, 8), 8, store=True)
    sim.flat64[w] = vals


sem_st64step_i = sem_st64step_r


# --- pace forms -------------------------------------------------------------------------------------------------


def _stride_inc(sim, sel, stride_reg, selector):
    """Increment in bytes (uint32, wrapping) for a 2-bit selector: 0 -> one atom, 1..3 -> stride field 0..2
    (signed 10-bit atom counts)."""
    if selector == 0:
        return U32(8)
    f = (sim.m[sel, stride_reg] >> U32(10 * (selector - 1))) & U32(0x3FF)
    return (f - ((f & U32(0x200)) << U32(1))) * U32(8)


def _bank_conflict(sim, g, ins, x, y, what):
    """Two accesses of one instruction must use different banks (S7, S16 [D]; see Target.bank_of)."""
    d = x ^ y
    if not (d < 0x8000).any():
        return
    r1 = x >= sim.r1
    same_bank0 = (d < sim.target.region0_element_bytes) & ~r1
    same_bank1 = (d < sim.target.region1_element_bytes) & r1 & ((d & 8) == 0)
    clash = same_bank0 | same_bank1
    if clash.any():
        i = _first(clash)
        sim.fail("bank-conflict", f"{what} hit the same memory bank in one bundle", g, ins, i, y[i])


def _pace(sim, g, sel, ins, loads, store, sel_bits, store_src=None):
    """Shared body of the pace forms. loads: which of addr0/addr1 are loaded; store: addr2 stored from the ARF
    pair store_src (stored before the loads' registers are written, so overlapping registers read old values).

    The (up to three) accesses are checked and gathered together, as one [k, n] array: this is the simulator's
    hottest path (the AMP inner loop), and one numpy call per check instead of three matters."""
    areg = ins.operand("addr")
    if (
        sim.fast and jit.pace_kernel is not None
    ):  # the same steps compiled (runtime/jit.py), if no check fails
        nl = len(loads)
        out = np.empty((nl, len(g.idx)), np.uint64)
        s = [-1, -1, -1]
        for i, bits in sel_bits:
            s[i] = bits
        t = sim.target
        if jit.pace_kernel(
            sim.m, sim.a64, sim.flat_state, sim.flat64, sim.ctx_word_base, g.idx, areg, ins.operand("stride"),
            nl, store, (store_src or 0) // 2, s[0], s[1], s[2], sim.base, sim.end, sim.r1,
            t.region0_element_bytes, t.region1_element_bytes, sim.check_poison, sim.word_stride, out,
        ):  # fmt: skip
            return out
    acc = list(unpack_triple(sim.m[sel, areg], sim.m[sel, areg + 1]))
    used = list(loads) + ([2] if store else [])
    pairs = [(i, j) for i, j in ((0, 1), (0, 2), (1, 2)) if i in used and j in used]
    if pairs:
        # fast path: no two addresses within 32 KiB of each other -> no possible bank conflict
        near = acc[pairs[0][0]] ^ acc[pairs[0][1]]
        for i, j in pairs[1:]:
            near = np.minimum(near, acc[i] ^ acc[j])
        if near.min() < 0x8000:
            for i, j in pairs:
                _bank_conflict(sim, g, ins, acc[i], acc[j], f"addresses {i} and {j}")
    addrs = np.stack([acc[i] for i in used])  # [k, n] uint32
    off = addrs - U32(sim.base)
    if (off > sim.end - sim.base - 8).any():
        k, i = np.argwhere((addrs < sim.base) | (off > sim.end - sim.base - 8))[0]
        sim.fail("bounds", "8-byte access outside tile SRAM", g, ins, i, addrs[k, i])
    if np.bitwise_and(addrs, 7).any():
        k, i = np.argwhere(addrs & 7)[0]
        sim.fail("alignment", "misaligned 8-byte access", g, ins, i, addrs[k, i])
    words = (off >> 3) * U32(sim.word_stride) + sim.ctx_word_base[sel]  # [k, n] int64 (word-major SRAM)
    nl = len(loads)
    if store or sim.check_poison:
        st = np.take(sim.flat_state, words, mode="clip")  # indices were checked: 'clip' is just faster
        if sim.check_poison and nl:
            bad = np.bitwise_and(st[:nl], WRITTEN) != WRITTEN
            if bad.any():
                k, i = np.argwhere(bad)[0]
                sim.fail("poison", "load of memory never written since load", g, ins, i, addrs[k, i])
        if store:
            if np.bitwise_and(st[nl], PROTECTED).any():
                i = _first((st[nl] & PROTECTED) != 0)
                sim.fail("protected", "store into code or a reserved range", g, ins, i, addrs[nl, i])
            if (st[nl] & WRITTEN).min() != WRITTEN:  # skip the scatter when every word is already written
                sim.flat_state[words[nl]] = st[nl] | WRITTEN
            np.put(sim.flat64, words[nl], _a64(sim, sel, store_src), mode="clip")
    data = np.take(sim.flat64, words[:nl], mode="clip") if nl else ()
    stride = ins.operand("stride")
    for i, bits in sel_bits:
        acc[i] = acc[i] + _stride_inc(sim, sel, stride, bits)
    lo, hi = _pack_u32(*acc)
    _set_m(sim, sel, areg, lo)
    _set_m(sim, sel, areg + 1, hi)
    return data


def sem_ld2x64pace(sim, g, sel, ins):
    s = ins.operand("sel")
    d0, d1 = ins.ops[0], ins.ops[1]
    if d0 == d1:
        sim.fail("register-class", "ld2x64pace destination pairs must differ", g, ins)
    x, y = _pace(sim, g, sel, ins, (0, 1), False, ((0, s & 3), (1, (s >> 2) & 3)))
    _set_a64(sim, sel, d0, x)
    _set_a64(sim, sel, d1, y)


def sem_ld2xst64pace(sim, g, sel, ins):
    s = ins.operand("sel")
    bits = ((0, s & 3), (1, (s >> 2) & 3), (2, (s >> 4) & 3))
    x, y = _pace(sim, g, sel, ins, (0, 1), True, bits, store_src=ins.ops[1])
    _set_a64(sim, sel, ins.ops[0], x)
    _set_a64(sim, sel, ins.ops[0] + 2, y)


def sem_ldst64pace(sim, g, sel, ins):
    s = ins.operand("sel")
    (x,) = _pace(sim, g, sel, ins, (0,), True, ((0, s & 3), (2, (s >> 2) & 3)), store_src=ins.ops[1])
    _set_a64(sim, sel, ins.ops[0], x)


def sem_st64pace(sim, g, sel, ins):
    s = ins.operand("sel")
    _pace(sim, g, sel, ins, (), True, ((2, s & 3),), store_src=ins.ops[0])


# ----------------------------------------------------------------------------------------------------------------
# Control
# ----------------------------------------------------------------------------------------------------------------


def sem_br(sim, g, sel, ins):
    """Branch to a register. For the supervisor, a branch to address 0 (the initial $lr) returns to the host
    runtime and ends the context [own convention]."""
    targets = sim.m[sel, ins.ops[0]].astype(np.int64)
    if g.supervisor and (targets == 0).any():
        if not (targets == 0).all():
            sim.fail("control", "some supervisors return to the host and others do not", g, ins)
        return ("exit",)
    return ("branch", targets)


def sem_bri(sim, g, sel, ins):
    return ("branch", np.full(len(g.idx), int(ins.ops[0]) * 4, dtype=np.int64))


def _cond_branch(taken, g, ins, target_word, size=4):
    return ("branch", np.where(taken, int(target_word) * 4, g.pc + size).astype(np.int64))


def sem_brz(sim, g, sel, ins):
    return _cond_branch(sim.m[sel, ins.ops[0]] == 0, g, ins, ins.ops[1])


def sem_brnz(sim, g, sel, ins):
    return _cond_branch(sim.m[sel, ins.ops[0]] != 0, g, ins, ins.ops[1])


def sem_brnzdec(sim, g, sel, ins):
    v = sim.m[sel, ins.ops[0]]
    taken = v != 0
    _set_m(sim, sel, ins.ops[0], (v - taken.astype(U32)).astype(U32))
    return _cond_branch(taken, g, ins, ins.ops[1])


def sem_call(sim, g, sel, ins):
    _set_m(sim, sel, ins.ops[0], U32(g.pc + 4))
    return ("branch", np.full(len(g.idx), int(ins.ops[1]) * 4, dtype=np.int64))


def sem_exitz(sim, g, sel, ins):
    return ("exit",)


sem_exitnz = sem_exitz


def sem_rpt_r(sim, g, sel, ins):
    count = ins.ops[0]
    counts = sim.m[sel, count].astype(np.int64) if ins.form.key == "rpt_r" else np.full(len(g.idx), count)
    if (counts >= 1 << sim.target.repeat_count_bits).any():
        i = _first(counts >= 1 << sim.target.repeat_count_bits)
        sim.fail("rpt", f"repeat count {counts[i]} does not fit $REPEAT_COUNT (16 bits)", g, ins, i)
    unit = sim._units[(g.pc - sim.program.base) >> 2][0]
    start = g.pc + unit.size
    end = start + (int(ins.ops[1]) + 1) * 8
    _check_rpt_body(sim, g, ins, start, end)
    return ("rpt", counts, start, end)


sem_rpt_i = sem_rpt_r


def _check_rpt_body(sim, g, ins, start, end):
    cache = sim.__dict__.setdefault("_rpt_checked", set())
    if (start, end) in cache:
        return
    base = sim.program.base
    a = start
    while a < end:
        k = (a - base) >> 2
        unit = sim._units[k] if 0 <= k < len(sim._units) else None
        if unit is None:
            sim.fail("rpt", f"rpt body runs past the code (no instruction at {a:#x})", g, ins)
        u = unit[0]
        if len(u.instrs) != 2:
            sim.fail("rpt", f"rpt body holds a solo instruction at {a:#x}: '{u.text()}'", g, ins)
        for i in u.instrs:
            if not i.form.in_rpt_body_ok:
                raise SimError(
                    "rpt",
                    f"illegal {i.form.category} instruction '{i.mnemonic}' inside an rpt body",
                    tile=int(sim.ctx_tile[g.idx[0]]),
                    context=sim.context_name(int(g.idx[0])),
                    pc=a,
                    instr=u.text(),
                )
        a += u.size
    cache.add((start, end))


# ----------------------------------------------------------------------------------------------------------------
# System: workers, sync, CSRs, AMP weights, exchange
# ----------------------------------------------------------------------------------------------------------------


def _start_workers(sim, g, ins, sup_ctx, workers, entry, vbase):
    """Start worker contexts `workers` (one per element of sup_ctx) at `entry` with vertex base `vbase`."""
    from ipu.runtime.simulator import Group

    r0, r1 = sim.target.region0
    bad = (entry % 4 != 0) | (entry < r0) | (entry >= r1)
    if bad.any():
        i = _first(bad)
        sim.fail("fetch", f"worker entry {int(entry[i]):#x} is not an aligned executable address", g, ins, i)
    sim.active[workers] = True
    sim.m[workers, M_VERTEX_BASE] = vbase.astype(U32)
    wk = workers % sim.W
    # $mworker_base = the supervisor's $WORKERn_BASE for worker slot n
    wb_all = np.stack([sim.csr[sup_ctx, _col(SC[f"WORKER{k}_BASE"])] for k in range(sim.W)], axis=1)
    sim.m[workers, M_WORKER_BASE] = wb_all[np.arange(len(workers)), wk]
    sim.csr[workers, _col(WC["WSR"])] = wk.astype(U32)
    sim.csr[workers, _col(WC["VERTEX_BASE"])] = vbase.astype(U32)
    sim.csr[workers, _col(WC["FP_CTL"])] = sim.csr[sup_ctx, _col(SC["FP_ICTL"])]  # S2 $FP_CTL note
    sim.cycles[workers] = sim.cycles[sup_ctx]
    order = np.argsort(workers)
    workers, entry = workers[order], entry[order]
    for e in np.unique(entry):
        sim._spawned.append(Group(int(e), workers[entry == e], False))


def sem_run(sim, g, sel, ins):
    sup = g.idx
    tiles = sim.ctx_tile[sup]
    busy = sim.active[: sim.NW].reshape(sim.T, sim.W)[tiles]
    if busy.all(axis=1).any():
        i = _first(busy.all(axis=1))
        sim.fail("run", "run with no free worker context", g, ins, i)
    free = np.argmax(~busy, axis=1)
    workers = tiles * sim.W + free
    entry = sim.m[sel, ins.ops[0]].astype(np.int64)
    vbase = sim.m[sel, ins.ops[1]].astype(np.int64) + ins.ops[2] * 4 + sim.base
    _start_workers(sim, g, ins, sup, workers, entry, vbase)


def sem_runall(sim, g, sel, ins):
    sup = g.idx
    tiles = sim.ctx_tile[sup]
    busy = sim.active[: sim.NW].reshape(sim.T, sim.W)[tiles].any(axis=1)
    if busy.any():
        i = _first(busy)
        sim.fail("run", "runall while workers are still active", g, ins, i)
    W = sim.W
    workers = (tiles[:, None] * W + np.arange(W)[None, :]).reshape(-1)
    sup_rep = np.repeat(sup, W)
    entry = np.repeat(sim.m[sel, ins.ops[0]].astype(np.int64), W)
    vb0 = sim.m[sel, ins.ops[1]].astype(np.int64) + sim.base
    vbase = (vb0[:, None] + np.arange(W)[None, :] * ins.ops[2] * 4).reshape(-1)
    _start_workers(sim, g, ins, sup_rep, workers, entry, vbase)


def sem_sync(sim, g, sel, ins):
    zone = int(ins.ops[0])
    if zone not in (0, 2, 3):
        sim.fail("sync", f"sync zone {zone} is not simulated (only RECV=0, LOCAL=2 and INTERNAL=3)", g, ins)
    sim._sync_pc[g.idx] = g.pc
    return ("wait", zone)


_READ_ONLY = {("s", SC["TILE_ID"]), ("w", WC["WSR"])}


def sem_get(sim, g, sel, ins):
    d, c = ins.ops
    if c == WC["FP_CLR"]:
        _set_m(sim, sel, d, U32(0))
        return
    _set_m(sim, sel, d, sim.csr[sel, _col(c)])


def sem_uget(sim, g, sel, ins):
    d, c = ins.ops
    vals = np.zeros(len(g.idx), U32) if c == WC["FP_CLR"] else sim.csr[sel, _col(c)].copy()
    _set_a(sim, sel, d, vals)


def _csr_write(sim, g, sel, ins, c, vals):
    space = "s" if g.supervisor else "w"
    if (space, c) in _READ_ONLY:
        sim.fail("csr", f"CSR {c:#x} is read-only", g, ins)
    if not g.supervisor and c == WC["FP_CLR"]:
        zero = (np.broadcast_to(vals, (len(g.idx),)) & FP_CLR_ZAACC) != 0
        rows = sel if zero.all() else g.idx[zero]
        for arr in (sim.acc_cur, sim.amp_next_raw, sim.amp_done_raw, sim.amp_xraw):
            arr[rows] = 0
        sim.amp_kind[rows] = 0
        return
    if g.supervisor and c in (SC["FP_INFMT"], SC["FP_ISCL"]):
        amp_flush(sim, _tile_workers(sim, sel))  # this tile's pending FP8 products use the old formats/scale
    if g.supervisor and c in _X_SETUP:
        _exchange_setup(
            sim, g, sel, c, vals
        )  # exchange in time: receive set-ups are recorded with their clock
    sim.csr[sel, _col(c)] = vals


def sem_put(sim, g, sel, ins):
    c, s = ins.ops
    _csr_write(sim, g, sel, ins, c, sim.m[sel, s])


def sem_uput(sim, g, sel, ins):
    c, s = ins.ops
    _csr_write(sim, g, sel, ins, c, sim.a[sel, s])


def _tile_workers(sim, sel) -> np.ndarray:
    """The worker contexts of the tiles of supervisor contexts `sel`. A tile's weights or FP8 settings change
    only its own workers' pending products: flushing every tile's would split other tiles' in-progress sums at a
    point that depends on how far they have run, so their rounding would depend on the timing."""
    tiles = np.unique(sim.ctx_tile[sel])
    return (tiles[:, None] * sim.W + np.arange(sim.W)).reshape(-1)


def _putcs(sim, g, sel, ins, nbytes):
    col = _col(SC["CCCSLOAD"])
    addr = sim.csr[sel, col].astype(np.int64)
    idx = int(ins.ops[0])
    if idx + nbytes // 8 > 64:
        sim.fail("amp", f"CWEI slot {idx} + {nbytes // 8} is beyond the 64 slots", g, ins)
    w = _words(sim, g, sel, ins, addr, nbytes, interleaved=nbytes == 16)
    amp_flush(sim, _tile_workers(sim, sel))  # this tile's pending AMP products use the old weights
    tiles = sim.ctx_tile[sel]
    sim.set_cwei(tiles, idx, sim.flat64[w].view(np.uint8).reshape(-1, 8))
    if nbytes == 16:
        sim.set_cwei(tiles, idx + 1, sim.flat64[w + sim.word_stride].view(np.uint8).reshape(-1, 8))
    sim.csr[sel, col] = (addr + nbytes).astype(U32)


def putcs_run(sim, g, sel, ins, count, nbytes=8) -> int:
    """`count` ld64putcs (nbytes 8) / ld128putcs (16) to slots idx, idx + nbytes / 8, ... as one step
    (`Simulator._step`): the same bytes, slots and $CCCSLOAD. Returns count, or 0 when any check would fail (the
    caller then runs them one at a time, which reports the failing one exactly)."""
    col = _col(SC["CCCSLOAD"])
    addr = sim.csr[sel, col].astype(np.int64)
    idx = int(ins.ops[0])
    span = nbytes * count
    slots = span // 8
    off = addr - sim.base
    if (
        idx + slots > 64
        or (off < 0).any()
        or (off > sim.end - sim.base - span).any()
        or (addr % nbytes).any()
    ):
        return 0
    if nbytes == 16 and (addr < sim.r1).any():
        return 0  # ld128putcs outside interleaved memory: the single step reports it
    words = (off >> 3)[:, None] + np.arange(slots)[None, :]
    words = words * sim.word_stride + sim.ctx_word_base[sel][:, None]
    if sim.check_poison and (np.take(sim.flat_state, words, mode="clip") & WRITTEN != WRITTEN).any():
        return 0
    amp_flush(sim, _tile_workers(sim, sel))  # this tile's pending AMP products use the old weights
    sim.set_cwei(sim.ctx_tile[sel], idx, sim.flat64[words].view(np.uint8).reshape(len(words), -1))
    sim.csr[sel, col] = (addr + span).astype(U32)
    return count


def sem_ld64putcs(sim, g, sel, ins):
    _putcs(sim, g, sel, ins, 8)


def sem_ld128putcs(sim, g, sel, ins):
    _putcs(sim, g, sel, ins, 16)


def _send_block(sim, sel, addr, n):
    """Fast path: the n atoms of every context's send as one gather [contexts, n], or None when any check of
    `_words` would fail (sem_send then reads them one at a time, which reports the failure exactly)."""
    a = (addr[:, None] + 8 * np.arange(n)[None, :]).astype(U32)  # 32-bit wrapping, as _words sees them
    off = a - U32(sim.base)
    if (off > sim.end - sim.base - 8).any() or np.bitwise_and(a, 7).any():
        return None
    words = (off >> 3) * U32(sim.word_stride) + sim.ctx_word_base[sel][:, None]
    if sim.check_poison and (np.take(sim.flat_state, words, mode="clip") & WRITTEN != WRITTEN).any():
        return None
    return np.take(sim.flat64, words, mode="clip")


def sem_send(sim, g, sel, ins):
    """`send $a+=, c`: c + 1 atoms read now (at issue) and recorded with the sender's clock before the instruction;
    they depart and arrive in time (see deliver_exchange). The cost (latency + 2 cycles per atom) is unchanged."""
    areg, count = ins.ops
    n = int(count) + 1
    addr = sim.m[sel, areg].astype(np.int64)
    block = _send_block(sim, sel, addr, n) if sim.fast else None
    if block is None:
        data = []
        for k in range(n):
            w = _words(sim, g, sel, ins, addr + 8 * k, 8)
            data.append(sim.flat64[w])
        block = np.stack(data, axis=1)
    sim.xsends.append((sim.ctx_tile[sel].copy(), sim.cycles[sel].copy(), block, addr, g.pc, sim.xseq))
    sim.xseq += 1
    _set_m(sim, sel, areg, (addr + 8 * n).astype(U32))
    sim.cycles[sel] += sim.target.exchange_send_latency + n * 8 // sim.target.exchange_bytes_per_cycle


def sem_delay(sim, g, sel, ins):
    sim.cycles[sel] += int(ins.ops[0])


# --- Exchange in time -------------------------------------------------------------------------------------------
#
# Between two internal syncs (one phase) the simulator records every send (sender, clock c0 before the `send`,
# atoms, source address, PC) and every receive set-up by a supervisor: `put $INCOMING_DCOUNT, v` with v > 0 opens a
# window (tile r, clock t before the put, mux m = $INCOMING_MUX and base b = $INCOMING_BASE as they are then,
# count v); puts to $INCOMING_MUX / $INCOMING_BASE (and $INCOMING_DCOUNT with 0) are set-ups that must not switch a
# window in progress. Timing (tile cycles; A = 8 / exchange_bytes_per_cycle = 2 cycles per 8-byte atom):
#   atom k of a send departs at d_k = c0 + exchange_send_latency + A k, arrives at every tile at
#   a_k = d_k + exchange_fabric_cycles and occupies the receiver's bus during [a_k, a_k + A);
#   a window accepts the first v atoms sent by tile m (in m's send order) with a_k >= t and writes them at
#   b, b + 8, ...; its end cycle is (arrival of its last atom) + A.
# At the next internal sync's release (cycle R), or when every supervisor waits on `sync RECV` (then R is each
# tile's own last window end: no E5), the phase is resolved: memory written, $INCOMING_DCOUNT = 0, and
#   exchange-no-sender (E1)  a window got fewer than v atoms (also: a window still open at the end of a run);
#   exchange-overlap (E2)    a window opens, or a set-up is written, on a tile before its previous window's end;
#                            or tiles of one exchange bus (r // tiles_per_exchange_bus) accept atoms of different
#                            senders in overlapping cycles (target.exchange_shared_receive_bus);
#   exchange-overwrite (E4)  two windows of one tile write one address;
#   exchange-early-send (E3) a send's source bytes are written by a window of the same phase on its tile;
#   exchange-late (E5)       an accepted atom arrives after R (a_k > R);
# checked in that order (then the receive address and protected memory). Sends nobody accepts are lost; any number
# of windows may accept the same atoms (multicast). `_x_resolve_fast` (vectorised over windows and (window x send)
# segments) returns False when any check fails; `_x_resolve_reference` (loops) then reports it, so both paths raise
# the same error.

_X_MUX, _X_BASE, _X_DCOUNT = SC["INCOMING_MUX"], SC["INCOMING_BASE"], SC["INCOMING_DCOUNT"]
_X_SETUP = {_X_MUX: "$INCOMING_MUX", _X_BASE: "$INCOMING_BASE", _X_DCOUNT: "$INCOMING_DCOUNT"}


def _exchange_setup(sim, g, sel, c, vals):
    """A supervisor's put to $INCOMING_MUX / $INCOMING_BASE / $INCOMING_DCOUNT (before the CSR is written)."""
    tiles = sim.ctx_tile[sel].copy()
    t = sim.cycles[sel].copy()
    seq = sim.xseq
    sim.xseq += 1
    if c == _X_DCOUNT:
        v = np.broadcast_to(np.asarray(vals).astype(np.int64), (len(tiles),))
        opened = v > 0
        if opened.any():
            ctx = np.asarray(g.idx)[opened]
            mux = sim.csr[ctx, _col(_X_MUX)].astype(np.int64)
            base = sim.csr[ctx, _col(_X_BASE)].astype(np.int64)
            sim.xwins.append((tiles[opened], t[opened], seq, mux, base, v[opened].copy(), g.pc))
        if opened.all():
            return
        tiles, t = tiles[~opened], t[~opened]
    sim.xsets.append((tiles, t, seq, g.pc, c))


def _x_clear(sim):
    sim.xsends, sim.xwins, sim.xsets = [], [], []


def _x_timing(sim):
    t = sim.target
    return t.exchange_send_latency + t.exchange_fabric_cycles, 8 // t.exchange_bytes_per_cycle


def _x_where(sim, tile, release) -> str:
    """The phase, for messages: the PC of the sync that ends it (tile's), or none (the end of a run)."""
    if release is None:
        return "(no internal sync ends the phase)"
    return f"(the phase ending at the sync at pc {int(sim._sync_pc[sim.NW + tile]):#x})"


def _at(v, i) -> int:
    """Element i of an exchange record's field that is one value for the record (a step's) or one per tile (the
    fast path's supervisor runs, Simulator._sup_events: sequence numbers, PCs, CSRs)."""
    return int(v[i]) if isinstance(v, np.ndarray) else v


def _x_resolve_reference(sim, release):
    """The phase's exchange, one window and one send at a time (see the section comment). release: the sync's
    release cycle, or None at the end of a run (then every window is E1). Raises on the first failed check."""
    T = sim.T
    lat, A = _x_timing(sim)
    sends: dict[int, list] = {}  # sender tile -> [(seq, c0, atoms, addr, pc)] in send order
    for tiles, c0, block, addr, pc, seq in sim.xsends:
        for i in range(len(tiles)):
            sends.setdefault(int(tiles[i]), []).append((seq, int(c0[i]), block[i], int(addr[i]), pc))
    for lst in sends.values():
        lst.sort(key=lambda s: s[0])
    wins = []  # (tile, seq, t, mux, base, v, pc)
    for tiles, t, seq, mux, base, v, pc in sim.xwins:
        for i in range(len(tiles)):
            wins.append(
                (int(tiles[i]), _at(seq, i), int(t[i]), int(mux[i]), int(base[i]), int(v[i]), _at(pc, i))
            )
    wins.sort(key=lambda w: (w[0], w[1]))
    # E1: accept the atoms; per window its segments (send index, first atom, end atom) and arrival bounds
    accepted = []
    for r, _, t, m, b, v, pc in wins:
        got, segs = 0, []
        for j, (_, c0, data, _, _) in enumerate(sends.get(m, []) if m < T and release is not None else []):
            if got == v:
                break
            a0 = c0 + lat
            k0 = max(0, -((a0 - t) // A))  # first atom arriving at or after t
            if k0 >= len(data):
                continue
            k1 = min(len(data), k0 + v - got)
            segs.append((j, k0, k1, a0 + A * k0, a0 + A * k1))  # atoms [k0, k1), cycles [start, end)
            got += k1 - k0
        if got < v:
            raise SimError(
                "exchange-no-sender",
                f"a window for {v} atoms from tile {m} opened at cycle {t} (put $INCOMING_DCOUNT at pc {pc:#x}) "
                f"received {got} {_x_where(sim, r, release)}",
                tile=r, context="supervisor", pc=pc, address=b,
            )  # fmt: skip
        if b % 8 or not sim.target.in_sram(b, 8 * v):
            raise SimError(
                "exchange",
                f"bad receive address for the window opened at cycle {t} {_x_where(sim, r, release)}",
                tile=r, context="supervisor", pc=pc, address=b,
            )  # fmt: skip
        accepted.append(segs)
    # E2: on one tile, a window or set-up before the previous window's end
    events = [(w[0], w[1], w[2], k, w[6], "a window ($INCOMING_DCOUNT)") for k, w in enumerate(wins)]
    for tiles, t, seq, pc, c in sim.xsets:
        events += [
            (int(tiles[i]), _at(seq, i), int(t[i]), -1, _at(pc, i), _X_SETUP[_at(c, i)])
            for i in range(len(tiles))
        ]
    events.sort(key=lambda e: (e[0], e[1]))
    last = None  # (tile, window index)
    for r, _, t, k, pc, what in events:
        if last is not None and last[0] == r:
            pw = wins[last[1]]
            end = accepted[last[1]][-1][4]
            if t < end:
                raise SimError(
                    "exchange-overlap",
                    f"{what} written at cycle {t} (pc {pc:#x}) before the window opened at cycle {pw[2]} (pc "
                    f"{pw[6]:#x}, from tile {pw[3]}) ends at cycle {end} {_x_where(sim, r, release)}",
                    tile=r, context="supervisor", pc=pc, address=pw[4],
                )  # fmt: skip
        if k >= 0:
            last = (r, k)
    # E2: the shared receive bus
    if sim.target.exchange_shared_receive_bus:
        tpb = sim.target.tiles_per_exchange_bus
        groups: dict[int, list] = {}
        for k, segs in enumerate(accepted):
            r, m = wins[k][0], wins[k][3]
            for j, _, _, s0, s1 in segs:
                groups.setdefault(r // tpb, []).append((s0, s1, r, m, j, k))
        for segs in groups.values():
            segs.sort()
            active = []
            for s0, s1, r, m, j, k in segs:
                active = [x for x in active if x[1] > s0]
                for x in active:
                    if x[3] != m:
                        w, wx = wins[k], wins[x[5]]
                        raise SimError(
                            "exchange-overlap",
                            f"two sends arriving on one receive bus in one cycle: tile {r} receives from tile {m} "
                            f"in cycles [{s0}, {s1}) (window opened at cycle {w[2]}, pc {w[6]:#x}), tile {x[2]} "
                            f"from tile {x[3]} in cycles [{x[0]}, {x[1]}) (window opened at cycle {wx[2]}, pc "
                            f"{wx[6]:#x}) {_x_where(sim, r, release)}",
                            tile=r, context="supervisor", pc=w[6], address=w[4],
                        )  # fmt: skip
                active.append((s0, s1, r, m, j, k))
    # E4: two windows of one tile write one address
    by_tile: dict[int, list] = {}
    for k, w in enumerate(wins):
        by_tile.setdefault(w[0], []).append((w[4], w[4] + 8 * w[5], k))
    for r, lst in by_tile.items():
        lst.sort()
        for i in range(1, len(lst)):
            for j in range(i):
                if lst[j][1] > lst[i][0]:
                    w, wp = wins[lst[i][2]], wins[lst[j][2]]
                    raise SimError(
                        "exchange-overwrite",
                        f"the windows opened at cycles {wp[2]} (pc {wp[6]:#x}) and {w[2]} (pc {w[6]:#x}) both write "
                        f"address {lst[i][0]:#x} {_x_where(sim, r, release)}",
                        tile=r, context="supervisor", pc=w[6], address=lst[i][0],
                    )  # fmt: skip
    # E3: a send of data that a window of the phase writes on the sending tile
    for s, lst in sends.items():
        for _, c0, data, addr, pc in lst:
            for b0, b1, k in by_tile.get(s, []):
                lo, hi = max(addr, b0), min(addr + 8 * len(data), b1)
                if lo < hi:
                    w = wins[k]
                    raise SimError(
                        "exchange-early-send",
                        f"a send at cycle {c0} (pc {pc:#x}) reads address {lo:#x}, which the window opened at cycle "
                        f"{w[2]} (pc {w[6]:#x}) receives in the same phase {_x_where(sim, s, release)}",
                        tile=s, context="supervisor", pc=pc, address=lo,
                    )  # fmt: skip
    # E5: an atom arriving after the release
    for k, segs in enumerate(accepted):
        w = wins[k]
        arrive = segs[-1][4] - A  # the last atom's arrival
        if arrive > release:
            raise SimError(
                "exchange-late",
                f"the window opened at cycle {w[2]} (pc {w[6]:#x}) receives its last atom at cycle {arrive}, after "
                f"the sync's release at cycle {release} {_x_where(sim, w[0], release)}",
                tile=w[0], context="supervisor", pc=w[6], address=w[4] + 8 * (w[5] - 1),
            )  # fmt: skip
    # the writes
    for k, segs in enumerate(accepted):
        r, _, t, m, b, v, pc = wins[k]
        sim.x_tile_end[r] = max(int(sim.x_tile_end[r]), segs[-1][4])
        atoms = np.concatenate([sends[m][j][2][k0:k1] for j, k0, k1, _, _ in segs])
        w0 = (b - sim.base) // 8  # word-major SRAM: tile r's words are column r
        if (sim.wstate[w0 : w0 + v, r] & PROTECTED).any():
            raise SimError(
                "protected",
                "receive into code or a reserved range",
                tile=r,
                context="supervisor",
                pc=pc,
                address=b,
            )
        sim.mem64[w0 : w0 + v, r] = atoms
        sim.wstate[w0 : w0 + v, r] |= WRITTEN
        sim.csr[sim.NW + r, _col(_X_DCOUNT)] = 0


def _cat(parts, dtype=np.int64):
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def _x_resolve_fast(sim, release) -> bool:
    """_x_resolve_reference as array operations over windows, sends and (window x send) segments. Returns False,
    having changed nothing, when any check would fail."""
    if not sim.xwins:
        return True
    T = sim.T
    lat, A = _x_timing(sim)
    # windows, in the order they were opened
    wt = _cat([w[0] for w in sim.xwins])
    wtime = _cat([w[1] for w in sim.xwins])
    wseq = _cat([np.full(len(w[0]), w[2]) for w in sim.xwins])
    wmux = _cat([w[3] for w in sim.xwins])
    wbase = _cat([w[4] for w in sim.xwins])
    wv = _cat([w[5] for w in sim.xwins])
    nw = len(wt)
    # sends, by sender and in send order, and their atoms in that order
    if not sim.xsends:
        return False  # every window is E1
    st = _cat([s[0] for s in sim.xsends])
    sc0 = _cat([s[1] for s in sim.xsends])
    sn = _cat([np.full(len(s[0]), s[2].shape[1]) for s in sim.xsends])
    saddr = _cat([s[3] for s in sim.xsends])
    sseq = _cat([np.full(len(s[0]), s[5]) for s in sim.xsends])
    raw = _cat([s[2].reshape(-1) for s in sim.xsends], np.uint64)
    raw_first = np.cumsum(sn) - sn
    order = np.lexsort((sseq, st))
    st, sc0, sn, saddr, raw_first = st[order], sc0[order], sn[order], saddr[order], raw_first[order]
    ns = len(st)
    F = np.cumsum(sn) - sn  # first atom of each send in the sender-ordered atoms
    total = int(sn.sum())
    atoms = raw[np.repeat(raw_first - F, sn) + np.arange(total)]
    a0 = sc0 + lat
    span_lo = min(int(a0.min()), int(wtime.min()))
    BIG = np.int64(1) << 40
    if int((a0 + A * sn).max()) - span_lo >= BIG or int(wtime.max()) - span_lo >= BIG or T >= 1 << 22:
        return False
    key = st * BIG + (a0 + A * (sn - 1) - span_lo)  # sorted: by sender, then last arrival
    atom_end = np.cumsum(np.bincount(st, weights=sn, minlength=T).astype(np.int64))  # per sender
    known = wmux < T
    m = np.where(known, wmux, 0)
    q = np.searchsorted(key, m * BIG + (wtime - span_lo), "left")  # the first send with an atom at/after t
    qq = np.minimum(q, ns - 1)
    has = known & (q < ns) & (st[qq] == m)
    k0 = np.maximum(0, -((a0[qq] - wtime) // A))
    g0 = F[qq] + k0
    avail = np.where(has, atom_end[m] - g0, 0)
    if (avail < wv).any():  # E1
        return False
    if (wbase % 8).any() or (wbase < sim.base).any() or (wbase + 8 * wv > sim.end).any():
        return False
    glast = g0 + wv - 1
    slast = np.searchsorted(F, glast, "right") - 1
    wend = a0[slast] + A * (glast - F[slast]) + A
    # E2 on one tile: each window or set-up against the window opened last before it on its tile
    et = [wt] + [s[0].astype(np.int64) for s in sim.xsets]
    etime = [wtime] + [s[1] for s in sim.xsets]
    eseq = [wseq] + [np.full(len(s[0]), s[2]) for s in sim.xsets]
    ewin = [np.arange(nw)] + [np.full(len(s[0]), -1) for s in sim.xsets]
    et, etime, eseq, ewin = _cat(et), _cat(etime), _cat(eseq), _cat(ewin)
    o = np.lexsort((eseq, et))
    et, etime, ewin = et[o], etime[o], ewin[o]
    mark = np.where(ewin >= 0, np.arange(len(et)), -1)
    prev = np.concatenate([[-1], np.maximum.accumulate(mark)[:-1]])
    pc = np.maximum(prev, 0)
    if ((prev >= 0) & (et[pc] == et) & (etime < wend[ewin[pc]])).any():
        return False
    # E2 on the shared bus: the (window x send) segments' cycles, merged per (bus, sender), must not overlap
    if sim.target.exchange_shared_receive_bus:
        nseg = slast - qq + 1
        seg_w = np.repeat(np.arange(nw), nseg)
        seg_s = np.repeat(qq, nseg) + (np.arange(int(nseg.sum())) - np.repeat(np.cumsum(nseg) - nseg, nseg))
        lo = np.maximum(g0[seg_w], F[seg_s]) - F[seg_s]
        hi = np.minimum(glast[seg_w], F[seg_s] + sn[seg_s] - 1) - F[seg_s]
        s0 = a0[seg_s] + A * lo - span_lo
        s1 = a0[seg_s] + A * hi + A - span_lo
        bus = wt[seg_w] // sim.target.tiles_per_exchange_bus
        _, pair = np.unique(bus * T + st[seg_s], return_inverse=True)
        o = np.lexsort((s0, pair))
        pair, s0, s1, bus = pair[o], s0[o], s1[o], bus[o]
        ce = np.maximum.accumulate(pair * BIG + s1)
        new = np.flatnonzero(pair * BIG + s0 >= np.concatenate([[-1], ce[:-1]]))
        m0, m1, mbus = s0[new], np.maximum.reduceat(s1, new), bus[new]
        o = np.lexsort((m0, mbus))
        m0, m1, mbus = m0[o], m1[o], mbus[o]
        ce = np.maximum.accumulate(mbus * BIG + m1)
        if len(m0) > 1 and (mbus[1:] * BIG + m0[1:] < ce[:-1]).any():
            return False
    # E4: the windows of one tile write disjoint ranges
    BA = np.int64(1) << 32
    o = np.lexsort((wbase, wt))
    ot, ob, oe = wt[o], wbase[o], wbase[o] + 8 * wv[o]
    ce = np.maximum.accumulate(ot * BA + oe)
    if nw > 1 and (ot[1:] * BA + ob[1:] < ce[:-1]).any():
        return False
    # E3: no send reads what a window of its tile writes (windows disjoint: the last one starting below the send's
    # end is the only candidate)
    i = np.searchsorted(ot * BA + ob, st * BA + saddr + 8 * sn, "left") - 1
    ii = np.maximum(i, 0)
    if ((i >= 0) & (ot[ii] == st) & (oe[ii] > saddr)).any():
        return False
    # E5
    if (wend - A > release).any():
        return False
    # the writes
    np.maximum.at(sim.x_tile_end, wt, wend)
    w0 = (wbase - sim.base) // 8
    if jit.deliver is not None:  # compiled (runtime/jit.py): False if a word is protected
        if not jit.deliver(sim.mem64, sim.wstate, atoms, g0, wt, wv, w0):
            return False
    else:
        within = np.arange(int(wv.sum())) - np.repeat(np.cumsum(wv) - wv, wv)
        rows = np.repeat(w0, wv) + within
        cols = np.repeat(wt, wv)
        stt = sim.wstate[rows, cols]
        if (stt & PROTECTED).any():
            return False
        sim.mem64[rows, cols] = atoms[np.repeat(g0, wv) + within]
        sim.wstate[rows, cols] = stt | WRITTEN
    sim.csr[sim.NW + np.unique(wt), _col(_X_DCOUNT)] = 0
    return True


def deliver_exchange(sim, tiles, recv: bool = False) -> np.ndarray:
    """At an internal sync's release (the clocks of `tiles` already set to the release cycle), or when every
    supervisor waits on a RECV sync (recv: each tile's own receive ends it, no exchange-late): the phase since the
    previous resolution, in time (see the section comment): windows filled, checks, $INCOMING_DCOUNT = 0. Returns
    each tile's last window end (the cycle after its last atom arrived; -1: no window)."""
    tiles = np.asarray(tiles)
    sim.x_tile_end = np.full(sim.T, -1, np.int64)
    if sim.xwins or sim.xsends or sim.xsets:
        release = (1 << 62) if recv else (int(sim.cycles[sim.NW + tiles].max()) if len(tiles) else 0)
        if not (sim.fast and _x_resolve_fast(sim, release)):
            _x_resolve_reference(sim, release)
    _x_clear(sim)
    return sim.x_tile_end


def exchange_end_of_run(sim):
    """At the end of a run: a window no internal sync resolved is E1; unreceived sends are lost."""
    if sim.xwins:
        _x_resolve_reference(sim, None)
    _x_clear(sim)


# ----------------------------------------------------------------------------------------------------------------
# Floating point (AUX)
# ----------------------------------------------------------------------------------------------------------------

_FP = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


_F16V4_OPS = {np.add: 0, np.subtract: 1, np.multiply: 2}
_F8_DEC64 = {f: fp8.DECODE[f].astype(np.float64) for f in (fp8.F143, fp8.F152)}  # FP8 inputs, exactly


def _f16v4_fast(fn, x, y):
    """Fast path: fn (add, subtract, multiply) of the halves of ARF pairs x and y (uint64 [n]) as numpy's float16
    ufuncs compute it: each half to float32 (exact), the float32 operation, rounded to half (nearest even); None
    when an input is a NaN (which NaN numpy returns is left to numpy). Checked against numpy's float16
    arithmetic on every half against a spread of second operands (tests/unit/test_sim_fast_path.py). Compiled
    (jit.f16v4_arith) unless a NaN is involved."""
    if jit.f16v4_arith is not None:
        out = np.empty(len(x), np.uint64)
        r32 = np.empty(4 * len(x), np.float32)
        if jit.f16v4_arith(_F16V4_OPS[fn], x, y, F16_TO_F32, r32, out):
            return out
    a = np.ascontiguousarray(x).view(np.uint16)
    b = np.ascontiguousarray(y).view(np.uint16)
    if (a & 0x7FFF).max(initial=0) > 0x7C00 or (b & 0x7FFF).max(initial=0) > 0x7C00:
        return None
    with np.errstate(all="ignore"):
        r = fn(F16_TO_F32[a], F16_TO_F32[b])
    return f32_to_f16_bits(r).view(np.uint64)


def _mk_f16v4(fn):
    fast = fn in (np.add, np.subtract, np.multiply)

    def sem(sim, g, sel, ins):
        d, s0, s1 = ins.ops
        if fast and sim.fast:
            r = _f16v4_fast(fn, _a64(sim, sel, s0), _a64(sim, sel, s1))
            if r is not None:
                _set_a64(sim, sel, d, r)
                return
        with np.errstate(all="ignore"):
            r = fn(_h4(_a64(sim, sel, s0)), _h4(_a64(sim, sel, s1)))
        _set_a64(sim, sel, d, _u64(r.astype(np.float16)))

    return sem


def _mk_f32v2(fn):
    def sem(sim, g, sel, ins):
        d, s0, s1 = ins.ops
        with np.errstate(all="ignore"):
            r = fn(_f2(_a64(sim, sel, s0)), _f2(_a64(sim, sel, s1)))
        _set_a64(sim, sel, d, _u64(r.astype(np.float32)))

    return sem


def _mk_f32(fn):
    def sem(sim, g, sel, ins):
        d, s0, s1 = ins.ops
        with np.errstate(all="ignore"):
            r = fn(sim.a[sel, s0].view(np.float32), sim.a[sel, s1].view(np.float32))
        _set_a(sim, sel, d, np.asarray(r, dtype=np.float32).view(U32))

    return sem


for _name, _fn in _FP.items():
    globals()[f"sem_f16v4{_name}"] = _mk_f16v4(_fn)
    globals()[f"sem_f32v2{_name}"] = _mk_f32v2(_fn)
    globals()[f"sem_f32{_name}"] = _mk_f32(_fn)


# Transcendentals: Graphcore does not publish their precision. Ours [own assumption]: the exact value computed in
# float64 and rounded once to the destination type (correctly rounded up to rare double-rounding ties). Kernel
# semantics (ipu.backend.kernels) call these same functions so that they match the simulator bit for bit.


def exp_f32(x):
    with np.errstate(all="ignore"):
        return np.exp(np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)


def rsqrt_f32(x):
    """1/sqrt(x): +0 -> +inf, negative -> NaN, +inf -> 0."""
    with np.errstate(all="ignore"):
        return (1.0 / np.sqrt(np.asarray(x, np.float32).astype(np.float64))).astype(np.float32)


def recip_f32(x):
    with np.errstate(all="ignore"):
        return (1.0 / np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)


def tanh_f16(x):
    with np.errstate(all="ignore"):
        return np.tanh(np.asarray(x, np.float16).astype(np.float64)).astype(np.float16)


def exp_f16(x):
    with np.errstate(all="ignore"):
        return np.exp(np.asarray(x, np.float16).astype(np.float64)).astype(np.float16)


def _mk_unary_f32(fn):
    def sem(sim, g, sel, ins):
        _set_a(sim, sel, ins.ops[0], fn(sim.a[sel, ins.ops[1]].view(np.float32)).view(U32))

    return sem


sem_f32exp = _mk_unary_f32(exp_f32)
sem_f32oorx = _mk_unary_f32(rsqrt_f32)
sem_f32oox = _mk_unary_f32(recip_f32)


_HALF_TABLES: dict = {}


def half_table(fn) -> np.ndarray:
    """fn (tanh_f16, exp_f16) of every half, as the half bits of the results indexed by the input's bits: the fast
    path looks a group's results up instead of computing them (the same function of each value;
    tests/unit/test_sim_fast_path.py compares the lookups with fn on every half)."""
    t = _HALF_TABLES.get(fn)
    if t is None:
        t = _HALF_TABLES[fn] = fn(np.arange(1 << 16, dtype=np.uint16).view(np.float16)).view(np.uint16)
    return t


def _unary_f16(sim, sel, ins, fn):
    h = np.ascontiguousarray(sim.a[sel, ins.ops[1]]).view(np.float16)
    if sim.fast:
        r = half_table(fn)[h.view(np.uint16)]
    else:
        r = np.ascontiguousarray(fn(h))
    _set_a(sim, sel, ins.ops[0], r.view(U32).reshape(-1))


def sem_f16v2tanh(sim, g, sel, ins):
    _unary_f16(sim, sel, ins, tanh_f16)


def sem_f16v2exp(sim, g, sel, ins):
    _unary_f16(sim, sel, ins, exp_f16)


# Permutations (S2 "sort": de-interleave). sort4x16lo/hi: halves 0 (lo) or 1 (hi) of s0 and s1 -> d = (s0.h, s1.h).
# sort8x8lo/hi: bytes 0, 2 (lo) or 1, 3 (hi) of s0 then of s1 -> d's bytes 0..3.


def sort4x16(s0, s1, hi: int):
    shift = U32(16 * hi)
    return ((s0 >> shift) & U32(0xFFFF)) | (((s1 >> shift) & U32(0xFFFF)) << U32(16))


def sort8x8(s0, s1, hi: int):
    b = [(s >> U32(8 * (i + hi))) & U32(0xFF) for s in (s0, s1) for i in (0, 2)]
    return b[0] | b[1] << U32(8) | b[2] << U32(16) | b[3] << U32(24)


def _mk_sort(fn, hi, regfile):
    def sem(sim, g, sel, ins):
        d, s0, s1 = ins.ops
        if regfile == "a":
            _set_a(sim, sel, d, fn(sim.a[sel, s0], sim.a[sel, s1], hi))
        else:
            _set_m(sim, sel, d, fn(sim.m[sel, s0], sim.m[sel, s1], hi))

    return sem


sem_sort4x16lo = _mk_sort(sort4x16, 0, "a")
sem_sort4x16hi = _mk_sort(sort4x16, 1, "a")
sem_sort8x8lo = _mk_sort(sort8x8, 0, "m")
sem_sort8x8hi = _mk_sort(sort8x8, 1, "m")


def sem_f32tof16(sim, g, sel, ins):
    with np.errstate(all="ignore"):
        h = sim.a[sel, ins.ops[1]].view(np.float32).astype(np.float16)
    _set_a(sim, sel, ins.ops[0], h.view(np.uint16).astype(U32))


def sem_f16tof32(sim, g, sel, ins):
    h = (sim.a[sel, ins.ops[1]] & 0xFFFF).astype(np.uint16).view(np.float16)
    _set_a(sim, sel, ins.ops[0], h.astype(np.float32).view(U32))


def sem_f32v2tof16(sim, g, sel, ins):
    with np.errstate(all="ignore"):
        h = _f2(_a64(sim, sel, ins.ops[1])).astype(np.float16)
    _set_a(sim, sel, ins.ops[0], np.ascontiguousarray(h).view(U32).reshape(-1))


def sem_f16v2tof32(sim, g, sel, ins):
    h = np.ascontiguousarray(sim.a[sel, ins.ops[1]]).view(np.float16).reshape(-1, 2)
    _set_a64(sim, sel, ins.ops[0], _u64(h.astype(np.float32)))


def _fp8_csrs(sim, sel):
    """(format, scale, nan_on_overflow) for the contexts; one setting per group is supported."""
    fmt = sim.csr[sel, _col(WC["FP_NFMT"])] & 1
    scl = sim.csr[sel, _col(WC["FP_SCL"])]
    ctl = sim.csr[sel, _col(WC["FP_CTL"])] & FP_CTL_NANOO
    return fmt, scl, ctl


def _per_setting(sim, g, sel, ins, fn):
    """Apply fn(rows_mask, fmt, scale, nanoo) for each distinct FP8 CSR setting among the group's contexts."""
    fmt, scl, ctl = _fp8_csrs(sim, sel)
    key = fmt.astype(np.int64) | (scl.astype(np.int64) & 0x3F) << 1 | (ctl != 0).astype(np.int64) << 8
    for k in np.unique(key):
        mask = key == k
        fn(mask, int(k) & 1, fp8.scale_from_csr((int(k) >> 1) & 0x3F), bool(int(k) >> 8))


_F8_TO_F16: dict[tuple[int, int], np.ndarray] = {}


def _f8_table(fmt: int, scale: int) -> np.ndarray:
    """Fast path: fp8 bits -> the float16 that _fp8_to_f16 computes, for all 256 bit patterns (the same
    operations on every possible input, so the lookup equals the conversion)."""
    t = _F8_TO_F16.get((fmt, scale))
    if t is None:
        with np.errstate(all="ignore"):
            t = fp8.decode(np.arange(256, dtype=np.uint8), fmt, scale).astype(np.float16)
        t = _F8_TO_F16[(fmt, scale)] = t
    return t


def _fp8_to_f16(sim, g, sel, ins, nbytes):
    raw = np.ascontiguousarray(sim.a[sel, ins.ops[1]]).view(np.uint8).reshape(-1, 4)[:, :nbytes]
    if sim.fast:
        fmt, scl, _ = _fp8_csrs(sim, sel)
        key = fmt.astype(np.int64) | (scl.astype(np.int64) & 0x3F) << 1
        if (key == key[0]).all():  # one setting for the whole group (the usual case)
            return _f8_table(int(fmt[0]), fp8.scale_from_csr(int(scl[0]) & 0x3F))[raw]
    out = np.zeros((len(g.idx), nbytes), dtype=np.float16)

    def conv(mask, fmt, scale, nanoo):
        with np.errstate(all="ignore"):
            out[mask] = fp8.decode(raw[mask], fmt, scale).astype(np.float16)

    _per_setting(sim, g, sel, ins, conv)
    return out


def sem_f8v2tof16(sim, g, sel, ins):
    h = _fp8_to_f16(sim, g, sel, ins, 2)
    _set_a(sim, sel, ins.ops[0], np.ascontiguousarray(h).view(U32).reshape(-1))


def sem_f8v4tof16(sim, g, sel, ins):
    h = _fp8_to_f16(sim, g, sel, ins, 4)
    _set_a64(sim, sel, ins.ops[0], _u64(h))


def _f16_to_fp8(sim, g, sel, ins, halves):
    out = np.zeros(halves.shape, dtype=np.uint8)

    def conv(mask, fmt, scale, nanoo):
        with np.errstate(all="ignore"):
            out[mask] = fp8.encode(halves[mask].astype(np.float32), fmt, scale, nanoo)

    _per_setting(sim, g, sel, ins, conv)
    return out


def sem_f16v2tof8(sim, g, sel, ins):
    h = np.ascontiguousarray(sim.a[sel, ins.ops[1]]).view(np.float16).reshape(-1, 2)
    b = _f16_to_fp8(sim, g, sel, ins, h)
    packed = np.zeros((len(b), 4), dtype=np.uint8)
    packed[:, :2] = b
    _set_a(sim, sel, ins.ops[0], packed.view(U32).reshape(-1))


def sem_f16v8tof8(sim, g, sel, ins):
    s = ins.ops[1]
    h = np.concatenate([_h4(_a64(sim, sel, s)), _h4(_a64(sim, sel, s + 2))], axis=1)
    b = _f16_to_fp8(sim, g, sel, ins, h)
    _set_a64(sim, sel, ins.ops[0], np.ascontiguousarray(b).view(np.uint64).reshape(-1))


# --- AMP --------------------------------------------------------------------------------------------------------


def amp_flush(sim, sel=None) -> None:
    """Add the products of the pending AMP group (raw inputs kept in sim.amp_xraw) to the in-progress sums.

    Deferring the products to the end of a group is exact with respect to what a program can observe: the
    in-progress sums are only read when the next group starts (they become the finished results), and the
    weights and FP8 settings can only change through the supervisor (ld64putcs/ld128putcs, put $FP_INFMT /
    $FP_ISCL), which flush first."""
    if sel is None:
        sel = slice(0, sim.NW)
    kinds = sim.amp_kind[sel]
    if not kinds.any():
        return
    uniform = int(kinds[0]) if (kinds == kinds[0]).all() else -1
    scales = sim.amp_scale[sel]
    todo = (1, 2, 3) if uniform < 0 else (uniform,)
    if sim.fast and jit.amp_flush_f16 is not None and 1 in todo:  # F16 products compiled (runtime/jit.py)
        ctx = np.arange(sel.start, sel.stop) if isinstance(sel, slice) else np.asarray(sel, np.int64)
        jit.amp_flush_f16(ctx, sim.amp_xraw, sim.amp_kind, sim.acc_cur, sim.cwei_matrix(1), F16_TO_F32, sim.W)
        todo = tuple(k for k in todo if k != 1)
    if sim.fast and jit.amp_flush_f8 is not None and todo:  # FP8 products compiled (the fused loops' flush)
        ctx = np.arange(sel.start, sel.stop) if isinstance(sel, slice) else np.asarray(sel, np.int64)
        f8_dec = _F8_DEC64[sim.amp_xfmt]
        for kind in todo:
            jit.amp_flush_f8(ctx, sim.amp_xraw, sim.amp_kind, sim.amp_scale, sim.acc_cur, sim.cwei_matrix(kind),
                             f8_dec, sim.W, kind)  # fmt: skip
        todo = ()
    for kind in todo:
        w = sim.cwei_matrix(kind)  # [T, 16 or 32 inputs, 16 engines]
        rows = sel if uniform >= 0 else np.arange(sim.NW)[sel][kinds == kind]
        if uniform < 0 and len(rows) == 0:  # no context of this kind (e.g. idle workers have kind 0)
            continue
        raw = np.ascontiguousarray(sim.amp_xraw[rows])  # [n, 4 phases] uint64
        if kind == 1:
            x = f16_bits_to_f32(raw.view(np.uint16))  # [n, 16]
        else:
            x = np.take(fp8.DECODE[sim.amp_xfmt], raw.view(np.uint8)).astype(np.float32)  # [n, 32]
            sc = scales if uniform >= 0 else sim.amp_scale[rows]
            if (sc != sc[0]).any():
                x *= np.exp2(sc.astype(np.float32))[:, None]
            elif sc[0]:
                x *= np.float32(2.0 ** int(sc[0]))  # exact: a power of two (scales the whole product)
        sim.acc_cur[rows] += _tile_products(sim, rows, x, w)
    sim.amp_xraw[sel] = 0
    sim.amp_kind[sel] = 0


def _tile_products(sim, sel, x, w):
    """x[c] @ w[tile(c)] -> [n, 16] float32: batched per tile when the group is whole tiles, else per context.

    The products (exact in float64) are summed in float64 and rounded once to float32 (the hardware sums in a
    wider fixed point): a float32 sum's result would depend on the order numpy's BLAS / einsum kernels pick for a
    batch shape and CPU, and the same GEMM must give the same bits however its contexts are grouped."""
    W = sim.W
    x = x.astype(np.float64)
    if isinstance(sel, slice) and sel.start % W == 0 and sel.stop % W == 0:
        t0, t1 = sel.start // W, sel.stop // W
        prod = np.matmul(x.reshape(t1 - t0, W, -1), np.asarray(w[t0:t1], np.float64)).reshape(-1, 16)
    elif sim.fast:
        return _tile_products_fast(sim, sel, x, w)
    else:
        prod = np.einsum("ci,cie->ce", x, np.asarray(w[sim.ctx_tile[sel]], np.float64))
    return prod.astype(np.float32)


def _tile_products_fast(sim, sel, x, w):
    """_tile_products of a group of parts of tiles without gathering a weight matrix per context: the contexts are
    placed in a zero-filled [tiles, W, inputs] block over the group's range of tiles and multiplied per tile (the
    same exact float64 products and sums, rounded once to float32)."""
    W = sim.W
    ctx = np.arange(sel.start, sel.stop) if isinstance(sel, slice) else np.asarray(sel)
    tiles, slot = np.divmod(ctx, W)
    t0 = int(tiles.min())
    nt = int(tiles.max()) + 1 - t0
    if nt * W > 4 * len(ctx):  # sparse: a weight matrix per context after all
        return np.einsum("ci,cie->ce", x, np.asarray(w[tiles], np.float64)).astype(np.float32)
    rel = tiles - t0
    block = np.zeros((nt, W, x.shape[1]), np.float64)
    block[rel, slot] = x
    prod = np.matmul(block, np.asarray(w[t0 : t0 + nt], np.float64))
    return prod[rel, slot].astype(np.float32)


def _amp(sim, g, sel, ins, kind, scale=0):
    """Shared AMP step (see the module docstring). Partials, inputs and results are kept as raw half/fp8 bits
    per phase; conversions and products happen once per group (numpy's float16 casts are slow)."""
    d, xreg, p, flags = ins.ops
    phase = flags & 3
    if flags >> 2 != 2:
        sim.fail("amp", "only the E4 (all 16 engines) AMP mode is simulated", g, ins)
    kinds = sim.amp_kind[sel]
    if phase == 0 or ((kinds != kind) & (kinds != 0)).any():
        amp_flush(sim, sel)
    if kind == 1 and sim.fast and jit.amp_step_f16 is not None:  # the rest compiled (runtime/jit.py)
        out = np.empty(len(g.idx), np.uint64)
        acc = sim.acc_cur
        if jit.amp_step_f16(
            g.idx, phase, xreg // 2, p // 2, sim.a64, sim.amp_kind, acc, acc.view(U32), sim.amp_next_raw,
            sim.amp_done_raw, sim.amp_xraw, F16_TO_F32, out,
        ):  # fmt: skip
            _set_a64(sim, sel, d, out)
            return
    if phase == 0:
        # finished <- in progress, in progress <- next partials, next partials <- 0
        sim.amp_done_raw[sel] = _u64(f32_to_f16_bits(sim.acc_cur[sel])).reshape(-1, 4)
        sim.acc_cur[sel] = f16_bits_to_f32(np.ascontiguousarray(sim.amp_next_raw[sel]).view(np.uint16))
        sim.amp_next_raw[sel] = 0
    _set_a64(sim, sel, d, sim.amp_done_raw[sel, phase])
    sim.amp_next_raw[sel, phase] = sim.a64[sel, p // 2]
    sim.amp_xraw[sel, phase] = sim.a64[sel, xreg // 2]
    sim.amp_kind[sel] = kind
    if kind != 1:
        sim.amp_scale[sel] = scale


def sem_f16v4hihov4amp(sim, g, sel, ins):
    _amp(sim, g, sel, ins, 1)


def sem_f8v8hihov4amp(sim, g, sel, ins):
    tiles = sim.ctx_tile[sel]
    sup = sim.NW + tiles
    infmt = sim.csr[sup, _col(SC["FP_INFMT"])]
    iscl = sim.csr[sup, _col(SC["FP_ISCL"])]
    if (infmt != infmt[0]).any() or (iscl != iscl[0]).any():
        sim.fail("amp", "tiles of one AMP group use different FP8 formats or scales", g, ins)
    wfmt, xfmt = int(infmt[0]) & 1, (int(infmt[0]) >> 1) & 1
    v = int(iscl[0]) & 0x7F
    scale = v - 128 if v & 0x40 else v  # the sum of two signed 6-bit scales: signed 7-bit
    if sim.amp_kind[sel].any() and sim.amp_xfmt != xfmt:
        amp_flush(sim)
    sim.amp_xfmt = xfmt
    _amp(sim, g, sel, ins, 3 if wfmt else 2, scale)


# Every form must have semantics.
_missing = [k for k in FORMS_BY_KEY if f"sem_{k}" not in globals()]
assert not _missing, f"forms without semantics: {_missing}"
