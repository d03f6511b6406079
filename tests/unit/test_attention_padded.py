"""Materialized attention at sizes that are not multiples of 16 (So400m: 729 tokens, head size 72): a SigLIP with
81 tokens (9 x 9 patches of 4 pixels), head size 24, 2 layers and the MAP head (1 query over 81 keys) compiled for
16 tiles and run on the simulator. Every padding path of the lowering runs: Q's and K's inner dimension (24 -> 32),
the key count (81 -> 96: zero key rows, softmax over the 81 valid columns, zero value rows), O's columns (32 -> 24),
ragged query blocks (11 rows per block, the last one 4) and the 1-row MAP block (GEMM rows padded to 3).

Accuracy as tests/unit/test_e2e_tiny.py: every embedding within cosine 0.9999 of the device-precision reference,
each output within cosine 0.99 of fp32. Lowering the key-chunk size (several K/V packing steps, O accumulated over
chunks) gives the same bits. At So400m size the scratch check accepts a block of 8 query rows x 72 over 729 keys
and the MAP head's block."""

from __future__ import annotations

import re

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f16, f32
from xdsl.ir import Block, Region
from xdsl.passes import PassPipeline

from ipu.backend.lower import compile_model, nnops
from ipu.backend.target import IPU21, Target
from ipu.dialects import nn
from ipu.frontend.reference import evaluate
from ipu.frontend.siglip import PRESETS, SiglipVisionConfig, build_vision_model
from ipu.frontend.weights import random_weights
from ipu.passes.nn_quantize import DEFAULT_SPEC
from ipu.passes.registry import all_passes
from ipu.runtime.host import Session

CFG = SiglipVisionConfig(
    hidden_size=48,
    intermediate_size=96,
    num_attention_heads=2,
    num_hidden_layers=2,
    image_size=36,
    patch_size=4,
)
TARGET = Target.small(tiles=16, sram_kib=624)
OUTPUTS = ("last_hidden_state", "pooler_output")


def compile_choosing(module_or_cfg, target, **options):
    """compile_model with kernel-select run again (overwriting) with `options` before lowering-storage: the other
    attention paths (key chunks, S = Q K^T, O = P V) at small sizes, chosen in the IR as a person would."""
    from ipu.backend.lower.lowering import pipeline_spec

    module = (
        build_vision_model(module_or_cfg) if isinstance(module_or_cfg, SiglipVisionConfig) else module_or_cfg
    )
    opts = " ".join(f"{k}={v}" for k, v in options.items())
    select = f"kernel-select{{tiles={target.num_tiles} sram_kib={target.sram_bytes // 1024} overwrite=true {opts}}}"
    spec = pipeline_spec(target, outline_repeat=True)
    assert (
        ",lowering-storage" in spec
    )  # the choices size the lowering's storage: edited before it is measured
    spec = spec.replace(",lowering-storage", f",{select},lowering-storage")
    PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), module)
    return compile_model(module, target)


def cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _run(pkg, x, runs=2):
    session = Session(pkg)
    session.upload_parameters(random_weights(CFG, seed=0))
    return [session.run({"pixel_values": x}).outputs for _ in range(runs)]


@pytest.fixture(scope="module")
def model():
    x = np.random.default_rng(1).standard_normal((1, 3, CFG.image_size, CFG.image_size)).astype(np.float32)
    pkg = compile_model(CFG, TARGET)
    outs = _run(pkg, x)
    w = random_weights(CFG, seed=0)
    params = {k: np.asarray(w[k]) for k in w.keys()}
    ref = evaluate(build_vision_model(CFG), {"pixel_values": x}, params, mode="fp32").outputs
    device_module = build_vision_model(CFG)
    PassPipeline.parse_spec(dict(all_passes()), DEFAULT_SPEC).apply(Context(), device_module)
    device = evaluate(device_module, {"pixel_values": x}, params, mode="device").outputs
    return x, pkg, outs, ref, device


def test_config_needs_every_padding():
    assert CFG.num_patches == 81 and CFG.num_patches % 16 and CFG.num_patches % 4 == 1
    assert CFG.head_dim == 24 and CFG.head_dim % 16 and CFG.vision_use_head


def test_padded_attention_matches_device_reference(model):
    _, _, outs, ref, device = model
    for name in OUTPUTS:
        got = outs[0][name]
        assert got.shape == ref[name].shape and np.isfinite(got).all(), name
        for g, w in zip(got.reshape(-1, CFG.hidden_size), device[name].reshape(-1, CFG.hidden_size)):
            assert cosine(g, w) >= 0.9999, (name, cosine(g, w))
            assert np.linalg.norm(g - w) <= 0.02 * np.linalg.norm(w), name
        assert cosine(got, ref[name]) >= 0.99, (name, cosine(got, ref[name]))
        np.testing.assert_array_equal(outs[1][name], got)


