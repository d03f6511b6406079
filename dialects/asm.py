"""The `asm` dialect: IPU tile machine code, one IR op per instruction of a kernel.

Hardware level: the instruction set of one IPU tile (IPU21 / Mk2 class): supervisor and worker instructions with
allocated registers ($m MRF, $a ARF, pairs and quads), immediates, CSRs, branch labels, MAIN+AUX co-issued bundles
and `rpt` loops. Nothing here is per tile: a kernel's ops are the code every tile that runs it executes (the
granularity rule of DESIGN.md section 3); tile-specific data lives in memory, not in the IR.

Ops:
- `asm.kernel @name supervisor|worker { ... }`: one kernel (a symbol in tile memory), a single block of
  instruction, `asm.bundle` and `asm.label` ops.
- `asm.bundle { <main op> <aux op> }`: two co-issued instructions, MAIN pipeline first.
- `asm.label ".Lname"`: a branch target.
- `asm.<mnemonic> operands`: one instruction. One op per mnemonic of the ISA table (`ipu.backend.isa`), whose forms
  decide what its operands may be. Operand properties hold the Graphcore operand text (`"$a0:1"`, `"$m1+="`,
  `"$FP_CLR"`, label names) as strings and immediates as integers. The custom syntax writes registers without the
  `$`: `asm.ld64step a0:1, m0, m1+=, 1`; labels are string literals.

The verifier runs the ISA table's operand checks (register classes, pairs/quads, immediate ranges, context), so
error messages name the op and the operand.
"""

from __future__ import annotations

import re
from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i32
from xdsl.ir import Attribute, Block, Dialect, Region
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_attr_def,
    prop_def,
    region_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import NoTerminator
from xdsl.utils.exceptions import VerifyException

from ipu.backend.isa import (
    AMP_FLAG_NAMES,
    FORMS_BY_MNEMONIC,
    M_ALIASES,
    SYNC_ZONES_PREFIXED,
    Instr,
    Kind,
    OperandError,
    operand_text,
    raw_operand,
    select_form,
)
from ipu.backend.isa_program import Bundle, Kernel, Label


class AsmInstructionOp(IRDLOperation):
    """Base of every instruction op. Subclasses are generated from the ISA table, one per mnemonic."""

    MNEMONIC: ClassVar[str] = ""
    OPERAND_NAMES: ClassVar[tuple[str, ...]] = ()

    comment = opt_attr_def(StringAttr)

    # --- conversions ------------------------------------------------------------------------------------------
    def operand_texts(self) -> list[str | int]:
        out: list[str | int] = []
        for n in self.OPERAND_NAMES:
            v = self.properties[n]
            out.append(v.value.data if isinstance(v, IntegerAttr) else v.data)  # type: ignore[union-attr]
        return out

    def in_supervisor(self) -> bool | None:
        p = self.parent_op()
        if isinstance(p, BundleOp):
            p = p.parent_op()
        if isinstance(p, KernelOp):
            return p.is_supervisor
        return None

    def to_instr(self, supervisor: bool | None = None) -> Instr:
        from ipu.backend.isa import RawOperand

        sup = self.in_supervisor() if supervisor is None else supervisor
        raws = [RawOperand("int", v) if isinstance(v, int) else raw_operand(v) for v in self.operand_texts()]
        return select_form(self.MNEMONIC, raws, sup)

    @classmethod
    def from_instr(cls, ins: Instr, supervisor: bool = False) -> AsmInstructionOp:
        props: dict[str, Attribute] = {}
        for o, v in zip(ins.form.operands, ins.ops):
            if o.kind in (Kind.IMM,) or (o.kind == Kind.LABEL and isinstance(v, int)):
                props[o.name] = IntegerAttr(int(v), i32)
            elif o.kind == Kind.LABEL:
                props[o.name] = StringAttr(str(v))
            else:
                text = operand_text(ins.form, o, v, supervisor)
                props[o.name] = (
                    IntegerAttr(int(text), i32) if text.lstrip("-").isdigit() else StringAttr(text)
                )
        return OPS_BY_MNEMONIC[ins.mnemonic].create(properties=props)

    def assembly_line(self) -> str:
        """Graphcore-syntax line of this instruction."""
        return self.to_instr().text(bool(self.in_supervisor()))

    # --- verification -----------------------------------------------------------------------------------------
    def verify_(self) -> None:
        for n in self.OPERAND_NAMES:
            v = self.properties.get(n)
            if not isinstance(v, StringAttr | IntegerAttr):
                raise VerifyException(f"{self.name}: operand '{n}' must be a string or an integer attribute")
        try:
            self.to_instr()
        except OperandError as e:
            raise VerifyException(f"{self.name}: {e}") from None

    # --- custom syntax ------------------------------------------------------------------------------------------
    @classmethod
    def parse(cls, parser: Parser) -> AsmInstructionOp:
        props: dict[str, Attribute] = {}
        for k, n in enumerate(cls.OPERAND_NAMES):
            if k:
                parser.parse_punctuation(",")
            props[n] = _parse_operand(parser)
        attrs = parser.parse_optional_attr_dict()
        return cls.create(properties=props, attributes=attrs)

    def print(self, printer: Printer) -> None:
        for k, v in enumerate(self.operand_texts()):
            printer.print_string(", " if k else " ")
            printer.print_string(_operand_syntax(v))
        printer.print_op_attributes(self.attributes)


