"""K-split linears: `nn.linear_partials` + `nn.reduce_sum` (the ops, their reference semantics), the `nn-split-k`
pass's choice, tile-plan's layouts and the lowering on the simulator against the reference evaluator."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import Float16Type, Float32Type, TensorType, f32
from xdsl.utils.exceptions import VerifyException

from ipu.backend.lower import lower_to_package
from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.frontend.reference import evaluate
from ipu.passes.nn_split_k import NNSplitKPass, choose_chunk
from ipu.runtime.host import Session

sys.path.insert(0, str(Path(__file__).parent))
from test_lower_chain import chain_model  # noqa: E402  (the sibling tests' model builders)
from test_lower_linear import data, linear_model, run_passes  # noqa: E402


def split_model(m, k, n, kc, bias=True, quantize="nn-quantize-weights"):
    """The linear model, quantized, with its linear split into chunks of kc."""
    mod = run_passes(linear_model(m, k, n, bias), quantize)
    (lin,) = [op for op in mod.walk() if isinstance(op, nn.LinearOp)]
    NNSplitKPass.split(lin, kc)
    mod.verify()
    return mod


def test_reference_partials_sum_to_the_linear():
    """Ragged last chunk (K = 80 in chunks of 32: 32 + 32 + 16): the partials are the chunks' products and their sum
    is the linear's result."""
    m, k, n = 3, 80, 16
    x, w, b = data(m, k, n)
    mod = split_model(m, k, n, 32, quantize="nn-canonicalize")  # not quantized: the fp32 model
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    assert parts.result.type.get_shape() == (3, m, n)
    got = evaluate(mod, {"x": x}, {"w": w, "b": b}, mode="fp32", capture=True)
    p = got.get(parts.result)
    for g, k0 in enumerate((0, 32, 64)):
        np.testing.assert_allclose(p[g], x[:, k0 : k0 + 32] @ w[:, k0 : k0 + 32].T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.outputs["y"], x @ w.T + b, rtol=1e-5, atol=1e-5)


def test_verifier_names_the_shapes():
    x = nn.InputOp("x", TensorType(f32, [2, 64]))
    w = nn.ParamOp("w", TensorType(f32, [16, 64]))
    bad = nn.LinearPartialsOp(x.result, w.result, 16, TensorType(Float32Type(), (3, 2, 16)))
    with pytest.raises(VerifyException, match="result has shape 3x2x16 but the operands imply 4x2x16"):
        bad.verify()
    s = nn.ReduceSumOp(bad.result, TensorType(Float32Type(), (2, 8)))
    with pytest.raises(VerifyException, match="nn.reduce_sum: result has shape"):
        s.verify()


