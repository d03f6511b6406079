"""`ipu-opt`: the modular optimizer driver for this project's IR, built on xDSL's `xDSLOptMain`.

It registers the project's dialects and passes (plus the builtin ones its IR uses), accepts MLIR's
`--pass-pipeline='builtin.module(a,b{opt=1})'` beside xDSL's `-p a,b{opt=1}`, and keeps xDSL's flags
(`--split-input-file`, `--verify-diagnostics`, `--print-between-passes`, `-o`, `-t`). Every failure (unknown pass,
bad option, unparsable IR, failed verification, a pass that rejects its input) ends in one diagnostic on stderr
and a non-zero exit, never a Python traceback.

Targets beside xDSL's `mlir`: `ipu-asm` (assembly text: a module's `asm.kernel`s, or a placed module's program,
`ipu.backend.asm_target`) and `ipu-package` (the binary `.ipupkg` of a placed module, `ipu.backend.package_target`;
written by `run_binary` to the `-o` file once it exists, never to stdout). With the named pass
`ipu-compile-pipeline` the driver goes from nn IR to a package:

    ipu-opt model.mlir --pass-pipeline='builtin.module(ipu-compile-pipeline{tiles=16})' -t ipu-package -o m.ipupkg
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import time
from collections.abc import Sequence
from importlib.util import find_spec

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.arg_spec import parse_spec
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError, VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain

from ipu.dialects.parsing import check_dominance, check_string_literals, ir_failure, read_text, run_parser
from ipu.dialects.registry import all_dialects
from ipu.passes.options import parse_pipeline
from ipu.passes.registry import all_passes

LOCATED = re.compile(r"^\S+:\d+:\d+: error: ")


class PipelineSyntaxError(ValueError):
    pass


class OutputError(ValueError):
    pass


def mlir_pipeline_to_xdsl(spec: str) -> str:
    """Translates MLIR pass-pipeline syntax into xDSL's `-p` syntax.

    `builtin.module(a, b{x=1 y=2})` becomes `a,b{x=1 y=2}`. Blanks outside braces and strings are dropped;
    nested pass managers (`func.func(...)`) have no meaning on this IR and are rejected.
    """
    s = spec.strip()
    for anchor in ("builtin.module(", "any("):
        if s.startswith(anchor):
            if not s.endswith(")"):
                raise PipelineSyntaxError(f"unbalanced parentheses in pass pipeline {spec!r}")
            s = s[len(anchor) : -1]
            break
    out: list[str] = []
    depth = 0
    in_string = False
    prev = ""
    for ch in s:
        if in_string:
            out.append(ch)
            in_string = not (ch == '"' and prev != "\\")
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif ch == "{":
            depth += 1
            out.append(ch)
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise PipelineSyntaxError(f"unbalanced braces in pass pipeline {spec!r}")
            out.append(ch)
        elif ch == "(" and depth == 0:
            raise PipelineSyntaxError(
                f"nested pass managers are not supported (all passes here run on builtin.module): {spec!r}"
            )
        elif ch.isspace() and depth == 0:
            pass
        else:
            out.append(ch)
        prev = ch
    if depth != 0 or in_string:
        raise PipelineSyntaxError(f"unbalanced braces or quotes in pass pipeline {spec!r}")
    return "".join(out)


class LocatingParser(Parser):
    """A parser that remembers where each operation starts, so verifier errors can point at the source line."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.op_offsets: dict[Operation, int] = {}

    def parse_operation(self) -> Operation:
        start = self._current_token.span.start
        op = super().parse_operation()
        self.op_offsets[op] = start
        return op


class SourceLocations:
    """Operation -> (line, column) of the chunk being processed (1-based, counted in the whole input file)."""

    def __init__(self, name: str, text: str, offsets: dict[Operation, int], line_offset: int):
        self.name = name
        self._text = text
        self._offsets = offsets
        self._line_offset = line_offset

    def of(self, op: Operation) -> str | None:
        offset = self._offsets.get(op)
        if offset is None:
            return None
        line = self._text.count("\n", 0, offset) + 1 + self._line_offset
        col = offset - (self._text.rfind("\n", 0, offset) + 1) + 1
        return f"{self.name}:{line}:{col}"


def _enclosing_symbol(op: Operation) -> str:
    parent = op.parent_op()
    while parent is not None:
        sym = parent.properties.get("sym_name") or parent.attributes.get("sym_name")
        if sym is not None:
            return f" in @{sym.data}"
        parent = parent.parent_op()
    return ""


def verify_with_location(
    module: ModuleOp, locations: SourceLocations | None, after: ModulePass | None
) -> None:
    """Verifies the module; on failure raises one MLIR-style diagnostic naming the op and its source location,
    instead of xDSL's dump of the whole module."""
    try:
        module.verify()
        failure = ir_failure(module)
        if failure is None:
            return
    except VerifyException as whole:
        failure: tuple[Operation, str] | None = None
        for op in module.walk():
            try:
                op.verify(verify_nested_ops=False)
            except VerifyException as e:
                failure = (op, str(e).removeprefix("Operation does not verify: "))
                break
        if failure is None:
            raise DiagnosticException(str(whole).splitlines()[0]) from None
    op, message = failure
    if not message.startswith(op.name):
        message = f"'{op.name}' op {message}"
    where = locations.of(op) if locations is not None else None
    if where is None:
        index = next(i for i, o in enumerate(module.walk()) if o is op)
        origin = f" (created by pass '{after.name}')" if after is not None else ""
        where = f"{locations.name if locations else '<input>'}: op #{index}{_enclosing_symbol(op)}{origin}"
    suffix = f" (after pass '{after.name}')" if after is not None else ""
    raise DiagnosticException(f"{where}: error: {message}{suffix}") from None


