"""Kernels and laid-out programs: the form every front door (asm IR, text, binary) turns into.

A `Kernel` is a named list of items (instructions, bundles, labels) for one context kind. `layout` places kernels
in tile memory and produces a `Program`: a list of issue `Unit`s (one instruction, or a co-issued MAIN+AUX bundle of
8 bytes) at byte addresses, with labels resolved. Layout rules (the assembler's job on real hardware, ours here):

- instructions are 4 bytes; kernels start 8-byte aligned;
- a bundle must be 8-byte aligned: a `nop` is inserted before a misaligned one;
- an rpt body is counted in 8-byte bundles (S2 rpt [D], poplibs `(end-start)/8-1`): the instruction after `rpt` must
  be 8-byte aligned (a `nop` is inserted before a solo `rpt` if needed) and every solo instruction inside the body
  is paired with `fnop` (MAIN) or `nop` (AUX) to make a bundle.

The layout is idempotent: laying out the items of a laid-out program again gives the same program, so the text
printed from a program parses back to the same program.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ipu.backend.isa import (
    AP_ALIASES,
    FORMS_BY_KEY,
    REG_KINDS,
    Ctx,
    Instr,
    Kind,
    OperandError,
    Slot,
    check_instr,
)

AZEROS_LOW = AP_ALIASES["azeros"]  # $a14

NOP = Instr(FORMS_BY_KEY["nop"], ())
FNOP = Instr(FORMS_BY_KEY["fnop"], ())


@dataclass(frozen=True)
class Bundle:
    """Two co-issued instructions: `{ main ; aux }`."""

    main: Instr
    aux: Instr

    def __post_init__(self):
        if self.main.form.slot != Slot.MAIN:
            raise OperandError(
                f"bundle: first instruction '{self.main.mnemonic}' must issue on the MAIN pipeline"
            )
        if self.aux.form.slot != Slot.AUX:
            raise OperandError(
                f"bundle: second instruction '{self.aux.mnemonic}' must issue on the AUX pipeline"
            )

    def text(self) -> str:
        return "{ " + self.main.text() + " ; " + self.aux.text() + " }"


@dataclass(frozen=True)
class Label:
    name: str


Item = Instr | Bundle | Label


@dataclass
class Kernel:
    """Supervisor or worker code: a symbol name and its items."""

    name: str
    supervisor: bool
    items: list[Item] = field(default_factory=list)

    def verify(self) -> None:
        for it in self.items:
            if isinstance(it, Bundle) and self.supervisor:
                raise OperandError(
                    f"{self.name}: the supervisor cannot co-issue bundles (it has no AUX pipeline)"
                )
            for ins in (
                (it.main, it.aux) if isinstance(it, Bundle) else (it,) if isinstance(it, Instr) else ()
            ):
                key = (ins.form.key, ins.ops, self.supervisor)
                if key in _VERIFIED:
                    continue
                check_instr(ins.form, ins.ops, self.supervisor)
                if not self.supervisor:
                    _check_azeros(self.name, ins)
                if len(_VERIFIED) >= _VERIFIED_MAX:  # a long-lived process (a test run): bounded memory
                    _VERIFIED.clear()
                _VERIFIED.add(key)


# (form key, operand values, supervisor) of the instructions `Kernel.verify` has passed: a check depends on
# nothing else, and a kernel library repeats its instructions (each is checked once per process).
_VERIFIED: set[tuple] = set()
_VERIFIED_MAX = 1 << 18


def _check_azeros(kernel: str, ins: Instr) -> None:
    """Worker code never writes $a14: it is the low half of $azeros ($a14:15, the zero pair that `st64 $azeros`
    stores), zero only while no kernel writes it (a worker's registers persist from one kernel to the next)."""
    for op, v in zip(ins.form.operands, ins.ops):
        if op.is_def and op.kind in REG_KINDS and REG_KINDS[op.kind][0] == "a":
            if v <= AZEROS_LOW < v + REG_KINDS[op.kind][1]:
                raise OperandError(
                    f"{kernel}: {ins.mnemonic} writes $a{AZEROS_LOW}, the low half of $azeros (kept zero)"
                )


@dataclass(frozen=True)
class Unit:
    """One issue unit at a byte address: a solo instruction (4 bytes) or a bundle (8 bytes)."""

    addr: int
    instrs: tuple[Instr, ...]
    kernel: str
    supervisor: bool

    @property
    def size(self) -> int:
        return 4 * len(self.instrs)

    def text(self) -> str:
        if len(self.instrs) == 2:
            return (
                "{ "
                + self.instrs[0].text(self.supervisor)
                + " ; "
                + self.instrs[1].text(self.supervisor)
                + " }"
            )
        return self.instrs[0].text(self.supervisor)


@dataclass
class Program:
    """Laid-out code: units at addresses, resolved labels, kernel entry points."""

    base: int
    units: list[Unit]
    labels: dict[str, int]
    kernels: dict[str, tuple[int, bool]]  # name -> (address, supervisor?)
    end: int = 0
    _by_addr: dict[int, int] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self._by_addr = {u.addr: i for i, u in enumerate(self.units)}
        self.end = self.units[-1].addr + self.units[-1].size if self.units else self.base

    def unit_index(self, addr: int) -> int | None:
        return self._by_addr.get(addr)

    def same_code(self, other: Program) -> bool:
        """Same units at the same addresses (labels may differ in name)."""
        return self.base == other.base and [(u.addr, u.instrs) for u in self.units] == [
            (u.addr, u.instrs) for u in other.units
        ]

    def to_kernels(self) -> list[Kernel]:
        """Back to kernels (with the layout's padding made explicit, and labels at their addresses)."""
        by_addr: dict[int, list[str]] = {}
        for name, addr in self.labels.items():
            if name not in self.kernels:
                by_addr.setdefault(addr, []).append(name)
        addr_label = {a: sorted(ns)[0] for a, ns in by_addr.items()}
        for name, (addr, _) in self.kernels.items():
            addr_label.setdefault(addr, name)
        kernels: list[Kernel] = []
        starts = {addr: (name, sup) for name, (addr, sup) in self.kernels.items()}
        for u in self.units:
            if u.addr in starts:
                kernels.append(Kernel(starts[u.addr][0], starts[u.addr][1]))
            if u.addr in addr_label and addr_label[u.addr] not in self.kernels:
                kernels[-1].items.append(Label(addr_label[u.addr]))
            instrs = tuple(_label_targets(i, addr_label) for i in u.instrs)
            kernels[-1].items.append(Bundle(*instrs) if len(instrs) == 2 else instrs[0])
        return kernels


def _label_targets(ins: Instr, addr_label: dict[int, str]) -> Instr:
    ops = list(ins.ops)
    for k, o in enumerate(ins.form.operands):
        if o.kind == Kind.LABEL and isinstance(ops[k], int):
            byte_addr = ops[k] * 4 if o.word else ops[k]
            if byte_addr in addr_label:
                ops[k] = addr_label[byte_addr]
    return Instr(ins.form, tuple(ops))


def layout(kernels: list[Kernel], base: int) -> Program:
    """Place kernels from `base` (see module docstring). Label operands become word addresses (byte addr / 4)."""
    if base % 8:
        raise ValueError(f"program base {base:#x} is not 8-byte aligned")
    placed: list[tuple[int, tuple[Instr, ...], str, bool]] = []
    labels: dict[str, int] = {}
    kentries: dict[str, tuple[int, bool]] = {}
    addr = base

    def define(name: str, at: int):
        if name in labels:
            raise OperandError(f"label '{name}' defined twice")
        labels[name] = at

    for k in kernels:
        k.verify()
        if addr % 8:  # kernels start 8-byte aligned; pad the previous one so the image stays contiguous
            placed.append((addr, (NOP,), placed[-1][2], placed[-1][3]))
            addr += 4
        define(k.name, addr)
        kentries[k.name] = (addr, k.supervisor)
        rpt_left = 0  # bundles still to place inside the current rpt body
        for it in k.items:
            if isinstance(it, Label):
                define(it.name, addr)
                continue
            instrs = (it.main, it.aux) if isinstance(it, Bundle) else (it,)
            if rpt_left and len(instrs) == 1:
                instrs = (instrs[0], FNOP) if instrs[0].form.slot == Slot.MAIN else (NOP, instrs[0])
            if len(instrs) == 2 and addr % 8:
                placed.append((addr, (NOP,), k.name, k.supervisor))
                addr += 4
            is_rpt = any(i.mnemonic == "rpt" for i in instrs)
            if is_rpt and len(instrs) == 1 and addr % 8 == 0:
                placed.append((addr, (NOP,), k.name, k.supervisor))
                addr += 4
            placed.append((addr, instrs, k.name, k.supervisor))
            addr += 4 * len(instrs)
            if rpt_left:
                rpt_left -= 1
            if is_rpt:
                rpt = next(i for i in instrs if i.mnemonic == "rpt")
                rpt_left = int(rpt.operand("body")) + 1
    units = []
    for a, instrs, kname, sup in placed:
        resolved = []
        for ins in instrs:
            if not _has_label_operand(ins.form):
                resolved.append(ins)
                continue
            ops = list(ins.ops)
            for j, o in enumerate(ins.form.operands):
                if o.kind == Kind.LABEL and isinstance(ops[j], str):
                    if ops[j] not in labels:
                        raise OperandError(f"{ins.mnemonic}: undefined label '{ops[j]}'")
                    ops[j] = labels[ops[j]] // 4 if o.word else labels[ops[j]]
            resolved.append(Instr(ins.form, tuple(ops)))
        units.append(Unit(a, tuple(resolved), kname, sup))
    return Program(base, units, labels, kentries)


_LABEL_FORMS: dict[str, bool] = {}


def _has_label_operand(form) -> bool:
    """Whether a form has a label operand (keyed by the form's name: hashing a whole form is slower)."""
    known = _LABEL_FORMS.get(form.key)
    if known is None:
        known = _LABEL_FORMS[form.key] = any(o.kind == Kind.LABEL for o in form.operands)
    return known


def _falls_through(k: Kernel) -> bool:
    """Whether control can run off the end of k into the kernel laid out after it: the last instruction is not an
    unconditional branch (`br`, `bri`) or exit (`exitz $mzero`)."""
    last = next((it for it in reversed(k.items) if not isinstance(it, Label)), None)
    if last is None:
        return True
    ins = last.main if isinstance(last, Bundle) else last
    if ins.mnemonic in ("br", "bri"):
        return False
    return not (ins.mnemonic in ("exitz", "exitnz") and "$mzero" in ins.text(k.supervisor))


def reachable(kernels: list[Kernel], roots: Iterable[str]) -> list[Kernel]:
    """The kernels reachable from `roots` (kernel or label names) through label operands, in their order: what a
    linker keeps when it drops unreferenced sections. A library routine nothing calls, and no frame names, then
    takes no code bytes on any tile. A root naming no label is an error (a frame asking for a missing routine)."""
    owner: dict[str, int] = {}
    for i, k in enumerate(kernels):
        owner[k.name] = i
        for it in k.items:
            if isinstance(it, Label):
                owner[it.name] = i
    refs: list[set[int]] = [set() for _ in kernels]
    for i, k in enumerate(kernels):
        for it in k.items:
            for ins in (
                (it.main, it.aux) if isinstance(it, Bundle) else (it,) if isinstance(it, Instr) else ()
            ):
                for o, v in zip(ins.form.operands, ins.ops):
                    if o.kind == Kind.LABEL and isinstance(v, str) and v in owner:
                        refs[i].add(owner[v])
        if i + 1 < len(kernels) and _falls_through(k):  # a second entry placed after the first (`xch_timed`)
            refs[i].add(i + 1)
    missing = sorted(r for r in set(roots) if r not in owner)
    if missing:
        raise OperandError(f"undefined label(s) {', '.join(missing)} named outside the code")
    keep: set[int] = set()
    todo = [owner[r] for r in roots]
    while todo:
        i = todo.pop()
        if i not in keep:
            keep.add(i)
            todo.extend(refs[i] - keep)
    return [k for i, k in enumerate(kernels) if i in keep]


def kernel_context(ins: Instr) -> bool | None:
    """True if the instruction is supervisor-only, False if worker-only, None if either."""
    return {Ctx.SUPERVISOR: True, Ctx.WORKER: False, Ctx.BOTH: None}[ins.form.ctx]
