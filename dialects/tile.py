"""The `tile` dialect: every tensor has a layout over the tiles, every operator a plan.

This level sits between `nn` (whole tensors, no machine) and `exchange` (BSP supersteps with transfer schedules).
It models *where data lives* and *how each operator is split over tiles*, but not yet time or addresses:

- A layout (`#tile.layout`) cuts a tensor into a regular block grid; each block lives on one or more tiles
  (`replicas` > 1 means the block is replicated, e.g. a GEMM row panel needed by every tile of its grid row). The
  block -> tile map is a dense [blocks, replicas] table; regular tables print as `#tile.affine<start, bs, rs>`
  (tile = start + block * bs + replica * rs), irregular ones as a hex `dense<...>` table. A tile stores the blocks
  it holds contiguously, in block order, each in the layout's storage order (`row_major`; `amp16`: AMP
  micro-panels of 16 rows, each panel stored column by column; `ampw`: the AMP weight panels a GEMM kernel reads
  in place, see `ampw_positions`; `colsP`: column panels of P columns, each panel
  row-major, so that a producer's P-column blocks arrive as one contiguous piece per overlap), with element type
  `dtype`. `stack = L` describes
  a stacked layer parameter [L, ...]: every layer's slice has the same layout, and a tile stores the L slices as a
  sequence with a fixed stride (what `tile.repeat` iterates over).
- Compute ops stay the `nn` operators (one op per operator, the granularity rule): `tile-plan` attaches a plan
  (`#tile.gemm`, `#tile.attention`, `#tile.map`, `#tile.single`) as the discardable attribute `tile.plan`, and the
  result's layout as `tile.layout`. The plan fixes the layout every operand must have; where a producer's layout
  differs, an explicit `tile.relayout` moves the data (the only op that moves data between tiles).
- `tile.repeat` keeps the layer loop: its body is planned once; the layouts of its block arguments are a property.

Per-tile facts are in dense tables and numpy (see `Layout`), never in per-tile ops.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    Float16Type,
    Float32Type,
    IntAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i32,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, Pure, RecursiveMemoryEffect
from xdsl.utils.exceptions import VerifyException

from ipu.backend.target import IPU21

STORAGE_ORDERS = ("row_major", "amp16", "ampw", "colsP")  # colsP: P a positive integer, e.g. "cols64"
AMP_PANEL_ROWS = 16
AMPW_SLOT_BYTES = 32  # `ampw`: bytes of one row of a K block (16 halves, 32 FP8 values: the AMP's KB)
LAYOUT_ATTR = "tile.layout"  # discardable attribute: the layout of an op's (single) result
PLAN_ATTR = "tile.plan"  # discardable attribute: the plan of a compute op


def element_bytes(dtype: Attribute) -> int:
    if isinstance(dtype, Float32Type):
        return 4
    if isinstance(dtype, Float16Type):
        return 2
    if isinstance(dtype, Float8E4M3FNUZType | Float8E5M2FNUZType):
        return 1
    raise VerifyException(f"tile: unsupported element type {dtype}")


def dtype_name(dtype: Attribute) -> str:
    """Short precision names used by plans and the cost model: f32, f16, f8."""
    return {4: "f32", 2: "f16", 1: "f8"}[element_bytes(dtype)]


# --------------------------------------------------------------------------------------------------------------
# key = value attribute syntax shared by the attributes of this dialect


def _print_kv(printer: Printer, items: Sequence[tuple[str, object]]) -> None:
    with printer.in_angle_brackets():
        for i, (key, value) in enumerate(items):
            if i:
                printer.print_string(", ")
            printer.print_string(f"{key} = ")
            if isinstance(value, tuple):
                printer.print_string("[" + ", ".join(str(v) for v in value) + "]")
            elif isinstance(value, int):
                printer.print_string(str(value))
            elif isinstance(value, str):
                printer.print_string_literal(value)
            else:
                printer.print_attribute(value)


def _parse_kv(parser: AttrParser, kinds: dict[str, str]) -> dict[str, object]:
    """Parses `<key = value, ...>`; kinds: key -> "ints" | "int" | "str" | "attr" | "type"."""
    out: dict[str, object] = {}

    def one() -> None:
        key = parser.parse_identifier()
        if key not in kinds:
            parser.raise_error(f"unknown key '{key}', expected one of {', '.join(kinds)}")
        parser.parse_punctuation("=")
        kind = kinds[key]
        if kind == "ints":
            out[key] = tuple(
                parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parser.parse_integer())
            )
        elif kind == "int":
            out[key] = parser.parse_integer()
        elif kind == "str":
            out[key] = parser.parse_str_literal()
        elif kind == "type":
            out[key] = parser.parse_type()
        else:
            out[key] = parser.parse_attribute()

    parser.parse_comma_separated_list(parser.Delimiter.ANGLE, one)
    return out


def _ints(a: ArrayAttr) -> tuple[int, ...]:
    return tuple(x.data for x in a.data)


def _int_array(v: Sequence[int]) -> ArrayAttr:
    return ArrayAttr([IntAttr(int(x)) for x in v])


# --------------------------------------------------------------------------------------------------------------
# Tile tables


@irdl_attr_definition
class AffineTilesAttr(ParametrizedAttribute):
    """A regular block -> tile table: tile(block, replica) = start + block * block_stride + replica * replica_stride."""

    name = "tile.affine"
    start: IntAttr
    block_stride: IntAttr
    replica_stride: IntAttr

    def __init__(self, start: int, block_stride: int, replica_stride: int):
        super().__init__(IntAttr(start), IntAttr(block_stride), IntAttr(replica_stride))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        vals = parser.parse_comma_separated_list(parser.Delimiter.ANGLE, lambda: parser.parse_integer())
        if len(vals) != 3:
            parser.raise_error("#tile.affine takes <start, block_stride, replica_stride>")
        return tuple(IntAttr(v) for v in vals)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.start.data}, {self.block_stride.data}, {self.replica_stride.data}>")

    def verify(self) -> None:
        for what, v in (
            ("start", self.start),
            ("block_stride", self.block_stride),
            ("replica_stride", self.replica_stride),
        ):
            if not -(2**31) <= v.data < 2**31:
                raise VerifyException(f"#tile.affine: {what} {v.data} does not fit in 32 bits (a tile id)")

    def table64(self, blocks: int, replicas: int) -> np.ndarray:
        """The [blocks, replicas] table in int64, unchecked."""
        b = np.arange(blocks, dtype=np.int64)[:, None]
        r = np.arange(replicas, dtype=np.int64)[None, :]
        return self.start.data + b * self.block_stride.data + r * self.replica_stride.data

    def table(self, blocks: int, replicas: int) -> np.ndarray:
        """The [blocks, replicas] tile table (int32; an id outside int32 is a VerifyException, never wrapped)."""
        t = self.table64(blocks, replicas)
        if t.size and (t.min() < 0 or t.max() >= 2**31):
            bad = int(t.min()) if t.min() < 0 else int(t.max())
            raise VerifyException(
                f"#tile.affine<{self.start.data}, {self.block_stride.data}, {self.replica_stride.data}>: tile id "
                f"{bad} for {blocks} blocks x {replicas} replicas is outside [0, 2^31)"
            )
        return t.astype(np.int32)


def tiles_attr(table: np.ndarray) -> Attribute:
    """The compact attribute for a [blocks, replicas] tile table: affine when it is, hex dense otherwise."""
    table = np.ascontiguousarray(table, dtype=np.int32)
    nb, nr = table.shape
    start = int(table[0, 0])
    bs = int(table[1, 0] - table[0, 0]) if nb > 1 else 0
    rs = int(table[0, 1] - table[0, 0]) if nr > 1 else 0
    aff = AffineTilesAttr(start, bs, rs)
    if np.array_equal(aff.table64(nb, nr), table):
        return aff
    return DenseIntOrFPElementsAttr(TensorType(i32, [nb, nr]), BytesAttr(table.tobytes()))


def dense_i32(table: np.ndarray) -> DenseIntOrFPElementsAttr:
    """A 2-D int32 table as a dense attribute (printed as hex above 100 entries, parsed in milliseconds)."""
    table = np.ascontiguousarray(table, dtype=np.int32)
    if table.ndim == 1:
        table = table[:, None]
    return DenseIntOrFPElementsAttr(TensorType(i32, list(table.shape)), BytesAttr(table.tobytes()))


def dense_to_numpy(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    shape = attr.get_shape()
    return np.frombuffer(attr.data.data, dtype=np.int32).reshape(shape)


# --------------------------------------------------------------------------------------------------------------
# Layouts


# Most blocks x replicas a layout may have (checked before its tile table is built: a mistyped size must not
# allocate gigabytes); So400m's largest layouts have a few thousand.
MAX_LAYOUT_BLOCKS = 1 << 20


@irdl_attr_definition
class LayoutAttr(ParametrizedAttribute):
    """#tile.layout<shape = [..], block = [..], replicas = R, tiles = <table>, order = "row_major", dtype = f16>

    Optional keys: `stack = L` (a stacked layer parameter: shape is [L, *shape], each slice laid out alike),
    `scale = s` (FP8 scale: stored bits = value * 2^-s). `shape` is the (slice) tensor shape, the grid is
    ceil(shape / block)."""

    name = "tile.layout"
    shape: ArrayAttr[IntAttr]
    block: ArrayAttr[IntAttr]
    replicas: IntAttr
    tiles: Attribute
    order: StringAttr
    dtype: Attribute
    stack: IntAttr
    scale: IntAttr

    def __init__(
        self,
        shape: Sequence[int],
        block: Sequence[int],
        tiles: np.ndarray | Attribute,
        dtype: Attribute,
        order: str = "row_major",
        stack: int = 0,
        scale: int = 0,
    ):
        if isinstance(tiles, np.ndarray):
            replicas = tiles.shape[1]
            tiles = tiles_attr(tiles)
        elif isinstance(tiles, DenseIntOrFPElementsAttr):
            replicas = tiles.get_shape()[1]
        else:
            raise TypeError("LayoutAttr: pass the tile table as a numpy [blocks, replicas] array")
        super().__init__(
            _int_array(shape),
            _int_array(block),
            IntAttr(replicas),
            tiles,
            StringAttr(order),
            dtype,
            IntAttr(stack),
            IntAttr(scale),
        )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        kv = _parse_kv(
            parser,
            {
                "shape": "ints",
                "block": "ints",
                "replicas": "int",
                "tiles": "attr",
                "order": "str",
                "dtype": "type",
                "stack": "int",
                "scale": "int",
            },
        )
        for key in ("shape", "block", "replicas", "tiles", "dtype"):
            if key not in kv:
                parser.raise_error(f"#tile.layout needs '{key}'")
        return (
            _int_array(kv["shape"]),
            _int_array(kv["block"]),
            IntAttr(kv["replicas"]),
            kv["tiles"],
            StringAttr(kv.get("order", "row_major")),
            kv["dtype"],
            IntAttr(kv.get("stack", 0)),
            IntAttr(kv.get("scale", 0)),
        )

    def print_parameters(self, printer: Printer) -> None:
        items: list[tuple[str, object]] = [
            ("shape", self.shape_),
            ("block", self.block_),
            ("replicas", self.replicas.data),
            ("tiles", self.tiles),
            ("order", self.order.data),
            ("dtype", self.dtype),
        ]
        if self.stack.data:
            items.append(("stack", self.stack.data))
        if self.scale.data:
            items.append(("scale", self.scale.data))
        _print_kv(printer, items)

    # -- accessors -------------------------------------------------------------------------------------------
    @property
    def shape_(self) -> tuple[int, ...]:
        return _ints(self.shape)

    @property
    def block_(self) -> tuple[int, ...]:
        return _ints(self.block)

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(math.ceil(s / b) for s, b in zip(self.shape_, self.block_))

    @property
    def num_blocks(self) -> int:
        return math.prod(self.grid)

    @property
    def tensor_shape(self) -> tuple[int, ...]:
        """The shape of the tensor this layout describes (with the stack dimension)."""
        return ((self.stack.data,) if self.stack.data else ()) + self.shape_

    def table(self) -> np.ndarray:
        return _table(self)

    def geometry(self) -> LayoutGeometry:
        return _geometry(self)

    def unstacked(self) -> LayoutAttr:
        return LayoutAttr(
            self.shape_, self.block_, self.table(), self.dtype, self.order.data, 0, self.scale.data
        )

    def stacked(self, layers: int) -> LayoutAttr:
        return LayoutAttr(
            self.shape_, self.block_, self.table(), self.dtype, self.order.data, layers, self.scale.data
        )

    def verify(self) -> None:
        shape, block = self.shape_, self.block_
        if len(shape) != len(block) or not shape:
            raise VerifyException(
                f"#tile.layout: block {list(block)} must have the rank of shape {list(shape)}"
            )
        if any(b <= 0 for b in block) or any(s <= 0 for s in shape):
            raise VerifyException(
                f"#tile.layout: shape {list(shape)} and block {list(block)} must be positive"
            )
        if self.order.data not in STORAGE_ORDERS[:3] and col_panel_width(self) is None:
            raise VerifyException(
                f"#tile.layout: storage order '{self.order.data}' is not one of {', '.join(STORAGE_ORDERS)}"
            )
        if self.order.data != "row_major" and len(shape) != 2:
            raise VerifyException(f"#tile.layout: {self.order.data} storage needs a rank-2 tensor")
        element_bytes(self.dtype)
        if self.replicas.data < 1:
            raise VerifyException("#tile.layout: replicas must be >= 1")
        if isinstance(self.tiles, DenseIntOrFPElementsAttr):
            if tuple(self.tiles.get_shape()) != (self.num_blocks, self.replicas.data):
                raise VerifyException(
                    f"#tile.layout: tile table has shape {list(self.tiles.get_shape())}, the grid "
                    f"{list(self.grid)} with {self.replicas.data} replicas needs [{self.num_blocks}, "
                    f"{self.replicas.data}]"
                )
        elif not isinstance(self.tiles, AffineTilesAttr):
            raise VerifyException("#tile.layout: tiles must be a #tile.affine or a dense i32 table")
        if self.num_blocks * self.replicas.data > MAX_LAYOUT_BLOCKS:
            raise VerifyException(
                f"#tile.layout: {self.num_blocks} blocks x {self.replicas.data} replicas (shape {list(shape)}, block "
                f"{list(block)}) exceed {MAX_LAYOUT_BLOCKS}: not a layout of a tile machine"
            )
        t = self.table()
        if t.min() < 0:
            raise VerifyException(f"#tile.layout: negative tile id {int(t.min())} in the tile table")
        if t.max() >= IPU21.num_tiles:  # before any per-tile array is sized by it (geometry, shards, plans)
            raise VerifyException(
                f"#tile.layout: tile id {int(t.max())} in the tile table is outside the target's tiles "
                f"[0, {IPU21.num_tiles})"
            )
        if self.replicas.data > 1:
            srt = np.sort(t, axis=1)
            dup = np.nonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))[0]
            if dup.size:
                raise VerifyException(f"#tile.layout: block {int(dup[0])} has two replicas on the same tile")


@lru_cache(maxsize=4096)
def _table(layout: LayoutAttr) -> np.ndarray:
    if isinstance(layout.tiles, AffineTilesAttr):
        t = layout.tiles.table(layout.num_blocks, layout.replicas.data)
    else:
        t = dense_to_numpy(layout.tiles)
    t = np.ascontiguousarray(t, dtype=np.int32)
    t.setflags(write=False)
    return t


@dataclass(frozen=True)
class LayoutGeometry:
    """Numpy facts of a layout, shared by the planner, the exchange lowering and the interpreter.

    block_origin[b]: first element coordinate of block b; block_dims[b]: its clipped extent; block_elems[b];
    offset[b, r]: element offset of block b replica r inside its tile's shard (one slice for stacked layouts);
    shard_elems[t]: elements per slice in tile t's shard (0 for tiles holding nothing)."""

    block_origin: np.ndarray
    block_dims: np.ndarray
    block_elems: np.ndarray
    offset: np.ndarray
    shard_elems: np.ndarray


