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

The program level (what the backend's passes produce and transform, `ipu.passes.asm_passes`): a whole tile program
is an `asm.program`: the code every tile runs (`asm.kernel @main` and the library routines it calls) and, since
tiles differ only by data, per-tile data and host bindings:

- `asm.program @name { ... }`: the container; `target`, `tiles`, `code_base`, `code_end` (the code reservation of
  memory-plan), `library` (which kernel library variants the program may link), `metadata` (the package's
  metadata, JSON).
- `asm.kernel_call @entry frame <addr>`: a call of a library routine with its per-tile frame (or table) at `addr`
  in `$m0`, inside `@main` before `asm-lower-calls`; `header` (the frame opens with an active word: a tile without
  work skips the call), `all_active`, `what` and the profile's `site_op` / `site_phase`.
- `asm.repeat <count> record <addr> { body }`: the layer loop, a region over one copy of the body's code, before
  `asm-lower-repeat`; its per-iteration changes are attributes: the patched words' addresses (`patch_words`) and
  per-tile strides (`patch_strides`, uint32 arithmetic), applied between iterations from the two tables at
  `forward_table` / `reset_table` (`table_words` wide).
- `asm.data "name" at <addr>`: initial bytes of tile memory (`data`: [rows, bytes] i8, one row for every tile or
  one per tile, or per `tiles`); `relocs` ([n, 3]: row, word, index into `reloc_labels`) are words to which
  `asm-link` adds a code label's address (a kernel frame's entry points).
- `asm.binding kind "name"`: a host tensor's place on the device (`chunks`: [n, 7] i64 (or [n, 5]: one-level
  runs), the columns of `ipu.runtime.package.CHUNK_COLUMNS`).
"""

from __future__ import annotations

import json
import re
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
    i32,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, Region
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


def _parse_region_op(cls, parser: Parser, properties: dict[str, Attribute]):
    """The rest of a region op after its head: `attributes {...}` (optional) and its one-block region."""
    attrs = parser.parse_optional_attr_dict_with_keyword()
    region = parser.parse_region()
    if not region.blocks:
        region.add_block(Block())
    op = cls.create(properties=properties, regions=[region])
    if attrs is not None:
        op.attributes.update(attrs.data)
    return op


def _print_region_op(op: IRDLOperation, printer: Printer, head: str) -> None:
    printer.print_string(head)
    printer.print_op_attributes(op.attributes, print_keyword=True)
    printer.print_string(" ")
    printer.print_region(op.body, print_entry_block_args=False, print_empty_block=False)


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
            if isinstance(op, KernelCallOp | RepeatOp) and self.is_supervisor:
                continue  # structured supervisor code, before asm-lower-repeat / asm-lower-calls
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
        return _parse_region_op(cls, parser, {"sym_name": StringAttr(name), "context": StringAttr(ctx)})

    def print(self, printer: Printer) -> None:
        _print_region_op(self, printer, f" @{self.sym_name.data} {self.context.data}")

    # --- conversions ------------------------------------------------------------------------------------------
    def to_kernel(self) -> Kernel:
        sup = self.is_supervisor
        k = Kernel(self.sym_name.data, sup)
        for op in self.body.block.ops:
            if isinstance(op, KernelCallOp | RepeatOp):
                raise VerifyException(
                    f"asm.kernel @{self.sym_name.data}: {op.name} is not an instruction yet: run asm-lower-repeat "
                    "and asm-lower-calls first"
                )
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


_LINK_REGISTER = re.compile(r"\$m10\b")  # the supervisor's link register, written by its ABI name


def kernel_text(op: KernelOp) -> str:
    """Graphcore-syntax text of one kernel op, with each instruction's `comment` as a trailing `//` comment."""
    sup = op.is_supervisor
    out = [f".globl {op.sym_name.data}", ".supervisor" if sup else ".worker", f"{op.sym_name.data}:"]
    for o in op.body.block.ops:
        if isinstance(o, LabelOp):
            out.append(f"{o.label.data}:")
        elif isinstance(o, BundleOp):
            a, b = o.instructions
            out.append(f"    {{ {a.to_instr(sup).text(sup)} ; {b.to_instr(sup).text(sup)} }}")
        elif isinstance(o, AsmInstructionOp):
            text = o.to_instr(sup).text(sup)
            line = "    " + (_LINK_REGISTER.sub("$lr", text) if sup else text)
            out.append(line + (f"  // {o.comment.data}" if o.comment is not None else ""))
        else:
            out.append(f"    // {o.name} (not lowered)")
    return "\n".join(out) + "\n"


