"""FP8 activations on the FP8 AMP (`nn-quantize-activations`, `nn-split-k{fp8_kblock}`, the FP8 path of the
many-row K split's lowering): the device against the device-precision reference of the same IR, per layout case
(x in place, ragged last chunks padded by the row kernel or by copies, F152, another scale), and a small SigLIP
through the whole pipeline against fp32."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ipu.backend.lower import lower_to_package
from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.frontend.reference import evaluate
from ipu.passes.nn_split_k import NNSplitKPass, choose_rows_chunk
from ipu.runtime.host import Session

sys.path.insert(0, str(Path(__file__).parent))
from test_lower_linear import data, linear_model, run_passes  # noqa: E402


def fp8_split_model(m, k, n, kc, quantize, activations):
    """The linear model quantized (FP8 weights), split in chunks of kc as many-row linears are, and its f16 x
    cast to FP8 by `activations` (an nn-quantize-activations spec)."""
    mod = run_passes(linear_model(m, k, n, True), quantize)
    (lin,) = [op for op in mod.walk() if isinstance(op, nn.LinearOp)]
    NNSplitKPass.split(lin, kc, many_rows=True)
    run_passes(mod, activations)
    mod.verify()
    return mod


@pytest.mark.parametrize(
    "m, k, n, kc, quantize, activations, padded",
    [
        (196, 256, 64, 64, "nn-quantize-weights", "nn-quantize-activations", None),
        (96, 304, 48, 96, "nn-quantize-weights", "nn-quantize-activations", "rows"),
        (120, 264, 32, 64, "nn-quantize-weights", "nn-quantize-activations{scale=-2}", "copies"),
        (
            128,
            256,
            40,
            128,
            "nn-quantize-weights{format=f152 scale=-6}",
            "nn-quantize-activations{format=f152 scale=-3}",
            None,
        ),
    ],
    ids=[
        "x in place, 4 chunks",
        "ragged last chunk (16 -> 32, row kernel)",
        "ragged last chunk (8 -> 32, copies), scale -2",
        "F152 x and weights, N padded (40 -> 48)",
    ],
)
def test_fp8_x_split_matches_reference(m, k, n, kc, quantize, activations, padded):
    opts = "{tiles=64 sram_kib=624}"
    mod = fp8_split_model(m, k, n, kc, quantize, activations)
    (parts,) = [op for op in mod.walk() if isinstance(op, nn.LinearPartialsOp)]
    assert tl.dtype_name(parts.input.type.element_type).startswith("f8")
    run_passes(mod, f"nn-to-exchange-pipeline{opts},memory-plan{opts}")
    pkg = lower_to_package(mod)
    sites = [s["what"] for s in pkg.metadata["profile_sites"]]
    assert any(s.endswith("FP8 GEMM") for s in sites)
    assert not any("-> f16" in s for s in sites)  # no FP8 -> F16 weight-panel conversion
    pads = [s for s in sites if "FP8 x rows with zero K padding" in s]
    if padded is None:
        assert not pads
    else:
        assert any(s.endswith("(copies)") == (padded == "copies") for s in pads)
    x, w, b = data(m, k, n)
    session = Session(pkg)
    session.upload_parameters({"w": w, "b": b})
    got = session.run({"x": x}).outputs["y"]
    ref = fp8_split_model(m, k, n, kc, quantize, activations)
    want = evaluate(ref, {"x": x}, {"w": w, "b": b}, mode="device").outputs["y"]
    # Each chunk's partial is rounded to f16 per 32-deep block (the AMP's C), then summed in f32.
    tol = 4 * np.abs(want).max() * 2.0**-11 * max(1.0, np.sqrt(kc / 256))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    # FP8 x is coarser than f16 x: against f16 activations the result differs, but by FP8's rounding only.
    f16 = evaluate(run_passes(linear_model(m, k, n), quantize), {"x": x}, {"w": w, "b": b}, mode="device")
    rel = np.linalg.norm(got - f16.outputs["y"]) / np.linalg.norm(f16.outputs["y"])
    assert 1e-3 < rel < 0.06


def test_fp8_kblock_chunks_are_whole_fp8_blocks():
    """nn-split-k{fp8_kblock}: FP8-weight many-row splits in chunks of whole 32-deep blocks; the same linears
    without the option may take 16-multiples."""
    for m, k, n, tiles in ((729, 1152, 1152, 1472), (729, 4304, 1152, 1472), (256, 512, 256, 64)):
        kc = choose_rows_chunk(m, k, n, 1, "f8", tiles, kblock=32)
        assert kc is None or kc % 32 == 0
    assert choose_rows_chunk(729, 1152, 1152, 1, "f8", 1472, kblock=32) is not None


def small_siglip():
    from ipu.frontend.siglip import PRESETS, SiglipVisionConfig

    base = PRESETS["siglip-tiny"].to_dict()
    return SiglipVisionConfig(
        **{**base, "image_size": 128, "num_hidden_layers": 1, "hidden_size": 256, "intermediate_size": 512,
           "num_attention_heads": 4}
    )  # fmt: skip


def cosines(a, b):
    a = a.reshape(-1, a.shape[-1]).astype(np.float64)
    b = b.reshape(-1, b.shape[-1]).astype(np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_small_siglip_with_fp8_activations():
    """A width-256 SigLIP layer on 64 tiles through the whole pipeline with activations=fp8: v, fc1 and fc2 run
    on the FP8 AMP, in fewer cycles than with f16 activations; every token and the pooler within the accuracy
    bound against fp32, and near the device-precision reference of its own IR (FP8 rounding turns the f16
    kernels' last-bit differences into whole FP8 steps on a few elements, so not bit-close)."""
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.backend.lower import compile_model
    from ipu.backend.lower.lowering import pipeline_spec
    from ipu.backend.target import Target
    from ipu.frontend.siglip import build_vision_model
    from ipu.frontend.weights import random_weights
    from ipu.passes.registry import all_passes

    cfg, target = small_siglip(), Target.small(tiles=64, sram_kib=624)
    w = random_weights(cfg, seed=3)
    params = {k: np.asarray(w[k]) for k in w.keys()}
    x = np.random.default_rng(4).uniform(-1, 1, (1, 3, 128, 128)).astype(np.float32)
    fp32 = evaluate(build_vision_model(cfg), {"pixel_values": x}, params).outputs
    runs = {}
    for act in ("f16", "fp8"):
        pkg = compile_model(cfg, target, repeat=False, activations=act)
        fp8_gemms = sum(s["what"].endswith("FP8 GEMM") for s in pkg.metadata["profile_sites"])
        # v, out_proj, fc1, fc2 (q / k: F16 weights under the default policy)
        assert (fp8_gemms == 4) == (act == "fp8") and (fp8_gemms == 0) == (act == "f16")
        session = Session(pkg)
        session.upload_parameters(w)
        runs[act] = session.run({"pixel_values": x})
    assert runs["fp8"].cycles < runs["f16"].cycles
    out = runs["fp8"].outputs
    assert cosines(out["last_hidden_state"], fp32["last_hidden_state"]).min() >= 0.99
    assert cosines(out["pooler_output"], fp32["pooler_output"]).min() >= 0.995
    dev = build_vision_model(cfg)
    spec = pipeline_spec(target, False, activations="fp8")
    PassPipeline.parse_spec(dict(all_passes()), spec[: spec.index(",nn-to-exchange")]).apply(Context(), dev)
    want = evaluate(dev, {"pixel_values": x}, params, mode="device").outputs
    # The device-mode reference rounds as the kernels did before the row-work changes (issue 22 item 3): the layer
    # norm's f16 normalize pass and f32-input statistics and the softmax's f16 pair sums move the device off it by
    # more than before (pooler 0.029 -> 0.040 rel-L2, tokens 0.028 -> 0.029; cosine against fp32 stays at the
    # reference's own: pooler 0.9964 against its 0.9963), so the bound is 0.05.
    for k in ("last_hidden_state", "pooler_output"):
        assert np.linalg.norm(out[k] - want[k]) / np.linalg.norm(want[k]) < 0.05, k


def test_calibrated_scales_keep_large_activations():
    """Layer norms with 20x their weights put the projections' inputs near 100, far above F143's 15 at the rule's
    2^-4: the fixed scale saturates them and the output collapses; scales calibrated on another image
    (`compile_model(calibration=...)`) hold them, the accuracy comes back to f16 activations' level, and the
    package notes the scales it chose."""
    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target
    from ipu.frontend.siglip import build_vision_model
    from ipu.frontend.weights import random_weights

    cfg, target = small_siglip(), Target.small(tiles=64, sram_kib=624)
    w = random_weights(cfg, seed=5)
    params = {k: np.asarray(w[k]) for k in w.keys()}
    for k in params:
        if k.startswith("encoder.") and "layer_norm" in k and k.endswith("weight"):
            params[k] = params[k] * 20
    x = np.random.default_rng(6).uniform(-1, 1, (1, 3, 128, 128)).astype(np.float32)
    calib = {"pixel_values": np.random.default_rng(7).uniform(-1, 1, x.shape).astype(np.float32)}
    fp32 = evaluate(build_vision_model(cfg), {"pixel_values": x}, params).outputs
    cos = {}
    for name, act, cal in (("f16", "f16", None), ("fixed", "fp8", None), ("calibrated", "fp8", calib)):
        pkg = compile_model(cfg, target, repeat=False, activations=act, weights=params, calibration=cal)
        notes = [n for n in pkg.metadata.get("notes", []) if n.startswith("FP8 activation scales")]
        assert bool(notes) == (cal is not None)
        if cal is not None:  # v, out_proj, fc1, fc2, each at a scale above the rule's
            assert all(f"{p}.weight" in notes[0] for p in ("v_proj", "out_proj", "fc1", "fc2"))
            assert "-4 (" not in notes[0]
        session = Session(pkg)
        session.upload_parameters(params)
        out = session.run({"pixel_values": x}).outputs
        cos[name] = min(
            cosines(out["last_hidden_state"], fp32["last_hidden_state"]).min(),
            cosines(out["pooler_output"], fp32["pooler_output"]).min(),
        )
    assert cos["fixed"] < cos["calibrated"] - 0.05, cos
    assert cos["calibrated"] > cos["f16"] - 0.01, cos


def test_calibration_needs_the_weights():
    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target

    with pytest.raises(ValueError, match="calibration .* needs the weights"):
        compile_model(small_siglip(), Target.small(tiles=64, sram_kib=624), activations="fp8",
                      calibration={"pixel_values": np.zeros((1, 3, 128, 128), np.float32)})  # fmt: skip


def test_fp8_linears_restricts_the_fp8_activations():
    """compile_model(activations="fp8", fp8_linears=("fc2",)): only fc2 (the GELU output's linear) takes FP8 x on
    the FP8 AMP; v, out_proj and fc1 keep f16 x and 16-multiple chunks (nn-split-k{fp8_only}); the run lies
    between the all-f16 and all-FP8 ones in cycles and within the accuracy bound."""
    from ipu.backend.lower import compile_model
    from ipu.backend.lower.lowering import pipeline_spec
    from ipu.backend.target import Target
    from ipu.frontend.siglip import build_vision_model
    from ipu.frontend.weights import random_weights

    cfg, target = small_siglip(), Target.small(tiles=64, sram_kib=624)
    spec = pipeline_spec(target, False, activations="fp8", fp8_linears=("fc2",))
    assert "fp8_kblock=true fp8_only=fc2}" in spec and "nn-quantize-activations{only=fc2}" in spec
    assert "fp8_only" not in pipeline_spec(target, False, activations="f16", fp8_linears=("fc2",))
    w = random_weights(cfg, seed=8)
    x = np.random.default_rng(9).uniform(-1, 1, (1, 3, 128, 128)).astype(np.float32)
    fp32 = evaluate(
        build_vision_model(cfg), {"pixel_values": x}, {k: np.asarray(w[k]) for k in w.keys()}
    ).outputs
    cycles = {}
    for name, act, only in (("f16", "f16", ()), ("fc2", "fp8", ("fc2",)), ("fp8", "fp8", ())):
        pkg = compile_model(cfg, target, repeat=False, activations=act, fp8_linears=only)
        fp8_sites = [s["what"] for s in pkg.metadata["profile_sites"] if s["what"].endswith("FP8 GEMM")]
        assert len(fp8_sites) == {"f16": 0, "fc2": 1, "fp8": 4}[name], fp8_sites
        session = Session(pkg)
        session.upload_parameters(w)
        run = session.run({"pixel_values": x})
        cycles[name] = run.cycles
        if name == "fc2":
            out = run.outputs
            assert cosines(out["last_hidden_state"], fp32["last_hidden_state"]).min() >= 0.99
            assert cosines(out["pooler_output"], fp32["pooler_output"]).min() >= 0.995
    assert cycles["fp8"] < cycles["fc2"] < cycles["f16"], cycles