@lru_cache(maxsize=4096)
def _geometry(layout: LayoutAttr) -> LayoutGeometry:
    shape = np.array(layout.shape_, dtype=np.int64)
    block = np.array(layout.block_, dtype=np.int64)
    grid = layout.grid
    idx = np.stack(np.unravel_index(np.arange(layout.num_blocks), grid), axis=1).astype(np.int64)
    origin = idx * block
    dims = np.minimum(block, shape - origin)
    elems = dims.prod(axis=1)
    table = layout.table()
    nb, nr = table.shape
    # Blocks are stored in block order inside each tile: exclusive prefix sum grouped by tile.
    flat_tiles = table.reshape(-1).astype(np.int64)
    flat_elems = np.repeat(elems, nr)
    order = np.lexsort((np.repeat(np.arange(nb), nr), flat_tiles))
    sorted_tiles = flat_tiles[order]
    csum = np.cumsum(flat_elems[order])
    excl = csum - flat_elems[order]
    first = np.searchsorted(sorted_tiles, sorted_tiles, side="left")
    group_base = excl[first]
    offset = np.empty(nb * nr, dtype=np.int64)
    offset[order] = excl - group_base
    ntiles = int(flat_tiles.max()) + 1
    shard = np.bincount(flat_tiles, weights=flat_elems, minlength=ntiles).astype(np.int64)
    return LayoutGeometry(origin, dims, elems, offset.reshape(nb, nr), shard)


