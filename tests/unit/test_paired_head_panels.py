"""q / k / v projections in panels wider than the head divisor they are stored in (`nn_split_k.head_multiples`,
`tile_plan.panel_store_width`): with heads of 72, a 48-wide panel is one GEMM without N padding (24 alone pads
to 32); its partials stay one [pm, 48] block per tile and its sum is stored as two 24-wide head blocks per sum
tile (a strided `ksum` each), which the attention gathers as it gathers 24-wide panels. q and k (f16 weights,
row-major x) read their weights in place as F16 AMP panels (`ampw`).

A SigLIP with heads of 72 (width 288, 4 heads, 64 tokens) on 128 tiles takes such panels; the package matches the
device-precision reference (`ipu.tools.random_models.run_case`), and the plan is checked: one partial block per
GEMM tile, two adjacent head blocks of one row range per sum tile."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.passes import PassPipeline

from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.frontend.siglip import SiglipVisionConfig, build_vision_model
from ipu.passes.compile_pipeline import IpuCompilePipelinePass
from ipu.passes.nn_split_k import head_multiples
from ipu.passes.registry import all_passes
from ipu.passes.tile_plan import attention_head_dim, panel_store_width
from ipu.tools.random_models import run_case

CFG = SiglipVisionConfig(
    hidden_size=288,
    intermediate_size=576,
    num_attention_heads=4,
    num_hidden_layers=1,
    image_size=112,
    patch_size=14,
)
TILES = 128


@pytest.fixture(scope="module")
def planned():
    """The nn passes of the default pipeline, then tile-plan alone (its relayouts still show which linears feed
    the attention)."""
    m = build_vision_model(CFG)
    text = IpuCompilePipelinePass(tiles=TILES, sram_kib=624).resolved(m).pipeline_text()
    nn_passes = text[: text.index("nn-to-exchange-pipeline")].rstrip(",")
    spec = f"{nn_passes},tile-plan{{tiles={TILES} sram_kib=624}}"
    PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), m)
    return m


def test_head_multiples():
    assert head_multiples(72) == (48,)
    assert head_multiples(96) == (64,)  # 2 x 32 (32 | 96); 48 divides 96
    assert head_multiples(24) == ()  # no divisor of 16 or more below the head
    assert 48 not in head_multiples(16 * 6)  # a divisor of the head is not a multiple panel


def test_attention_projections_in_paired_blocks(planned):
    qkv = [
        o
        for o in planned.walk()
        if isinstance(o, nn.LinearPartialsOp)
        and attention_head_dim(o) == 72
        and o.input.type.get_shape()[0] > 8
    ]
    assert len(qkv) == 3
    paired = [o for o in qkv if o.attributes[tl.PLAN_ATTR].get("panel")[2] == 48]
    assert paired, [o.attributes[tl.PLAN_ATTR].get("panel") for o in qkv]
    for o in paired:
        pm, _kc, pn = o.attributes[tl.PLAN_ATTR].get("panel")
        lay = o.attributes[tl.LAYOUT_ATTR]
        # the partials stay whole [pm, 48] blocks, one per tile (one GEMM writes them)
        assert panel_store_width(o, pn) == 24 and lay.block_ == (1, pm, 48)
        assert len(set(lay.table()[:, 0].tolist())) == lay.num_blocks
        (use,) = [u.operation for u in o.results[0].uses]
        while not isinstance(use, nn.ReduceSumOp):
            (use,) = [u.operation for u in use.results[0].uses]
        # the sum reads 48-wide partial rows and keeps the head blocks: 24 columns, each tile's two side by side
        res = use.attributes[tl.LAYOUT_ATTR]
        assert tl.layout_of(use.input).block_[2] == 48 and res.block_[1] == 24
        table, geo = res.table()[:, 0], res.geometry()
        held: dict[int, list] = {}
        for b in range(res.num_blocks):
            held.setdefault(int(table[b]), []).append(tuple(int(v) for v in geo.block_origin[b]))
        for t, origins in held.items():  # two adjacent 24-column blocks of one row range per tile
            origins.sort()
            assert len(origins) == 2 and origins[0][0] == origins[1][0], (t, origins)
            assert origins[1][1] == origins[0][1] + 24 and origins[0][1] % 48 == 0
    f16 = [o for o in paired if tl.element_bytes(o.weight.type.element_type) == 2]
    assert f16 and all(tl.layout_of(o.weight).order.data == "ampw" for o in f16)


def run(seed: int):
    from ipu.backend.lower.lowering import compile_model
    from ipu.backend.target import Target
    from ipu.frontend.weights import random_weights
    from ipu.runtime.host import Session

    w = random_weights(CFG, seed)
    x = (
        np.random.default_rng(seed + 1)
        .uniform(-1, 1, (1, 3, CFG.image_size, CFG.image_size))
        .astype(np.float32)
    )
    session = Session(compile_model(CFG, Target.small(tiles=TILES, sram_kib=624), weights=w))
    session.upload_parameters(w)
    return session.run({"pixel_values": x}).outputs


def test_paired_blocks_match_the_reference():
    outcome, detail = run_case(CFG, TILES, 624, seed=5)
    assert outcome == "ok", detail


def test_paired_blocks_give_the_bits_of_one_block(monkeypatch):
    """The same plan with each 48-wide panel's result stored as one row-major block (the attention then gathers
    a piece per row: slower, the same values): the two head blocks per tile change where the results lie, not
    what they are, bit for bit. (K's panels read in place round S^T once more per panel, so both runs take K
    rows: the comparison is about the layout.)"""
    from ipu.backend.lower import nnops
    from ipu.passes import tile_plan

    monkeypatch.setattr(nnops, "k_in_place_blocks", lambda *a: None)
    got = run(7)
    monkeypatch.setattr(tile_plan, "panel_store_width", lambda op, pn: pn)
    want = run(7)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_other_splits_keep_one_block_per_panel(planned):
    """Linears that do not feed the attention (the MLP's, out_proj, the patch embedding) store each panel as one
    block, as before."""
    others = [
        o
        for o in planned.walk()
        if isinstance(o, nn.LinearPartialsOp)
        and not attention_head_dim(o)
        and len(o.attributes[tl.PLAN_ATTR].get("grid")) == 3
    ]
    assert others
    for o in others:
        pn = o.attributes[tl.PLAN_ATTR].get("panel")[2]
        assert panel_store_width(o, pn) == pn
        assert o.attributes[tl.LAYOUT_ATTR].block_[2] == min(pn, o.result.type.get_shape()[2])


def test_received_panels_load_two_slots_per_load():
    """kernel-select: a many-row split's AMP panels that its exchange phase delivers take coef = ld128 (memory-plan
    then puts them in interleaved memory): q / k's f16 panels and the MLP's FP8 ones; panels read where they are
    resident keep ld64."""
    from ipu.dialects import exchange as ex
    from ipu.passes.kernel_select import choices

    m = build_vision_model(CFG)
    IpuCompilePipelinePass(tiles=TILES, sram_kib=624, stop_after="nn-to-exchange-pipeline").apply(
        Context(), m
    )
    ampw = [
        o
        for o in m.walk()
        if isinstance(o, nn.LinearPartialsOp)
        and tl.layout_of(o.weight).order.data == "ampw"
        and o.input.type.get_shape()[0] > 8
    ]
    assert ampw
    for o in ampw:
        want = "ld128" if isinstance(o.weight.owner, ex.PhaseOp) else "ld64"
        assert choices(o)["coef"] == want
    delivered = {
        tl.element_bytes(o.weight.type.element_type) for o in ampw if isinstance(o.weight.owner, ex.PhaseOp)
    }
    assert delivered == {1, 2}, delivered


def test_reduce_layouts_group_head_blocks_by_the_panel():
    """`tile_plan.reduce_layouts` with a width: the sum's operand in blocks of the partials' 48 columns, one per
    pair of adjacent 24-wide result blocks of one tile; a result whose pairs lie on two tiles is refused by name."""
    from xdsl.dialects.builtin import f16
    from xdsl.utils.exceptions import PassFailedException

    from ipu.passes.tile_plan import reduce_layouts

    tiles = np.array([[0, 0, 1, 1], [2, 2, 3, 3]], np.int32)  # [row blocks, 24-wide column blocks]
    result = tl.make_layout((26, 96), (13, 24), tiles.reshape(-1, 1), f16)
    op = reduce_layouts(result, 6, 48)
    assert op.shape_ == (6, 26, 96) and op.block_ == (6, 13, 48)
    assert op.table()[:, 0].tolist() == [0, 1, 2, 3]
    assert reduce_layouts(result, 6).block_ == (6, 13, 24)  # no width: the result's blocks
    split = tl.make_layout(
        (26, 96), (13, 24), np.array([0, 5, 1, 1, 2, 2, 3, 3], np.int32).reshape(-1, 1), f16
    )
    with pytest.raises(PassFailedException, match="not grouped by 48 on one tile"):
        reduce_layouts(split, 6, 48)


def test_both_head_blocks_summed_in_one_call(monkeypatch):
    """A sum tile's two head blocks (adjacent columns of the same 48-wide partial rows, stored one after the other)
    go to one strided `ksum` call over both (`KSum.panels` = 2: one call's set-up instead of two), the same bits
    as one call per block."""
    from ipu.backend.lower.nnops import NnOps

    seen = []
    real = NnOps._reduce_sum_fused

    def spy(self, op, blocks, cols, *a, **kw):
        seen.append(kw.get("panels") or (a[5] if len(a) > 5 else None))
        return real(self, op, blocks, cols, *a, **kw)

    monkeypatch.setattr(NnOps, "_reduce_sum_fused", spy)
    paired = run(7)
    assert any(p and set(p.values()) == {2} for p in seen), seen
    seen.clear()
    monkeypatch.setattr(NnOps, "_paired_blocks", staticmethod(lambda *a: None))
    apart = run(7)
    assert not any(p for p in seen)
    for k in apart:
        np.testing.assert_array_equal(paired[k], apart[k], err_msg=k)
