"""compile_model's precision-policy fallback: the default policy (q/k projections in F16) when it fits, the compact
one (q/k in FP8 too, `KEEP_F16_COMPACT`, and FP8 activations into fc2 unless the activations are chosen) when
memory-plan cannot place the default, with a package note; an explicit policy is never changed."""

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
    # fc2 is not K-split at 16 tokens: the note says its activations stay f16 (no FP8 GEMM)
    assert "fc2 not K-split here: f16 activations" in notes[0]
    assert not _fp8_gemms(pkg)
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


def test_the_compact_fallback_gives_fc2_fp8_activations():
    """Where the compact fallback applies and fc2 is K-split (width 256, 64 tokens, 40 layers on 64 tiles: the
    default policy does not fit), fc2's x is cast to FP8 (`COMPACT_FP8_LINEARS`, scale 2^`COMPACT_FP8_SCALE`) and
    its K split runs on the FP8 AMP; chosen activations are kept as they are."""
    from ipu.frontend.siglip import SiglipVisionConfig
    from ipu.passes.nn_quantize import COMPACT_FP8_SCALE

    base = PRESETS["siglip-tiny"].to_dict()
    cfg = SiglipVisionConfig(
        **{**base, "image_size": 128, "num_hidden_layers": 40, "hidden_size": 256, "intermediate_size": 512,
           "num_attention_heads": 4}
    )  # fmt: skip
    target = target_for(64, 624)
    pkg = compile_model(cfg, target)
    notes = _precision_notes(pkg)
    assert len(notes) == 1 and f"FP8 activations into fc2 at scale 2^{COMPACT_FP8_SCALE}" in notes[0], notes
    # fc2 only: every FP8-weight K split takes FP8 x when the activations are chosen "fp8"
    assert 1 <= len(_fp8_gemms(pkg)) < len(_fp8_gemms(compile_model(cfg, target, activations="fp8")))
    chosen = compile_model(cfg, target, activations="f16")
    assert "FP8" not in _precision_notes(chosen)[0].split("(q/k projections in FP8)")[1]
    assert not _fp8_gemms(chosen)
