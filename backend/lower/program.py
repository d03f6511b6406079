"""The backend's program level: the walk's result as `asm` IR, the passes over it, and the package printed from it.

`Lowering` (the walk over a placed function) records its supervisor program as *items* (`CallItem`, `SyncItem`,
`RepeatItem` and the profile's `OpMarker` / `PhaseMarker`) and its per-tile data in a `DataImage`. `build_program`
turns them into one `asm.program` (`ipu.dialects.asm`):

- `asm.kernel @main supervisor` holding `asm.kernel_call` ops (each call site, its frame address and profile
  names as attributes), internal `asm.sync`s and the layer loop as an `asm.repeat` region whose per-iteration
  changes are attributes (the patched words and their per-tile strides, derived from the sampled iterations);
- `asm.data` for every initialised byte (kernel frames, exchange and copy tables, constants, per-iteration
  storage): a frame's words that hold a routine's address are relocations (`relocs`), found by building the frame
  against two sets of stand-in label values, so the code can change under the data until `asm-link`;
- `asm.binding` for the host tensors, and the package's metadata.

Then the passes (`ipu.passes.asm_passes` wraps each for `ipu-opt`):

- `lower_repeats` (`asm-lower-repeat`): each `asm.repeat` -> the loop's counter code around its body and the
  patch tables at their addresses, built from the attributes;
- `lower_calls` (`asm-lower-calls`): each `asm.kernel_call` -> the calling convention's instructions, a label per
  profile site (`ipu.backend.lower.sites`);
- `link` (`asm-link`): the library routines the program reaches (`isa_program.reachable`), laid out after
  `main`; relocations resolved; the code checked against memory-plan's code reservation.

`package_of` prints the package of a linked program (the code encoded, data and bindings as they are).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, StringAttr, UnitAttr, i32
from xdsl.ir import Attribute, Operation

from ipu.backend.asm_text import parse_kernels, print_kernels
from ipu.backend.encoding import encode_program
from ipu.backend.isa import OperandError, raw_operand, select_form
from ipu.backend.isa_program import Kernel, Label, Program, layout, reachable
from ipu.backend.kernels import copy as cp
from ipu.backend.kernels import elementwise as ew
from ipu.backend.kernels import gemm as gm
from ipu.backend.kernels import ksum as ks
from ipu.backend.kernels import pack as pk
from ipu.backend.kernels import rowwise as rw
from ipu.backend.lower import exchange as lx
from ipu.backend.lower.sites import (
    OP_MARKER,
    PHASE_MARKER,
    OpMarker,
    PhaseMarker,
    exchange_phases,
    label_sites,
    resolve,
)
from ipu.backend.target import Target
from ipu.dialects import asm
from ipu.runtime.package import Binding, Package, Segment

FRAME_HEADER = 8  # active word + padding: kernel frames stay 8-byte aligned

# rep_patch: $m0 = a table (word 0 = entries, then (address, stride) pairs): adds each stride to its word.
REP_PATCH = """
.globl rep_patch
.supervisor
rep_patch:
    ld32 $m2, $m0, $mzero, 0
    brz $m2, .Lrp_done
    sub $m2, $m2, 1
.Lrp_row:
    ld32 $m3, $m0, $mzero, 1
    ld32 $m4, $m0, $mzero, 2
    ld32 $m5, $m3, $mzero, 0
    add $m5, $m5, $m4
    st32 $m5, $m3, $mzero, 0
    add $m0, $m0, 8
    brnzdec $m2, .Lrp_row
.Lrp_done:
    br $lr
"""


class ProgramError(ValueError):
    """A malformed or unlinkable `asm.program` (names the op, the data or the label)."""


class CodeOverflow(ProgramError):
    """The linked code does not fit memory-plan's code reservation (`lower_fitting` plans again)."""


# -- the walk's items ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallItem:
    """A routine called with a frame (`header`: the active word first) or a table at `addr`."""

    entry: str
    addr: int
    header: bool
    all_active: bool
    what: str


@dataclass(frozen=True)
class SyncItem:
    what: str


@dataclass
class RepeatItem:
    """The layer loop: its record's address and its body's items (iteration 0's)."""

    index: int
    count: int
    rec: int
    what: str
    body: list = field(default_factory=list)


