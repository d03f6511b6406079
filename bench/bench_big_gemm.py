"""One So400m-sized linear (f16 activations x FP8 weights + bias, the default precision policy's weights) on the
full IPU21, through the default planning and the asm lowering, run once on the simulator: the plan tile-plan
chose, the simulated cycles split per kernel and into compute / exchange / sync, and the simulator's wall time.

    python -m bench.bench_big_gemm                  # fc2 part: [729, 2160] x [2160, 1152]
    python -m bench.bench_big_gemm 729 1152 1152    # M K N: a q/k/v/o projection
"""

from __future__ import annotations

import sys
import time

import numpy as np

from bench.common import header


def main() -> None:
    from xdsl.builder import Builder
    from xdsl.context import Context
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ModuleOp, TensorType, f32
    from xdsl.ir import Block, Region
    from xdsl.passes import PassPipeline
    from xdsl.rewriter import InsertPoint

    from ipu.backend.lower import lower_to_package
    from ipu.backend.lower.lowering import pipeline_spec
    from ipu.backend.target import IPU21
    from ipu.dialects import nn
    from ipu.passes.registry import all_passes
    from ipu.runtime.host import Session
    from ipu.runtime.reports.profile_sim import profile_from_run

    m, k, n = (int(a) for a in sys.argv[1:4]) if len(sys.argv) >= 4 else (729, 2160, 1152)
    block = Block()
    b = Builder(InsertPoint.at_end(block))
    x = b.insert(nn.InputOp("x", TensorType(f32, [m, k]))).result
    w = b.insert(nn.ParamOp("w", TensorType(f32, [n, k]))).result
    bias = b.insert(nn.ParamOp("b", TensorType(f32, [n]))).result
    y = b.insert(nn.LinearOp(x, w, bias, TensorType(f32, [m, n]))).result
    b.insert(nn.OutputOp("y", y))
    b.insert(func.ReturnOp())
    module = ModuleOp([func.FuncOp("lin", ((), ()), Region(block))])
    # The default pipeline without the model-level rewrites (one linear: no MLP, no attention).
    spec = pipeline_spec(IPU21).removeprefix("nn-fold-probe-attention,nn-split-mlp,")
    PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), module)
    plan = next(o for o in module.walk() if isinstance(o, nn.LinearOp)).attributes["tile.plan"]
    pkg = lower_to_package(module)
    rng = np.random.default_rng(0)
    session = Session(pkg)
    session.upload_parameters(
        {
            "w": (rng.standard_normal((n, k)) * 0.02).astype(np.float32),
            "b": rng.standard_normal(n).astype(np.float32),
        }
    )
    t0 = time.perf_counter()
    result = session.run({"x": rng.standard_normal((m, k)).astype(np.float32)}, profile=True)
    wall = time.perf_counter() - t0
    doc = profile_from_run(pkg, result, False)
    print(f"### [{m}, {k}] x [{k}, {n}] on 1472 tiles ({header()})\n")
    print(f"plan: {plan}")
    print(f"cycles {result.cycles:,}: {doc['totals']}; simulator {wall:.1f} s")
    for kern in doc["kernels"]:
        print(f"  {kern['name']}: {kern['calls']} calls, {kern['cycles']:,} cycles")


if __name__ == "__main__":
    main()
