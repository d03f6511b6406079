"""Element-wise kernels: residual add, scale, bias add over rows, casts f32/f16/FP8 (with scale).

Calling convention (as for the GEMM): `$m0` = frame address, `call $lr, ew_sup`. The shared supervisor `ew_sup`
starts the frame's worker body on all six workers and waits; every worker takes a contiguous share of the
operation's *units* (below) from the frame's per-worker tables (count, input and output byte offsets, computed
by `split` from a quotient/remainder split).

Operands are flat vectors (bias: rows of a matrix) in any memory; every access is a single 64-bit load or store,
so there is no bank constraint. Sizes are whole units; the tile level pads tails.

| op | unit (elements) | per unit | thread cycles / unit |
|---|---|---|---:|
| `add_f16`, `add_f32` | 4 f16 / 2 f32 | out = x + y | 3 (`pace`: 2) |
| `mul_f16`, `mul_f32` | 4 / 2 | out = x * y | 3 (`pace`: 2) |
| `scale_f16`, `scale_f32` | 4 / 2 | out = x * s (s in the frame) | 2 |
| `bias_f16` | one row of n halves | out[r] = x[r] + bias | 3 per atom + 6 per row |
| `cast_f32_f16`, `cast_f16_f32` | 4 | rounding to nearest even | 3 |
| `cast_f16_fp8`, `cast_fp8_f16` | 8 | FP8 = f16 * 2^-scale / f16 = FP8 * 2^scale, saturating | 3 |

The binary kernels load x and y with one `ld2x64pace` per unit where the caller says the two streams never touch
one memory bank in the same instruction (`Elementwise.pace`, from `pace_ok`: x and y in different memory elements,
which memory-plan arranges for `nn.add` / `nn.mul`, or in one interleaved element's two halves): 2 bundles per
unit (the loads, then the store) instead of 3.

Semantics are numpy's IEEE operations on the same types (f16 arithmetic is exact then rounded once, as the
simulator's) and `ipu.runtime.fp8` for FP8.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from ipu.runtime import fp8

# Frame words: per-worker tables (6 words each), then shared fields. SCALAR is 8-byte aligned (ld64).
CNT, IOFF, OOFF = 0, 6, 12
IN0, IN1, OUT, ENTRY, SCALAR, SCALAR_HI, FMT, SCL, ROWLEN, PACE = 18, 19, 20, 21, 22, 23, 24, 25, 26, 27
FRAME_WORDS = 28

# op -> (input bytes per unit, output bytes per unit, per-unit bundles, binary?)
OPS = {
    "add_f16": (8, 8, 3, True),
    "add_f32": (8, 8, 3, True),
    "mul_f16": (8, 8, 3, True),
    "mul_f32": (8, 8, 3, True),
    "scale_f16": (8, 8, 2, False),
    "scale_f32": (8, 8, 2, False),
    "cast_f32_f16": (16, 8, 3, False),
    "cast_f16_f32": (8, 16, 3, False),
    "cast_f16_fp8": (16, 8, 3, False),
    "cast_fp8_f16": (8, 16, 3, False),
}


def _head(name: str, binary: bool) -> list[str]:
    s = [
        f".globl {name}",
        ".worker",
        f"{name}:",
        "    get $m0, $WSR",
        "    shl $m7, $m0, 2",
        f"    ld32 $m5, $mvertex_base, $m7, {CNT}",
        f"    brz $m5, .L{name}_idle",
        f"    ld32 $m1, $mvertex_base, $m7, {IOFF}",
        f"    ld32 $m3, $mvertex_base, $mzero, {IN0}",
        "    add $m1, $m1, $m3",
        f"    ld32 $m4, $mvertex_base, $m7, {OOFF}",
        f"    ld32 $m3, $mvertex_base, $mzero, {OUT}",
        "    add $m4, $m4, $m3",
    ]
    if binary:
        s += [
            f"    ld32 $m2, $mvertex_base, $m7, {IOFF}",
            f"    ld32 $m3, $mvertex_base, $mzero, {IN1}",
            "    add $m2, $m2, $m3",
        ]
    return s


def _tail(name: str) -> list[str]:
    return ["    exitz $mzero", f".L{name}_idle:", "    exitz $mzero"]


def _b(main: str, aux: str) -> str:
    return "{ " + main + " ; " + aux + " }"


def _widening(ld_x: str, st: str, conv: str) -> tuple[list[str], list[str], list[str]]:
    """(prologue, body, epilogue) of a pipelined cast of one atom in and two out (`conv` makes a pair from each
    32-bit half): unit i's load first, its conversions beside unit i - 1's two stores."""
    st_hi = "st64step $a6:7, $mzero, $m4+=, 1"
    return (
        [ld_x, f"{{ nop ; {conv} $a4:5, $a0 }}", f"{{ nop ; {conv} $a6:7, $a1 }}"],
        [_b(ld_x, "fnop"), _b(st, f"{conv} $a4:5, $a0"), _b(st_hi, f"{conv} $a6:7, $a1")],
        [st, st_hi],
    )


def _worker(op: str, pipelined: bool = False) -> str:
    """The worker body of `op` (casts: `ew_<op>` one unit at a time, or `ew_<op>_p` pipelined)."""
    ib, ob, per, binary = OPS[op]
    name = f"ew_{op}" + ("_p" if pipelined else "")
    s = _head(name, binary)
    ld_x = "ld64step $a0:1, $mzero, $m1+=, 1"
    ld_y = "ld64step $a2:3, $mzero, $m2+=, 1"
    st = "st64step $a4:5, $mzero, $m4+=, 1"
    if binary:  # software pipelined: loads of unit i + 1 beside the arithmetic of unit i
        fn = {"add": "add", "mul": "mul"}[op.split("_")[0]]
        vec = "f16v4" if op.endswith("f16") else "f32v2"
        arith = f"{vec}{fn} $a4:5, $a0:1, $a2:3"
        ld_xy = "ld2x64pace $a0:1, $a2:3, $m8:9+=, $mzero, 0"  # x and y in one bundle (`pace_ok`)
        s += [
            f"    ld32 $m0, $mvertex_base, $mzero, {PACE}",
            f"    brz $m0, .L{name}_3",
            "    tapack $m8:9, $m1, $m2, $mzero",
            f"    {ld_xy}",
            "    sub $m5, $m5, 1",
            "    { rpt $m5, 1 ; fnop }",
            f"    {{ {ld_xy} ; {arith} }}",
            f"    {{ {st} ; fnop }}",
            f"    {{ nop ; {arith} }}",
            f"    {st}",
            "    exitz $mzero",
            f".L{name}_3:",
            f"    {ld_x}",
            f"    {ld_y}",
            "    sub $m5, $m5, 1",
            "    { rpt $m5, 2 ; fnop }",
            f"    {{ {ld_x} ; {arith} }}",
            f"    {{ {ld_y} ; fnop }}",
            f"    {{ {st} ; fnop }}",
            f"    {{ nop ; {arith} }}",
            f"    {st}",
        ]
    elif op.startswith("scale"):
        vec = "f16v4" if op.endswith("f16") else "f32v2"
        arith = f"{vec}mul $a4:5, $a0:1, $a6:7"
        s += [
            f"    ld64 $a6:7, $mvertex_base, $mzero, {SCALAR // 2}",
            f"    {ld_x}",
            "    sub $m5, $m5, 1",
            "    { rpt $m5, 1 ; fnop }",
            f"    {{ {ld_x} ; {arith} }}",
            f"    {{ {st} ; fnop }}",
            f"    {{ nop ; {arith} }}",
            f"    {st}",
        ]
    else:
        if "fp8" in op:  # conversions read the format and scale from the worker's FP8 CSRs
            s += [
                f"    ld32 $a0, $mvertex_base, $mzero, {FMT}",
                "    uput $FP_NFMT, $a0",
                f"    ld32 $a0, $mvertex_base, $mzero, {SCL}",
                "    uput $FP_SCL, $a0",
            ]
        # Software pipelined, 3 bundles per unit (its MAIN accesses): unit i's conversions beside unit i + 1's
        # loads (a bundle's AUX reads its registers before the MAIN load writes them) and unit i's stores; unit
        # 0's loads before the rpt, the last unit's conversions and stores after it.
        ld_hi = "ld64step $a2:3, $mzero, $m1+=, 1"
        prologue, body, epilogue = {
            "cast_f32_f16": (  # two f32 pairs in, one atom out
                [ld_x, ld_hi],
                [_b(ld_x, "f32v2tof16 $a4, $a0:1"), _b(ld_hi, "f32v2tof16 $a5, $a2:3"), _b(st, "fnop")],
                ["{ nop ; f32v2tof16 $a4, $a0:1 }", "{ nop ; f32v2tof16 $a5, $a2:3 }", st],
            ),
            "cast_f16_f32": _widening(ld_x, st, "f16v2tof32"),
            "cast_f16_fp8": (  # two atoms in, one out
                [ld_x, ld_hi],
                [_b(ld_x, "f16v8tof8 $a4:5, $a0:3"), _b(ld_hi, "fnop"), _b(st, "fnop")],
                ["{ nop ; f16v8tof8 $a4:5, $a0:3 }", st],
            ),
            "cast_fp8_f16": _widening(ld_x, st, "f8v4tof16"),
        }[op]
        # Few units per worker (the pipeline's prologue and epilogue cost more than they save): one unit at a time.
        plain = {
            "cast_f32_f16": [_b(ld_x, "fnop"), _b(ld_x, "f32v2tof16 $a4, $a0:1"), "{ nop ; f32v2tof16 $a5, $a0:1 }",
                             _b(st, "fnop")],
            "cast_f16_f32": [_b(ld_x, "fnop"), "{ nop ; f16v2tof32 $a4:5, $a0 }", _b(st, "f16v2tof32 $a4:5, $a1"),
                             _b(st, "fnop")],
            "cast_f16_fp8": [_b(ld_x, "fnop"), _b(ld_hi, "fnop"), "{ nop ; f16v8tof8 $a4:5, $a0:3 }",
                             _b(st, "fnop")],
            "cast_fp8_f16": [_b(ld_x, "fnop"), "{ nop ; f8v4tof16 $a4:5, $a0 }", _b(st, "f8v4tof16 $a4:5, $a1"),
                             _b(st, "fnop")],
        }[op]  # fmt: skip
        if pipelined:
            s += [f"    {x}" for x in prologue] + [
                "    sub $m5, $m5, 1",
                f"    {{ rpt $m5, {len(body) - 1} ; fnop }}",
            ]
            s += [f"    {b}" for b in body] + [f"    {x}" for x in epilogue]
        else:
            s += [f"    {{ rpt $m5, {len(plain) - 1} ; fnop }}"] + [f"    {b}" for b in plain]
    del ib, ob, per
    return "\n".join(s + _tail(name)) + "\n"


def _bias_worker() -> str:
    """bias_f16: units are rows; per row a pipelined pass over its atoms with the bias pointer reset."""
    name = "ew_bias_f16"
    s = _head(name, False)
    ld_x = "ld64step $a0:1, $mzero, $m1+=, 1"
    ld_b = "ld64step $a2:3, $mzero, $m2+=, 1"
    st = "st64step $a4:5, $mzero, $m4+=, 1"
    arith = "f16v4add $a4:5, $a0:1, $a2:3"
    s += [
        f"    ld32 $m8, $mvertex_base, $mzero, {IN1}",
        f"    ld32 $m6, $mvertex_base, $mzero, {ROWLEN}",  # atoms per row - 1
        "    sub $m5, $m5, 1",
        f".L{name}_row:",
        "    add $m2, $m8, 0",
        f"    {ld_x}",
        f"    {ld_b}",
        "    { rpt $m6, 2 ; fnop }",
        f"    {{ {ld_x} ; {arith} }}",
        f"    {{ {ld_b} ; fnop }}",
        f"    {{ {st} ; fnop }}",
        f"    {{ nop ; {arith} }}",
        f"    {st}",
        f"    brnzdec $m5, .L{name}_row",
    ]
    return "\n".join(s + _tail(name)) + "\n"


SUPERVISOR = f"""
.globl ew_sup
.supervisor
ew_sup:
    ld32 $m1, $m0, $mzero, {ENTRY}
    setzi $m2, {{sram_base}}
    sub $m2, $m0, $m2
    runall $m1, $m2, 0
    sync TEXCH_SYNCZONE_LOCAL
    br $lr