_REGISTER_NAME = re.compile(r"^([am]\d+|mzero|azero|azeros|lr|sp|mworker_base|mvertex_base)$")


def _operand_syntax(v: str | int) -> str:
    if isinstance(v, int):
        return str(v)
    if v.startswith("$"):
        return v[1:]  # registers (a0:1, m1+=) and CSRs (FP_CLR) are bare identifiers
    if re.fullmatch(r"[A-Za-z_][\w]*", v) and (v in AMP_FLAG_NAMES or v in SYNC_ZONES_PREFIXED):
        return v
    return '"' + v + '"'  # labels


def _parse_operand(parser: Parser) -> Attribute:
    s = parser.parse_optional_str_literal()
    if s is not None:
        return StringAttr(s)
    n = parser.parse_optional_integer(allow_boolean=False, allow_negative=True)
    if n is not None:
        return IntegerAttr(n, i32)
    ident = parser.parse_identifier(" in an asm operand")
    if ident in AMP_FLAG_NAMES or ident in SYNC_ZONES_PREFIXED:
        return StringAttr(ident)
    if _REGISTER_NAME.match(ident):
        text = "$" + ident
        if parser.parse_optional_punctuation(":") is not None:
            text += ":" + str(parser.parse_integer(allow_negative=False))
        if parser.parse_optional_punctuation("+") is not None:
            parser.parse_punctuation("=")
            text += "+="
        return StringAttr(text)
    if ident.isupper() or ident in M_ALIASES:
        return StringAttr("$" + ident)  # a CSR
    return StringAttr(ident)  # a label written as an identifier


def _make_instruction_op(mnemonic: str) -> type[AsmInstructionOp]:
    forms = FORMS_BY_MNEMONIC[mnemonic]
    names = tuple(o.name for o in forms[0].operands)
    summary = "; ".join(sorted({f.summary for f in forms if f.summary}))
    ns: dict[str, object] = {
        "name": f"asm.{mnemonic}",
        "MNEMONIC": mnemonic,
        "OPERAND_NAMES": names,
        "__doc__": f"`{mnemonic}`: {summary or 'see the ISA table'}",
        "__module__": __name__,
        "__qualname__": _class_name(mnemonic),
        "__annotations__": {"MNEMONIC": ClassVar[str], "OPERAND_NAMES": ClassVar[tuple[str, ...]]},
    }
    for n in names:
        ns[n] = prop_def(Attribute)
    return irdl_op_definition(type(_class_name(mnemonic), (AsmInstructionOp,), ns))


def _class_name(mnemonic: str) -> str:
    return mnemonic[0].upper() + mnemonic[1:] + "Op"


OPS_BY_MNEMONIC: dict[str, type[AsmInstructionOp]] = {m: _make_instruction_op(m) for m in FORMS_BY_MNEMONIC}
globals().update({cls.__name__: cls for cls in OPS_BY_MNEMONIC.values()})


@irdl_op_definition
class LabelOp(IRDLOperation):
    """A branch target inside a kernel."""

    name = "asm.label"
    label = prop_def(StringAttr)

    def __init__(self, label: str):
        super().__init__(properties={"label": StringAttr(label)})

    @classmethod
    def parse(cls, parser: Parser) -> LabelOp:
        return cls(parser.parse_str_literal("label name"))

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.label.data)


