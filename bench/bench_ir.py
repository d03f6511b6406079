"""Printing and re-parsing the whole So400m `nn` module, unrolled and with `nn.repeat` (issue 2, target < 2 s)."""

from __future__ import annotations

import sys

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.passes import PassPipeline

from bench.common import header, median_time, peak_rss_mib
from ipu.dialects.nn import NN
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.passes.registry import all_passes


def parse(text: str):
    ctx = Context()
    for d in (Builtin, Func, NN):
        ctx.load_dialect(d)
    return Parser(ctx, text).parse_module()


def main() -> None:
    cfg = PRESETS["so400m-patch14-384"]
    rows = []
    build_s, _ = median_time(lambda: build_vision_model(cfg))
    for pipeline in ("", "nn-fuse-qkv,nn-outline-repeat,nn-quantize-weights"):
        module = build_vision_model(cfg)
        pass_s = 0.0
        if pipeline:
            pass_s, _ = median_time(lambda: None, 1)
            import time

            t0 = time.perf_counter()
            PassPipeline.parse_spec(dict(all_passes()), pipeline).apply(Context(), module)
            pass_s = time.perf_counter() - t0
        n_ops = sum(1 for _ in module.walk())
        text = str(module)
        print_s, _ = median_time(lambda m=module: str(m))
        parse_s, _ = median_time(lambda t=text: parse(t))
        reparsed = parse(text)
        assert str(reparsed) == text, "round trip changed the IR"
        label = pipeline or "unrolled (builder output)"
        rows.append((label, n_ops, len(text), pass_s, print_s, parse_s))
    print(f"### IR size and round trip, So400m vision tower ({header()})\n")
    print(f"Builder: {build_s:.3f} s (median of 3).\n")
    print(
        "| IR | ops | chars | passes (s) | print (s, median of 3) | parse (s, median of 3) | print + parse (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, n, chars, p, pr, pa in rows:
        print(f"| {label} | {n} | {chars} | {p:.2f} | {pr:.3f} | {pa:.3f} | {pr + pa:.3f} |")
    print(f"\nPeak RSS {peak_rss_mib():.0f} MiB.")


if __name__ == "__main__":
    sys.exit(main())
