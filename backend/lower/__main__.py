"""`python -m ipu.backend.lower placed.mlir [-o model.ipupkg] [--print-asm]`: lower placed IR (after memory-plan)
to a package; --print-asm prints the supervisor program `main` (the walk over supersteps) as assembly text."""

from __future__ import annotations

import argparse
import sys

from xdsl.context import Context

from ipu.backend.lower.lowering import Lowering, LoweringError, _single_func, model_config, target_of
from ipu.backend.lower.placement import PlacementError
from ipu.dialects import memory as mem
from ipu.dialects.parsing import parse_module, read_text
from ipu.dialects.registry import all_dialects


def main(argv=None) -> int:
    """Errors end in `ipu.tools.boundary`'s one diagnostic (or "internal error"), never a traceback."""
    from ipu.tools.boundary import guarded

    return guarded("python -m ipu.backend.lower", _main, argv)


def _main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m ipu.backend.lower", description=__doc__)
    ap.add_argument("input", help="placed IR (after memory-plan); - for stdin")
    ap.add_argument("-o", "--output", help="write the package here")
    ap.add_argument("--print-asm", action="store_true", help="print the supervisor program main")
    args = ap.parse_args(argv)
    ctx = Context()
    for name, factory in all_dialects():
        ctx.register_dialect(name, factory)
    module = parse_module(ctx, read_text(args.input), args.input)
    f = _single_func(module)
    plan = next((o for o in f.body.block.ops if isinstance(o, mem.PlanOp)), None)
    try:
        if plan is None:
            raise LoweringError(f"@{f.sym_name.data}: no memory.plan: run memory-plan first")
        low = Lowering(f, target_of(plan))
        pkg = low.run()
        config = model_config(module)
        if config is not None:
            pkg.metadata["config"] = config
            pkg.check_contents()
    except (LoweringError, PlacementError) as e:
        print(f"python -m ipu.backend.lower: error: {e}", file=sys.stderr)
        return 1
    if args.print_asm:
        print(low.main_text, end="")
    if args.output:
        pkg.save(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