def module_to_kernels(module: ModuleOp) -> list[Kernel]:
    """Every `asm.kernel` of a module, in order."""
    return [op.to_kernel() for op in module.walk() if isinstance(op, KernelOp)]


def kernels_to_module(kernels: list[Kernel]) -> ModuleOp:
    return ModuleOp([KernelOp.from_kernel(k) for k in kernels])


# --- the program level -----------------------------------------------------------------------------------------


def dense_of(array: np.ndarray) -> DenseIntOrFPElementsAttr:
    """A numpy integer array as a dense tensor attribute (its bytes as they are: printed as hex, parsed back)."""
    a = np.ascontiguousarray(array)
    width = a.dtype.itemsize * 8
    return DenseIntOrFPElementsAttr(TensorType(IntegerType(width), list(a.shape)), BytesAttr(a.tobytes()))


def array_of(attr: DenseIntOrFPElementsAttr, dtype, copy: bool = False) -> np.ndarray:
    """The numpy array of a dense tensor attribute made by `dense_of` (dtype: the element type to read it as): a
    read-only view of the attribute's bytes unless `copy`."""
    shape = attr.get_shape()
    a = np.frombuffer(attr.data.data, dtype=dtype).reshape(shape)
    return a.copy() if copy else a


def _dense(op: IRDLOperation, name: str, dtype, required: bool = True) -> np.ndarray | None:
    attr = op.attributes.get(name)
    if attr is None and not required:
        return None
    if not isinstance(attr, DenseIntOrFPElementsAttr):
        raise VerifyException(f"{op.name}: attribute '{name}' must be a dense integer tensor")
    if attr.get_element_type() != IntegerType(np.dtype(dtype).itemsize * 8):
        raise VerifyException(
            f"{op.name}: attribute '{name}' must hold i{np.dtype(dtype).itemsize * 8} elements"
        )
    return array_of(attr, dtype)


def _int_attr(op: IRDLOperation, name: str) -> int:
    attr = op.attributes.get(name)
    if not isinstance(attr, IntegerAttr):
        raise VerifyException(f"{op.name}: attribute '{name}' must be an integer")
    return int(attr.value.data)


def _str_attr(op: IRDLOperation, name: str, default: str | None = None) -> str:
    attr = op.attributes.get(name)
    if attr is None and default is not None:
        return default
    if not isinstance(attr, StringAttr):
        raise VerifyException(f"{op.name}: attribute '{name}' must be a string")
    return attr.data


def _parse_hex_or_int(parser: Parser) -> int:
    return parser.parse_integer(allow_boolean=False, allow_negative=False)


