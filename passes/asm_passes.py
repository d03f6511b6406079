"""The backend's passes: placed IR (after `memory-plan`) -> an `asm.program` -> linked code that `-t ipu-package`
prints as a package and `-t ipu-asm` as assembly.

    ipu-opt model.mlir -p 'ipu-compile-pipeline{tiles=16},ipu-asm-pipeline' -t ipu-package -o m.ipupkg

- `asm-lower`: the walk over the placed function (`ipu.backend.lower.Lowering`): each op's kernel calls with their
  frames, the exchange phases' timed tables, the layer loop as one `asm.repeat` region (its body lowered at three
  sampled iterations whatever the count; the words that change per iteration recorded as the region's patch
  descriptors). The function is replaced by the `asm.program`.
- `asm-lower-repeat`: each `asm.repeat` -> the loop's counter code and its patch tables, built from the
  descriptors (a person may edit `patch_strides`: the tables follow).
- `asm-lower-calls`: each `asm.kernel_call` -> the calling convention's instructions and the profile's site labels.
- `asm-link`: the library routines the program reaches, relocations resolved, the code checked against memory-plan's
  code reservation.
- `ipu-asm-pipeline`: the four in order (from an `asm.program`: the ones it still needs).

Each fails with one diagnostic naming the op, the data or the label (`ProgramError`, `LoweringError`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from ipu.dialects import asm


def _program(op: ModuleOp, name: str) -> asm.ProgramOp:
    program = asm.program_of(op)
    if program is None:
        raise PassFailedException(f"{name}: the module has no asm.program: run asm-lower first")
    return program


def complete(program: asm.ProgramOp) -> None:
    """The passes a program still needs before it is printed: asm-lower-repeat, asm-lower-calls, asm-link (each only
    if something is left for it)."""
    from ipu.backend.lower.program import link, lower_calls, lower_repeats, target_of_program

    main = program.main()
    ops = list(main.body.block.ops)
    if any(isinstance(o, asm.RepeatOp) for o in ops):
        _run(AsmLowerRepeatPass.name, lambda: lower_repeats(program))
    if any(isinstance(o, asm.KernelCallOp) for o in main.body.block.ops):
        _run(AsmLowerCallsPass.name, lambda: lower_calls(program))
    if not program.linked:
        _run(AsmLinkPass.name, lambda: link(program, target_of_program(program)))


def _run(name: str, fn) -> None:
    from ipu.backend.lower.lowering import LoweringError
    from ipu.backend.lower.placement import PlacementError
    from ipu.backend.lower.program import ProgramError

    try:
        fn()
    except (ProgramError, LoweringError, PlacementError) as e:
        raise PassFailedException(f"{name}: {e}") from None


@dataclass(frozen=True)
class AsmLowerPass(ModulePass):
    """Placed IR (after memory-plan) -> an `asm.program` replacing the function (see the module docstring)."""

    name = "asm-lower"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from ipu.backend.lower.lowering import lower_to_program
        from ipu.backend.package_target import placed_func, unplaced_error

        f = placed_func(op)
        if f is None:
            raise PassFailedException(str(unplaced_error(op, self.name)).replace("-t ", "", 1))
        out: list[asm.ProgramOp] = []
        _run(self.name, lambda: out.append(lower_to_program(op)))
        op.body.block.insert_op_before(out[0], f)
        for o in [o for o in op.ops if isinstance(o, func.FuncOp)]:
            o.detach()
            o.erase()


@dataclass(frozen=True)
class AsmLowerRepeatPass(ModulePass):
    """Each `asm.repeat` -> its loop code and patch tables (`program.lower_repeats`)."""

    name = "asm-lower-repeat"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from ipu.backend.lower.program import lower_repeats

        program = _program(op, self.name)
        _run(self.name, lambda: lower_repeats(program))


@dataclass(frozen=True)
class AsmLowerCallsPass(ModulePass):
    """Each `asm.kernel_call` -> the calling convention's instructions, the profile sites
    (`program.lower_calls`)."""

    name = "asm-lower-calls"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from ipu.backend.lower.program import lower_calls

        program = _program(op, self.name)
        _run(self.name, lambda: lower_calls(program))


@dataclass(frozen=True)
class AsmLinkPass(ModulePass):
    """The library routines the program reaches, relocations resolved, the code's fit checked
    (`program.link`)."""

    name = "asm-link"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from ipu.backend.lower.program import link, target_of_program

        program = _program(op, self.name)
        _run(self.name, lambda: link(program, target_of_program(program)))


@dataclass(frozen=True)
class IpuAsmPipelinePass(ModulePass):
    """asm-lower, asm-lower-repeat, asm-lower-calls, asm-link: placed IR -> a linked `asm.program` (on a module
    that holds an `asm.program` already: the passes it still needs)."""

    name = "ipu-asm-pipeline"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if asm.program_of(op) is None:
            AsmLowerPass().apply(ctx, op)
        program = asm.program_of(op)
        assert program is not None
        if program.linked:
            raise PassFailedException(f"{self.name}: asm.program @{program.sym_name.data} is linked already")
        complete(program)
