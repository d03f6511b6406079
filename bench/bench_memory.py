"""Memory placement (issue 6): allocator time, peak RSS and tile classes.

1. A synthetic request set the size of one So400m encoder layer on 1472 tiles (width 1152, MLP 4304, 729 tokens,
   FP8 weights as 27-member Repeat sequences, F16 activations spread over all tiles with ragged tails), plus
   the support reservations the pass adds.
2. The same with every tile made different (1472 classes): the worst case for per-class allocation.
3. The real pass on a one-layer So400m lowered to the exchange level, when `--real FILE` names that IR.

Usage: python -m bench.bench_memory [--record] [--real exchange_level.mlir]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.common import header, peak_rss_mib
from ipu.backend.target import IPU21
from ipu.passes import memory_alloc as ma

TOKENS, WIDTH, MLP, LAYERS = 729, 1152, 4304, 27


def spread(total_bytes: int, tiles: int, ragged: int) -> np.ndarray:
    """Per-tile bytes of a tensor cut into `tiles` near-equal shards; `ragged` tail tiles get a smaller shard."""
    per = -(-total_bytes // tiles)
    col = np.full(tiles, per, np.int64)
    col[tiles - ragged :] = max(8, per // 2)
    return col


def synthetic_layer(distinct_tiles: bool = False) -> ma.Problem:
    t = IPU21
    n = t.num_tiles
    buffers: list[ma.Buffer] = []
    cols: list[np.ndarray] = []
    e0 = t.region0_element_bytes
    r0_hi = t.region0[1]
    support = [
        ("runtime_state", t.sram_base, t.runtime_state_bytes, 8),
        ("host_descriptors", t.sram_base + t.runtime_state_bytes, 256, 8),
        ("code", r0_hi - 3 * e0, 3 * e0, e0),
        ("exchange_tables", r0_hi - 6 * e0, 3 * e0, e0),
    ]
    for kind, addr, size, align in support:
        buffers.append(ma.Buffer(kind, "support", align, ma.REGION_0, resident=True, fixed=addr, kind=kind))
        cols.append(np.full(n, size, np.int64))
    # Resident FP8 weight sequences (27 layers) and F16 bias/norm sequences.
    weights = {
        "qkv_w": WIDTH * 3 * WIDTH,
        "out_w": WIDTH * WIDTH,
        "fc1_w": WIDTH * MLP,
        "fc2_w": MLP * WIDTH,
    }
    for name, elems in weights.items():
        buffers.append(ma.Buffer(name, "nn.param", 8, resident=True, host_io=True, count=LAYERS))
        cols.append(spread(elems, n, 64))
    for name in ("qkv_b", "out_b", "fc1_b", "fc2_b", "ln1_w", "ln1_b", "ln2_w", "ln2_b"):
        buffers.append(ma.Buffer(name, "nn.param", 8, resident=True, host_io=True, count=LAYERS))
        cols.append(spread(2 * (3 * WIDTH if name == "qkv_b" else MLP if name == "fc1_b" else WIDTH), 256, 0))
        cols[-1] = np.concatenate([cols[-1], np.zeros(n - 256, np.int64)])
    # One layer's activations in program order: (name, bytes of the whole tensor, lifetime in events, region).
    act = TOKENS * WIDTH * 2
    steps = [
        ("h", act, 6),
        ("ln1_in", act, 1),
        ("ln1", act, 1),
        ("x_rows", act * 4, 1),  # replicated GEMM row panels
        ("w_qkv_panels", WIDTH * 3 * WIDTH * 4, 1),
        ("qkv", 3 * act, 2),
        ("q", act, 2),
        ("k_rep", act * 8, 2),
        ("v_rep", act * 8, 2),
        ("scores", TOKENS * TOKENS * 16 * 4 // 8, 1),
        ("attn", act, 1),
        ("attn_rows", act * 4, 1),
        ("w_out_panels", WIDTH * WIDTH * 4, 1),
        ("out", act, 1),
        ("res1", act, 4),
        ("ln2_in", act, 1),
        ("ln2", act, 1),
        ("x2_rows", act * 4, 1),
        ("w_fc1_panels", WIDTH * MLP * 4, 1),
        ("fc1", TOKENS * MLP * 2, 1),
        ("gelu", TOKENS * MLP * 2, 1),
        ("g_rows", TOKENS * MLP * 2 * 4, 1),
        ("w_fc2_panels", MLP * WIDTH * 4, 1),
        ("fc2", act, 1),
        ("res2", act, 1),
    ]
    events = 2 * len(steps) + 2
    for i, (name, size, life) in enumerate(steps):
        first = 1 + 2 * i
        gemm = name in ("qkv", "out", "fc1", "fc2")
        region = ma.REGION_1 if gemm else ma.REGION_ANY
        buffers.append(
            ma.Buffer(name, f"op{i}", 16 if gemm else 8, region, first, min(events - 2, first + 2 * life))
        )
        cols.append(spread(size, n, 32 + i % 7))
    sizes = np.array(cols, np.int64)
    if distinct_tiles:
        sizes[-1] += np.arange(n) * 8  # every tile different: one class per tile
    pairs = np.array(
        [
            [
                buffers.index(next(b for b in buffers if b.name == x)),
                buffers.index(next(b for b in buffers if b.name == y)),
            ]
            for x, y in (("x_rows", "qkv"), ("attn_rows", "out"), ("x2_rows", "fc1"), ("g_rows", "fc2"))
        ]
    )
    return ma.Problem(t, buffers, sizes, events, pairs, host_events=(0, events - 1))


def run(problem: ma.Problem) -> tuple[float, ma.Placement]:
    t0 = time.perf_counter()
    placement = ma.allocate(problem)
    return time.perf_counter() - t0, placement


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", action="store_true", help="append the results to BENCHMARKS.md")
    ap.add_argument("--real", help="exchange-level IR of a So400m layer to run memory-plan on")
    args = ap.parse_args()
    lines = []
    for label, distinct in (("synthetic So400m layer", False), ("same, every tile distinct", True)):
        problem = synthetic_layer(distinct)
        times = []
        for _ in range(3):
            dt, placement = run(problem)
            times.append(dt)
        used = placement.class_high.max() - IPU21.sram_base
        lines.append(
            f"| {label} | {len(problem.buffers)} | {problem.sizes.shape[1]} | {int((problem.sizes > 0).sum())} | "
            f"{placement.num_classes} | {sorted(times)[1]:.3f} | {used / 1024:.0f} |"
        )
        print(lines[-1], flush=True)
    real = ""
    if args.real:
        from xdsl.context import Context
        from xdsl.parser import Parser

        from ipu.dialects.registry import all_dialects
        from ipu.passes.memory_plan import MemoryPlanPass

        ctx = Context()
        for name, factory in all_dialects():
            ctx.register_dialect(name, factory)
        t0 = time.perf_counter()
        module = Parser(ctx, open(args.real).read()).parse_module()
        t_parse = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            # Exchange tables at the seed's measured 27-layer size (~40-64 KiB): this IR is unscheduled.
            MemoryPlanPass(exchange_table_bytes=64 * 1024).apply(ctx, module)
            outcome = "placed"
        except Exception as e:  # noqa: BLE001 (report what happened, fit or not)
            outcome = f"failed: {str(e)[:300]}"
        t_pass = time.perf_counter() - t0
        plan = next((o for o in module.walk() if o.name == "memory.plan"), None)
        classes = plan.num_classes.value.data if plan is not None else "-"
        real = f"Real one-layer So400m (`{args.real}`): parse {t_parse:.2f} s, memory-plan {t_pass:.2f} s, {classes} tile classes, {outcome}."
        print(real)
    rss = peak_rss_mib()
    print(f"peak RSS {rss:.0f} MiB")
    if args.record:
        with open("BENCHMARKS.md", "a") as f:
            f.write(
                f"\n## Memory placement (issue 6)\n\nCommand: `python -m bench.bench_memory --record` ({header()}).\n\n"
                "| request set | buffers | tiles | (buffer, tile) shards | tile classes | allocate (s, median of 3) "
                "| highest end address above SRAM base (KiB) |\n|---|---:|---:|---:|---:|---:|---:|\n"
                + "\n".join(lines)
                + f"\n\nPeak RSS of the benchmark process: {rss:.0f} MiB.\n"
                + (f"\n{real}\n" if real else "")
            )


if __name__ == "__main__":
    main()
