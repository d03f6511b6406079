"""The target model: one description of an IPU21-class machine (Graphcore C600), with sources.

Every number the compiler passes, the kernels and the simulator use comes from here. Each constant names
its source. Source tags refer to `shared/reference/IPU_FACTS.md`:

- S1 = graphcore/poplibs (codelets and cycle estimators), S2 = Graphcore ISA text
  (graphcore/ipu_assembly_support), S3 = Graphcore LLVM fork, S4 = third-party IPU1 reverse engineering,
  S6/S7/S8/S9 = Graphcore documentation and blog, S10..S14 = datasheets and press, S19 = third-party IPU21 linker,
  "seed 000/001" = the project's seed documents (a working hardware implementation; seed numbers win).
- [I] marks an inference of ours, [own] a choice of this project where nothing public exists.

`Target.ipu21()` is the full machine; `Target.small(tiles=4, sram_kib=256)` is a test-sized machine with the same
memory map rules (same base address, same region boundary), only fewer tiles and less SRAM.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

KIB = 1024


@dataclass(frozen=True)
class Target:
    """An IPU21-class machine. Frozen: derive variants with `dataclasses.replace` or `Target.small`."""

    name: str = "ipu21"

    # --- chip ---------------------------------------------------------------------------------------------
    # 1472 tiles: S13, S9 [D]; seed 000 "All 1,472 tiles borrow the aperture".
    num_tiles: int = 1472
    # 1.5 GHz: seed 000 (970428 cycles = 0.646952 ms); ~1.49 GHz derived from 280 TFLOPS FP16 (S11) [I].
    clock_hz: float = 1.5e9
    # One supervisor and six worker contexts per tile, six barrel slots: S6 [D], S9 [D].
    num_workers: int = 6
    num_barrel_slots: int = 6

    # --- tile memory --------------------------------------------------------------------------------------
    # TMEM_REGION0_BASE_ADDR = 0x4C000 for ipu21: S19 [3P]; lld image base = region-0 base: S3 [C].
    sram_base: int = 0x4C000
    # 624 KiB per tile: 1472 x 624 KiB ~ 900 MB (S13, S10 [D]); seed 000 ranges end near 0xE8000.
    sram_bytes: int = 624 * KIB
    # Region 0 (non-interleaved, the only executable region) ends at 0x80000: seed 000; IPU_FACTS 2.1 [I].
    region1_base: int = 0x80000
    # Bank = 16 KiB on Mk2: S7 [D]. Region-0 element = one bank (seed 000: code reserves whole 16 KiB elements).
    bank_bytes: int = 16 * KIB
    region0_element_bytes: int = 16 * KIB
    # Region-1 element = a pair of banks interleaved at 64-bit granularity (S7 [D]; seed 000/001: interleaved
    # buffers need 32768-byte aligned starts). The bank of an address inside an element is bit 3 [C+I].
    region1_element_bytes: int = 32 * KIB
    interleave_granule_bytes: int = 8
    # 21-bit byte address space: S20 [D], S4 TMEM_BYTE_MAX_ADDRESS_WIDTH=0x15 [R].
    address_bits: int = 21
    # Memory atom = 64 bits: S4 TMEM_ATOMSIZE [R]; stride units of pace/step loads are atoms: S1 [C].
    atom_bytes: int = 8
    # Alignment: every load/store is naturally aligned (S2: "naturally aligned" in each ld/st text [D]); buffers in
    # interleaved memory that pace loads stream through start 32768-byte aligned (seed 000/001); rpt bodies and
    # bundles are 8-byte aligned (S1 ".align 8" "Repeat alignment" [C]; S3 co-issued pairs are 8 bytes [C]).
    interleaved_buffer_alignment: int = 32 * KIB
    bundle_alignment: int = 8
    # Host exchange aperture 0x50000-0x58000 (32 KiB): seed 000 "Persistent inference".
    host_aperture: tuple[int, int] = (0x50000, 0x58000)
    # Runtime state (stacks grow down inside it): 1760 bytes, seed 000.
    runtime_state_bytes: int = 1760
    # Exchange-table policy cap per tile: 80 KiB, seed 001.
    exchange_table_cap_bytes: int = 80 * KIB

    # --- registers ----------------------------------------------------------------------------------------
    # 16 MRF and 16 ARF 32-bit registers per worker; $m15/$a15 read as zero: S2 manual [D].
    num_mrf: int = 16
    num_arf: int = 16
    # Repeat count register is 16 bits wide: S2 $REPEAT_COUNT [D]; rpt takes zimm12 / zimm8 body: S2 [D].
    repeat_count_bits: int = 16

    # --- compute ------------------------------------------------------------------------------------------
    # AMP F16: f16v4hihov4amp, 4 inputs x 16 engines = 64 MAC/cycle/tile: S1 conv_partial_1x1_*_h16.S [C].
    amp_engines: int = 16
    amp_f16_macs_per_cycle: int = 64
    # AMP FP8: f8v8hihov4amp, 8 inputs x 16 engines = 128 MAC/cycle/tile: S1 inlineAssemblerConv.hpp [C].
    amp_fp8_macs_per_cycle: int = 128
    # Common-weight state: 16 engines x 16 halves = 512 bytes (also 512 B for FP8): S1 [C].
    amp_weight_bytes: int = 512
    # Vector unit: 4 x f16 or 2 x f32 per instruction: S9 [D].
    f16_vector_width: int = 4
    f32_vector_width: int = 2
    # Memory ports: 2 x 64-bit read, 1 x 64-bit write per cycle: S1 PerformanceEstimation.cpp [C].
    read_ports: int = 2
    write_ports: int = 1

    # --- exchange and sync --------------------------------------------------------------------------------
    # ~4 bytes/cycle/tile: 8 TB/s / (1472 x 1.33 GHz) (S12 [3P] + [I]); IPU1 TEXCH_DATA_WIDTH=32 (S4 [R]).
    exchange_bytes_per_cycle: int = 4
    # Two tiles share an exchange bus: S1 ExchangeEstimator.cpp [C].
    tiles_per_exchange_bus: int = 2
    # Send-to-exchange latency 8 cycles (IPU1 BNET_SENDTOEXCHOUTDLY=8, S4 [R]); receive-to-load 2 cycles
    # (MINEXCHIN2LDDLY=2, S4 [R]). Cross-chip-side extra ~17-19 cycles (COLBASE2OPPOSIDEDLY, S4 [R]).
    exchange_send_latency: int = 8
    exchange_recv_to_load: int = 2
    exchange_opposite_side_extra: int = 18
    # Exchange in time (runtime/semantics.py `deliver_exchange`): atom k of a `send` issued at supervisor clock c0
    # departs at c0 + exchange_send_latency + k * 8 / exchange_bytes_per_cycle and arrives at every tile
    # exchange_fabric_cycles later. 16 cycles is an estimate [I]: wire stages plus the receive pipeline, of the
    # order of the IPU1 delay constants (FDLY=9, ERUN2RCV=7, MINEXCHIN2LDDLY=2, S4 [R]); the dependence on the
    # distance between tiles (S15 [3P]) is not modelled.
    exchange_fabric_cycles: int = 16
    # True: the tiles of one exchange bus (tiles_per_exchange_bus) cannot receive atoms of different senders in
    # one cycle (the simulator's check `exchange-overlap`; the exchange schedule respects it). Off by default: the
    # public figures disagree (the 8 TB/s aggregate is ~4 B/cycle into every tile; poplibs' estimator doubles a
    # pair's bandwidth only for shared data), and it would halve the receive bandwidth of pairs that receive
    # different data [I].
    exchange_shared_receive_bus: bool = False
    # Sync costs: supervisor sync charges 6 cycles plus pipeline stall (S1 SLIC estimator [C]); an internal
    # (all-tile) barrier is not public: 150 cycles is our estimate [I], a local (worker) sync 6 cycles [C].
    sync_local_cycles: int = 6
    sync_internal_cycles: int = 150
    # `sync TEXCH_SYNCZONE_RECV` (zone 0, the IPU1 bootloader's "put $INCOMING_DCOUNT; send; sync RECV", S4 [R]):
    # the supervisor waits for its tile's receive window to complete, no other tile involved; its cost past the
    # window's last atom is taken as the local sync's 6 cycles [I].
    sync_recv_cycles: int = 6
    # Supervisor control/system instructions stall ~6 cycles: S1 comments, CISS traces [C].
    supervisor_branch_stall: int = 6

    # ------------------------------------------------------------------------------------------------------
    @staticmethod
    def ipu21() -> Target:
        """The full C600 machine."""
        return Target()

    @staticmethod
    def small(tiles: int = 4, sram_kib: int = 256, name: str | None = None) -> Target:
        """A test-sized machine: the same address map rules with fewer tiles and less SRAM.

        SRAM still starts at 0x4C000; with `sram_kib` <= 208 there is no interleaved region 1.
        """
        t = Target()
        if tiles < 1 or tiles > t.num_tiles:
            raise ValueError(f"tiles must be in [1, {t.num_tiles}], got {tiles}")
        min_kib = (t.host_aperture[1] - t.sram_base) // KIB
        if sram_kib % 16 or not (min_kib <= sram_kib <= 624):
            raise ValueError(f"sram_kib must be a multiple of 16 in [{min_kib}, 624], got {sram_kib}")
        return replace(
            t, name=name or f"small-{tiles}x{sram_kib}k", num_tiles=tiles, sram_bytes=sram_kib * KIB
        )

    # --- derived ------------------------------------------------------------------------------------------
    @property
    def sram_end(self) -> int:
        """One past the last SRAM byte address."""
        return self.sram_base + self.sram_bytes

    @property
    def region0(self) -> tuple[int, int]:
        """[start, end) of the non-interleaved, executable region."""
        return (self.sram_base, min(self.region1_base, self.sram_end))

    @property
    def region1(self) -> tuple[int, int]:
        """[start, end) of the interleaved region (empty when the SRAM is small)."""
        return (self.region1_base, max(self.region1_base, self.sram_end))

    @property
    def total_sram_bytes(self) -> int:
        return self.num_tiles * self.sram_bytes

    @property
    def num_contexts(self) -> int:
        """Contexts per tile: the supervisor (index 0) and the workers (1..num_workers)."""
        return 1 + self.num_workers

    def in_sram(self, addr: int, size: int = 1) -> bool:
        return self.sram_base <= addr and addr + size <= self.sram_end

    def is_interleaved(self, addr: int) -> bool:
        r0, r1 = self.region1
        return r0 <= addr < r1

    def is_executable(self, addr: int) -> bool:
        r0, r1 = self.region0
        return r0 <= addr < r1

    def element_of(self, addr):
        """A global element number of a byte address (elements never straddle the region boundary); an array of
        addresses gives an array."""
        a = np.asarray(addr, np.int64)
        n0 = (self.region1_base - self.sram_base) // self.region0_element_bytes
        e = np.where(
            a < self.region1_base,
            (a - self.sram_base) // self.region0_element_bytes,
            n0 + (a - self.region1_base) // self.region1_element_bytes,
        )
        return int(e) if e.ndim == 0 else e

    def bank_of(self, addr):
        """A global bank number: region-0 bank = element; region-1 element holds 2 banks split on bit 3. An array
        of addresses gives an array."""
        a = np.asarray(addr, np.int64)
        b = self.element_of(a) * 2 + np.where(
            a < self.region1_base, 0, (a // self.interleave_granule_bytes) & 1
        )
        return int(b) if b.ndim == 0 else b

    def natural_alignment(self, access_bytes: int) -> int:
        """Required alignment of a 4/8/16-byte access (natural alignment, S2 [D])."""
        if access_bytes not in (1, 2, 4, 8, 16):
            raise ValueError(f"no {access_bytes}-byte accesses")
        return access_bytes

    def cycles_to_seconds(self, cycles: int | float) -> float:
        return cycles / self.clock_hz


IPU21 = Target.ipu21()
