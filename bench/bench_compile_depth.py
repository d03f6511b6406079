"""Compile time of So400m/14-384 by depth (issue 20): every pass of `pipeline_spec` timed, then the asm lowering
(`lower_to_package`) and the package's bytes (`Package.to_bytes`), wall and CPU seconds, peak RSS, the package's
sha256 (byte identity across commits).

    .venv/bin/python -m bench.bench_compile_depth --layers 8          # all passes, the lowering, the bytes
    .venv/bin/python -m bench.bench_compile_depth --layers 27 --until lowering-storage

One process per call (peak RSS is the process's). The layers are outlined into one loop (`tile.repeat`) when
there are more than one; the weight policy is `keep_f16=patch_embedding,head` (the lead's planned default). Prints
one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import resource
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--until", default="", help="stop after this pass (no lowering), e.g. lowering-storage")
    args = p.parse_args()

    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.backend.lower.lowering import lower_to_package
    from ipu.backend.target import IPU21
    from ipu.frontend.siglip import PRESETS, build_vision_model
    from ipu.passes.compile_pipeline import pipeline_spec
    from ipu.passes.registry import all_passes

    module = build_vision_model(PRESETS["so400m-patch14-384"].with_layers(args.layers))
    spec = pipeline_spec(IPU21, outline_repeat=args.layers > 1)
    spec = re.sub(r"keep_f16=[a-z_,]+", "keep_f16=patch_embedding,head", spec)
    out: dict = {"layers": args.layers}

    def timed(name, fn):
        t, c = time.perf_counter(), time.process_time()
        r = fn()
        out[name] = {"wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(time.process_time() - c, 2)}
        return r

    for ps in PassPipeline.parse_spec(dict(all_passes()), spec).passes:
        timed(ps.name, lambda ps=ps: ps.apply(Context(), module))
        if ps.name == args.until:
            break
    else:
        pkg = timed("lower_to_package", lambda: lower_to_package(module, IPU21))
        data = timed("to_bytes", pkg.to_bytes)
        out["sha256"] = hashlib.sha256(data).hexdigest()
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps(out))


if __name__ == "__main__":
    main()