def col_panel_width(layout: LayoutAttr) -> int | None:
    """P of a `colsP` storage order (column panels of P columns), else None."""
    m = re.fullmatch(r"cols([1-9][0-9]*)", layout.order.data)
    return int(m.group(1)) if m else None


def col_panel_positions(i, j, rows, cols, p: int):
    """Positions of elements (i, j) in a [rows, cols] block stored as column panels of p columns ([cols / p]
    panels of [rows][p], the last one narrower), each panel row-major. Works on numpy arrays (broadcasting)."""
    panel = j // p
    width = np.minimum(p, cols - panel * p)
    return panel * p * rows + i * width + (j - panel * p)


def ampw_kblock(dtype: Attribute) -> int:
    """Columns of one K block of the `ampw` order: 32 bytes of elements (16 f16, 32 FP8, the AMP's KB)."""
    return AMPW_SLOT_BYTES // element_bytes(dtype)


def ampw_positions(i, j, rows, cols, kb: int):
    """Positions of elements (i, j) in a [rows, cols] block (B^T of a GEMM: rows = N, cols = K) stored in the
    `ampw` order, the AMP weight panels (`gemm.pack_weights`) a GEMM reads in place, for K blocks of kb columns.
    With rf = rows // 16 * 16 and kf = cols // kb * kb, three regions, one after the other:

    - A: rows [0, rf) x columns [0, kf) as the kernel's panels [rf / 16][kf / kb][16][kb] (row panel outer, K
      block inner, each 16 x kb block row-major: slot row e of block (p, b) holds row 16 p + e's kb values);
    - B: the last, narrower row panel, rows [rf, rows) x [0, kf): [kf / kb][rows - rf][kb] (its K blocks, each
      row-major; the kernel needs it padded to 16 rows);
    - C: the K tail, all rows x columns [kf, cols), row-major [rows][cols - kf] (the kernel needs it padded to kb
      columns).

    A block of whole panels (rows % 16 == 0, cols % kb == 0) is region A alone: exactly the kernel's weight
    panels. A row range of whole panels of A is one contiguous range (so is its part of C): whole-panel pieces
    of a block move as one or two contiguous transfers. Works on numpy arrays (broadcasting)."""
    rf = rows // AMP_PANEL_ROWS * AMP_PANEL_ROWS
    kf = cols // kb * kb
    a = (
        (i // AMP_PANEL_ROWS) * AMP_PANEL_ROWS * kf
        + (j // kb) * AMP_PANEL_ROWS * kb
        + (i % AMP_PANEL_ROWS) * kb
    )
    b = rf * kf + (j // kb) * (rows - rf) * kb + (i - rf) * kb
    c = rows * kf + i * (cols - kf) + (j - kf)
    return np.where(j >= kf, c, np.where(i >= rf, b, a) + j % kb)


def storage_positions(layout: LayoutAttr, within: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """Element positions inside a block for element coordinates `within` [n, rank] of blocks of extents `dims`
    [n, rank] (each row its own block), in the layout's storage order."""
    if layout.order.data == "ampw":
        kb = ampw_kblock(layout.dtype)
        return ampw_positions(within[:, 0], within[:, 1], dims[:, 0], dims[:, 1], kb)
    if layout.order.data == "amp16":
        i, j = within[:, 0], within[:, 1]
        rows, cols = dims[:, 0], dims[:, 1]
        panel = i // AMP_PANEL_ROWS
        panel_rows = np.minimum(AMP_PANEL_ROWS, rows - panel * AMP_PANEL_ROWS)
        return panel * AMP_PANEL_ROWS * cols + j * panel_rows + (i % AMP_PANEL_ROWS)
    p = col_panel_width(layout)
    if p is not None:
        return col_panel_positions(within[:, 0], within[:, 1], dims[:, 0], dims[:, 1], p)
    pos = np.zeros(len(within), dtype=np.int64)
    for d in range(within.shape[1]):
        pos = pos * dims[:, d] + within[:, d]
    return pos


def make_layout(
    shape: Sequence[int],
    block: Sequence[int],
    tiles: np.ndarray,
    dtype: Attribute,
    order: str = "row_major",
    scale: int = 0,
) -> LayoutAttr:
    return LayoutAttr(
        tuple(shape), tuple(min(b, s) for b, s in zip(block, shape)), tiles, dtype, order, 0, scale
    )


# --------------------------------------------------------------------------------------------------------------
# Plans


class _KVAttr(ParametrizedAttribute):
    """Plans: parameters are named; the textual form is `<key = value, ...>` in declaration order."""

    KINDS: ClassVar[dict[str, str]] = {}

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        kv = _parse_kv(parser, cls.KINDS)
        missing = [k for k in cls.KINDS if k not in kv]
        if missing:
            parser.raise_error(f"#{cls.name} needs {', '.join(missing)}")
        return tuple(_wrap(kv[k], kind) for k, kind in cls.KINDS.items())

    def print_parameters(self, printer: Printer) -> None:
        items = []
        for key, kind in self.KINDS.items():
            v = getattr(self, key)
            items.append((key, _ints(v) if kind == "ints" else v.data if kind in ("int", "str") else v))
        _print_kv(printer, items)

    def get(self, key: str):
        v = getattr(self, key)
        kind = self.KINDS[key]
        return _ints(v) if kind == "ints" else v.data if kind in ("int", "str") else v


def _wrap(value: object, kind: str) -> Attribute:
    if kind == "ints":
        return _int_array(value)  # type: ignore[arg-type]
    if kind == "int":
        return IntAttr(int(value))  # type: ignore[arg-type]
    if kind == "str":
        return StringAttr(str(value))
    return value  # type: ignore[return-value]


PRECISIONS = ("f32", "f16", "fp8")


@irdl_attr_definition
class GemmPlanAttr(_KVAttr):
    """A GEMM y[M, N] = x[M, K] w[K, N] over a gm x gn grid of tiles starting at tile `base`; tile (i, j) computes
    the [pm, pn] output block from x's row panel i ([pm, K], replicated over the gn tiles of row i) and w's
    column panel j ([K, pn], replicated over the gm tiles of column j). No K split (simplification: gk = 1).

    On `nn.linear_partials` (a K split made explicit by `nn-split-k`) the grid is [G K chunks, gn] and the panel
    [M, kc, pn]: tile base + g * gn + j computes partial g of column panel j from the whole x (replicated on
    every tile of the grid) and its own [pn, kc] weight block (one replica). With many rows the grid is [G, gm,
    gn] and the panel [pm, kc, pn]: tile base + (g * gm + i) * gn + j computes partial g of output block (i, j).

    precision: AMP input precision ("f16", "fp8": fp8 weights x f16 activations, "f32");
    cast: "early" when the operands arrive already in that precision (an nn.cast planned at the producer, so
    the exchange moves the narrow type), "late" when the tile converts after receiving.
    worder: storage order of the weight panels ("row_major" or "amp16" micro-panels).
    cycles: the planner's estimate for the busiest tile."""

    name = "tile.gemm"
    grid: ArrayAttr[IntAttr]
    panel: ArrayAttr[IntAttr]
    base: IntAttr
    precision: StringAttr
    cast: StringAttr
    worder: StringAttr
    cycles: IntAttr
    KINDS = {
        "grid": "ints",
        "panel": "ints",
        "base": "int",
        "precision": "str",
        "cast": "str",
        "worder": "str",
        "cycles": "int",
    }

    def verify(self) -> None:
        if self.precision.data not in PRECISIONS:
            raise VerifyException(f"#tile.gemm: precision '{self.precision.data}' not in {PRECISIONS}")
        if self.cast.data not in ("early", "late"):
            raise VerifyException(f'#tile.gemm: cast must be "early" or "late", got \'{self.cast.data}\'')
        if len(self.grid.data) not in (2, 3) or len(self.panel.data) != 3:
            raise VerifyException("#tile.gemm: grid is [gm, gn] (or [G, gm, gn]) and panel is [pm, k, pn]")


ATTENTION_KINDS = ("materialized", "flash", "merge")


@irdl_attr_definition
class AttentionPlanAttr(_KVAttr):
    """Multi-head attention over a grid [nq, heads] of tiles from tile `base`: tile (i, h) holds query rows block
    i of head h ([qblock, D]) and all keys and values of head h (replicated over the nq query blocks). A grid
    [nq, heads, vs] splits each head's value columns over vs tiles: tile (i, h, j) holds Q's block and all of K's
    head as before, V's column slice j ([S, D / vs]) and computes those columns of the result.

    kind: "materialized" (whole score rows [qblock, S] on the tile) or "flash" (64-key blocks with an online
    softmax merge). Only "materialized" is implemented by the lower levels; kblock records the flash block.
    A key-split attention (`nn.attention_partial`) has grid [nq, heads, chunks]: cell (i, h, j) holds query block
    i of head h against key chunk j; its `nn.attention_merge` gets the same grid with kind "merge", and there
    kblock is the heads of one merge result block (0 or 1: one head; tile-plan's `merge_block_heads`)."""

    name = "tile.attention"
    kind: StringAttr
    grid: ArrayAttr[IntAttr]
    qblock: IntAttr
    kblock: IntAttr
    base: IntAttr
    precision: StringAttr
    cycles: IntAttr
    KINDS = {
        "kind": "str",
        "grid": "ints",
        "qblock": "int",
        "kblock": "int",
        "base": "int",
        "precision": "str",
        "cycles": "int",
    }

    def verify(self) -> None:
        if self.kind.data not in ATTENTION_KINDS:
            raise VerifyException(f"#tile.attention: kind '{self.kind.data}' not in {ATTENTION_KINDS}")


MAP_KINDS = ("elementwise", "rows", "view", "host", "reduce")


@irdl_attr_definition
class MapPlanAttr(_KVAttr):
    """Tile-local work in the result's layout: "elementwise" (every operand in the result layout, a broadcast
    operand replicated to match), "rows" (layer norm / softmax: blocks hold whole rows), "view" (a reshape that
    only inserts or drops unit dimensions: the same blocks on the same tiles, no work), "reduce" (`nn.reduce_sum`:
    each result block's partial blocks stacked on its tile, summed there) or "host" (computed once
    by the host from parameters / inputs when it uploads them: weight casts to FP8, slices and reshapes of
    parameters, the image's patchify; its operands live on the host, it costs no device cycles)."""

    name = "tile.map"
    kind: StringAttr
    cycles: IntAttr
    KINDS = {"kind": "str", "cycles": "int"}

    def verify(self) -> None:
        if self.kind.data not in MAP_KINDS:
            raise VerifyException(f"#tile.map: kind '{self.kind.data}' not in {MAP_KINDS}")


@irdl_attr_definition
class SinglePlanAttr(_KVAttr):
    """The whole operator on one tile: every operand gathered whole onto `tile`, the result whole there (for
    data movement ops like patchify, reshape, slice, and small operators)."""

    name = "tile.single"
    tile: IntAttr
    cycles: IntAttr
    KINDS = {"tile": "int", "cycles": "int"}


PLAN_TYPES = (GemmPlanAttr, AttentionPlanAttr, MapPlanAttr, SinglePlanAttr)


def plan_cycles(plan: Attribute) -> int:
    return plan.cycles.data if isinstance(plan, PLAN_TYPES) else 0


# --------------------------------------------------------------------------------------------------------------
# Ops


@irdl_op_definition
class RelayoutOp(IRDLOperation):
    """Moves a tensor into another layout (same shape and element type); the only inter-tile data movement."""

    name = "tile.relayout"
    input = operand_def(TensorType)
    layout = prop_def(LayoutAttr)
    result = result_def(TensorType)
    assembly_format = "$input `to` $layout attr-dict `:` type($input) `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, layout: LayoutAttr):
        super().__init__(operands=[x], properties={"layout": layout}, result_types=[x.type])

    def verify_(self) -> None:
        if self.input.type != self.result.type:
            raise VerifyException(
                f"tile.relayout: operand type {self.input.type} and result type {self.result.type} differ"
            )
        check_layout_matches(self, self.result, self.layout)


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminates a `tile.repeat` body with the carried values of the next iteration."""

    name = "tile.yield"
    values = var_operand_def(TensorType)
    assembly_format = "$values attr-dict `:` type($values)"
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(RepeatOp), Pure()))

    def __init__(self, values: Sequence[SSAValue]):
        super().__init__(operands=[values])


@irdl_op_definition
class RepeatOp(IRDLOperation):
    """The layer loop at tile level: as `nn.repeat` (carried values, then stacked per-layer parameters), plus
    `arg_layouts`, the layouts of the body's block arguments. Carried values keep their layout across iterations
    (the yield's operands must have it); a stacked operand's layout is its slice layout with `stack = count`."""

    name = "tile.repeat"
    carried = var_operand_def(TensorType)
    stacked = var_operand_def(TensorType)
    count = prop_def(IntegerAttr[I64])
    arg_layouts = prop_def(ArrayAttr[LayoutAttr])
    res = var_result_def(TensorType)
    body = region_def("single_block")
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "$count `carried` `(` $carried `:` type($carried) `)` `stacked` `(` $stacked `:` type($stacked) `)` "
        "`layouts` $arg_layouts attr-dict-with-keyword `->` type($res) $body"
    )
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, count: int, carried, stacked, arg_layouts: Sequence[LayoutAttr], body):
        super().__init__(
            operands=[carried, stacked],
            properties={"count": IntegerAttr(count, i64), "arg_layouts": ArrayAttr(arg_layouts)},
            result_types=[[v.type for v in carried]],
            regions=[body],
        )

    @property
    def iterations(self) -> int:
        return self.count.value.data

    def verify_(self) -> None:
        n = self.iterations
        if n <= 0:
            raise VerifyException(f"tile.repeat: count must be positive, got {n}")
        for i, v in enumerate(self.stacked):
            s = tuple(v.type.get_shape()) if isinstance(v.type, TensorType) else ()
            if not s or s[0] != n:
                raise VerifyException(
                    f"tile.repeat: stacked operand #{i} has shape {list(s)}; its leading dimension must be the "
                    f"count {n}"
                )
        block = self.body.block
        if len(self.arg_layouts.data) != len(block.args):
            raise VerifyException(
                f"tile.repeat: {len(self.arg_layouts.data)} arg_layouts for {len(block.args)} block arguments"
            )
        for arg, lay in zip(block.args, self.arg_layouts.data):
            check_layout_matches(self, arg, lay)
        term = block.last_op
        if not isinstance(term, YieldOp) or len(term.values) != len(self.carried):
            raise VerifyException("tile.repeat: body must end with tile.yield of the carried values")


def check_layout_matches(op: Operation, value: SSAValue, layout: LayoutAttr) -> None:
    t = value.type
    if not isinstance(t, TensorType):
        return
    if tuple(t.get_shape()) != layout.tensor_shape:
        raise VerifyException(
            f"{op.name}: layout shape {list(layout.tensor_shape)} does not match the value's type {t}"
        )
    if element_bytes(t.element_type) != element_bytes(layout.dtype):
        raise VerifyException(f"{op.name}: layout dtype {layout.dtype} does not match the value's type {t}")


def layout_of(value: SSAValue) -> LayoutAttr | None:
    """The layout of a value at tile level: the defining op's `tile.layout` (the relayout's property), or for a
    `tile.repeat` block argument / result the repeat's arg_layouts."""
    owner = value.owner
    if isinstance(owner, RelayoutOp):
        return owner.layout
    if isinstance(owner, Operation):
        if isinstance(owner, RepeatOp):
            return owner.arg_layouts.data[value.index]
        multi = owner.properties.get("layouts")  # ops with several laid-out results (exchange.phase)
        if isinstance(multi, ArrayAttr):
            return multi.data[value.index]
        lay = owner.attributes.get(LAYOUT_ATTR)
        if isinstance(lay, ArrayAttr):
            lay = lay.data[value.index]
        return lay if isinstance(lay, LayoutAttr) else None
    parent = owner.parent_op()
    if isinstance(parent, RepeatOp):
        return parent.arg_layouts.data[value.index]
    return None


TILE = Dialect(
    "tile",
    [RelayoutOp, RepeatOp, YieldOp],
    [AffineTilesAttr, LayoutAttr, GemmPlanAttr, AttentionPlanAttr, MapPlanAttr, SinglePlanAttr],
)
