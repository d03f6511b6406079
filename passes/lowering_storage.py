"""`lowering-storage`: sizes the asm lowering's own storage, so that memory-plan reserves what it needs and no more.

    ipu-opt selected.mlir -p 'lowering-storage{tiles=16 sram_kib=624},memory-plan{tiles=16 sram_kib=624}'

The asm lowering adds storage of its own to every tile: the code image, kernel frames and exchange / copy / loop
tables ("low", region 0), and the kernel scratch (the C, A and aux region-1 elements), kernel-format biases and
per-iteration data ("high", at the top of SRAM). Their sizes follow from the lowering's walk, not from the
tensors, so this pass measures them: it places a copy of the function with minimal reservations, lowers it in
measuring mode (`Lowering(measure=True)`: nothing is refused, every range's need is counted) and records

    lowering.storage = {code = C, tables = T, scratch = S}

on the function (bytes), and on every op that uses the kernel scratch elements (the top three region-1 elements
of SRAM: C, A and aux)

    lowering.scratch = array<i64: C, A, AUX>

the bytes of each that the op uses, and on every op that keeps data of its own

    lowering.data = array<i64: FRAMES, DATA>

the bytes of its kernel frames and exchange / copy / loop tables (region 0) and of its kernel data (kernel-format
biases, per-iteration data). memory-plan sizes its `code`, `exchange_tables` and `lowering_scratch`
reservations from `lowering.storage` (unless its options say otherwise) and reserves the scratch elements per op
from `lowering.scratch` (`kernel_scratch` reservations live at that op's event only), so that other buffers use
the elements between the ops that need them; `elements` is then the bytes of the three elements and `scratch`
only the lowering's small data below them (kernel-format biases, per-iteration data). `tables` and `scratch` count
the ops' `lowering.data` (each rounded up to 8 and 16 bytes) and the data no op owns (the zero constant, loop
patch tables, outputs kept for the host); memory-plan gives each op its own buffers inside those spans
(`memory.lowering_frames`, `memory.lowering_data`) and reserves the rest for the unowned data. A person may edit
the numbers. The lowering then fails loudly if its data does not fit them.

Run it after kernel-select (the choices decide the kernels' frames and scratch) and before memory-plan. The
placement of the copy is discarded; its cost is one more memory-plan and lowering of the function.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseArrayBase, DictionaryAttr, IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from ipu.passes.memory_alloc import align_up

STORAGE_ATTR = "lowering.storage"
SCRATCH_ATTR = "lowering.scratch"
DATA_ATTR = "lowering.data"
FRAMES_ALIGN, DATA_ALIGN = 8, 16  # the op buffers' alignment (every allocation inside them is 8-byte aligned)
KEYS = ("code", "tables", "scratch")
OPTIONAL_KEYS = ("elements",)  # 0 or absent: the scratch elements are part of `scratch` (whole program)


def storage_of(f: func.FuncOp) -> dict[str, int] | None:
    """The recorded sizes, or None; a malformed attribute is a PassFailedException naming the key."""
    attr = f.attributes.get(STORAGE_ATTR)
    if attr is None:
        return None
    if not isinstance(attr, DictionaryAttr) or not set(KEYS) <= set(attr.data) <= set(KEYS + OPTIONAL_KEYS):
        raise PassFailedException(
            f"@{f.sym_name.data}: '{STORAGE_ATTR}' must be a dictionary of {list(KEYS)} (bytes) and optionally "
            f"{list(OPTIONAL_KEYS)}, got {attr}"
        )
    out = {}
    for k in [k for k in KEYS + OPTIONAL_KEYS if k in attr.data]:
        v = attr.data[k]
        if not isinstance(v, IntegerAttr) or not 0 <= v.value.data < 1 << 31:
            raise PassFailedException(
                f"@{f.sym_name.data}: {STORAGE_ATTR} {k} = {v}: a byte count >= 0 expected"
            )
        out[k] = v.value.data
    return out


@dataclass(frozen=True)
class LoweringStoragePass(ModulePass):
    """Measures the asm lowering's storage per function (see the module docstring)."""

    name = "lowering-storage"

    tiles: int = 0
    """Tiles of the target (0: the full IPU21)."""
    sram_kib: int = 624
    """SRAM per tile of the target, KiB."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from ipu.backend.lower.lowering import Lowering, LoweringError
        from ipu.backend.lower.placement import PlacementError
        from ipu.passes.memory_plan import MemoryPlanPass
        from ipu.passes.tile_plan import target_for

        try:
            target = target_for(self.tiles, self.sram_kib)
        except ValueError as e:
            raise PassFailedException(f"lowering-storage: {e}") from None
        e0 = target.region0_element_bytes
        for f in [o for o in op.walk() if isinstance(o, func.FuncOp)]:
            copy = f.clone()
            copy.attributes.pop(STORAGE_ATTR, None)
            for o in copy.walk():
                o.attributes.pop(SCRATCH_ATTR, None)
                o.attributes.pop(DATA_ATTR, None)
            probe = MemoryPlanPass(
                tiles=self.tiles,
                sram_kib=self.sram_kib,
                reserve_code_bytes=e0,
                exchange_table_bytes=e0,
                reserve_scratch_bytes=0,
            )
            try:
                probe.apply(ctx, ModuleOp([copy]))
            except PassFailedException as err:
                raise PassFailedException(
                    f"lowering-storage: the function does not fit even without the lowering's storage: {err}"
                ) from None
            try:
                lowering = Lowering(copy, target, measure=True)
                lowering.run()
            except (LoweringError, PlacementError) as err:
                raise PassFailedException(f"lowering-storage: @{f.sym_name.data}: {err}") from None
            record_storage(f, lowering)


def _checked_array(op, name: str, fields: str) -> tuple[int, ...] | None:
    """An op's `array<i64: fields>` attribute of byte counts, checked; None without one."""
    attr = op.attributes.get(name)
    if attr is None:
        return None
    values = attr.get_values() if isinstance(attr, DenseArrayBase) else None
    if values is None or len(values) != len(fields.split(", ")) or min(values) < 0:
        raise PassFailedException(
            f"{op.name}: '{name}' must be array<i64: {fields}> (bytes >= 0), got {attr}"
        )
    return tuple(int(v) for v in values)