"""


def library_asm(sram_base: int = 0x4C000) -> str:
    return "\n".join(
        [SUPERVISOR.replace("{sram_base}", str(sram_base))]
        + [_worker(op) for op in OPS]
        + [_worker(op, True) for op in OPS if op.startswith("cast")]
        + [_bias_worker()]
    )


# ----------------------------------------------------------------------------------------------------------------


def split(units: int, workers: int = 6) -> list[tuple[int, int]]:
    """(first unit, count) per worker: quotient/remainder split."""
    q, r = divmod(units, workers)
    return [(w * q + min(w, r), q + (w < r)) for w in range(workers)]


@dataclass(frozen=True)
class Elementwise:
    """One call: `op` over `units` units (bias_f16: `units` rows of `row` halves)."""

    op: str
    units: int
    in0: int = 0
    in1: int = 0  # second operand / bias
    out: int = 0
    scalar: float = 1.0
    fmt: int = fp8.F143
    scale: int = 0
    row: int = 0  # bias_f16: halves per row (multiple of 4)
    # binary ops: x and y loaded by one ld2x64pace per unit (the caller checked `pace_ok`); casts: the pipelined
    # loop (`cast` chooses it where it is the faster)
    pace: bool = False

    def __post_init__(self):
        if self.pace and not (OPS.get(self.op, (0, 0, 0, False))[3] or self.op.startswith("cast")):
            raise ValueError(
                f"{self.op}: the paced loads are for the binary kernels (pipelined loops: casts)"
            )

    @property
    def io_bytes(self) -> tuple[int, int]:
        if self.op == "bias_f16":
            return 2 * self.row, 2 * self.row
        return OPS[self.op][0], OPS[self.op][1]

    def frame(self, labels: dict[str, int]) -> np.ndarray:
        f = np.zeros(FRAME_WORDS, np.uint32)
        ib, ob = self.io_bytes
        for w, (first, cnt) in enumerate(split(self.units)):
            f[CNT + w], f[IOFF + w], f[OOFF + w] = cnt, first * ib, first * ob
        body = f"ew_{self.op}" + ("_p" if self.pace and self.op.startswith("cast") else "")
        f[IN0], f[IN1], f[OUT], f[ENTRY] = self.in0, self.in1, self.out, labels[body]
        if self.op.endswith("f16"):
            f[SCALAR : SCALAR + 2] = np.full(4, self.scalar, np.float16).view(np.uint32)
        else:
            f[SCALAR : SCALAR + 2] = np.full(2, self.scalar, np.float32).view(np.uint32)
        f[FMT], f[SCL], f[ROWLEN] = self.fmt, self.scale & 0x3F, max(self.row // 4 - 1, 0)
        f[PACE] = self.pace and OPS[self.op][3]  # binary ops test it; a cast's pipelined body is its entry
        return f

    entry = "ew_sup"


def semantics(e: Elementwise, x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """The output array for inputs x (and y / bias)."""
    with np.errstate(all="ignore"):
        if e.op.startswith(("add", "mul")):
            return (x + y) if e.op.startswith("add") else (x * y)
        if e.op.startswith("scale"):
            return x * x.dtype.type(e.scalar)
        if e.op == "bias_f16":
            return x.reshape(e.units, e.row) + y
        if e.op == "cast_f32_f16":
            return x.astype(np.float16)
        if e.op == "cast_f16_f32":
            return x.astype(np.float32)
        if e.op == "cast_f16_fp8":
            return fp8.encode(x.astype(np.float32), e.fmt, e.scale)
        if e.op == "cast_fp8_f16":
            return fp8.decode(x, e.fmt, e.scale).astype(np.float16)
    raise ValueError(e.op)


HEAD = 10  # get, shl, ld32, brz, 6 address instructions
SUP = 1 + 2 + 6 + 6  # ld32, setzi + sub, sync release, br (runall overlaps the workers)


@cache
def _cast_issues_table(op: str, pipelined: bool) -> tuple[int, int, int]:
    """(issues before the rpt's first repetition, issues per repetition, issues after it) of a cast worker's laid-out
    code (an alignment `nop` before a bundle at an odd word), from its entry to its `exitz`."""
    code, words = [], 0
    for x in _worker(op, pipelined).split("\n")[3:]:
        if not x.startswith("    "):
            continue
        if x.strip().startswith("{"):
            if words % 2:
                code.append("nop")
                words += 1
            words += 2
        else:
            words += 1
        code.append(x.strip())
    at = next(i for i, x in enumerate(code) if x.startswith("{ rpt"))
    body = int(code[at].split(",")[1].split(";")[0]) + 1
    stop = code.index("exitz $mzero")
    return at + 1, body, stop + 1 - (at + 1 + body)


def _cast_issues(op: str, pipelined: bool, count: int) -> int:
    """Issues of a cast worker with `count` (>= 1) units: the pipelined loop repeats for all units but the first."""
    before, body, after = _cast_issues_table(op, pipelined)
    return before + body * (count - 1 if pipelined else count) + after


def worker_thread_cycles(e: Elementwise, count: int) -> int:
    if count == 0:
        return 5
    if e.op == "bias_f16":
        atoms = e.row // 4
        return HEAD + 3 + count * (1 + 2 + 1 + 3 * (atoms - 1) + 2 + 1) + 1
    ib, ob, per, binary = OPS[e.op]
    if binary and e.pace:  # y's head, the flag test, tapack, the first loads, sub, rpt, 2 per unit, exit
        return HEAD + 3 + 2 + 1 + 1 + 1 + 1 + 2 * (count - 1) + 2 + 1
    if binary:  # the same with 3 per unit, and the layout's alignment nop before its rpt
        return HEAD + 3 + 2 + 2 + 1 + 1 + 1 + 3 * (count - 1) + 2 + 1
    if e.op.startswith("scale"):
        return HEAD + 1 + 1 + 1 + 1 + 1 + 2 * (count - 1) + 2 + 1  # (+1: the layout's alignment nop)
    return _cast_issues(e.op, e.pace, count)


def cycles(e: Elementwise) -> int:
    return SUP + 6 * max(worker_thread_cycles(e, c) for _, c in split(e.units))


@lru_cache(maxsize=65536)
def pace_ok(x: int, y: int, units: int, target) -> bool:
    """Binary kernels: unit i's loads of x and y (8 bytes each at x + 8 i, y + 8 i) never hit one bank, so one
    `ld2x64pace` may load both."""
    i = 8 * np.arange(max(units, 0), dtype=np.int64)
    return bool(units > 0 and (target.bank_of(x + i) != target.bank_of(y + i)).all())


def cast_pipelined(op: str, units: int) -> bool:
    """A cast of `units` is faster on its pipelined loop (3 bundles per unit after a prologue and epilogue) than one
    unit at a time (4), for the busiest worker's units."""
    c = max(n for _, n in split(units))
    return c > 0 and _cast_issues(op, True, c) < _cast_issues(op, False, c)


def cast(op: str, units: int, in0: int, out: int, **kw) -> Elementwise:
    """A cast call on the faster of its two loops (`cast_pipelined`)."""
    return Elementwise(op, units, in0=in0, out=out, pace=cast_pipelined(op, units), **kw)