@irdl_op_definition
class KernelCallOp(IRDLOperation):
    """A call of a library routine (`entry`) with its frame or table at `frame` (`$m0`). With `header` the frame
    opens with an active word (8 bytes before the routine's own frame): unless `all_active`, a tile whose word is
    0 skips the call. Without `header`, the routine reads its table at `frame` (every tile calls it)."""

    name = "asm.kernel_call"
    entry = prop_def(StringAttr)
    frame = prop_def(IntegerAttr)

    def __init__(self, entry: str, frame: int, attributes: dict[str, Attribute] | None = None):
        super().__init__(
            properties={"entry": StringAttr(entry), "frame": IntegerAttr(int(frame), i32)},
            attributes=attributes or {},
        )

    @property
    def header(self) -> bool:
        return "header" in self.attributes

    @property
    def all_active(self) -> bool:
        return "all_active" in self.attributes

    def verify_(self) -> None:
        if int(self.frame.value.data) < 0 or int(self.frame.value.data) % 4:
            raise VerifyException(f"asm.kernel_call @{self.entry.data}: frame address must be word aligned")
        p = self.parent_op()
        if not isinstance(p, KernelOp | RepeatOp):
            raise VerifyException("asm.kernel_call: must be inside a supervisor asm.kernel or an asm.repeat")

    @classmethod
    def parse(cls, parser: Parser) -> KernelCallOp:
        entry = parser.parse_symbol_name().data
        parser.parse_keyword("frame")
        frame = _parse_hex_or_int(parser)
        attrs = parser.parse_optional_attr_dict()
        return cls(entry, frame, attrs)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.entry.data} frame {int(self.frame.value.data):#x}")
        printer.print_op_attributes(self.attributes)


@irdl_op_definition
class RepeatOp(IRDLOperation):
    """The layer loop over one copy of its body's code (see the module docstring). Attributes: `count`,
    `record` (the loop's counter and table pointers), `forward_table`, `reset_table`, `table_words` (the width of
    both tables per tile), `patch_words` (tensor<P x i64>: the word addresses that change per iteration) and
    `patch_strides` (tensor<tiles x P x i32>: each word's change per iteration on each tile, modulo 2^32), `what`."""

    name = "asm.repeat"
    count = prop_def(IntegerAttr)
    record = prop_def(IntegerAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, count: int, record: int, ops: list[Operation], attributes: dict[str, Attribute]):
        super().__init__(
            properties={"count": IntegerAttr(int(count), i32), "record": IntegerAttr(int(record), i32)},
            attributes=attributes,
            regions=[Region(Block(ops))],
        )

    def patches(self) -> tuple[np.ndarray, np.ndarray]:
        """(word addresses [P] int64, strides [tiles, P] uint32)."""
        words = _dense(self, "patch_words", np.int64)
        strides = _dense(self, "patch_strides", np.uint32)
        return words, strides

    def verify_(self) -> None:
        if int(self.count.value.data) < 1:
            raise VerifyException("asm.repeat: the iteration count must be at least 1")
        for name in ("forward_table", "reset_table", "table_words"):
            _int_attr(self, name)
        words, strides = self.patches()
        if words.ndim != 1 or strides.ndim != 2 or strides.shape[1] != len(words):
            raise VerifyException(
                f"asm.repeat: patch_strides must be [tiles, {len(words)}] for {len(words)} patch_words, got "
                f"{list(strides.shape)}"
            )
        bad = (words < 0) | (words % 4 != 0)
        if bad.any():
            raise VerifyException(
                f"asm.repeat: patch word {int(np.nonzero(bad)[0][0])} at {int(words[bad][0])} is not a word address"
            )
        for name in ("forward_table", "reset_table"):
            if _int_attr(self, name) < 0 or _int_attr(self, name) % 4:
                raise VerifyException(
                    f"asm.repeat: {name} must be a word address, got {_int_attr(self, name)}"
                )
        most = int((strides != 0).sum(1).max(initial=0))
        width = _int_attr(self, "table_words")
        if 1 + 2 * most > width:
            t = int(np.argmax((strides != 0).sum(1)))
            raise VerifyException(
                f"asm.repeat: tile {t} patches {most} words, its {width}-word tables hold {(width - 1) // 2}"
            )
        for op in self.body.block.ops:
            if isinstance(op, RepeatOp):
                raise VerifyException("asm.repeat: nested loops are not lowered")

    @classmethod
    def parse(cls, parser: Parser) -> RepeatOp:
        count = parser.parse_integer(allow_boolean=False, allow_negative=False)
        parser.parse_keyword("record")
        record = _parse_hex_or_int(parser)
        props = {"count": IntegerAttr(count, i32), "record": IntegerAttr(record, i32)}
        return _parse_region_op(cls, parser, props)

    def print(self, printer: Printer) -> None:
        _print_region_op(
            self, printer, f" {int(self.count.value.data)} record {int(self.record.value.data):#x}"
        )


@irdl_op_definition
class DataOp(IRDLOperation):
    """Initial bytes of tile memory at `address` (see the module docstring)."""

    name = "asm.data"
    label = prop_def(StringAttr)
    address = prop_def(IntegerAttr)

    def __init__(self, label: str, address: int, attributes: dict[str, Attribute]):
        super().__init__(
            properties={"label": StringAttr(label), "address": IntegerAttr(int(address), i32)},
            attributes=attributes,
        )

    def rows(self) -> np.ndarray:
        return _dense(self, "data", np.uint8)

    def tiles(self) -> np.ndarray | None:
        return _dense(self, "tiles", np.int32, required=False)

    def relocs(self) -> tuple[np.ndarray, list[str]]:
        r = _dense(self, "relocs", np.int32, required=False)
        names = self.attributes.get("reloc_labels")
        if r is None:
            return np.zeros((0, 3), np.int32), []
        if not isinstance(names, ArrayAttr) or not all(isinstance(x, StringAttr) for x in names.data):
            raise VerifyException(
                f'asm.data "{self.label.data}": relocs need reloc_labels (an array of strings)'
            )
        return r, [x.data for x in names.data]

    def verify_(self) -> None:
        data = self.rows()
        what = f'asm.data "{self.label.data}"'
        if data.ndim != 2:
            raise VerifyException(f"{what}: data must be [rows, bytes]")
        tiles = self.tiles()
        if tiles is not None and tiles.shape != (data.shape[0],):
            raise VerifyException(f"{what}: {data.shape[0]} rows of data for {tiles.size} tiles")
        r, names = self.relocs()
        if len(r):
            if r.ndim != 2 or r.shape[1] != 3:
                raise VerifyException(f"{what}: relocs must be [n, 3] (row, word, label)")
            bad = (r[:, 0] >= data.shape[0]) | (r[:, 1] * 4 + 4 > data.shape[1]) | (r[:, 2] >= len(names))
            if (r < 0).any() or bad.any():
                raise VerifyException(f"{what}: a relocation lies outside its data or names no label")

    @classmethod
    def parse(cls, parser: Parser) -> DataOp:
        label = parser.parse_str_literal("the data's name")
        parser.parse_keyword("at")
        address = _parse_hex_or_int(parser)
        attrs = parser.parse_optional_attr_dict()
        return cls(label, address, attrs)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.label.data)
        printer.print_string(f" at {int(self.address.value.data):#x}")
        printer.print_op_attributes(self.attributes)