def scratch_of(op) -> tuple[int, int, int] | None:
    """An op's `lowering.scratch` (bytes of C, A, aux), checked; None without one."""
    return _checked_array(op, SCRATCH_ATTR, "C, A, AUX")


def data_of(op) -> tuple[int, int] | None:
    """An op's `lowering.data` (bytes of its frames and tables, of its kernel data), checked; None without one."""
    return _checked_array(op, DATA_ATTR, "FRAMES, DATA")


def record_storage(f: func.FuncOp, lowering, merge: bool = False) -> dict[str, int]:
    """Writes a measuring lowering's needs on f: `lowering.storage`, and `lowering.scratch` on each op that uses
    the scratch elements. merge: keep the larger of the recorded and the measured figures (`lower_fitting`)."""
    from ipu.passes.memory_plan import number_events

    need = lowering.storage_need()
    use = {e: list(u) for e, u in lowering.scratch_use.items() if any(u)}
    timed = -1 not in use and bool(need["high_elements"])  # a use outside every op: whole-program elements
    old = (storage_of(f) or {}) if merge else {}
    if old and not old.get("elements"):
        timed = False  # planned for the whole program before: stays so
    # Each op's own data (`lowering.data`), the larger of the recorded and the measured with merge.
    image = lowering.image
    events = number_events(f)
    per_op: dict = {}
    for op, event in events.start.items():
        prev = data_of(op) if merge else None
        got = image.op_need.get(event)
        if prev is not None and got is not None:
            got = [max(a, b) for a, b in zip(prev, got)]
        elif prev is not None:
            got = list(prev)
        if got is None or not any(got):
            op.attributes.pop(DATA_ATTR, None)
            continue
        per_op[op] = got
        op.attributes[DATA_ATTR] = DenseArrayBase.from_list(i64, list(got))
    owned_low = sum(align_up(v[0], FRAMES_ALIGN) for v in per_op.values())
    owned_high = sum(align_up(v[1], DATA_ALIGN) for v in per_op.values())
    sizes = {
        "code": need["code"],
        "tables": max(need["low"], owned_low + align_up(image.fn_need["low"], FRAMES_ALIGN)),
        "scratch": max(need["high_small"], owned_high + align_up(image.fn_need["high"], DATA_ALIGN))
        + (0 if timed else need["high_elements"]),
    }
    if timed:
        sizes["elements"] = need["high_elements"]
    sizes = {k: max(v, old.get(k, 0)) for k, v in sizes.items()}
    f.attributes[STORAGE_ATTR] = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in sizes.items()})
    for op, event in events.start.items():
        prev = scratch_of(op) if merge else None
        bytes_ = use.get(event) if timed else None
        if prev is not None and bytes_ is not None:
            bytes_ = [max(a, b) for a, b in zip(prev, bytes_)]
        elif prev is not None:
            bytes_ = list(prev)
        if bytes_ is None:
            op.attributes.pop(SCRATCH_ATTR, None)
        else:
            op.attributes[SCRATCH_ATTR] = DenseArrayBase.from_list(i64, bytes_)
    return sizes
