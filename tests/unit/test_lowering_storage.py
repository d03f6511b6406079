"""The lowering's own storage is sized by use and lies inside memory-plan's map.

- `lowering-storage` measures the code, the low data (frames, tables) and the high data (scratch elements, small
  data) of the lowering; memory-plan reserves exactly that (rounded to its elements); the real lowering then fits
  and uses what was measured;
- every byte the package writes into a tile's SRAM (code, data segments, parameter and input bindings) lies inside
  a buffer or reservation of the placement map (`read_placement`), for several models and tile counts."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.passes import PassPipeline

from ipu.backend.lower.lowering import Lowering, pipeline_spec
from ipu.backend.target import Target
from ipu.frontend.siglip import PRESETS, SiglipVisionConfig, build_vision_model
from ipu.passes.lowering_storage import storage_of
from ipu.passes.memory_plan import read_placement
from ipu.passes.registry import all_passes
from ipu.runtime.package import DEVICE_DTYPES

ATT81 = SiglipVisionConfig(
    hidden_size=48,
    intermediate_size=96,
    num_attention_heads=2,
    num_hidden_layers=2,
    image_size=36,
    patch_size=4,
)
CASES = [
    (PRESETS["tiny"], 16),
    (PRESETS["tiny"].with_layers(3), 16),
    (ATT81, 16),
    (PRESETS["tiny"].with_layers(1), 8),
]


def _placed(cfg, tiles):
    target = Target.small(tiles=tiles, sram_kib=624)
    module = build_vision_model(cfg)
    PassPipeline.parse_spec(dict(all_passes()), pipeline_spec(target, outline_repeat=True)).apply(
        Context(), module
    )
    f = next(o for o in module.walk() if isinstance(o, func.FuncOp))
    return f, target


def _covered(intervals: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether each [lo, hi) lies inside the union of `intervals` ([n, 2], any order)."""
    iv = intervals[np.argsort(intervals[:, 0])]
    merged = []
    for a, b in iv:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    m = np.array(merged, np.int64).reshape(-1, 2)
    i = np.searchsorted(m[:, 0], lo, side="right") - 1
    ok = i >= 0
    return ok & (hi <= np.where(ok, m[np.maximum(i, 0), 1], 0))


@pytest.mark.parametrize("cfg,tiles", CASES)
def test_every_written_byte_is_in_the_map(cfg, tiles):
    f, target = _placed(cfg, tiles)
    lowering = Lowering(f, target)
    pkg = lowering.run()
    _, placed = read_placement(f)
    per_tile = []
    for t in range(tiles):
        rows = [
            (int(b.addr[t]), int(b.addr[t] + b.span[t])) for b in placed if b.addr[t] >= 0 and b.span[t] > 0
        ]
        per_tile.append(np.array(rows, np.int64).reshape(-1, 2))
    writes: list[list[tuple[int, int, str]]] = [[] for _ in range(tiles)]
    for t in range(tiles):
        writes[t].append((pkg.code_base, pkg.code_base + len(pkg.code), "code"))
    for s in pkg.segments:
        n = s.data.shape[1]
        targets = s.tiles if s.tiles is not None else (range(tiles) if s.data.shape[0] > 1 else range(tiles))
        for t in targets:
            writes[int(t)].append((s.address, s.address + n, f"segment {s.name}"))
    for b in [*pkg.parameters, *pkg.inputs]:
        esize = DEVICE_DTYPES[b.dtype].itemsize
        for tile, addr, _off, count in b.chunks[:, :4]:
            writes[int(tile)].append((int(addr), int(addr + count * esize), f"binding {b.name}"))
    total = 0
    for t in range(tiles):
        lo = np.array([w[0] for w in writes[t]], np.int64)
        hi = np.array([w[1] for w in writes[t]], np.int64)
        ok = _covered(per_tile[t], lo, hi)
        bad = [writes[t][i] for i in np.nonzero(~ok)[0][:5]]
        assert not bad, f"tile {t}: writes outside every buffer and reservation: {bad}"
        total += len(lo)
    assert total > tiles * 3


