"""Random SigLIP-shaped models through the whole pipeline (compile_model -> package -> simulator), against the
device-precision reference evaluator (`bench/bench_random_models.py` runs many; `tests/unit/test_random_models.py`
a few, and the shapes that once failed).

`draw(rng)` picks a config (heads, head size a multiple of 4, MLP width, image and patch size, layers, MAP head or
not) and a target; `run_case` compiles it with the default pipeline, runs one inference on the simulator and
compares every embedding with `evaluate(..., mode="device")` of the nn-level module the package was compiled from
(`debug.nn_module`), on the same weights and input. Outcomes:

- `ok`: compiled, ran, every embedding within cosine COSINE_BOUND of the device-precision reference;
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
    worst = 1.0
    for k, want in ref.items():
        a = np.asarray(got[k], np.float64).reshape(-1, want.shape[-1])
        b = np.asarray(want, np.float64).reshape(-1, want.shape[-1])
        cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
        worst = min(worst, float(cos.min()))
    return ("ok" if worst >= COSINE_BOUND else "mismatch"), f"min cosine vs device reference {worst:.6f}"
