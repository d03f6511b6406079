"""`nn-fold-probe-attention` and the host-derived parameters it introduces (`ipu.runtime.derived`): the folded
MAP head equals the original one in float64; the recipes' values and their diagnostics."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.passes import PassPipeline

from ipu.dialects import nn
from ipu.frontend.reference import EvaluationError, evaluate
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.frontend.weights import random_weights
from ipu.passes.registry import all_passes
from ipu.runtime.derived import DerivationError, WithDerived, derive


def folded(cfg):
    m = build_vision_model(cfg)
    PassPipeline.parse_spec(dict(all_passes()), "nn-fold-probe-attention").apply(Context(), m)
    return m


def test_fold_is_exact_in_float64():
    cfg = PRESETS["siglip-tiny"]
    w = random_weights(cfg, seed=3)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    m = folded(cfg)
    names = [op.name for op in m.walk()]
    assert "nn.attention" in names  # the encoder's attention is not a probe attention
    assert sum(isinstance(op, nn.ParamOp) and op.derived is not None for op in m.walk()) == 1
    assert any(isinstance(op, nn.LinearOp) and op.groups == cfg.num_attention_heads for op in m.walk())
    want = evaluate(build_vision_model(cfg), {"pixel_values": x}, w, mode="fp64").outputs["pooler_output"]
    got = evaluate(m, {"pixel_values": x}, w, mode="fp64").outputs["pooler_output"]
    # Only the float32-rounded attention scale differs in the order of operations.
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


def test_probe_key_scores_recipe():
    rng = np.random.default_rng(0)
    d, heads = 8, 2
    w = {
        "probe": rng.standard_normal((1, 1, d)),
        "in": rng.standard_normal((3 * d, d)),
        "b": rng.standard_normal(3 * d),
    }
    spec = dict(recipe="probe_key_scores", query="probe", wq="in[0:8]", wk="in[8:16]", bq="b[0:8]", heads=heads,
                scale=0.25)  # fmt: skip
    u = derive("u", spec, (heads, d), w)
    q = w["probe"].reshape(1, d) @ w["in"][:d].T + w["b"][:d]
    x = rng.standard_normal((5, d))
    k = x @ w["in"][d : 2 * d].T
    for h in range(heads):
        s = slice(h * 4, h * 4 + 4)
        # Scores up to the per-head constant (the key bias term, absent here): x . u_h = scale * q_h . k_h.
        np.testing.assert_allclose(x @ u[h], 0.25 * k[:, s] @ q[0, s], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "spec, message",
    [
        (dict(recipe="nope"), "unknown recipe 'nope'"),
        (
            dict(recipe="probe_key_scores", query="missing", wq="in", wk="in", heads=2, scale=1.0),
            "'missing' is missing",
        ),
        (
            dict(recipe="probe_key_scores", query="in", wq="in[0:99]", wk="in", heads=2, scale=1.0),
            "rows [0:99]",
        ),
        (dict(recipe="probe_key_scores", query="in", wq="in", wk="in", heads=3, scale=1.0), "heads"),
    ],
)
def test_derivation_errors_name_the_parameter(spec, message):
    with pytest.raises(DerivationError, match=r"derived parameter 'p'.*" + __import__("re").escape(message)):
        WithDerived({"in": np.zeros((8, 8))}, {"p": (spec, (2, 8))})["p"]


def test_reference_reports_a_bad_derivation():
    cfg = PRESETS["siglip-tiny"]
    w = dict(random_weights(cfg, seed=0).items())
    del w["head.probe"]
    x = np.zeros((1, 3, cfg.image_size, cfg.image_size), np.float32)
    with pytest.raises(EvaluationError, match="head.probe"):
        evaluate(folded(cfg), {"pixel_values": x}, w, mode="fp32")


def test_package_derives_parameters_at_upload(tmp_path):
    """The compiled tiny SigLIP lists its derived parameters; after a file round trip the session computes them
    from the weights at upload, and the pooled output matches the device-precision reference of the folded
    model. Weights without the probe are refused with its name."""
    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target
    from ipu.passes.nn_quantize import DEFAULT_SPEC
    from ipu.runtime.host import Session
    from ipu.runtime.package import Package

    cfg = PRESETS["siglip-tiny"]
    pkg = compile_model(cfg, Target.small(tiles=16, sram_kib=624), repeat=False)
    derived = pkg.metadata["derived_parameters"]
    assert sorted(derived) == ["head.attention.probe_key_scores"]
    assert derived["head.attention.probe_key_scores"]["shape"] == [cfg.num_attention_heads, cfg.hidden_size]
    pkg = Package.load(pkg.save(tmp_path / "tiny.ipupkg"))
    w = random_weights(cfg, seed=2)
    x = np.random.default_rng(4).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    session = Session(pkg)
    session.upload_parameters(w)
    got = session.run({"pixel_values": x}).outputs["pooler_output"]
    ref_model = build_vision_model(cfg)
    spec = f"nn-fold-probe-attention,nn-split-mlp,{DEFAULT_SPEC}"
    PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), ref_model)
    want = evaluate(ref_model, {"pixel_values": x}, w, mode="device").outputs["pooler_output"]
    assert np.linalg.norm(got - want) <= 0.01 * np.linalg.norm(want)
    without = {k: v for k, v in w.items() if k != "head.probe"}
    with pytest.raises(DerivationError, match="head.probe"):
        Session(pkg).upload_parameters(without)


@pytest.mark.parametrize(
    "groups, n, k, tiles",
    [(2, 64, 64, 16), (4, 96, 128, 64)],
    ids=["16-column panels", "groups of 24 columns: 24-wide panels padded to 32"],
)
def test_grouped_linear_runs(groups, n, k, tiles):
    """A grouped linear (row_groups: output column j from x's row j // (N / H)) is split along K by nn-split-k,
    planned with each tile receiving only its group's row, and matches the reference; the reference itself is
    the per-group product."""
    from xdsl.builder import Builder
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ModuleOp, TensorType, f32
    from xdsl.ir import Block, Region
    from xdsl.rewriter import InsertPoint

    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target
    from ipu.runtime.host import Session

    def model():
        block = Block()
        b = Builder(InsertPoint.at_end(block))
        x = b.insert(nn.InputOp("x", TensorType(f32, [groups, k]))).result
        w = b.insert(nn.ParamOp("w", TensorType(f32, [n, k]))).result
        bias = b.insert(nn.ParamOp("b", TensorType(f32, [n]))).result
        y = b.insert(nn.LinearOp(x, w, bias, TensorType(f32, [1, n]), row_groups=groups)).result
        b.insert(nn.OutputOp("y", y))
        b.insert(func.ReturnOp())
        return ModuleOp([func.FuncOp("grouped", ((), ()), Region(block))])

    rng = np.random.default_rng(5)
    x = rng.standard_normal((groups, k)).astype(np.float32)
    w = {
        "w": (rng.standard_normal((n, k)) * 0.1).astype(np.float32),
        "b": rng.standard_normal(n).astype(np.float32),
    }
    fp64 = evaluate(model(), {"x": x}, w, mode="fp64").outputs["y"]
    gs = n // groups
    manual = np.concatenate([x[h] @ w["w"][h * gs : (h + 1) * gs].T for h in range(groups)]) + w["b"]
    np.testing.assert_allclose(fp64[0], manual, rtol=1e-6, atol=1e-6)
    pkg = compile_model(model(), Target.small(tiles=tiles, sram_kib=624))
    session = Session(pkg)
    session.upload_parameters(w)
    got = session.run({"x": x}).outputs["y"]
    # FP8 weights (the default policy) and f16 partials: a few percent.
    assert np.linalg.norm(got - fp64) <= 0.05 * np.linalg.norm(fp64)
    assert np.abs(got - fp64).max() <= 0.1 * np.abs(fp64).max()


@pytest.mark.parametrize("func_name", ["two", "narrow"])
def test_fold_is_exact_for_shared_and_narrow_projections(func_name):
    """Two probe attentions over one key weight (each its own derived U) and projections narrower than x: the
    folded function equals the original in float64 (the lit test's functions)."""
    from pathlib import Path

    from xdsl.parser import Parser

    from ipu.tools.ipu_report import _context

    text = (Path(__file__).parents[1] / "filecheck/passes/nn-fold-probe-attention.mlir").read_text()

    def module():
        m = Parser(_context(), text).parse_module()
        for f in list(m.ops):
            if f.sym_name.data != func_name:
                f.detach()
        return m

    rng = np.random.default_rng(9)
    params = {
        "p.probe": rng.standard_normal((1, 8)),
        "p.attn.w": rng.standard_normal((8, 8)) * 0.5,
        "n.probe": rng.standard_normal((1, 8)),
        "n.w": rng.standard_normal((4, 8)) * 0.5,
    }
    x = {"x": rng.standard_normal((6, 8))}
    want = evaluate(module(), x, params, mode="fp64").outputs
    m = module()
    PassPipeline.parse_spec(
        dict(all_passes()), "nn-fold-probe-attention{operands_f16=false k_multiple=1}"
    ).apply(Context(), m)
    assert not any(isinstance(op, nn.AttentionOp) for op in m.walk())
    got = evaluate(m, x, params, mode="fp64").outputs
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-7)


def test_compile_model_names_a_missing_derivation_source():
    from ipu.backend.lower import LoweringError, compile_model
    from ipu.backend.target import Target

    cfg = PRESETS["siglip-tiny"]
    w = {k: v for k, v in random_weights(cfg, seed=0).items() if k != "head.probe"}
    with pytest.raises(LoweringError, match="head.probe"):
        compile_model(cfg, Target.small(tiles=16, sram_kib=624), weights=w, repeat=False)


def test_two_recipes_under_one_name_are_refused():
    """The package lists one recipe per derived name: two different ones under one name are an error (the host
    would upload one value for both)."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ModuleOp, TensorType, f32
    from xdsl.ir import Block, Region

    from ipu.runtime.derived import derived_specs, spec_to_attr

    block = Block()
    for heads in (2, 4):
        spec = spec_to_attr(
            dict(recipe="probe_key_scores", query="q", wq="w", wk="w", heads=heads, scale=1.0)
        )
        block.add_op(nn.ParamOp("u", TensorType(f32, (heads, 8)), spec))
    block.add_op(func.ReturnOp())
    m = ModuleOp([func.FuncOp("f", ((), ()), Region(block))])
    with pytest.raises(DerivationError, match="'u': two derived parameters of this name"):
        derived_specs(m)
    one = ModuleOp([func.FuncOp("g", ((), ()), Region(Block([block.first_op.clone(), func.ReturnOp()])))])
    assert list(derived_specs(one)) == ["u"]


def test_more_heads_than_tiles_stay_unfolded():
    """A MAP head of 5 heads on 4 tiles: the folded form's grouped value linear needs a tile per head, so the
    pipeline (`nn-fold-probe-attention{tiles}`) leaves the attention unfolded; the model compiles and matches the
    device reference (before: tile-plan refused 10 column panels on 4 tiles)."""
    from ipu.frontend.siglip import SiglipVisionConfig
    from ipu.tools.random_models import run_case

    cfg = SiglipVisionConfig(
        hidden_size=160, intermediate_size=28, num_attention_heads=5, num_hidden_layers=2, image_size=16,
        patch_size=8,
    )  # fmt: skip
    outcome, detail = run_case(cfg, 4, 624, seed=112010)
    assert outcome == "ok", detail
