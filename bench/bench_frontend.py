"""Importing the 27-layer So400m checkpoint, and the fp32 reference evaluator against HF transformers (issue 2).

Each measurement runs in a fresh process so that its peak RSS is its own:
  python -m bench.bench_frontend            # all, writes the checkpoint to $BENCH_DIR (default /tmp/so400m) once
  python -m bench.bench_frontend import     # one part
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import header, peak_rss_mib

CKPT = Path(os.environ.get("BENCH_DIR", "/tmp/so400m"))
PRESET = "so400m-patch14-384"


def write_checkpoint() -> dict:
    from ipu.frontend.siglip import PRESETS
    from ipu.frontend.weights import random_weights, save_checkpoint

    if (CKPT / "model.safetensors").is_file():
        return {"skipped": True}
    t0 = time.perf_counter()
    w = random_weights(PRESETS[PRESET], seed=0)
    save_checkpoint(w, PRESETS[PRESET], CKPT, with_prefix=True)
    return {"seconds": time.perf_counter() - t0, "peak_rss_mib": peak_rss_mib()}


def import_checkpoint() -> dict:
    from ipu.frontend.weights import load_checkpoint

    t0 = time.perf_counter()
    store, cfg = load_checkpoint(CKPT)
    seconds = time.perf_counter() - t0
    size = (CKPT / "model.safetensors").stat().st_size
    return {
        "seconds": seconds,
        "peak_rss_mib": peak_rss_mib(),
        "file_mib": size / 2**20,
        "params": int(sum(a.size for a in store.values())),
    }


def reference_vs_hf(repeats: int = 3) -> dict:
    import torch
    import transformers

    from ipu.frontend.reference import evaluate
    from ipu.frontend.siglip import build_vision_model
    from ipu.frontend.weights import load_checkpoint

    torch.set_num_threads(os.cpu_count() or 1)
    store, cfg = load_checkpoint(CKPT)
    module = build_vision_model(cfg)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 384, 384)).astype(np.float32)
    model = transformers.SiglipVisionModel.from_pretrained(CKPT, torch_dtype=torch.float32).eval()
    ours, theirs = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = evaluate(module, {"pixel_values": x}, store, mode="fp32").outputs
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with torch.no_grad():
            ref = model(pixel_values=torch.from_numpy(x))
        theirs.append(time.perf_counter() - t0)
    a, b = out["pooler_output"].astype(np.float64), ref.pooler_output.numpy().astype(np.float64)
    c, d = out["last_hidden_state"].astype(np.float64), ref.last_hidden_state.numpy().astype(np.float64)
    return {
        "ours_s": sorted(ours)[len(ours) // 2],
        "hf_s": sorted(theirs)[len(theirs) // 2],
        "ours_all": ours,
        "hf_all": theirs,
        "rel_l2_pooler": float(np.linalg.norm(a - b) / np.linalg.norm(b)),
        "rel_l2_last": float(np.linalg.norm(c - d) / np.linalg.norm(d)),
        "peak_rss_mib": peak_rss_mib(),
    }


PARTS = {"write": write_checkpoint, "import": import_checkpoint, "reference": reference_vs_hf}


def main(argv: list[str]) -> None:
    if argv:
        print(json.dumps(PARTS[argv[0]]()))
        return
    results = {}
    for part in PARTS:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.bench_frontend", part], capture_output=True, text=True
        )
        if proc.returncode:
            sys.exit(f"{part} failed:\n{proc.stderr}")
        results[part] = json.loads(proc.stdout.strip().splitlines()[-1])
    imp, ref = results["import"], results["reference"]
    print(f"### So400m checkpoint import and reference evaluator ({header()})\n")
    print(
        f"- Import of the 27-layer checkpoint ({imp['file_mib']:.0f} MiB, {imp['params']:,} parameters, fp32, "
        f"`vision_model.` keys): {imp['seconds']:.3f} s, peak RSS {imp['peak_rss_mib']:.0f} MiB "
        f"({imp['peak_rss_mib'] / imp['file_mib']:.2f}x the file; tensors are memory-mapped)."
    )
    print(
        f"- Reference evaluator, fp32, 27 layers + head, one 384x384 image: median {ref['ours_s']:.2f} s; "
        f"HF transformers {transformers_version()} SiglipVisionModel (sdpa, {os.cpu_count()} threads) on the same "
        f"weights and input in the same process: median {ref['hf_s']:.2f} s; ratio "
        f"**{ref['ours_s'] / ref['hf_s']:.2f}x** (target <= 2x). Runs: ours "
        f"{', '.join(f'{t:.2f}' for t in ref['ours_all'])}; HF {', '.join(f'{t:.2f}' for t in ref['hf_all'])}."
    )
    print(
        f"- Agreement: rel-L2 last_hidden_state {ref['rel_l2_last']:.2e}, pooler_output {ref['rel_l2_pooler']:.2e}; "
        f"peak RSS of that process {ref['peak_rss_mib']:.0f} MiB."
    )


def transformers_version() -> str:
    import transformers

    return transformers.__version__


if __name__ == "__main__":
    main(sys.argv[1:])
