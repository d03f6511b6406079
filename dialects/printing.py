"""The project's textual IR printer: xDSL's `Printer`, with large dense elements attributes as hex strings.

xDSL prints `dense<[1, 2, ...]>` element by element and parses it back the same way, through a Python object per
element: a placed module's data frames (hundreds of thousands of bytes) took seconds to parse. MLIR prints an
elements attribute with more than a threshold of elements as the hex string of its little-endian buffer,
`dense<"0x0100...">`, and both MLIR's and xDSL's parsers read that form straight into bytes. `IpuPrinter` does the
same above `hex_threshold` elements (MLIR's `--mlir-print-elementsattrs-with-hex-if-larger`); smaller attributes,
the ones a person reads and a FileCheck test matches, keep the element list. String literals are written whole
(xDSL writes them a byte at a time).
"""

from __future__ import annotations

from xdsl.dialects.builtin import AnyFloat, DenseIntOrFPElementsAttr, IndexType, IntegerType
from xdsl.ir import Attribute
from xdsl.printer import Printer

# A byte's text inside a string literal, as xDSL's `print_bytes_literal` writes it.
_BYTE_TEXT = tuple(
    "\\\\" if b == 0x5C else f"\\{b:02X}" if b < 0x20 or b > 0x7E or b == 0x22 else chr(b) for b in range(256)
)

# MLIR's default limit for `--mlir-print-elementsattrs-with-hex-if-larger`.
HEX_THRESHOLD = 100


def hex_printable(attr: DenseIntOrFPElementsAttr) -> bool:
    """Whether the attribute's buffer is one whole-byte element after another (not i1, not complex)."""
    element = attr.get_element_type()
    if isinstance(element, IntegerType):
        return element.width.data % 8 == 0
    return isinstance(element, IndexType | AnyFloat)


class IpuPrinter(Printer):
    """`Printer` that writes dense elements attributes of more than `hex_threshold` elements in hex."""

    hex_threshold: int = HEX_THRESHOLD

    def print_bytes_literal(self, bytestring: bytes) -> None:
        # xDSL's text, in one write instead of one per byte (an asm module's string attributes are long).
        self.print_string('"' + "".join(map(_BYTE_TEXT.__getitem__, bytestring)) + '"')

    def print_attribute(self, attribute: Attribute) -> None:
        if (
            isinstance(attribute, DenseIntOrFPElementsAttr)
            and self.hex_threshold >= 0
            and len(attribute) > self.hex_threshold
            and hex_printable(attribute)
        ):
            self.print_string(f'dense<"0x{attribute.data.data.hex().upper()}"> : ')
            self.print_attribute(attribute.get_type())
            return
        super().print_attribute(attribute)
