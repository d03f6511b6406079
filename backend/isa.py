"""The one table-driven description of the IPU tile instruction set used by this project.

Every instruction *form* (a mnemonic with one operand signature; `add $m, $m, $m` and `add $m, $m, simm16` are two
forms of `add`) is one `InstrForm` row: operand kinds, issue slot (MAIN = the integer/memory/control pipeline,
AUX = the floating-point pipeline), which contexts may issue it, its category (used for the rpt-body rule), its
cost in thread cycles, and the name of its semantics function (in `ipu.runtime.semantics`).

The same table drives the `asm` dialect (`ipu.dialects.asm`: one op per mnemonic, verified against the forms),
the text printer/parser (`ipu.backend.asm_text`), the binary encoder (`ipu.backend.encoding`) and the simulator
(`ipu.runtime.simulator`). Semantics are described in the project's own words from Graphcore's published ISA text
(graphcore/ipu_assembly_support, "S2") and poplibs codelets ("S1"); where the hardware detail is not public the
choice is ours and marked [own].

To add an instruction: add a row with `_f(key, mnemonic, operands, slot, ctx, category)` below (operand specs:
`d:m!` a written $m register, `s:ap` an $a pair, `addr:mp+=` a post-incremented $m pair, `off:zimm12`,
`t:label19`, ...) and a `sem_<key>` function in `ipu.runtime.semantics`; the dialect op, the text syntax, the
encoding (regenerate the table in docs/asm-encoding.md with `encoding.encoding_table_markdown()`) follow.

Decoded operands are plain ints: a register operand holds its register index (pairs/quads: the first index),
CSR operands the CSR index, immediates their value, labels a name (str) until layout resolves them to a byte
address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

# ----------------------------------------------------------------------------------------------------------------
# Operand kinds
# ----------------------------------------------------------------------------------------------------------------


class Kind(Enum):
    """Operand kinds. Register kinds name the register file and width (1, 2 or 4 consecutive registers)."""

    M = "m"  # one MRF (integer/address) register
    MP = "mp"  # an even-aligned MRF pair $mN:N+1
    A = "a"  # one ARF (floating-point) register
    AP = "ap"  # an even-aligned ARF pair
    AQ = "aq"  # a 4-aligned ARF quad
    CSR = "csr"  # a control/status register (name or index)
    IMM = "imm"  # an immediate; see Operand.bits / signed
    LABEL = "label"  # a branch target: label name, resolved to a word-addressed absolute target
    FLAGS = "flags"  # AMP flags (TAMP_<fmt>_E<n>_P<phase>)


REG_KINDS = {Kind.M: ("m", 1), Kind.MP: ("m", 2), Kind.A: ("a", 1), Kind.AP: ("a", 2), Kind.AQ: ("a", 4)}


@dataclass(frozen=True)
class Operand:
    name: str
    kind: Kind
    bits: int = 0  # immediates / labels: encoded width
    signed: bool = False
    postinc: bool = False  # written as `$m+=`: the register is post-incremented by the instruction
    is_def: bool = False  # the instruction writes this register
    word: bool = True  # labels: True = word address (branch targets), False = byte address (setzi)

    @property
    def reg_file(self) -> str | None:
        return REG_KINDS[self.kind][0] if self.kind in REG_KINDS else None

    @property
    def reg_count(self) -> int:
        return REG_KINDS[self.kind][1] if self.kind in REG_KINDS else 0

    def imm_range(self) -> tuple[int, int]:
        if self.signed:
            return (-(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1)
        return (0, (1 << self.bits) - 1)


class Slot(Enum):
    MAIN = "main"  # integer, memory, control and system instructions
    AUX = "aux"  # floating-point and AMP instructions (ARF)


class Ctx(Enum):
    WORKER = "worker"
    SUPERVISOR = "supervisor"
    BOTH = "both"


# Categories. `control` and `system` instructions are illegal inside an rpt body (S2 rpt [D]).
CATEGORIES = ("alu", "load", "store", "control", "system", "fp", "convert", "amp", "nop", "exchange")


@dataclass(frozen=True)
class InstrForm:
    """One row of the ISA table."""

    key: str  # unique name of the form, e.g. "add_ri"
    mnemonic: str
    operands: tuple[Operand, ...]
    slot: Slot
    ctx: Ctx
    category: str
    cycles: int = 1  # thread cycles when issued by a worker
    supervisor_cycles: int = 1  # cycles when issued by the supervisor (pipeline stalls on control/system)
    summary: str = ""
    opcode: int = field(default=-1, compare=False)

    @property
    def sem_name(self) -> str:
        return "sem_" + self.key

    @property
    def in_rpt_body_ok(self) -> bool:
        return self.category not in ("control", "system")


# ----------------------------------------------------------------------------------------------------------------
# Registers and CSRs
# ----------------------------------------------------------------------------------------------------------------

# Register aliases. S2 manual [D]: $mzero=$m15, $azero=$a15, $azeros=$a14:15, $mworker_base=$m12,
# $mvertex_base=$m13. Poplibs uses $lr=$m10 and $sp=$m11 (S1 [C]; the S2 manual disagrees, poplibs preferred).
M_ALIASES = {"mzero": 15, "lr": 10, "sp": 11, "mworker_base": 12, "mvertex_base": 13}
A_ALIASES = {"azero": 15}
AP_ALIASES = {"azeros": 14}
MZERO, AZERO, M_WORKER_BASE, M_VERTEX_BASE = 15, 15, 12, 13


# Worker CSRs: lower space via get/put, upper space (>= 0x100) via uget/uput. Indices are IPU1 ones (S4 [R]);
# $FP_NFMT/$FP_SCL exist on IPU21 (S1 [C]) but their indices are not public: ours [own].
WORKER_CSRS = {
    "WSR": 0x01,
    "VERTEX_BASE": 0x02,
    "WORKER_BASE": 0x03,
    "REPEAT_COUNT": 0x04,
    "COUNT_L": 0x60,
    "COUNT_U": 0x61,
    "FP_STS": 0x100,
    "FP_CLR": 0x101,
    "FP_CTL": 0x102,
    "TAS": 0x108,
    "FP_NFMT": 0x110,  # [own index] FP8 format for conversions: bit 0 = 0 -> F143, 1 -> F152
    "FP_SCL": 0x111,  # [own index] FP8 scale for conversions: signed 6-bit power of two
}
# Supervisor CSRs (S4 [R]); $FP_INFMT/$FP_ISCL (IPU21, S1 [C]) indices are ours [own].
SUPERVISOR_CSRS = {
    "SSR": 0x01,
    "CR": 0x02,
    "TILE_ID": 0x03,
    "FP_ICTL": 0x20,
    "CCCSLOAD": 0x50,
    "FP_INFMT": 0x58,  # [own index] bit 0 = weights format, bit 1 = inputs format (S1 [C]); 1 = F152 [I]
    "FP_ISCL": 0x59,  # [own index] AMP FP8 scale = scale_in + scale_w, signed 7-bit (S1 [C])
    "CTXT_STS": 0x72,
    "INCOMING_MUX": 0xA0,
    "INCOMING_MUXPAIR": 0xA1,
    "INCOMING_DELTA": 0xA2,
    "INCOMING_FORMAT": 0xA3,
    "INCOMING_BASE": 0xA4,
    "INCOMING_SINIT": 0xA5,
    "INCOMING_DCOUNT": 0xA6,
    "OUTGOING_BASE": 0xA7,
    "OUTGOING_DELTA": 0xA8,
    "EXCHANGE_CTL": 0xA9,
    "ANS_DCOUNT": 0xAA,
    "EXCHANGE_ADJ": 0xAB,
}
for _w in range(6):
    SUPERVISOR_CSRS[f"WORKER{_w}_BASE"] = 0x21 + _w
ALL_CSR_NAMES = {**{v: k for k, v in SUPERVISOR_CSRS.items()}, **{v: k for k, v in WORKER_CSRS.items()}}

# Field bits [own positions; S4 names the fields but positions are IPU1-only or unknown].
FP_CLR_ZAACC = (
    1 << 1
)  # writing this bit to $FP_CLR zeroes the AMP accumulators (S1 uses `uput $FP_CLR, ZAACC`)
FP_CTL_NANOO = 1 << 20  # FP8 overflow -> NaN instead of saturation (S1 tests "Nanoo" vs "Saturate")

# Sync zones (S4 [R]).
SYNC_ZONES = {"RECV": 0, "ANS": 1, "LOCAL": 2, "INTERNAL": 3, "GS1": 4, "GS1H": 5, "GS2": 6, "GS2H": 7}

# AMP flags: TAMP_<fmt>_E<engine groups>_P<phase>; our encoding [own]: bits[1:0] = phase,
# bits[3:2] = log2(engine groups). Names follow S1; values are not public.
AMP_FLAG_NAMES: dict[str, int] = {}
for _fmt in ("F16V4", "F8V8"):
    for _e, _ecode in (("E1", 0), ("E2", 1), ("E4", 2)):
        for _p in range(4):
            AMP_FLAG_NAMES[f"TAMP_{_fmt}_{_e}_P{_p}"] = (_ecode << 2) | _p


def amp_flag_name(value: int, fmt: str = "F16V4") -> str | None:
    for name, v in AMP_FLAG_NAMES.items():
        if v == value and name.startswith(f"TAMP_{fmt}_"):
            return name
    return None


def csr_index(name_or_index: str | int, supervisor: bool | None = None) -> int:
    """A CSR index from its name (without `$`) or an integer."""
    if isinstance(name_or_index, int):
        return name_or_index
    n = name_or_index.lstrip("$").upper()
    if supervisor is not True and n in WORKER_CSRS:
        return WORKER_CSRS[n]
    if supervisor is not False and n in SUPERVISOR_CSRS:
        return SUPERVISOR_CSRS[n]
    if n in WORKER_CSRS:
        return WORKER_CSRS[n]
    raise ValueError(f"unknown CSR '${n}'")


def csr_name(index: int, supervisor: bool) -> str:
    table = SUPERVISOR_CSRS if supervisor else WORKER_CSRS
    for k, v in table.items():
        if v == index:
            return k
    return str(index)


# ----------------------------------------------------------------------------------------------------------------
# Register text
# ----------------------------------------------------------------------------------------------------------------

_REG_RE = re.compile(r"^\$?([am])(\d+)(?::(\d+))?$")


class OperandError(ValueError):
    """A malformed or ill-classed operand; the message names the instruction and the operand."""


def parse_register(text: str) -> tuple[str, int, int]:
    """'$a0:1' -> ('a', 0, 2); aliases ('$mzero', '$azeros', '$lr', ...) accepted. Raises ValueError."""
    t = text.strip().lstrip("$")
    if t in M_ALIASES:
        return ("m", M_ALIASES[t], 1)
    if t in A_ALIASES:
        return ("a", A_ALIASES[t], 1)
    if t in AP_ALIASES:
        return ("a", AP_ALIASES[t], 2)
    m = _REG_RE.match(t)
    if not m:
        raise ValueError(f"not a register: '{text}'")
    f, lo = m.group(1), int(m.group(2))
    hi = int(m.group(3)) if m.group(3) is not None else lo
    count = hi - lo + 1
    if not (0 <= lo <= 15 and 0 <= hi <= 15) or count not in (1, 2, 4):
        raise ValueError(f"not a register: '{text}'")
    return (f, lo, count)


def register_text(file: str, index: int, count: int) -> str:
    if count == 1:
        return f"${file}{index}"
    return f"${file}{index}:{index + count - 1}"


def check_register(form: InstrForm, op: Operand, file: str, index: int, count: int) -> None:
    """Register-class, pair and quad rules of an operand; raises OperandError naming the op and operand."""
    want_file, want_count = REG_KINDS[op.kind]
    where = f"{form.mnemonic}: operand '{op.name}'"
    if file != want_file:
        raise OperandError(
            f"{where} must be an {want_file.upper()}RF register (${want_file}N), got ${file}{index}"
        )
    if count != want_count:
        shape = {1: "a single register", 2: "a register pair", 4: "a register quad"}[want_count]
        raise OperandError(f"{where} must be {shape}, got {register_text(file, index, count)}")
    if index % want_count:
        raise OperandError(f"{where}: {register_text(file, index, count)} is not aligned to {want_count}")
    if op.is_def and file == "m" and index in (MZERO, 14) and want_count == 1:
        raise OperandError(f"{where}: ${file}{index} is read-only")
    if op.is_def and file == "a" and index + count - 1 == AZERO:
        raise OperandError(f"{where}: {register_text(file, index, count)} is read-only (a zero register)")


# ----------------------------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------------------------


def _ops(spec: str) -> tuple[Operand, ...]:
    """'d:m! s0:m s1:simm16 delta:m+= t:label19' -> Operands. `!` marks a written register."""
    out = []
    for item in spec.split():
        name, k = item.split(":")
        is_def = k.endswith("!")
        k = k.rstrip("!")
        post = k.endswith("+=")
        k = k.removesuffix("+=")
        m = re.match(r"^(zimm|simm|label|addr)(\d+)$", k)
        if m:
            kind = Kind.LABEL if m.group(1) in ("label", "addr") else Kind.IMM
            out.append(Operand(name, kind, int(m.group(2)), m.group(1) == "simm", word=m.group(1) == "label"))
        else:
            out.append(Operand(name, Kind(k), postinc=post, is_def=is_def or post))
    return tuple(out)


FORMS: list[InstrForm] = []


def _f(key, mnemonic, ops, slot, ctx, cat, cycles=1, sup_cycles=None, summary=""):
    if sup_cycles is None:
        sup_cycles = 6 if cat in ("control", "system") else 1  # supervisor stalls: S1 comments [C]
    FORMS.append(InstrForm(key, mnemonic, _ops(ops), slot, ctx, cat, cycles, sup_cycles, summary))


M, X, W, S, B = Slot.MAIN, Slot.AUX, Ctx.WORKER, Ctx.SUPERVISOR, Ctx.BOTH

# Integer and address arithmetic (MAIN, both contexts). Register-immediate forms take simm16 (arithmetic,
# compare) or zimm12 (logic) or zimm5 (shifts) [S2 operand widths, simplified].
for _mn, _imm, _summary in (
    ("add", "simm16", "d = s0 + s1"),
    ("sub", "simm16", "d = s0 - s1"),
    ("mul", "simm16", "d = s0 * s1 (low 32 bits)"),
    ("and", "zimm12", "d = s0 & s1"),
    ("or", "zimm12", "d = s0 | s1"),
    ("xor", "zimm12", "d = s0 ^ s1"),
    ("shl", "zimm5", "d = s0 << s1"),
    ("shr", "zimm5", "d = s0 >> s1 (logical)"),
    ("shrs", "zimm5", "d = s0 >> s1 (arithmetic)"),
    ("cmpeq", "simm16", "d = (s0 == s1)"),
    ("cmpne", "simm16", "d = (s0 != s1)"),
    ("cmpslt", "simm16", "d = (s0 < s1), signed"),
    ("cmpult", "zimm12", "d = (s0 < s1), unsigned"),
    ("min", "simm16", "d = min(s0, s1), signed"),
    ("max", "simm16", "d = max(s0, s1), signed"),
):
    _f(f"{_mn}_rr", _mn, "d:m! s0:m s1:m", M, B, "alu", summary=_summary)
    _f(f"{_mn}_ri", _mn, f"d:m! s0:m s1:{_imm}", M, B, "alu", summary=_summary)

_f("setzi_m", "setzi", "d:m! imm:zimm20", M, B, "alu", summary="d = zero-extended 20-bit immediate")
_f("setzi_ml", "setzi", "d:m! imm:addr20", M, B, "alu", summary="d = byte address of a label")
_f("setzi_a", "setzi", "d:a! imm:zimm20", M, W, "alu", summary="ARF d = zero-extended 20-bit immediate")
_f("nop", "nop", "", M, B, "nop", summary="no operation (MAIN)")
_f("fnop", "fnop", "", X, W, "nop", summary="no operation (AUX)")
_f(
    "tapack",
    "tapack",
    "d:mp! a0:m a1:m a2:m",
    M,
    B,
    "alu",
    summary="pack three absolute addresses into the triple-packed pair format",
)

# Loads and stores (MAIN). Effective address = base + delta + offset*size; step forms post-increment delta by
# stride*size; pace forms use (triple-)packed address pairs with 2-bit stride selectors. (S2 [D])
for _f_, _ff in (("m", "m"), ("a", "a")):
    _f(f"ld32_{_f_}r", "ld32", f"d:{_ff}! base:m delta:m off:m", M, B if _f_ == "m" else W, "load")
    _f(f"ld32_{_f_}i", "ld32", f"d:{_ff}! base:m delta:m off:zimm12", M, B if _f_ == "m" else W, "load")
    _f(
        f"ld32step_{_f_}r",
        "ld32step",
        f"d:{_ff}! base:m delta:m+= stride:m",
        M,
        B if _f_ == "m" else W,
        "load",
    )
    _f(
        f"ld32step_{_f_}i",
        "ld32step",
        f"d:{_ff}! base:m delta:m+= stride:simm8",
        M,
        B if _f_ == "m" else W,
        "load",
    )
    _f(f"st32_{_f_}r", "st32", f"s:{_ff} base:m delta:m off:m", M, B if _f_ == "m" else W, "store")
    _f(f"st32_{_f_}i", "st32", f"s:{_ff} base:m delta:m off:zimm12", M, B if _f_ == "m" else W, "store")
    _f(
        f"st32step_{_f_}r",
        "st32step",
        f"s:{_ff} base:m delta:m+= stride:m",
        M,
        B if _f_ == "m" else W,
        "store",
    )
    _f(
        f"st32step_{_f_}i",
        "st32step",
        f"s:{_ff} base:m delta:m+= stride:simm8",
        M,
        B if _f_ == "m" else W,
        "store",
    )
_f("ld64_r", "ld64", "d:ap! base:m delta:m off:m", M, W, "load")
_f("ld64_i", "ld64", "d:ap! base:m delta:m off:zimm12", M, W, "load")
_f("ld64step_r", "ld64step", "d:ap! base:m delta:m+= stride:m", M, W, "load")
_f("ld64step_i", "ld64step", "d:ap! base:m delta:m+= stride:simm8", M, W, "load")
_f(
    "ld128_r",
    "ld128",
    "d:aq! base:m delta:m off:m",
    M,
    W,
    "load",
    summary="128-bit load, interleaved memory only",
)
_f(
    "ld128_i",
    "ld128",
    "d:aq! base:m delta:m off:zimm12",
    M,
    W,
    "load",
    summary="128-bit load, interleaved only",
)
_f("st64_r", "st64", "s:ap base:m delta:m off:m", M, W, "store")
_f("st64_i", "st64", "s:ap base:m delta:m off:zimm12", M, W, "store")
_f("st64step_r", "st64step", "s:ap base:m delta:m+= stride:m", M, W, "store")
_f("st64step_i", "st64step", "s:ap base:m delta:m+= stride:simm8", M, W, "store")
_f("ld2x64pace", "ld2x64pace", "d0:ap! d1:ap! addr:mp+= stride:m sel:zimm4", M, W, "load")
_f("ld2xst64pace", "ld2xst64pace", "d:aq! s:ap addr:mp+= stride:m sel:zimm6", M, W, "load")
_f("ldst64pace", "ldst64pace", "d:ap! s:ap addr:mp+= stride:m sel:zimm4", M, W, "load")
_f("st64pace", "st64pace", "s:ap addr:mp+= stride:m sel:zimm2", M, W, "store")

# Control (MAIN). Branch targets are word-addressed absolute (S2 [D]).
_f("br", "br", "s:m", M, B, "control", summary="branch to the address in s")
_f("bri", "bri", "t:label19", M, B, "control", summary="branch to an absolute word address")
_f("brz", "brz", "s:m t:label19", M, B, "control", summary="branch if s == 0")
_f("brnz", "brnz", "s:m t:label19", M, B, "control", summary="branch if s != 0")
_f("brnzdec", "brnzdec", "s:m! t:label19", M, B, "control", summary="if s != 0: s -= 1 and branch")
_f("call", "call", "d:m! t:label19", M, B, "control", summary="d = address of next instruction; branch")
_f("exitz", "exitz", "s:m", M, W, "control", summary="end the worker (exit status s == 0)")
_f("exitnz", "exitnz", "s:m", M, W, "control", summary="end the worker (exit status s != 0)")
_f(
    "rpt_r",
    "rpt",
    "count:m body:zimm8",
    M,
    W,
    "control",
    summary="repeat the next body+1 bundles count times",
)
_f(
    "rpt_i",
    "rpt",
    "count:zimm12 body:zimm8",
    M,
    W,
    "control",
    summary="repeat the next body+1 bundles count times",
)

# System (MAIN): worker dispatch, sync, CSR access, AMP weight loads, exchange.
_f("run", "run", "entry:m vbase:m off:zimm16", M, S, "system", summary="start one worker")
_f("runall", "runall", "entry:m vbase:m off:zimm16", M, S, "system", summary="start all six workers")
_f("sync", "sync", "zone:zimm4", M, S, "system", summary="wait for a sync zone (LOCAL: all workers idle)")
_f("get", "get", "d:m! csr:csr", M, B, "system", summary="d = CSR")
_f("put", "put", "csr:csr s:m", M, B, "system", summary="CSR = s")
_f("uget", "uget", "d:a! csr:csr", M, W, "system", summary="ARF d = upper-space worker CSR")
_f("uput", "uput", "csr:csr s:a", M, W, "system", summary="upper-space worker CSR = ARF s ($FP_CLR, ...)")
_f(
    "ld64putcs",
    "ld64putcs",
    "idx:zimm8",
    M,
    S,
    "load",
    summary="CWEI[idx] = mem64[$CCCSLOAD]; $CCCSLOAD += 8",
)
_f(
    "ld128putcs",
    "ld128putcs",
    "idx:zimm8",
    M,
    S,
    "load",
    summary="CWEI[idx, idx+1] = mem128[$CCCSLOAD] (interleaved only); $CCCSLOAD += 16",
)
_f(
    "send",
    "send",
    "addr:m+= count:zimm8",
    M,
    S,
    "exchange",
    summary="send count+1 atoms from addr to the exchange; addr += 8*(count+1)",
)
_f("delay", "delay", "cycles:zimm16", M, S, "exchange", summary="stall the supervisor for a number of cycles")

# Floating-point arithmetic (AUX, workers only; IEEE round-to-nearest-even).
for _mn, _sym in (("add", "+"), ("sub", "-"), ("mul", "*"), ("max", "max"), ("min", "min")):
    _f(f"f16v4{_mn}", f"f16v4{_mn}", "d:ap! s0:ap s1:ap", X, W, "fp", summary=f"4 x f16: d = s0 {_sym} s1")
    _f(f"f32v2{_mn}", f"f32v2{_mn}", "d:ap! s0:ap s1:ap", X, W, "fp", summary=f"2 x f32: d = s0 {_sym} s1")
    _f(f"f32{_mn}", f"f32{_mn}", "d:a! s0:a s1:a", X, W, "fp", summary=f"f32: d = s0 {_sym} s1")

# Conversions (AUX). FP8 format and scale come from $FP_NFMT / $FP_SCL (S1 inlineAssemblerCast.hpp [C]).
_f("f32tof16", "f32tof16", "d:a! s:a", X, W, "convert", summary="low half of d = f16(s)")
_f("f16tof32", "f16tof32", "d:a! s:a", X, W, "convert", summary="d = f32(low half of s)")
_f("f32v2tof16", "f32v2tof16", "d:a! s:ap", X, W, "convert", summary="d = 2 x f16(s pair)")
_f("f16v2tof32", "f16v2tof32", "d:ap! s:a", X, W, "convert", summary="d pair = 2 x f32(2 halves of s)")
_f(
    "f8v2tof16",
    "f8v2tof16",
    "d:a! s:a",
    X,
    W,
    "convert",
    summary="2 x f16 = 2 x fp8 (low 16 bits of s) * 2^scl",
)
_f("f8v4tof16", "f8v4tof16", "d:ap! s:a", X, W, "convert", summary="4 x f16 = 4 x fp8 * 2^scl")
_f("f16v2tof8", "f16v2tof8", "d:a! s:a", X, W, "convert", summary="low 16 bits of d = 2 x fp8(f16 * 2^-scl)")
_f("f16v8tof8", "f16v8tof8", "d:ap! s:aq", X, W, "convert", summary="8 x fp8(8 x f16 * 2^-scl)")

# AMP (AUX). d = 4 finished half results, x = input vector, p = 4 half partials (S2 table, S1 loops).
_f(
    "f16v4hihov4amp",
    "f16v4hihov4amp",
    "d:ap! x:ap p:ap flags:flags",
    X,
    W,
    "amp",
    summary="F16 AMP, 16 engines",
)
_f(
    "f8v8hihov4amp",
    "f8v8hihov4amp",
    "d:ap! x:ap p:ap flags:flags",
    X,
    W,
    "amp",
    summary="FP8 AMP, 16 engines",
)

# Transcendentals (AUX, workers). S2 lists f32exp, f32oorx (1/sqrt x), f32oox (1/x), f16v2tanh, f16v2exp; their exact
# precision is not public: the simulator computes them correctly rounded (in float64, rounded once) [own].
_f("f32exp", "f32exp", "d:a! s:a", X, W, "fp", summary="f32: d = e^s")
_f("f32oorx", "f32oorx", "d:a! s:a", X, W, "fp", summary="f32: d = 1 / sqrt(s)")
_f("f32oox", "f32oox", "d:a! s:a", X, W, "fp", summary="f32: d = 1 / s")
_f("f16v2tanh", "f16v2tanh", "d:a! s:a", X, W, "fp", summary="2 x f16: d = tanh(s)")
_f("f16v2exp", "f16v2exp", "d:a! s:a", X, W, "fp", summary="2 x f16: d = e^s")
# Permutations. S2: "sort" = de-interleave of the concatenated sources (even elements to the low result, odd to
# the high one); sort4x16 on ARF halves (AUX), sort8x8 on MRF bytes (MAIN).
_f("sort4x16lo", "sort4x16lo", "d:a! s0:a s1:a", X, W, "fp", summary="d = (low half of s0, low half of s1)")
_f("sort4x16hi", "sort4x16hi", "d:a! s0:a s1:a", X, W, "fp", summary="d = (high half of s0, high half of s1)")
_f("sort8x8lo", "sort8x8lo", "d:m! s0:m s1:m", M, B, "alu", summary="d = bytes 0, 2 of s0, then 0, 2 of s1")
_f("sort8x8hi", "sort8x8hi", "d:m! s0:m s1:m", M, B, "alu", summary="d = bytes 1, 3 of s0, then 1, 3 of s1")

del _mn, _imm, _summary, _f_, _ff, _sym
FORMS_BY_KEY: dict[str, InstrForm] = {}
FORMS_BY_MNEMONIC: dict[str, list[InstrForm]] = {}
for _i, _form in enumerate(FORMS):
    object.__setattr__(_form, "opcode", _i)
    FORMS_BY_KEY[_form.key] = _form
    FORMS_BY_MNEMONIC.setdefault(_form.mnemonic, []).append(_form)
# Forms 0..126 have 7-bit primary opcodes; later forms use the extended space (see docs/asm-encoding.md).
assert len(FORMS) <= 127 + 256, "opcode space exhausted (see docs/asm-encoding.md)"
_OPERAND_INDEX = {f.key: {o.name: i for i, o in enumerate(f.operands)} for f in FORMS}
MNEMONICS = sorted(FORMS_BY_MNEMONIC)


# ----------------------------------------------------------------------------------------------------------------
# Decoded instructions
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instr:
    """One decoded instruction: a form and its operand values (see the module docstring)."""

    form: InstrForm
    ops: tuple[int | str, ...]

    @property
    def mnemonic(self) -> str:
        return self.form.mnemonic

    def operand(self, name: str) -> int | str:
        return self.ops[_OPERAND_INDEX[self.form.key][name]]

    def text(self, supervisor: bool = False) -> str:
        """Graphcore-syntax text of the instruction, e.g. `ld64step $a0:1, $m0, $m1+=, 1`."""
        parts = [operand_text(self.form, o, v, supervisor) for o, v in zip(self.form.operands, self.ops)]
        return self.form.mnemonic + (" " + ", ".join(parts) if parts else "")

    def __str__(self) -> str:
        return self.text(self.form.ctx == Ctx.SUPERVISOR)


def operand_text(form: InstrForm, op: Operand, value: int | str, supervisor: bool = False) -> str:
    if op.kind in REG_KINDS:
        f, n = REG_KINDS[op.kind]
        if not op.is_def and f == "m" and value == MZERO:
            return "$mzero"
        if not op.is_def and f == "a" and n == 2 and value == 14:
            return "$azeros"
        return register_text(f, int(value), n) + ("+=" if op.postinc else "")
    if op.kind == Kind.IMM and form.mnemonic == "sync":
        names = {v: k for k, v in SYNC_ZONES_PREFIXED.items()}
        return names.get(int(value), str(value))
    if op.kind == Kind.IMM and int(value) >= 4096:
        return hex(int(value))
    if op.kind == Kind.CSR:
        sup = supervisor if form.ctx == Ctx.BOTH else form.ctx == Ctx.SUPERVISOR
        return "$" + csr_name(int(value), sup) if not csr_name(int(value), sup).isdigit() else str(value)
    if op.kind == Kind.FLAGS:
        name = amp_flag_name(int(value), "F8V8" if form.mnemonic.startswith("f8") else "F16V4")
        return name if name else str(value)
    return str(value)


def check_instr(form: InstrForm, ops: tuple, supervisor: bool | None = None) -> None:
    """Verify operand values against the form (register classes, pairs/quads, immediate ranges, contexts)."""
    if len(ops) != len(form.operands):
        raise OperandError(f"{form.mnemonic}: expected {len(form.operands)} operands, got {len(ops)}")
    if supervisor is True and form.ctx == Ctx.WORKER:
        raise OperandError(f"{form.mnemonic}: worker-only instruction used in supervisor code")
    if supervisor is False and form.ctx == Ctx.SUPERVISOR:
        raise OperandError(f"{form.mnemonic}: supervisor-only instruction used in worker code")
    for op, v in zip(form.operands, ops):
        where = f"{form.mnemonic}: operand '{op.name}'"
        if op.kind in REG_KINDS:
            if not isinstance(v, int) or not 0 <= v <= 15:
                raise OperandError(f"{where}: bad register index {v!r}")
            check_register(form, op, REG_KINDS[op.kind][0], v, REG_KINDS[op.kind][1])
        elif op.kind == Kind.IMM:
            lo, hi = op.imm_range()
            if not isinstance(v, int) or not lo <= v <= hi:
                raise OperandError(f"{where}: immediate {v} out of range [{lo}, {hi}]")
        elif op.kind == Kind.LABEL:
            if not isinstance(v, str | int):
                raise OperandError(f"{where}: bad label {v!r}")
        elif op.kind == Kind.CSR:
            if not isinstance(v, int) or not 0 <= v < 0x200:
                raise OperandError(f"{where}: bad CSR index {v!r}")
            upper = form.mnemonic in ("uget", "uput")
            if upper != (v >= 0x100):
                space = "upper (>= 0x100)" if upper else "lower (< 0x100)"
                raise OperandError(f"{where}: {form.mnemonic} needs a {space} CSR, got {v:#x}")
        elif op.kind == Kind.FLAGS:
            if not isinstance(v, int) or not 0 <= v < 16:
                raise OperandError(f"{where}: AMP flags {v!r} out of range [0, 15]")


# ----------------------------------------------------------------------------------------------------------------
# Operand text -> values and form selection (shared by the text parser and the dialect's custom syntax)
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RawOperand:
    """A syntactic operand before form selection."""

    kind: str  # "reg", "int", "name" (label / CSR / flags / alias-less identifier), "csr"
    value: object  # reg: (file, index, count); int: int; name: str
    postinc: bool = False


def raw_operand(text: str) -> RawOperand:
    """Classify one operand written in Graphcore syntax."""
    t = text.strip()
    post = t.endswith("+=")
    t = t.removesuffix("+=").strip()
    if t.startswith("$"):
        try:
            return RawOperand("reg", parse_register(t), post)
        except ValueError:
            return RawOperand("csr", t[1:], post)
    if re.fullmatch(r"[-+]?(0x[0-9a-fA-F]+|0b[01]+|\d+)", t):
        return RawOperand("int", int(t, 0), post)
    return RawOperand("name", t, post)


def _matches(op: Operand, raw: RawOperand) -> bool:
    if op.postinc != raw.postinc:
        return False
    if op.kind in REG_KINDS:
        return raw.kind == "reg" and raw.value[0] == REG_KINDS[op.kind][0]
    if op.kind == Kind.IMM:
        return raw.kind == "int" or (raw.kind == "name" and raw.value in SYNC_ZONES_PREFIXED)
    if op.kind == Kind.LABEL:
        return raw.kind in ("name", "int")
    if op.kind == Kind.CSR:
        return raw.kind in ("csr", "int")
    if op.kind == Kind.FLAGS:
        return raw.kind == "int" or (raw.kind == "name" and raw.value in AMP_FLAG_NAMES)
    return False


SYNC_ZONES_PREFIXED = {f"TEXCH_SYNCZONE_{k}": v for k, v in SYNC_ZONES.items()}


def select_form(mnemonic: str, raws: list[RawOperand], supervisor: bool | None = None) -> Instr:
    """Pick the form of `mnemonic` whose operand kinds match, convert and verify the operands."""
    forms = FORMS_BY_MNEMONIC.get(mnemonic)
    if forms is None:
        raise OperandError(f"unknown instruction '{mnemonic}'")
    candidates = [f for f in forms if len(f.operands) == len(raws) and all(map(_matches, f.operands, raws))]
    if supervisor is not None:
        ok = [f for f in candidates if f.ctx == Ctx.BOTH or (f.ctx == Ctx.SUPERVISOR) == supervisor]
        candidates = ok or candidates
    if not candidates:
        # Find the first operand that fails against a form of the right arity, to name it.
        for f in forms:
            if len(f.operands) != len(raws):
                continue
            for op, raw in zip(f.operands, raws):
                if not _matches(op, raw):
                    got = raw.value if raw.kind != "reg" else register_text(*raw.value)
                    want = op.kind.value + ("+=" if op.postinc else "")
                    if op.kind in REG_KINDS:
                        want = f"a ${REG_KINDS[op.kind][0]} register" + (" with +=" if op.postinc else "")
                    raise OperandError(f"{mnemonic}: operand '{op.name}' must be {want}, got '{got}'")
        arities = sorted({len(f.operands) for f in forms})
        raise OperandError(f"{mnemonic}: expected {' or '.join(map(str, arities))} operands, got {len(raws)}")
    form = candidates[0]
    values: list[int | str] = []
    for op, raw in zip(form.operands, raws):
        if op.kind in REG_KINDS:
            f, idx, count = raw.value
            check_register(form, op, f, idx, count)
            values.append(idx)
        elif op.kind == Kind.CSR:
            sup = supervisor if form.ctx == Ctx.BOTH else form.ctx == Ctx.SUPERVISOR
            try:
                values.append(raw.value if raw.kind == "int" else csr_index(raw.value, sup))
            except ValueError as e:
                raise OperandError(f"{mnemonic}: operand '{op.name}': {e}") from None
        elif op.kind == Kind.FLAGS:
            values.append(raw.value if raw.kind == "int" else AMP_FLAG_NAMES[raw.value])
        elif op.kind == Kind.IMM and raw.kind == "name":
            values.append(SYNC_ZONES_PREFIXED[raw.value])
        else:
            values.append(raw.value)
    ops = tuple(values)
    check_instr(form, ops, supervisor)
    return Instr(form, ops)


def make(mnemonic: str, *operands: str | int, supervisor: bool | None = None) -> Instr:
    """Build an instruction from Graphcore-syntax operand strings or ints: make('add', '$m0', '$m1', 4)."""
    raws = [RawOperand("int", o) if isinstance(o, int) else raw_operand(o) for o in operands]
    return select_form(mnemonic, raws, supervisor)
