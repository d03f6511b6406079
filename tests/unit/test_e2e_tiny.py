"""Issue 6's end-to-end milestone: the tiny SigLIP (2 layers, MAP head, FP8 weights, F16 activations) compiled by
`compile_model` runs on the instruction-level simulator, and three inferences after one parameter upload give
identical outputs.

Accuracy, checked two ways:
- against the device-precision reference (the same FP8/f16 rounding, numpy): every embedding (row) has cosine
  >= 0.9999 and rel-L2 <= 0.02: this is the backend's correctness;
- against the fp32 reference: every embedding (each token row of last_hidden_state, the pooled output) has
  cosine >= 0.99. This holds with compile_model's precision policy (FP8 weights except the patch embedding, q/k
  projections and MAP head, in F16: `nn_quantize.DEFAULT_SPEC`); with every weight FP8 single rows of this
  perturbed-init model drop to ~0.92-0.96 (BENCHMARKS.md, "FP8 precision policy").

The layers run as one `tile.repeat` loop (compile_model's default; tests/unit/test_e2e_repeat.py checks it is
bit-identical to the unrolled package)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.passes import PassPipeline

from ipu.backend.lower import compile_model
from ipu.backend.target import IPU21, Target
from ipu.frontend.reference import evaluate
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.frontend.weights import random_weights
from ipu.passes.nn_quantize import DEFAULT_SPEC
from ipu.passes.registry import all_passes
from ipu.runtime.host import Session

OUTPUTS = ("last_hidden_state", "pooler_output")


DEVICE_PASSES = DEFAULT_SPEC


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def params_of(cfg) -> dict[str, np.ndarray]:
    w = random_weights(cfg, seed=0)
    return {k: np.asarray(w[k]) for k in w.keys()}


def run_tiny(target: Target, runs: int = 3):
    cfg = PRESETS["tiny"]
    pkg = compile_model("tiny", target)
    params = params_of(cfg)
    x = np.random.default_rng(1).standard_normal((1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    session = Session(pkg)
    session.upload_parameters(
        random_weights(cfg, seed=0)
    )  # once (resolves the loop's stacked parameter names)
    results = [session.run({"pixel_values": x}) for _ in range(runs)]
    ref = evaluate(build_vision_model(cfg), {"pixel_values": x}, params, mode="fp32").outputs
    # The same model in device precision (FP8 F143 weights with scale -4, f16 activations), as compile_model
    # quantizes it: the simulator must agree with this one closely; the gap to fp32 is the quantization's.
    device_module = build_vision_model(cfg)
    PassPipeline.parse_spec(dict(all_passes()), DEVICE_PASSES).apply(Context(), device_module)
    device = evaluate(device_module, {"pixel_values": x}, params, mode="device").outputs
    return pkg, results, ref, device


def embeddings(a: np.ndarray, width: int) -> np.ndarray:
    return a.reshape(-1, width).astype(np.float64)


def check_against_device_precision(results, device, width: int):
    """Per embedding (row), the simulator equals the device-precision reference up to f16 accumulation order."""
    for name in OUTPUTS:
        for got, want in zip(embeddings(results[0].outputs[name], width), embeddings(device[name], width)):
            assert cosine(got, want) >= 0.9999, (name, cosine(got, want))
            assert np.linalg.norm(got - want) <= 0.02 * np.linalg.norm(want), name


def check(results, ref, width: int):
    """Every embedding (row) within cosine 0.99 of fp32; the later inferences equal the first."""
    for name in OUTPUTS:
        got = results[0].outputs[name]
        assert got.shape == ref[name].shape
        assert np.isfinite(got).all(), name
        for i, (g, w) in enumerate(zip(embeddings(got, width), embeddings(ref[name], width))):
            assert cosine(g, w) >= 0.99, (name, i, cosine(g, w))
        for r in results[1:]:
            np.testing.assert_array_equal(r.outputs[name], got)


def test_tiny_siglip_16_tiles():
    pkg, results, ref, device = run_tiny(Target.small(tiles=16, sram_kib=624))
    check(results, ref, PRESETS["tiny"].hidden_size)
    check_against_device_precision(results, device, PRESETS["tiny"].hidden_size)
    assert pkg.metadata["config"] == PRESETS["tiny"].to_dict()


def test_cosine_can_fail():
    """The check is not vacuous: a perturbed output fails it."""
    ref = {n: np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32) for n in OUTPUTS}

    class R:
        outputs = {n: -v for n, v in ref.items()}

    with pytest.raises(AssertionError):
        check([R], ref, 8)


def test_tiny_siglip_1472_tiles():
    """The full IPU21 (about two minutes on the simulator: compile once, three inferences)."""
    _, results, ref, device = run_tiny(IPU21)
    check(results, ref, PRESETS["tiny"].hidden_size)
    check_against_device_precision(results, device, PRESETS["tiny"].hidden_size)
