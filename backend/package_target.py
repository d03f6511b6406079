"""`ipu-opt -t ipu-package -o model.ipupkg`: print a module's package as `.ipupkg` bytes.

- An `asm.program` (after `asm-lower` or `ipu-asm-pipeline`): printed from the IR (`program.package_of`); passes
  it still needs (asm-lower-repeat, asm-lower-calls, asm-link) run first.
- Placed IR (after `memory-plan`, e.g. through `ipu-compile-pipeline`): lowered first
  (`ipu.backend.lower.lower_to_package`: the same passes).

    ipu-opt model.mlir --pass-pipeline='builtin.module(ipu-compile-pipeline{tiles=16})' -t ipu-package -o m.ipupkg
    ipu-opt model.mlir -p 'ipu-compile-pipeline{tiles=16},ipu-asm-pipeline' -t ipu-package -o m.ipupkg  # the same

The package is binary: `ipu-opt` writes it to the `-o` file only once the lowering has succeeded (no file is
left behind on an error) and refuses to write it to stdout. `emit` (xDSL's text-stream interface) writes through
the stream's binary `buffer` and refuses a stream without one (e.g. xDSL's own StringIO).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import DiagnosticException, PassFailedException
from xdsl.utils.target import Target


def placed_func(module: ModuleOp) -> func.FuncOp | None:
    """The module's one `func.func` if it has a `memory.plan` (placed IR), else None."""
    from ipu.dialects import memory as mem

    fs = [o for o in module.ops if isinstance(o, func.FuncOp)]
    if len(fs) != 1:
        return None
    f = fs[0]
    return f if any(isinstance(o, mem.PlanOp) for o in f.body.block.ops) else None


def unplaced_error(module: ModuleOp, target: str, what_else: str = "") -> DiagnosticException:
    """`-t target: the input is not placed IR (why) ...`: one line naming what is missing."""
    fs = [o for o in module.ops if isinstance(o, func.FuncOp)]
    if len(fs) != 1:
        what = f"expected one func.func, found {len(fs)}"
    else:
        what = f"@{fs[0].sym_name.data} has no memory.plan"
    return DiagnosticException(
        f"-t {target}: the input {what_else}is not placed IR ({what}): run memory-plan or ipu-compile-pipeline "
        "first"
    )


@dataclass(frozen=True)
class IpuPackageTarget(Target):
    name = "ipu-package"
    binary = True  # IpuOptMain writes package_bytes() to the -o file itself

    def package_bytes(self, module: ModuleOp) -> bytes:
        from ipu.backend.lower import LoweringError, lower_to_package
        from ipu.backend.lower.placement import PlacementError
        from ipu.backend.lower.program import ProgramError, package_of, target_of_program
        from ipu.dialects.asm import program_of
        from ipu.passes.asm_passes import complete
        from ipu.runtime.package import PackageError

        program = program_of(module)
        try:
            if program is not None:
                try:
                    complete(program)
                except PassFailedException as e:
                    raise DiagnosticException(f"-t {self.name}: {e}") from None
                pkg = package_of(program, target_of_program(program))
                pkg.validate()
                return pkg.to_bytes()
            if placed_func(module) is None:
                raise unplaced_error(module, self.name, "has no asm.program and ")
            return lower_to_package(module).to_bytes()
        except (LoweringError, PlacementError, PackageError, ProgramError) as e:
            raise DiagnosticException(f"-t {self.name}: {e}") from None

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        buffer = getattr(output, "buffer", None)
        if buffer is None:
            raise DiagnosticException(
                f"-t {self.name} writes a binary package: give an output stream with a binary buffer (-o FILE)"
            )
        output.flush()
        buffer.write(self.package_bytes(module))