@irdl_op_definition
class BundleOp(IRDLOperation):
    """Two co-issued instructions: the MAIN-pipeline one, then the AUX-pipeline one."""

    name = "asm.bundle"
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, main: AsmInstructionOp, aux: AsmInstructionOp):
        super().__init__(regions=[Region(Block([main, aux]))])

    @property
    def instructions(self) -> list[AsmInstructionOp]:
        return list(self.body.block.ops)  # type: ignore[arg-type]

    def verify_(self) -> None:
        ops = list(self.body.block.ops)
        if len(ops) != 2 or not all(isinstance(o, AsmInstructionOp) for o in ops):
            raise VerifyException("asm.bundle: must hold exactly two instruction ops")
        try:
            Bundle(ops[0].to_instr(), ops[1].to_instr())  # type: ignore[union-attr]
        except OperandError as e:
            raise VerifyException(f"asm.bundle: {e}") from None

    @classmethod
    def parse(cls, parser: Parser) -> BundleOp:
        region = parser.parse_region()
        if not region.blocks:
            region.add_block(Block())
        op = cls.create(regions=[region])
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_empty_block=False)


@irdl_op_definition
class KernelOp(IRDLOperation):
    """A kernel: supervisor or worker code under a symbol name."""

    name = "asm.kernel"
    sym_name = prop_def(StringAttr)
    context = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, name: str, supervisor: bool, ops: list[IRDLOperation] | None = None):
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "context": StringAttr("supervisor" if supervisor else "worker"),
            },
            regions=[Region(Block(ops or []))],
        )

    @property
    def is_supervisor(self) -> bool:
        return self.context.data == "supervisor"

    def verify_(self) -> None:
        if self.context.data not in ("supervisor", "worker"):
            raise VerifyException(
                f"asm.kernel: context must be 'supervisor' or 'worker', got '{self.context.data}'"
            )
        for op in self.body.block.ops:
            if not isinstance(op, AsmInstructionOp | BundleOp | LabelOp):
                raise VerifyException(f"asm.kernel: unexpected op '{op.name}' in a kernel")
            if isinstance(op, BundleOp) and self.is_supervisor:
                raise VerifyException(
                    "asm.kernel: the supervisor cannot co-issue bundles (it has no AUX pipeline)"
                )

    @classmethod
    def parse(cls, parser: Parser) -> KernelOp:
        name = parser.parse_symbol_name().data
        ctx = parser.parse_identifier("'supervisor' or 'worker'")
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region()
        if not region.blocks:
            region.add_block(Block())
        op = cls.create(
            properties={"sym_name": StringAttr(name), "context": StringAttr(ctx)},
            regions=[region],
        )
        if attrs is not None:
            op.attributes.update(attrs.data)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.sym_name.data} {self.context.data}")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_empty_block=False)

    # --- conversions ------------------------------------------------------------------------------------------
    def to_kernel(self) -> Kernel:
        sup = self.is_supervisor
        k = Kernel(self.sym_name.data, sup)
        for op in self.body.block.ops:
            if isinstance(op, LabelOp):
                k.items.append(Label(op.label.data))
            elif isinstance(op, BundleOp):
                a, b = op.instructions
                k.items.append(Bundle(a.to_instr(sup), b.to_instr(sup)))
            else:
                assert isinstance(op, AsmInstructionOp)
                k.items.append(op.to_instr(sup))
        return k

    @staticmethod
    def from_kernel(k: Kernel) -> KernelOp:
        ops: list[IRDLOperation] = []
        for it in k.items:
            if isinstance(it, Label):
                ops.append(LabelOp(it.name))
            elif isinstance(it, Bundle):
                ops.append(
                    BundleOp(
                        AsmInstructionOp.from_instr(it.main, k.supervisor),
                        AsmInstructionOp.from_instr(it.aux, k.supervisor),
                    )
                )
            else:
                ops.append(AsmInstructionOp.from_instr(it, k.supervisor))
        return KernelOp(k.name, k.supervisor, ops)


def module_to_kernels(module: ModuleOp) -> list[Kernel]:
    """Every `asm.kernel` of a module, in order."""
    return [op.to_kernel() for op in module.walk() if isinstance(op, KernelOp)]


def kernels_to_module(kernels: list[Kernel]) -> ModuleOp:
    return ModuleOp([KernelOp.from_kernel(k) for k in kernels])


ASM = Dialect(
    "asm",
    [KernelOp, BundleOp, LabelOp, *OPS_BY_MNEMONIC.values()],
    [],
)