class IpuOptMain(xDSLOptMain):
    version_format = "ipu-opt (xdsl {xdsl_version})"
    locations: SourceLocations | None = None

    def parse_chunk(self, chunk, file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        if file_extension != "mlir":
            return super().parse_chunk(chunk, file_extension, start_offset)
        name = self.get_input_name()
        raw = chunk.read()
        text = read_text(name, raw if isinstance(raw, bytes) else raw.encode())
        # The project's parse entry (ipu.dialects.parsing): no exponential lexing of an unterminated string, and
        # no use before its definition.
        check_string_literals(text, name, start_offset)
        parser = LocatingParser(self.ctx, text, name)
        module = run_parser(parser, not self.args.no_implicit_module, text, name, start_offset)
        self.locations = SourceLocations(name, text, parser.op_offsets, start_offset)
        check_dominance(module, name, self.locations.of)
        return module

    def register_all_dialects(self) -> None:
        for name, factory in all_dialects():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        for name, factory in all_passes():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        from xdsl.targets.mlir import MLIRTarget

        self.available_targets["mlir"] = lambda: MLIRTarget
        if find_spec("ipu.backend.asm_target") is not None:

            def asm_target():
                from ipu.backend.asm_target import IpuAsmTarget

                return IpuAsmTarget

            self.available_targets["ipu-asm"] = asm_target
        if find_spec("ipu.backend.package_target") is not None:

            def package_target():
                from ipu.backend.package_target import IpuPackageTarget

                return IpuPackageTarget

            self.available_targets["ipu-package"] = package_target

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--pass-pipeline",
            default=None,
            help="pass pipeline in MLIR syntax, e.g. 'builtin.module(nn-fuse-qkv,canonicalize)'",
        )

    def run(self) -> None:
        spec = parse_spec(self.args.target)
        factory = self.available_targets[spec.name]
        target_cls = factory() if not inspect.signature(factory).parameters else None
        if not getattr(target_cls, "binary", False):
            return super().run()
        self.run_binary(target_cls.from_spec(spec))

    def run_binary(self, target) -> None:
        """A binary target (`ipu-package`): one module in, its bytes written to the -o file once they exist (xDSL's
        `run` opens -o as text before parsing and would leave an empty file behind on an error)."""
        if self.args.output_file in (None, "-"):
            raise OutputError(
                f"-t {target.name} writes a binary package: give -o FILE (it is not written to stdout)"
            )
        if self.args.split_input_file:
            raise OutputError(f"-t {target.name} writes one package: --split-input-file is not supported")
        chunks, file_extension = self.prepare_input()
        (chunk, offset), *_ = chunks
        try:
            module = self.parse_chunk(chunk, file_extension, offset)
        finally:
            for c, _ in chunks:
                c.close()
        self.apply_passes(module)
        data = target.package_bytes(module)
        with open(self.args.output_file, "wb") as out:
            out.write(data)

    def setup_pipeline(self) -> None:
        if self.args.pass_pipeline is not None:
            if self.args.passes:
                raise PipelineSyntaxError("give either --pass-pipeline or -p/--passes, not both")
            self.args.passes = mlir_pipeline_to_xdsl(self.args.pass_pipeline)
        start = time.perf_counter()

        def callback(previous: ModulePass | None, module: ModuleOp, following: ModulePass | None) -> None:
            # xDSL's own callback, with verification errors turned into located one-line diagnostics.
            nonlocal start
            if self.args.time_passes and previous is not None:
                print(f"Pass {previous.name} took {time.perf_counter() - start} seconds")
            if not self.args.disable_verify:
                verify_with_location(module, self.locations, previous)
            if previous and following and self.args.print_between_passes:
                print(f"IR after {previous.name}:")
                Printer(stream=sys.stdout).print_op(module)
                print("\n\n\n")
            if self.args.time_passes and following is not None:
                start = time.perf_counter()

        try:
            self.pipeline = parse_pipeline(self.available_passes, self.args.passes, callback)
        except ValueError as e:  # unknown pass or option, bad option value
            raise PipelineSyntaxError(f"bad pass pipeline: {e}") from None


def _fail(message: str) -> int:
    print(f"ipu-opt: error: {message}", file=sys.stderr)
    return 1


def _main(args: Sequence[str] | None) -> int:
    try:
        IpuOptMain(description="ipu-opt: the IPU ViT compiler's optimizer driver", args=args).run()
    except ArgSpecParseError as e:  # derives from BaseException, so it must be named
        return _fail(f"bad pass pipeline: {e}")
    except PipelineSyntaxError as e:
        return _fail(str(e))
    except ParseError as e:
        return _fail(f"could not parse the input:\n{e}")
    except DiagnosticException as e:
        if LOCATED.match(str(e)):  # already an MLIR-style `file:line:col: error: ...` diagnostic
            print(e, file=sys.stderr)
            return 1
        notes = "".join(f"\n{n}" for n in getattr(e, "__notes__", ()))
        return _fail(f"{e}{notes}")
    return 0


def main(args: Sequence[str] | None = None) -> int:
    """Any other error ends in `ipu.tools.boundary`'s one diagnostic (or "internal error"), never a traceback."""
    from ipu.tools.boundary import guarded

    return guarded("ipu-opt", _main, args)


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
