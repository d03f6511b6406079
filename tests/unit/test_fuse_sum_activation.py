"""`nn-fuse-sum-activation` end to end: a K split's f16 sum and its tanh GELU as one `nn.reduce_sum {activation}`,
lowered by the fused `ksum` GELU body (or, where that does not apply, the sum then rowwise `gelu` in place). The
outputs are the same bits as the separate ops' on the simulator, and the reference evaluator gives the same values
for the fused module as for the unfused one."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.dialects import nn
from ipu.frontend.siglip import SiglipVisionConfig, build_vision_model

# Two layers whose fc1 is a many-row K split with f16 partials (3 chunks) on 128 tiles: its sum feeds the GELU.
CFG = SiglipVisionConfig(hidden_size=288, intermediate_size=576, num_attention_heads=4, num_hidden_layers=2,
                         image_size=112, patch_size=14)  # fmt: skip
TILES = 128


def _compile(monkeypatch, fuse: bool, fused_kernel: bool = True):
    import ipu.passes.compile_pipeline as cp
    from ipu.backend.lower import compile_model
    from ipu.backend.lower.nnops import NnOps
    from ipu.backend.target import Target

    with monkeypatch.context() as m:
        if not fuse:
            spec = cp.pipeline_spec
            m.setattr(
                cp, "pipeline_spec", lambda *a, **k: spec(*a, **k).replace("nn-fuse-sum-activation,", "")
            )
        if not fused_kernel:  # the GELU-fused sums through the unfused tree, then the GELU call in place
            from ipu.passes.tile_fuse_sum_cast import TileFuseSumCastPass

            # (an FP8 sum is the fused kernel's only: its casts stay apart)
            m.setattr(TileFuseSumCastPass, "apply", lambda self, ctx, op: None)
            fused = NnOps._reduce_sum_fused
            m.setattr(
                NnOps,
                "_reduce_sum_fused",
                lambda self, op, *a, **k: op.gelu is None and fused(self, op, *a, **k),
            )
        return compile_model(CFG, Target.small(tiles=TILES, sram_kib=624))


def _run(pkg, seed: int):
    from ipu.frontend.weights import random_weights
    from ipu.runtime.host import Session

    x = np.random.default_rng(seed).uniform(-1, 1, (1, 3, CFG.image_size, CFG.image_size)).astype(np.float32)
    session = Session(pkg)
    session.upload_parameters(random_weights(CFG, seed=seed))
    return session.run({"pixel_values": x})


def _sites(pkg) -> list[str]:
    return [s["what"] for s in pkg.metadata["profile_sites"]]


def test_fused_sum_gelu_same_bits_fewer_cycles(monkeypatch):
    fused = _compile(monkeypatch, fuse=True)
    plain = _compile(monkeypatch, fuse=False)
    fallback = _compile(monkeypatch, fuse=True, fused_kernel=False)
    assert any(
        w.endswith(("sum 3 + bias -> tanh GELU", "sum 3 + bias -> tanh GELU -> fp8")) for w in _sites(fused)
    )
    assert not any("-> tanh GELU" in w for w in _sites(plain))
    assert any("reduce_sum" in w and w.endswith(": GELU: tanh GELU") for w in _sites(fallback))
    for seed in (0, 3):
        runs = [_run(pkg, seed) for pkg in (fused, plain, fallback)]
        for name, value in runs[1].outputs.items():
            np.testing.assert_array_equal(runs[0].outputs[name], value)
            np.testing.assert_array_equal(runs[2].outputs[name], value)
        # The fused kernel: one pass over the sum's block instead of two (the loop's fc1 sum in both layers).
        assert runs[0].cycles < runs[1].cycles


@pytest.mark.parametrize("mode", ["device", "fp32"])
def test_reference_of_the_fused_module(mode):
    """The reference evaluator: the fused module's outputs equal the unfused module's, in both modes."""
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.frontend.reference import evaluate
    from ipu.frontend.weights import random_weights
    from ipu.passes.compile_pipeline import IpuCompilePipelinePass
    from ipu.passes.registry import all_passes

    text = IpuCompilePipelinePass(tiles=TILES, sram_kib=624).resolved(build_vision_model(CFG)).pipeline_text()
    nn_passes = text[: text.index("nn-fuse-sum-activation")].rstrip(",")
    mods = []
    for extra in ("", ",nn-fuse-sum-activation"):
        m = build_vision_model(CFG)
        PassPipeline.parse_spec(dict(all_passes()), nn_passes + extra).apply(Context(), m)
        mods.append(m)
    fused = [op for op in mods[1].walk() if isinstance(op, nn.ReduceSumOp) and op.gelu == "tanh"]
    assert fused and not any(
        isinstance(op.input.owner, nn.ReduceSumOp) for op in mods[1].walk() if isinstance(op, nn.GeluOp)
    )
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, CFG.image_size, CFG.image_size)).astype(np.float32)
    w = random_weights(CFG, seed=1)
    a, b = (evaluate(m, {"pixel_values": x}, w, mode=mode).outputs for m in mods)
    for name in a:
        np.testing.assert_array_equal(b[name], a[name])
