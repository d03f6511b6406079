"""The project's parse entry: checks xDSL 0.74's parser does not make, before and after it parses.

- `check_string_literals(text, name)`: every string literal ends on its line with valid escapes. xDSL 0.74 lexes a
  string with `"(?:[^"\\\\\\n\\v\\f]+|\\\\(...))*"`, whose nested repetition backtracks exponentially when no closing quote
  follows (a file truncated inside a `dense<"0x...` ran for minutes). This scan is linear (a possessive
  repetition of the same language), so the lexer only ever sees literals it matches at once.
- `dominance_failure(module)`: a use of a value before its definition (xDSL's parser resolves forward references
  and its verifier does not check dominance), or of a value not visible from the use.
- `parse_module(ctx, text, name)`: both checks around `IpuParser`.
- `IpuParser`: xDSL's `Parser`, checking a dense attribute's type against a constraint built once (xDSL 0.74
  rebuilds it for every `dense<...>`, ~5 ms each: most of the time to parse a placed module's data frames).

Diagnostics are `SourceError`s (an xDSL `DiagnosticException`) in MLIR's `file:line:col: error: message` form.
"""

from __future__ import annotations

import functools
import re

from xdsl.context import Context
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, OpResult
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException

# xDSL's string literal (xdsl.utils.mlir_lexer), as a possessive repetition: linear, same language.
_STRING = re.compile(r'"(?:[^"\\\n\v\f]|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"')
_STRING_START_OR_COMMENT = re.compile(r'"|//')


class SourceError(DiagnosticException):
    """An input error located in the source text."""


def location(text: str, offset: int, name: str) -> str:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"{name}:{line}:{col}"


def check_string_literals(text: str, name: str = "<input>", line_offset: int = 0) -> None:
    """Raises a SourceError at the first string literal xDSL's lexer would not match (see the module docstring)."""
    pos = 0
    n = len(text)
    while pos < n:
        m = _STRING_START_OR_COMMENT.search(text, pos)
        if m is None:
            return
        if m.group() == "//":
            nl = text.find("\n", m.end())
            pos = n if nl < 0 else nl + 1
            continue
        lit = _STRING.match(text, m.start())
        if lit is not None:
            pos = lit.end()
            continue
        # Why it does not match: the first character the literal cannot contain.
        bad = re.compile(r'(?:[^"\\\n\v\f]|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+').match(text, m.start() + 1).end()
        where = location(text, m.start(), name)
        if line_offset:
            line, col = where.rsplit(":", 2)[1:]
            where = f"{name}:{int(line) + line_offset}:{col}"
        if bad >= n:
            why = "unterminated string literal: the input ends inside it"
        elif text[bad] == "\\":
            why = f"invalid escape sequence {text[bad : bad + 3]!r} in string literal"
        else:
            why = "unterminated string literal: it reaches the end of the line"
        raise SourceError(f"{where}: error: {why}")


def dominance_failure(module: Operation) -> tuple[Operation, str] | None:
    """(op, message) of the first operand whose definition does not dominate its use, or None.

    Within a block, the defining op must come before the user (or before the user's ancestor in that block); a
    value defined in another block must belong to a block enclosing the use. Regions of more than one block are
    checked within each block only (this IR has none)."""
    position: dict[Operation, int] = {}

    def index_block(block: Block) -> None:
        for i, op in enumerate(block.ops):
            position[op] = i

    for op in module.walk():
        for region in op.regions:
            for block in region.blocks:
                index_block(block)

    for op in module.walk():
        for k, operand in enumerate(op.operands):
            if isinstance(operand, OpResult):
                def_op = operand.op
                def_block = def_op.parent_block()
                if def_block is None:
                    return op, f"operand #{k} is the result of an operation that is not in the IR"
                user = op
                while user is not None and user.parent_block() is not def_block:
                    user = user.parent_op()
                name = f"%{operand.name_hint}" if operand.name_hint else "a value"
                if user is None:
                    if def_block.parent is not None and len(def_block.parent.blocks) > 1:
                        continue  # another block of a CFG region: not checked here
                    return op, f"operand #{k} ({name}) is defined in a region that does not enclose this use"
                if user is def_op or position[def_op] >= position[user]:
                    return op, f"operand #{k} ({name}) is used before its definition ('{def_op.name}' below)"
            elif isinstance(operand, BlockArgument):
                block = operand.block
                user = op
                while user is not None and user.parent_block() is not block:
                    user = user.parent_op()
                if user is None:
                    name = f"%{operand.name_hint}" if operand.name_hint else "a value"
                    return (
                        op,
                        f"operand #{k} ({name}) is an argument of a block that does not enclose this use",
                    )
    return None


