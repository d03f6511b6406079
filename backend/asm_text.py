"""Graphcore-syntax assembly text: printing kernels and parsing them back (lark grammar).

The grammar (`GRAMMAR`) defines the language and gives every diagnostic; a regex fast path (`_fast_items`) reads
the text this project writes (an item per line or per `;`, one-line bundles) about 20x faster and leaves anything
else to the grammar (tests/unit/test_asm_text_fast.py holds the two to the same items).

The accepted text is the subset of Graphcore's assembler syntax this project emits:

    .section .text.main          # ignored
    .globl main                  # starts a kernel named `main`
    .type main, @function        # ignored
    .supervisor                  # the kernel's context (`.worker` is the default)
    .align 8                     # ignored: layout aligns (see ipu.backend.isa_program)
    main:
        setzi $m0, 0x4C000
    .Lloop:
        { ld64step $a0:1, $m0, $m1+=, 1 ; f16v4add $a2:3, $a2:3, $a0:1 }
        brnzdec $m2, .Lloop      // comments: `#` or `//`

Operands follow the ISA table (`ipu.backend.isa`): registers `$m3`, pairs `$a0:1`, quads `$a0:3`, post-increment
`$m1+=`, CSRs `$FP_CLR`, immediates (decimal, 0x.., 0b.., negative), labels and AMP flags by name.
"""

from __future__ import annotations

import re
from functools import lru_cache

from lark import Lark, Token, Transformer, UnexpectedInput

from ipu.backend.isa import Instr, OperandError, raw_operand, select_form
from ipu.backend.isa_program import Bundle, Kernel, Label, Program, layout

GRAMMAR = r"""
start: _sep? (_item _sep)* _item?
_sep: (_NL | ";")+
_item: label | directive | bundle | instr
label: LABEL_DEF
directive: DIRECTIVE ARGS?
bundle: "{" _NL* instr (";" | _NL)+ instr _NL* "}"
instr: MNEMONIC (operand ("," operand)*)?
operand: OPERAND

LABEL_DEF: /[A-Za-z_.][\w.$]*:/
DIRECTIVE: /\.(globl|global|section|type|supervisor|worker|align|text|p2align|size|allow_optimizations)\b/
ARGS: /[^\n#;]+/
MNEMONIC: /[a-z][a-z0-9]*/
OPERAND: /[$\w.:+=\-]+/
COMMENT: /(#|\/\/)[^\n]*/
_NL: /\r?\n/
%ignore /[ \t]+/
%ignore COMMENT
"""


class AsmSyntaxError(ValueError):
    """Malformed assembly text; the message names the line."""


class _ToKernels(Transformer):
    def operand(self, items):
        return str(items[0])

    def instr(self, items):
        return ("instr", str(items[0]), [str(x) for x in items[1:]], items[0].line)

    def bundle(self, items):
        return ("bundle", items[0], items[1])

    def label(self, items):
        return ("label", str(items[0])[:-1], items[0].line)

    def directive(self, items):
        return ("dir", str(items[0])[1:], str(items[1]).strip() if len(items) > 1 else "", items[0].line)

    def start(self, items):
        return [i for i in items if not isinstance(i, Token)]


# The transformer runs inside the LALR parser, as each rule reduces: no parse tree is built (a third faster on
# the kernel library, which every link parses).
_PARSER = Lark(GRAMMAR, parser="lalr", lexer="contextual", maybe_placeholders=False, transformer=_ToKernels())


# The fast path reads the text this project writes (one item per line or `;`-separated, one-line bundles) with a
# regex per item, an order of magnitude faster than lark's lexer; anything else it leaves to the grammar.
_FAST_LABEL = re.compile(r"[A-Za-z_.][\w.$]*:")
_FAST_DIRECTIVE = re.compile(
    r"\.(globl|global|section|type|supervisor|worker|align|text|p2align|size|allow_optimizations)\b([^\n#;]*)"
)
_FAST_INSTR = re.compile(r"([a-z][a-z0-9]*)(?:[ \t]+(.*))?")
_FAST_OPERAND = re.compile(r"[$\w.:+=\-]+")
_FAST_COMMENT = re.compile(r"#|//")


class _NotCanonical(Exception):
    """The fast path met text it does not read: the lark grammar decides."""


def _fast_instr(text: str, line: int) -> tuple:
    m = _FAST_INSTR.fullmatch(text)
    if m is None:
        raise _NotCanonical
    operands = [] if m[2] is None else [o.strip() for o in m[2].split(",")]
    if not all(_FAST_OPERAND.fullmatch(o) for o in operands):
        raise _NotCanonical
    return ("instr", m[1], operands, line)