@pytest.mark.parametrize("cfg,tiles", CASES[:3])
def test_the_memory_map_names_what_the_reservations_hold(cfg, tiles):
    """The package's memory map lists the lowering's own allocations (`contents`): each inside a support
    reservation, every kernel frame and every data segment of the package among them, and a reservation never
    holding more than its bytes."""
    from ipu.backend.lower.lowering import lower_to_package

    f, target = _placed(cfg, tiles)
    pkg = lower_to_package(f, target)
    doc = pkg.metadata["memory_map"]
    contents = doc["contents"]
    assert contents and all(c["reservation"] for c in contents), [
        c for c in contents if not c["reservation"]
    ][:3]
    whats = {c["what"] for c in contents}
    assert {"kernel frame", "table", "C scratch element", "zero constant"} <= whats
    # An op's frames, tables and kernel data lie in that op's own buffers (memory-plan placed them), not in
    # another op's: the lowering allocates inside the buffers the plan gave the op.
    own = [c for c in contents if c["reservation"].startswith(("lowering_frames of ", "lowering_data of "))]
    assert {c["what"] for c in own} >= {"kernel frame", "table"}, {c["what"] for c in own}
    for c in own:
        assert c["reservation"].split(" of ", 1)[1] == c["owner"], c
    frames = [c for c in contents if c["what"] == "kernel frame"]
    assert sum(c["bytes"] for c in own if c["what"] == "kernel frame") == sum(c["bytes"] for c in frames)
    if cfg.num_hidden_layers > 1:
        assert {"loop record", "loop forward patch table", "per-iteration data"} <= whats
    spans = np.array([[c["lo"], c["hi"]] for c in contents], np.int64)
    for s in pkg.segments:
        inside = _covered(spans, np.array([s.address]), np.array([s.address + s.data.shape[1]]))
        assert inside[0], f"segment {s.name} at {s.address:#x} is in no allocation the map lists"
    size = {}
    for al in doc["allocations"]:
        if al["kind"] == "reservation" and al["placed"]:
            key = al.get("reserve") or al["name"]
            if al["owner"] != "support":
                key = f"{key} of {al['owner']}"
            size[key] = max(size.get(key, 0), max(p[2] for p in al["placed"]))
    held = {}
    for c in contents:
        held[c["reservation"]] = held.get(c["reservation"], 0) + c["bytes"]
    for r, b in held.items():
        if r != "kernel_scratch":  # per-op reservations of the same elements: the map lists each element once
            assert b <= size[r], (r, b, size[r])