_FLOAT_MAX = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38}
INT32 = 2**31


def _attribute_problem(attr, depth: int = 0) -> str | None:
    """Why an attribute value cannot be meant: a non-finite float or one its type cannot hold, an integer outside
    its type (or, untyped, outside int32: ids, sizes and addresses), a dense float table holding NaN or Inf."""
    import math

    import numpy as np
    from xdsl.dialects.builtin import (
        ArrayAttr,
        DenseIntOrFPElementsAttr,
        DictionaryAttr,
        FloatAttr,
        IndexType,
        IntAttr,
        IntegerAttr,
        IntegerType,
    )
    from xdsl.ir import ParametrizedAttribute

    if depth > 8:
        return None
    if isinstance(attr, FloatAttr):
        v = attr.value.data
        if not math.isfinite(v):
            return f"{v} is not finite"
        limit = _FLOAT_MAX.get(str(attr.type))
        if limit is not None and abs(v) > limit:
            return f"{v} does not fit {attr.type} (largest {limit:g})"
        return None
    if isinstance(attr, IntegerAttr):
        v, t = attr.value.data, attr.type
        if isinstance(t, IntegerType):
            w = t.width.data
            if not -(2 ** (w - 1)) <= v < 2**w:
                return f"{v} does not fit {t}"
        elif isinstance(t, IndexType) and not -(2**63) <= v < 2**63:
            return f"{v} does not fit index"
        return None
    if isinstance(attr, IntAttr):
        return None if -INT32 <= attr.data < INT32 else f"{attr.data} does not fit in 32 bits"
    if isinstance(attr, DenseIntOrFPElementsAttr):
        et = attr.get_element_type()
        if str(et) in ("f16", "f32", "f64"):
            vals = np.asarray(attr.get_values(), dtype=np.float64)
            if vals.size and not np.isfinite(vals).all():
                return "a dense float table holds NaN or Inf"
        return None
    if isinstance(attr, ArrayAttr):
        items = attr.data
    elif isinstance(attr, DictionaryAttr):
        items = attr.data.values()
    elif isinstance(attr, ParametrizedAttribute):
        items = attr.parameters
    else:
        return None
    for a in items:
        if (why := _attribute_problem(a, depth + 1)) is not None:
            return why
    return None


def attribute_failure(module: Operation) -> tuple[Operation, str] | None:
    """(op, message) of the first op with an attribute value that cannot be meant (`_attribute_problem`)."""
    seen: dict[int, str | None] = {}
    for op in module.walk():
        for kind, attrs in (("property", op.properties), ("attribute", op.attributes)):
            for key, attr in attrs.items():
                k = id(attr)
                if k not in seen:
                    seen[k] = _attribute_problem(attr)
                if seen[k] is not None:
                    return op, f"{kind} '{key}': {seen[k]}"
    return None