# -- relocations ---------------------------------------------------------------------------------------------------

_STAND_IN = (
    0x6000_0000,
    0x7000_0000,
)  # two stand-in values per label: a word that moves with them is a relocation
_STEP = 0x1000  # between two labels' stand-ins (a word's addend must stay below half of it)


class StandInLabels(dict):
    """Label -> a stand-in address (`base` + STEP * the label's index); every name asked is recorded in `names`,
    shared by the two sets so that a label has the same index in both."""

    def __init__(self, base: int, names: dict[str, int]):
        super().__init__()
        self.base, self.names = base, names

    def __getitem__(self, name: str) -> int:
        k = self.names.setdefault(name, len(self.names))
        return self.base + _STEP * k

    def get(self, name, default=None):  # a frame builder may ask with .get: a stand-in all the same
        return self[name]


def relocations(
    a: np.ndarray, b: np.ndarray, names: dict[str, int], what: str
) -> tuple[np.ndarray, np.ndarray]:
    """Frames (uint32 [rows, words]) built against the two stand-in label sets -> (the words with the labels'
    stand-ins taken out, relocs [n, 3]: row, word, label index). A word that depends on a label other than as
    label + addend is an error."""
    diff = (b.astype(np.int64) - a.astype(np.int64)) % (1 << 32)
    rows, words = np.nonzero(diff)
    if not len(rows):
        return a, np.zeros((0, 3), np.int32)
    step = _STAND_IN[1] - _STAND_IN[0]
    if (diff[rows, words] != step).any():
        i = int(np.nonzero(diff[rows, words] != step)[0][0])
        raise ProgramError(
            f"{what}: word {int(words[i])} on row {int(rows[i])} is not a code address plus a constant"
        )
    v = a[rows, words].astype(np.int64) - _STAND_IN[0]
    k = (v + _STEP // 2) // _STEP
    addend = v - k * _STEP
    if (k < 0).any() or (k >= len(names)).any():
        raise ProgramError(f"{what}: a relocated word's addend is too large")
    out = a.copy()
    out[rows, words] = (addend % (1 << 32)).astype(np.uint32)
    return out, np.stack([rows, words, k], axis=1).astype(np.int32)


# -- building the program ------------------------------------------------------------------------------------------


def _instr(text: str, comment: str | None = None, **attrs: str) -> asm.AsmInstructionOp:
    """One supervisor instruction op from its Graphcore-syntax text."""
    mnemonic, _, rest = text.strip().partition(" ")
    operands = [o.strip() for o in rest.split(",")] if rest.strip() else []
    ins = select_form(mnemonic, [raw_operand(o) for o in operands], True)
    op = asm.AsmInstructionOp.from_instr(ins, True)
    if comment:
        op.attributes["comment"] = StringAttr(comment)
    for k, v in attrs.items():
        if v is not None:
            op.attributes[k] = StringAttr(v)
    return op


def _site_attrs(state: list) -> dict[str, Attribute]:
    out: dict[str, Attribute] = {}
    if state[0] is not None:
        out["site_op"] = StringAttr(state[0])
    if state[1] is not None:
        out["site_phase"] = StringAttr(json.dumps(state[1], separators=(",", ":")))
    return out


def _main_ops(items: list, state: list, repeats: dict[int, dict]) -> list[Operation]:
    """The items of `main` (or of a loop body) as ops; state: [current operator, current phase detail]."""
    ops: list[Operation] = []
    for it in items:
        if isinstance(it, OpMarker):
            state[0], state[1] = it.name, None
        elif isinstance(it, PhaseMarker):
            state[1] = it.detail
        elif isinstance(it, CallItem):
            attrs = _site_attrs(state)
            if it.header:
                attrs["header"] = UnitAttr()
            if it.all_active:
                attrs["all_active"] = UnitAttr()
            if it.what:
                attrs["what"] = StringAttr(it.what)
            ops.append(asm.KernelCallOp(it.entry, it.addr, attrs))
        elif isinstance(it, SyncItem):
            op = _instr("sync TEXCH_SYNCZONE_INTERNAL", it.what)
            op.attributes.update(_site_attrs(state))
            ops.append(op)
        elif isinstance(it, RepeatItem):
            rep = repeats[it.index]
            body = _main_ops(it.body, state, repeats)
            ops.append(
                asm.RepeatOp(
                    it.count,
                    it.rec,
                    body,
                    {
                        "what": StringAttr(it.what),
                        "forward_table": IntegerAttr(rep["tables"][0], i32),
                        "reset_table": IntegerAttr(rep["tables"][1], i32),
                        "table_words": IntegerAttr(rep["width"], i32),
                        "patch_words": asm.dense_of(rep["words"].astype(np.int64)),
                        "patch_strides": asm.dense_of(rep["strides"].astype(np.uint32)),
                    },
                )
            )
        else:
            raise TypeError(f"unknown program item {it!r}")
    return ops


def _data_op(seg: Segment, relocs: np.ndarray | None = None, names: list[str] | None = None) -> asm.DataOp:
    attrs: dict[str, Attribute] = {"data": asm.dense_of(np.asarray(seg.data, np.uint8))}
    if seg.tiles is not None:
        attrs["tiles"] = asm.dense_of(np.asarray(seg.tiles, np.int32))
    if relocs is not None and len(relocs):
        attrs["relocs"] = asm.dense_of(relocs.astype(np.int32))
        attrs["reloc_labels"] = ArrayAttr([StringAttr(n) for n in names or []])
    return asm.DataOp(seg.name, seg.address, attrs)


def binding_op(kind: str, b: Binding) -> asm.BindingOp:
    attrs: dict[str, Attribute] = {
        "shape": asm.dense_of(np.asarray(b.shape, np.int64)),
        "dtype": StringAttr(b.dtype),
        "chunks": asm.dense_of(np.asarray(b.chunks, np.int64)),
    }
    if b.scale:
        attrs["scale"] = IntegerAttr(int(b.scale), i32)
    if b.via:
        attrs["via"] = StringAttr(b.via)
        attrs["via_scale"] = IntegerAttr(int(b.via_scale), i32)
    return asm.BindingOp(kind, b.name, attrs)


def binding_of(op: asm.BindingOp) -> Binding:
    a = op.attributes
    return Binding(
        op.sym.data,
        tuple(int(x) for x in asm.array_of(a["shape"], np.int64).reshape(-1)),
        a["dtype"].data,
        asm.array_of(a["chunks"], np.int64),
        int(a["scale"].value.data) if "scale" in a else 0,
        a["via"].data if "via" in a else "",
        int(a["via_scale"].value.data) if "via_scale" in a else 0,
    )


def build_program(low, patch_tables, extra_metadata: dict) -> asm.ProgramOp:
    """The walk's result (`Lowering` after its walk) as an `asm.program`. patch_tables(rep, labels) -> (word
    addresses, strides [tiles, P]) of a repeat: the lowering's derivation from its sampled iterations;
    extra_metadata: the package metadata that does not come from the walk. The walk's segments and cached frames
    are released as the program takes their bytes (peak memory)."""
    n = low.n
    names: dict[str, int] = {}
    labels_a, labels_b = StandInLabels(_STAND_IN[0], names), StandInLabels(_STAND_IN[1], names)
    frames = []
    for c in low.calls:
        a = c.data(labels_a, n)
        active, fb = c.build(labels_b)
        b = np.zeros_like(a)
        b[:, 0] = active
        b[:, 2:] = fb
        what = f"the frame of {c.entry}" + (f" ({c.what})" if c.what else "")
        words, rel = relocations(a, b, names, what)
        if n == 1:
            words, rel = words[:1], rel[rel[:, 0] == 0]
        frames.append((Segment(f"frame {c.entry}", c.addr, words), rel))
    repeats: dict[int, dict] = {}
    for r, rep in enumerate(low.repeats):
        words, strides = patch_tables(rep, labels_a)
        most = int((strides != 0).sum(1).max(initial=0))
        width = 1 + 2 * most
        low.image.owner = rep["what"]
        tables = [
            low.image.alloc(width * 4, 8, "low", what=f"loop {k} patch table") for k in ("forward", "reset")
        ]
        repeats[r] = dict(words=words, strides=strides, width=width, tables=tables)
        low.notes.append(f"tile.repeat x{rep['count']}: {most} patched words per tile (max)")
    label_names = sorted(names, key=names.get)
    main = asm.KernelOp(
        "main",
        True,
        [
            _instr("add $m9, $lr, 0"),
            *_main_ops(low.items, [None, None], repeats),
            _instr("br $m9"),
        ],
    )
    segments, data = low.image.segments, []
    for i in range(len(segments)):  # each segment released once its asm.data holds the bytes
        data.append(_data_op(segments[i]))
        segments[i] = None
    low.image.segments = []
    for c in low.calls:
        c.built = None
    for s, rel in frames:  # each frame names its own labels (relocs index that list)
        used, local = np.unique(rel[:, 2], return_inverse=True)
        rel = np.column_stack([rel[:, :2], local.reshape(-1)]).astype(np.int32) if len(rel) else rel
        data.append(_data_op(s, rel, [label_names[i] for i in used.tolist()]))
    bindings = [binding_op("parameter", b) for b in low.params]
    bindings += [binding_op("input", b) for b in low.inputs]
    bindings += [binding_op("output", b) for b in low.outputs]
    bindings += [binding_op("debug", b) for b in getattr(low, "debug", [])]
    target = low.target
    library = {
        "gemm": [gm.F16, gm.FP8] if low.__dict__.get("fp8_gemms") else [gm.F16],
        "ksum": [list(k) for k in sorted(low.__dict__.get("ksum_kinds", ()))],
        "panels_f16": sorted(low.__dict__.get("pf_atoms", ())),
        "panels_gap_f16": sorted(low.__dict__.get("pfg_loops", ())),
    }
    program = asm.ProgramOp(
        "main",
        [main, *data, *bindings],
        {
            "target": StringAttr(target.name),
            "tiles": IntegerAttr(n, i32),
            "code_base": IntegerAttr(low.code_addr, i32),
            "code_end": IntegerAttr(low.code_end, i32),
            "library": StringAttr(json.dumps(library)),
            "sram_kib": IntegerAttr(target.sram_bytes // 1024, i32),
        },
    )
    meta = {
        "lowering": "ipu.backend.lower",
        "exchange": "exchange instructions (the timed sends and receive set-ups of a phase, its two internal syncs)",
        "notes": low.notes,
        "data_bytes": dict(low.image.used),
    }
    if getattr(low, "debug", None) is not None:
        meta["debug_positions"] = low.debug_positions
    if "memory_map" in extra_metadata:  # the lowering's allocations, the loop's patch tables included
        from ipu.runtime.reports.placement import with_contents

        with_contents(extra_metadata["memory_map"], low.image.contents())
    program.set_metadata({**meta, **extra_metadata})
    return program


# -- asm-lower-repeat ----------------------------------------------------------------------------------------------


def _patch_table(words: np.ndarray, strides: np.ndarray, width: int, sign: int) -> np.ndarray:
    """Per tile: [entries, (address, stride * sign) ...] padded to `width` words."""
    n = strides.shape[0]
    nz = strides != 0
    tab = np.zeros((n, width), np.uint32)
    counts = nz.sum(1)
    tab[:, 0] = counts
    # Each tile's patched words in address order, packed to the left.
    order = np.argsort(~nz, axis=1, kind="stable")
    cols = np.take_along_axis(np.broadcast_to(np.arange(len(words)), nz.shape), order, axis=1)
    keep = np.arange(nz.shape[1])[None, :] < counts[:, None]
    rows, pos = np.nonzero(keep)
    c = cols[rows, pos]
    tab[rows, 1 + 2 * pos] = words[c].astype(np.uint32)
    tab[rows, 2 + 2 * pos] = ((sign * strides[rows, c].astype(np.int64)) % (1 << 32)).astype(np.uint32)
    return tab


def lower_repeats(program: asm.ProgramOp) -> None:
    """Each `asm.repeat` of `main` -> its counter code around the body (`rep_patch` applies the forward table
    before each further iteration and the reset table after the last) and the tables and record as data."""
    main = program.main()
    n = int(program.attributes["tiles"].value.data)
    r = 0
    for op in list(main.body.block.ops):
        if not isinstance(op, asm.RepeatOp):
            continue
        op.verify_()
        count, rec = int(op.count.value.data), int(op.record.value.data)
        words, strides = op.patches()
        if strides.shape[0] != n:
            raise ProgramError(f"asm.repeat: patch_strides has {strides.shape[0]} rows for {n} tiles")
        width = int(op.attributes["table_words"].value.data)
        fwd, rst = (int(op.attributes[k].value.data) for k in ("forward_table", "reset_table"))
        what = op.attributes["what"].data
        before = [
            _instr(f"setzi $m0, {rec:#x}", what),
            _instr(f"setzi $m1, {count - 1}"),
            _instr("st32 $m1, $m0, $mzero, 0"),
            asm.LabelOp(f".Lrep{r}"),
        ]
        after = [
            _instr(f"setzi $m0, {rec:#x}", "tile.repeat: next iteration"),
            _instr("ld32 $m1, $m0, $mzero, 0"),
            _instr(f"brz $m1, .Lrep{r}_end"),
            _instr("sub $m1, $m1, 1"),
            _instr("st32 $m1, $m0, $mzero, 0"),
            _instr("ld32 $m0, $m0, $mzero, 1"),
            _instr("call $lr, rep_patch"),
            _instr(f"bri .Lrep{r}"),
            asm.LabelOp(f".Lrep{r}_end"),
            _instr("ld32 $m0, $m0, $mzero, 2"),
            _instr("call $lr, rep_patch", "back to iteration 0 for the next run"),
        ]
        body = list(op.body.block.ops)
        for o in body:
            o.detach()
        block = main.body.block
        for o in [*before, *body, *after]:
            block.insert_op_before(o, op)
        op.detach()
        op.erase()
        back = -(count - 1)
        data = [
            Segment("tile.repeat patch table", fwd, _patch_table(words, strides, width, 1)),
            Segment("tile.repeat patch table", rst, _patch_table(words, strides, width, back)),
            Segment("tile.repeat record", rec, np.array([0, fwd, rst, 0], np.uint32)),
        ]
        for s in data:
            program.body.block.add_op(_data_op(s))
        r += 1


# -- asm-lower-calls -----------------------------------------------------------------------------------------------


def _call_lines(op: asm.KernelCallOp, k: int) -> list[str]:
    addr, entry = int(op.frame.value.data), op.entry.data
    what = op.attributes["what"].data if "what" in op.attributes else ""
    lines = [f"    setzi $m0, {addr:#x}" + (f"  // {what}" if what else "")]
    if op.header and not op.all_active:
        lines += ["    ld32 $m1, $m0, $mzero, 0", f"    brz $m1, .Lskip{k}"]
    if op.header:
        lines.append(f"    add $m0, $m0, {FRAME_HEADER}")
    lines.append(f"    call $lr, {entry}")
    if op.header and not op.all_active:
        lines.append(f".Lskip{k}:")
    return lines


def _kernel_from_lines(name: str, lines: list[str]) -> asm.KernelOp:
    """`main` from its text lines, each instruction keeping its line's comment."""
    text = "\n".join([f".globl {name}", ".supervisor", f"{name}:", *lines]) + "\n"
    (k,) = parse_kernels(text)
    comments = [
        line.split("//", 1)[1].strip() if "//" in line else None
        for line in lines
        if line.startswith("    ") and not line.lstrip().startswith("//")
    ]
    op = asm.KernelOp.from_kernel(k)
    instrs = [o for o in op.body.block.ops if not isinstance(o, asm.LabelOp)]
    if len(instrs) != len(comments):
        raise ProgramError(f"@{name}: {len(instrs)} instructions from {len(comments)} instruction lines")
    for o, c in zip(instrs, comments):
        if c:
            o.attributes["comment"] = StringAttr(c)
    return op


def lower_calls(program: asm.ProgramOp) -> None:
    """Each `asm.kernel_call` of `main` -> the calling convention: `$m0` = the frame (past its active word), a
    skip of the call where the word is 0, `call $lr, entry`; a label before each profile site and the sites'
    names and the exchange phases' summaries in the metadata (`profile_sites` by label, resolved by `package_of`;
    `exchange_phases`)."""
    main = program.main()
    lines: list[str] = []
    state: list = [None, None]
    skips = 0
    for op in main.body.block.ops:
        if isinstance(op, asm.RepeatOp):
            raise ProgramError("run asm-lower-repeat first (an asm.repeat is left in @main)")
        site = isinstance(op, asm.KernelCallOp) or (
            isinstance(op, asm.AsmInstructionOp) and op.MNEMONIC == "sync"
        )
        if site:
            name = op.attributes["site_op"].data if "site_op" in op.attributes else None
            phase = op.attributes["site_phase"].data if "site_phase" in op.attributes else None
            if name is not None and (name != state[0] or (phase is None and state[1] is not None)):
                lines.append(OP_MARKER + name)
                state[:] = [name, None]
            if phase is not None and phase != state[1]:
                lines.append(PHASE_MARKER + phase)
                state[1] = phase
        if isinstance(op, asm.KernelCallOp):
            lines += _call_lines(op, skips)
            skips += op.header  # the frame calls are numbered (the skip labels)
        elif isinstance(op, asm.LabelOp):
            lines.append(f"{op.label.data}:")
        elif isinstance(op, asm.AsmInstructionOp):
            line = f"    {op.to_instr(True).text(True)}"
            lines.append(line + (f"  // {op.comment.data}" if op.comment is not None else ""))
        else:
            raise ProgramError(f"unexpected {op.name} in @main")
    # The return to the host is a site of its own: label_sites ends the lines with its label.
    ret = lines.pop()
    sites = label_sites(lines)
    lines.append(ret)
    phases = exchange_phases(sites)
    new = _kernel_from_lines(main.sym_name.data, lines)
    program.body.block.insert_op_before(new, main)
    main.detach()
    main.erase()
    meta = program.metadata()
    meta["profile_sites"] = sites
    meta["exchange_phases"] = phases
    program.set_metadata(meta)


# -- asm-link ------------------------------------------------------------------------------------------------------


def library_text(target: Target, library: dict) -> str:
    """The kernel library the program may link from (the loop patcher, the exchange routines, the kernels)."""
    return (
        REP_PATCH
        + lx.ROUTINES
        + "\n"
        + gm.library_asm(
            target.sram_base, precisions=tuple(library.get("gemm", [gm.F16])), coefs=("ld128", "ld64")
        )
        + "\n"
        + ew.library_asm(target.sram_base)
        + "\n"
        + ks.library_asm([tuple(k) for k in library.get("ksum", [])])
        + "\n"
        + pk.library_asm(
            target.sram_base,
            tuple(library.get("panels_f16", rw.PF_FAST_ATOMS)),
            None if "panels_gap_f16" not in library else tuple(library["panels_gap_f16"]),
        )
        + "\n"
        + cp.library_asm(target.sram_base, target.region1_base, target.region0_element_bytes)
    )


@lru_cache(maxsize=16)
def _library(target: Target, library: str) -> tuple[Kernel, ...]:
    """The parsed library (the same for every program of a target and library selection: parsed once)."""
    return tuple(parse_kernels(library_text(target, json.loads(library))))


def target_of_program(program: asm.ProgramOp) -> Target:
    """The target a program was lowered for (its `tiles` and `sram_kib`)."""
    from ipu.passes.tile_plan import target_for

    attrs = program.attributes
    if not isinstance(attrs.get("sram_kib"), IntegerAttr):
        raise ProgramError(f"asm.program @{program.sym_name.data}: no sram_kib attribute (the target's SRAM)")
    return target_for(int(attrs["tiles"].value.data), int(attrs["sram_kib"].value.data))


def _kernels(program: asm.ProgramOp) -> list[Kernel]:
    try:
        return [k.to_kernel() for k in program.kernels()]
    except Exception as e:  # VerifyException: a structured op left; OperandError: a bad operand
        raise ProgramError(str(e)) from None


def link(program: asm.ProgramOp, target: Target, check: bool = True, materialize: bool = True) -> Program:
    """The library routines `main` and the frames reach, appended after the program's kernels; every relocation
    resolved; with `check`, the code must end inside memory-plan's reservation (`CodeOverflow`). Without
    `materialize` (a measuring lowering, which only needs the code's size) the routines are laid out but not
    added to the IR: the returned layout is then the only record of the code."""
    if program.linked:
        raise ProgramError(f"asm.program @{program.sym_name.data} is linked already")
    own = _kernels(program)
    library = list(_library(target, program.attributes["library"].data))
    have = {k.name for k in own}
    library = [k for k in library if k.name not in have]
    datas = [o for o in program.body.block.ops if isinstance(o, asm.DataOp)]
    defined = {k.name for k in own + library} | {
        it.name for k in own + library for it in k.items if isinstance(it, Label)
    }
    roots = {program.main().sym_name.data}
    for d in datas:
        r, names = d.relocs()
        used = [names[i] for i in np.unique(r[:, 2]).tolist()] if len(r) else []
        missing = [x for x in used if x not in defined]
        if missing:
            raise ProgramError(
                f'asm.data "{d.label.data}" names the label {missing[0]!r}, which no routine defines'
            )
        roots.update(used)
    try:
        kept = reachable(own + library, sorted(roots))
    except OperandError as e:
        raise ProgramError(f"asm-link: {e}") from None
    base = int(program.attributes["code_base"].value.data)
    laid = layout(kept, base)
    end = int(program.attributes["code_end"].value.data)
    if check and laid.end > end:
        raise CodeOverflow(
            f"the code image ({laid.end - laid.base} B) exceeds memory-plan's code reservation "
            f"({end - base} B): raise reserve-code-bytes"
        )
    first_data = datas[0] if datas else None
    for k in kept:
        if k.name in have or not materialize:
            continue
        op = asm.KernelOp.from_kernel(k)
        if first_data is not None:
            program.body.block.insert_op_before(op, first_data)
        else:
            program.body.block.add_op(op)
    for d in datas:
        r, names = d.relocs()
        if not len(r):
            continue
        rows = d.rows().copy()
        w = rows.view("<u4")
        try:
            addr = np.array([laid.labels[x] for x in names], np.int64)
        except KeyError as e:
            raise ProgramError(
                f'asm.data "{d.label.data}" names the label {e}, which no routine defines'
            ) from None
        w[r[:, 0], r[:, 1]] = ((w[r[:, 0], r[:, 1]].astype(np.int64) + addr[r[:, 2]]) % (1 << 32)).astype(
            np.uint32
        )
        d.attributes["data"] = asm.dense_of(rows)
        del d.attributes["relocs"], d.attributes["reloc_labels"]
    program.attributes["linked"] = UnitAttr()
    return laid


# -- the package ---------------------------------------------------------------------------------------------------

_META_ORDER = (
    "lowering",
    "exchange",
    "notes",
    "data_bytes",
    "profile_sites",
    "exchange_phases",
    "derived_parameters",
)


def package_of(program: asm.ProgramOp, target: Target, laid: Program | None = None) -> Package:
    """The package of a linked program: its code encoded at `code_base`, its data and bindings."""
    if not program.linked:
        raise ProgramError(f"asm.program @{program.sym_name.data} is not linked: run asm-link first")
    if laid is None:
        laid = layout(_kernels(program), int(program.attributes["code_base"].value.data))
    meta = program.metadata()
    if "profile_sites" in meta:
        meta["profile_sites"] = resolve(meta["profile_sites"], laid.labels)
    debug_positions = meta.pop("debug_positions", None)
    ordered = {k: meta.pop(k) for k in _META_ORDER if k in meta}
    ordered.update(meta)
    if debug_positions is not None:
        ordered["debug_positions"] = debug_positions
    segments, kinds = [], {k: [] for k in asm.BINDING_KINDS}
    for op in program.body.block.ops:
        if isinstance(op, asm.DataOp):
            if op.relocs()[1]:
                raise ProgramError(f'asm.data "{op.label.data}": unresolved relocations (run asm-link)')
            segments.append(Segment(op.label.data, int(op.address.value.data), op.rows(), op.tiles()))
        elif isinstance(op, asm.BindingOp):
            kinds[op.kind.data].append(binding_of(op))
    return Package(
        target=target,
        code=encode_program(laid),
        code_base=laid.base,
        kernels=laid.kernels,
        labels=laid.labels,
        entry=program.main().sym_name.data,
        segments=segments,
        protected=[],
        parameters=kinds["parameter"],
        inputs=kinds["input"],
        outputs=kinds["output"],
        metadata=ordered,
        debug=kinds["debug"],
    )


def program_text(program: asm.ProgramOp) -> str:
    """The assembly of a program's kernels: main with its comments, then the linked routines."""
    kernels = program.kernels()
    return asm.kernel_text(kernels[0]) + "\n" + print_kernels([k.to_kernel() for k in kernels[1:]])
