"""GEMM weights resident as the AMP panels their kernel reads (`ampw`, issue 22 item 1): the storage order
(`tile.ampw_positions`), the host's two-level binding runs that permute the weights at upload, the exchange of
`ampw` blocks, tile-plan's choice (`worder`, `tile_plan.ampw_fits`) and the FP8-activation K split reading its
weight blocks in place: outputs bit-identical to row-major weights prepared on the device, without the
per-inference weight-panel preparation."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import Float8E4M3FNUZType, f16, f32

from ipu.backend.kernels.gemm import pack_weights
from ipu.backend.lower import lower_to_package
from ipu.backend.lower.bindings import layout_chunks
from ipu.backend.lower.lowering import LoweringError
from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.passes.tile_plan import ampw_x_fits, home_of
from ipu.runtime.host import Session
from ipu.runtime.package import Binding

sys.path.insert(0, str(Path(__file__).parent))
from test_exchange_schedule import move, random_layout  # noqa: E402
from test_fp8_activations import fp8_split_model  # noqa: E402
from test_lower_linear import data, run_passes  # noqa: E402

F8 = Float8E4M3FNUZType()


def _positions(rows, cols, kb):
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return tl.ampw_positions(i, j, rows, cols, kb)


@pytest.mark.parametrize("seed", range(40))
def test_ampw_positions_permute_each_block(seed):
    rng = np.random.default_rng(seed)
    rows, cols, kb = int(rng.integers(1, 70)), int(rng.integers(1, 100)), int(rng.choice([8, 16, 32]))
    pos = _positions(rows, cols, kb)
    assert sorted(pos.reshape(-1).tolist()) == list(range(rows * cols))
    rf, kf = rows // 16 * 16, cols // kb * kb
    # Region A is row panel by row panel, K block by K block; B follows it, C (the K tail) comes last.
    if rf and kf:
        assert pos[:rf, :kf].max() == rf * kf - 1
    if kf < cols:
        assert pos[:, kf:].min() == rows * kf
        np.testing.assert_array_equal(
            pos[:, kf:], rows * kf + np.arange(rows * (cols - kf)).reshape(rows, -1)
        )


@pytest.mark.parametrize("prec, kb, n, k", [("fp8", 32, 48, 96), ("fp8", 32, 16, 32), ("f16", 16, 32, 80)])
def test_ampw_of_whole_panels_is_the_kernels_weight_order(prec, kb, n, k):
    """A block of whole 16-row panels and K blocks: its `ampw` storage is `gemm.pack_weights` of B = block^T."""
    rng = np.random.default_rng(n + k)
    bt = rng.integers(0, 256, (n, k), dtype=np.uint8) if prec == "fp8" else rng.standard_normal((n, k))
    bt = bt.astype(np.uint8 if prec == "fp8" else np.float16)
    stored = np.empty(n * k, bt.dtype)
    stored[_positions(n, k, kb).reshape(-1)] = bt.reshape(-1)
    np.testing.assert_array_equal(stored.view(np.uint8), pack_weights(bt.T, prec))


def _device_places(shape, chunks, esize):
    """(host flat index, tile, byte address) of every element a chunk table writes (element_index order)."""
    b = Binding("v", shape, {4: "f32", 2: "f16", 1: "f8e4m3fnuz"}[esize], chunks)
    flat = b.element_index()
    c = b.chunks
    within = np.arange(len(flat)) - np.repeat(np.cumsum(c[:, 3]) - c[:, 3], c[:, 3])
    return flat, np.repeat(c[:, 0], c[:, 3]), np.repeat(c[:, 1], c[:, 3]) + within * esize


@pytest.mark.parametrize("seed", range(40))
def test_binding_runs_place_elements_by_the_storage_order(seed):
    """The chunk tables of `ampw` layouts (two-level host runs) write every element where
    `tl.storage_positions` puts it, on every replica and layer; so do those of the other orders."""
    rng = np.random.default_rng(seed)
    tiles = int(rng.integers(1, 7))
    shape = (int(rng.integers(1, 60)), int(rng.integers(1, 90)))
    order = "ampw" if seed % 4 else str(rng.choice(["row_major", "amp16", f"cols{int(rng.integers(1, 9))}"]))
    dtype = (F8, f16, f32)[seed % 3]
    lay = random_layout(rng, shape, tiles, dtype, order)
    layers = int(rng.integers(0, 3))
    if layers > 1:
        lay = lay.stacked(layers)
    esize = tl.element_bytes(dtype)
    addr = rng.integers(0, 1 << 14, tiles) * 16
    stride = rng.integers(1, 1 << 10, tiles) * 16
    chunks = layout_chunks(lay, addr, stride)
    flat, t_of, a_of = _device_places((max(1, layers), *shape), chunks, esize)
    # What the storage order says: element e of block b on replica r at addr + offset + position.
    one = lay.unstacked() if lay.stack.data else lay
    g = one.geometry()
    table = one.table()
    size = int(np.prod(shape))
    want = {}
    for b in range(one.num_blocks):
        o, d = g.block_origin[b], g.block_dims[b]
        ii, jj = np.meshgrid(np.arange(d[0]), np.arange(d[1]), indexing="ij")
        within = np.stack([ii.reshape(-1), jj.reshape(-1)], 1)
        pos = tl.storage_positions(one, within, np.broadcast_to(d, within.shape))
        e = (o[0] + within[:, 0]) * shape[1] + o[1] + within[:, 1]
        for r in range(table.shape[1]):
            t = int(table[b, r])
            for layer in range(max(1, layers)):
                base = (
                    int(addr[t]) + int(g.offset[b, r]) * esize + (layer * int(stride[t]) if layers > 1 else 0)
                )
                for fe, p in zip((e + layer * size).tolist(), pos.tolist()):
                    want[(t, base + p * esize)] = fe
    got = dict(zip(zip(t_of.tolist(), a_of.tolist()), flat.tolist()))
    assert got == want
    if order == "ampw":  # one run per K block of a row panel: far fewer chunks than elements
        assert len(chunks) * min(shape[1], 32 // esize) <= len(flat) + len(chunks) * 32


def test_binding_json_keeps_one_level_tables_as_five_columns():
    """Packages without two-level runs keep their chunk tables byte-identical (five columns)."""
    one = Binding("w", (4, 8), "f16", [[0, 0x80000, 0, 8, 1], [0, 0x80010, 8, 8, 1]])
    arrays: dict = {}
    d = one.to_json(arrays, "parameters")
    assert arrays[d["chunks"]].shape == (2, 5)
    np.testing.assert_array_equal(Binding.from_json(d, arrays.__getitem__).element_index(), np.arange(16))
    two = Binding("w", (4, 8), "f16", [[0, 0x80000, 0, 8, 1, 2, 8], [0, 0x80010, 2, 24, 1, 6, 8]])
    arrays = {}
    d = two.to_json(arrays, "parameters")
    assert arrays[d["chunks"]].shape == (2, 7)
    back = Binding.from_json(d, arrays.__getitem__)
    want = (
        [0, 1, 8, 9, 16, 17, 24, 25] + [2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15] + [18, 19, 20, 21, 22, 23]
    )
    want += [26, 27, 28, 29, 30, 31]
    np.testing.assert_array_equal(back.element_index(), want)


@pytest.mark.parametrize("seed", range(30))
def test_ampw_relayout_delivers(seed):
    """exchange-lower's transfers between `ampw` and other orders deliver the tensor in the destination's storage
    (as `tile_interp` encodes it), and equal the element sort's tables."""
    from ipu.passes.exchange_lower import _relayout_transfers_sorted, relayout_transfers
    from ipu.runtime.tile_interp import decode, encode

    rng = np.random.default_rng(500 + seed)
    num_tiles = int(rng.integers(2, 10))
    shape = (int(rng.integers(1, 50)), int(rng.integers(1, 70)))
    dtype = (F8, f16, f32)[seed % 3]
    orders = ["ampw", str(rng.choice(["row_major", "ampw", "amp16", "cols8"]))]
    rng.shuffle(orders)
    src = random_layout(rng, shape, num_tiles, dtype, orders[0])
    dst = random_layout(rng, shape, num_tiles, dtype, orders[1])
    sends, recvs, copies = relayout_transfers(src, dst)
    for got, want in zip((sends, recvs, copies), _relayout_transfers_sorted(src, dst, 0)):
        np.testing.assert_array_equal(got, want)
    value = rng.standard_normal(shape).astype(np.float32)
    moved = move(sends, recvs, copies, encode(src, value), dst)
    expected = encode(dst, value)
    for t, buf in expected.shards.items():
        np.testing.assert_array_equal(moved.shards[t].view(np.uint8), buf.view(np.uint8))
    np.testing.assert_array_equal(decode(moved), decode(expected))


