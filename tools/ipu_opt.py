"""`ipu-opt`: the modular optimizer driver for this project's IR, built on xDSL's `xDSLOptMain`.

It registers the project's dialects and passes (plus the builtin ones its IR uses), accepts MLIR's
`--pass-pipeline='builtin.module(a,b{opt=1})'` beside xDSL's `-p a,b{opt=1}` (with nested pass managers:
`func.func(...)` runs its passes on each function alone, `any(...)` on the module, `NestedPasses`), and keeps
xDSL's flags (`--split-input-file`, `--verify-diagnostics`, `--print-between-passes`, `-o`, `-t`).
`--list-passes` prints every pass with its summary and options. `--verify-diagnostics` on input with
`expected-error` annotations checks them as mlir-opt does (`run_verify_diagnostics`); without, it prints the
diagnostics and exits 0, as xDSL does. Every failure (unknown pass,
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
import dataclasses
import inspect
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from io import BytesIO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass, PassPipeline
from xdsl.targets.mlir import MLIRTarget
from xdsl.utils.arg_spec import parse_spec
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError, VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain

from ipu.dialects.parsing import (
    IpuParser,
    check_dominance,
    check_string_literals,
    enclosing_symbol,
    ir_failure,
    read_text,
    run_parser,
)
from ipu.dialects.printing import IpuPrinter
from ipu.dialects.registry import all_dialects
from ipu.passes.options import parse_pipeline
from ipu.passes.registry import all_passes

LOCATED = re.compile(r"^\S+:\d+:\d+: error: ")


@dataclass(frozen=True)
class IpuMLIRTarget(MLIRTarget):
    """xDSL's `mlir` target with `IpuPrinter` (string literals written whole: the same text, faster)."""

    def emit(self, ctx: Context, module: ModuleOp, output) -> None:
        if self.syntax_highlight:
            return super().emit(ctx, module, output)
        printer = IpuPrinter(
            stream=output,
            print_generic_format=self.print_generic_format,
            print_properties_as_attributes=self.print_properties_as_attributes,
            print_debuginfo=self.print_debuginfo,
        )
        printer.print_op(module)
        printer.print_metadata(ctx.loaded_dialects)
        print("\n", file=output)


class PipelineSyntaxError(ValueError):
    pass


class OutputError(ValueError):
    pass


NEST_ANCHORS = ("func.func", "builtin.module", "any")


def parse_mlir_pipeline(spec: str) -> list:
    """MLIR pass-pipeline syntax as a tree: a list of pass texts (`b{x=1 y=2}`, blanks outside braces and strings
    dropped) and nested pass managers `(anchor, [items])`. A top-level `builtin.module(...)` (or `any(...)`) is the
    module itself, as in mlir-opt."""
    s = spec.strip()
    for anchor in ("builtin.module(", "any("):
        if s.startswith(anchor):
            if not s.endswith(")"):
                raise PipelineSyntaxError(f"unbalanced parentheses in pass pipeline {spec!r}")
            s = s[len(anchor) : -1]
            break
    stack: list[list] = [[]]
    anchors: list[str] = []
    word: list[str] = []
    depth = 0
    in_string = False
    prev = ""

    def flush() -> None:
        if word:
            stack[-1].append("".join(word))
            word.clear()

    for ch in s:
        if in_string:
            word.append(ch)
            in_string = not (ch == '"' and prev != "\\")
        elif ch == '"':
            in_string = True
            word.append(ch)
        elif ch == "{":
            depth += 1
            word.append(ch)
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise PipelineSyntaxError(f"unbalanced braces in pass pipeline {spec!r}")
            word.append(ch)
        elif depth > 0:
            word.append(ch)
        elif ch == "(":
            anchor = "".join(word)
            word.clear()
            if anchor not in NEST_ANCHORS:
                raise PipelineSyntaxError(
                    f"nested pass manager on {anchor!r}: only {', '.join(NEST_ANCHORS)} are supported: {spec!r}"
                )
            anchors.append(anchor)
            stack.append([])
        elif ch == ")":
            flush()
            if not anchors:
                raise PipelineSyntaxError(f"unbalanced parentheses in pass pipeline {spec!r}")
            items = stack.pop()
            stack[-1].append((anchors.pop(), items))
        elif ch == ",":
            flush()
        elif ch.isspace():
            pass
        else:
            word.append(ch)
        prev = ch
    flush()
    if depth != 0 or in_string:
        raise PipelineSyntaxError(f"unbalanced braces or quotes in pass pipeline {spec!r}")
    if anchors:
        raise PipelineSyntaxError(f"unbalanced parentheses in pass pipeline {spec!r}")
    return stack[0]


