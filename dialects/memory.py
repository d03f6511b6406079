"""The `memory` dialect: where every buffer lives in every tile's SRAM, and when.

This level records the decisions of `memory-plan` on top of the exchange level (nothing is moved or rewritten):

- `#memory.buffer<...>` places one buffer (one operator's tensor, not one tile's shard) on all tiles that hold it:
  `addr` (start address; the first member for a Repeat sequence) and `bytes` (per-tile bytes of one member) are
  either one integer (the same on every tile: the regular case) or a dense [classes, 1] i32 table indexed by the
  tile class of `memory.plan` (tiles with identical buffer sizes are one class and get one placement); classes
  that do not hold the buffer have addr -1 and bytes 0. `live = [first, last]` is the lifetime in events (inclusive; see below); `region` is "r0"
  (non-interleaved, executable), "r1" (interleaved) or "any"; `align` the start alignment. Flags: `resident`
  (lives for the whole program over every inference: parameters, support), `host` (host-visible: inputs, outputs
  and parameters never borrow the host aperture). `seq = N` with `stride` (int or class table) makes the buffer a
  Repeat sequence of N members at a fixed stride: member i is at addr + i * stride (stacked layer parameters that
  `tile.repeat` iterates over).
- The asm lowering's own per-op storage is attached to the op that needs it: `memory.lowering_frames` (its
  kernel frames and exchange / copy tables, in the exchange_tables span of region 0) and `memory.lowering_data`
  (its kernel-format data, in the lowering_scratch span), each one resident `#memory.buffer`; the `memory.reserve`
  ops of those kinds then hold only the data no op owns (the zero constant, loop patch tables).
- Buffers are attached to the op defining them, as the discardable attribute `memory.buffers`: an array with one
  `#memory.buffer` per result. A `tile.repeat` carries `memory.args` for its carried block arguments (own
  buffers); its stacked block arguments are the current member of the operand's sequence and have no entry.
- `memory.plan` (one per function, first op): the target's memory map (`sram = [base, region-1 base, end]`, the
  host `aperture`), the number of `events`, the `host_events` at which the aperture carries host traffic, the
  tile classes (`classes`, a [tiles, 1] table tile -> class) and each class's high-water address (`high`).
- `memory.reserve` (after the plan): support storage, one op per kind ("code" and "tile_program" in region 0,
  "exchange_tables", "runtime_state" with the worker and supervisor stacks inside it, "host_descriptors",
  "host_aperture", "lowering_scratch" = the span the asm lowering keeps for its own small data that belongs to
  no op (with per-op data, each op's part is that op's `memory.lowering_data`), "kernel_scratch" =
  the bytes of one kernel scratch element an op uses, live at its events only, "kernel_scratch_upload" = the
  scratch elements at the host events, where the package's image initialises them), each with its
  `#memory.buffer`.

Events number the program points of a function in order: event 0 is the host's input phase, then every
`exchange.phase` and every compute operator gets one event (a `tile.repeat` body is numbered once, between the
ops before and after the repeat: its placement serves every iteration), and the last event is the host's output
phase. `ipu.passes.memory_plan.number_events` is the one definition.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i32,
)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute
from xdsl.irdl import IRDLOperation, ParsePropInAttrDict, irdl_attr_definition, irdl_op_definition, prop_def
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from ipu.backend.target import IPU21

BUFFERS_ATTR = "memory.buffers"  # discardable: one #memory.buffer per result of the op
ARGS_ATTR = "memory.args"  # discardable, on tile.repeat: one #memory.buffer per carried block argument
# Discardable, on any op the asm lowering keeps data for: the op's own kernel frames and tables (region 0) and its
# kernel data (kernel-format biases, per-iteration data, outputs kept for the host), each one #memory.buffer at
# the same address on every tile, resident (read at every inference), sized by `lowering-storage` (`lowering.data`).
FRAMES_ATTR = "memory.lowering_frames"
DATA_ATTR = "memory.lowering_data"
REGIONS = ("r0", "r1", "any")
RESERVE_KINDS = (
    "code",
    "tile_program",
    "exchange_tables",
    "runtime_state",
    "host_descriptors",
    "host_aperture",
    "lowering_scratch",
    "kernel_scratch",
    "kernel_scratch_upload",
)


def class_table(values: np.ndarray, absent: int = -1) -> Attribute:
    """A per-class int column (-1 marks classes that do not hold the buffer): one IntAttr when every class holds
    the buffer with the same value, else a [C, 1] table with `absent` for the classes that do not hold it."""
    values = np.asarray(values, dtype=np.int64).reshape(-1)
    present = values[values >= 0]
    if present.size == values.size and present.size and np.all(present == present[0]):
        return IntAttr(int(present[0]))
    col = np.ascontiguousarray(np.where(values >= 0, values, absent).astype(np.int32)[:, None])
    return DenseIntOrFPElementsAttr(TensorType(i32, list(col.shape)), BytesAttr(col.tobytes()))


def table_values(attr: Attribute, num_classes: int) -> np.ndarray:
    """A per-class column as numpy [classes] (an IntAttr repeats its value)."""
    if isinstance(attr, IntAttr):
        return np.full(num_classes, attr.data, np.int64)
    assert isinstance(attr, DenseIntOrFPElementsAttr)
    return np.frombuffer(attr.data.data, dtype=np.int32).astype(np.int64)


def _check_table(attr: Attribute, key: str) -> None:
    if isinstance(attr, IntAttr):
        return
    if not isinstance(attr, DenseIntOrFPElementsAttr) or attr.get_element_type() != i32:
        raise VerifyException(f"#memory.buffer: {key} must be an integer or a dense i32 [classes, 1] table")
    shape = attr.get_shape()
    if len(shape) != 2 or shape[1] != 1:
        raise VerifyException(f"#memory.buffer: {key} table has shape {list(shape)}, expected [classes, 1]")


@irdl_attr_definition
class BufferAttr(ParametrizedAttribute):
    """#memory.buffer<addr = A, bytes = B, live = [f, l], region = "any", align = 8[, seq = N, stride = S]
    [, resident][, host]>: the placement of one buffer on all its tiles (see the module docstring)."""

    name = "memory.buffer"
    addr: Attribute
    bytes_: Attribute
    live: ArrayAttr[IntAttr]
    region: StringAttr
    align: IntAttr
    seq: IntAttr
    stride: Attribute
    resident: IntAttr
    host: IntAttr

    def __init__(
        self,
        addr: Attribute | int,
        nbytes: Attribute | int,
        live: tuple[int, int],
        region: str = "any",
        align: int = 8,
        seq: int = 1,
        stride: Attribute | int = 0,
        resident: bool = False,
        host: bool = False,
    ):
        wrap = lambda v: IntAttr(v) if isinstance(v, int) else v  # noqa: E731
        super().__init__(
            wrap(addr),
            wrap(nbytes),
            ArrayAttr([IntAttr(live[0]), IntAttr(live[1])]),
            StringAttr(region),
            IntAttr(align),
            IntAttr(seq),
            wrap(stride),
            IntAttr(int(resident)),
            IntAttr(int(host)),
        )

    @property
    def lifetime(self) -> tuple[int, int]:
        return (self.live.data[0].data, self.live.data[1].data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        kv: dict[str, object] = {}

        def int_or_table() -> Attribute:
            value = parser.parse_optional_integer()
            if value is not None:
                return IntAttr(value)
            return parser.parse_attribute()

        def one() -> None:
            key = parser.parse_identifier()
            if key in ("resident", "host"):
                kv[key] = True
                return
            parser.parse_punctuation("=")
            if key in ("addr", "bytes", "stride"):
                kv[key] = int_or_table()
            elif key == "live":
                kv[key] = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)
            elif key == "region":
                kv[key] = parser.parse_str_literal()
            elif key in ("align", "seq"):
                kv[key] = parser.parse_integer()
            else:
                parser.raise_error(
                    f"unknown key '{key}' in #memory.buffer, expected addr, bytes, live, region, align, seq, "
                    "stride, resident, host"
                )

        parser.parse_comma_separated_list(parser.Delimiter.ANGLE, one)
        for key in ("addr", "bytes", "live"):
            if key not in kv:
                parser.raise_error(f"#memory.buffer needs '{key}'")
        live = kv["live"]
        if len(live) != 2:  # type: ignore[arg-type]
            parser.raise_error("#memory.buffer: live is [first, last]")
        return (
            kv["addr"],
            kv["bytes"],
            ArrayAttr([IntAttr(x) for x in live]),  # type: ignore[union-attr]
            StringAttr(kv.get("region", "any")),  # type: ignore[arg-type]
            IntAttr(kv.get("align", 8)),  # type: ignore[arg-type]
            IntAttr(kv.get("seq", 1)),  # type: ignore[arg-type]
            kv.get("stride", IntAttr(0)),
            IntAttr(int(kv.get("resident", False))),  # type: ignore[arg-type]
            IntAttr(int(kv.get("host", False))),  # type: ignore[arg-type]
        )

    def print_parameters(self, printer: Printer) -> None:
        def val(a: Attribute, hexa: bool = False) -> None:
            if isinstance(a, IntAttr):
                printer.print_string(f"{a.data:#x}" if hexa else str(a.data))
            else:
                printer.print_attribute(a)

        with printer.in_angle_brackets():
            printer.print_string("addr = ")
            val(self.addr, hexa=True)
            printer.print_string(", bytes = ")
            val(self.bytes_)
            f, last = self.lifetime
            printer.print_string(f", live = [{f}, {last}], region = ")
            printer.print_string_literal(self.region.data)
            printer.print_string(f", align = {self.align.data}")
            if self.seq.data != 1:
                printer.print_string(f", seq = {self.seq.data}, stride = ")
                val(self.stride)
            if self.resident.data:
                printer.print_string(", resident")
            if self.host.data:
                printer.print_string(", host")

    def verify(self) -> None:
        _check_table(self.addr, "addr")
        _check_table(self.bytes_, "bytes")
        _check_table(self.stride, "stride")
        f, last = self.lifetime
        if len(self.live.data) != 2 or not (0 <= f <= last):
            raise VerifyException(f"#memory.buffer: live [{f}, {last}] must satisfy 0 <= first <= last")
        if self.region.data not in REGIONS:
            raise VerifyException(
                f"#memory.buffer: region '{self.region.data}' is not one of {', '.join(REGIONS)}"
            )
        a = self.align.data
        if a <= 0 or a & (a - 1):
            raise VerifyException(f"#memory.buffer: align {a} is not a power of two")
        if self.seq.data < 1:
            raise VerifyException(f"#memory.buffer: seq {self.seq.data} must be >= 1")
        if isinstance(self.addr, IntAttr) and self.addr.data % a:
            raise VerifyException(f"#memory.buffer: addr {self.addr.data:#x} is not aligned to {a}")


def _i64(v: int) -> IntegerAttr:
    return IntegerAttr(int(v), 64)


def _ints(a: ArrayAttr) -> tuple[int, ...]:
    return tuple(x.value.data for x in a.data)


def _column(values: np.ndarray) -> Attribute:
    """A plan column: one integer when uniform, else a dense [n, 1] i32 table."""
    attr = class_table(values)
    return _i64(attr.data) if isinstance(attr, IntAttr) else attr


def _column_values(attr: Attribute, n: int) -> np.ndarray:
    if isinstance(attr, IntegerAttr):
        return np.full(n, attr.value.data, np.int64)
    return table_values(attr, n)


@irdl_op_definition
class PlanOp(IRDLOperation):
    """The function's memory plan: target map, events, tile classes (see the module docstring)."""

    name = "memory.plan"
    tiles = prop_def(IntegerAttr)
    events = prop_def(IntegerAttr)
    host_events = prop_def(ArrayAttr)
    sram = prop_def(ArrayAttr)
    aperture = prop_def(ArrayAttr)
    num_classes = prop_def(IntegerAttr)
    classes = prop_def(Attribute)
    high = prop_def(Attribute)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "attr-dict"

    def __init__(
        self,
        tiles: int,
        events: int,
        host_events: Sequence[int],
        sram: tuple[int, int, int],
        aperture: tuple[int, int],
        tile_class: np.ndarray,
        high: np.ndarray,
    ):
        num_classes = int(tile_class.max()) + 1 if tile_class.size else 0
        super().__init__(
            properties={
                "tiles": _i64(tiles),
                "events": _i64(events),
                "host_events": ArrayAttr([_i64(e) for e in host_events]),
                "sram": ArrayAttr([_i64(x) for x in sram]),
                "aperture": ArrayAttr([_i64(x) for x in aperture]),
                "num_classes": _i64(num_classes),
                "classes": _column(tile_class),
                "high": _column(high),
            }
        )

    def tile_class(self) -> np.ndarray:
        return _column_values(self.classes, self.tiles.value.data)

    def class_high(self) -> np.ndarray:
        return _column_values(self.high, self.num_classes.value.data)

    def verify_(self) -> None:
        n, c = self.tiles.value.data, self.num_classes.value.data
        if not 1 <= n <= IPU21.num_tiles:  # before the tile -> class table is expanded
            raise VerifyException(
                f"memory.plan: tiles = {n} is outside [1, {IPU21.num_tiles}] (the target's tiles)"
            )
        if not 1 <= c <= n:
            raise VerifyException(f"memory.plan: num_classes = {c} is outside [1, tiles = {n}]")
        for key, attr, rows in (("classes", self.classes, n), ("high", self.high, c)):
            if isinstance(attr, DenseIntOrFPElementsAttr):
                if tuple(attr.get_shape()) != (rows, 1):
                    raise VerifyException(
                        f"memory.plan: {key} table has shape {list(attr.get_shape())}, expected [{rows}, 1]"
                    )
            elif not isinstance(attr, IntegerAttr):
                raise VerifyException(
                    f"memory.plan: {key} must be an integer or a dense i32 [{rows}, 1] table"
                )
        tc = self.tile_class()
        if tc.size and (tc.min() < 0 or tc.max() >= c):
            raise VerifyException(f"memory.plan: a tile class is outside [0, {c})")
        if len(self.sram.data) != 3 or len(self.aperture.data) != 2:
            raise VerifyException("memory.plan: sram is [base, region-1 base, end], aperture is [start, end]")
        base, r1, end = _ints(self.sram)
        if not base <= r1 or not base < end:
            raise VerifyException(f"memory.plan: sram [{base:#x}, {r1:#x}, {end:#x}] is not ordered")
        events = self.events.value.data
        if any(not 0 <= e < events for e in _ints(self.host_events)):
            raise VerifyException(f"memory.plan: a host event is outside [0, {events})")


@irdl_op_definition
class ReserveOp(IRDLOperation):
    """Support storage of one kind (code, exchange tables, runtime state and stacks, host descriptors, aperture)."""

    name = "memory.reserve"
    kind = prop_def(StringAttr)
    buffer = prop_def(BufferAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$kind attr-dict"

    def __init__(self, kind: str, buffer: BufferAttr):
        super().__init__(properties={"kind": StringAttr(kind), "buffer": buffer})

    def verify_(self) -> None:
        if self.kind.data not in RESERVE_KINDS:
            raise VerifyException(
                f"memory.reserve: kind '{self.kind.data}' is not one of {', '.join(RESERVE_KINDS)}"
            )
        if self.kind.data in ("code", "tile_program") and self.buffer.region.data != "r0":
            raise VerifyException(
                f"memory.reserve: {self.kind.data} must be in region r0 (instruction fetch)"
            )


def buffers_of(attrs: Attribute | None) -> list[BufferAttr]:
    """The `memory.buffers` / `memory.args` array as a list (empty when absent)."""
    if isinstance(attrs, ArrayAttr):
        return [a for a in attrs.data if isinstance(a, BufferAttr)]
    return []


MEMORY = Dialect("memory", [PlanOp, ReserveOp], [BufferAttr])
