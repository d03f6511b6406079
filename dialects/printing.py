"""The project's textual IR printer: xDSL's `Printer`, writing string literals whole.

xDSL 0.74's `print_bytes_literal` writes a string literal one byte at a time (a `print_string` call per byte); an
asm module's string attributes are long, and that loop was most of the time to print one. `IpuPrinter` writes the
same text in one call. (Dense elements attributes need nothing here: xDSL already prints those of more than 100
elements as MLIR does, the hex string of their buffer, and `parsing.IpuParser` reads them back fast.)
"""

from __future__ import annotations

from xdsl.printer import Printer

# A byte's text inside a string literal, as xDSL's `print_bytes_literal` writes it.
_BYTE_TEXT = tuple(
    "\\\\" if b == 0x5C else f"\\{b:02X}" if b < 0x20 or b > 0x7E or b == 0x22 else chr(b) for b in range(256)
)


class IpuPrinter(Printer):
    """`Printer` that writes a string literal in one call (the same text as xDSL's)."""

    def print_bytes_literal(self, bytestring: bytes) -> None:
        self.print_string('"' + "".join(map(_BYTE_TEXT.__getitem__, bytestring)) + '"')
