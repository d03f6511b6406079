"""Binary encoding of IPU instructions: the project's own, documented in docs/asm-encoding.md.

Graphcore's real instruction encoding is not public (S3 only shows that instructions are 32-bit little-endian
words and that a co-issue bit makes a 64-bit bundle). This encoding keeps those two facts and is otherwise ours:

    bit  31     co-issue: set on the first (MAIN) word of a bundle; the next word is its AUX half
    bits 30:24  opcode: the index of the instruction form in the ISA table (ipu.backend.isa.FORMS), for forms
                0..126; 127 = extended: bits 23:16 hold (form index - 127) and the operands get 16 bits
    bits 23:0   operand fields, packed from bit 0 upwards in the form's operand order (15:0 when extended)

Field widths: $m 4 bits (register index), $m pair 3 (index / 2), $a 4, $a pair 3 (index / 2), $a quad 2
(index / 4), CSR 9 (index), immediates their table width (two's complement when signed), labels 19 (word
address = byte address / 4, absolute), AMP flags 4. Every form fits in 24 bits (checked at import).

A program's image is the words of its units from `base` upward; `decode_program` needs the kernel symbol table
(name -> (address, supervisor?)), as a loader would take it from an ELF symbol table.
"""

from __future__ import annotations

import numpy as np

from ipu.backend.isa import FORMS, Instr, InstrForm, Kind, check_instr
from ipu.backend.isa_program import Program, Unit

COISSUE = 1 << 31
_REG_WIDTH = {Kind.M: (4, 1), Kind.MP: (3, 2), Kind.A: (4, 1), Kind.AP: (3, 2), Kind.AQ: (2, 4)}


class EncodingError(ValueError):
    pass


def _field(op) -> tuple[int, int]:
    """(width in bits, scale) of an operand field."""
    if op.kind in _REG_WIDTH:
        return _REG_WIDTH[op.kind]
    if op.kind == Kind.CSR:
        return (9, 1)
    if op.kind == Kind.FLAGS:
        return (4, 1)
    return (op.bits, 1)  # IMM, LABEL


EXTENDED = 127  # primary opcode of the extended space


def _payload_bits(form: InstrForm) -> int:
    return 24 if form.opcode < EXTENDED else 16


def _layout_of(form: InstrForm) -> list[tuple[int, int, int]]:
    """(shift, width, scale) per operand."""
    out, shift = [], 0
    for op in form.operands:
        w, s = _field(op)
        out.append((shift, w, s))
        shift += w
    if shift > _payload_bits(form):
        raise AssertionError(f"{form.key}: operands need {shift} bits, more than {_payload_bits(form)}")
    return out


_LAYOUTS = [_layout_of(f) for f in FORMS]


def encode_instr(ins: Instr, coissue: bool = False) -> int:
    form = ins.form
    if form.opcode < EXTENDED:
        word = (form.opcode << 24) | (COISSUE if coissue else 0)
    else:
        word = (EXTENDED << 24) | ((form.opcode - EXTENDED) << 16) | (COISSUE if coissue else 0)
    for op, v, (shift, width, scale) in zip(form.operands, ins.ops, _LAYOUTS[form.opcode]):
        if not isinstance(v, int):
            raise EncodingError(
                f"{form.mnemonic}: operand '{op.name}' is unresolved ({v!r}); lay the program out"
            )
        field = v // scale
        if op.kind == Kind.IMM and op.signed:
            field &= (1 << width) - 1
        if not 0 <= field < (1 << width):
            raise EncodingError(f"{form.mnemonic}: operand '{op.name}' value {v} does not fit {width} bits")
        word |= field << shift
    return word


def decode_instr(word: int) -> tuple[Instr, bool]:
    """-> (instruction, co-issue bit)."""
    opcode = (word >> 24) & 0x7F
    if opcode == EXTENDED:
        opcode = EXTENDED + ((word >> 16) & 0xFF)
    if opcode >= len(FORMS):
        raise EncodingError(f"illegal opcode {opcode} in word {word:#010x}")
    form = FORMS[opcode]
    ops = []
    for op, (shift, width, scale) in zip(form.operands, _LAYOUTS[opcode]):
        field = (word >> shift) & ((1 << width) - 1)
        if op.kind == Kind.IMM and op.signed and field >> (width - 1):
            field -= 1 << width
        ops.append(field * scale)
    used = sum(w for _, w, _ in _LAYOUTS[opcode])
    if word & ((1 << _payload_bits(form)) - 1) >> used << used:
        raise EncodingError(f"{form.mnemonic}: unused operand bits set in word {word:#010x}")
    ins = Instr(form, tuple(ops))
    check_instr(form, ins.ops)
    return ins, bool(word & COISSUE)


def encode_program(program: Program) -> bytes:
    """The code image of a laid-out program, from program.base to program.end."""
    words = []
    for u in program.units:
        if len(u.instrs) == 2:
            words += [encode_instr(u.instrs[0], True), encode_instr(u.instrs[1])]
        else:
            words.append(encode_instr(u.instrs[0]))
    return np.array(words, dtype="<u4").tobytes()


def decode_program(image: bytes, base: int, kernels: dict[str, tuple[int, bool]]) -> Program:
    """Decode a code image placed at `base`, given the kernel symbol table."""
    words = np.frombuffer(image, dtype="<u4")
    starts = sorted((addr, name, sup) for name, (addr, sup) in kernels.items())
    units: list[Unit] = []
    k = 0
    cur = ("", False)
    while k < len(words):
        addr = base + 4 * k
        for a, name, sup in starts:
            if a == addr:
                cur = (name, sup)
        ins, co = decode_instr(int(words[k]))
        if co:
            if k + 1 >= len(words):
                raise EncodingError(f"bundle at {addr:#x} has no second word")
            aux, co2 = decode_instr(int(words[k + 1]))
            if co2:
                raise EncodingError(f"bundle at {addr:#x}: second word has the co-issue bit")
            units.append(Unit(addr, (ins, aux), *cur))
            k += 2
        else:
            units.append(Unit(addr, (ins,), *cur))
            k += 1
    labels = {name: addr for name, (addr, _) in kernels.items()}
    return Program(base, units, labels, dict(kernels))


def encoding_table_markdown() -> str:
    """The opcode table of docs/asm-encoding.md, generated from the ISA table (a test keeps the doc in sync)."""
    kind_text = {Kind.M: "$m", Kind.MP: "$m pair", Kind.A: "$a", Kind.AP: "$a pair", Kind.AQ: "$a quad"}
    rows = [
        "| opcode | form | syntax | slot | context | category | cycles (worker/supervisor) | fields (bit:width) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in FORMS:
        syntax = (
            f.mnemonic
            + " "
            + ", ".join(
                (
                    kind_text.get(o.kind)
                    or (("s" if o.signed else "z") + f"imm{o.bits}" if o.kind == Kind.IMM else o.kind.value)
                )
                + ("+=" if o.postinc else "")
                for o in f.operands
            )
        )
        fields = ", ".join(f"{o.name} {s}:{w}" for o, (s, w, _) in zip(f.operands, _LAYOUTS[f.opcode]))
        rows.append(
            f"| {f.opcode if f.opcode < EXTENDED else f'127.{f.opcode - EXTENDED}'} | `{f.key}` | `{syntax.strip()}` | {f.slot.value} | {f.ctx.value} | {f.category} "
            f"| {f.cycles}/{f.supervisor_cycles} | {fields} |"
        )
    return "\n".join(rows) + "\n"