def test_check_can_fail(model):
    """The comparison is not vacuous: the output of the other output's reference, or a perturbed one, fails."""
    _, _, outs, _, device = model
    got = outs[0]["last_hidden_state"].reshape(-1, CFG.hidden_size)
    want = device["last_hidden_state"].reshape(-1, CFG.hidden_size)
    assert min(cosine(g, w) for g, w in zip(got, np.roll(want, 1, axis=0))) < 0.9999


def test_key_chunks_give_the_same_bits(model):
    """Keys in chunks of 32 (81 keys: 32 + 32 + 17, the last padded to 32): K^T and V packed per chunk, S written
    per column chunk, O = P V accumulated over the chunks (the GEMM rounds its f16 partials per 16-row inner block
    either way): the same outputs bit for bit."""
    x, pkg, outs, _, _ = model
    assert len(nnops.attention_sizes(11, 81, 24, TARGET.region1_element_bytes, max_chunk=32).chunks) == 3
    chunked = compile_choosing(CFG, TARGET, max_key_chunk=32)
    assert len(chunked.code) > len(pkg.code)  # more kernel calls
    got = _run(chunked, x, runs=1)[0]
    for name in OUTPUTS:
        np.testing.assert_array_equal(got[name], outs[0][name])


def test_score_chunk_longer_than_key_chunk_gives_the_same_bits(model):
    """kernel-select's `score_chunk` apart from `key_chunk`: S^T = K Q^T over all 81 keys in one step (the K rows
    from A's start, over Q's) while V is packed in chunks of 32; and the other way round, S^T in chunks of 32 with
    V in one: the same outputs bit for bit (each score is one dot product whatever the chunking)."""
    x, pkg, outs, _, _ = model
    e = TARGET.region1_element_bytes
    sz = nnops.attention_sizes(11, 81, 24, e, max_chunk=32, max_score_chunk=96)
    assert sz.score_chunks == [(0, 81)] and len(sz.chunks) == 3
    sz = nnops.attention_sizes(11, 81, 24, e, max_score_chunk=32)
    assert len(sz.score_chunks) == 3 and sz.chunks == [(0, 81)]
    for opts in (dict(max_key_chunk=32, max_score_chunk=96), dict(max_score_chunk=32)):
        got = _run(compile_choosing(CFG, TARGET, **opts), x, runs=1)[0]
        for name in OUTPUTS:
            np.testing.assert_array_equal(got[name], outs[0][name])


def test_score_chunk_choice_is_checked():
    from ipu.passes.kernel_select import KernelChoiceError, check

    op = build_vision_model(CFG)
    att = next(o for o in op.walk() if isinstance(o, nn.AttentionOp))
    with pytest.raises(KernelChoiceError, match="score_chunk = 40: a positive multiple of 16"):
        check(att, {"score_chunk": 40})


@pytest.mark.parametrize("f16_operands", [True, False])
def test_attention_operand_precision(model, f16_operands):
    """nn-quantize-weights{attention_f16=true|false}: q, k, v cast to f16 before every attention (the lowering
    copies f16 rows into the padded layouts) or kept f32 (converted by `cast_f16`), whatever the default policy:
    every embedding within cosine 0.9999 of that model's device-precision reference."""
    from ipu.backend.lower.lowering import pipeline_spec

    x = model[0]
    value = "true" if f16_operands else "false"
    nn_spec = re.sub(r" attention_f16=\w+", "", DEFAULT_SPEC)[:-1] + f" attention_f16={value}}}"
    module = build_vision_model(CFG)
    spec = pipeline_spec(TARGET, outline_repeat=True)
    assert DEFAULT_SPEC in spec
    PassPipeline.parse_spec(dict(all_passes()), spec.replace(DEFAULT_SPEC, nn_spec)).apply(Context(), module)
    atts = [o for o in module.walk() if isinstance(o, nn.AttentionOp)]
    want_type = f16 if f16_operands else f32
    assert atts and all(v.type.element_type == want_type for a in atts for v in a.operands[:3])
    got = _run(compile_model(module, TARGET), x, runs=1)[0]
    w = random_weights(CFG, seed=0)
    params = {k: np.asarray(w[k]) for k in w.keys()}
    device_module = build_vision_model(CFG)
    PassPipeline.parse_spec(dict(all_passes()), nn_spec).apply(Context(), device_module)
    device = evaluate(device_module, {"pixel_values": x}, params, mode="device").outputs
    for name in OUTPUTS:
        for g, want in zip(got[name].reshape(-1, CFG.hidden_size), device[name].reshape(-1, CFG.hidden_size)):
            assert cosine(g, want) >= 0.9999, (name, cosine(g, want))