@pytest.mark.parametrize("cfg,tiles", CASES[:3])
def test_reservations_are_the_measured_use(cfg, tiles):
    """memory-plan reserves what lowering-storage measured: the code 16-byte aligned, the tables below it up to the
    element boundary of the two (whole elements together, no more); the real lowering fits in the measured bytes
    (low and high data, code) and uses nearly all of them: the measuring lowering counts the GEMM result-row copies
    that a final plan may make unnecessary (`_direct_results`), so the real code can be a few bytes shorter."""
    f, target = _placed(cfg, tiles)
    measured = storage_of(f)
    assert measured is not None and all(v > 0 for v in measured.values()), measured
    plan, placed = read_placement(f)
    spans = {
        b.label.removeprefix("reserve "): int(b.span.max()) for b in placed if b.label.startswith("reserve ")
    }
    # Each op's own frames and data are buffers packed at the start of the two spans; the reservations hold the
    # rest (the data no op owns).
    owned = {"frames and tables": [], "kernel data": []}
    for b in placed:
        for what, rows in owned.items():
            if b.label.endswith(f" {what}") and not b.label.startswith("reserve "):
                assert b.resident and len(set(b.addr.tolist())) == 1, b.label  # one address on every tile
                rows.append((int(b.addr[0]), int(b.span[0])))
    assert owned["frames and tables"] and owned["kernel data"] or cfg.num_hidden_layers < 2
    frames = sum(-(-n // 8) * 8 for _, n in owned["frames and tables"])
    data = sum(-(-n // 16) * 16 for _, n in owned["kernel data"])
    e0 = target.region0_element_bytes
    code = -(-measured["code"] // 16) * 16
    assert spans["code"] == code
    assert spans["code"] + frames + spans["exchange_tables"] == -(-(code + measured["tables"]) // e0) * e0
    assert frames + spans["exchange_tables"] >= measured["tables"]
    assert measured["scratch"] <= data + spans["lowering_scratch"] < measured["scratch"] + 16
    # Packed without gaps in event order, the op buffers start where the reservation of the unowned data ends.
    for what, kind in (("frames and tables", "exchange_tables"), ("kernel data", "lowering_scratch")):
        rows = sorted(owned[what])
        align = 8 if kind == "exchange_tables" else 16
        for (a, n), (b, _) in zip(rows, rows[1:]):
            assert b == a + -(-n // align) * align
        if rows:
            reserve = next(b for b in placed if b.label == f"reserve {kind}")
            assert int(reserve.addr.max() + reserve.span.max()) == rows[0][0]
    lowering = Lowering(f, target)
    pkg = lowering.run()
    # The measured code covers the result-row copies of GEMM results the final plan may place in the C element
    # (`_direct_results` takes none as direct when measuring): the final code is that, or a few call sites less.
    assert measured["code"] - 64 <= len(pkg.code) <= measured["code"]
    # The unowned data from the reservation's start, each op's inside its own buffer (the contents test checks
    # that); the bytes used are about the measured tables.
    low_start = lowering.low[0][0]
    low_end = max(
        s.address + s.data.shape[1]
        for s in pkg.segments
        if low_start <= s.address < min([lowering.code_addr, *(a for a, _ in owned["frames and tables"])])
    )
    assert low_end - low_start <= measured["tables"] - frames
    assert measured["tables"] - 64 * (len(owned["frames and tables"]) + 1) < lowering.image.used["low"]
    assert lowering.image.used["low"] <= measured["tables"]  # measured, not a generous guess


def test_measuring_counts_when_the_provisional_plan_leaves_no_room():
    """A provisional plan that fills SRAM to its end (So400m with 8 layers) leaves the lowering no high range: the
    measuring image still counts every byte asked of each range (small data, whole elements, low data)."""
    from ipu.backend.lower.placement import DataImage, PlacementError

    t = Target.small(tiles=2, sram_kib=624)
    e = t.region1_element_bytes
    img = DataImage(t, [], t.sram_end, measure=True)
    for n in (96, 40, 8):
        img.alloc(n, 8, "high")
    img.alloc(e, e, "high", region1=True, element=True)
    img.alloc(2 * e, 16, "high", element=True)
    img.alloc(12, 8, "low")
    img.alloc(5000, 8, "low")
    assert img.need() == {"low": 12 + 5000 + 4, "high_small": 96 + 40 + 8, "high_elements": 3 * e}
    with pytest.raises(PlacementError, match="does not fit"):
        DataImage(t, [], t.sram_end).alloc(96, 8, "high")


@pytest.mark.parametrize("key", ["tables", "scratch"])
def test_compile_plans_again_when_the_final_plan_needs_more_storage(key):
    """When the lowering's storage outgrows the reservations (here: `lowering.storage` edited too small), the
    compile measures the final plan, plans again with the larger sizes and says so; the package computes what the
    normally planned one does, bit for bit. Without the second plan the lowering fails with StorageOverflow."""
    from xdsl.dialects.builtin import DenseArrayBase, DictionaryAttr, IntegerAttr, i64

    from ipu.backend.lower.lowering import lower_fitting, lower_to_package
    from ipu.backend.lower.placement import StorageOverflow
    from ipu.frontend.weights import random_weights
    from ipu.passes.lowering_storage import DATA_ATTR, STORAGE_ATTR, data_of
    from ipu.passes.memory_plan import MemoryPlanPass
    from ipu.runtime.host import Session

    cfg, tiles = PRESETS["tiny"], 16
    target = Target.small(tiles=tiles, sram_kib=624)
    spec = pipeline_spec(target, outline_repeat=True)
    pre, plan = spec.rsplit(",", 1)
    assert plan.startswith("memory-plan")
    runs = []
    for shrink in (False, True):
        module = build_vision_model(cfg)
        PassPipeline.parse_spec(dict(all_passes()), pre).apply(Context(), module)
        f = next(o for o in module.walk() if isinstance(o, func.FuncOp))
        sizes = storage_of(f)
        if shrink:
            sizes[key] //= 2
            f.attributes[STORAGE_ATTR] = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in sizes.items()})
            part = 0 if key == "tables" else 1  # the ops' own parts too (memory-plan packs them in the span)
            for o in f.walk():
                if (d := data_of(o)) is not None:
                    d = list(d)
                    d[part] //= 4
                    o.attributes[DATA_ATTR] = DenseArrayBase.from_list(i64, d)
        plan_pass = MemoryPlanPass(tiles=tiles, sram_kib=624)
        plan_pass.apply(Context(), module)
        if shrink:
            with pytest.raises(StorageOverflow, match="does not fit"):
                lower_to_package(module.clone(), target)
        pkg = lower_fitting(module, target, plan_pass)
        notes = [n for n in pkg.metadata.get("notes", []) if n.startswith("memory planned again")]
        assert bool(notes) == shrink, notes
        # Re-measured on the final plan: about the first measurement (the timed exchange tables depend on the
        # addresses through the send staging, so a row more or less), far above the halved reservation.
        assert storage_of(f)[key] >= 1.9 * sizes[key] if shrink else True
        w = random_weights(cfg, 3)
        s = Session(pkg)
        s.upload_parameters(w)
        x = np.random.default_rng(5).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
        runs.append(s.run({"pixel_values": x}).outputs)
    for k in runs[0]:
        assert np.array_equal(runs[0][k], runs[1][k]), k


def test_measuring_lowers_iterations_0_and_1_with_the_sizes_of_every_iteration():
    """A measuring lowering of a 3-layer loop lowers iterations 0 and 1 only (the last one's check is the real
    lowering's) and measures what a measuring lowering of every iteration measures."""
    f, target = _placed(PRESETS["tiny"].with_layers(3), 16)
    seen = []

    class Probe(Lowering):
        def block(self, block):
            if self.layer is not None and block is not self.f.body.block:
                seen.append(self.layer)
            return super().block(block)

    fast = Probe(f, target, measure=True)
    fast.run()
    assert sorted(set(seen)) == [0, 1]
    full = Lowering(f, target, measure=True, per_iteration=True)
    full.run()
    assert fast.storage_need() == full.storage_need()


def _planned(cfg, tiles, kib, whole_program: bool, scratch_at: str = "auto"):
    """(module, plan pass) of cfg planned for tiles x kib KiB, with the scratch elements reserved per op (as
    measured) or, whole_program, as one reservation for the whole program (the elements folded into `scratch`,
    the ops' `lowering.scratch` dropped); None when memory-plan fails."""
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, i64
    from xdsl.utils.exceptions import PassFailedException

    from ipu.passes.lowering_storage import SCRATCH_ATTR, STORAGE_ATTR
    from ipu.passes.memory_plan import MemoryPlanPass

    target = Target.small(tiles=tiles, sram_kib=624)
    pre, _ = pipeline_spec(target, outline_repeat=True).rsplit(",", 1)
    module = build_vision_model(cfg)
    PassPipeline.parse_spec(dict(all_passes()), pre).apply(Context(), module)
    f = next(o for o in module.walk() if isinstance(o, func.FuncOp))
    sizes = storage_of(f)
    assert sizes.get("elements"), sizes  # the measured lowering uses the scratch elements inside ops only
    if whole_program:
        sizes["scratch"] += sizes.pop("elements")
        f.attributes[STORAGE_ATTR] = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in sizes.items()})
        for o in f.walk():
            o.attributes.pop(SCRATCH_ATTR, None)
    plan = MemoryPlanPass(tiles=tiles, sram_kib=kib, lowering_scratch_at=scratch_at)
    try:
        plan.apply(Context(), module)
    except PassFailedException:
        return None
    return module, plan


def test_scratch_reserved_per_op_only_at_the_events_of_its_ops():
    """The kernel scratch elements are reserved at the events of the ops that use them, by the bytes each uses
    (`lowering.scratch`), not for the whole program: every op's recorded use is a `kernel_scratch` reservation
    at its event and nowhere else (the exchange phases between ops leave the elements to other buffers), and the
    package planned so computes the same bits as one planned with a whole-program reservation."""
    from ipu.backend.lower.lowering import lower_fitting
    from ipu.dialects import memory as mem
    from ipu.frontend.weights import random_weights
    from ipu.passes.lowering_storage import scratch_of
    from ipu.passes.memory_plan import number_events
    from ipu.runtime.host import Session

    cfg, tiles = PRESETS["tiny"], 16
    module, _ = _planned(cfg, tiles, 624, whole_program=False)
    f = next(o for o in module.walk() if isinstance(o, func.FuncOp))
    events = number_events(f)
    timed = {}
    for o in f.body.block.ops:
        if isinstance(o, mem.ReserveOp) and o.kind.data == "kernel_scratch":
            first, last = (x.data for x in o.buffer.live.data)
            assert first == last
            timed.setdefault(first, []).append(o)
    used = {e: scratch_of(o) for o, e in events.start.items() if scratch_of(o) is not None}
    assert used and set(timed) == {e for e, u in used.items() if any(u)}
    assert len(timed) < events.count - 2  # not every event: the exchange phases between ops use none
    for e, ops in timed.items():  # each reservation holds the op's bytes of its element
        got = sorted(int(mem.table_values(o.buffer.bytes_, 1).max()) for o in ops)
        assert got == sorted(b for b in used[e] if b), (e, got, used[e])
    x = np.random.default_rng(7).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    w = random_weights(cfg, 2)
    outs = []
    for whole in (False, True):
        module, plan = _planned(cfg, tiles, 624, whole_program=whole)
        pkg = lower_fitting(module, Target.small(tiles=tiles, sram_kib=624), plan)
        s = Session(pkg)
        s.upload_parameters(w)
        outs.append(s.run({"pixel_values": x}).outputs)
    for k in outs[0]:
        assert np.array_equal(outs[0][k], outs[1][k]), k


def _span(f, kind: str) -> tuple[int, int]:
    """[start, end) of a lowering span: its reservation (the data no op owns) and the ops' own buffers in it."""
    what = {"exchange_tables": "frames and tables", "lowering_scratch": "kernel data"}[kind]
    _, placed = read_placement(f)
    rows = [
        (int(b.addr.max()), int(b.addr.max() + b.span.max()))
        for b in placed
        if b.label == f"reserve {kind}"
        or (b.label.endswith(f" {what}") and not b.label.startswith("reserve "))
    ]
    return min(a for a, _ in rows), max(b for _, b in rows)


def test_lowering_scratch_below_the_exchange_tables_computes_the_same_bits():
    """memory-plan{lowering_scratch_at=region0} puts the lowering's small data just below the exchange tables (in
    region 0) instead of below the scratch elements at the top: the reservation is there, every byte the package
    writes lies inside the map, and the outputs are the bits of the default placement."""
    from ipu.backend.lower.lowering import lower_fitting
    from ipu.frontend.weights import random_weights
    from ipu.runtime.host import Session

    cfg, tiles = PRESETS["tiny"], 16
    target = Target.small(tiles=tiles, sram_kib=624)
    x = np.random.default_rng(3).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    w = random_weights(cfg, 5)
    outs, where = [], {}
    for at in ("top", "region0"):
        module, plan = _planned(cfg, tiles, 624, whole_program=False, scratch_at=at)
        f = next(o for o in module.walk() if isinstance(o, func.FuncOp))
        where[at], end = _span(f, "lowering_scratch")
        tables, _ = _span(f, "exchange_tables")
        if at == "region0":
            assert end == tables < target.region1_base
        pkg = lower_fitting(module, target, plan)
        s = Session(pkg)
        s.upload_parameters(w)
        outs.append(s.run({"pixel_values": x}).outputs)
    assert where["top"] >= target.region1_base > where["region0"]
    for k in outs[0]:
        assert np.array_equal(outs[0][k], outs[1][k]), k


def test_lowering_scratch_at_is_checked():
    from xdsl.utils.exceptions import PassFailedException

    from ipu.passes.memory_plan import MemoryPlanPass

    module = build_vision_model(PRESETS["tiny"])
    with pytest.raises(PassFailedException, match="lowering-scratch-at must be one of auto, top, region0"):
        MemoryPlanPass(tiles=16, lowering_scratch_at="middle").apply(Context(), module)


def test_measured_loop_patch_tables_are_the_real_ones(monkeypatch):
    """A measuring lowering's addresses past its provisional plan wrap onto each other; the words of frames and
    tables that lie at one such address hid each other when the loop's varying words were counted, so the patch
    tables it sized were smaller than the real lowering's (a 3-layer width-120 SigLIP on 128 tiles: 68 B against
    372 B, 124 bytes over region 0's reservation after three plans). Now each frame and segment is counted at an
    address of its own: the measured patch tables are the real ones, and the model compiles and matches the
    device reference."""
    from ipu.backend.lower import placement as pl
    from ipu.tools.random_models import run_case

    cfg = SiglipVisionConfig(
        hidden_size=120, intermediate_size=40, num_attention_heads=2, num_hidden_layers=3, image_size=83,
        patch_size=14,
    )  # fmt: skip
    sizes: dict[bool, list[int]] = {True: [], False: []}
    alloc = pl.DataImage.alloc

    def spy(self, nbytes, align=8, where="low", region1=False, what="data", element=False):
        if "patch table" in what:
            sizes[self.measure].append(int(nbytes))
        return alloc(self, nbytes, align, where, region1, what, element)

    monkeypatch.setattr(pl.DataImage, "alloc", spy)
    outcome, detail = run_case(cfg, 128, 624, seed=111002)
    assert outcome == "ok", detail
    assert sizes[True] and sizes[False] and max(sizes[True]) >= max(sizes[False]), sizes
