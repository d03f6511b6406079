"""memory-plan on the tiny SigLIP (with its nn.repeat): the recorded placement, read back from the IR, is valid on
every tile (no two live buffers overlap, resident buffers overlap nothing, alignment, regions, aperture), stacked
parameters are Repeat sequences, and the IR round-trips."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.parser import Parser
from xdsl.passes import PassPipeline

from ipu.backend.target import Target
from ipu.dialects.registry import all_dialects
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.passes.memory_plan import read_placement
from ipu.passes.registry import all_passes

TILES, KIB = 16, 384  # 256 KiB: the fused QKV slices of the 16-tile plan leave tile 0 no region-1 room
PIPE = (
    "nn-fuse-qkv,nn-outline-repeat,tile-plan{{tiles={t} sram_kib={k}}},exchange-lower{{tiles={t} sram_kib={k}}},"
    "exchange-schedule,memory-plan{{tiles={t} sram_kib={k} reserve-code-bytes=16384}}"
)


@pytest.fixture(scope="module")
def planned():
    module = build_vision_model(PRESETS["tiny"])
    PassPipeline.parse_spec(dict(all_passes()), PIPE.format(t=TILES, k=KIB)).apply(Context(), module)
    module.verify()
    return module


def _check(plan, bufs, target: Target) -> list[str]:
    bad = []
    ap0, ap1 = target.host_aperture
    host_events = [x.value.data for x in plan.host_events.data]
    for t in range(target.num_tiles):
        on = [b for b in bufs if b.addr[t] >= 0 and b.span[t] > 0]
        for b in on:
            a, s = int(b.addr[t]), int(b.span[t])
            if not target.in_sram(a, s) or a % b.align:
                bad.append(f"tile {t}: {b.label} at {a:#x}+{s} misaligned or outside SRAM")
            if b.region == "r1" and not target.is_interleaved(a):
                bad.append(f"tile {t}: {b.label} not interleaved")
            if not b.label.startswith("reserve") and a < ap1 and ap0 < a + s:
                if b.host or b.resident or any(b.live[0] <= e <= b.live[1] for e in host_events):
                    bad.append(f"tile {t}: {b.label} in the host aperture at a host event")
        for i, x in enumerate(on):
            for y in on[i + 1 :]:
                if "host_aperture" in x.label + y.label:
                    continue  # checked above: the aperture is only reserved at host events
                if x.live[0] <= y.live[1] and y.live[0] <= x.live[1]:
                    ax, sx, ay, sy = int(x.addr[t]), int(x.span[t]), int(y.addr[t]), int(y.span[t])
                    if ax < ay + sy and ay < ax + sx:
                        bad.append(f"tile {t}: {x.label} and {y.label} overlap while live")
    return bad


def test_recorded_placement_is_valid(planned):
    f = next(o for o in planned.walk() if isinstance(o, func.FuncOp))
    plan, bufs = read_placement(f)
    target = Target.small(tiles=TILES, sram_kib=KIB)
    assert _check(plan, bufs, target) == []
    labels = [b.label for b in bufs]
    for kind in ("runtime_state", "code", "exchange_tables", "host_aperture"):
        assert f"reserve {kind}" in labels
    # Stacked layer parameters are resident Repeat sequences of 2 members (the tiny model has 2 layers).
    seqs = [b for b in bufs if b.seq == 2]
    assert seqs and all(b.resident for b in seqs)
    # The repeat's carried argument has its own buffer, live over the whole body.
    assert any("carried #0" in lab for lab in labels)
    assert plan.num_classes.value.data >= 1


def test_checker_sees_a_corrupted_plan(planned):
    f = next(o for o in planned.walk() if isinstance(o, func.FuncOp))
    plan, bufs = read_placement(f)
    target = Target.small(tiles=TILES, sram_kib=KIB)
    victim = next(b for b in bufs if b.resident and not b.label.startswith("reserve"))
    other = next(b for b in bufs if b.label.startswith("reserve runtime_state"))
    t = int(np.nonzero(victim.addr >= 0)[0][0])
    victim.addr[t] = other.addr[t]
    assert any("overlap" in m for m in _check(plan, bufs, target))


def test_memory_level_ir_round_trips(planned):
    ctx = Context()
    for name, factory in all_dialects():
        ctx.register_dialect(name, factory)
    text = str(planned)
    again = Parser(ctx, text).parse_module()
    again.verify()
    assert str(again) == text


def test_elementwise_operands_in_different_elements(planned):
    """The two operands of every nn.add / nn.mul lie in different memory elements on every tile that holds both
    (the element-wise kernel then loads both with one `ld2x64pace`: 2 bundles per unit instead of 3)."""
    from ipu.backend.lower.placement import Addresses
    from ipu.dialects import nn
    from ipu.dialects import tile as tl
    from ipu.passes.memory_alloc import _Elements
    from ipu.passes.memory_plan import shard_bytes

    elements = _Elements(Target.small(tiles=TILES, sram_kib=KIB))
    f = next(o for o in planned.walk() if isinstance(o, func.FuncOp))
    addrs = Addresses(f, TILES)
    checked = 0
    for op in f.walk():
        if not isinstance(op, (nn.AddOp, nn.MulOp)) or any(tl.layout_of(v) is None for v in op.operands):
            continue
        addr = [addrs.of(v).addr for v in op.operands]
        size = [shard_bytes(tl.layout_of(v), TILES) for v in op.operands]
        for t in np.nonzero((addr[0] >= 0) & (addr[1] >= 0) & (size[0] > 0) & (size[1] > 0))[0]:
            (x0, x1), (y0, y1) = (elements.span(int(a[t]), int(a[t] + n[t])) for a, n in zip(addr, size))
            assert x1 <= y0 or y1 <= x0, f"{op.name} on tile {t}: its operands share a memory element"
            checked += 1
    assert checked