def mlir_pipeline_to_xdsl(spec: str) -> str:
    """Translates a flat MLIR pass pipeline into xDSL's `-p` syntax: `builtin.module(a, b{x=1 y=2})` becomes
    `a,b{x=1 y=2}` (nested pass managers: `pipeline_passes`)."""
    items = parse_mlir_pipeline(spec)
    if any(isinstance(i, tuple) for i in items):
        raise PipelineSyntaxError(f"nested pass managers have no xDSL -p spelling: {spec!r}")
    return ",".join(items)


@dataclass(frozen=True)
class NestedPasses(ModulePass):
    """A nested pass manager of an MLIR pipeline: `func.func(...)` runs its passes on each top-level function
    alone (the function moved into a module of its own for the time, so a pass sees that function only, as in
    MLIR), `builtin.module(...)` on each nested module, `any(...)` on the module itself."""

    name = "nested"
    anchor: str = "any"
    passes: tuple = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.anchor == "any":
            for p in self.passes:
                p.apply(ctx, op)
            return
        cls = FuncOp if self.anchor == "func.func" else ModuleOp
        for target in [o for o in op.body.block.ops if isinstance(o, cls)]:
            if cls is ModuleOp:
                for p in self.passes:
                    p.apply(ctx, target)
                continue
            block, after = target.parent_block(), target.next_op
            target.detach()
            holder = ModuleOp([target])
            try:
                for p in self.passes:
                    p.apply(ctx, holder)
            finally:
                for f in list(holder.body.block.ops):
                    f.detach()
                    if after is not None:
                        block.insert_op_before(f, after)
                    else:
                        block.add_op(f)


def pipeline_passes(items: list, available: dict) -> tuple[ModulePass, ...]:
    """The passes of a parsed MLIR pipeline (`parse_mlir_pipeline`), nested managers as `NestedPasses`."""
    out: list[ModulePass] = []
    flat: list[str] = []

    def flush() -> None:
        if flat:
            out.extend(PassPipeline.parse_spec(available, ",".join(flat)).passes)
            flat.clear()

    for item in items:
        if isinstance(item, tuple):
            flush()
            anchor, inner = item
            out.append(NestedPasses(anchor, pipeline_passes(inner, available)))
        else:
            flat.append(item)
    flush()
    return tuple(out)


class LocatingParser(IpuParser):
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
        where = f"{locations.name if locations else '<input>'}: op #{index}{enclosing_symbol(op)}{origin}"
    suffix = f" (after pass '{after.name}')" if after is not None else ""
    raise DiagnosticException(f"{where}: error: {message}{suffix}") from None


EXPECTED = re.compile(
    r"//\s*expected-(error|warning|note|remark)\s*(@above|@below|@unknown|@[+-]\d+)?\s*\{\{(.*?)\}\}"
)
DIAG_LINE = re.compile(r"^\S+?:(\d+):\d+(?::|$)")


@dataclass
class Expected:
    kind: str
    line: int | None  # the line it expects its diagnostic at (1-based in the file; None: @unknown)
    text: str
    at: int  # the annotation's own line
    seen: bool = False


def expectations(text: str, line_offset: int) -> list[Expected]:
    """The `// expected-error {{...}}` annotations of a chunk, as mlir-opt reads them: on the annotation's own
    line, `@above` / `@below` / `@+N` / `@-N` relative to it, `@unknown` for a diagnostic without location."""
    out = []
    for i, line in enumerate(text.split("\n")):
        for m in EXPECTED.finditer(line):
            at = line_offset + i + 1
            where = m.group(2)
            target: int | None = at
            if where == "@above":
                target = at - 1
            elif where == "@below":
                target = at + 1
            elif where == "@unknown":
                target = None
            elif where:
                target = at + int(where[1:])
            out.append(Expected(m.group(1), target, m.group(3), at))
    return out


