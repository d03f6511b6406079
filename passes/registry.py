"""The passes `ipu-opt` knows: this project's own and the generic xDSL ones that make sense on its IR.

Each entry is (pass name, module path, class name); classes import lazily so that `ipu-opt` starts fast.
To add a pass, add one line to `_PROJECT_PASSES`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from importlib.util import find_spec

from xdsl.passes import ModulePass

_PROJECT_PASSES: list[tuple[str, str, str]] = [
    ("nn-fold-probe-attention", "ipu.passes.nn_fold_probe_attention", "NNFoldProbeAttentionPass"),
    ("nn-fuse-qkv", "ipu.passes.nn_fuse_qkv", "NNFuseQKVPass"),
    ("nn-quantize-weights", "ipu.passes.nn_quantize", "NNQuantizeWeightsPass"),
    ("nn-outline-repeat", "ipu.passes.nn_outline_repeat", "NNOutlineRepeatPass"),
    ("nn-split-mlp", "ipu.passes.nn_split_mlp", "NNSplitMLPPass"),
    ("nn-split-attention-keys", "ipu.passes.nn_split_attention_keys", "NNSplitAttentionKeysPass"),
    ("nn-split-k", "ipu.passes.nn_split_k", "NNSplitKPass"),
    ("nn-hoist-stacked", "ipu.passes.nn_hoist_stacked", "NNHoistStackedPass"),
    ("tile-plan", "ipu.passes.tile_plan", "TilePlanPass"),
    ("tile-balance-homes", "ipu.passes.tile_balance_homes", "TileBalanceHomesPass"),
    ("exchange-lower", "ipu.passes.exchange_lower", "ExchangeLowerPass"),
    ("exchange-schedule", "ipu.passes.exchange_schedule", "ExchangeSchedulePass"),
    ("nn-to-exchange-pipeline", "ipu.passes.exchange_pipeline", "NNToExchangePipelinePass"),
    ("kernel-select", "ipu.passes.kernel_select", "KernelSelectPass"),
    ("lowering-storage", "ipu.passes.lowering_storage", "LoweringStoragePass"),
    ("memory-plan", "ipu.passes.memory_plan", "MemoryPlanPass"),
    ("ipu-compile-pipeline", "ipu.passes.compile_pipeline", "IpuCompilePipelinePass"),
    ("nn-canonicalize", "ipu.passes.nn_canonicalize", "NNCanonicalizePass"),
]

_XDSL_PASSES: list[tuple[str, str, str]] = [
    ("canonicalize", "xdsl.transforms.canonicalize", "CanonicalizePass"),
    ("cse", "xdsl.transforms.common_subexpression_elimination", "CommonSubexpressionElimination"),
    ("dce", "xdsl.transforms.dead_code_elimination", "DeadCodeElimination"),
]


def _loader(module: str, cls: str) -> Callable[[], type[ModulePass]]:
    return lambda: getattr(import_module(module), cls)


def all_passes() -> list[tuple[str, Callable[[], type[ModulePass]]]]:
    """Every pass whose module exists, as (name, lazy class factory)."""
    return [
        (name, _loader(module, cls))
        for name, module, cls in _XDSL_PASSES + _PROJECT_PASSES
        if find_spec(module) is not None
    ]
