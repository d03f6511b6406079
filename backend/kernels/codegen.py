"""Worker code under construction, shared by the kernel generators.

`WorkerCode` mirrors the layout's alignment rule (a bundle starts on an 8-byte boundary: an explicit `nop` is
inserted, as `ipu.backend.isa_program.layout` would) and counts issues per tag ("head", "row", ...), so that a
kernel's cycle estimate is read off the code it generates rather than kept in step by hand.
"""

from __future__ import annotations

from collections import defaultdict


class WorkerCode:
    """A worker body under construction. Mirrors the layout's alignment rule (a bundle starts on an 8-byte
    boundary: an explicit `nop` is inserted), and counts issues per tag, so that `cycles` is read off the code."""

    def __init__(self, name: str):
        self.name = name
        self.lines = [f".globl {name}", ".worker", f"{name}:"]
        self.words = 0  # 32-bit words since the (8-byte aligned) entry
        self.count: dict[str, int] = defaultdict(int)
        self.tag = "head"

    def one(self, text: str) -> None:
        self.lines.append(f"    {text}")
        self.words += 1
        self.count[self.tag] += 1

    def bundle(self, main: str, aux: str = "fnop") -> None:
        if self.words % 2:
            self.one("nop")
        self.lines.append(f"    {{ {main} ; {aux} }}")
        self.words += 2
        self.count[self.tag] += 1

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def rpt(self, count_reg: str, body: list[tuple[str, str]], tag: str) -> None:
        """`rpt` over `body` (bundles), counted once per repetition under `tag`."""
        self.bundle(f"rpt {count_reg}, {len(body) - 1}")
        saved, self.tag = self.tag, tag
        for main, aux in body:
            self.bundle(main, aux)
        self.tag = saved

    def exit_and_idle(self, tag: str = "tail") -> None:
        """The body's `exitz` (counted under `tag`), then the `.L<name>_idle` exit that the body's idle test
        branches to (not counted: an idle worker's issues are not the body's)."""
        self.tag = tag
        self.one("exitz $mzero")
        self.label(f".L{self.name}_idle")
        self.lines.append("    exitz $mzero")
        self.words += 1  # (code after it, e.g. a branch target, keeps the alignment rule)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
