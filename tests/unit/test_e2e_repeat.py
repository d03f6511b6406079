"""Issue 6, milestone C2: the layer loop. The tiny SigLIP compiled with `nn-outline-repeat` (layers as one
`tile.repeat` body, lowered as a supervisor loop over one copy of the body's code with per-iteration frame
patching) gives bit-identical outputs to the unrolled package on 16 tiles, three inferences after one upload
are identical, and the code image is smaller."""

from __future__ import annotations

import numpy as np

from ipu.backend.lower import compile_model
from ipu.backend.target import Target
from ipu.frontend.siglip import PRESETS
from ipu.frontend.weights import random_weights
from ipu.runtime.derived import with_package_derived
from ipu.runtime.host import Session


def _run(pkg, weights, x, runs):
    session = Session(pkg)
    weights = with_package_derived(weights, pkg)  # the package's derived parameters too
    session.upload_parameters({b.name: np.asarray(weights[b.name]) for b in pkg.parameters})  # once
    return [session.run({"pixel_values": x}) for _ in range(runs)]


def test_tiny_repeat_loop_matches_unrolled_16_tiles():
    cfg = PRESETS["tiny"]
    target = Target.small(tiles=16, sram_kib=624)
    weights = random_weights(cfg, seed=0)
    x = np.random.default_rng(1).standard_normal((1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    unrolled = compile_model("tiny", target, repeat=False)
    looped = compile_model("tiny", target, repeat=True)
    assert any("tile.repeat" in n for n in looped.metadata["notes"])
    assert any(b.name.startswith("encoder.layers.*.") for b in looped.parameters)
    assert len(looped.code) < len(unrolled.code), (len(looped.code), len(unrolled.code))
    # The layers' weight matrices are uploaded as prepared (FP8 / F16) sequences, not also as f32 stacks
    # (nn-hoist-stacked): the device never reads an f32 copy of a weight.
    layer_weights = [
        b for b in looped.parameters if b.name.startswith("encoder.layers.*.") and len(b.shape) == 3
    ]
    assert layer_weights and all(b.dtype != "f32" for b in layer_weights), [
        (b.name, b.dtype) for b in layer_weights
    ]
    want = _run(unrolled, weights, x, 1)[0]
    got = _run(looped, weights, x, 3)
    for name, ref in want.outputs.items():
        for r in got:
            assert np.array_equal(r.outputs[name], ref), name  # bit-identical, every inference
