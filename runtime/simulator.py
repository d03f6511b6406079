"""The instruction-level IPU simulator: the project's device.

State (all tiles at once, numpy):
- `mem64`: uint64 [sram_bytes / 8, tiles], the memory of every tile stored word by word across tiles (word w of
  tile t at flat index w * tiles + t), because a SIMT group mostly touches the same address on many tiles and
  neighbouring words gather ~3.5x faster than one word per 624 KiB tile image (`sram` is a tile-major copy for
  inspection);
- `wstate`: uint8 [sram_bytes / 8, tiles], laid out alike, per 64-bit word: bit 0/1 = low/high 32-bit half written since load (poison
  tracking), bit 2 = protected (code and reserved ranges);
- registers: `m` (MRF) and `a` (ARF) uint32 [contexts, 16], CSRs uint32 [contexts, n_csr];
- AMP: common weights `cwei` uint8 [tiles, 64 slots, 8 bytes] (shared by a tile's workers, written by its
  supervisor), accumulators float32 [workers, 16] x 3 (in progress, next partials, finished; per context).

Contexts are numbered workers first (`tile * 6 + w`), then supervisors (`6 * tiles + tile`), so "every worker of
every tile" is the contiguous range [0, 6 * tiles) and numpy can use views instead of gathers.

Execution is SIMT: contexts at the same PC form a group and execute one instruction (or bundle) as one numpy
operation across tiles and workers. A round advances every running group once; groups split on divergent branches
and merge when they meet again. An rpt loop is held by its group, so looping costs nothing per context.

Two paths (issue 23), with identical results, cycles, profiles and checks: the fast path (default) keeps groups
larger (an rpt loop with uneven per-context counts stays one group; the part of a two-way branch at the higher PC
waits there for the rest, see `_run_fast`) and runs the hottest instructions as compiled kernels
(`runtime/jit.py`, numba) and cached tables, a worker rpt loop of pace forms with F16 AMPs (a GEMM's inner loop)
as one compiled call for all its iterations (`_run_fused`), scalar code (integer arithmetic, ld32 / st32,
branches, the supervisors' exchange program with its set-ups) per context in one compiled call until an
instruction it does not take (`_run_ctx`, `jit.sup_run`), and can split the kernels' contexts over threads in
runs of whole tiles (IPU_SIM_THREADS, `jit.set_threads`; the same bits whatever the count);
`Simulator(target, reference=True)` or IPU_SIM_REFERENCE=1 is the
reference path: the original scheduling and the numpy semantics, which tests/unit/test_sim_fast_path.py compares
against. Only what depends on the order of rounds rather than on simulated time could differ: a `run` into a
worker slot that another worker left without a sync in between (the compiler's code uses `runall` after a sync).

Time (barrel model): every context keeps its own clock in tile cycles. A worker issues every sixth cycle, so an
instruction of cost c advances its clock by 6c (S6, S9 [D]); the supervisor's instructions cost their
`supervisor_cycles` (1, or 6 for control/system stalls, S1 [C]); workers start at the supervisor's clock when it
runs them; `sync` waits for the slowest participant, plus the target's sync cost. Simplification: the supervisor
is not slowed down by running workers (on hardware it only gets the free barrel slots).

Exchange in time (issue 21): a supervisor's `send` records its atoms (read at issue) with its clock c0 before the
instruction; atom k departs at c0 + exchange_send_latency + 2k (8-byte atoms at exchange_bytes_per_cycle = 4) and
arrives at every tile exchange_fabric_cycles later. `put $INCOMING_DCOUNT, v` (v > 0) at clock t opens a receive
window on its tile with the current $INCOMING_MUX / $INCOMING_BASE: it takes the first v atoms of the mux's tile
arriving at or after t. At the next internal sync's release the phase is resolved and checked (exchange-no-sender,
-overlap, -overwrite, -early-send, -late; see the section comment in runtime/semantics.py and `deliver_exchange`);
or, when every supervisor waits on `sync TEXCH_SYNCZONE_RECV` (the end of the backend's timed exchange), it is
resolved then and each tile resumes at the later of its clock and its last window's end (+ sync_recv_cycles),
with no barrier: the data is in before its tile reads it, so no exchange-late.

Checks raise `SimError` naming tile, context, PC, instruction and address (see `runtime/errors.py`).

Use:

    from ipu.backend.asm_text import parse_program          # or isa_program.layout(kernels, base),
    from ipu.runtime.simulator import Simulator             # or encoding.decode_program(image, base, symbols)
    sim = Simulator(Target.small(tiles=4))                  # Target.ipu21() for the full chip
    sim.load(parse_program(text, sim.target.sram_base))     # writes + protects the code image on every tile
    sim.write(0x60000, data, tiles=...)                     # host writes mark memory as written
    sim.protect(start, end)                                 # reserved ranges: stores there raise
    result = sim.run("main")                                # supervisors start at `main` with $lr = 0
    result.tile_cycles, result.context_cycles, result.instructions
    sim.read(0x61000, nbytes, np.float16)                   # [tiles, n]

Profiling (off unless asked; per site and per sync, never per instruction): `sim.recorder = Recorder(T, pcs)`
records every tile's supervisor clock at the run's start, whenever its supervisor reaches one of the code addresses
`pcs` (checked only for supervisor groups: one set lookup per supervisor step), when it executes an internal sync
(arrival) and when the sync releases it, and at the run's end; `recorder.trace()` returns the events.
`ipu.runtime.host.Session.run(..., profile=True)` sets it up from the package's profile sites.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np

from ipu.backend.isa import M_ALIASES, SUPERVISOR_CSRS, WORKER_CSRS, Ctx, Instr
from ipu.backend.isa_program import Program
from ipu.backend.target import Target
from ipu.runtime import fp8, jit, semantics
from ipu.runtime.errors import SimError
from ipu.runtime.halfconv import F16_TO_F32

WRITTEN_LO, WRITTEN_HI, PROTECTED = 1, 2, 4
WRITTEN = WRITTEN_LO | WRITTEN_HI

# CSR columns: one per distinct CSR index (worker and supervisor spaces overlap in indices but a context only
# uses its own space, so one column per index is enough).
_CSR_INDICES = sorted(set(WORKER_CSRS.values()) | set(SUPERVISOR_CSRS.values()))
CSR_COLUMN = np.full(0x200, -1, dtype=np.int64)
CSR_COLUMN[_CSR_INDICES] = np.arange(len(_CSR_INDICES))


# AMP kind (amp_kind: 1 F16, 2 FP8 F143, 3 FP8 F152) -> the common weights' format.
CWEI_FORMAT = {1: "f16", 2: "f143", 3: "f152"}


def _decode_cwei(fmt: str, raw: np.ndarray) -> np.ndarray:
    """Common-weight bytes [..., 8] as float32 [..., 4] (F16) or [..., 8] (FP8 F143 / F152)."""
    from ipu.runtime import fp8

    if fmt == "f16":
        return raw.view(np.float16).astype(np.float32)
    return fp8.DECODE[fp8.F152 if fmt == "f152" else fp8.F143][raw]


def _alloc_sram(rows: int, nbytes: int) -> np.ndarray:
    """A zeroed [rows, nbytes] uint8 array. Backed by an anonymous mapping with transparent huge pages where the
    OS allows it (fewer TLB misses on the simulator's gathers)."""
    try:
        buf = mmap.mmap(-1, rows * nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            buf.madvise(mmap.MADV_HUGEPAGE)
        return np.frombuffer(buf, dtype=np.uint8).reshape(rows, nbytes)
    except (OSError, ValueError, AttributeError):
        return np.zeros((rows, nbytes), dtype=np.uint8)


@dataclass
class Group:
    """Contexts at one PC that step together."""

    pc: int
    idx: np.ndarray  # sorted context indices
    supervisor: bool
    rpt: tuple[int, int, int] | None = None  # (body start, body end, iterations left incl. the current one)
    # Fast path (see Simulator.fast): per-context iterations left (aligned with idx; rpt[2] is then -1), and the
    # contexts that finished the loop early (or had a zero count), which rejoin the group at the body's end.
    left: np.ndarray | None = None
    parked: list[np.ndarray] | None = None
    nofuse: bool = False  # fast path: the next step of this group goes through _step (see _run_fused)

    @property
    def sel(self) -> slice | np.ndarray:
        """A slice when the contexts are contiguous (numpy views), else the index array."""
        i = self.idx
        if len(i) and int(i[-1]) - int(i[0]) + 1 == len(i):
            return slice(int(i[0]), int(i[-1]) + 1)
        return i


class Recorder:
    """Per-tile clocks at marked supervisor PCs and internal syncs (see the module docstring): `clock` [events,
    tiles] int64, and per event one `pc` and `kind` (START, PROBE, ARRIVE, RELEASE, END). Every tile of a BSP
    program passes the same marks in the same order; a mark that disagrees with what other tiles recorded as the
    same event is remembered and `trace()` raises."""

    START, PROBE, ARRIVE, RELEASE, END = 0, 1, 2, 3, 4

    def __init__(self, tiles: int, pcs):
        self.pcs = frozenset(int(p) for p in pcs)
        self.T = tiles
        self.cap = 256
        self.clock = np.zeros((self.cap, tiles), np.int64)
        self.pc = np.zeros(self.cap, np.int64)
        self.kind = np.full(self.cap, -1, np.int8)  # -1: not recorded yet
        self.n = np.zeros(tiles, np.int64)
        self.error: str | None = None

    def reset(self) -> None:
        self.n[:] = 0
        self.kind[:] = -1
        self.error = None

    def mark(self, tiles: np.ndarray, pc, kind: int, clocks: np.ndarray) -> None:
        k = self.n[tiles]
        k0, top = int(k[0]), int(k.max())
        if top >= self.cap:
            grow = max(self.cap, top + 1 - self.cap)
            self.clock = np.concatenate([self.clock, np.zeros((grow, self.T), np.int64)])
            self.pc = np.concatenate([self.pc, np.zeros(grow, np.int64)])
            self.kind = np.concatenate([self.kind, np.full(grow, -1, np.int8)])
            self.cap += grow
        self.clock[k, tiles] = clocks
        self.n[tiles] += 1
        pcs = np.asarray(pc)
        p0 = int(pcs.flat[0])
        if self.kind[k0] < 0:
            self.pc[k0], self.kind[k0] = p0, kind
        if self.error is None and (
            (k != k0).any() or (pcs != p0).any() or self.pc[k0] != p0 or self.kind[k0] != kind
        ):
            self.error = f"tiles passed different profile marks at event {k0} (pc {p0:#x}, kind {kind})"

    def trace(self) -> Trace:
        """The recorded events of the last run as one sequence (SimError if tiles passed different marks)."""
        n = int(self.n[0]) if self.T else 0
        if self.error is None and (self.n != n).any():
            self.error = f"tiles recorded different numbers of events ({self.n.min()}..{self.n.max()})"
        if self.error is not None:
            raise SimError("profile", self.error)
        return Trace(self.clock[:n].copy(), self.pc[:n].copy(), self.kind[:n].copy())


@dataclass
class Trace:
    """Profile events of one run: `clock` [events, tiles] (supervisor clocks, tile cycles), `pc` and `kind`
    [events] (Recorder.START ... END; `pc` is the marked PC or the sync's PC, -1 for START/END)."""

    clock: np.ndarray
    pc: np.ndarray
    kind: np.ndarray


@dataclass
class RunResult:
    """What a run reports: cycles per tile and per context, instructions issued, rounds executed."""

    tile_cycles: np.ndarray  # [tiles] the supervisor's clock at the end (tile cycles)
    context_cycles: np.ndarray  # [tiles, 7]: column 0 = supervisor, 1..6 = workers (busy clock, tile cycles)
    instructions: np.ndarray  # [tiles, 7] instructions issued
    rounds: int

    @property
    def max_cycles(self) -> int:
        return int(self.tile_cycles.max())


class Simulator:
    """All tiles of one IPU (or of a small test target). See the module docstring."""

    def __init__(self, target: Target, *, check_poison: bool = True, reference: bool | None = None):
        self.target = target
        # The fast path (default; see the module docstring); `reference=True` (or the environment variable
        # IPU_SIM_REFERENCE=1) selects the original scheduling and numpy semantics, which tests compare against.
        if reference is None:
            reference = os.environ.get("IPU_SIM_REFERENCE", "") not in ("", "0")
        self.fast = not reference
        T, W = target.num_tiles, target.num_workers
        self.T, self.W = T, W
        self.NW = T * W  # worker contexts
        self.NC = T * W + T  # all contexts
        self.check_poison = check_poison
        self.base = target.sram_base
        self.end = target.sram_end
        self.r1 = target.region1_base
        self.nwords = target.sram_bytes // 8

        # SRAM is stored word-major: word w of tile t is mem64[w, t] (flat index w * T + t). Contexts of one
        # group usually access the same address on many tiles, so their gathers read neighbouring words instead
        # of one word per 624 KiB tile image (a TLB and cache miss each): ~3x faster gathers at 1472 tiles.
        self.word_stride = T  # flat-index distance between consecutive words of one tile
        assert self.nwords * T < 2**32, "word indices are computed in uint32"
        self.mem64 = _alloc_sram(self.nwords, 8 * T).view(np.uint64)  # [nwords, T]
        self.flat64 = self.mem64.reshape(-1)
        self.flat32 = self.mem64.view(np.uint32).reshape(-1)  # 32-bit half h of flat word i: 2 * i + h
        self._tile_bytes = (
            self.mem64.view(np.uint8).reshape(self.nwords, T, 8).transpose(1, 0, 2)
        )  # [T, nw, 8]
        self.wstate = _alloc_sram(self.nwords, T)  # [nwords, T] per-word state, same layout
        self.flat_state = self.wstate.reshape(-1)

        self.m = np.zeros((self.NC, 16), dtype=np.uint32)
        self.a = np.zeros((self.NC, 16), dtype=np.uint32)
        self.a64 = self.a.view(np.uint64)  # [NC, 8]: ARF pairs
        self.csr = np.zeros((self.NC, len(_CSR_INDICES)), dtype=np.uint32)

        self.ctx_tile = np.concatenate([np.arange(self.NW) // W, np.arange(T)]).astype(np.int64)
        # flat 64-bit word index of each context's SRAM start (word-major: the tile; word k adds k * word_stride)
        self.ctx_word_base = self.ctx_tile.copy()
        self.csr[self.NW :, CSR_COLUMN[SUPERVISOR_CSRS["TILE_ID"]]] = np.arange(T)

        self.cwei = np.zeros((T, 64, 8), dtype=np.uint8)
        self._cw_cache: dict[tuple, np.ndarray] = {}
        # Fast path: decoded weights per AMP kind as float64 [T, 4 * K, 16], recomputed lazily for the tiles whose
        # slots changed since (a GEMM loads a block of slots, then runs AMP groups with one kind).
        self._cw64: dict[int, np.ndarray] = {}
        self._cw_dirty: dict[int, np.ndarray] = {}
        # AMP state per worker context (see semantics.py): in-progress sums (float32), the next group's partials
        # and the finished results as raw half bits per phase, and the raw inputs of the group in progress,
        # whose products are added when the group ends (amp_kind: 0 none, 1 F16, 2/3 FP8 with F143/F152
        # weights; amp_scale: the FP8 scale they were issued with; amp_xfmt: the FP8 input format).
        self.acc_cur = np.zeros((self.NW, 16), dtype=np.float32)
        self.amp_next_raw = np.zeros((self.NW, 4), dtype=np.uint64)
        self.amp_done_raw = np.zeros((self.NW, 4), dtype=np.uint64)
        self.amp_xraw = np.zeros((self.NW, 4), dtype=np.uint64)
        self.amp_kind = np.zeros(self.NW, dtype=np.int8)
        self.amp_scale = np.zeros(self.NW, dtype=np.int8)
        self.amp_xfmt = 0

        self.active = np.zeros(self.NC, dtype=bool)
        self.cycles = np.zeros(self.NC, dtype=np.int64)
        self.issued = np.zeros(self.NC, dtype=np.int64)

        self.program: Program | None = None
        self._units: list = []  # indexed by (pc - program.base) // 4 -> compiled unit or None
        self._groups: list[Group] = []
        self._spawned: list[Group] = []
        self._parked: dict[tuple[int, bool], Group] = {}  # fast path: groups waiting at a reconvergence PC
        self._waiting: dict[int, int] = {}  # supervisor ctx -> sync zone
        self._worker_exited = False
        self._n_internal = 0  # supervisors waiting on the internal sync
        self._n_recv = (
            0  # supervisors waiting on their tile's receive (sync RECV: the end of a timed exchange)
        )
        self.x_tile_end = np.full(
            self.T, -1, np.int64
        )  # per tile, its last window's end (the last resolution)
        self._sync_pc = np.zeros(self.NC, dtype=np.int64)  # PC of the sync each waiting supervisor executed
        self._defer: list | None = None
        # The exchange phase since the last internal sync (runtime/semantics.py `deliver_exchange`): sends,
        # receive windows and receive set-ups, each with its clock and a sequence number (program order per tile).
        self.xsends: list = []
        self.xwins: list = []
        self.xsets: list = []
        self.xseq = 0
        self.rounds = 0
        self.recorder: Recorder | None = None  # profiling (off unless set; see the module docstring)
        self.progress = None  # a runtime.progress.Progress (off unless set): cycles, rate and ETA on stderr

    # ------------------------------------------------------------------------------------------------------------
    # Context helpers
    # ------------------------------------------------------------------------------------------------------------
    def context_name(self, ctx: int) -> str:
        return "supervisor" if ctx >= self.NW else f"worker {ctx % self.W}"

    def supervisor_ctx(self, tiles=None) -> np.ndarray:
        t = np.arange(self.T) if tiles is None else np.asarray(tiles)
        return self.NW + t

    def worker_ctx(self, tile: int, worker: int) -> int:
        return tile * self.W + worker

    def fail(self, check: str, message: str, group: Group, ins: Instr | None, which=0, address=None):
        """Raise a SimError for context number `which` (an index into the group)."""
        ctx = int(group.idx[which])
        raise SimError(
            check,
            message,
            tile=int(self.ctx_tile[ctx]),
            context=self.context_name(ctx),
            pc=group.pc,
            instr=ins.text(group.supervisor) if ins is not None else None,
            address=None if address is None else int(address),
        )

    # ------------------------------------------------------------------------------------------------------------
    # Host access to memory
    # ------------------------------------------------------------------------------------------------------------
    def write(self, addr: int, data, tiles=None) -> None:
        """Host write: `data` (bytes-like or numpy array, or [n_tiles, ...] per tile) to `addr` of `tiles`."""
        arr = np.asarray(data)
        tiles_idx = np.arange(self.T) if tiles is None else np.atleast_1d(np.asarray(tiles))
        if arr.ndim >= 2 and arr.shape[0] == len(tiles_idx) and tiles is not None and np.ndim(tiles) > 0:
            raw = np.ascontiguousarray(arr).view(np.uint8).reshape(len(tiles_idx), -1)
        else:
            raw = np.ascontiguousarray(arr).view(np.uint8).reshape(1, -1)
        n = raw.shape[1]
        if not self.target.in_sram(addr, n):
            raise SimError("host", f"write of {n} bytes at {addr:#x} is outside SRAM", address=addr)
        off = addr - self.base
        w0, w1 = off // 8, (off + n + 7) // 8
        block = self._tile_bytes[tiles_idx, w0:w1].reshape(len(tiles_idx), -1)  # whole words: a copy
        block[:, off - 8 * w0 : off - 8 * w0 + n] = raw
        self._tile_bytes[tiles_idx, w0:w1] = block.reshape(len(tiles_idx), w1 - w0, 8)
        # Whole words written; partial words at the edges count as written (host writes are byte-exact).
        self.wstate[np.ix_(np.arange(w0, w1), tiles_idx)] |= WRITTEN

    # Bytes per numpy batch of `write_runs` (its index arrays are 8 bytes per byte written).
    WRITE_BATCH_BYTES = 1 << 22

    def write_runs(self, tiles, addrs, counts, raw) -> None:
        """Host write of many byte runs at once: run i, raw[sum(counts[:i]) : sum(counts[:i + 1])], to addrs[i]
        of tile tiles[i]; the bytes and the written words are what `write` gives run by run (a parameter
        upload: thousands of runs, one numpy scatter per batch instead of a Python call each)."""
        tiles, addrs, counts = (np.asarray(v, dtype=np.int64).reshape(-1) for v in (tiles, addrs, counts))
        raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
        if len(counts) == 0:
            return
        if int(counts.sum()) != raw.size:
            raise SimError("host", f"write of {raw.size} bytes given as runs of {int(counts.sum())} bytes")
        outside = (addrs < self.target.sram_base) | (addrs + counts > self.target.sram_end) | (counts < 0)
        if outside.any():
            i = int(np.argmax(outside))
            raise SimError(
                "host",
                f"write of {int(counts[i])} bytes at {int(addrs[i]):#x} is outside SRAM",
                address=int(addrs[i]),
            )
        if ((tiles < 0) | (tiles >= self.T)).any():
            t = int(tiles[(tiles < 0) | (tiles >= self.T)][0])
            raise SimError("host", f"write to tile {t}: the device has tiles 0..{self.T - 1}", tile=t)
        flat_bytes = self.mem64.view(np.uint8).reshape(-1)
        ends = np.cumsum(counts)
        lo = 0
        while lo < len(counts):  # batches of whole runs, about WRITE_BATCH_BYTES each
            first = int(ends[lo] - counts[lo])
            hi = max(lo + 1, int(np.searchsorted(ends, first + self.WRITE_BATCH_BYTES, side="right")))
            c = counts[lo:hi]
            n = int(c.sum())
            # byte offset in its tile, per byte: the run's start plus the byte's place in the run
            off = np.repeat(addrs[lo:hi] - self.base - (ends[lo:hi] - c - first), c) + np.arange(n)
            word = (off >> 3) * self.T + np.repeat(tiles[lo:hi], c)  # flat word index (word-major SRAM)
            flat_bytes[word * 8 + (off & 7)] = raw[first : first + n]
            self.flat_state[word] |= WRITTEN
            lo = hi

    def read(self, addr: int, nbytes: int, dtype=np.uint8, tiles=None) -> np.ndarray:
        """Host read: [n_tiles, nbytes / itemsize] of `dtype` (no poison check)."""
        off = addr - self.base
        tiles_idx = np.arange(self.T) if tiles is None else np.atleast_1d(np.asarray(tiles))
        w0, w1 = off // 8, (off + nbytes + 7) // 8
        block = self._tile_bytes[tiles_idx, w0:w1].reshape(len(tiles_idx), -1)
        return np.ascontiguousarray(block[:, off - 8 * w0 : off - 8 * w0 + nbytes]).view(dtype)

    @property
    def sram(self) -> np.ndarray:
        """A tile-major copy of all SRAM, [tiles, bytes] (the simulator stores it word-major, see mem64)."""
        return self._tile_bytes.reshape(self.T, -1)

    def protect(self, start: int, end: int) -> None:
        """Mark [start, end) of every tile as protected (code, reserved ranges): stores there raise."""
        w0, w1 = (start - self.base) // 8, (end - self.base + 7) // 8
        self.wstate[w0:w1, :] |= PROTECTED

    # ------------------------------------------------------------------------------------------------------------
    # Program
    # ------------------------------------------------------------------------------------------------------------
    def load(self, program: Program, *, write_image: bool = True) -> None:
        """Load a laid-out program into every tile: compile its units, write and protect the code image."""
        self.program = program
        self.__dict__.pop("_rpt_checked", None)  # rpt bodies are checked once per program
        self.__dict__.pop("_ctx_tabs", None)  # fast path: jit.sup_run's tables (see _ctx_table)
        self.__dict__.pop("_ctx_stops", None)
        self._fused: dict[tuple[int, int], tuple | None] = {}  # fast path: rpt bodies run as one kernel
        self._straight: dict[int, tuple | None] = {}  # fast path: straight runs of such units, by first PC
        self._no_weights = np.zeros((self.target.num_tiles, 16, 16))
        self._f8_bits = np.zeros(256, np.uint64)  # fast path: FP8 -> F16 bits of a fused body's conversions
        # fast path: FP8 AMP inputs by format (amp_xfmt), and the AMP kind and scale of a fused body's call
        self._f8_dec = {f: fp8.DECODE[f].astype(np.float64) for f in (fp8.F143, fp8.F152)}
        self._amp_call = (1, 0)
        n = (program.end - program.base) // 4
        self._units = [None] * max(n, 0)
        for u in program.units:
            handlers = []
            for ins in u.instrs:
                fn = getattr(semantics, ins.form.sem_name, None)
                if fn is None:
                    raise SimError("program", f"no semantics for '{ins.form.key}'", instr=ins.text())
                handlers.append((fn, ins))
            # AUX first with deferred register writes, so both halves of a bundle read the old registers.
            if len(handlers) == 2:
                handlers = [handlers[1], handlers[0]]
            wcost = self.target.num_barrel_slots * max(i.form.cycles for i in u.instrs)
            # supervisor: 1 cycle, or the target's pipeline stall for control/system instructions (S1 [C])
            scost = sum(
                self.target.supervisor_branch_stall
                if i.form.supervisor_cycles > 1
                else i.form.supervisor_cycles
                for i in u.instrs
            )
            self._units[(u.addr - program.base) // 4] = (
                u,
                handlers,
                wcost,
                scost,
                self.target.is_executable(u.addr),
            )
        # Runs of ld64putcs / ld128putcs to consecutive slots (a GEMM block's coefficient loads): one step each.
        self._putcs_run = [0] * len(self._units)
        self._putcs_bytes = [0] * len(self._units)
        self._putcs_cost = [0] * len(self._units)  # the run's supervisor cycles
        per = {semantics.sem_ld64putcs: 8, semantics.sem_ld128putcs: 16}
        for k in range(len(self._units) - 1, -1, -1):
            unit = self._units[k]
            if unit is None or len(unit[1]) != 1 or unit[1][0][0] not in per or not unit[4]:
                continue
            nbytes = per[unit[1][0][0]]
            nxt = self._units[k + 1] if k + 1 < len(self._units) else None
            follows = (
                nxt is not None
                and self._putcs_bytes[k + 1] == nbytes
                and int(nxt[1][0][1].ops[0]) == int(unit[1][0][1].ops[0]) + nbytes // 8
            )
            self._putcs_run[k] = 1 + (self._putcs_run[k + 1] if follows else 0)
            self._putcs_bytes[k] = nbytes
            self._putcs_cost[k] = unit[3] + (self._putcs_cost[k + 1] if follows else 0)
        if write_image and program.units:
            from ipu.backend.encoding import encode_program

            image = encode_program(program)
            if self.target.in_sram(program.base, len(image)):
                self.write(program.base, np.frombuffer(image, dtype=np.uint8))
                self.protect(program.base, program.base + len(image))

    def load_text(self, text: str, base: int | None = None) -> Program:
        """Load Graphcore-syntax assembly text (laid out at `base`, default the region-0 base)."""
        from ipu.backend.asm_text import parse_program

        program = parse_program(text, self.base if base is None else base)
        self.load(program)
        return program

    def load_module(self, module, base: int | None = None) -> Program:
        """Load the `asm.kernel`s of an asm-dialect module."""
        from ipu.backend.isa_program import layout
        from ipu.dialects.asm import module_to_kernels

        program = layout(module_to_kernels(module), self.base if base is None else base)
        self.load(program)
        return program

    def load_image(
        self, image: bytes, symbols: dict[str, tuple[int, bool]], base: int | None = None
    ) -> Program:
        """Load a binary code image (docs/asm-encoding.md) with its kernel symbol table."""
        from ipu.backend.encoding import decode_program

        program = decode_program(image, self.base if base is None else base, symbols)
        self.load(program)
        return program

    def state_bytes(self) -> dict[str, int]:
        """Bytes of the simulator state by part: SRAM, per-word state, and everything else (registers, CSRs,
        AMP state, clocks)."""
        other = (
            self.m,
            self.a,
            self.csr,
            self.cwei,
            self.acc_cur,
            self.amp_next_raw,
            self.amp_done_raw,
            self.amp_xraw,
            self.amp_kind,
            self.amp_scale,
            self.active,
            self.cycles,
            self.issued,
            self.ctx_tile,
            self.ctx_word_base,
            self._sync_pc,
        )
        return {
            "sram": self.mem64.nbytes,
            "word_state": self.wstate.nbytes,
            "other": sum(a.nbytes for a in other),
        }

    def label(self, name: str) -> int:
        assert self.program is not None
        return self.program.labels[name]

    # ------------------------------------------------------------------------------------------------------------
    # Running
    # ------------------------------------------------------------------------------------------------------------
    def run(self, entry: str | int, *, tiles=None, max_rounds: int = 50_000_000) -> RunResult:
        """Start the supervisors of `tiles` (default all) at `entry` and run until every context is idle."""
        if self.program is None:
            raise SimError("program", "no program loaded")
        pc = self.label(entry) if isinstance(entry, str) else int(entry)
        sup = self.supervisor_ctx(tiles)
        self.active[sup] = True
        # Every run starts with $lr = 0 (`br $lr` returns to the host), also the second run of a loaded program.
        self.m[sup, M_ALIASES["lr"]] = 0
        self._groups = [Group(pc, np.sort(sup), True)]
        semantics._x_clear(self)  # no exchange phase spans runs (a run that raised may have left one)
        start_rounds = self.rounds
        self._run_start = self.cycles.copy()
        self._run_start_issued = self.issued.copy()
        rec = self.recorder
        if rec is not None:
            rec.reset()
            rec.mark(sup - self.NW, -1, Recorder.START, self.cycles[sup])
        prog = self.progress
        if prog is not None:
            prog.start()
        try:
            self._run_loop(start_rounds, max_rounds)
        finally:
            if prog is not None:
                prog.finish()
        if self._waiting:
            ctx = next(iter(self._waiting))
            raise SimError(
                "sync",
                f"deadlock: supervisor waits on sync zone {self._waiting[ctx]} forever",
                tile=int(self.ctx_tile[ctx]),
                context="supervisor",
            )
        semantics.exchange_end_of_run(self)  # a receive window no sync resolved is an error
        if rec is not None:
            rec.mark(sup - self.NW, -1, Recorder.END, self.cycles[sup])
        return self.result()

    def _show_progress(self) -> None:
        """Every 256 rounds, when a Progress is set: the furthest supervisor clock since the run's start."""
        self.progress.update(int((self.cycles[self.NW :] - self._run_start[self.NW :]).max()))

    def _run_loop(self, start_rounds: int, max_rounds: int) -> None:
        if self.fast:
            self._run_fast(start_rounds, max_rounds)
            return
        while True:
            if not self._groups:
                self._release_syncs(force_check=True)
                if not self._groups:
                    break
            groups, self._groups = self._groups, []
            for g in groups:
                self._step(g)
            self._collect_round()
            self._close_round(start_rounds, max_rounds)

    def _collect_round(self) -> None:
        """After a round's steps: the contexts it started join the groups, and the syncs it completed release."""
        if self._spawned:
            self._groups.extend(self._spawned)
            self._spawned = []
        if self._waiting:
            self._release_syncs()

    def _close_round(self, start_rounds: int, max_rounds: int) -> None:
        """The end of a round: groups at one PC merge, the round is counted (bounded) and shown."""
        if len(self._groups) > 1:
            self._merge_groups()
        self.rounds += 1
        if self.rounds - start_rounds > max_rounds:
            raise SimError("run", f"no end after {max_rounds} rounds (an infinite loop?)")
        if self.progress is not None and not self.rounds & 255:
            self._show_progress()

    def result(self) -> RunResult:
        """Cycles of the last run (clocks keep counting across runs; the result is this run's share)."""
        T, W = self.T, self.W
        elapsed = self.cycles - getattr(self, "_run_start", 0)
        sup_start = getattr(self, "_run_start", np.zeros(self.NC, np.int64))[self.NW :]
        # workers count from their supervisor's clock at the start of the run
        wk = self.cycles[: self.NW].reshape(T, W) - sup_start[:, None]
        ctxc = np.concatenate([elapsed[self.NW :, None], np.maximum(wk, 0)], axis=1)
        issued = self.issued - getattr(self, "_run_start_issued", 0)
        ins = np.concatenate([issued[self.NW :, None], issued[: self.NW].reshape(T, W)], axis=1)
        return RunResult(elapsed[self.NW :].copy(), ctxc, ins, self.rounds)

    def _run_fast(self, start_rounds: int, max_rounds: int) -> None:
        """The fast path's rounds: the same steps per context as the reference loop, in fewer, larger groups.

        - A group that splits two ways on a branch parks the part at the higher PC there (the join of an `if`
          that skips code, or the exit of a loop that some contexts leave early) until other contexts of the
          same kind arrive at that PC and merge with it, or nothing else can run.
        - An rpt loop keeps its group together (per-context iterations left, see `_rpt_end`).
        Contexts of different tiles only meet at syncs and the workers of one tile only through memory they
        synchronise on, so the order of steps across groups changes no result, cycle count or profile (every
        context's clock advances by its own instructions); tests/unit/test_sim_fast_path.py compares both."""
        parked = self._parked
        parked.clear()
        while True:
            if not self._groups:
                if parked:
                    self._groups = list(parked.values())
                    parked.clear()
                else:
                    self._release_syncs(force_check=True)
                    if not self._groups:
                        break
            groups, self._groups = self._groups, []
            step = self._step
            for g in groups:
                step(g)
            self._collect_round()
            if parked:
                for g in self._groups:
                    if g.rpt is None:
                        h = parked.pop((g.pc, g.supervisor), None)
                        if h is not None:
                            g.idx = np.sort(np.concatenate([g.idx, h.idx]))
                            if not parked:
                                break
            self._close_round(start_rounds, max_rounds)

    def _park(self, g: Group) -> None:
        key = (g.pc, g.supervisor)
        h = self._parked.get(key)
        if h is not None:
            g.idx = np.sort(np.concatenate([g.idx, h.idx]))
        self._parked[key] = g

    def _rpt_end(self, g: Group) -> None:
        """Fast path, end of an rpt body: contexts with iterations left run it again; the others wait (parked
        in the group) and the whole group leaves together after the last iteration of the longest count."""
        start, end, _ = g.rpt
        left = g.left - 1
        keep = left > 0
        if keep.all():
            g.pc, g.left = start, left
            self._groups.append(g)
            return
        parked = g.parked or []
        if not keep.any():
            idx = np.sort(np.concatenate([*parked, g.idx])) if parked else g.idx
            self._groups.append(Group(end, idx, g.supervisor))
            return
        self._groups.append(
            Group(start, g.idx[keep], g.supervisor, g.rpt, left[keep], [*parked, g.idx[~keep]])
        )

    def _merge_rpt(self, h: Group, g: Group) -> None:
        """Fast path: one group of two at the same PC of the same rpt body."""
        idx = np.concatenate([h.idx, g.idx])
        order = np.argsort(idx, kind="stable")
        h.idx = idx[order]
        h.left = np.concatenate([h.left, g.left])[order]
        h.parked = (h.parked or []) + (g.parked or []) or None

    def _merge_groups(self) -> None:
        merged: dict[tuple, Group] = {}
        out: list[Group] = []
        for g in self._groups:
            if g.rpt is not None:
                if g.left is not None:  # fast path: rpt groups at one PC of one body merge too
                    key = (g.pc, g.supervisor, g.rpt[0], g.rpt[1])
                    if key in merged:
                        self._merge_rpt(merged[key], g)
                        continue
                    merged[key] = g
                out.append(g)
                continue
            key = (g.pc, g.supervisor)
            if key in merged:
                h = merged[key]
                h.idx = np.sort(np.concatenate([h.idx, g.idx]))
            else:
                merged[key] = g
                out.append(g)
        self._groups = out

    def _step(self, g: Group) -> None:
        """Execute the unit at g.pc for every context of g, then place the contexts at their next PC."""
        if g.left is not None and not g.supervisor and g.pc == g.rpt[0]:  # fast path, a worker rpt body
            if g.nofuse:
                g.nofuse = False
            elif self._run_fused(g):
                return
        elif self.fast and g.rpt is None:
            if g.nofuse:
                g.nofuse = False
            elif g.supervisor:  # fast path, supervisor code: each context on its own (see _run_ctx)
                if jit.sup_run is not None and self._run_ctx(g):
                    return
            elif self._run_straight(g):  # fast path, worker code outside rpt loops: pace forms
                return
            elif jit.sup_run is not None and self._run_ctx(g):  # worker scalar code, each context on its own
                return
        prog = self.program
        k = (g.pc - prog.base) >> 2
        unit = self._units[k] if 0 <= k < len(self._units) and g.pc % 4 == 0 else None
        if unit is None:
            if not self.target.is_executable(g.pc):
                self.fail("fetch", "instruction fetch outside region 0 (the only executable region)", g, None)
            self.fail("fetch", "instruction fetch from an address that holds no instruction", g, None)
        u, handlers, wcost, scost, executable = unit
        rec = self.recorder
        if rec is not None and g.supervisor and g.pc in rec.pcs:
            rec.mark(g.idx - self.NW, g.pc, Recorder.PROBE, self.cycles[g.idx])
        if not executable:
            self.fail("fetch", "instruction fetch outside region 0 (the only executable region)", g, None)
        sel = g.sel
        result = None
        run = self._putcs_run[k] if g.supervisor and g.rpt is None else 0
        if run > 1 and (rec is None or not any(g.pc + 4 * j in rec.pcs for j in range(1, run))):
            # A GEMM block's coefficient loads in one step (the same loads, checks, slots, cycles and issue
            # counts as one at a time; the tile's workers are idle: the supervisor synced before loading).
            done = semantics.putcs_run(self, g, sel, handlers[0][1], run, self._putcs_bytes[k])
            if done:
                self.cycles[sel] += self._putcs_cost[k]  # done == run: all of it or nothing
                self.issued[sel] += done
                g.pc += 4 * done
                self._groups.append(g)
                return
        if len(handlers) == 2:
            (fa, ia), (fm, im) = handlers
            self._check_context(g, ia)
            self._check_context(g, im)
            self._defer = []
            fa(self, g, sel, ia)
            deferred, self._defer = self._defer, None
            result = fm(self, g, sel, im)
            for arr, rows, col, vals in deferred:
                arr[rows, col] = vals
        else:
            fn, ins = handlers[0]
            self._check_context(g, ins)
            result = fn(self, g, sel, ins)
        if g.supervisor:
            self.cycles[sel] += scost
        else:
            self.cycles[sel] += wcost
        self.issued[sel] += len(handlers)
        nxt = g.pc + u.size
        if result is None:
            if g.rpt is not None and nxt == g.rpt[1]:
                if g.left is not None:
                    self._rpt_end(g)
                    return
                start, end, left = g.rpt
                if left > 1:
                    self._groups.append(Group(start, g.idx, g.supervisor, (start, end, left - 1)))
                else:
                    self._groups.append(Group(nxt, g.idx, g.supervisor))
                return
            g.pc = nxt
            self._groups.append(g)
            return
        kind = result[0]
        if kind == "branch":  # per-context next PCs
            targets = np.asarray(result[1], dtype=np.int64)
            if len(targets) and (targets == targets[0]).all():
                g.pc = int(targets[0])
                self._groups.append(g)
                return
            u = np.unique(targets)
            if self.fast and len(u) == 2:  # park the part at the higher PC (see _run_fast)
                lo = targets == u[0]
                self._groups.append(Group(int(u[0]), g.idx[lo], g.supervisor))
                self._park(Group(int(u[1]), g.idx[~lo], g.supervisor))
                return
            for t in u:
                self._groups.append(Group(int(t), g.idx[targets == t], g.supervisor))
        elif kind == "rpt":  # (per-context counts, body start, body end)
            counts, start, end = result[1], result[2], result[3]
            if self.fast:  # one group through the loop (see _rpt_end)
                counts = np.asarray(counts, dtype=np.int64)
                nz = counts > 0
                if not nz.any():
                    self._groups.append(Group(end, g.idx, g.supervisor))
                elif nz.all():
                    self._groups.append(Group(start, g.idx, g.supervisor, (start, end, -1), counts))
                else:
                    self._groups.append(
                        Group(start, g.idx[nz], g.supervisor, (start, end, -1), counts[nz], [g.idx[~nz]])
                    )
                return
            for c in np.unique(counts):
                idx = g.idx[counts == c]
                if c == 0:
                    self._groups.append(Group(end, idx, g.supervisor))  # a zero count branches over the body
                else:
                    self._groups.append(Group(start, idx, g.supervisor, (start, end, int(c))))
        elif kind == "exit":
            self.active[g.idx] = False
            self._worker_exited = True
        elif kind == "wait":  # supervisor waits on a sync zone
            for c in g.idx:
                self._waiting[int(c)] = result[1]
            if result[1] == 0:
                self._n_recv += len(g.idx)
            if result[1] == 3:
                self._n_internal += len(g.idx)
                if rec is not None:
                    rec.mark(g.idx - self.NW, g.pc, Recorder.ARRIVE, self.cycles[g.idx])
        else:  # pragma: no cover
            raise AssertionError(kind)

    def _fused_row(self, a: int):
        """Fast path: the jit.rpt_loop body row of the unit at a (see _fused_body), or None when the unit is not
        a pace form (ld2xst64pace, ldst64pace, ld2x64pace with distinct destinations, st64pace) alone or with an
        E4 f16v4hihov4amp or an fnop beside it."""
        S = semantics
        k = (a - self.program.base) >> 2
        unit = self._units[k] if 0 <= k < len(self._units) and a % 4 == 0 else None
        if unit is None or not unit[4] or len(unit[1]) not in (1, 2):
            return None
        if len(unit[1]) == 2:
            (fa, ia), (fm, im) = unit[1]  # AUX first (see _step)
        else:
            (fm, im), fa, ia = unit[1][0], S.sem_fnop, None
        if fm not in (S.sem_ld2xst64pace, S.sem_ldst64pace, S.sem_ld2x64pace, S.sem_st64pace):
            return None
        if fa not in (S.sem_f16v4hihov4amp, S.sem_f8v8hihov4amp, S.sem_fnop, S.sem_f8v4tof16):
            return None
        if im.form.ctx == Ctx.SUPERVISOR or (ia is not None and ia.form.ctx == Ctx.SUPERVISOR):
            return None
        r = [0] * jit.BODY_COLS
        sv = im.operand("sel")
        ops = im.ops
        if fm is S.sem_ld2xst64pace:
            r[jit.B_NL], r[jit.B_STORE], r[jit.B_SRC] = 2, 1, ops[1] // 2
            r[jit.B_D0], r[jit.B_D1] = ops[0] // 2, (ops[0] + 2) // 2
            sels = (sv & 3, (sv >> 2) & 3, (sv >> 4) & 3)
        elif fm is S.sem_ldst64pace:
            r[jit.B_NL], r[jit.B_STORE], r[jit.B_SRC], r[jit.B_D0] = 1, 1, ops[1] // 2, ops[0] // 2
            sels = (sv & 3, -1, (sv >> 2) & 3)
        elif fm is S.sem_ld2x64pace:
            if ops[0] == ops[1]:  # an error the numpy semantics report
                return None
            r[jit.B_NL], r[jit.B_D0], r[jit.B_D1] = 2, ops[0] // 2, ops[1] // 2
            sels = (sv & 3, (sv >> 2) & 3, -1)
        else:
            r[jit.B_STORE], r[jit.B_SRC] = 1, ops[0] // 2
            sels = (-1, -1, sv & 3)
        r[jit.B_AREG], r[jit.B_STRIDE] = im.operand("addr"), im.operand("stride")
        r[jit.B_S0], r[jit.B_S1], r[jit.B_S2] = sels
        if fa is S.sem_f16v4hihov4amp or fa is S.sem_f8v8hihov4amp:
            d, xreg, p, flags = ia.ops
            if flags >> 2 != 2:  # an error the numpy semantics report
                return None
            aux = jit.AUX_AMP_F16 if fa is S.sem_f16v4hihov4amp else jit.AUX_AMP_F8
            r[jit.B_AMP], r[jit.B_ADST], r[jit.B_AX], r[jit.B_AP] = aux, d // 2, xreg // 2, p // 2
            r[jit.B_PHASE] = flags & 3
        elif fa is S.sem_f8v4tof16:  # FP8 -> F16 with the group's one $FP_NFMT / $FP_SCL (see _f8_table)
            r[jit.B_AMP], r[jit.B_ADST], r[jit.B_AX] = jit.AUX_F8TOF16, ia.ops[0] // 2, ia.ops[1]
        r[jit.B_COST] = unit[2]
        r[jit.B_ISSUE] = len(unit[1])
        return r, unit[0].size

    def _fused_body(self, start: int, end: int):
        """Fast path: (body rows for jit.rpt_loop, bundle PCs) when every unit of the rpt body [start, end) is a
        pace form alone or with an F16 AMP or an fnop beside it (_fused_row); else None."""
        key = (start, end)
        if key in self._fused:
            return self._fused[key]
        rows, pcs, a = [], [], start
        while jit.rpt_loop is not None and a < end:
            row = self._fused_row(a)
            if row is None:
                break
            rows.append(row[0])
            pcs.append(a)
            a += row[1]
        spec = (np.array(rows, np.int64), pcs) if rows and a == end else None
        self._fused[key] = spec
        return spec

    def _straight_run(self, pc: int):
        """Fast path: (body rows, unit PCs, the PC after them) of the longest run of units from pc that
        _fused_row accepts (a GEMM worker's prologue and epilogue around its rpt loop), or None."""
        spec = self._straight.get(pc, False)
        if spec is not False:
            return spec
        rows, pcs, a = [], [], pc
        while jit.rpt_loop is not None:
            row = self._fused_row(a)
            if row is None:
                break
            rows.append(row[0])
            pcs.append(a)
            a += row[1]
        spec = (np.array(rows, np.int64), pcs, a) if rows else None
        self._straight[pc] = spec
        return spec

    def _run_straight(self, g: Group) -> bool:
        """Fast path: a worker group outside rpt loops at the start of a run of units that _fused_row accepts
        executes the run in one jit.rpt_loop call (one iteration: every unit once, as one step of the group
        each, the same checks, cycles and issue counts). The run ends before the first PC where a group of
        workers is parked (so the merge there happens as when stepping). If a unit's check would fail (or a NaN
        sum needs the numpy semantics), the group stops just before it and _step runs it. False: not run."""
        spec = self._straight_run(g.pc)
        if spec is None:
            return False
        body, pcs, end = spec
        if self._parked:
            for b in range(1, len(pcs)):
                if (pcs[b], False) in self._parked:
                    body, pcs, end = body[:b], pcs[:b], pcs[b]
                    break
        idx = np.array(g.idx, dtype=np.int64)
        if not self._fusable(idx, body):
            return False
        runs = self._call_rpt_loop(idx, np.ones(len(idx), np.int64), body)
        done = self._rpt_done
        out = []
        for r0, _, n, nd, b in runs:
            if b >= 0:  # stopped before unit b: _step runs it (nofuse), then the run resumes after it
                self._groups.append(Group(pcs[b], idx[r0 : r0 + n], False, nofuse=True))
            if nd:
                out.append(done[r0 : r0 + nd])
        if out:
            self._groups.append(Group(end, out[0] if len(out) == 1 else np.concatenate(out), False))
        return True

    def _fusable(self, idx: np.ndarray, body: np.ndarray) -> bool:
        """Whether the state of the contexts idx lets jit.rpt_loop run body: one AMP kind in the body, and the
        group's pending products of that kind or none; FP8 AMPs: one input format and scale over the group's
        tiles (sem_f8v8hihov4amp's settings, then set for the call as self._amp_call) and no pending products
        elsewhere in another input format; one FP8 conversion setting for the group (FP8 -> F16: the table
        `_f8_table` is then set for the call). No unit of such a body writes a CSR."""
        aux = body[:, jit.B_AMP]
        f16, f8 = (aux == jit.AUX_AMP_F16).any(), (aux == jit.AUX_AMP_F8).any()
        self._amp_call = (1, 0)
        if f16 and f8:
            return False
        if f16 and (self.amp_kind[idx] > 1).any():
            return False
        if f8:
            sup = self.NW + self.ctx_tile[idx]
            infmt = self.csr[sup, semantics._col(semantics.SC["FP_INFMT"])]
            iscl = self.csr[sup, semantics._col(semantics.SC["FP_ISCL"])]
            if (infmt != infmt[0]).any() or (iscl != iscl[0]).any():
                return False  # the numpy semantics report it
            wfmt, xfmt = int(infmt[0]) & 1, (int(infmt[0]) >> 1) & 1
            v = int(iscl[0]) & 0x7F
            kind = 3 if wfmt else 2
            pending = self.amp_kind[idx]
            if ((pending != 0) & (pending != kind)).any():
                return False
            if xfmt != self.amp_xfmt and self.amp_kind.any():
                return False
            self.amp_xfmt = xfmt
            self._amp_call = (kind, v - 128 if v & 0x40 else v)
        if (aux == jit.AUX_F8TOF16).any():
            fmt, scl, _ = semantics._fp8_csrs(self, idx)
            key = fmt.astype(np.int64) | (scl.astype(np.int64) & 0x3F) << 1
            if (key != key[0]).any():
                return False
            from ipu.runtime import fp8

            table = semantics._f8_table(int(fmt[0]), fp8.scale_from_csr(int(scl[0]) & 0x3F))
            self._f8_bits = table.view(np.uint16).astype(np.uint64)
        return True

    def _call_rpt_loop(self, idx: np.ndarray, left: np.ndarray, body: np.ndarray):
        """jit.rpt_loop over the contexts idx with iterations left; the contexts that finished are in
        self._rpt_done (see jit.run_rpt_loop for the runs returned)."""
        done = self._rpt_done = np.empty(len(idx), np.int64)
        status = np.zeros(2, np.int64)
        aux = body[:, jit.B_AMP]
        akind, ascale = self._amp_call  # set by _fusable
        amp = (aux == jit.AUX_AMP_F16).any() or (aux == jit.AUX_AMP_F8).any()
        w = self.cwei_matrix(akind) if amp else self._no_weights
        f8_dec = self._f8_dec[self.amp_xfmt]
        t = self.target
        return jit.rpt_loop(
            (
                self.m, self.a64, self.flat_state, self.flat64, self.ctx_word_base, idx, left, done, status, body,
                self.base, self.end, self.r1, t.region0_element_bytes, t.region1_element_bytes, self.check_poison,
                self.word_stride, self.amp_kind, self.acc_cur, self.acc_cur.view(np.uint32), self.amp_next_raw,
                self.amp_done_raw, self.amp_xraw, w, F16_TO_F32, self.W, self.cycles, self.issued, self.a,
                self._f8_bits, self.amp_scale, f8_dec, akind, ascale,
            )
        )  # fmt: skip

    def _run_fused(self, g: Group) -> bool:
        """Fast path: a worker group at the start of an rpt body that _fused_body accepts runs the whole loop in
        one jit.rpt_loop call: the same steps, checks, cycles and issue counts as stepping it bundle by bundle
        (each bundle one step of the whole group, the contexts whose count is done parked until the longest
        finishes). If a bundle's check would fail (or needs the numpy semantics: a NaN sum), the group is left
        just before that bundle and _step runs it. False: not fused (the body or the AMP state does not fit).
        Only the order of this group's steps against other groups' changes (see _run_fast); a supervisor
        changing the AMP weights while its workers run the loop (no compiled program does: it syncs first)
        would see the loop run before it."""
        spec = self._fused_body(g.rpt[0], g.rpt[1])
        if spec is None:
            return False
        body, pcs = spec
        idx = np.array(g.idx, dtype=np.int64)
        if not self._fusable(idx, body):
            return False
        left = np.array(g.left, dtype=np.int64)
        runs = self._call_rpt_loop(idx, left, body)
        done = self._rpt_done
        # One run: the group's own state. Several (runs of whole tiles on threads, see jit.chunks): the runs
        # share nothing, and each stopped run continues as its own group (groups of different tiles). Known
        # limit: if runs fail checks at different iterations of one loop, the error raised can name another
        # failing context than one thread would (a successful run's results are the same bits).
        out = list(g.parked or [])
        for r0, _, n, nd, b in runs:
            if nd:
                out.append(done[r0 : r0 + nd])
            if b >= 0:
                s = slice(r0, r0 + n)
                self._groups.append(Group(pcs[b], idx[s], False, g.rpt, left[s], out or None, nofuse=b == 0))
                out = []
        if out:
            self._groups.append(Group(g.rpt[1], np.sort(np.concatenate(out)), False))
        if self.progress is not None:  # a fused loop is many rounds' work in one (progress: every 256 rounds)
            self._show_progress()
        return True

    def _ctx_table(self, worker: bool) -> np.ndarray:
        """Fast path: the jit.sup_run row (SUP_* columns) of every code word for supervisor (worker=False) or
        worker code: the scalar instructions it takes (integer arithmetic, setzi, ld32 / st32 into / from the MRF
        and their step forms, branches, call, tapack; supervisors also delay, get and put: plain CSR writes and
        the exchange set-ups), S_STOP for everything else (and for a put the numpy semantics would refuse or
        that flushes the AMPs: $FP_INFMT, $FP_ISCL, read-only CSRs), each with the unit's cycles."""
        tabs = self.__dict__.setdefault("_ctx_tabs", {})
        if worker in tabs:
            return tabs[worker]
        S = semantics
        tab = np.zeros((len(self._units), jit.SUP_COLS), np.int64)
        alu = {op: i for i, op in enumerate(jit.ALU_OPS)}
        xs = {S._X_MUX: jit.PUT_MUX, S._X_BASE: jit.PUT_BASE, S._X_DCOUNT: jit.PUT_DCOUNT}
        no_put = {S.SC["FP_INFMT"], S.SC["FP_ISCL"], S.SC["TILE_ID"]}
        for k, unit in enumerate(self._units):
            if unit is None or not unit[4] or len(unit[1]) != 1 or unit[0].size != 4:
                continue
            ins = unit[1][0][1]
            if ins.form.ctx == (Ctx.SUPERVISOR if worker else Ctx.WORKER):
                continue
            key, ops = ins.form.key, [int(o) for o in ins.ops]
            name, _, form = key.rpartition("_")
            row = None
            if key in ("nop", "fnop"):
                row = (jit.S_NOP, 0, 0, 0, 0, 0)
            elif key in ("setzi_m", "setzi_ml") and 0 <= ops[1] < 1 << 32:
                row = (jit.S_SETZI, 0, ops[0], ops[1], 0, 0)
            elif name in alu and form in ("rr", "ri"):
                b = ops[2] & 0xFFFFFFFF if form == "ri" else ops[2]
                row = (jit.S_ALU, alu[name], ops[0], ops[1], b, int(form == "ri"))
            elif key in ("ld32_mr", "ld32_mi", "ld32step_mr", "ld32step_mi"):
                op = jit.S_LD32STEP if name == "ld32step" else jit.S_LD32
                row = (op, int(form == "mr"), *ops[:4])
            elif key in ("st32_mr", "st32_mi", "st32step_mr", "st32step_mi"):
                op = jit.S_ST32STEP if name == "st32step" else jit.S_ST32
                row = (op, int(form == "mr"), *ops[:4])
            elif key == "br":
                row = (jit.S_BR, 0, ops[0], 0, 0, 0)
            elif key == "bri":
                row = (jit.S_BRI, 0, ops[0] * 4, 0, 0, 0)
            elif key == "call":
                row = (jit.S_CALL, 0, ops[0], ops[1] * 4, 0, 0)
            elif key in ("brz", "brnz", "brnzdec"):
                op = {"brz": jit.S_BRZ, "brnz": jit.S_BRNZ, "brnzdec": jit.S_BRNZDEC}[key]
                row = (op, 0, ops[0], ops[1] * 4, 0, 0)
            elif key == "tapack" and ops[0] < 15:
                row = (jit.S_TAPACK, 0, *ops[:4])
            elif worker:
                pass
            elif key == "delay":
                row = (jit.S_DELAY, 0, ops[0], 0, 0, 0)
            elif key == "get" and (ops[1] == S.WC["FP_CLR"] or CSR_COLUMN[ops[1]] >= 0):
                col = max(int(CSR_COLUMN[ops[1]]), 0)
                row = (jit.S_GET, 0, ops[0], col, int(ops[1] == S.WC["FP_CLR"]), 0)
            elif key == "put" and ops[0] not in no_put and CSR_COLUMN[ops[0]] >= 0:
                row = (jit.S_PUT, xs.get(ops[0], jit.PUT_PLAIN), ops[0], ops[1], int(CSR_COLUMN[ops[0]]), 0)
            if row is not None:
                tab[k, : jit.SUP_COST] = row
                tab[k, jit.SUP_COST] = unit[2] if worker else unit[3]
        tabs[worker] = tab
        return tab

    def _run_ctx(self, g: Group) -> bool:
        """Fast path: every context of a group outside rpt loops runs on its own through the scalar instructions
        of _ctx_table (jit.sup_run) until one it does not take (a send, sync, run, a pace form, rpt, ...), a
        check that would fail, or a profile mark; the contexts then form groups by the PC where they stopped
        (where a check would fail or a mark is due, the next step goes through _step (nofuse): the numpy
        semantics execute it and report a failing check). Supervisors of different tiles share nothing between
        syncs but the exchange, whose set-ups (puts to $INCOMING_MUX / BASE / DCOUNT) are recorded with their
        clocks and per-tile program order as the numpy semantics record them, and the workers of one tile meet
        only through memory they synchronise on, so only the order of steps across contexts changes (see
        _run_fast). False: no context executed anything (the step path runs the group)."""
        worker = not g.supervisor
        tab = self._ctx_table(worker)
        rec = self.recorder
        key = None if rec is None or worker else rec.pcs
        stops = self.__dict__.setdefault("_ctx_stops", {})
        if stops.get(worker, (0, None))[0] is not key:
            stop = np.zeros(len(tab), np.uint8)
            if key is not None:
                for p in key:
                    k = (p - self.program.base) >> 2
                    if 0 <= k < len(stop):
                        stop[k] = 1
            stops[worker] = (key, stop)
        stop = stops[worker][1]
        idx = np.array(g.idx, dtype=np.int64)
        n = len(idx)
        out_pc = np.empty(n, np.int64)
        out_n = np.empty(n, np.int64)
        ev = self.__dict__.get("_sup_ev")
        if ev is None:
            ev = self._sup_ev = np.zeros((4096, jit.EV_COLS), np.int64)
        ev_n = np.zeros(1, np.int64)
        S = semantics
        jit.sup_run(
            self.m, self.csr, self.cycles, self.issued, self.flat32, self.flat_state, self.ctx_word_base, idx,
            tab, stop, self.program.base, self.base, self.end, self.word_stride, self.check_poison,
            S._col(S._X_MUX), S._col(S._X_BASE), S._col(S._X_DCOUNT), self.SUP_BUDGET, out_pc, out_n, ev, ev_n,
            g.pc,
        )  # fmt: skip
        top = int(out_n.max())
        if top == 0:
            return False
        ne = int(ev_n[0])
        if ne:
            self._sup_events(ev[:ne])
        if top > 1:  # rounds count steps (max_rounds, progress): the furthest context's
            self.rounds += top - 1
        base, nu = self.program.base, len(tab)
        same = bool((out_pc == out_pc[0]).all())
        for pc in [int(out_pc[0])] if same else np.unique(out_pc).tolist():
            k = (pc - base) >> 2
            # stopped at an instruction of the table: a failing check, a mark or the budget; else one it does not take
            nofuse = pc % 4 == 0 and 0 <= k < nu and tab[k, jit.SUP_OP] != jit.S_STOP
            self._groups.append(Group(pc, idx if same else idx[out_pc == pc], g.supervisor, nofuse=nofuse))
        return True

    SUP_BUDGET = 1 << 16  # instructions per context and jit.sup_run call

    def _sup_events(self, ev: np.ndarray) -> None:
        """jit.sup_run's exchange set-ups as semantics._exchange_setup records them: windows (a $INCOMING_DCOUNT
        put of v > 0) in xwins, the other set-ups in xsets, each event with its own sequence number (program
        order per tile, after every event recorded before) and PC."""
        n = len(ev)
        seq = self.xseq + np.arange(n, dtype=np.int64)
        self.xseq += n
        tiles = self.ctx_tile[ev[:, 0]]
        win = (ev[:, 7] == jit.PUT_DCOUNT) & (ev[:, 4] > 0)
        if win.any():
            e = ev[win]
            self.xwins.append((tiles[win], e[:, 1].copy(), seq[win], e[:, 5].copy(), e[:, 6].copy(), e[:, 4].copy(),
                               e[:, 2].copy()))  # fmt: skip
        if not win.all():
            e = ev[~win]
            self.xsets.append((tiles[~win], e[:, 1].copy(), seq[~win], e[:, 2].copy(), e[:, 3].copy()))

    def _check_context(self, g: Group, ins: Instr) -> None:
        ctx = ins.form.ctx
        if g.supervisor and ctx == Ctx.WORKER:
            self.fail(
                "register-class",
                f"'{ins.mnemonic}' is a worker instruction (ARF/AUX); the supervisor cannot issue it",
                g,
                ins,
            )
        if not g.supervisor and ctx == Ctx.SUPERVISOR:
            self.fail("register-class", f"'{ins.mnemonic}' is a supervisor-only instruction", g, ins)

    def _release_local(self, release: list[int]) -> None:
        """Supervisors waiting on their tile's workers (zone 2), whose workers are all done: each resumes at the
        later of its clock and its workers', plus the local sync's cost."""
        rel = np.array(release, dtype=np.int64)
        wclock = self.cycles[: self.NW].reshape(self.T, self.W)[rel - self.NW].max(axis=1)
        self.cycles[rel] = np.maximum(self.cycles[rel], wclock) + self.target.sync_local_cycles
        for c in release:
            del self._waiting[c]
        self._resume(rel)

    def _internal_sync(self, rel: np.ndarray) -> None:
        """An internal sync (zone 3) reached by every running supervisor rel: one clock for all (the latest, plus
        the sync's cost), the release recorded, the exchange of the superstep delivered. The caller drops rel
        from the waiting set and resumes it."""
        self.cycles[rel] = self.cycles[rel].max() + self.target.sync_internal_cycles
        if self.recorder is not None:
            self.recorder.mark(rel - self.NW, self._sync_pc[rel], Recorder.RELEASE, self.cycles[rel])
        semantics.deliver_exchange(self, rel - self.NW)

    def _release_syncs(self, force_check: bool = False) -> None:
        """Release waiting supervisors whose sync condition holds."""
        if not self._waiting:
            return
        n_internal = self._n_internal
        if not (self._worker_exited or force_check) and n_internal < self.active[self.NW :].sum():
            return
        if self.fast:
            self._release_syncs_fast(force_check)
            return
        if self._recv_ready():
            self._recv_sync()
            return
        T, W = self.T, self.W
        local = [c for c, z in self._waiting.items() if z == 2]
        if local and (self._worker_exited or force_check):
            self._worker_exited = False
            busy = self.active[: self.NW].reshape(T, W).any(axis=1)
            release = [c for c in local if not busy[c - self.NW]]
            if release:
                self._release_local(release)
        internal = [c for c, z in self._waiting.items() if z == 3]
        running_sup = self.active[self.NW :].sum()
        if internal and len(internal) == running_sup and not any(z != 3 for z in self._waiting.values()):
            if self._groups and any(g.supervisor for g in self._groups):
                return
            rel = np.array(sorted(internal), dtype=np.int64)
            self._internal_sync(rel)
            for c in internal:
                del self._waiting[c]
            self._n_internal -= len(internal)
            self._resume(rel)
        elif force_check and self._waiting and not self._groups:
            ctx = next(iter(self._waiting))
            raise SimError(
                "sync",
                f"deadlock: supervisor waits on sync zone {self._waiting[ctx]} and nothing else runs",
                tile=int(self.ctx_tile[ctx]),
                context="supervisor",
            )

    def _release_syncs_fast(self, force_check: bool) -> None:
        """_release_syncs without a pass over every waiting supervisor per round: sync zones are 2 or 3 only
        (sem_sync), so the local waiters are counted as len(_waiting) - _n_internal; the same releases."""
        if self._recv_ready():
            self._recv_sync()
            return
        waiting = self._waiting
        T, W = self.T, self.W
        if len(waiting) > self._n_internal + self._n_recv and (self._worker_exited or force_check):
            self._worker_exited = False
            busy = self.active[: self.NW].reshape(T, W).any(axis=1)
            release = [c for c, z in waiting.items() if z == 2 and not busy[c - self.NW]]
            if release:
                self._release_local(release)
        n_internal = self._n_internal
        if n_internal and n_internal == len(waiting) and n_internal == self.active[self.NW :].sum():
            if self._groups and any(g.supervisor for g in self._groups):
                return
            rel = np.array(sorted(waiting), dtype=np.int64)
            self._internal_sync(rel)
            waiting.clear()
            self._n_internal = 0
            self._resume(rel)
        elif force_check and waiting and not self._groups:
            ctx = next(iter(waiting))
            raise SimError(
                "sync",
                f"deadlock: supervisor waits on sync zone {waiting[ctx]} and nothing else runs",
                tile=int(self.ctx_tile[ctx]),
                context="supervisor",
            )

    def _recv_ready(self) -> bool:
        """Every running supervisor waits on a RECV or internal sync, at least one on RECV, and no supervisor
        group is left to run: every send of the phase is issued, so its exchange can be resolved."""
        n = self._n_recv
        if not n or n + self._n_internal != len(self._waiting):
            return False
        if n + self._n_internal != self.active[self.NW :].sum():
            return False
        return not (self._groups and any(g.supervisor for g in self._groups))

    def _recv_sync(self) -> None:
        """Resolves the phase and releases the supervisors waiting on `sync RECV`, each at the later of its clock
        and its tile's last window end, plus the target's RECV sync cost: a tile leaves its exchange on its own,
        no barrier (only an internal sync makes the clocks meet)."""
        waiting = self._waiting
        if self._n_internal:
            ctx = next(c for c, z in waiting.items() if z == 3)
            raise SimError(
                "sync",
                "an exchange phase ends with sync RECV on some tiles and an internal sync on others",
                tile=int(self.ctx_tile[ctx]),
                context="supervisor",
            )
        rel = np.array(sorted(waiting), dtype=np.int64)
        ends = semantics.deliver_exchange(self, rel - self.NW, recv=True)
        self.cycles[rel] = np.maximum(self.cycles[rel], ends[rel - self.NW]) + self.target.sync_recv_cycles
        waiting.clear()
        self._n_recv = 0
        self._resume(rel)

    def _resume(self, ctxs: np.ndarray) -> None:
        """Restart supervisors after their sync instruction."""
        if self.fast:
            ctxs = np.sort(ctxs)
            pcs = self._sync_pc[ctxs]
            for pc in np.unique(pcs):
                self._groups.append(Group(int(pc) + 4, ctxs[pcs == pc], True))
            return
        pcs = {}
        for c in ctxs:
            pcs.setdefault(int(self._sync_pc[c]), []).append(int(c))
        for pc, cs in pcs.items():
            self._groups.append(Group(pc + 4, np.array(sorted(cs), dtype=np.int64), True))

    # ------------------------------------------------------------------------------------------------------------
    # AMP weights cache
    # ------------------------------------------------------------------------------------------------------------
    def cwei_matrix(self, kind: int) -> np.ndarray:
        """Common weights as one matrix per tile, [tiles, 4 phases * K, 16 engines] (kind 1: F16, K = 4;
        2/3: FP8 F143/F152, K = 8), so a whole AMP group is one product."""
        if self.fast:
            return self._cwei_matrix64(kind)
        key = ("matrix", kind)
        w = self._cw_cache.get(key)
        if w is None:
            w4 = self.cwei_f32(CWEI_FORMAT[kind])  # [T, phase, engine, K]
            w = np.ascontiguousarray(w4.transpose(0, 1, 3, 2).reshape(self.T, -1, 16))
            self._cw_cache[key] = w
        return w

    def set_cwei(self, tiles: np.ndarray, slot: int, data: np.ndarray) -> None:
        """Write common-weight slots slot, slot + 1, ... (data [tiles, 8 * slots] bytes) on `tiles` and update the
        decoded copies in place: a GEMM loads its weights slot by slot between AMP groups, and decoding all tiles'
        weights again after every slot was most of a full-size run's time."""
        data = data.reshape(len(tiles), -1, 8)
        m = data.shape[1]
        self.cwei[tiles, slot : slot + m] = data
        if self.fast:
            for dirty in self._cw_dirty.values():
                dirty[tiles] = True
            return
        if not self._cw_cache:
            return
        engine, phase = np.divmod(np.arange(slot, slot + m), 4)
        tt = np.asarray(tiles)[:, None]
        for key, w in self._cw_cache.items():
            vals = _decode_cwei(key[0] if len(key) == 1 else CWEI_FORMAT[key[1]], data)  # [n, m, k]
            if len(key) == 1:  # [T, phase, engine, k]
                w[tt, phase[None, :], engine[None, :]] = vals
            else:  # [T, phase * K + k, engine]
                k = vals.shape[2]
                rows = phase[:, None] * k + np.arange(k)[None, :]  # [m, k]
                w[tt[:, :, None], rows[None], engine[None, :, None]] = vals

    def _cwei_matrix64(self, kind: int) -> np.ndarray:
        """Fast path's cwei_matrix: the same values as float64, decoded again only for tiles whose slots changed."""
        w = self._cw64.get(kind)
        if w is None:
            k = 4 if kind == 1 else 8
            w = self._cw64[kind] = np.zeros((self.T, 4 * k, 16), np.float64)
            self._cw_dirty[kind] = np.ones(self.T, dtype=bool)
        dirty = self._cw_dirty[kind]
        if dirty.any():
            d = np.flatnonzero(dirty)
            if jit.decode_weights is not None:  # compiled, the same values (tests/unit/test_sim_fast_path.py)
                f8 = fp8.DECODE[fp8.F152 if kind == 3 else fp8.F143]
                jit.decode_weights(self.cwei, d, w, F16_TO_F32, f8, kind)
                dirty[d] = False
                return w
            raw = self.cwei[d].reshape(len(d), 16, 4, 8)  # slot = engine * 4 + phase
            vals = _decode_cwei(CWEI_FORMAT[kind], raw)  # [n, engine, phase, k]
            w[d] = vals.transpose(0, 2, 3, 1).reshape(len(d), -1, 16)  # rows phase * K + k
            dirty[d] = False
        return w

    def cwei_f32(self, fmt: str, tiles=None) -> np.ndarray:
        """Common weights as float32 [tiles, 4 phases, 16 engines, k], k = 4 (F16) or 8 (FP8 F143/F152)."""
        key = (fmt,)
        w = self._cw_cache.get(key)
        if w is None:
            raw = self.cwei.reshape(self.T, 16, 4, 8)  # slot = engine * 4 + phase
            w = _decode_cwei(fmt, raw)  # [T, 16, 4, k]
            w = np.ascontiguousarray(w.transpose(0, 2, 1, 3))  # [T, phase, engine, k]
            self._cw_cache[key] = w
        return w
