"""Graphcore-syntax assembly text: printing kernels and parsing them back (lark grammar).

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

from lark import Lark, Token, Transformer, UnexpectedInput

from ipu.backend.isa import OperandError, raw_operand, select_form
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


def parse_kernels(text: str) -> list[Kernel]:
    """Parse assembly text into kernels (not yet laid out)."""
    try:
        items = _PARSER.parse(text if text.endswith("\n") else text + "\n")
    except UnexpectedInput as e:
        raise AsmSyntaxError(
            f"line {e.line}, column {e.column}: syntax error near {e.get_context(text)!r}"
        ) from None
    kernels: list[Kernel] = []
    pending_context: bool | None = None

    def build(ins, sup: bool):
        _, mnemonic, operands, line = ins
        try:
            return select_form(mnemonic, [raw_operand(o) for o in operands], sup)
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
