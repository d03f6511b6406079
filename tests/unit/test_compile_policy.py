"""compile_model's precision policies: the default weight policy (q/k projections in F16) when it fits, the
compact one (q/k in FP8 too, `KEEP_F16_COMPACT`) when memory-plan cannot place the default, with a package note
(an explicit policy is never changed); the default activations (`mlp`): FP8 into the MLP's K-split linears only."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from xdsl.utils.exceptions import PassFailedException

from ipu.backend.lower.lowering import compile_model
from ipu.frontend.reference import evaluate
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.frontend.weights import random_weights
from ipu.passes.tile_plan import target_for
from ipu.runtime.host import Session

# Width 512 (MLP 1024, 8 heads, 16 tokens), 4 layers on 32 tiles of 624 KiB: the F16 q/k weights do not fit
# beside the rest, the FP8 ones do (found by a sweep over layers and tiles; 5 layers fit neither way).
CFG = dataclasses.replace(
    PRESETS["tiny"], hidden_size=512, intermediate_size=1024, num_attention_heads=8
).with_layers(4)
TARGET = target_for(32, 624)


def _fp8_gemms(pkg) -> list[str]:
    return [s["what"] for s in pkg.metadata["profile_sites"] if s["what"].endswith("FP8 GEMM")]


def _precision_notes(pkg) -> list[str]:
    return [n for n in pkg.metadata.get("notes", []) if n.startswith("precision policy")]


def test_default_policy_that_does_not_fit_falls_back_to_the_compact_one():
    with pytest.raises(PassFailedException, match="memory-plan"):
        compile_model(CFG, TARGET, keep_f16=("default",))
    w = random_weights(CFG, 1, perturbed=False)
    pkg = compile_model(CFG, TARGET, weights=w)
    notes = _precision_notes(pkg)
    assert len(notes) == 1 and "keep_f16=patch_embedding,head" in notes[0] and "memory-plan" in notes[0]
    s = Session(pkg)
    s.upload_parameters(w)
    x = np.random.default_rng(2).uniform(-1, 1, (1, 3, CFG.image_size, CFG.image_size)).astype(np.float32)
    got = s.run({"pixel_values": x}).outputs
    ref = evaluate(build_vision_model(CFG), {"pixel_values": x}, w, mode="fp32").outputs
    for k, want in ref.items():
        a, b = got[k].reshape(-1, want.shape[-1]).astype(np.float64), want.reshape(-1, want.shape[-1])
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        assert cos.min() > 0.99, (k, cos.min())


def test_a_policy_that_fits_is_kept():
    pkg = compile_model(PRESETS["tiny"], target_for(16, 624))
    assert _precision_notes(pkg) == []


def test_the_default_activations_are_fp8_into_the_mlp_only():
    """With the default activations (`mlp`), the MLP's K-split linears (fc1, fc2) take FP8 x at scale
    2^`MLP_FP8_SCALE` and run on the FP8 AMP; the attention's keep f16 x (`fp8`: every FP8-weight K split takes
    FP8 x, `f16`: none). Width 256, 64 tokens, 2 layers on 64 tiles: v, out_proj, fc1 and fc2 are K-split."""
    from ipu.frontend.siglip import SiglipVisionConfig
    from ipu.passes.compile_pipeline import IpuCompilePipelinePass
    from ipu.passes.nn_quantize import MLP_FP8_SCALE

    base = PRESETS["siglip-tiny"].to_dict()
    cfg = SiglipVisionConfig(
        **{**base, "image_size": 128, "num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
           "num_attention_heads": 4}
    )  # fmt: skip
    resolved = IpuCompilePipelinePass(tiles=64).resolved(build_vision_model(cfg))
    assert resolved.activations == "fp8" and resolved.fp8_linears == ("fc1", "fc2")
    assert resolved.activation_scales == (f"fc1={MLP_FP8_SCALE}", f"fc2={MLP_FP8_SCALE}")
    target = target_for(64, 624)
    mlp = _fp8_gemms(compile_model(cfg, target))
    every = _fp8_gemms(compile_model(cfg, target, activations="fp8"))
    assert 1 <= len(mlp) < len(every), (mlp, every)
    assert not _fp8_gemms(compile_model(cfg, target, activations="f16"))


def test_mlp_activations_without_an_mlp_are_f16():
    """A module with no linear named like the MLP's resolves `mlp` to f16 (no refusal: it is the default), and
    the named pass's pipeline text needs the resolution first."""
    from xdsl.parser import Parser

    from ipu.passes.compile_pipeline import IpuCompilePipelinePass
    from ipu.tools.ipu_report import _context

    module = Parser(
        _context(),
        """
func.func @main() {
  %x = nn.input "x" : tensor<24x64xf32>
  %w = nn.param "w" : tensor<32x64xf32>
  %b = nn.param "b" : tensor<32xf32>
  %y = nn.linear %x, %w, %b : tensor<24x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<24x32xf32>
  nn.output "y" %y : tensor<24x32xf32>
  func.return
}
""",
    ).parse_module()
    p = IpuCompilePipelinePass(tiles=4)
    assert p.activations == "mlp" and p.resolved(module).activations == "f16"
    assert "nn-quantize-activations" not in p.resolved(module).pipeline_text()
    with pytest.raises(ValueError, match="activations=mlp depends on the module"):
        p.pipeline_text()
    # stop_after is checked against the passes `mlp` may run
    assert IpuCompilePipelinePass(tiles=4, stop_after="nn-quantize-activations").activations == "mlp"