def test_so400m_blocks_fit_the_scratch():
    """So400m/14-384 on the IPU21: tile-plan's materialized grid [92, 16] gives blocks of 8 query rows x 72 over 729
    keys (the last block 1 row), the MAP head 1 query row over 729 keys: both fit the 32 KiB elements."""
    cfg = PRESETS["so400m-patch14-384"]
    e = IPU21.region1_element_bytes
    seq, d = cfg.num_patches, cfg.head_dim
    assert (seq, d, -(-seq // 92)) == (729, 72, 8)
    for m in (8, 1):
        sz = nnops.attention_sizes(m, seq, d, e)
        assert (sz.mpad, sz.dpad, sz.spad, sz.transposed) == (max(m, 3), 80, 736, True)
        assert sz.spad * 32 <= e and sz.dpad * 32 + sz.spad * 32 <= e  # S^T in C; Q^T and S panels in aux
        assert sz.mpad * sz.spad * 2 <= e  # S in C, P in A
        assert sz.qo + sz.chunk * sz.dpad * 2 <= e  # K rows after Q in A, V rows after O in C
        assert sz.chunk * sz.dpad * 2 <= e  # a chunk's panels (or V^T rows) in aux
        assert -(-sz.mpad * sz.spad * 2 // 64) * 64 + sz.chunk * 32 <= e  # P^T's panels after P in A
        assert sum(nk for _, nk in sz.chunks) == seq
        prog = nnops.attention_program(sz, 0, 0, 0, m, 0, d**-0.5, 0x80000, 0x88000, 0x60000)
        assert sum(nnops.kernel_cycles(k) for _, k in prog) > 0


def test_blocks_that_do_not_fit_are_named():
    with pytest.raises(ValueError, match=r"64 query rows x head size 72 .*729 keys \(padded 736\)"):
        nnops.attention_sizes(64, 729, 72, 32 * 1024)  # S: 64 x 736 f16 = 94 KB
    with pytest.raises(ValueError, match="row stride"):
        nnops.attention_sizes(3, 2100, 64, 32 * 1024)
    with pytest.raises(ValueError, match="multiple of 4"):
        nnops.attention_sizes(8, 729, 70, 32 * 1024)


def attention_module(t: int, s: int, c: int, heads: int, dtype, out_dtype):
    """One nn.attention of inputs q [t, c], k / v [s, c] (element type dtype), result out_dtype."""
    block = Block()
    ins = []
    for name, rows in (("q", t), ("k", s), ("v", s)):
        op = nn.InputOp(name, TensorType(dtype, [rows, c]))
        block.add_op(op)
        ins.append(op.result)
    att = nn.AttentionOp(*ins, heads, (c // heads) ** -0.5, TensorType(out_dtype, [t, c]))
    block.add_op(att)
    block.add_op(nn.OutputOp("o", att.result))
    block.add_op(func.ReturnOp())
    return ModuleOp([func.FuncOp("attention", ((), ()), Region(block))])


def attention64(q, k, v, heads):
    t, c = q.shape
    d = c // heads
    qh, kh, vh = (x.astype(np.float64).reshape(-1, heads, d).transpose(1, 0, 2) for x in (q, k, v))
    sc = qh @ kh.transpose(0, 2, 1) * d**-0.5
    p = np.exp(sc - sc.max(-1, keepdims=True))
    return ((p / p.sum(-1, keepdims=True)) @ vh).transpose(1, 0, 2).reshape(t, c)


# (t, s, c, heads, dtype, out_dtype, chunk, tiles, transposed):
# - 11-row blocks (the last 4), keys 81 -> 96, head 24 -> 32; S^T = K Q^T (auto) or S = Q K^T (False);
# - a MAP-head-like probe: 1 query row (GEMM rows padded to 3);
# - f16 operands (nn-quantize-weights{attention_f16});
# - head 12 -> 16, keys 50 -> 64 in chunks of 16 (16, 16, 16, 2), f16 result, both score orders;
# - 8 heads on 4 tiles: several blocks per tile (rounds), 37-row blocks (S = Q K^T: more than 32 rows);
# - blocks of 25 and 32 query rows: S^T, Q^T and P^T in two 16-column weight blocks (query columns m..32 zero).
ATTENTION_CASES = [
    (81, 81, 48, 2, f32, f32, None, 16, None),
    (81, 81, 48, 2, f32, f32, None, 16, False),
    (1, 81, 48, 2, f32, f32, None, 16, None),
    (81, 81, 48, 2, f16, f32, None, 16, None),
    (50, 50, 24, 2, f16, f16, 16, 16, None),
    (50, 50, 24, 2, f16, f16, 16, 16, False),
    (37, 37, 96, 8, f32, f32, None, 4, None),
    (100, 100, 48, 2, f32, f32, None, 8, None),
    (64, 81, 48, 2, f16, f32, None, 4, None),
]


@pytest.mark.parametrize("t,s,c,heads,dtype,out_dtype,chunk,tiles,transposed", ATTENTION_CASES)
def test_attention_op(t, s, c, heads, dtype, out_dtype, chunk, tiles, transposed):
    """A single attention op against float64 (per row cosine, absolute error)."""
    rng = np.random.default_rng(t + s + c)
    x = {n: rng.standard_normal((r, c)).astype(np.float32) for n, r in (("q", t), ("k", s), ("v", s))}
    if dtype == f16:
        x = {n: a.astype(np.float16).astype(np.float32) for n, a in x.items()}
    options = {"max_key_chunk": chunk or 0} | ({"scores": "direct"} if transposed is False else {})
    pkg = compile_choosing(
        attention_module(t, s, c, heads, dtype, out_dtype), Target.small(tiles, sram_kib=624), **options
    )
    whats = [site["what"] for site in pkg.metadata["profile_sites"]]
    softmaxes = [w for w in whats if w.endswith("softmax")]
    # rounds: 8 heads on 4 tiles, else one block per tile
    assert len(softmaxes) == (2 if heads > tiles else 1)
    assert any("S^T = K Q^T" in w for w in whats) == (transposed is None and t != 37)  # 37-row blocks: S
    got = Session(pkg).run(x).outputs["o"].reshape(t, c).astype(np.float64)
    want = attention64(x["q"], x["k"], x["v"], heads)
    assert np.isfinite(got).all()
    for g, w in zip(got, want):
        assert cosine(g, w) >= 0.9999, cosine(g, w)
    assert np.abs(got - want).max() < 5e-3


def sum_attention_module(t: int, s: int, c: int, heads: int, dtype, q_layout, kv_layout):
    """attention(q1 + q2, k1 + k2, v1 + v2): Q, K and V computed on the device in the inputs' layouts."""
    from ipu.dialects import tile as tl

    block = Block()
    ins = {}
    for name, rows in (("q1", t), ("q2", t), ("k1", s), ("k2", s), ("v1", s), ("v2", s)):
        op = nn.InputOp(name, TensorType(dtype, [rows, c]))
        op.attributes[tl.LAYOUT_ATTR] = q_layout if name[0] == "q" else kv_layout
        block.add_op(op)
        ins[name] = op.result
    qkv = []
    for a, b, rows in (("q1", "q2", t), ("k1", "k2", s), ("v1", "v2", s)):
        add = nn.AddOp(ins[a], ins[b], TensorType(dtype, [rows, c]))
        block.add_op(add)
        qkv.append(add.result)
    att = nn.AttentionOp(*qkv, heads, (c // heads) ** -0.5, TensorType(f32, [t, c]))
    block.add_op(att)
    block.add_op(nn.OutputOp("o", att.result))
    block.add_op(func.ReturnOp())
    return ModuleOp([func.FuncOp("attention", ((), ()), Region(block))])


@pytest.mark.parametrize("dtype", [f32, f16])
def test_attention_kv_in_column_panels(dtype):
    """Q, K and V produced in column blocks that divide the head (20 of 40) arrive in column panels (`cols20`):
    one transfer per producer block. The S^T GEMMs read K's panels in place (two overlapping 16-column blocks per
    panel, `k_in_place_blocks`) with Q^T's panels in that block order (zeros where a column is read twice); V's panels
    go into V^T's rows; over several key chunks (the last one shorter). Whole-head producer blocks (row-major
    operands) take K's padded rows (40 -> 48) instead: both close to float64 (their S^T blocks, and so its f16
    roundings, differ)."""
    from ipu.dialects import tile as tl

    t, s, c, heads = 20, 50, 80, 2
    rng = np.random.default_rng(5)
    names = (("q1", t), ("q2", t), ("k1", s), ("k2", s), ("v1", s), ("v2", s))
    x = {n: rng.standard_normal((r, c)).astype(np.float32) for n, r in names}
    if dtype == f16:
        x = {n: a.astype(np.float16).astype(np.float32) for n, a in x.items()}
    outs = []
    for width in (20, 40):  # producer blocks of 20 columns (column panels) / whole heads (row-major)
        nq, nkv = (t // 10) * (c // width), (s // 25) * (c // width)
        kv_layout = tl.make_layout((s, c), (25, width), np.arange(nkv, dtype=np.int32)[:, None], dtype)
        q_layout = tl.make_layout((t, c), (10, width), np.arange(8, 8 + nq, dtype=np.int32)[:, None], dtype)
        pkg = compile_choosing(
            sum_attention_module(t, s, c, heads, dtype, q_layout, kv_layout),
            Target.small(16, sram_kib=624),
            max_key_chunk=32,
        )
        whats = [site["what"] for site in pkg.metadata["profile_sites"]]
        # The operands are f16 either way (the default policy's attention_f16): Q^T's panels one `panels_gap_f16`
        # call (then scaled in f16); K's panels read in place by the S^T GEMM of each chunk; V of whole-16 key chunks
        # straight into V^T's rows (O^T = V^T P^T), one call over its panels (a row-major block: one panel of the
        # head); no zero rows (the O^T GEMM takes V^T's 40 rows, not 48). Row-major operands: K's padded rows.
        marks = {
            "Q^T": "panels from Q's column panels",
            "K": "K's panels in place",
            "V": "from 2 V column panels",
        }
        for name, mark in marks.items():
            panels = any(w.startswith("nn.attention") and f"{name} " in w and mark in w for w in whats)
            assert panels == (width == 20), (name, width)
        assert any("K rows" in w for w in whats) == (width == 40)
        assert not any("V^T zero rows" in w for w in whats)
        assert not any("keys 0..32: V rows" in w for w in whats)  # the whole-16 chunk: no V rows copied
        outs.append(Session(pkg).run(x).outputs["o"].reshape(t, c).astype(np.float64))
    q, k, v = (x[f"{n}1"].astype(np.float64) + x[f"{n}2"] for n in "qkv")
    want = attention64(q, k, v, heads)
    for out in outs:
        for g, w in zip(out, want):
            assert cosine(g, w) >= 0.9999, cosine(g, w)
        assert np.abs(out - want).max() < 1e-2  # sums of two normals: logits twice as large as above


def test_two_stage_gather_gives_the_same_bits(monkeypatch):
    """K and V made of many small producer blocks (10 x 20, five per head's rows and two per head's columns) reach
    the attention through an intermediate layout (tile-plan's `gather_mid`: a two-stage gather) when the threshold
    is lowered: more exchange phases, the same bits as the direct gather (both only move data)."""
    from ipu.dialects import tile as tl
    from ipu.passes import tile_plan

    t, s, c, heads = 20, 50, 80, 2
    rng = np.random.default_rng(11)
    names = (("q1", t), ("q2", t), ("k1", s), ("k2", s), ("v1", s), ("v2", s))
    x = {n: rng.standard_normal((r, c)).astype(np.float32) for n, r in names}
    kv_layout = tl.make_layout((s, c), (10, 20), np.arange(20, dtype=np.int32)[:, None], f32)
    q_layout = tl.make_layout((t, c), (10, 20), np.arange(20, 28, dtype=np.int32)[:, None], f32)
    outs, phases = [], []
    for two_stage in (False, True):
        if two_stage:
            monkeypatch.setattr(tile_plan, "GATHER_MIN_PIECES", 4)
            monkeypatch.setattr(tile_plan, "GATHER_GAIN", 1)
        pkg = compile_model(
            sum_attention_module(t, s, c, heads, f32, q_layout, kv_layout), Target.small(32, sram_kib=624)
        )
        phases.append(
            sum(site["what"].startswith("exchange timed") for site in pkg.metadata["profile_sites"])
        )
        outs.append(Session(pkg).run(x).outputs["o"])
    assert phases[1] > phases[0], phases
    np.testing.assert_array_equal(outs[0], outs[1])
    assert tile_plan.gather_mid(kv_layout, kv_layout, 32) is None  # nothing to gather


@pytest.mark.parametrize("t,m", [(64, 8), (1, 1)])
def test_output_transposed_gives_the_same_bits(monkeypatch, t, m):
    """O^T = V^T P^T (V^T rows as the GEMM's A, P^T's weight panels, O's rows transposed back at the end) against
    O = P V (kernel-select's `pv = "direct"`: V's weight panels, P's rows as A) on the S^T path: blocks of m query rows (8,
    and 1: GEMM rows padded to 3 for P V, P^T's query rows 1..16 zero), f16 Q, K, V in column panels (20 of a 40
    head, padded to 48: V^T's zero rows), 50 keys in chunks of 32 (the tail of 18 keys through f16 V rows with zero
    rows): per 16 keys the AMP adds the same products into the same f16 partials, so the outputs are equal bit for
    bit."""
    from ipu.dialects import tile as tl

    s, c, heads = 50, 80, 2
    rng = np.random.default_rng(13 + m)
    names = (("q1", t), ("q2", t), ("k1", s), ("k2", s), ("v1", s), ("v2", s))
    x = {n: rng.standard_normal((r, c)).astype(np.float16).astype(np.float32) for n, r in names}
    kv_layout = tl.make_layout((s, c), (25, 20), np.arange(8, dtype=np.int32)[:, None], f16)
    nq = -(-t // 16) * 4  # Q blocks of 16 rows (or fewer) x 20 columns
    q_layout = tl.make_layout(
        (t, c), (min(t, 16), 20), np.arange(8, 8 + nq, dtype=np.int32)[:, None] % 16, f16
    )
    ms = []
    program = nnops.attention_program

    def recording(sz, qa, ka, va, rows, *args, **kw):  # args: out, scale, C, A, aux, esizes, panels_of, zeros
        ms.append((rows, sz.transposed, len(sz.chunks), args[6]))
        return program(sz, qa, ka, va, rows, *args, **kw)

    monkeypatch.setattr(nnops, "attention_program", recording)
    outs = []
    for pv_t in (True, False):
        ms.clear()
        pkg = compile_choosing(
            sum_attention_module(t, s, c, heads, f16, q_layout, kv_layout),
            Target.small(16, sram_kib=624),
            max_key_chunk=32,
            pv="transposed" if pv_t else "direct",
        )
        assert ms and {r[:3] for r in ms} == {(m, True, 2)} and all(r[3][2] == 20 for r in ms), ms
        whats = [site["what"] for site in pkg.metadata["profile_sites"]]
        assert any("O^T += V^T P^T" in w for w in whats) == pv_t
        assert any("O += P V" in w for w in whats) == (not pv_t)
        assert any("V^T rows from 2 V column panels" in w for w in whats) == pv_t
        outs.append(Session(pkg).run(x).outputs["o"].reshape(t, c))
    np.testing.assert_array_equal(outs[0], outs[1])
    q, k, v = (x[f"{n}1"].astype(np.float64) + x[f"{n}2"] for n in "qkv")
    for g, w in zip(outs[0].astype(np.float64), attention64(q, k, v, heads)):
        assert cosine(g, w) >= 0.9999, cosine(g, w)


def so400m_block_kw(**changes) -> dict:
    """`attention_program`'s keywords for one So400m key-split block (32 query rows, f16 Q, K, V in 24-wide
    column panels, O^T = V^T P^T, Q scaled by its sum), with `changes`."""
    kw = dict(qa=0, ka=0x1000, va=0x2000, m=32, out=0x3000, scale=0.125, c_area=0x80000, a_area=0x88000,
              panels=0x90000, esizes=(2, 2, 2, 4), stats=True, o_stride=74 * 4, pv_transposed=True,
              panels_of=(24, 24, 24), q_scaled=True)  # fmt: skip
    return kw | changes


def test_v_direct_one_chunk_past_whole_key_blocks():
    """O^T = V^T P^T with f16 V (`attention_sizes`' v_direct): So400m's key-split block (32 query rows, 183 keys,
    head 72, V in 24-wide panels) is one chunk, not 160 + 23 keys: V^T's 176 keys of whole blocks straight from
    the panels, the last 7 through 16 V rows, then one ones row, one P^T and one O^T GEMM over 192 keys; fewer
    cycles, and the scratch bound still holds (the V rows in C are 16 at most)."""
    from ipu.backend.kernels import gemm as gm

    e = IPU21.region1_element_bytes
    old = nnops.attention_sizes(32, 183, 72, e, transposed=True)
    new = nnops.attention_sizes(32, 183, 72, e, transposed=True, v_direct=True)
    assert [nk for _, nk in old.chunks] == [160, 23] and new.chunks == [(0, 183)] and new.v_direct
    kw = so400m_block_kw()
    progs = {v: nnops.attention_program(sz, **kw) for v, sz in ((False, old), (True, new))}
    labels = [label for label, _ in progs[True]]
    gemms = [c for label, c in progs[True] if "O^T" in label and isinstance(c, gm.Gemm)]
    assert len(gemms) == 1 and gemms[0].k == 192
    assert "keys 176..183: V^T rows" in labels and labels.count("V^T ones row") == 1
    # the tail's V rows past its 7 keys lie in S^T's scores (finite): no zero rows call
    assert not any("zero rows" in label for label in labels if label.startswith("keys 176"))
    tail = next(c for label, c in progs[True] if label == "keys 176..183: V^T rows")
    assert (tail.k, tail.dst, tail.drow) == (16, 0x90000 + 176 * 2, 192 * 2)
    cycles = {v: sum(nnops.kernel_cycles(k) for _, k in p) for v, p in progs.items()}
    assert cycles[True] < cycles[False] - 1000, cycles
    c, a, aux = nnops.attention_scratch(new, 72, True)
    assert max(c, a, aux) <= e


def test_program_calls_skip_row_kernels_of_no_rows():
    """`NnOps._program_calls`: one call site per step, and a tile whose row kernel of that step has no rows (Q's zero
    rows on a full query block) is left out of it (it skips the call: no supervisor cycles for nothing)."""
    from ipu.backend.kernels import rowwise as rw

    class Recorder:
        def __init__(self):
            self.sites = []

        def kcall(self, what, per_tile):
            self.sites.append((what, sorted(per_tile)))

    def prog(zero_rows):
        return [("Q rows", rw.Rows("pad_f16", 8, 16, out=0x80000, valid=16)),
                ("Q zero rows", rw.Rows("pad_f16", zero_rows, 16, out=0x81000, valid=0))]  # fmt: skip

    rec = Recorder()
    nnops.NnOps._program_calls(rec, "att", {3: prog(0), 5: prog(8), 7: prog(0)})
    assert rec.sites == [("att: Q rows", [3, 5, 7]), ("att: Q zero rows", [5])]


def test_scores_of_a_chunk_past_whole_key_blocks():
    """The S^T path with a chunk of keys that is not whole 16-key blocks (So400m's key-split block: 183 keys): the
    S^T GEMM takes the 183 K rows only (no zero K rows, one GEMM row fewer per worker), and S^T's rows 183..191,
    which the transpose reads, are zeros of their own: one fill of exactly those rows' qn halves, right after the
    GEMM. (The simulated programs of `test_output_transposed_gives_the_same_bits` take this path for their
    18-key tails.)"""
    from ipu.backend.kernels import gemm as gm

    e = IPU21.region1_element_bytes
    sz = nnops.attention_sizes(32, 183, 72, e, transposed=True, v_direct=True)
    kw = so400m_block_kw()
    prog = nnops.attention_program(sz, **kw)
    labels = [label for label, _ in prog]
    assert not any(label.startswith("K zero rows") for label in labels)
    i = labels.index("S^T = K Q^T")
    st = prog[i][1]
    assert isinstance(st, gm.Gemm) and (st.m, st.k, st.n) == (183, 80, 32)
    label, fill = prog[i + 1]
    assert label == "S^T zero rows" and fill.op == "pad_f16" and fill.valid == 0
    assert fill.out == 0x80000 + 183 * 32 * 2 and fill.rows * fill.n == (192 - 183) * 32
    assert labels[i + 2] == "S rows from S^T"
    # a chunk of whole blocks: neither
    whole = nnops.attention_program(
        nnops.attention_sizes(32, 176, 72, e, transposed=True, v_direct=True), **kw
    )
    assert not any("zero rows" in label and ("K" in label or "S^T" in label) for label, _ in whole)


@pytest.mark.parametrize("m", [32, 25, 17, 16, 9])
def test_q_t_zero_query_columns(m):
    """K read in place with Q in panels of 24: Q^T's weight panels come straight from Q's panels, and the last
    16-query group's queries m..qn (the S^T GEMM's columns past the block's rows) are zeros in every 16-deep
    block, written before that copy; no rows where m = qn. (The simulated programs do not need these zeros for
    their results, which never read those columns: finite scores there are the point.)"""
    e = IPU21.region1_element_bytes
    sz = nnops.attention_sizes(m, 183, 72, e, transposed=True, v_direct=True)
    panels = 0x90000
    kw = so400m_block_kw(m=m, panels=panels, k_in_place=True)
    prog = nnops.attention_program(sz, **kw)
    labels = [label for label, _ in prog]
    z, c = labels.index("Q^T zero query columns"), labels.index("Q^T panels from Q's column panels")
    assert z < c and not any(label in ("Q zero rows", "Q^T panels") for label in labels)
    fill, copy = prog[z][1], prog[c][1]
    assert fill.op == "pad_f16" and fill.valid == 0 and copy.block_jump == 512 and copy.rows == m
    written = {
        fill.out + r * fill.out_stride + i for r in range(fill.rows) for i in range(fill.n * 2)
    }  # fmt: skip
    qn, blocks, group = sz.qn, 96 // 16, 96 // 16 * 512
    want = {
        panels + (q // 16) * group + b * 512 + (q % 16) * 32 + i
        for q in range(m, qn)
        for b in range(blocks)
        for i in range(32)
    }
    assert written == want


def test_k_in_place_blocks():
    """The S^T GEMMs read K's column panels in place for f16 Q and K in panels of one width p dividing the head,
    16 < p < 32 (two overlapping 16-column blocks, Q's rows with p's 32 - p repeated columns zeroed) or a multiple
    of 16 (p / 16 blocks, no zeros); not for other widths, f32 or row-major operands, or the untransposed scores."""
    e = IPU21.region1_element_bytes
    sz = nnops.attention_sizes(32, 183, 72, e, transposed=True)
    f16s = (2, 2, 2, 4)
    kb = nnops.k_in_place_blocks(sz, f16s, (24, 24, 24))
    assert kb == nnops.KBlocks(p=24, panel_blocks=2, block_step=16, width=96, gap=8)
    assert nnops.k_in_place_blocks(sz, f16s, (36, 36, 36)) is None  # blocks at 0, 16, 20: no constant step
    assert nnops.k_in_place_blocks(sz, f16s, (8, 8, 8)) is None
    assert nnops.k_in_place_blocks(sz, f16s, (24, 12, 24)) is None  # Q's panels differ from K's
    assert nnops.k_in_place_blocks(sz, (4, 2, 2, 4), (24, 24, 24)) is None
    assert nnops.k_in_place_blocks(sz, f16s, (None, None, None)) is None
    sz48 = nnops.attention_sizes(32, 183, 96, e, transposed=True)
    assert nnops.k_in_place_blocks(sz48, f16s, (48, 48, 48)) == nnops.KBlocks(48, 3, 32, 96, 0)
    assert (
        nnops.k_in_place_blocks(nnops.attention_sizes(32, 183, 72, e, transposed=False), f16s, (24,) * 3)
        is None
    )


@pytest.mark.parametrize("d,p", [(48, 24), (56, 28), (40, 20), (64, 32)])
def test_k_panels_read_in_place(d, p):
    """Q and K in column panels of p halves (p of a d-wide head): the S^T GEMMs read K's panels in place (two
    overlapping 16-column blocks per panel, or p / 16 blocks), Q's rows in that block order (zeros for the columns
    read twice: `panels_gap_f16`); no K rows. Close to float64, and to the K-rows program (kernel-select's
    `k_operand = "rows"`, option k_rows), which differs only in the S^T GEMMs' blocks (f16 roundings of the scores)."""
    from ipu.dialects import tile as tl

    t, s, heads = 20, 50, 2
    c = heads * d
    rng = np.random.default_rng(d + p)
    names = (("q1", t), ("q2", t), ("k1", s), ("k2", s), ("v1", s), ("v2", s))
    x = {n: rng.standard_normal((r, c)).astype(np.float16).astype(np.float32) for n, r in names}
    kv_layout = tl.make_layout((s, c), (25, p), np.arange((s // 25) * (c // p), dtype=np.int32)[:, None], f16)
    q_layout = tl.make_layout(
        (t, c), (10, p), np.arange(8, 8 + (t // 10) * (c // p), dtype=np.int32)[:, None], f16
    )
    target = Target.small(16, sram_kib=624)
    outs = []
    for in_place in (True, False):
        pkg = compile_choosing(
            sum_attention_module(t, s, c, heads, f16, q_layout, kv_layout),
            target,
            max_key_chunk=32,
            k_rows=str(not in_place).lower(),
        )
        whats = [site["what"] for site in pkg.metadata["profile_sites"]]
        assert any("K's panels in place" in w for w in whats) == in_place
        assert any("K rows" in w for w in whats) == (not in_place)
        # Q^T's weight panels straight from Q's panels (p of 20, 24, 28: zeros between the two blocks), or Q's rows
        # in K's block order first (p a multiple of 16)
        direct = any("Q^T panels from Q's column panels" in w for w in whats)
        assert direct == (in_place and p % 16 != 0)
        assert any("Q rows in K's block order" in w for w in whats) == (in_place and p % 16 == 0)
        outs.append(Session(pkg).run(x).outputs["o"].reshape(t, c).astype(np.float64))
    q, k, v = (x[f"{n}1"].astype(np.float64) + x[f"{n}2"] for n in "qkv")
    want = attention64(q, k, v, heads)
    for out in outs:
        assert min(cosine(g, w) for g, w in zip(out, want)) >= 0.9999
        assert np.abs(out - want).max() < 1e-2
    assert np.abs(outs[0] - outs[1]).max() < 1e-2
