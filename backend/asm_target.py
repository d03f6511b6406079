"""`ipu-opt -t ipu-asm`: print a module's assembly as Graphcore-syntax text.

- A module of `asm.kernel` ops: its kernels. `layout=true` lays the kernels out at `base` first (see
  `ipu.backend.isa_program`), so the printed text shows the padding `nop`s and bundled rpt bodies that the
  program really holds, with each line's address as a trailing comment.
- An `asm.program` (after `asm-lower` or `ipu-asm-pipeline`; passes it still needs run first): its `main` with
  each instruction's comment; `full=true`: the whole linked code image (main, the loop patcher, the exchange
  routines and the kernel library routines it uses).
- Placed IR (after `memory-plan`, e.g. through `ipu-compile-pipeline`): lowered first (the same passes), then as
  above (what `python -m ipu.backend.lower placed.mlir --print-asm` prints).
- Anything else is an error (run memory-plan or ipu-compile-pipeline first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import DiagnosticException
from xdsl.utils.target import Target

from ipu.backend.asm_text import print_kernels
from ipu.backend.isa_program import layout
from ipu.backend.target import IPU21


@dataclass(frozen=True)
class IpuAsmTarget(Target):
    name = "ipu-asm"

    layout: bool = False
    base: int = IPU21.sram_base
    full: bool = False
    """Placed IR: print the whole code image's source, not only `main`."""

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from ipu.dialects.asm import module_to_kernels, program_of

        program = program_of(module)
        if program is not None:
            output.write(self.program_asm(program))
            return
        kernels = module_to_kernels(module)
        if not kernels:
            output.write(self.placed_asm(module))
            return
        if not self.layout:
            output.write(print_kernels(kernels))
            return
        program = layout(kernels, self.base)
        text = print_kernels(program.to_kernels())
        out, it = [], iter(u.addr for u in program.units)
        for line in text.splitlines():
            if line.startswith("    "):
                line = f"{line:<63} // {next(it):#07x}"
            out.append(line)
        output.write("\n".join(out) + "\n")

    def program_asm(self, program) -> str:
        from xdsl.utils.exceptions import PassFailedException

        from ipu.backend.lower.program import program_text
        from ipu.dialects.asm import kernel_text
        from ipu.passes.asm_passes import complete

        try:
            complete(program)
        except PassFailedException as e:
            raise DiagnosticException(f"-t {self.name}: {e}") from None
        return program_text(program) if self.full else kernel_text(program.main())

    def placed_asm(self, module: ModuleOp) -> str:
        from ipu.backend.lower.lowering import Lowering, LoweringError, target_of
        from ipu.backend.lower.placement import PlacementError
        from ipu.backend.package_target import placed_func, unplaced_error
        from ipu.dialects import memory as mem

        f = placed_func(module)
        if f is None:
            raise unplaced_error(module, self.name, "has no asm.program or asm.kernel ops and ")
        plan = next(o for o in f.body.block.ops if isinstance(o, mem.PlanOp))
        try:
            low = Lowering(f, target_of(plan))
            low.run()
        except (LoweringError, PlacementError) as e:
            raise DiagnosticException(f"-t {self.name}: {e}") from None
        return low.text if self.full else low.main_text