def diagnostic_line(message: str) -> int | None:
    m = DIAG_LINE.match(message)
    return int(m.group(1)) if m else None


def check_diagnostic(message: str | None, expected: list[Expected]) -> list[str]:
    """Matches a chunk's diagnostic (None: none was produced) against its expectations; returns the mismatches.
    An error matches an unmet `expected-error` at its line whose text it contains."""
    problems = []
    if message is not None:
        line = diagnostic_line(message)
        first = message.splitlines()[0] if message else ""
        hit = next(
            (
                e
                for e in expected
                if not e.seen and e.kind == "error" and e.line == line and e.text in message
            ),
            None,
        )
        if hit is not None:
            hit.seen = True
        else:
            there = [e for e in expected if not e.seen and e.kind == "error" and e.line == line]
            if there:
                problems.append(
                    f"line {there[0].at}: expected error {{{{{there[0].text}}}}} at line {line}, but the error there is: {first}"
                )
                there[0].seen = True
            else:
                problems.append(
                    f"unexpected error{'' if line else ' (no location: expect it with @unknown)'}: {first}"
                )
    for e in expected:
        if not e.seen:
            where = "without location" if e.line is None else f"at line {e.line}"
            problems.append(f"line {e.at}: expected {e.kind} {where} was not produced: {{{{{e.text}}}}}")
    return problems


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
        self.available_targets["mlir"] = lambda: IpuMLIRTarget
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
        arg_parser.add_argument(
            "--list-passes",
            action="store_true",
            help="print every pass with its one-line summary and its options (name: type = default), and exit",
        )

    def annotated(self) -> bool:
        """Whether --verify-diagnostics checks expectations (the input file has `expected-*` annotations)."""
        path = self.args.input_file
        if not self.args.verify_diagnostics or path is None:
            return False
        with open(path, "rb") as f:
            return EXPECTED.search(f.read().decode(errors="replace")) is not None

    def run_verify_diagnostics(self) -> None:
        """--verify-diagnostics on annotated input, as mlir-opt: each chunk's diagnostic must be expected (same
        line, the expected text contained in it) and every expectation met; else one error listing the
        mismatches. The diagnostics are printed as without annotations (for FileCheck), output as usual."""
        chunks, file_extension = self.prepare_input()
        output = self.prepare_output()
        problems: list[str] = []
        try:
            for i, (chunk, offset) in enumerate(chunks):
                text = chunk.read()
                chunk.close()
                if i > 0:
                    output.write("// -----\n")
                expected = expectations(text.decode(errors="replace"), offset)
                message = None
                try:
                    module = self.parse_chunk(BytesIO(text), file_extension, offset)
                    if module is not None:
                        self.apply_passes(module)
                        output.write(self.output_resulting_program(module))
                except ParseError as e:
                    e.span = dataclasses.replace(e.span, line_offset=offset)
                    message = str(e)
                except DiagnosticException as e:
                    message = "\n".join([str(e), *map(str, getattr(e, "__notes__", ()))])
                if message is not None:
                    print(message, file=output)
                problems += check_diagnostic(message, expected)
                output.flush()
        finally:
            if output is not sys.stdout:
                output.close()
        if problems:
            raise DiagnosticException(
                f"--verify-diagnostics: {len(problems)} mismatch{'es' if len(problems) > 1 else ''} in "
                f"{self.args.input_file}:\n" + "\n".join(f"  {p}" for p in problems)
            )

    def run(self) -> None:
        if self.annotated():
            return self.run_verify_diagnostics()
        if self.args.list_passes:
            from ipu.passes.registry import list_passes

            print(list_passes())
            return
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
        nested = None
        if self.args.pass_pipeline is not None:
            if self.args.passes:
                raise PipelineSyntaxError("give either --pass-pipeline or -p/--passes, not both")
            items = parse_mlir_pipeline(self.args.pass_pipeline)
            if any(isinstance(i, tuple) for i in items):
                nested = items
            else:
                self.args.passes = ",".join(items)
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
                IpuPrinter(stream=sys.stdout).print_op(module)
                print("\n\n\n")
            if self.args.time_passes and following is not None:
                start = time.perf_counter()

        try:
            if nested is not None:
                self.pipeline = PassPipeline(pipeline_passes(nested, self.available_passes), callback)
            else:
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
