"""Progress of long simulator runs on stderr (issue 23): simulated cycles, their rate and an ETA.

    sim.progress = Progress(expected_cycles=...)     # or Session(package, progress=True)
    sim.run("main")                                   # a line on stderr, rewritten at most every `interval` s

Shown only when the stream is a terminal (`enabled`); `ipu-run --quiet` gives no Progress at all. The simulated
cycles are the furthest supervisor clock since the run's start. The ETA needs the run's total: `expected_cycles`
(a Session passes the previous inference's cycles, which a deterministic program repeats exactly; for its first
inference the compiler's estimate in the package metadata, `estimated`: shown with "~", and once the run passes
it without an ETA); without it the line shows cycles and rate only. The simulator calls `update` every few hundred rounds; nothing of this
changes what the simulator computes.
"""

from __future__ import annotations

import sys
import time


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} "


def _duration(s: float) -> str:
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Progress:
    def __init__(
        self,
        stream=None,
        *,
        expected_cycles: int | None = None,
        interval: float = 0.5,
        label="sim",
        estimated: bool = False,
    ):
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.expected_cycles = expected_cycles
        self.estimated = estimated  # expected_cycles is the compiler's estimate, not a previous run's count
        self.interval = interval
        self.label = label
        self._start = self._last = 0.0
        self._shown = False

    def start(self) -> None:
        self._start = self._last = time.perf_counter()
        self._shown = False

    def line(self, cycles: int, elapsed: float) -> str:
        rate = cycles / elapsed if elapsed > 0 else 0.0
        text = f"{self.label}: {_si(cycles)}cycles simulated in {_duration(elapsed)} ({_si(rate)}cycles/s)"
        total = self.expected_cycles
        if total and self.estimated:
            if cycles >= total:
                return text + f", past the compiler's estimate of {_si(total)}cycles"
            pct = cycles / total * 100
            eta = (total - cycles) / rate if rate > 0 else 0.0
            text += f", ~{pct:.0f}% of the compiler's estimate of {_si(total)}cycles, ETA ~{_duration(eta)}"
        elif total:
            pct = min(cycles / total, 1.0) * 100
            eta = (total - cycles) / rate if rate > 0 and cycles < total else 0.0
            text += f", {pct:.0f}% of {_si(total)}cycles, ETA {_duration(eta)}"
        return text

    def update(self, cycles: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last < self.interval:
            return
        self._last = now
        self.stream.write("\r\x1b[K" + self.line(int(cycles), now - self._start))
        self.stream.flush()
        self._shown = True

    def finish(self) -> None:
        """Clear the line (the caller prints its own summary)."""
        if self.enabled and self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
        self._shown = False
