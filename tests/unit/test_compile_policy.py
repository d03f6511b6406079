"""compile_model's precision-policy fallback: the default policy (q/k projections in F16) when it fits, the compact
one (q/k in FP8 too, `KEEP_F16_COMPACT`) when memory-plan cannot place the default, with a package note; an
explicit policy is never changed."""

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
