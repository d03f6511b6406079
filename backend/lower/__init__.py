"""The `asm` lowering: planned, scheduled and placed IR (memory level) -> a `Package` the simulator runs.

Structure (one module per concern):

- `placement`: where every value lives on every tile (reads `memory.plan` / `memory.buffers`), the lowering's own
  storage (frames, exchange tables, scratch, kernel-format weights) in a per-tile data image.
- `bindings`: host tensors -> chunk tables, with the host-folded ops (`#tile.map<kind = "host">`: casts,
  reshapes, slices) folded into the binding.
- `exchange`: an `exchange.phase` -> per-tile receive/send rounds and on-tile copy tables (rows in the data
  image, one shared routine in the code).
- `lowering`: the walk over supersteps and compute ops, the supervisor program, the package.

Entry points: `lower_to_package(module)` (the module after `memory-plan`) and `compile_model(...)`.
"""

from ipu.backend.lower.lowering import LoweringError, compile_model, lower_to_package

__all__ = ["LoweringError", "compile_model", "lower_to_package"]