@pytest.mark.parametrize(
    "rows, kc, replicas", [(32, 288, 10), (32, 384, 7), (64, 96, 5), (48, 64, 3), (36, 192, 7)]
)
def test_ampw_homes_are_whole_panels(rows, kc, replicas):
    """The home of an `ampw` operand: pieces of whole 16-row panels (or whole blocks) by whole K blocks, so that
    each piece is one contiguous range of its block (two with a K tail), no larger than row-major pieces."""
    from ipu.passes.exchange_lower import relayout_transfers

    k = 3 * kc - 16  # the last chunk with a K tail
    table = np.arange(12 * replicas, dtype=np.int32).reshape(12, replicas)
    lay = tl.LayoutAttr((4 * rows, k), (rows, kc), table, F8, "ampw")
    home = home_of(lay, 0, 1472)
    p, c = home.block_
    assert (p % 16 == 0 and rows % p == 0) or p == rows
    assert c % 32 == 0 and kc % c == 0
    # No coarser than the row-major home's pieces (27 stacked layers of them must balance over the tiles).
    row_major = home_of(tl.LayoutAttr((4 * rows, k), (rows, kc), table, F8), 0, 1472)
    if rows % 16 == 0:  # (blocks of ragged panels: whole blocks)
        assert p * c <= max(row_major.block_[0] * kc, 16 * 32)
    # Each piece reaches each replica of its block as one contiguous transfer (two with the K tail).
    sends, recvs, _ = relayout_transfers(home, lay)
    assert len(sends) <= home.num_blocks + (-(-4 * rows // p))


def test_ampw_x_fits():
    assert ampw_x_fits(1152, 288, None, 32)  # row-major x
    assert ampw_x_fits(1152, 288, 72, 32)  # heads of 72: gathered into the A scratch, one part
    assert ampw_x_fits(2160, 288, 32, 32)  # narrower last panel of 16: the K tail
    assert not ampw_x_fits(224, 128, 64, 32)  # last chunk 128..224: a panel of 32 after one of 64


CASES = [
    # m, k, n, kc, weights, activations, seed
    (196, 256, 64, 64, "nn-quantize-weights", "nn-quantize-activations", 0),
    (96, 304, 48, 96, "nn-quantize-weights", "nn-quantize-activations", 1),
    (120, 264, 32, 64, "nn-quantize-weights", "nn-quantize-activations{scale=-2}", 2),
    (
        64,
        416,
        96,
        128,
        "nn-quantize-weights{format=f152 scale=-6}",
        "nn-quantize-activations{format=f152 scale=-3}",
        3,
    ),
    (150, 512, 128, 256, "nn-quantize-weights", "nn-quantize-activations", 4),
    (120, 200, 32, 64, "nn-quantize-weights", "nn-quantize-activations", 5),
    (108, 432, 64, 192, "nn-quantize-weights", "nn-quantize-activations", 6),
]


def _package(m, k, n, kc, quantize, activations, order, tiles=64):
    mod = fp8_split_model(m, k, n, kc, quantize, activations)
    opts = f"{{tiles={tiles} sram_kib=624}}"
    run_passes(
        mod, f"nn-to-exchange-pipeline{{tiles={tiles} sram_kib=624 weights_order={order}}},memory-plan{opts}"
    )
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    return mod, parts, lower_to_package(mod)


@pytest.mark.parametrize("m, k, n, kc, quantize, activations, seed", CASES)
def test_fp8_split_with_ampw_weights_is_bit_identical(m, k, n, kc, quantize, activations, seed):
    """The FP8-activation K split with its weights as AMP panels (tile-plan's "auto" choice) gives the same bits
    as with row-major weights prepared on the device, in fewer or as many cycles; tiles whose blocks are whole
    panels prepare nothing (only a ragged last chunk's K tail is padded and made into panels)."""
    x, w, b = data(m, k, n, seed)
    runs = {}
    for order in ("row_major", "auto"):
        _mod, parts, pkg = _package(m, k, n, kc, quantize, activations, order)
        plan = parts.attributes[tl.PLAN_ATTR]
        pn = plan.get("panel")[2]
        if order == "auto":
            whole = pn % 16 == 0 and n % pn % 16 == 0 and not 0 < k % kc < 32  # (not a last chunk all K tail)
            assert plan.get("worder") == ("ampw" if whole else "row_major")
            assert tl.layout_of(parts.weight).order.data == plan.get("worder")
        session = Session(pkg)
        session.upload_parameters({"w": w, "b": b})
        r = session.run({"x": x})
        sites = [s["what"] for s in pkg.metadata["profile_sites"]]
        runs[order] = (r.outputs["y"], r.cycles, sites, plan.get("worder"))
    (y0, c0, _, _), (y1, c1, s1, wo) = runs["row_major"], runs["auto"]
    np.testing.assert_array_equal(y1, y0)
    if wo != "ampw":
        assert c1 == c0
    elif k % kc % 32 == 0:  # no ragged K tail: nothing prepared on the device
        assert not [s for s in s1 if "weight" in s] and c1 < c0
    else:
        # Only the last chunk's tiles pad and pack their K tail, as before.
        assert all("zero K padding" in s or "FP8 weight panels" in s for s in s1 if "weight" in s)
        assert c1 < c0


def test_ampw_with_ragged_panels_is_refused():
    """worder = "ampw" forced on a split whose column panels are not whole 16-row panels: the lowering names it."""
    mod = fp8_split_model(128, 256, 40, 128, "nn-quantize-weights", "nn-quantize-activations")
    opts = "{tiles=64 sram_kib=624}"
    run_passes(mod, f"nn-to-exchange-pipeline{{tiles=64 sram_kib=624 weights_order=ampw}},memory-plan{opts}")
    with pytest.raises(LoweringError, match="whole 16-row panels"):
        lower_to_package(mod)


F16_WEIGHTS = "nn-quantize-weights{activations=f16 keep_f16=w}"


@pytest.mark.parametrize(
    "m, k, n, kc, seed",
    [
        (1, 256, 64, 64, 0),
        (2, 272, 32, 96, 1),
        (3, 512, 48, 128, 2),
        (1, 2160, 32, 144, 3),
        (4, 96, 80, 32, 4),
    ],
)
def test_few_row_f16_split_reads_ampw_weights_in_place(m, k, n, kc, seed):
    """A few-row K split with f16 weights (the MAP head's kind): with `ampw` weights (tile-plan's choice for
    whole 16-row panels) its F16 GEMMs read the weight blocks in place, same bits as the panels made on the
    device from row-major blocks."""
    from test_split_k import split_model

    x, w, b = data(m, k, n, seed)
    runs = {}
    for order in ("row_major", "auto"):
        mod = split_model(m, k, n, kc, quantize=F16_WEIGHTS)
        opts = "{tiles=64 sram_kib=624}"
        # (lowering-storage first, as in the compile pipeline: it reserves the scratch elements at the top of
        # region 1, where memory-plan then also places the resident `ampw` weight the GEMMs read in place)
        run_passes(
            mod,
            f"nn-to-exchange-pipeline{{tiles=64 sram_kib=624 weights_order={order}}},lowering-storage{opts},"
            f"memory-plan{opts}",
        )
        (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
        plan = parts.attributes[tl.PLAN_ATTR]
        pkg = lower_to_package(mod)
        session = Session(pkg)
        session.upload_parameters({"w": w, "b": b})
        r = session.run({"x": x})
        sites = [s["what"] for s in pkg.metadata["profile_sites"] if "weight panels" in s["what"]]
        runs[order] = (r.outputs["y"], r.cycles, sites, plan.get("worder"), plan.get("panel")[2])
    (y0, c0, _, _, _), (y1, c1, s1, wo, pn) = runs["row_major"], runs["auto"]
    np.testing.assert_array_equal(y1, y0)
    assert wo == ("ampw" if pn % 16 == 0 and n % pn % 16 == 0 else "row_major")
    if wo == "ampw":
        assert not s1 and c1 < c0
    else:
        assert c1 == c0


@pytest.mark.parametrize("tiles, activations", [(16, "f16"), (16, "fp8"), (24, "f16")])
def test_tiny_siglip_outputs_identical_with_ampw_weights(tiles, activations):
    """The tiny SigLIP (two layers as one loop): its f16-weight GEMMs (q / k, the MAP head's) read `ampw` weights
    in place; the outputs are the same bits as with every weight row-major, in as many or fewer cycles."""
    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target
    from ipu.frontend.siglip import PRESETS
    from ipu.frontend.weights import random_weights

    cfg = PRESETS["siglip-tiny"]
    weights = random_weights(cfg, seed=tiles)
    x = np.random.default_rng(tiles).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    runs = {}
    for order in ("row_major", "auto"):
        pkg = compile_model(
            cfg, Target.small(tiles=tiles, sram_kib=624), activations=activations, weights_order=order
        )
        session = Session(pkg)
        session.upload_parameters(weights)
        runs[order] = session.run({"pixel_values": x})
        if order == "auto":
            assert any(
                b.chunks[:, 5].min() < b.chunks[:, 3].max() for b in pkg.parameters
            )  # permuted at upload
    for name, value in runs["row_major"].outputs.items():
        np.testing.assert_array_equal(runs["auto"].outputs[name], value)
    # Fewer cycles where an in-place GEMM is on the critical path (16 tiles: q / k in the loop), never more.
    assert runs["auto"].cycles <= runs["row_major"].cycles
    assert tiles != 16 or runs["auto"].cycles < runs["row_major"].cycles
