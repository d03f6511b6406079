"""Random SigLIP-shaped models through the whole pipeline (compile_model -> package -> simulator), against the
device-precision reference evaluator (`bench/bench_random_models.py` runs many; `tests/unit/test_random_models.py`
a few, and the shapes that once failed).

`draw(rng)` picks a config (heads, head size a multiple of 4, MLP width, image and patch size, layers, MAP head or
not) and a target; `run_case` compiles it with the default pipeline, runs one inference on the simulator and
compares every embedding with `evaluate(..., mode="device")` of the nn-level module the package was compiled from
(`debug.nn_module`), on the same weights and input. Outcomes:

- `ok`: compiled, ran, every embedding within cosine COSINE_BOUND of the device-precision reference; or, where
  the package casts activations to FP8 (the default `mlp` activations on K-split MLP linears), as close to fp32
  as the reference is (`FP8_X_SLACK`): FP8 rounding turns the last-bit differences of f16 sums (the device's K
  splits and attention merge are not the reference's order) into whole FP8 steps, so the package and the reference
  are two equally valid quantized evaluations whose mutual distance grows with depth;
- `fallback`: compiled with the compact policy's fallback (not compared);
- `diagnostic`: compile_model refused the model with a named error (LoweringError / PassFailedException /
  ExchangeLoweringError / ValueError);
- `mismatch`: ran, but an embedding is further from the reference;
- `crash`: any other exception (a traceback in a user's hands), or a simulator error.
"""

from __future__ import annotations

import traceback

import numpy as np

COSINE_BOUND = 0.999
# With FP8 activations: 1 - cos(package, fp32) <= FP8_X_SLACK[0] * (1 - cos(reference, fp32)) + FP8_X_SLACK[1] for
# every embedding. (Random model 102/19, 3 layers of width 128: package vs fp32 0.98775, reference vs fp32 0.98772,
# package vs reference 0.99757.)
FP8_X_SLACK = (2.0, 2e-3)


def draw(rng: np.random.Generator):
    """(config, tiles, sram_kib) of one case."""
    from ipu.frontend.siglip import SiglipVisionConfig

    heads = int(rng.integers(1, 7))
    head_dim = 4 * int(rng.integers(2, 17))  # 8 .. 64
    patch = int(rng.choice([4, 8, 14]))
    cfg = SiglipVisionConfig(
        hidden_size=heads * head_dim,
        intermediate_size=4 * int(rng.integers(4, 161)),  # 16 .. 640
        num_attention_heads=heads,
        num_hidden_layers=int(rng.integers(1, 4)),
        image_size=patch * int(rng.integers(2, 9)) + int(rng.choice([0, 0, 0, 1, patch - 1])),
        patch_size=patch,
        vision_use_head=bool(rng.integers(0, 4)),  # the MAP head in 3 cases of 4
    )
    tiles = int(rng.choice([4, 8, 16, 32, 64, 128, 256]))
    return cfg, tiles, 624


def run_case(cfg, tiles: int, kib: int, seed: int) -> tuple[str, str]:
    """(outcome, detail) of one model on a `tiles`-tile target of `kib` KiB, weights and input from `seed`."""
    from xdsl.utils.exceptions import PassFailedException

    from ipu.backend.lower.debug import nn_module
    from ipu.backend.lower.exchange import ExchangeLoweringError
    from ipu.backend.lower.lowering import LoweringError, compile_model
    from ipu.backend.target import Target
    from ipu.frontend.reference import evaluate
    from ipu.frontend.weights import random_weights
    from ipu.runtime.host import Session

    w = random_weights(cfg, seed)
    x = np.random.default_rng(seed + 1).uniform(-1, 1, (1, cfg.num_channels, cfg.image_size, cfg.image_size))
    x = x.astype(np.float32)
    try:
        target = Target.small(tiles=tiles, sram_kib=kib)
        pkg = compile_model(cfg, target, weights=w)
    except (LoweringError, PassFailedException, ExchangeLoweringError, ValueError) as e:
        return "diagnostic", f"{type(e).__name__}: {str(e)[:400]}"
    except Exception:  # noqa: BLE001 - what a user would see as a traceback
        return "crash", traceback.format_exc(limit=3)[-600:]
    try:
        s = Session(pkg)
        s.upload_parameters(w)
        got = s.run({"pixel_values": x}).outputs
    except Exception:  # noqa: BLE001
        return "crash", traceback.format_exc(limit=3)[-600:]
    if any(n.startswith("precision policy") for n in pkg.metadata.get("notes", [])):
        return "fallback", "the compact policy's fallback (not compared)"
    # the nn-level module the package was compiled from: its precision policy's types are the device's
    ref = evaluate(nn_module(cfg, target), {"pixel_values": x}, w, mode="device").outputs
    worst = min(_min_cosine(got[k], want) for k, want in ref.items())
    detail = f"min cosine vs device reference {worst:.6f}"
    if worst >= COSINE_BOUND:
        return "ok", detail
    if not any(s["what"].endswith("FP8 GEMM") for s in pkg.metadata.get("profile_sites", [])):
        return "mismatch", detail
    from ipu.frontend.siglip import build_vision_model

    f32 = evaluate(build_vision_model(cfg), {"pixel_values": x}, w, mode="fp32").outputs
    errs = {k: (1 - _min_cosine(got[k], f32[k]), 1 - _min_cosine(ref[k], f32[k])) for k in f32}
    detail += "; FP8 activations: 1 - cosine vs fp32, package / reference: " + ", ".join(
        f"{k} {p:.2e} / {r:.2e}" for k, (p, r) in errs.items()
    )
    return ("ok" if fp8_x_agrees(errs.values()) else "mismatch"), detail


def fp8_x_agrees(errors) -> bool:
    """Whether a package with FP8 activations is as close to fp32 as the reference: (1 - cosine of the package,
    1 - cosine of the reference) vs fp32 per output, each within `FP8_X_SLACK`."""
    a, b = FP8_X_SLACK
    return all(p <= a * r + b for p, r in errors)


def _min_cosine(got, want) -> float:
    """The smallest cosine between corresponding embeddings (rows of the last axis)."""
    want = np.asarray(want, np.float64).reshape(-1, np.shape(want)[-1])
    a = np.asarray(got, np.float64).reshape(-1, want.shape[-1])
    cos = (a * want).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(want, axis=1), 1e-30)
    return float(cos.min())