def layout_failure(module: Operation) -> tuple[Operation, str] | None:
    """(op, message) of the first op whose result layout (`tile.layout`) disagrees with the value it lays out:
    the layout's element type must be the result's, its shape the result's, and its FP8 scale the producer's (an
    `nn.cast`'s `scale`; 0 for any non-FP8 element type). A consumer reads the producer's bytes through this
    layout, so a disagreement computes wrong numbers without an error anywhere else."""
    from xdsl.dialects.builtin import TensorType

    from ipu.dialects import tile as tl

    for op in module.walk():
        lay = op.attributes.get("tile.layout")
        if not isinstance(lay, tl.LayoutAttr) or len(op.results) != 1:
            continue
        t = op.results[0].type
        if not isinstance(t, TensorType):
            continue
        if lay.dtype != t.element_type:
            return op, f"tile.layout has dtype {lay.dtype} but the result is {t}"
        if tuple(lay.tensor_shape) != tuple(t.get_shape()):
            return op, f"tile.layout describes shape {list(lay.tensor_shape)} but the result is {t}"
        fp8 = str(t.element_type).startswith("f8")
        scale = lay.scale.data
        if not fp8 and scale:
            return op, f"tile.layout has FP8 scale {scale} for a {t.element_type} result"
        if fp8 and op.name == "nn.cast" and scale != op.fp8_scale:
            return op, f"tile.layout has FP8 scale {scale} but the cast produces scale {op.fp8_scale}"
    return None


