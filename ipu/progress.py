"""Progress of the compile phases on stderr (`ipu-run --model`, `ipu.compile(..., progress=True)`).

`CompileProgress` is the callable `compile_model(progress=...)` calls before each phase with `(phase, done,
total)` (the passes of `ipu-compile-pipeline`, then the asm lowering) and once at the end with `done == total`.
It draws a rich progress bar (phase name, count, elapsed time) when enabled, which by default means stderr is a
terminal: piped or captured output stays free of it; `ipu-run --quiet` turns it off.
"""

from __future__ import annotations

import sys
import time


class CompileProgress:
    def __init__(self, enabled: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.phases: list[tuple[str, float]] = []  # (phase, seconds), filled as phases end
        self._progress = None
        self._task = None
        self._current: tuple[str, float] | None = None

    def __enter__(self) -> CompileProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("compiling"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}"),
                console=Console(file=self.stream, force_terminal=True),
                transient=True,
            )
            self._progress.start()
        return self

    def _close_phase(self) -> None:
        if self._current is not None:
            name, start = self._current
            self.phases.append((name, time.perf_counter() - start))
            self._current = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        self._close_phase()
        if done < total:
            self._current = (phase, time.perf_counter())
        if self._progress is not None:
            if self._task is None:
                self._task = self._progress.add_task(phase, total=total)
            self._progress.update(self._task, completed=done, description=phase)

    def __exit__(self, *exc) -> None:
        self._close_phase()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