def _fast_items(text: str) -> list[tuple]:
    """The grammar's items (as `_ToKernels` gives them) for text in this project's own form."""
    if "\r" in text:
        raise _NotCanonical
    items: list[tuple] = []
    for number, line in enumerate(text.split("\n"), 1):
        comment = _FAST_COMMENT.search(line)
        if comment is not None:
            # A directive's arguments may hold `//` (the grammar's business).
            if _FAST_DIRECTIVE.match(line.lstrip(" \t")):
                raise _NotCanonical
            line = line[: comment.start()]
        line = line.strip(" \t")
        if not line:
            continue
        if line[0] == "{":
            if line[-1] != "}" or line.count("{") != 1 or line.count("}") != 1:
                raise _NotCanonical
            parts = [p.strip(" \t") for p in line[1:-1].split(";")]
            parts = [p for p in parts if p]
            if len(parts) != 2:
                raise _NotCanonical
            items.append(("bundle", _fast_instr(parts[0], number), _fast_instr(parts[1], number)))
            continue
        if "{" in line or "}" in line:
            raise _NotCanonical
        for part in line.split(";"):
            part = part.strip(" \t")
            if not part:
                continue
            if _FAST_LABEL.fullmatch(part):
                items.append(("label", part[:-1], number))
            elif part[0] == ".":
                m = _FAST_DIRECTIVE.fullmatch(part)
                if m is None:
                    raise _NotCanonical
                items.append(("dir", m[1], m[2].strip(), number))
            else:
                items.append(_fast_instr(part, number))
    return items


@lru_cache(maxsize=1 << 16)
def _select_form(mnemonic: str, operands: tuple[str, ...], supervisor: bool) -> Instr:
    # Instructions are immutable and a kernel library repeats them: each distinct one is selected once.
    return select_form(mnemonic, [raw_operand(o) for o in operands], supervisor)


def parse_kernels(text: str) -> list[Kernel]:
    """Parse assembly text into kernels (not yet laid out)."""
    try:
        items = _fast_items(text)
    except _NotCanonical:
        items = _grammar_items(text)
    kernels: list[Kernel] = []
    pending_context: bool | None = None

    def build(ins, sup: bool):
        _, mnemonic, operands, line = ins
        try:
            return _select_form(mnemonic, tuple(operands), sup)
        except OperandError as e:
            raise AsmSyntaxError(f"line {line}: {e}") from None

    for it in items:
        if it[0] == "dir":
            _, name, args, line = it
            if name in ("globl", "global"):
                kernels.append(Kernel(args.split(",")[0].strip(), False))
                if pending_context is not None:
                    kernels[-1].supervisor = pending_context
            elif name in ("supervisor", "worker"):
                pending_context = name == "supervisor"
                if kernels:
                    kernels[-1].supervisor = pending_context
            continue
        if it[0] == "label":
            if not kernels:
                kernels.append(Kernel(it[1], bool(pending_context)))
                continue
            if it[1] == kernels[-1].name and not kernels[-1].items:
                continue
            kernels[-1].items.append(Label(it[1]))
            continue
        if not kernels:
            raise AsmSyntaxError(
                f"line {it[3] if it[0] == 'instr' else it[1][3]}: instruction outside a kernel"
            )
        sup = kernels[-1].supervisor
        if it[0] == "instr":
            kernels[-1].items.append(build(it, sup))
        else:
            try:
                kernels[-1].items.append(Bundle(build(it[1], sup), build(it[2], sup)))
            except OperandError as e:
                raise AsmSyntaxError(f"line {it[1][3]}: {e}") from None
    return kernels


def _grammar_items(text: str) -> list[tuple]:
    try:
        return _PARSER.parse(text if text.endswith("\n") else text + "\n")
    except UnexpectedInput as e:
        raise AsmSyntaxError(
            f"line {e.line}, column {e.column}: syntax error near {e.get_context(text)!r}"
        ) from None


def parse_program(text: str, base: int) -> Program:
    """Parse and lay out assembly text."""
    return layout(parse_kernels(text), base)


def print_kernels(kernels: list[Kernel]) -> str:
    """Graphcore-syntax text of kernels; parse_kernels(print_kernels(k)) == k."""
    out: list[str] = []
    for k in kernels:
        out += [f".section .text.{k.name}", f".globl {k.name}", ".supervisor" if k.supervisor else ".worker"]
        out += [".align 8", f"{k.name}:"]
        for it in k.items:
            if isinstance(it, Label):
                out.append(f"{it.name}:")
            elif isinstance(it, Bundle):
                out.append(f"    {{ {it.main.text(k.supervisor)} ; {it.aux.text(k.supervisor)} }}")
            else:
                out.append(f"    {it.text(k.supervisor)}")
        out.append("")
    return "\n".join(out)


def print_program(program: Program) -> str:
    return print_kernels(program.to_kernels())


def parse_to_module(text: str):
    """Parse assembly text into an `asm`-dialect module (builtin.module of asm.kernel ops)."""
    from ipu.dialects.asm import kernels_to_module

    return kernels_to_module(parse_kernels(text))