def memory_failure(module: Operation) -> tuple[Operation, str] | None:
    """(op, message) of the first buffer placed (`#memory.buffer`) outside the SRAM its function's `memory.plan`
    names ([base, end), every tile class and sequence member), or of a negative size."""
    import numpy as np
    from xdsl.dialects.builtin import ArrayAttr

    from ipu.dialects import memory as mem

    for plan in [o for o in module.walk() if isinstance(o, mem.PlanOp)]:
        block = plan.parent_block()
        if block is None or len(plan.sram.data) != 3:
            continue
        base, _, end = (int(a.value.data) for a in plan.sram.data)
        classes = plan.num_classes.value.data
        for op in block.walk() if hasattr(block, "walk") else ():
            for key, attr in [*op.properties.items(), *op.attributes.items()]:
                if isinstance(attr, mem.BufferAttr):
                    bufs = [attr]
                elif isinstance(attr, ArrayAttr):
                    bufs = list(attr.data)
                else:
                    continue
                for i, b in enumerate(bufs):
                    if not isinstance(b, mem.BufferAttr):
                        continue
                    addr = mem.table_values(b.addr, classes)
                    size = mem.table_values(b.bytes_, classes)
                    stride = mem.table_values(b.stride, classes)
                    align = b.align.data
                    step = np.where(stride > 0, stride, -(-size // align) * align)
                    last = addr + size + (b.seq.data - 1) * step
                    held = addr >= 0
                    if held.any() and ((size < 0) & held).any():
                        return op, f"{key}[{i}]: negative size {int(size[(size < 0) & held][0])}"
                    bad = held & ((addr < base) | (last > end))
                    if bad.any():
                        c = int(np.argmax(bad))
                        return op, (
                            f"{key}[{i}]: tile class {c}: [{int(addr[c]):#x}, {int(last[c]):#x}) is outside the "
                            f"SRAM [{base:#x}, {end:#x}) of the memory plan"
                        )
    return None


def ir_failure(module: Operation) -> tuple[Operation, str] | None:
    """The first dominance, attribute, layout or placement failure (`dominance_failure`, `attribute_failure`,
    `layout_failure`, `memory_failure`)."""
    return (
        dominance_failure(module)
        or attribute_failure(module)
        or layout_failure(module)
        or memory_failure(module)
    )


def check_dominance(module: Operation, name: str = "<input>", where=None) -> None:
    """Raises a SourceError at the first use not dominated by its definition; `where(op)` gives a location."""
    failure = ir_failure(module)
    if failure is None:
        return
    op, message = failure
    loc = where(op) if where is not None else None
    raise SourceError(f"{loc or name}: error: '{op.name}' op {message}")


def run_parser(parser: Parser, implicit: bool, text: str, name: str, line_offset: int = 0) -> ModuleOp:
    """parser.parse_module(implicit); an exception other than a parse or verify error while it parses (e.g. an
    OverflowError of xDSL packing `1.0e+300 : f32`) is the input's fault: a SourceError at the parser's position."""
    from xdsl.utils.exceptions import ParseError, VerifyException

    def here() -> str:
        where = location(text, parser._current_token.span.start, name)
        if line_offset:
            _, line, col = where.rsplit(":", 2)
            where = f"{name}:{int(line) + line_offset}:{col}"
        return where

    try:
        return parser.parse_module(implicit)
    except VerifyException as e:  # an attribute's verifier, run as the parser builds it
        if e.__class__ is not VerifyException:
            raise
        message = str(e).removeprefix("Operation does not verify: ").splitlines()[0]
        raise SourceError(f"{here()}: error: {message}") from None
    except (ParseError, DiagnosticException, RecursionError):
        raise
    except Exception as e:
        raise SourceError(f"{here()}: error: cannot parse this value ({type(e).__name__}: {e})") from None


class IpuParser(Parser):
    """xDSL's parser; `_parse_dense_literal_type` makes xDSL's check with a constraint built once."""

    def _parse_dense_literal_type(self):
        type = self.expect(self.parse_optional_type, "Dense attribute must be typed!")
        if not _dense_type_constraint().verifies(type):
            self.raise_error(
                "Expected memref, vector or tensor type of integer, index, float, or complex type"
            )
        if any(dim == DYNAMIC_INDEX for dim in type.get_shape()):
            self.raise_error("Dense literal attribute should have a static shape.")
        return type


@functools.cache
def _dense_type_constraint():
    from xdsl.dialects.builtin import AnyFloat, ComplexType, IndexType, IntegerType, RankedStructure
    from xdsl.irdl import base

    return base(RankedStructure[IntegerType | IndexType | AnyFloat | ComplexType])


def parse_module(
    ctx: Context,
    text: str,
    name: str = "<input>",
    parser_cls: type[Parser] = IpuParser,
    implicit: bool = True,
) -> ModuleOp:
    """xDSL's parse of `text`, with the string-literal scan before, the dominance check and verification after."""
    check_string_literals(text, name)
    module = run_parser(parser_cls(ctx, text, name), implicit, text, name)
    check_dominance(module, name)
    verify_module(module, name)
    return module


def read_text(path: str, data: bytes | None = None) -> str:
    """A file's (or stdin's, `-`) text; not UTF-8 is a diagnostic naming the file and the byte offset."""
    import sys

    if data is None:
        data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise SourceError(
            f"{path}: error: not UTF-8 text (byte {e.start}: {data[e.start : e.start + 1]!r})"
        ) from None


def verify_module(module: Operation, name: str = "<input>") -> None:
    """module.verify() and the dominance check, failing with ONE diagnostic naming the op (its index in the walk
    and its enclosing symbol) instead of xDSL's dump of the whole module."""
    from xdsl.utils.exceptions import VerifyException

    try:
        module.verify()
    except VerifyException as whole:
        for i, op in enumerate(module.walk()):
            try:
                op.verify(verify_nested_ops=False)
            except VerifyException as e:
                message = str(e).removeprefix("Operation does not verify: ").splitlines()[0]
                if not message.startswith(f"'{op.name}'") and not message.startswith(op.name):
                    message = f"'{op.name}' op {message}"
                raise SourceError(f"{name}: op #{i}{enclosing_symbol(op)}: error: {message}") from None
        raise SourceError(f"{name}: error: {str(whole).splitlines()[0]}") from None
    failure = ir_failure(module)
    if failure is not None:
        op, message = failure
        i = next(i for i, o in enumerate(module.walk()) if o is op)
        raise SourceError(f"{name}: op #{i}{enclosing_symbol(op)}: error: '{op.name}' op {message}")


def enclosing_symbol(op: Operation) -> str:
    """` in @name` of the nearest enclosing symbol (a func.func), or "" at top level."""
    parent = op.parent_op()
    while parent is not None:
        sym = parent.properties.get("sym_name") or parent.attributes.get("sym_name")
        if sym is not None:
            return f" in @{sym.data}"
        parent = parent.parent_op()
    return ""
