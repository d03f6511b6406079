"""The target model: constants, derived memory map, small targets."""

import dataclasses

import pytest

from ipu.backend.target import IPU21, KIB, Target


def test_full_machine_constants():
    t = Target.ipu21()
    assert t.num_tiles == 1472 and t.num_workers == 6 and t.clock_hz == 1.5e9
    assert t.sram_base == 0x4C000 and t.sram_bytes == 624 * KIB
    assert t.sram_end == 0xE8000
    assert t.region0 == (0x4C000, 0x80000) and t.region1 == (0x80000, 0xE8000)
    assert t.host_aperture == (0x50000, 0x58000)
    assert t.amp_f16_macs_per_cycle == 64 and t.amp_fp8_macs_per_cycle == 128
    assert t.total_sram_bytes == 1472 * 624 * 1024
    assert t.num_contexts == 7
    # 1472 x 64 MAC x 2 FLOP x 1.5 GHz ~ 282 TFLOPS: the quoted 280 TFLOPS FP16 (S11)
    assert abs(t.num_tiles * t.amp_f16_macs_per_cycle * 2 * t.clock_hz / 1e12 - 280) < 5


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        IPU21.num_tiles = 4  # type: ignore[misc]


def test_small_target_keeps_map_rules():
    t = Target.small(tiles=4, sram_kib=256)
    assert t.num_tiles == 4 and t.sram_bytes == 256 * KIB
    assert t.region0 == (0x4C000, 0x80000)
    assert t.region1 == (0x80000, 0x4C000 + 256 * KIB)
    tiny = Target.small(tiles=1, sram_kib=64)
    assert tiny.region1[0] == tiny.region1[1]  # no interleaved memory at all
    assert not tiny.is_interleaved(0x80000)


@pytest.mark.parametrize("tiles,kib", [(0, 256), (2000, 256), (4, 20), (4, 100), (4, 1024)])
def test_small_target_rejects_bad_sizes(tiles, kib):
    with pytest.raises(ValueError):
        Target.small(tiles=tiles, sram_kib=kib)


def test_regions_elements_and_banks():
    t = IPU21
    assert t.is_executable(0x4C000) and t.is_executable(0x7FFFC) and not t.is_executable(0x80000)
    assert t.is_interleaved(0x80000) and not t.is_interleaved(0x7FFF8)
    assert t.in_sram(0xE7FF8, 8) and not t.in_sram(0xE7FFC, 8) and not t.in_sram(0x4BFFC, 4)
    # region 0: 16 KiB elements, one bank each
    assert t.element_of(0x4C000) == 0 and t.element_of(0x4FFFF) == 0 and t.element_of(0x50000) == 1
    assert t.bank_of(0x4C000) == t.bank_of(0x4FFF8) != t.bank_of(0x50000)
    # region 1: 32 KiB elements of two banks split on address bit 3
    assert t.element_of(0x80000) == t.element_of(0x87FF8) != t.element_of(0x88000)
    assert t.bank_of(0x80000) != t.bank_of(0x80008)
    assert t.bank_of(0x80000) == t.bank_of(0x80010)
    assert t.cycles_to_seconds(1.5e9) == pytest.approx(1.0)


def test_alignment_rules():
    assert IPU21.natural_alignment(8) == 8 and IPU21.natural_alignment(16) == 16
    assert IPU21.interleaved_buffer_alignment == 32768 and IPU21.bundle_alignment == 8
    with pytest.raises(ValueError):
        IPU21.natural_alignment(3)
