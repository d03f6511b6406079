"""The one error boundary of every command (`ipu-opt`, `ipu-run`, `ipu-report`, `python -m ipu.backend.lower`).

`guarded(prog, fn, *args)` runs a command's body: an error the project knows (its own diagnostic classes, xDSL's
`DiagnosticException` / `ParseError` / `VerifyException`, a bad value, a missing file) is printed as ONE diagnostic
on stderr (`prog: error: ...`) with exit code 1; anything else is a bug of the tools, printed as

    prog: internal error: TypeError: ... (set IPU_TRACEBACK=1 to see the Python traceback)

with exit code `INTERNAL_ERROR_EXIT` (70, BSD's EX_SOFTWARE), never as a raw traceback. With `IPU_TRACEBACK=1` in
the environment the traceback of either kind is printed before the diagnostic.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Callable

INTERNAL_ERROR_EXIT = 70
TRACEBACK_ENV = "IPU_TRACEBACK"
LOCATED = re.compile(r"^\S+:\d+:\d+: error: ")
MAX_LINES = 12  # a diagnostic longer than this (an IR dump in a verifier's message) is cut


def known_errors() -> tuple[type[BaseException], ...]:
    """The exception classes that are diagnostics of bad input, not bugs."""
    from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError

    from ipu.backend.lower.placement import PlacementError as LowerPlacementError
    from ipu.frontend.reference import EvaluationError
    from ipu.passes.memory_alloc import PlacementError
    from ipu.passes.nn_outline_repeat import NotOutlinable
    from ipu.runtime.errors import SimError
    from ipu.runtime.tile_interp import TileInterpError

    return (
        ArgSpecParseError,  # a BaseException in xDSL
        DiagnosticException,  # VerifyException, PassFailedException, InterpretationError, ...
        ParseError,
        SimError,
        TileInterpError,
        EvaluationError,
        PlacementError,
        LowerPlacementError,
        NotOutlinable,
        ValueError,  # the project's own error classes derive from it (CheckpointError, PackageError, ...)
        OSError,
    )


def one_diagnostic(e: BaseException) -> str:
    """The message of an error as one diagnostic: notes appended, an IR dump cut."""
    if isinstance(e, FileNotFoundError) and e.filename:
        return f"no such file: {e.filename}"
    if isinstance(e, IsADirectoryError) and e.filename:
        return f"{e.filename}: is a directory"
    if isinstance(e, PermissionError) and e.filename:
        return f"{e.filename}: permission denied"
    text = str(e) or type(e).__name__
    text = text.removeprefix("Operation does not verify: ")
    notes = getattr(e, "__notes__", ())
    if notes:
        text += "".join(f"\n{n}" for n in notes)
    lines = text.splitlines() or [text]
    if len(lines) > MAX_LINES:
        lines = [*lines[:MAX_LINES], f"... ({len(lines) - MAX_LINES} more lines)"]
    return "\n".join(lines)


def guarded(prog: str, fn: Callable[..., int], *args, **kwargs) -> int:
    """fn(*args, **kwargs)'s exit code; errors become one diagnostic (see the module docstring)."""
    show = bool(os.environ.get(TRACEBACK_ENV))
    try:
        return fn(*args, **kwargs)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (e.g. `| head`): not an error of ours
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (flushing at exit must not fail again)
        except OSError:
            pass
        return 0
    except RecursionError:
        if show:
            traceback.print_exc()
        print(f"{prog}: error: the input nests too deeply to process", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"{prog}: error: out of memory (is a size in the input implausibly large?)", file=sys.stderr)
        return 1
    except BaseException as e:  # noqa: B036 (ArgSpecParseError derives from BaseException)
        if show:
            traceback.print_exc()
        if isinstance(e, known_errors()):
            message = one_diagnostic(e)
            # An MLIR-style `file:line:col: error: ...` diagnostic stands on its own.
            if LOCATED.match(message):
                print(message, file=sys.stderr)
            else:
                print(f"{prog}: error: {message}", file=sys.stderr)
            return 1
        where = ""
        tb = traceback.extract_tb(e.__traceback__)
        if tb:
            last = tb[-1]
            where = f" at {os.path.basename(last.filename)}:{last.lineno}"
        print(
            f"{prog}: internal error: {type(e).__name__}: {one_diagnostic(e).splitlines()[0][:300]}{where}\n"
            f"  (a bug of ipu-vit, not of the input's author; set {TRACEBACK_ENV}=1 to see the Python traceback)",
            file=sys.stderr,
        )
        return INTERNAL_ERROR_EXIT