BINDING_KINDS = ("parameter", "input", "output", "debug")


@irdl_op_definition
class BindingOp(IRDLOperation):
    """A host tensor's place on the device: `kind` (parameter, input, output, debug), `sym` (its name), and
    attributes `shape`, `dtype`, `chunks` (tensor<n x 7 x i64>), `scale`, `via`, `via_scale`."""

    name = "asm.binding"
    kind = prop_def(StringAttr)
    sym = prop_def(StringAttr)

    def __init__(self, kind: str, sym: str, attributes: dict[str, Attribute]):
        super().__init__(properties={"kind": StringAttr(kind), "sym": StringAttr(sym)}, attributes=attributes)

    def verify_(self) -> None:
        if self.kind.data not in BINDING_KINDS:
            raise VerifyException(f"asm.binding: kind must be one of {BINDING_KINDS}, got {self.kind.data!r}")
        c = _dense(self, "chunks", np.int64)
        if c.ndim != 2 or c.shape[1] not in (5, 7):
            raise VerifyException(f'asm.binding "{self.sym.data}": chunks must be [n, 7] (or [n, 5])')
        _str_attr(self, "dtype")

    @classmethod
    def parse(cls, parser: Parser) -> BindingOp:
        kind = parser.parse_identifier("a binding kind")
        sym = parser.parse_str_literal("the binding's name")
        attrs = parser.parse_optional_attr_dict()
        return cls(kind, sym, attrs)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.kind.data} ")
        printer.print_string_literal(self.sym.data)
        printer.print_op_attributes(self.attributes)


@irdl_op_definition
class ProgramOp(IRDLOperation):
    """A whole tile program: code, data and host bindings (see the module docstring)."""

    name = "asm.program"
    sym_name = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, name: str, ops: list[Operation], attributes: dict[str, Attribute]):
        super().__init__(
            properties={"sym_name": StringAttr(name)}, attributes=attributes, regions=[Region(Block(ops))]
        )

    def kernels(self) -> list[KernelOp]:
        return [o for o in self.body.block.ops if isinstance(o, KernelOp)]

    def main(self) -> KernelOp:
        entry = _str_attr(self, "entry", "main")
        for k in self.kernels():
            if k.sym_name.data == entry:
                return k
        raise VerifyException(f"asm.program @{self.sym_name.data}: no asm.kernel @{entry}")

    def metadata(self) -> dict:
        return json.loads(_str_attr(self, "metadata", "{}"))

    def set_metadata(self, metadata: dict) -> None:
        self.attributes["metadata"] = StringAttr(json.dumps(metadata, separators=(",", ":")))

    @property
    def linked(self) -> bool:
        return isinstance(self.attributes.get("linked"), UnitAttr)

    def verify_(self) -> None:
        for name in ("tiles", "code_base", "code_end"):
            _int_attr(self, name)
        _str_attr(self, "target")
        try:
            self.metadata()
        except ValueError as e:
            raise VerifyException(f"asm.program @{self.sym_name.data}: metadata is not JSON: {e}") from None
        for op in self.body.block.ops:
            if not isinstance(op, KernelOp | DataOp | BindingOp):
                raise VerifyException(
                    f"asm.program: unexpected op '{op.name}' (kernels, data and bindings only)"
                )
        self.main()

    @classmethod
    def parse(cls, parser: Parser) -> ProgramOp:
        name = parser.parse_symbol_name().data
        return _parse_region_op(cls, parser, {"sym_name": StringAttr(name)})

    def print(self, printer: Printer) -> None:
        _print_region_op(self, printer, f" @{self.sym_name.data}")


def program_of(module: ModuleOp) -> ProgramOp | None:
    """The module's `asm.program`, if it has one."""
    return next((o for o in module.ops if isinstance(o, ProgramOp)), None)


ASM = Dialect(
    "asm",
    [
        KernelOp,
        BundleOp,
        LabelOp,
        KernelCallOp,
        RepeatOp,
        DataOp,
        BindingOp,
        ProgramOp,
        *OPS_BY_MNEMONIC.values(),
    ],
    [],
)
