"""`ipu-opt`: the modular optimizer driver for this project's IR, built on xDSL's `xDSLOptMain`.

It registers the project's dialects and passes (plus the builtin ones its IR uses), accepts MLIR's
`--pass-pipeline='builtin.module(a,b{opt=1})'` beside xDSL's `-p a,b{opt=1}`, and keeps xDSL's flags
(`--split-input-file`, `--verify-diagnostics`, `--print-between-passes`, `-o`, `-t`). Every failure (unknown pass,
bad option, unparsable IR, failed verification, a pass that rejects its input) ends in one diagnostic on stderr
and a non-zero exit, never a Python traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.util import find_spec

from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from ipu.dialects.registry import all_dialects
from ipu.passes.registry import all_passes


class PipelineSyntaxError(ValueError):
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


class IpuOptMain(xDSLOptMain):
    version_format = "ipu-opt (xdsl {xdsl_version})"

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

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--pass-pipeline",
            default=None,
            help="pass pipeline in MLIR syntax, e.g. 'builtin.module(nn-fuse-qkv,canonicalize)'",
        )

    def setup_pipeline(self) -> None:
        if self.args.pass_pipeline is not None:
            if self.args.passes:
                raise PipelineSyntaxError("give either --pass-pipeline or -p/--passes, not both")
            self.args.passes = mlir_pipeline_to_xdsl(self.args.pass_pipeline)
        try:
            super().setup_pipeline()
        except ValueError as e:  # unknown pass or option, bad option value
            raise PipelineSyntaxError(f"bad pass pipeline: {e}") from None


def _fail(message: str) -> int:
    print(f"ipu-opt: error: {message}", file=sys.stderr)
    return 1


def main(args: Sequence[str] | None = None) -> int:
    try:
        IpuOptMain(description="ipu-opt: the IPU ViT compiler's optimizer driver", args=args).run()
    except ArgSpecParseError as e:  # derives from BaseException, so it must be named
        return _fail(f"bad pass pipeline: {e}")
    except PipelineSyntaxError as e:
        return _fail(str(e))
    except ParseError as e:
        return _fail(f"could not parse the input:\n{e}")
    except DiagnosticException as e:
        notes = "".join(f"\n{n}" for n in getattr(e, "__notes__", ()))
        return _fail(f"{e}{notes}")
    except FileNotFoundError as e:
        return _fail(f"no such file: {e.filename}")
    except ValueError as e:
        # xDSL reports unknown passes, unknown targets and unknown file extensions as ValueError.
        return _fail(str(e))
    except KeyboardInterrupt:
        return 130
    return 0


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
