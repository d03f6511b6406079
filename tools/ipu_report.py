"""`ipu-report`: writes the static reports of a compiled model (see docs/reports.md).

    ipu-report placement placed.mlir -o out/    memory map: out/placement.json + out/placement.html
    ipu-report placement model.ipupkg -o out/   ... of a package (the map it carries)
    ipu-report profile model.mlir -o out/       cycle profile (exchange-level estimates): out/profile.{json,html}

(The profile measured on the simulator comes from `ipu-run ... --profile out/`.)

The input is exchange-level IR (after `nn-to-exchange-pipeline`) or memory-level IR (after `memory-plan`);
`-p PIPELINE` runs passes first (xDSL `-p` syntax), e.g. `-p nn-fuse-qkv,nn-outline-repeat,nn-to-exchange-pipeline`
on a model straight from the frontend. `placement` runs `memory-plan` (options from `--memory-plan`) when the IR
has no memory plan yet (IR that is not exchange level, e.g. the frontend's nn IR, is an error: there is nothing
placed to show); a package (`.ipupkg`) shows the map the lowering stored in it. If placement fails, it writes the memory map up to the failure and exits 1 with the
allocator's diagnostic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import DiagnosticException, ParseError

from ipu.dialects import memory as mem
from ipu.dialects.parsing import parse_module, read_text, verify_module
from ipu.dialects.registry import all_dialects
from ipu.passes.options import parse_pipeline
from ipu.passes.registry import all_passes


def _context() -> Context:
    ctx = Context()
    for name, factory in all_dialects():
        ctx.register_dialect(name, factory)
    return ctx


def _load(path: str) -> ModuleOp:
    return parse_module(_context(), read_text(path), path)


def _run(module: ModuleOp, spec: str, name: str) -> None:
    def verify(previous, module, following) -> None:
        if previous is not None:
            verify_module(module, f"{name} (after pass '{previous.name}')")

    parse_pipeline(dict(all_passes()), spec, verify).apply(_context(), module)


def _functions(module: ModuleOp) -> list[func.FuncOp]:
    return [op for op in module.walk() if isinstance(op, func.FuncOp)]


def _is_package(path: str) -> bool:
    if path == "-":
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04"  # a zip file: an .ipupkg


def package_memory_map(path: str) -> dict:
    """The memory map a package carries (`metadata["memory_map"]`, written by the lowering)."""
    from ipu.runtime.package import Package

    doc = Package.load(path).metadata.get("memory_map")
    if not doc:
        raise ValueError(f"{path}: the package carries no memory map (compiled before packages kept one?)")
    return doc


def _unplaced(f: func.FuncOp) -> str | None:
    """Why a function without a memory plan cannot be placed here (None: it is exchange-level IR)."""
    from ipu.dialects import exchange as ex
    from ipu.dialects import tile as tl

    if any(isinstance(o, ex.PhaseOp | ex.SyncOp) for o in f.walk()) or any(
        tl.LAYOUT_ATTR in o.attributes for o in f.walk()
    ):
        return None
    return (
        f"@{f.sym_name.data} has no placement: it is not exchange-level IR (no tile layouts, no exchange "
        "phases), so a memory map would show nothing but the reservations. Compile it first, e.g. "
        "-p 'ipu-compile-pipeline{tiles=16}' (placed IR), or give a package (.ipupkg)"
    )


def main(argv: list[str] | None = None) -> int:
    """Errors end in `ipu.tools.boundary`'s one diagnostic (or "internal error"), never a traceback."""
    from ipu.tools.boundary import guarded

    return guarded("ipu-report", _main, argv)


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(prog="ipu-report", description=__doc__.split("\n\n")[0])
    ap.add_argument("report", choices=("placement", "profile"))
    ap.add_argument("input", help="MLIR file ('-': stdin)")
    ap.add_argument("-o", "--output", default=".", help="output directory (created)")
    ap.add_argument("-p", "--passes", default="", help="passes to run first (xDSL -p syntax)")
    ap.add_argument(
        "--memory-plan",
        default="",
        metavar="OPTIONS",
        help="memory-plan options when placement has to run it, e.g. 'tiles=16 sram_kib=256'",
    )
    args = ap.parse_args(argv)
    out = Path(args.output)
    try:
        if args.memory_plan and args.report != "placement":
            raise ValueError("--memory-plan applies to the placement report only")
        if _is_package(args.input):
            if args.report != "placement":
                raise ValueError(
                    f"{args.input}: a package; the {args.report} report reads MLIR (a package's profile: "
                    f"ipu-run {args.input} --profile DIR)"
                )
            if args.passes or args.memory_plan:
                raise ValueError(
                    f"{args.input}: a package is already compiled: -p and --memory-plan do not apply"
                )
        if args.report == "placement" and _is_package(args.input):
            from ipu.runtime.reports.placement import write_placement_report

            for p in write_placement_report(package_memory_map(args.input), out):
                print(p)
            return 0
        module = _load(args.input)
        if args.passes:
            _run(module, args.passes, args.input)
        fns = _functions(module)
        if not fns:
            print("ipu-report: the input has no func.func", file=sys.stderr)
            return 1
        f = fns[0]
        if args.report == "placement":
            from ipu.runtime.reports.placement import model_from_function, write_placement_report

            planned = any(isinstance(o, mem.PlanOp) for o in f.body.block.ops)
            if planned and args.memory_plan:
                raise ValueError(
                    f"--memory-plan does not apply: @{f.sym_name.data} has a memory.plan already"
                )
            if not planned:
                why = _unplaced(f)
                if why is not None:
                    raise ValueError(why)
                opts = f'{args.memory_plan} report-dir="{out.resolve()}"'.strip()
                _run(module, f"memory-plan{{{opts}}}", args.input)
            paths = write_placement_report(model_from_function(f), out)
        else:
            from ipu.runtime.reports.profile import profile_from_function, write_profile_report

            paths = write_profile_report(profile_from_function(f), out)
    except (DiagnosticException, ParseError, ValueError, OSError) as e:
        print(f"ipu-report: error: {e}", file=sys.stderr)
        return 1
    for p in paths:
        print(p)
    return 0


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