def test_choice_splits_the_map_head_on_1472_tiles_only():
    # So400m's MAP head: q / out_proj [1, 1152] x [1152, 1152], fc2 parts [1, 2160] x [1152, 2160]
    for k, n in ((1152, 1152), (2160, 1152), (1152, 2160)):
        kc = choose_chunk(1, k, n, 2, "f16", 1472)
        assert kc is not None and kc % 16 == 0 and -(-k // kc) * -(-n // 16) <= 1472
        assert choose_chunk(1, k, n, 2, "f16", 72) is None  # no tiles beyond one per column panel
    # A tiny GEMM has nothing to gain: one weight block per tile already.
    assert choose_chunk(1, 16, 16, 2, "f16", 1472) is None


def test_tile_plan_keeps_each_weight_slice_on_its_tile():
    opts = "{tiles=64 sram_kib=624}"
    mod = run_passes(split_model(1, 256, 64, 64), f"nn-to-exchange-pipeline{opts}")
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    (red,) = [op for op in mod.walk() if isinstance(op, nn.ReduceSumOp)]
    plan = parts.attributes[tl.PLAN_ATTR]
    assert list(plan.get("grid")) == [4, 4] and list(plan.get("panel")) == [1, 64, 16]
    res = parts.attributes[tl.LAYOUT_ATTR]
    tiles = res.table()[:, 0]
    assert len(set(tiles.tolist())) == 16  # one partial block per tile
    w = tl.layout_of(parts.operands[1])
    assert w.replicas.data == 1 and w.block_ == (16, 64)
    # The weight block of (column panel j, chunk c) sits on the tile that computes partial c of panel j.
    wt = w.table()[:, 0].reshape(4, 4)  # [panel j, chunk c]
    assert (wt.T.reshape(-1) == tiles).all()
    # The sum's blocks are on the first chunk's tiles, its operand stacks the 4 partials there.
    r = red.attributes[tl.LAYOUT_ATTR]
    assert (r.table()[:, 0] == tiles[:4]).all()
    assert tl.layout_of(red.operands[0]).block_ == (4, 1, 16)


@pytest.mark.parametrize(
    "m, k, n, kc, quantize",
    [
        (1, 256, 64, 64, "nn-quantize-weights"),
        (2, 272, 32, 96, "nn-quantize-weights"),
        (1, 2160, 32, 144, "nn-quantize-weights{activations=f16 keep_f16=w}"),
        (1, 64, 32, 64, "nn-quantize-weights"),
    ],
    ids=[
        "one row, FP8 weights, 4 chunks",
        "two rows, ragged last chunk (80)",
        "K > 2056, f16 weights, 15 chunks",
        "one chunk: the sum is a copy",
    ],
)
def test_split_linear_matches_reference(m, k, n, kc, quantize, tmp_path):
    opts = "{tiles=64 sram_kib=624}"
    mod = run_passes(
        split_model(m, k, n, kc, quantize=quantize), f"nn-to-exchange-pipeline{opts},memory-plan{opts}"
    )
    assert any(isinstance(op, nn.LinearPartialsOp) for op in mod.walk())
    got, want, _ = run_against_reference(mod, m, k, n, kc, quantize)
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()


def run_against_reference(mod, m, k, n, kc, quantize):
    """The placed linear model on the simulator (twice: the same bits) and its device-precision reference:
    (device y, reference y, bias). Each chunk's partial is rounded to f16 per 16-deep block (the AMP's C), then
    summed in f32: the tolerance grows with the chunk."""
    x, w, b = data(m, k, n)
    session = Session(lower_to_package(mod))
    session.upload_parameters({"w": w, "b": b})
    got = session.run({"x": x}).outputs["y"]
    ref = evaluate(run_passes(linear_model(m, k, n), quantize), {"x": x}, {"w": w, "b": b}, mode="device")
    want = ref.outputs["y"]
    tol = 4 * np.abs(want).max() * 2.0**-11 * max(1.0, np.sqrt(kc / 256))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    assert np.array_equal(session.run({"x": x}).outputs["y"], got)
    return got, want, b


def tiny_loop_split(pick, kc: int, many_rows: bool = False, seed: int = 1):
    """The tiny SigLIP (layers as one `tile.repeat`) on 16 tiles with the loop body's linear chosen by `pick`
    (weight shape -> bool) split by hand along K, then the default pipeline; the device must match the
    device-precision reference of the split model. Returns the placed module."""
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.backend.lower.lowering import pipeline_spec
    from ipu.frontend.siglip import PRESETS, build_vision_model
    from ipu.frontend.weights import random_weights
    from ipu.passes.registry import all_passes
    from ipu.passes.tile_plan import target_for
    from ipu.tools.ipu_run import per_embedding

    cfg = PRESETS["siglip-tiny"]
    target = target_for(16, 624)
    head, tail = pipeline_spec(target, True).split(",nn-split-k")
    mod = build_vision_model(cfg)
    PassPipeline.parse_spec(dict(all_passes()), head).apply(Context(), mod)
    (lin,) = [
        o
        for o in mod.walk()
        if isinstance(o, nn.LinearOp)
        and o.parent_op().name == "nn.repeat"
        and pick(o.weight.type.get_shape())
    ]
    NNSplitKPass.split(lin, kc, many_rows)
    x = np.random.default_rng(seed).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    w = random_weights(cfg, 0)
    want = evaluate(mod, {"pixel_values": x}, w, mode="device").outputs
    PassPipeline.parse_spec(dict(all_passes()), "nn-split-k" + tail).apply(Context(), mod)
    session = Session(lower_to_package(mod, target))
    session.upload_parameters(w)
    got = session.run({"pixel_values": x}).outputs
    for k in want:
        cos, rel, _ = per_embedding(got[k], want[k])
        assert cos > 0.9999 and rel < 0.01, (k, cos, rel)
    return mod


def test_split_linear_inside_the_layer_loop():
    """Tiny SigLIP with its fc2 (M = 16, inside `tile.repeat`, stacked FP8 weights) split by hand: each iteration's
    chunks must read that layer's weight slices (the device matches its device-precision reference)."""
    tiny_loop_split(lambda shape: shape[1] == 128, 32)


# -- many rows (`nn-split-k{many_rows}`, the default) --------------------------------------------------------------


def rows_split_model(m, k, n, kc, quantize="nn-quantize-weights"):
    """The linear model, quantized, split into chunks of kc as many-row linears are (f16 partials, the bias on
    the sum)."""
    mod = run_passes(linear_model(m, k, n, True), quantize)
    (lin,) = [op for op in mod.walk() if isinstance(op, nn.LinearOp)]
    NNSplitKPass.split(lin, kc, many_rows=True)
    mod.verify()
    return mod


def test_many_rows_choice_and_ir():
    from ipu.passes.nn_split_k import choose_rows_chunk, rows_grid

    # So400m's [729, 1152] x [1152, 1152] FP8 on 1472 tiles: split; G chunks x row panels x column panels fit.
    kc = choose_rows_chunk(729, 1152, 1152, 1, "f8", 1472)
    assert kc is not None and kc % 16 == 0
    g = -(-1152 // kc)
    cycles, gm, pm, pn = rows_grid(729, 1152, 1152, kc, 1, "f8", 1472)
    assert g > 1 and pm % g == 0 and g * gm * -(-1152 // pn) <= 1472 and gm * pm >= 729
    # The estimate beats the unsplit one over all of K.
    assert cycles < rows_grid(729, 1152, 1152, 1152, 1, "f8", 1472, one_chunk=False)[0]
    # Few tiles: one weight block per tile is not reachable, the split does not pay.
    assert choose_rows_chunk(729, 1152, 1152, 1, "f8", 16) is None
    mod = rows_split_model(40, 256, 32, 64)
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    (red,) = [op for op in mod.walk() if isinstance(op, nn.ReduceSumOp)]
    # f16 partials without the bias; the sum carries it (no add).
    assert len(parts.operands) == 2 and isinstance(parts.result.type.element_type, Float16Type)
    assert red.bias is not None and not any(isinstance(op, nn.AddOp) for op in mod.walk())


def test_many_rows_tile_plan_scatters_the_sum():
    opts = "{tiles=64 sram_kib=624}"
    mod = run_passes(rows_split_model(196, 256, 64, 64), f"nn-to-exchange-pipeline{opts}")
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    (red,) = [op for op in mod.walk() if isinstance(op, nn.ReduceSumOp)]
    plan = parts.attributes[tl.PLAN_ATTR]
    g, gm, gn = plan.get("grid")
    pm, kc, pn = plan.get("panel")
    assert g == 4 and kc == 64 and pm % g == 0 and g * gm * gn <= 64
    t = parts.attributes[tl.LAYOUT_ATTR].table()[:, 0].reshape(g, gm, gn)
    assert len(set(t.reshape(-1).tolist())) == g * gm * gn  # one partial block per tile
    x = tl.layout_of(parts.operands[0])
    assert x.block_[0] == pm and x.block_[1] in (kc, 256) or x.order.data.startswith("cols")
    # The sum: pm / G rows of every block on each of its G tiles; its bias's column blocks on those tiles.
    r = red.attributes[tl.LAYOUT_ATTR]
    assert r.block_ == (pm // g, pn)
    b = tl.layout_of(red.operands[1])
    assert b.block_ == (pn,) and set(b.table().reshape(-1).tolist()) == set(r.table().reshape(-1).tolist())
    # Row block `row` is piece row % G of GEMM row panel row // G: summed by one of that panel's G tiles (which
    # one: `tile_plan.piece_tiles`, off the residual stream's row tiles), each of them summing one piece.
    rt = r.table()[:, 0].reshape(-1, gn)
    for i in range(-(-rt.shape[0] // g)):
        for j in range(gn):
            pieces = rt[i * g : (i + 1) * g, j]
            assert sorted(pieces.tolist()) == sorted(t[: len(pieces), i, j].tolist()) or len(pieces) < g
            assert set(pieces.tolist()) <= set(t[:, i, j].tolist()) and len(set(pieces.tolist())) == len(
                pieces
            )


@pytest.mark.parametrize(
    "m, k, n, kc, quantize",
    [
        (196, 256, 64, 64, "nn-quantize-weights"),
        (120, 272, 32, 96, "nn-quantize-weights{activations=f16 keep_f16=w}"),
        (120, 100, 32, 32, "nn-quantize-weights{activations=f16 keep_f16=w}"),
        (120, 108, 32, 32, "nn-quantize-weights{activations=f16 keep_f16=w}"),
        (96, 200, 48, 64, "nn-quantize-weights"),
    ],
    ids=[
        "FP8 weights, 4 chunks",
        "f16 weights, ragged last chunk (80)",
        "f16 weights, K % 16 != 0 (last chunk 4, copied with zeros to 16)",
        "f16 weights, K % 16 != 0 (last chunk 12, padded to 16 by the row kernel)",
        "FP8 weights, K % 16 != 0 (last chunk 8, padded to 16)",
    ],
)
def test_many_rows_split_matches_reference(m, k, n, kc, quantize):
    opts = "{tiles=64 sram_kib=624}"
    mod = run_passes(
        rows_split_model(m, k, n, kc, quantize=quantize), f"nn-to-exchange-pipeline{opts},memory-plan{opts}"
    )
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    assert len(parts.attributes[tl.PLAN_ATTR].get("grid")) == 3
    got, want, b = run_against_reference(mod, m, k, n, kc, quantize)
    # The bias is in once: without it the result is far off.
    assert np.abs(got - want).max() < 0.1 * np.abs(b).max()


def test_many_rows_split_in_the_tiny_siglip_layer_loop():
    """The tiny SigLIP (layers as one `tile.repeat`) on 16 tiles with its first MLP linear (fc1, x from a layer
    norm, stacked FP8 weights) split by hand along K with the bias on the sum: planned on a [G, gm, gn] grid
    inside the loop body; the device matches the device-precision reference."""
    from ipu.backend.lower.lowering import pipeline_spec
    from ipu.passes.tile_plan import target_for

    spec = pipeline_spec(target_for(16, 624), True)
    assert "many_rows=false" not in spec
    assert "many_rows=false" in pipeline_spec(target_for(16, 624), True, split_rows=False)
    mod = tiny_loop_split(lambda shape: shape[0] == 128, 32, many_rows=True, seed=2)
    rows = [
        op
        for op in mod.walk()
        if isinstance(op, nn.LinearPartialsOp) and len(op.attributes[tl.PLAN_ATTR].get("grid")) == 3
    ]
    assert any(op.parent_op().name == "tile.repeat" for op in rows)
    assert any(
        op.parent_op().name == "tile.repeat" and op.bias is not None
        for op in mod.walk()
        if isinstance(op, nn.ReduceSumOp)
    )


def test_many_rows_panels_follow_the_attention_heads():
    """A linear whose result (through the sum of its partials and a cast) is an attention operand gets column
    panels that divide the head or are the head (72: 24, 36, 72), or whole 16-column blocks of a divisor's
    multiple (48 = 2 x 24, stored as two 24-wide blocks: `tile_plan.panel_store_width`), so that the attention
    gathers whole heads in a piece per block; other linears the plain 16-multiples. `x_source` tells a layer norm's rows from attention's
    72-wide head blocks."""
    from xdsl.context import Context
    from xdsl.parser import Parser

    from ipu.dialects.registry import all_dialects
    from ipu.passes.nn_split_k import ROWS_SPLIT_PANELS, rows_panels, x_source

    text = """
    func.func @f() {
      %e = nn.input "e" : tensor<729x144xf32>
      %g = nn.param "g" : tensor<144xf32>
      %x = nn.layer_norm %e, %g, %g eps=1.0e-06 : tensor<729x144xf32>, tensor<144xf32>, tensor<144xf32> -> tensor<729x144xf16>
      %w = nn.param "w" : tensor<144x144xf16>
      %q = nn.linear %x, %w : tensor<729x144xf16>, tensor<144x144xf16> -> tensor<729x144xf16>
      %a = nn.attention %q, %q, %q heads=2 scale=0.5 : tensor<729x144xf16>, tensor<729x144xf16>, tensor<729x144xf16> -> tensor<729x144xf32>
      %y = nn.linear %x, %w : tensor<729x144xf16>, tensor<144x144xf16> -> tensor<729x144xf32>
      %z = nn.linear %a, %w : tensor<729x144xf32>, tensor<144x144xf16> -> tensor<729x144xf32>
      nn.output "y" %y : tensor<729x144xf32>
      nn.output "z" %z : tensor<729x144xf32>
      func.return
    }
    """
    ctx = Context()
    for name, factory in all_dialects():
        ctx.register_dialect(name, factory)
    mod = Parser(ctx, text).parse_module()
    q, y, z = [op for op in mod.walk() if isinstance(op, nn.LinearOp)]
    assert rows_panels(q) == (24, 36, 48, 72) and rows_panels(y) == ROWS_SPLIT_PANELS
    assert x_source(q) == x_source(y) == ("rows", 0) and x_source(z) == ("heads", 72)
    NNSplitKPass.split(q, 48)
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    assert rows_panels(parts) == (24, 36, 48, 72)  # through nn.reduce_sum and the cast to f16


@pytest.mark.parametrize("p", [32, 24], ids=["32-column panels, read in place", "24-column panels, gathered"])
def test_many_rows_split_reads_x_column_panels(p):
    """The second of two linears split along K (K = 96 in chunks of 80 and 16) with its x from the first's
    p-column GEMM panels: x arrives in column panels of p (`gathered_chunk_layout`). p = 32: the GEMM reads chunk
    0's two whole panels in place (a panel jump) and its narrower last one (16 of the 80 columns) in a second
    call, chunk 1's 16 columns in one; p = 24 (not whole K blocks, like attention's 72-wide heads): the rows are
    gathered into the A scratch first. The device matches the reference."""
    from ipu.passes.tile_plan import gathered_chunk_layout

    m, k, n1, n2, kc = 192, 64, 96, 32, 80
    mod = run_passes(chain_model(m, k, n1, n2), "nn-quantize-weights")
    first, second = [op for op in mod.walk() if isinstance(op, nn.LinearOp)]
    NNSplitKPass.split(second, kc, many_rows=True)
    # The first linear on a fixed [6, 96 / p] grid of [32, 64] x [64, p] blocks: p-column panels.
    first.attributes[tl.PLAN_ATTR] = tl.GemmPlanAttr(
        tl._int_array((6, n1 // p)), tl._int_array((32, k, p)), tl.IntAttr(0), tl.StringAttr("fp8"),
        tl.StringAttr("late"), tl.StringAttr("row_major"), tl.IntAttr(0),
    )  # fmt: skip
    opts = "{tiles=64 sram_kib=624}"
    mod = run_passes(mod, f"nn-to-exchange-pipeline{opts},memory-plan{opts}")
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    assert len(parts.attributes[tl.PLAN_ATTR].get("grid")) == 3
    assert tl.layout_of(parts.operands[0]).order.data == f"cols{p}"
    assert (
        gathered_chunk_layout(None, tl.layout_of(parts.operands[0])).order.data == f"cols{p}"
    )  # no producer
    pkg = lower_to_package(mod)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = {
        "w1": (rng.standard_normal((n1, k)) * 0.2).astype(np.float32),
        "b1": rng.standard_normal(n1).astype(np.float32),
        "w2": (rng.standard_normal((n2, n1)) * 0.2).astype(np.float32),
        "b2": rng.standard_normal(n2).astype(np.float32),
    }
    session = Session(pkg)
    session.upload_parameters(w)
    got = session.run({"x": x}).outputs["y"]
    want = evaluate(
        run_passes(chain_model(m, k, n1, n2), "nn-quantize-weights"), {"x": x}, w, mode="device"
    ).outputs["y"]
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.abs(want).max() * 2.0**-11)


def split_and_planner(text: str, kc: int):
    """The linears of IR `text`, split along K in chunks of kc as many-row linears: (their nn.linear_partials, a
    function that runs tile-plan on 1472 tiles over the module)."""
    from xdsl.context import Context
    from xdsl.parser import Parser

    from ipu.dialects.registry import all_dialects
    from ipu.passes.tile_plan import TilePlanPass

    ctx = Context()
    for name, factory in all_dialects():
        ctx.register_dialect(name, factory)
    mod = Parser(ctx, text).parse_module()
    for lin in [op for op in mod.walk() if isinstance(op, nn.LinearOp)]:
        NNSplitKPass.split(lin, kc, many_rows=True)
    parts = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    return parts, lambda: TilePlanPass(tiles=1472, sram_kib=624).apply(ctx, mod)


def test_many_rows_linears_of_one_x_share_a_grid():
    """So400m's q, k and v projections (one layer norm's rows as x, f16 q / k weights, FP8 v weights) split
    along K: alone, v's estimate would take 36-column panels on its own grid (x gathered a second time into
    another A layout); `shared_rows_panels` puts all three on one grid, so their A is one layout."""
    from ipu.passes.nn_split_k import rows_grid, rows_panels, shared_rows_panels

    f8 = "f8E4M3FNUZ"
    text = f"""
    func.func @f() {{
      %e = nn.input "e" : tensor<729x1152xf32>
      %g = nn.param "g" : tensor<1152xf32>
      %x = nn.layer_norm %e, %g, %g eps=1.0e-06 : tensor<729x1152xf32>, tensor<1152xf32>, tensor<1152xf32> -> tensor<729x1152xf16>
      %wq = nn.param "wq" : tensor<1152x1152xf16>
      %wk = nn.param "wk" : tensor<1152x1152xf16>
      %wv = nn.param "wv" : tensor<1152x1152x{f8}>
      %q = nn.linear %x, %wq : tensor<729x1152xf16>, tensor<1152x1152xf16> -> tensor<729x1152xf16>
      %k = nn.linear %x, %wk : tensor<729x1152xf16>, tensor<1152x1152xf16> -> tensor<729x1152xf16>
      %v = nn.linear %x, %wv : tensor<729x1152xf16>, tensor<1152x1152x{f8}> -> tensor<729x1152xf16>
      %a = nn.attention %q, %k, %v heads=16 scale=0.5 : tensor<729x1152xf16>, tensor<729x1152xf16>, tensor<729x1152xf16> -> tensor<729x1152xf32>
      nn.output "a" %a : tensor<729x1152xf32>
      func.return
    }}
    """
    parts, plan = split_and_planner(text, 192)
    # Among the head's divisors and the head, the FP8 weights alone would pick another width than the f16 ones.
    divisors = (24, 36, 72)
    alone = rows_grid(729, 1152, 1152, 192, 1, "f8", 1472, panels=divisors)[3]
    f16_alone = rows_grid(729, 1152, 1152, 192, 2, "f16", 1472, panels=divisors)[3]
    assert alone != f16_alone
    # One width for all three, chosen from every width the split may take (48-wide panels in two head blocks too).
    (shared,) = shared_rows_panels(parts[2], 1472, rows_panels(parts[2]))
    assert shared in rows_panels(parts[2])
    plan()
    grids = {(tuple(op.attributes[tl.PLAN_ATTR].get("grid")), tuple(op.attributes[tl.PLAN_ATTR].get("panel")))
             for op in parts}  # fmt: skip
    assert len(grids) == 1 and next(iter(grids))[1][2] == shared
    # One A layout: every linear reads x in the same layout (one tile.relayout of it).
    assert len({str(tl.layout_of(op.input)) for op in parts}) == 1


def test_many_rows_splits_of_one_x_with_more_panels_share_its_layout():
    """So400m's two fc1 parts (2160 and 2144 columns of one layer norm's rows, chunks of 384): grids [3, 7, 68]
    and [3, 7, 67]. Their tiles are numbered panel-major, so panel j's tiles are the same in both, and x's blocks
    are replicated over 68 panels for both (`x_replicas`): one x layout, gathered once."""
    f8 = "f8E4M3FNUZ"
    text = f"""
    func.func @f() {{
      %e = nn.input "e" : tensor<729x1152xf32>
      %g = nn.param "g" : tensor<1152xf32>
      %x = nn.layer_norm %e, %g, %g eps=1.0e-06 : tensor<729x1152xf32>, tensor<1152xf32>, tensor<1152xf32> -> tensor<729x1152xf16>
      %w1 = nn.param "w1" : tensor<2160x1152x{f8}>
      %w2 = nn.param "w2" : tensor<2144x1152x{f8}>
      %a = nn.linear %x, %w1 : tensor<729x1152xf16>, tensor<2160x1152x{f8}> -> tensor<729x2160xf32>
      %b = nn.linear %x, %w2 : tensor<729x1152xf16>, tensor<2144x1152x{f8}> -> tensor<729x2144xf32>
      nn.output "a" %a : tensor<729x2160xf32>
      nn.output "b" %b : tensor<729x2144xf32>
      func.return
    }}
    """
    (a, b), plan = split_and_planner(text, 384)
    plan()
    ga, gb = (tuple(op.attributes[tl.PLAN_ATTR].get("grid")) for op in (a, b))
    assert ga == (3, 7, 68) and gb == (3, 7, 67)
    ta, tb = (op.attributes[tl.LAYOUT_ATTR].table()[:, 0].reshape(op.attributes[tl.PLAN_ATTR].get("grid"))
              for op in (a, b))  # fmt: skip
    assert (ta[:, :, :67] == tb).all()  # panel j on the same tiles
    xa, xb = tl.layout_of(a.input), tl.layout_of(b.input)
    assert xa == xb and xa.replicas.data == 68 and a.input is b.input  # one relayout of x


def test_many_rows_split_of_host_made_x_with_ragged_k():
    """x made by the host from an input (the patch embedding's patches: K = 588, not whole 16-blocks) is a
    many-row split's "host" source (`x_source`): nn-split-k splits it even with K % 16 != 0 (the lowering pads the
    last chunk's x and weight rows with zeros); a layer norm's rows with such a K are left alone."""
    from ipu.passes.nn_split_k import x_source

    mod = run_passes(linear_model(729, 588, 1152, True), "nn-quantize-weights{activations=f16 keep_f16=w}")
    (lin,) = [op for op in mod.walk() if isinstance(op, nn.LinearOp)]
    assert x_source(lin) == ("host", 0)
    NNSplitKPass(tiles=1472).apply(None, mod)
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    assert parts.chunk % 16 == 0 and 588 % parts.chunk != 0
    mod = run_passes(linear_model(729, 588, 1152, True), "nn-quantize-weights{activations=f16 keep_f16=w}")
    (lin,) = [op for op in mod.walk() if isinstance(op, nn.LinearOp)]
    assert x_source(lin, 16) == ("host", 0)
    NNSplitKPass(tiles=16).apply(None, mod)  # 16 tiles: the split does not pay
    assert not [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]


@pytest.mark.parametrize("pn", [24, 4])
def test_many_rows_split_with_padded_panels(monkeypatch, pn):
    """Column panels narrower than the kernel's 16-column blocks' multiple (So400m's 24 of a 72-wide head): C's
    rows are strided past the N padding; 24 columns go through the strided row kernel in one call, 4 (under its
    two atoms) row by row. Both match the device-precision reference."""
    from ipu.backend.lower.lowering import lower_to_package
    from ipu.passes import nn_split_k

    monkeypatch.setattr(nn_split_k, "ROWS_SPLIT_PANELS", (pn,))
    opts = "{tiles=64 sram_kib=624}"
    mod = run_passes(rows_split_model(256, 128, 48, 64), f"nn-to-exchange-pipeline{opts},memory-plan{opts}")
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    assert parts.attributes[tl.PLAN_ATTR].get("panel")[2] == pn
    whats = {s["what"] for s in lower_to_package(mod).metadata["profile_sites"]}
    strided = any(w.endswith("result rows (strided)") for w in whats)
    narrow = any(w.endswith("result rows (narrow)") for w in whats)
    assert (strided, narrow) == ((True, False) if pn == 24 else (False, True))
    run_against_reference(mod, 256, 128, 48, 64, "nn-quantize-weights")


def test_matmul_partials_sum_to_the_matmul():
    """nn.matmul_partials per 16-deep K block (the last shorter), summed: the matmul, in float64."""
    from xdsl.dialects.builtin import TensorType

    from ipu.frontend.reference import evaluate_op

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((5, 37)), rng.standard_normal((37, 8))
    from xdsl.dialects.builtin import Float32Type

    from ipu.dialects.nn import InputOp

    lhs, rhs = (
        InputOp("a", TensorType(Float32Type(), (5, 37))),
        InputOp("b", TensorType(Float32Type(), (37, 8))),
    )
    op = nn.MatmulPartialsOp(lhs.result, rhs.result, 16, TensorType(Float32Type(), (3, 5, 8)))
    op.verify()
    parts = evaluate_op(op, a, b, mode="fp64")
    assert parts.shape == (3, 5, 8)
    np.testing.assert_allclose(parts[2], a[:, 32:] @ b[32:], rtol=1e-12)
    np.testing.assert_allclose(parts.sum(0), a @ b, rtol=1e-12)


def test_map_head_scores_and_px_share_x_blocks():
    """Width 128 (the scores U X^T: [2, 128] x [256, 128]^T split in chunks of 64): cell (panel c, chunk j) of the
    [2 chunks, 8 panels] grid receives X's [32, 64] block (32 tokens, chunk j's columns) once; P X's chunk c (32 tokens)
    over column group j is the same block on the same cell (no X gather of its own); the scores' sum in one-row
    blocks; the device matches the device-precision reference."""
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.backend.lower import compile_model
    from ipu.backend.lower.lowering import pipeline_spec
    from ipu.backend.target import Target
    from ipu.frontend.reference import evaluate
    from ipu.frontend.siglip import PRESETS, SiglipVisionConfig, build_vision_model
    from ipu.frontend.weights import random_weights
    from ipu.passes.nn_quantize import DEFAULT_SPEC
    from ipu.passes.registry import all_passes
    from ipu.runtime.host import Session

    cfg = SiglipVisionConfig(
        **{**PRESETS["siglip-tiny"].to_dict(), "image_size": 128, "num_hidden_layers": 1, "hidden_size": 128}
    )
    target = Target.small(tiles=64, sram_kib=624)
    mod = build_vision_model(cfg)
    PassPipeline.parse_spec(dict(all_passes()), pipeline_spec(target, False)).apply(Context(), mod)
    scores = next(
        op
        for op in mod.walk()
        if isinstance(op, nn.LinearPartialsOp) and tuple(op.weight.type.get_shape()) == (256, 128)
    )
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.MatmulPartialsOp)]
    assert scores.chunk == 64 and tl.layout_of(scores.weight).block_ == (32, 64)  # 32 tokens x one chunk
    assert parts.rhs is scores.weight
    sp, pp = scores.attributes[tl.PLAN_ATTR], parts.attributes[tl.PLAN_ATTR]
    assert (
        tuple(sp.get("grid")) == (2, 8)
        and tuple(pp.get("grid")) == (8, 2)
        and pp.get("base") == sp.get("base")
    )
    total = next(
        op for op in mod.walk() if isinstance(op, nn.ReduceSumOp) and op.result.name_hint == "probe_scores_t"
    )
    assert tl.layout_of(total.results[0]).block_ == (1, 32)
    pkg = compile_model(cfg, target, repeat=False, activations="f16")  # the reference below: f16 activations
    w = random_weights(cfg, seed=0)
    x = np.random.default_rng(1).standard_normal((1, 3, 128, 128)).astype(np.float32)
    session = Session(pkg)
    session.upload_parameters(w)
    out = session.run({"pixel_values": x}).outputs
    dev = build_vision_model(cfg)
    PassPipeline.parse_spec(dict(all_passes()), f"nn-fold-probe-attention,{DEFAULT_SPEC}").apply(
        Context(), dev
    )
    want = evaluate(dev, {"pixel_values": x}, {k: np.asarray(w[k]) for k in w.keys()}, mode="device").outputs
    for k in ("last_hidden_state", "pooler_output"):
        assert np.linalg.norm(out[k] - want[k]) / np.linalg.norm(want[k]) < 0.005, k


def test_matmul_partials_on_their_own_grid():
    """A few-row matmul whose rhs no GEMM reads (no grid to mirror): chunks x column groups from tile 0, the
    ragged last chunk (300 = 18 x 16 + 12) padded with zero rows; the device matches the reference."""
    from xdsl.context import Context
    from xdsl.parser import Parser

    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target
    from ipu.dialects.registry import all_dialects
    from ipu.runtime.host import Session

    text = """
    func.func @px() {
      %p = nn.input "p" : tensor<16x300xf32>
      %x = nn.input "x" : tensor<300x64xf16>
      %z = nn.matmul %p, %x : tensor<16x300xf32>, tensor<300x64xf16> -> tensor<16x64xf32>
      nn.output "z" %z : tensor<16x64xf32>
      func.return
    }
    """
    ctx = Context()
    for name, factory in all_dialects():
        ctx.register_dialect(name, factory)
    pkg = compile_model(Parser(ctx, text).parse_module(), Target.small(tiles=64, sram_kib=624), repeat=False)
    assert any("nn.matmul_partials" in s["what"] for s in pkg.metadata["profile_sites"])
    rng = np.random.default_rng(5)
    p = rng.random((16, 300)).astype(np.float32) / 30
    x = rng.standard_normal((300, 64)).astype(np.float16)
    session = Session(pkg)
    got = session.run({"p": p, "x": x}).outputs["z"]
    want = p.astype(np.float16).astype(np.float64) @ x.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-3 * np.abs(want).max())


def test_chunked_x_with_fp8_weights_matches_reference():
    """Two rows through two few-row splits: the second linear's x is the first split's sum plus bias, so it
    arrives in K chunks (`tile_plan.chunked_x`), and its weights are FP8: each tile's two x rows are this chunk's
    [2, 64] block (rows 64 apart, not K = 256) copied into the GEMM's A; the device matches the reference."""
    from ipu.dialects import tile as tl

    m, k, h, n = 2, 64, 256, 32
    mod = run_passes(chain_model(m, k, h, n), "nn-quantize-weights")
    first, second = [op for op in mod.walk() if isinstance(op, nn.LinearOp)]
    NNSplitKPass.split(first, 32)
    NNSplitKPass.split(second, 64)
    opts = "{tiles=64 sram_kib=624}"
    run_passes(mod, f"nn-to-exchange-pipeline{opts},memory-plan{opts}")
    parts = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)][1]
    assert tl.layout_of(parts.operands[0]).block_ == (m, 64)
    assert tl.dtype_name(tl.layout_of(parts.operands[1]).dtype).startswith("f8")
    rng = np.random.default_rng(5)
    params = {
        "w1": (rng.standard_normal((h, k)) * 0.2).astype(np.float32),
        "b1": rng.standard_normal(h).astype(np.float32),
        "w2": (rng.standard_normal((n, h)) * 0.1).astype(np.float32),
        "b2": rng.standard_normal(n).astype(np.float32),
    }
    x = rng.standard_normal((m, k)).astype(np.float32)
    session = Session(lower_to_package(mod))
    session.upload_parameters(params)
    got = session.run({"x": x}).outputs["y"]
    ref = run_passes(chain_model(m, k, h, n), "nn-quantize-weights")
    want = evaluate(ref, {"x": x}, params, mode="device").outputs["y"]
    tol = 4 * np.abs(want).max() * 2.0**-11 * 2
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


def test_gathered_x_blocks_fit_the_a_scratch(monkeypatch):
    """x gathered row by row into the A scratch (attention's 72-wide head blocks, a producer's panels that are not
    whole K blocks): `rows_grid` keeps pm x kc within one scratch element whatever the costs favour. With cheap
    exchange rounds the cheapest out_proj-shaped grid ([729, 1152] x [1152, 1152] in chunks of 144, FP8 weights)
    has 152-row blocks, 43.8 KB of f16 x: the lowering could not gather them (it did, once the rounds' cost was
    lowered)."""
    from ipu.passes import nn_split_k
    from ipu.passes.nn_split_k import rows_grid

    monkeypatch.setattr(nn_split_k, "ROUND_CYCLES", 40)
    free = rows_grid(729, 1152, 1152, 144, 1, "f8", 1472, panels=(32, 64))
    bound = rows_grid(729, 1152, 1152, 144, 1, "f8", 1472, panels=(32, 64), a_gathered=True)
    assert free[2] * 144 * 2 > 32768  # the unconstrained choice would not fit
    assert bound is not None and bound[2] * 144 * 2 <= 32768


def test_tile_plan_costs_x_from_its_producer_through_the_relayouts():
    """In tile-plan a split's x is a relayout of its producer's result: `x_source` sees through it (and through the
    GELU and the cast) to the producer's planned column panels, so tile-plan's grid (`rows_plan_grid`) costs x's
    gather as nn-split-k did when it chose the chunk (So400m's fc2: 64-column panels, x gathered from fc1's
    32-column blocks, instead of 32-column panels costed as if x were a layer norm's rows)."""
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.frontend.siglip import SiglipVisionConfig, build_vision_model
    from ipu.passes.compile_pipeline import IpuCompilePipelinePass
    from ipu.passes.nn_split_k import rows_plan_grid, x_source
    from ipu.passes.registry import all_passes

    cfg = SiglipVisionConfig(hidden_size=288, intermediate_size=576, num_attention_heads=4, num_hidden_layers=1,
                             image_size=112, patch_size=14)  # fmt: skip
    m = build_vision_model(cfg)
    text = IpuCompilePipelinePass(tiles=128, sram_kib=624).resolved(m).pipeline_text()
    nn_passes = text[: text.index("nn-to-exchange-pipeline")].rstrip(",")
    PassPipeline.parse_spec(dict(all_passes()), nn_passes).apply(Context(), m)
    many = [o for o in m.walk() if isinstance(o, nn.LinearPartialsOp) and o.input.type.get_shape()[0] > 8]
    before = [x_source(o, 128) for o in many]
    assert ("rows", 0) in before and any(s is not None and s[0] == "panels" for s in before), before
    PassPipeline.parse_spec(dict(all_passes()), "tile-plan{tiles=128 sram_kib=624}").apply(Context(), m)
    for o, want in zip(many, before):
        assert isinstance(o.input.owner, tl.RelayoutOp)
        got = x_source(o, 128)
        if want is not None and want[0] == "panels":  # the producer's recorded panel width
            want = ("panels", x_source_panel(o))
        assert got == want, (o.weight.type, got, want)
        plan = o.attributes[tl.PLAN_ATTR]
        if len(plan.get("grid")) == 3:
            _, gm, pm, pn = rows_plan_grid(o, 128)
            assert (plan.get("grid")[1], plan.get("panel")[0], plan.get("panel")[2]) == (gm, pm, pn)


def x_source_panel(parts: nn.LinearPartialsOp) -> int:
    """The planned panel width of the many-row split whose sum (through casts, a GELU, relayouts) is parts' x."""
    v = parts.input
    while not isinstance(v.owner, nn.ReduceSumOp):
        v = v.owner.operands[0]
    p = v.owner.input.owner
    while isinstance(p, tl.RelayoutOp):
        p = p.operands[0].owner
    return p.attributes[tl.PLAN_ATTR].get("panel")[2]


def test_rows_plan_grid_reads_a_two_head_merge_in_place():
    """tile-plan's estimate of a many-row split reading an attention merge (x_source "heads", d = 72): gathered
    rows from column panels of one head (the A scratch bound, 72-wide pieces) while the merge's blocks are one
    head wide; read in place, as column panels of its block width, once the merge writes blocks of the heads a
    chunk spans (`tile_plan.merge_block_heads`: [4, 144] for chunks of 144)."""
    from xdsl.context import Context
    from xdsl.parser import Parser

    from ipu.dialects.registry import all_dialects
    from ipu.passes.nn_split_k import ROWS_SPLIT_PANELS, rows_grid, rows_plan_grid, x_source

    def reader(rows: int, width: int):
        text = f"""
        func.func @f() {{
          %q = nn.input "q" : tensor<729x1152xf16>
          %w = nn.param "w" : tensor<1152x1152xf16>
          %p = nn.attention_partial %q, %q, %q heads=16 scale=0.1 chunks=4 : tensor<729x1152xf16>, tensor<729x1152xf16>, tensor<729x1152xf16> -> tensor<4x729x1184xf32>
          %m = nn.attention_merge %p heads=16 : tensor<4x729x1184xf32> -> tensor<729x1152xf32>
          %c = nn.cast %m {{tile.layout = #tile.layout<shape = [729, 1152], block = [{rows}, {width}], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f16>}} : tensor<729x1152xf32> -> tensor<729x1152xf16>
          %y = nn.linear_partials %c, %w k_chunk=144 : tensor<729x1152xf16>, tensor<1152x1152xf16> -> tensor<8x729x1152xf16>
          func.return
        }}
        """
        ctx = Context()
        for name, factory in all_dialects():
            ctx.register_dialect(name, factory)
        return next(o for o in Parser(ctx, text).parse_module().walk() if isinstance(o, nn.LinearPartialsOp))

    one, two = reader(8, 72), reader(4, 144)  # 92 x 16 and 183 x 8 blocks, a tile each
    assert x_source(one) == x_source(two) == ("heads", 72)
    common = (729, 1152, 1152, 144, 2, "f16", 1472)
    assert rows_plan_grid(one, 1472) == rows_grid(
        *common, panels=ROWS_SPLIT_PANELS, source="heads", width=72, a_gathered=True
    )
    assert rows_plan_grid(two, 1472) == rows_grid(
        *common, panels=ROWS_SPLIT_PANELS, source="panels", width=144
    )
    assert rows_plan_grid(two, 1472) != rows_plan_grid(one, 1472)
