"""Kernel benchmarks (issue 4): GEMM efficiency on one tile (simulator), poplibs estimator formulas side by side,
code size of the kernel set.

    python -m bench.bench_kernels            # prints a Markdown section
    python -m bench.bench_kernels --append   # also appends it to BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from bench.common import header
from ipu.backend.kernels import elementwise as E
from ipu.backend.kernels import gemm as G
from ipu.backend.kernels import pack as P
from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.harness import code_bytes, run_call
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
FRAME, A_ADDR, C_ADDR, W_ADDR = 0x58000, 0x60000, 0x80000, 0xA0000


def _agg(tmax: int, tmin: int, k: int, workers_used: int) -> int:
    """poplibs: max over workers of 6 T, and the shortest worker's 6 T + k (0 when a worker is unused)."""
    lo = 6 * tmin if workers_used == 6 else 0
    return max(6 * tmax, lo + k)


def poplibs_f16(m: int, k: int, n: int) -> int:
    """ConvPartial1x1Out, half in / half partials, 16 AMP units (IPU_FACTS.md section 7), as a matmul:
    one conv group, nIn = K/16 input groups, nOut = N/16 output groups, P = 1, L = 32 (ld128)."""
    n_in, n_out, load = k // 16, n // 16, 32
    ret_first, ret_second = 7, 3
    used = min(6, m)
    tmax_n, tmin_n = math.ceil(m / 6), m // 6

    def t(rows, z):
        if rows == 0:
            base = 20 + (1 if z else 2)
        elif rows == 1:
            base = 31 + (1 if z else 2)
        elif rows == 2:
            base = 40 + (1 if z else 2)
        else:
            base = (37 if z else 38) + 4 * (rows - 3)
        return base - ret_first

    def agg(z):
        return _agg(t(tmax_n, z), t(tmin_n, z), 14, used)

    c = 1
    return (
        50
        + 6 * (ret_first + ret_second * (n_in - 1))
        + 12
        + c
        + (n_in - 1) * (16 - c + n_out * (19 + (6 + load + agg(0))))
        + 11
        + n_out * (19 - c + (7 + load + agg(1)))
    )


def poplibs_fp8(m: int, k: int, n: int) -> int:
    """ConvPartial1x1Out, FP8 path (IPU_FACTS.md section 7): nIn = K/32, nOut = N/16, L = 32."""
    n_in, n_out, load = k // 32, n // 16, 32
    used = min(6, m)
    tmax_n, tmin_n = math.ceil(m / 6), m // 6

    def t(rows, z):
        tail = {0: 4, 1: 18 - 5 * z, 2: 23 - 5 * z}.get(rows, 27 - 5 * z + 4 * (rows - 3))
        return 17 + tail

    def agg(z):
        return _agg(t(tmax_n, z), t(tmin_n, z), 14, used)

    return 46 + 21 + n_out * (46 + (131 + load + agg(1)) + (n_in - 1) * (108 + load + agg(0)))


def gemm_row(lib: str, prec: str, m: int, k: int, n: int) -> dict:
    rng = np.random.default_rng(0)
    if prec == G.F16:
        a = (rng.integers(-64, 64, (m, k)) / 16).astype(np.float16)
        b = (rng.integers(-64, 64, (k, n)) / 16).astype(np.float16)
    else:
        a = rng.integers(0x20, 0x50, (m, k)).astype(np.uint8)
        b = rng.integers(0x20, 0x50, (k, n)).astype(np.uint8)
    g = G.Gemm(m, k, n, prec, "init", "ld128", a=A_ADDR, weights=W_ADDR, c=C_ADDR)
    sim = Simulator(TARGET)
    cyc, _ = run_call(sim, lib, FRAME, g.frame, g.entry, {A_ADDR: a, W_ADDR: G.pack_weights(b, prec)})
    out = sim.read(C_ADDR, m * n * 2, np.float16, tiles=[0]).reshape(m, n)
    exact = np.array_equal(out.view(np.uint16), G.semantics(g, a, b).view(np.uint16))
    pop = poplibs_f16(m, k, n) if prec == G.F16 else poplibs_fp8(m, k, n)
    peak = G.PEAK_MACS[prec]
    return dict(
        prec=prec,
        shape=(m, k, n),
        cycles=cyc,
        estimate=G.cycles(g),
        exact=exact,
        eff=G.macs(g) / cyc / peak,
        poplibs=pop,
        pop_eff=G.macs(g) / pop / peak,
    )


