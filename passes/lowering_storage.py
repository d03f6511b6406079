"""`lowering-storage`: sizes the asm lowering's own storage, so that memory-plan reserves what it needs and no more.

    ipu-opt selected.mlir -p 'lowering-storage{tiles=16 sram_kib=624},memory-plan{tiles=16 sram_kib=624}'

The asm lowering adds storage of its own to every tile: the code image, kernel frames and exchange / copy / loop
tables ("low", region 0), and the kernel scratch (the C, A and aux region-1 elements), kernel-format biases and
per-iteration data ("high", at the top of SRAM). Their sizes follow from the lowering's walk, not from the
tensors, so this pass measures them: it places a copy of the function with minimal reservations, lowers it in
measuring mode (`Lowering(measure=True)`: nothing is refused, every range's need is counted) and records

    lowering.storage = {code = C, tables = T, scratch = S}

on the function (bytes). memory-plan sizes its `code`, `exchange_tables` and `lowering_scratch` reservations from
it (unless its options say otherwise); a person may edit the numbers. The lowering then fails loudly if its data
does not fit them.

Run it after kernel-select (the choices decide the kernels' frames and scratch) and before memory-plan. The
placement of the copy is discarded; its cost is one more memory-plan and lowering of the function.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

STORAGE_ATTR = "lowering.storage"
KEYS = ("code", "tables", "scratch")


def storage_of(f: func.FuncOp) -> dict[str, int] | None:
    """The recorded sizes, or None; a malformed attribute is a PassFailedException naming the key."""
    attr = f.attributes.get(STORAGE_ATTR)
    if attr is None:
        return None
    if not isinstance(attr, DictionaryAttr) or set(attr.data) != set(KEYS):
        raise PassFailedException(
            f"@{f.sym_name.data}: '{STORAGE_ATTR}' must be a dictionary of {list(KEYS)} (bytes), got {attr}"
        )
    out = {}
    for k in KEYS:
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
            need = lowering.storage_need()
            sizes = {
                "code": need["code"],
                "tables": need["low"],
                "scratch": need["high_small"] + need["high_elements"],
            }
            f.attributes[STORAGE_ATTR] = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in sizes.items()})
