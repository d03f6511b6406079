"""`nn-fuse-sum-add` and `tile-fuse-sum-cast` end to end: a SigLIP whose MLP `nn-split-mlp` cuts in two parts, so
that the second fc2 part's K-split sum takes the first's as an addend (the fused `ksum` adds it before the store),
and each fc1 part's GELU sum stores FP8 for fc2's FP8 GEMM (the cast folded in). The fused sums, the lowering's
unfused fallback (one `add_f32` call per addend) and the residual stream's adds folded too (addends=loops, the
default, and addends=any) all give the bits of the separate ops, and the device matches the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.frontend.siglip import SiglipVisionConfig
from ipu.passes import nn_fuse_sum_add
from ipu.tools.random_models import run_case

# intermediate 2400 > nn-split-mlp's max_k 2304: two MLP parts of 1200
CFG = SiglipVisionConfig(
    hidden_size=128,
    intermediate_size=2400,
    num_attention_heads=2,
    num_hidden_layers=2,
    image_size=112,
    patch_size=14,
)
TILES = 128


def run(seed: int):
    from ipu.backend.lower.lowering import compile_model
    from ipu.backend.target import Target
    from ipu.frontend.weights import random_weights
    from ipu.runtime.host import Session

    w = random_weights(CFG, seed)
    x = np.random.default_rng(seed + 1).uniform(-1, 1, (1, 3, CFG.image_size, CFG.image_size))
    pkg = compile_model(CFG, Target.small(tiles=TILES, sram_kib=624), weights=w)
    session = Session(pkg)
    session.upload_parameters(w)
    return session.run({"pixel_values": x.astype(np.float32)}).outputs


def _policy(monkeypatch, addends: str) -> list:
    """Runs nn-fuse-sum-add with `addends` whatever the pipeline says; returns the fused sums' addend counts (of
    its last run)."""
    seen: list = []
    real = nn_fuse_sum_add.NNFuseSumAddPass.apply

    def apply(self, ctx, op):
        from ipu.dialects import nn

        real(nn_fuse_sum_add.NNFuseSumAddPass(addends=addends), ctx, op)
        # the last run's (the pipeline's `auto` sum_addends plans a trial copy first)
        seen[:] = [len(o.addends) for o in op.walk() if isinstance(o, nn.ReduceSumOp) and o.addends]

    monkeypatch.setattr(nn_fuse_sum_add.NNFuseSumAddPass, "apply", apply)
    return seen


@pytest.fixture(scope="module")
def unfused():
    """Neither fusion: the adds and the FP8 casts as separate ops."""
    from ipu.passes import tile_fuse_sum_cast

    with pytest.MonkeyPatch.context() as mp:
        assert _policy(mp, "none") == []
        mp.setattr(tile_fuse_sum_cast.TileFuseSumCastPass, "apply", lambda self, ctx, op: None)
        return run(3)


def test_fused_sums_give_the_same_bits(monkeypatch, unfused):
    """The defaults: one addend per layer (addends=sums: the first fc2 part's sum) taken by a `ksum` addend kind,
    and both fc1 parts' FP8 casts folded into their GELU sums (`tile-fuse-sum-cast`: FP8 `ksum` calls); the same
    bits as the separate adds and casts."""
    from ipu.backend.kernels import ksum as ks

    kinds = []
    real = ks.KSum.frame

    def frame(self, labels):
        kinds.append((len(self.addends), self.out_type))
        return real(self, labels)

    monkeypatch.setattr(ks.KSum, "frame", frame)
    seen = _policy(monkeypatch, "sums")
    got = run(3)
    assert seen == [1], seen  # the layer loop's body: one fused sum
    assert (1, "f32") in kinds and (0, "fp8") in kinds, set(kinds)
    for k in unfused:
        np.testing.assert_array_equal(got[k], unfused[k], err_msg=k)


def test_unfused_fallback_gives_the_same_bits(monkeypatch, unfused):
    """A sum the fused kernel does not take (here: none, `ksum.MAX_ADDENDS` = 0) adds its addends with one
    `add_f32` call each after the sum: the same bits."""
    from ipu.backend.kernels import ksum as ks

    monkeypatch.setattr(ks, "MAX_ADDENDS", 0)
    seen = _policy(monkeypatch, "sums")
    got = run(3)
    assert seen == [1], seen
    for k in unfused:
        np.testing.assert_array_equal(got[k], unfused[k], err_msg=k)


def test_residual_adds_folded_too(monkeypatch, unfused):
    """addends=any: the residual stream's adds fold as well (out_proj's sum + h; the second fc2 part's sum +
    the first's + the attention's residual: two addends), the same bits."""
    seen = _policy(monkeypatch, "any")
    got = run(3)
    assert sorted(seen) == [1, 2], seen
    for k in unfused:
        np.testing.assert_array_equal(got[k], unfused[k], err_msg=k)


def test_residual_adds_folded_in_the_loop(monkeypatch, unfused):
    """addends=loops (the pipeline's default): in the layer loop the residual adds fold as with addends=any
    (the carried stream is a loop value), the same bits; tile-plan carries the stream in the column blocks of
    the sums that read and yield it, so no relayout brings it to them (only the layer norms gather it)."""
    seen = _policy(monkeypatch, "loops")
    got = run(3)
    assert sorted(seen) == [1, 2], seen
    for k in unfused:
        np.testing.assert_array_equal(got[k], unfused[k], err_msg=k)


def test_loop_carries_the_stream_in_the_sums_blocks():
    """tile-plan's carried layouts (`carried=auto`) on So400m's layer loop (planned only, two layers): out_proj's
    and fc2's sums, which take the residual stream as an addend, lie in the same column blocks, so the loop
    carries the stream in them: the out_proj sum reads it where it lies, the body yields fc2's sum as it is,
    and the only relayout of the stream in the body is the layer norm's gather into rows. With `carried=entry`
    the stream stays in rows, and the body moves it into the sum's blocks and back at the yield."""
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.dialects import nn
    from ipu.dialects import tile as tl
    from ipu.frontend.siglip import PRESETS, build_vision_model
    from ipu.passes.compile_pipeline import IpuCompilePipelinePass
    from ipu.passes.registry import all_passes

    def planned(carried: str) -> tl.RepeatOp:
        mod = build_vision_model(PRESETS["so400m-patch14-384"].with_layers(2))
        cp = IpuCompilePipelinePass(repeat=True).resolved(mod)
        head = cp.pipeline_text().split(",nn-to-exchange-pipeline")[0] + f",tile-plan{{carried={carried}}}"
        PassPipeline.parse_spec(dict(all_passes()), head).apply(Context(), mod)
        return next(o for o in mod.walk() if isinstance(o, tl.RepeatOp))

    def stream_moves(rep):
        return [tl.layout_of(u.operation.result) for u in rep.body.block.args[0].uses
                if isinstance(u.operation, tl.RelayoutOp)]  # fmt: skip

    rep = planned("auto")
    body = rep.body.block
    sums = [o for o in body.ops if isinstance(o, nn.ReduceSumOp) and o.addends]
    blocks = tl.layout_of(sums[0].result)
    assert len(sums) == 2 and tl.layout_of(sums[1].result) == blocks
    assert rep.arg_layouts.data[0] == blocks
    assert body.last_op.operands[0] is sums[1].result  # yielded where it lies
    assert body.args[0] in list(sums[0].addends)  # read where it lies
    assert [list(m.block_) for m in stream_moves(rep)] == [[1, 1152]]  # the layer norm's rows
    entry = planned("entry")
    assert list(entry.arg_layouts.data[0].block_) == [1, 1152]
    assert blocks in stream_moves(entry)
    assert isinstance(entry.body.block.last_op.operands[0].owner, tl.RelayoutOp)


def test_auto_addends_fold_the_residual_where_it_stays_in_place():
    """The pipeline's default sum_addends=auto: "loops" for So400m's layer loop (the sums take the stream where it
    lies: test above), "sums" for this model on 128 tiles (out_proj's and fc2's sums lie in other blocks, so the
    folds would move the stream: 212,914 cycles against 212,508 with the adds apart, measured) and without a
    loop."""
    from ipu.frontend.siglip import PRESETS, build_vision_model
    from ipu.passes.compile_pipeline import IpuCompilePipelinePass

    so400m = PRESETS["so400m-patch14-384"].with_layers(2)
    cp = IpuCompilePipelinePass(repeat=True)
    assert cp.sum_addends == "auto"
    assert cp.resolved(build_vision_model(so400m)).sum_addends == "loops"
    assert IpuCompilePipelinePass(repeat=False).resolved(build_vision_model(so400m)).sum_addends == "sums"
    small = IpuCompilePipelinePass(tiles=TILES, sram_kib=624, repeat=True).resolved(build_vision_model(CFG))
    assert small.sum_addends == "sums"


def test_fused_sums_match_the_reference():
    outcome, detail = run_case(CFG, TILES, 624, seed=11)
    assert outcome == "ok", detail


def test_fusable_needs_whole_pairs_of_units():
    """The pass's test of a planned sum: result blocks of whole pairs of units (8 elements), bias rows too."""
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.dialects import nn
    from ipu.passes.registry import all_passes
    from ipu.passes.tile_fuse_sum_cast import fusable

    def planned(cols: int):
        from xdsl.parser import Parser

        from ipu.dialects.registry import all_dialects

        text = f"""
func.func @f() {{
  %x = nn.input "x" : tensor<32x256xf16>
  %w = nn.param "w" : tensor<{cols}x256xf16>
  %b = nn.param "b" : tensor<{cols}xf32>
  %p = nn.linear_partials %x, %w k_chunk=64 : tensor<32x256xf16>, tensor<{cols}x256xf16> -> tensor<4x32x{cols}xf16>
  %s = nn.reduce_sum %p, %b : tensor<4x32x{cols}xf16>, tensor<{cols}xf32> -> tensor<32x{cols}xf16>
  %c = nn.cast %s : tensor<32x{cols}xf16> -> tensor<32x{cols}xf8E4M3FNUZ>
  nn.output "c" %c : tensor<32x{cols}xf8E4M3FNUZ>
  func.return
}}"""
        ctx = Context()
        for name, factory in all_dialects():
            ctx.register_dialect(name, factory)
        m = Parser(ctx, text).parse_module()
        PassPipeline.parse_spec(dict(all_passes()), "tile-plan{tiles=16 sram_kib=624}").apply(Context(), m)
        s = next(o for o in m.walk() if isinstance(o, nn.ReduceSumOp))
        c = next(o for o in m.walk() if isinstance(o, nn.CastOp))
        return s, c

    assert fusable(*planned(64))
    assert not fusable(*planned(36))  # 36-column bias rows: blocks of 9 or 12 columns at most
