"""K-split sums fused with the bias and the cast: `nn.reduce_sum` of G f16 partial blocks in one pass over memory.

The unfused lowering sums a tile's G stacked partial blocks ([G, n] f16) pairwise with `add_f16` (ceil(log2 G)
calls, the running sums in the aux scratch, an odd block copied aside), adds the bias with `bias_f16` and casts
to f32 with `cast_f16_f32`: every output element is written and read again per pass. Here one call reads each
partial once, sums a unit (4 halves) in registers in the *same pairwise order* (`tree`: block i gets block
i + live - h added, h = live // 2, until one is left), adds the bias of its column and writes the result once,
as f16 or (two f16v2tof32) f32. The outputs are bit-identical to the unfused calls.

Calling convention and supervisor: the element-wise kernels' (`ew_sup`: `$m0` = frame, ENTRY in word 21).
One worker body per (G, bias, output type) is generated (`KINDS`: the lowering's kinds), and per (G, bias) one
`scaled` body whose f16 result is multiplied by f16(scale) before it is stored (`SCALED_KINDS`: the attention's Q
scale applied by the K-split sum that makes Q, `f16v4mul` beside the adds; the scale's pair is left out of the
register allocation).

Work split: the block's n / 4 units, in row-major order, cut into six contiguous ranges (`split`). A worker walks
its range in *segments* that end at a row end (with a bias: the bias pointer goes back to the row's first atom
there; without a bias the range is one segment). Per segment the unit body is software pipelined (a modulo
schedule of initiation interval II = its main-pipe issues: G partial loads, the bias load, one or two stores),
as a prologue (stage 0 of the first unit), `rpt` over the rest, an epilogue (stage 1 of the last unit). The
partial loads walk down the G blocks with one stride register (n * 2 bytes) and return to the next unit with a
second (8 - (G - 1) * n * 2 bytes).

Thread cycles per worker: `HEAD` + per segment (`SEG_FIXED` + prologue + (L - 1) * II + epilogue) + 1 (exit);
`cycles` is read off the generated code (`WorkerCode` counts) and equals the simulator's count
(tests/unit/test_kernel_ksum.py).

Frame (uint32 words; ENTRY where `ew_sup` reads it):

| word | field |
|---|---|
| 0 + w | worker w's units |
| 6 + w | worker w's first unit's partial offset (bytes) |
| 12 + w | its output offset (bytes) |
| 18, 19, 20 | partials (block 0), bias row, output |
| 21 | entry (worker body) |
| 22, 23 | partial stride (atoms), back stride (atoms, signed) |
| 24 | units per row (atoms of the bias row; without a bias: a large number) |
| 25 + w | worker w's bias offset (bytes) |
| 31 + w | worker w's first segment (units) |
| 37 | strided kinds: bytes from a partial row's last read unit to the next row's first |
| 46, 47 | `addends` kinds: the f32 addend blocks (laid out as the result) |

FP8 results (`FP8_KINDS`, out "fp8": the f16 result, after the GELU if any, cast to FP8 at the frame's format
and scale, as `cast_f16_fp8` casts it): the body takes two units (the conversion `f16v8tof8` reads eight halves,
a register quad: the two units' results in its two pairs) and stores them as one atom, so segments, rows and the
workers' ranges are whole pairs of units; the head sets the worker's FP8 format and scale CSRs.

Addends (`ADDEND_KINDS`, f32 results only): after the conversion to f32 the unit adds A f32 blocks laid out as
the result (`f32v2add`, addend 0 first: ((s + a0) + a1), the order of the `nn.add`s they replace), each read with
its own pointer (`ADDEND_PTRS`) from the worker's output offset on: a residual stream's add, or the sum of an
MLP part computed before, folded into the K split's store (one pass over memory instead of a sum and an add).

Strided kinds (`_rs`): the partials' rows are wider than the result's (`in_row` halves; the result block is
`out_row` of their columns, e.g. one 24-wide head block of a 48-wide q / k / v panel's partial rows), so the
segments are the result's rows and each ends by stepping the partial pointer over the columns it does not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.codegen import WorkerCode

CNT, IOFF, OOFF = 0, 6, 12
IN0, IN1, OUT, ENTRY, PSTRIDE, BACK, ROWLEN, BOFF, SEG0 = 18, 19, 20, 21, 22, 23, 24, 25, 31
SKIP = 37  # strided kinds: the partial pointer's step at a row end (bytes)
SCALE = 38  # `scaled` kinds: f16(scale) four times (an 8-byte aligned pair of words)
BBASE = 40  # strided kinds: 40 + w = worker w's panel's bias offset (bytes from the bias row; `KSum.panels`)
FRAME_WORDS = 46  # a whole number of 8-byte words
# `addends` kinds: ADDEND + k = addend k's block (after the plain frame, which is ADDEND_FRAME_WORDS long)
ADDEND = 46
ADDEND_FRAME_WORDS = 48
MAX_ADDENDS = 2
FP8_FMT, FP8_SCL = 54, 55  # FP8 kinds: the format and scale (`cast_f16_fp8`'s), after the GELU's words
FP8_FRAME_WORDS = 56
# The MRF registers the plain body leaves free: $m11, and $m0 (the worker's table offset, dead after the head, when
# not strided: the strided kinds keep their row step in it, so addends are for contiguous partials only).
ADDEND_PTRS = ("$m11", "$m0")
# `gelu` kinds: the GELU's four f16 constants c1, c0, 1, 0.5 (rowwise's, each four times: a pair of words) after
# the plain frame, which is GELU_FRAME_WORDS long for them.
GELU = 46
GELU_FRAME_WORDS = 54
MAX_PARTS = 8  # the largest G with a register allocation (7 ARF pairs) for every kind
NO_ROW = 1 << 15  # units per row without a bias: one segment (a worker's units stay below it)

PAIRS = [f"$a{2 * i}:{2 * i + 1}" for i in range(7)]  # $a14:15 is $azeros
SCALE_PAIR = PAIRS[-1]  # `scaled` kinds: f16(scale) x 4, loaded in the head (the allocation takes the others)


def tree(parts: int) -> list[tuple[int, int]]:
    """The pairwise order of the unfused sum (`Lowering.reduce_sum`): (i, j) = block i += block j, in order."""
    out, live = [], parts
    while live > 1:
        h = live // 2
        out += [(i, i + live - h) for i in range(h)]
        live -= h
    return out


def split(units: int, workers: int = 6) -> list[tuple[int, int]]:
    q, r = divmod(units, workers)
    return [(w * q + min(w, r), q + (w < r)) for w in range(workers)]


# -- the modulo schedule -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    name: str  # value written ('' for stores)
    pipe: str  # "main" | "aux"
    text: str  # with {name} placeholders for registers (format keys: value names)
    reads: tuple[str, ...]
    into: str = ""  # the op writes half of this earlier value's register pair (both names share the pair)


GELU_CONSTS = ("c1", "c0", "one", "half")  # rowwise's `GELU_CONSTANTS`: frame pairs GELU + 2 i, in this order


def _gelu_word(name: str) -> int:
    """The `ld64` index (8-byte words from the frame) of the GELU constant `name`."""
    return (GELU + 2 * GELU_CONSTS.index(name)) // 2


def _gelu_ops(x: str, resident: dict[str, str]) -> tuple[list[Op], str]:
    """rowwise `gelu`'s operations on the f16 value x, in its order (every one rounded to f16): t = ((x * x) * c1
    + c0) * x, h = x * 0.5, y = (tanh(t) + 1) * h. A constant in `resident` is that pair (loaded in the head);
    the others are loaded per unit just before their use (main-pipe slots are free: the body is aux-bound)."""
    ops, const = [], {}
    for name in GELU_CONSTS:
        if name in resident:
            const[name], const[name + "_r"] = resident[name], ()
        else:
            ops.append(
                Op(f"k_{name}", "main", f"ld64 {{k_{name}}}, $mvertex_base, $mzero, {_gelu_word(name)}", ())
            )
            const[name], const[name + "_r"] = f"{{k_{name}}}", (f"k_{name}",)

    def aux(name: str, text: str, reads: tuple[str, ...], into: str = "") -> None:
        ops.append(Op(name, "aux", text, reads, into))

    aux("g1", f"f16v4mul {{g1}}, {{{x}}}, {{{x}}}", (x,))
    aux("g2", f"f16v4mul {{g2}}, {{g1}}, {const['c1']}", ("g1", *const["c1_r"]))
    aux("g3", f"f16v4add {{g3}}, {{g2}}, {const['c0']}", ("g2", *const["c0_r"]))
    aux("g4", f"f16v4mul {{g4}}, {{g3}}, {{{x}}}", ("g3", x))
    aux("gh", f"f16v4mul {{gh}}, {{{x}}}, {const['half']}", (x, *const["half_r"]))
    aux("ga", "f16v2tanh {ga.lo}, {g4.lo}", ("g4",))
    aux("gb", "f16v2tanh {gb.hi}, {g4.hi}", ("ga", "g4"), into="ga")
    aux("gc", f"f16v4add {{gc}}, {{gb}}, {const['one']}", ("gb", *const["one_r"]))
    aux("gy", "f16v4mul {gy}, {gc}, {gh}", ("gc", "gh"))
    # The main-pipe constant loads go right after the partial / bias loads (main ops keep their list order).
    loads = [o for o in ops if o.pipe == "main"]
    return loads + [o for o in ops if o.pipe != "main"], "gy"


def _ops(
    parts: int,
    bias: bool,
    out: str,
    scaled: bool = False,
    gelu: dict[str, str] | None = None,
    addends: int = 0,
) -> list[Op]:
    """The unit's operations; gelu (the resident constants' pairs, `_gelu_ops`): the GELU of the f16 result
    before it is stored; addends: f32 blocks added to the f32 result, in order, before it is stored."""
    ops = []
    for i in range(parts):
        stride = "$m7" if i < parts - 1 else "$m3"
        if parts == 1:
            stride = "1"
        ops.append(Op(f"p{i}", "main", f"ld64step {{p{i}}}, $mzero, $m1+=, {stride}", ()))
    if bias:
        ops.append(Op("b", "main", "ld64step {b}, $mzero, $m2+=, 1", ()))
    val = {i: f"p{i}" for i in range(parts)}
    for k, (i, j) in enumerate(tree(parts)):
        name = f"s{k}"
        ops.append(Op(name, "aux", f"f16v4add {{{name}}}, {{{val[i]}}}, {{{val[j]}}}", (val[i], val[j])))
        val[i] = name
    root = val[0]
    if bias:
        ops.append(Op("r", "aux", f"f16v4add {{r}}, {{{root}}}, {{b}}", (root, "b")))
        root = "r"
    if scaled:  # the scale's pair stays out of the allocation (`SCALE_PAIR`)
        ops.append(Op("q", "aux", f"f16v4mul {{q}}, {{{root}}}, {SCALE_PAIR}", (root,)))
        root = "q"
    if gelu is not None:
        g, root = _gelu_ops(root, gelu)
        ops += g
    if out == "fp8":  # two units per body: the second's ops renamed, both results in one quad
        return _fp8_pair(ops, root)
    if out == "f16":
        ops.append(Op("", "main", f"st64step {{{root}}}, $mzero, $m4+=, 1", (root,)))
    else:
        ops.append(Op("c0", "aux", f"f16v2tof32 {{c0}}, {{{root}.lo}}", (root,)))
        ops.append(Op("c1", "aux", f"f16v2tof32 {{c1}}, {{{root}.hi}}", (root,)))
        lo, hi = "c0", "c1"
        for k in range(addends):  # the addend's two f32 pairs, added in place of the result's
            ptr = ADDEND_PTRS[k]
            ops.append(Op(f"e{k}0", "main", f"ld64step {{e{k}0}}, $mzero, {ptr}+=, 1", ()))
            ops.append(Op(f"e{k}1", "main", f"ld64step {{e{k}1}}, $mzero, {ptr}+=, 1", ()))
            ops.append(Op(f"d{k}0", "aux", f"f32v2add {{d{k}0}}, {{{lo}}}, {{e{k}0}}", (lo, f"e{k}0")))
            ops.append(Op(f"d{k}1", "aux", f"f32v2add {{d{k}1}}, {{{hi}}}, {{e{k}1}}", (hi, f"e{k}1")))
            lo, hi = f"d{k}0", f"d{k}1"
        ops.append(Op("", "main", f"st64step {{{lo}}}, $mzero, $m4+=, 1", (lo,)))
        ops.append(Op("", "main", f"st64step {{{hi}}}, $mzero, $m4+=, 1", (hi,)))
    return ops


# FP8 kinds: q0 in an even pair, q1 in the next one (the conversion reads them as a quad)
_QUAD = ("q0", "q1")


def _fp8_pair(unit: list[Op], root: str) -> list[Op]:
    """Two units' ops, interleaved (unit 1's values suffixed "_1"): both units' loads, then each AUX op of unit 0
    beside its twin of unit 1, so that the two chains share the GELU's constants (each loaded once per pair, just
    in time: when the other operand of its first reader is ready) and keep their values live briefly (two units
    in flight need more pairs). Unit 0's result is written as `q0` and unit 1's as `q1`, pairs 2r and 2r + 1 of
    a register quad (`_QUAD`), converted by one `f16v8tof8` and stored as one atom."""
    names = {o.name for o in unit if o.name}
    consts = {o.name: o for o in unit if o.name.startswith("k_")}

    def renamed(op: Op, k: int) -> Op:
        new = {n: _QUAD[k] if n == root else n if (k == 0 or n in consts) else f"{n}_1" for n in names}
        text = op.text
        for n in sorted(names, key=len, reverse=True):
            for suffix in ("", ".lo", ".hi"):
                text = text.replace("{" + n + suffix + "}", "{" + new[n] + suffix + "}")
        into = new.get(op.into, op.into) if op.into else ""
        return Op(new.get(op.name, op.name), op.pipe, text, tuple(new.get(r, r) for r in op.reads), into)

    loads = [o for o in unit if o.pipe == "main" and o.name not in consts]
    ops = [renamed(o, 0) for o in loads] + [renamed(o, 1) for o in loads]
    loaded = set()
    for o in unit:
        if o.pipe != "aux":
            continue
        for r in o.reads:
            if r in consts and r not in loaded:
                ops.append(Op(r, "main", consts[r].text, tuple(x for x in o.reads if x != r)))
                loaded.add(r)
        ops += [renamed(o, 0), renamed(o, 1)]
    ops.append(Op("o", "aux", f"f16v8tof8 {{o}}, {{{_QUAD[0]}:quad}}", _QUAD))
    ops.append(Op("", "main", "st64step {o}, $mzero, $m4+=, 1", ("o",)))
    return ops


@dataclass(frozen=True)
class Schedule:
    ii: int
    times: tuple[int, ...]  # per op (absolute, unit 0)
    regs: dict  # value -> pair index
    ops: tuple[Op, ...]
    resident: tuple[tuple[str, str], ...] = ()  # gelu kinds: (constant, its pair) loaded once in the head

    @property
    def stages(self) -> int:
        return max(self.times) // self.ii + 1


def _schedule(ops: list[Op], ii: int, pairs: int = len(PAIRS)) -> Schedule | None:
    """Main-pipe ops in their order at consecutive slots (loads 0 .. G-1, the bias load; the stores in a later
    stage if their value is not ready), aux ops as soon as their operands are (one bundle's latency) in a free
    slot; then registers: a value holds its pair from the bundle after its write to its last read (a bundle
    reads before it writes), modulo II."""
    times: list[int] = []
    ready: dict[str, int] = {}
    main_used, aux_used = set(), set()
    main_next = 0
    for op in ops:
        t = max([ready[r] for r in op.reads], default=0)
        used = main_used if op.pipe == "main" else aux_used
        if op.pipe == "main":
            t = max(t, main_next)
        while t % ii in used:
            t += 1
        used.add(t % ii)
        if op.pipe == "main":
            main_next = t + 1
        times.append(t)
        if op.name:
            ready[op.name] = t + 1
    if max(times) >= 2 * ii:
        return None
    last = {}
    for op, t in zip(ops, times):
        for r in op.reads:
            last[r] = max(last.get(r, 0), t)
    live = {}  # value -> set of bundles (mod II) at whose start it must be in its register
    for op, t in zip(ops, times):
        if op.name:
            end = last.get(op.name, t + 1)
            if end - t > ii:
                return None
            live[op.name] = {k % ii for k in range(t + 1, end + 1)}
    # A value written into another's pair (`Op.into`) shares its register: one live range from the first write.
    start = {op.name: t for op, t in zip(ops, times) if op.name}
    for op in ops:
        if op.into:
            if last.get(op.name, start[op.name] + 1) - start[op.into] > ii:
                return None
            live[op.into] |= live.pop(op.name)
    regs: dict[str, int] = {}

    def free(reg: int, name: str) -> bool:
        return reg < pairs and all(regs[o] != reg or not (live[o] & live[name]) for o in regs)

    for name in sorted(live, key=lambda v: times[[o.name for o in ops].index(v)]):
        if name in regs:  # q1, placed with q0
            continue
        if name == _QUAD[0]:  # an even pair whose next pair is free for q1's range
            reg = next((r for r in range(0, pairs - 1, 2) if free(r, name) and free(r + 1, _QUAD[1])), None)
            if reg is None:
                return None
            regs[name], regs[_QUAD[1]] = reg, reg + 1
            continue
        for reg in range(pairs):
            if free(reg, name):
                regs[name] = reg
                break
        else:
            return None
    for op in ops:
        if op.into:
            regs[op.name] = regs[op.into]
    return Schedule(ii, tuple(times), regs, tuple(ops))


def _first_schedule(ops: list[Op], pairs: int) -> Schedule | None:
    ii = max(sum(o.pipe == "main" for o in ops), sum(o.pipe == "aux" for o in ops))
    for extra in range(8):
        s = _schedule(ops, ii + extra, pairs)
        if s is not None:
            return s
    return None


@cache
def schedule(
    parts: int, bias: bool, out: str, scaled: bool = False, gelu: bool = False, addends: int = 0
) -> Schedule:
    """The unit's modulo schedule. gelu: with the GELU's four constants resident in the highest pairs as far as
    the allocation allows at the lowest II (the others loaded per unit)."""
    if gelu and (scaled or out not in ("f16", "fp8")):
        raise ValueError("ksum: the GELU is for unscaled f16 or FP8 results only")
    if out == "fp8" and scaled:
        raise ValueError("ksum: FP8 results are not scaled by the sum (the cast's scale is their own)")
    if addends and (out != "f32" or gelu or scaled or not 0 < addends <= MAX_ADDENDS):
        raise ValueError(f"ksum: addends (1..{MAX_ADDENDS}) are for unscaled f32 results only")
    best = None
    for n_res in range(len(GELU_CONSTS), -1, -1) if gelu else (None,):
        if n_res is None:
            s = _first_schedule(_ops(parts, bias, out, scaled, addends=addends), len(PAIRS) - scaled)
        else:
            resident = {c: PAIRS[len(PAIRS) - 1 - i] for i, c in enumerate(GELU_CONSTS[:n_res])}
            s = _first_schedule(_ops(parts, bias, out, gelu=resident), len(PAIRS) - n_res)
            if s is not None:
                s = Schedule(s.ii, s.times, s.regs, s.ops, tuple(resident.items()))
        if s is not None and (best is None or s.ii < best.ii):
            best = s
    if best is None:
        raise ValueError(
            f"no schedule for {parts} partials (bias {bias}, {out}{', scaled' if scaled else ''}"
            f"{', gelu' if gelu else ''}{f', {addends} addends' if addends else ''})"
        )
    return best


def _text(op: Op, regs: dict) -> str:
    fmt = {}
    for v, r in regs.items():
        fmt[v] = PAIRS[r]
        fmt[f"{v}.lo"] = f"$a{2 * r}"
        fmt[f"{v}.hi"] = f"$a{2 * r + 1}"
        fmt[f"{v}:quad"] = f"$a{2 * r}:{2 * r + 3}"
    t = op.text
    for key in sorted(fmt, key=len, reverse=True):
        t = t.replace("{" + key + "}", fmt[key])
    return t


def _bundles(s: Schedule, stages: set[int]) -> list[tuple[str, str]]:
    """The II bundles holding the ops of the given stages at their slots (empty slots: nop / fnop)."""
    rows = [["nop", "fnop"] for _ in range(s.ii)]
    for op, t in zip(s.ops, s.times):
        if t // s.ii in stages:
            rows[t % s.ii][0 if op.pipe == "main" else 1] = _text(op, s.regs)
    return [(m, a) for m, a in rows]


def _fill(bundles: list[tuple[str, str]], singles: list[str]) -> list[tuple[str, str]]:
    """`singles` (main-pipe instructions, in order) in the first free main slots of `bundles`; those that do not
    fit as bundles of their own after them."""
    out, left = [], list(singles)
    for m, a in bundles:
        if m == "nop" and left:
            m = left.pop(0)
        out.append((m, a))
    return out + [(m, "fnop") for m in left]


def _epilogue(s: Schedule) -> list[tuple[str, str]]:
    """Stage 1 of the last unit with no stage 0 beside it: its ops as early as their operands and registers allow
    (in order per pipe, the stores in order), checked by following the register contents of one unit through
    the prologue and the epilogue."""
    times = list(s.times)
    late = sorted((t, i) for i, t in enumerate(times) if t >= s.ii)
    for _t, i in late:
        for cand in range(s.ii, times[i]):
            trial = times[:i] + [cand] + times[i + 1 :]
            if _valid(s, trial):
                times = trial
                break
    rows = {}
    for op, t in zip(s.ops, times):
        if t >= s.ii:
            rows.setdefault(t - s.ii, ["nop", "fnop"])[0 if op.pipe == "main" else 1] = _text(op, s.regs)
    return [tuple(rows.get(e, ("nop", "fnop"))) for e in range(max(rows) + 1)] if rows else []


def _valid(s: Schedule, times: list[int]) -> bool:
    """One unit's ops at `times`: one op per pipe and bundle, the main ops in their order, every read seeing its
    value in its register (a bundle reads before it writes)."""
    slots = set()
    last_main = -1
    for op, t in sorted(zip(s.ops, times), key=lambda p: p[1]):
        if (t, op.pipe) in slots:
            return False
        slots.add((t, op.pipe))
    mains = [t for op, t in zip(s.ops, times) if op.pipe == "main"]
    if mains != sorted(mains) or len(set(mains)) != len(mains):
        return False
    del last_main
    reg: dict[int, str] = {}
    by_time: dict[int, list[Op]] = {}
    for op, t in zip(s.ops, times):
        by_time.setdefault(t, []).append(op)
    for t in sorted(by_time):
        for op in by_time[t]:
            if any(reg.get(s.regs[r]) != r for r in op.reads):
                return False
        for op in by_time[t]:
            if op.name:
                reg[s.regs[op.name]] = op.name
    return True


# -- the worker bodies ---------------------------------------------------------------------------------------------


def worker_name(
    parts: int,
    bias: bool,
    out: str,
    scaled: bool = False,
    strided: bool = False,
    gelu: bool = False,
    addends: int = 0,
) -> str:
    return (
        f"ksum{parts}_{'bias_' if bias else ''}f16_{out}{'_scaled' if scaled else ''}{'_rs' if strided else ''}"
        f"{'_gelu' if gelu else ''}{f'_add{addends}' if addends else ''}"
    )


KINDS = [(g, b, o) for g in range(1, MAX_PARTS + 1) for b in (False, True) for o in ("f16", "f32")]
# `scaled`: the f16 result times f16(scale) (the attention's Q scale, taken from the attention's program)
SCALED_KINDS = [(g, b, "f16", True) for g in range(1, MAX_PARTS + 1) for b in (False, True)]
# `gelu`: the f16 result through rowwise's tanh GELU before it is stored (a K split's sum feeding the MLP's GELU,
# `nn.reduce_sum {activation = "gelu_tanh"}`)
GELU_KINDS = [(g, b, "f16", False, False, True) for g in range(1, MAX_PARTS + 1) for b in (False, True)]
# `fp8`: the f16 result (after the GELU, if any) cast to FP8 (a K split's sum read by an FP8-activation linear)
FP8_KINDS = [
    (g, b, "fp8", False, False, gl)
    for g in range(1, MAX_PARTS + 1)
    for b in (False, True)
    for gl in (False, True)
]
# `addends`: f32 blocks added to the f32 result before it is stored (`nn.reduce_sum` with addends)
ADDEND_KINDS = [
    (g, b, "f32", False, False, False, a)
    for g in range(1, MAX_PARTS + 1)
    for b in (False, True)
    for a in range(1, MAX_ADDENDS + 1)
]


@cache
def worker(
    parts: int,
    bias: bool,
    out: str,
    scaled: bool = False,
    strided: bool = False,
    gelu: bool = False,
    addends: int = 0,
) -> WorkerCode:
    s = schedule(parts, bias, out, scaled, gelu, addends)
    name = worker_name(parts, bias, out, scaled, strided, gelu, addends)
    c = WorkerCode(name)
    c.one("get $m0, $WSR")
    c.one("shl $m0, $m0, 2")  # the worker's table offset (bytes)
    c.one(f"ld32 $m5, $mvertex_base, $m0, {CNT}")
    c.one(f"brz $m5, .L{name}_idle")
    if scaled:
        c.one(f"ld64 {SCALE_PAIR}, $mvertex_base, $mzero, {SCALE // 2}")
    for const, pair in s.resident:  # the GELU's constants kept in registers
        c.one(f"ld64 {pair}, $mvertex_base, $mzero, {_gelu_word(const)}")
    if out == "fp8":  # the conversion's format and scale
        c.one(f"ld32 $a0, $mvertex_base, $mzero, {FP8_FMT}")
        c.one("uput $FP_NFMT, $a0")
        c.one(f"ld32 $a0, $mvertex_base, $mzero, {FP8_SCL}")
        c.one("uput $FP_SCL, $a0")
    c.one(f"ld32 $m1, $mvertex_base, $m0, {IOFF}")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {IN0}")
    c.one("add $m1, $m1, $m3")
    c.one(f"ld32 $m4, $mvertex_base, $m0, {OOFF}")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {OUT}")
    c.one("add $m4, $m4, $m3")
    c.one(f"ld32 $m2, $mvertex_base, $m0, {BOFF}")
    c.one(f"ld32 $m8, $mvertex_base, $mzero, {IN1}")
    if strided:  # the bias row of the worker's panel
        c.one(f"ld32 $m3, $mvertex_base, $m0, {BBASE}")
        c.one("add $m8, $m8, $m3")
    c.one("add $m2, $m2, $m8")
    c.one(f"ld32 $m6, $mvertex_base, $m0, {SEG0}")
    if addends:  # addend k from the worker's output offset on ($m0 last: the table offset is read before)
        c.one(f"ld32 $m3, $mvertex_base, $m0, {OOFF}")
        for k in range(addends):
            c.one(f"ld32 {ADDEND_PTRS[k]}, $mvertex_base, $mzero, {ADDEND + k}")
            c.one(f"add {ADDEND_PTRS[k]}, {ADDEND_PTRS[k]}, $m3")
    c.one(f"ld32 $m7, $mvertex_base, $mzero, {PSTRIDE}")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {BACK}")
    c.one(f"ld32 $m9, $mvertex_base, $mzero, {ROWLEN}")
    if strided:  # $m0 (the table offset) is free from here
        assert not addends, "ksum: addends with strided partials"
        c.one(f"ld32 $m0, $mvertex_base, $mzero, {SKIP}")
    c.tag = "seg"
    c.label(f".L{name}_seg")
    c.one("sub $m5, $m5, $m6")  # units after this segment
    c.tag = "prologue"
    # the rpt count (FP8 kinds: pairs of units), in free main slots
    count = ["shr $m10, $m6, 1", "sub $m10, $m10, 1"] if out == "fp8" else ["sub $m10, $m6, 1"]
    for m, a in _fill(_bundles(s, {0}), count):
        c.bundle(m, a)
    c.tag = "body"
    c.rpt("$m10", _bundles(s, set(range(s.stages))), "unit")
    c.tag = "epilogue"
    # the bias row again, the next segment (a row, or what is left), in free main slots of the epilogue; strided:
    # the partial pointer to the next row (every load of the segment is issued before the epilogue)
    ends = ["add $m2, $m8, 0", "min $m6, $m9, $m5"] + (["add $m1, $m1, $m0"] if strided else [])
    for m, a in _fill(_epilogue(s), ends):
        c.bundle(m, a)
    c.tag = "seg_end"
    c.one(f"brnz $m5, .L{name}_seg")
    c.exit_and_idle()
    return c


def library_asm(kinds=KINDS) -> str:
    """The worker bodies of `kinds` ((G, bias, output type); the lowering passes the kinds it called)."""
    return "\n".join(worker(*k).text() for k in kinds)


# -- calls -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KSum:
    """One call: `units` output units (4 elements) of G = `parts` stacked f16 partial blocks at `in0` (block i at
    in0 + i * units * 8), summed, + the bias row at `in1` (`row` halves, a divisor of the block's columns... the
    block is row-major with rows of `row` halves; row = 0: no bias), written as `out_type` at `out`.
    Strided (in_row > 0): the result's rows are `out_row` halves (the bias row's, with a bias) and each partial
    row `in_row` halves, of which the call reads the first out_row (block i at in0 + i * rows * in_row * 2);
    with `panels` = P > 1, P result blocks one after the other, block p of the partial rows' columns p * out_row ..
    (the bias's too): the units of a block over 6 / P workers (P divides 6)."""

    parts: int
    units: int
    in0: int
    out: int
    in1: int = 0
    row: int = 0
    out_type: str = "f16"
    scale: float | None = None  # the f16 result times f16(scale) (None: not scaled)
    in_row: int = 0  # strided: halves per partial row (0: the partials are contiguous result blocks)
    out_row: int = 0  # strided: halves per result row
    gelu: bool = False  # the f16 result through rowwise's tanh GELU (`GELU_KINDS`)
    panels: int = 1  # strided: result blocks of out_row-wide column ranges of the partial rows, side by side
    addends: tuple[int, ...] = ()  # f32 blocks laid out as the result, added to it in order (`ADDEND_KINDS`)
    # out_type "fp8": the FP8 format (`fp8.F143` / `fp8.F152`) and scale, as `cast_f16_fp8`'s
    fp8_fmt: int = 0
    fp8_scale: int = 0

    entry = "ew_sup"

    @property
    def words(self) -> int:
        """The frame's length (words): the GELU's constants or the addends follow the plain frame."""
        if self.out_type == "fp8":
            return FP8_FRAME_WORDS
        return GELU_FRAME_WORDS if self.gelu else ADDEND_FRAME_WORDS if self.addends else FRAME_WORDS

    @property
    def strided(self) -> bool:
        return self.in_row > 0

    @property
    def scaled(self) -> bool:
        return self.scale is not None

    @property
    def kind(self) -> tuple:
        """`worker`'s arguments (parts, bias, out, scaled, strided, gelu, addends), the trailing defaults left
        out: one tuple per worker body."""
        kind = (self.parts, self.bias, self.out_type, self.scaled, self.strided, self.gelu, len(self.addends))
        while len(kind) > 3 and not kind[-1]:
            kind = kind[:-1]
        return kind

    @property
    def bias(self) -> bool:
        return self.row > 0

    @property
    def name(self) -> str:
        return worker_name(*self.kind)

    def work(self) -> list[tuple[int, int]]:
        """(first unit, units) per worker: `split` of each panel's units over its 6 / panels workers (FP8 kinds:
        of pairs of units)."""
        if self.out_type == "fp8":
            return [(2 * f, 2 * c) for f, c in split(self.units // 2)]
        if self.panels == 1:
            return split(self.units)
        per = self.units // self.panels
        return [(p * per + f, c) for p in range(self.panels) for f, c in split(per, 6 // self.panels)]

    def segments(self, first: int, count: int) -> list[int]:
        """The segment lengths of a worker's range."""
        if count == 0:
            return []
        if not self.bias and not self.strided:
            return [count]
        atoms = self.row_atoms
        segs, u, left = [], first, count
        while left:
            seg = min(atoms - u % atoms, left)
            segs.append(seg)
            u, left = u + seg, left - seg
        return segs

    @property
    def row_atoms(self) -> int:
        """Units per segment row: the bias row's (strided: the result row's), else unbounded (NO_ROW)."""
        if self.strided:
            return self.out_row // 4
        return self.row // 4 if self.bias else NO_ROW

    def frame(self, labels: dict[str, int]) -> np.ndarray:
        if not 1 <= self.parts <= MAX_PARTS:
            raise ValueError(f"ksum: {self.parts} partials (1..{MAX_PARTS})")
        if self.bias and self.row % 4:
            raise ValueError(f"ksum: bias rows of whole atoms ({self.row} halves)")
        if self.bias and self.units % (self.row // 4):
            raise ValueError(f"ksum: {self.units} units are not whole rows of {self.row} halves")
        if self.scaled and self.out_type != "f16":
            raise ValueError("ksum: a scale is for f16 results only")
        if self.gelu and (self.scaled or self.out_type not in ("f16", "fp8")):
            raise ValueError("ksum: the GELU is for unscaled f16 or FP8 results only")
        if self.out_type == "fp8" and (
            self.strided or self.addends or self.units % 2 or (self.bias and self.row % 8)
        ):
            raise ValueError(
                f"ksum: FP8 results take whole pairs of units ({self.units} units"
                + (f", bias rows of {self.row} halves" if self.bias else "")
                + "), contiguous partials, no addends"
            )
        if self.strided and (
            self.out_row <= 0 or self.out_row % 4 or self.in_row % 4 or self.in_row < self.panels * self.out_row
            or (self.bias and self.row != self.out_row) or self.units % (self.panels * self.out_row // 4)
        ):  # fmt: skip
            raise ValueError(
                f"ksum: strided partial rows of {self.in_row} halves for {self.panels} result block(s) of rows of "
                f"{self.out_row} (whole atoms, no wider than the partial rows, the bias row's ({self.row}), "
                f"{self.units} units of whole rows)"
            )
        if self.panels < 1 or 6 % self.panels or (self.panels > 1 and not self.strided):
            raise ValueError(f"ksum: {self.panels} result panels (a divisor of 6, strided calls only)")
        if self.addends and (
            self.out_type != "f32"
            or self.scaled
            or self.gelu
            or self.strided
            or len(self.addends) > MAX_ADDENDS
        ):
            raise ValueError(
                f"ksum: {len(self.addends)} addends (at most {MAX_ADDENDS}, unscaled f32 results without a GELU, "
                "contiguous partials)"
            )
        f = np.zeros(self.words, np.uint32)
        ob = {"f16": 8, "f32": 16, "fp8": 4}[self.out_type]
        atoms = self.row_atoms
        per = self.units // self.panels
        for w, (first, cnt) in enumerate(self.work()):
            f[CNT + w], f[IOFF + w], f[OOFF + w] = cnt, self.partial_offset(first), first * ob
            f[BOFF + w] = (first % atoms) * 8 if self.bias else 0
            f[BBASE + w] = first // per * self.out_row * 2 if self.bias else 0
            f[SEG0 + w] = self.segments(first, cnt)[0] if cnt else 0
        f[IN0], f[IN1], f[OUT], f[ENTRY] = self.in0, self.in1, self.out, labels[self.name]
        f[PSTRIDE] = self.block_atoms  # atoms between partial blocks
        f[BACK] = np.uint32((1 - (self.parts - 1) * self.block_atoms) & 0xFFFFFFFF)
        f[ROWLEN] = atoms
        if self.strided:
            f[SKIP] = (self.in_row - self.out_row) * 2
        if self.scaled:
            f[SCALE : SCALE + 2] = np.full(4, self.scale, np.float16).view(np.uint32)
        if self.gelu:
            consts = np.repeat(np.array(R.GELU_CONSTANTS, np.float16), 4)
            f[GELU:GELU_FRAME_WORDS] = consts.view(np.uint32)
        for k, a in enumerate(self.addends):
            f[ADDEND + k] = a
        if self.out_type == "fp8":
            f[FP8_FMT], f[FP8_SCL] = self.fp8_fmt, self.fp8_scale & 0x3F
        return f

    @property
    def block_atoms(self) -> int:
        """Atoms from one partial block to the next."""
        if self.strided:
            return self.units // self.panels // self.row_atoms * self.in_row // 4
        return self.units

    def partial_offset(self, unit: int) -> int:
        """Bytes from in0 to the partial (block 0) of output unit `unit`."""
        if self.strided:
            p, v = divmod(unit, self.units // self.panels)
            return v // self.row_atoms * self.in_row * 2 + p * self.out_row * 2 + v % self.row_atoms * 8
        return unit * 8

    @property
    def partial_bytes(self) -> int:
        """Bytes from in0 past the last partial element read."""
        if self.strided:
            return (self.parts - 1) * self.block_atoms * 8 + self.partial_offset(self.units - 1) + 8
        return self.parts * self.units * 8


def semantics(
    k: KSum, x: np.ndarray, bias: np.ndarray | None = None, addends: tuple[np.ndarray, ...] = ()
) -> np.ndarray:
    """x: [G * units * 4] f16 (the stacked partials; strided: G blocks of rows of in_row halves, of which the
    first panels * out_row are read); bias: [panels * row] f16; addends: one [units * 4] f32 block per
    `k.addends`. The unfused calls' result (strided with panels: the panels' blocks one after the other)."""
    x = x.astype(np.float16)
    if k.strided:  # [G, rows, in_row] -> the panels' columns, panel after panel: [G, panels * rows * out_row]
        rows = k.units // k.panels // k.row_atoms
        x = x[: k.parts * rows * k.in_row].reshape(k.parts, rows, k.in_row)[:, :, : k.panels * k.out_row]
        x = x.reshape(k.parts, rows, k.panels, k.out_row).transpose(0, 2, 1, 3)
        if k.bias:  # each panel its own bias columns
            bias = np.asarray(bias).reshape(k.panels, 1, k.out_row)
    p = [blk.copy() for blk in x.reshape(k.parts, k.units * 4)]
    with np.errstate(all="ignore"):
        for i, j in tree(k.parts):
            p[i] = p[i] + p[j]
        s = p[0]
        if k.bias:
            s = (
                s.reshape(k.panels, -1, k.row) + bias.astype(np.float16).reshape(k.panels, 1, k.row)
            ).reshape(-1)
        if k.scaled:  # f16v4mul: the exact product of two halves, rounded once
            s = (s.astype(np.float32) * np.float32(np.float16(k.scale))).astype(np.float16)
    if k.gelu:
        s = R.semantics(R.Rows("gelu", len(s) // 4), s)["out"]
    if k.out_type == "fp8":
        from ipu.runtime import fp8

        return fp8.encode(s.astype(np.float32), k.fp8_fmt, k.fp8_scale)
    if k.out_type != "f32":
        return s
    s = s.astype(np.float32)
    if len(addends) != len(k.addends):
        raise ValueError(f"ksum semantics: {len(addends)} addend blocks for {len(k.addends)} addends")
    with np.errstate(all="ignore"):
        for a in addends:  # f32v2add: IEEE f32 sums, in the order of the adds they replace
            s = s + np.asarray(a, np.float32).reshape(s.shape)
    return s


SUP = 1 + 2 + 6 + 6  # ew_sup: ld32, setzi + sub, sync release, br (runall overlaps the workers)
IDLE = 5  # get, shl, ld32, brz, exitz


def worker_thread_cycles(k: KSum, first: int, count: int) -> int:
    if count == 0:
        return IDLE
    c = worker(*k.kind)
    s = schedule(k.parts, k.bias, k.out_type, k.scaled, k.gelu, len(k.addends))
    n = c.count
    total = n["head"] + n["tail"]
    per = 2 if k.out_type == "fp8" else 1  # units per body repetition
    for seg in k.segments(first, count):
        total += n["seg"] + n["prologue"] + 1 + (seg // per - 1) * s.ii + n["epilogue"] + n["seg_end"]
    # `rpt` is counted once (the `rpt` bundle, under "body"); a repetition is II bundles under "unit"
    assert n["body"] == 1 and n["unit"] == s.ii, (n, s.ii)
    return total


def cycles(k: KSum) -> int:
    return SUP + 6 * max(worker_thread_cycles(k, f, c) for f, c in k.work())