def run() -> str:
    lib = G.library_asm(TARGET.sram_base)
    rows = []
    for prec in (G.F16, G.FP8):
        for s in (16, 32, 64, 128, 256):
            k = max(s, G.KBLOCK[prec])
            rows.append(gemm_row(lib, prec, s, k, s))
    out = [f"### GEMM on one tile ({header()})", ""]
    out.append(
        "Simulator cycles of one call (supervisor entry to return; init mode, ld128 weights, row-major A and C), "
        "MACs/cycle as a share of the AMP peak (64 F16, 128 FP8), our estimate, and poplibs' ConvPartial1x1Out "
        "estimator formulas (IPU_FACTS.md section 7) for the same shard. FP8 at 16 uses K = 32 (one weight block)."
    )
    out += [
        "",
        "| precision | M x K x N | cycles | estimate | bit-exact | efficiency | poplibs cycles | poplibs eff. |",
    ]
    out.append("|---|---|---:|---:|---|---:|---:|---:|")
    for r in rows:
        m, k, n = r["shape"]
        out.append(
            f"| {r['prec']} | {m}x{k}x{n} | {r['cycles']} | {r['estimate']} | {'yes' if r['exact'] else 'NO'} | "
            f"{r['eff']:.1%} | {r['poplibs']} | {r['pop_eff']:.1%} |"
        )
    out += ["", *row_kernels()]
    gemm_bytes = code_bytes(lib, TARGET)
    ew_bytes = code_bytes(E.library_asm(), TARGET)
    rows_bytes = code_bytes(R.library_asm(), TARGET)
    pack_bytes = code_bytes(P.library_asm(), TARGET) - rows_bytes
    total = gemm_bytes + ew_bytes + rows_bytes + pack_bytes
    out += [
        "",
        f"Code size: GEMM set {gemm_bytes} bytes (F16 + FP8, supervisors for ld128 and ld64, init and acc "
        f"workers); element-wise set {ew_bytes} bytes; row kernels {rows_bytes} bytes (GELU, layer norm, softmax, "
        f"row sum/max, three FlashAttention steps, shared supervisor); pack kernels {pack_bytes} bytes; "
        f"total {total} bytes.",
    ]
    return "\n".join(out) + "\n"


def row_kernels() -> list[str]:
    """Cycles of the row and pack kernels on one tile at So400m-like per-tile shards (simulator = estimate)."""
    lib = P.library_asm(TARGET.sram_base)
    x_addr, y_addr, z_addr, o_addr, s_addr = 0x60000, 0x70000, 0x72000, 0x80000, 0x9C000
    rng = np.random.default_rng(0)
    calls = [
        ("gelu, 2304 halves", R.Rows("gelu", 576, in0=x_addr, out=o_addr), 2304),
        ("layernorm 12 x 1152", R.Rows("layernorm", 12, 1152, x_addr, y_addr, z_addr, o_addr), 12 * 1152),
        ("softmax 16 x 256", R.Rows("softmax", 16, 256, in0=x_addr, out=o_addr), 16 * 256),
        ("rowsum 16 x 256", R.Rows("rowsum", 16, 256, in0=x_addr, out=o_addr), 16 * 256),
        ("rowmax 16 x 256", R.Rows("rowmax", 16, 256, in0=x_addr, out=o_addr), 16 * 256),
        (
            "flash_stats 16 x 64",
            R.Rows(
                "flash_stats", 16, 64, in0=x_addr, out=x_addr, st0=s_addr, st1=s_addr + 64, st2=s_addr + 128
            ),
            16 * 64,
        ),
        ("flash_merge 16 x 72", R.Rows("flash_merge", 16, 72, in0=x_addr, in1=y_addr, st0=s_addr), 16 * 72),
        ("flash_final 16 x 72", R.Rows("flash_final", 16, 72, in0=x_addr, out=o_addr, st0=s_addr), 16 * 72),
        ("to_panels 64 x 128 halves", P.to_panels(64, 256, x_addr, o_addr), 64 * 128),
        ("weights_from_bt fp8 64 x 128", P.weights_from_bt(64, 128, "fp8", x_addr, o_addr), 64 * 128),
        ("weights_f16 (transpose) 64 x 64", P.WeightsF16(64, 64, x_addr, o_addr), 64 * 64),
        ("weights_fp8 (byte transpose) 64 x 64", P.WeightsFP8(64, 64, x_addr, o_addr), 64 * 64),
        ("weights_fp8 (byte transpose) 128 x 96", P.WeightsFP8(128, 96, x_addr, o_addr), 128 * 96),
    ]
    out = [
        "Row and pack kernels (one call, simulator cycles = estimate; inputs are random, state arrays written):",
        "",
        "| kernel, shape | elements | cycles | estimate | cycles / element |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, call, elems in calls:
        sim = Simulator(TARGET)
        mem = {a: (rng.standard_normal(8192) * 0.5).astype(np.float32) for a in (x_addr, y_addr, z_addr)}
        mem[s_addr] = np.concatenate([np.full(16, -np.inf, np.float32), np.zeros(32, np.float32) + 1])
        cyc, _ = run_call(sim, lib, FRAME, call.frame, call.entry, mem)
        est = R.cycles(call) if isinstance(call, R.Rows) else call.cycles()
        out.append(f"| {name} | {elems} | {cyc} | {est} | {cyc / elems:.2f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args()
    text = run()
    print(text)
    if args.append:
        with open("BENCHMARKS.md") as f:
            have = f.read()
        with open("BENCHMARKS.md", "a") as f:
            if "## Kernels (issue 4)" not in have:
                f.write("\n## Kernels (issue 4)\n\nCommand: `python -m bench.bench_kernels --append`.\n\n")
            f.write(text)


if __name__ == "__main__":
    main()
