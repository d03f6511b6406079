"""`IpuPrinter` and `IpuParser`: string literals written whole, dense attributes (xDSL's hex form above 100
elements) and the whole `ipu-opt` text read back to the same IR."""

from io import StringIO

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    IndexType,
    IntegerType,
    TensorType,
    i1,
)
from xdsl.printer import Printer

from ipu.dialects.parsing import IpuParser
from ipu.dialects.printing import IpuPrinter


def _text(printer_cls, attr) -> str:
    out = StringIO()
    printer_cls(stream=out).print_attribute(attr)
    return out.getvalue()


@pytest.mark.parametrize(
    "element, values",
    [
        (IntegerType(8), np.arange(-128, 128)),
        (IntegerType(32), np.random.default_rng(1).integers(-(2**31), 2**31, 300)),
        (IntegerType(64), np.random.default_rng(2).integers(-(2**62), 2**62, 150)),
        (IndexType(), np.arange(101)),
        (Float16Type(), np.random.default_rng(3).normal(size=200).astype(np.float16)),
        (Float32Type(), np.random.default_rng(4).normal(size=120).astype(np.float32)),
    ],
)
def test_large_dense_attributes_print_in_hex_and_parse_back_equal(element, values):
    # (xDSL's printing, which `IpuPrinter` keeps; `IpuParser` reads it back)
    attr = DenseIntOrFPElementsAttr.from_list(TensorType(element, [len(values)]), values.tolist())
    text = _text(IpuPrinter, attr)
    assert text.startswith('dense<"0x'), text[:40]
    assert IpuParser(Context(), text).parse_attribute() == attr


def test_small_splat_and_bit_dense_attributes_print_as_xdsl_prints_them():
    small = DenseIntOrFPElementsAttr.from_list(TensorType(IntegerType(32), [100]), list(range(100)))
    splat = DenseIntOrFPElementsAttr.from_list(TensorType(IntegerType(8), [4096]), [7] * 4096)
    bits = DenseIntOrFPElementsAttr.from_list(TensorType(i1, [200]), [1, 0] * 100)
    assert _text(IpuPrinter, splat).startswith("dense<7>")
    for attr in (small, splat, bits):
        text = _text(IpuPrinter, attr)
        assert text == _text(Printer, attr)
        assert IpuParser(Context(), text).parse_attribute() == attr


def test_string_literals_print_as_xdsl_prints_them():
    data = bytes(range(256)) + np.random.default_rng(5).integers(0, 256, 2000, dtype=np.uint8).tobytes()
    texts = []
    for printer_cls in (IpuPrinter, Printer):
        out = StringIO()
        printer_cls(stream=out).print_bytes_literal(data)
        texts.append(out.getvalue())
    assert texts[0] == texts[1]


def test_a_dense_attribute_of_a_dynamic_or_wrong_type_is_still_refused():
    with pytest.raises(Exception, match="static shape"):
        IpuParser(Context(), 'dense<"0x01"> : tensor<?xi8>').parse_attribute()
    with pytest.raises(Exception, match="Expected memref, vector or tensor type"):
        IpuParser(Context(), "dense<1> : i8").parse_attribute()


def test_ipu_opt_text_with_large_dense_attributes_reads_back_the_same(tmp_path):
    from ipu.tools.ipu_opt import main

    values = ", ".join(map(str, range(200)))
    src = tmp_path / "in.mlir"
    src.write_text(f"builtin.module attributes {{x = dense<[{values}]> : tensor<200xi32>}} {{\n}}\n")
    out, again = tmp_path / "out.mlir", tmp_path / "again.mlir"
    assert main([str(src), "-o", str(out)]) == 0
    text = out.read_text()
    assert 'dense<"0x00000000010000000200' in text and "199" not in text
    assert main([str(out), "-o", str(again)]) == 0
    assert again.read_text() == text
