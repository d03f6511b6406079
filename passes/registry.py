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
    ("nn-quantize-activations", "ipu.passes.nn_quantize_activations", "NNQuantizeActivationsPass"),
    ("nn-fuse-sum-activation", "ipu.passes.nn_fuse_sum_activation", "NNFuseSumActivationPass"),
    ("nn-fuse-sum-add", "ipu.passes.nn_fuse_sum_add", "NNFuseSumAddPass"),
    ("tile-fuse-sum-cast", "ipu.passes.tile_fuse_sum_cast", "TileFuseSumCastPass"),
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
    ("asm-lower", "ipu.passes.asm_passes", "AsmLowerPass"),
    ("asm-lower-repeat", "ipu.passes.asm_passes", "AsmLowerRepeatPass"),
    ("asm-lower-calls", "ipu.passes.asm_passes", "AsmLowerCallsPass"),
    ("asm-link", "ipu.passes.asm_passes", "AsmLinkPass"),
    ("ipu-asm-pipeline", "ipu.passes.asm_passes", "IpuAsmPipelinePass"),
]

_XDSL_PASSES: list[tuple[str, str, str]] = [
    ("canonicalize", "xdsl.transforms.canonicalize", "CanonicalizePass"),
    ("cse", "xdsl.transforms.common_subexpression_elimination", "CommonSubexpressionElimination"),
    ("dce", "xdsl.transforms.dead_code_elimination", "DeadCodeElimination"),
]


# Summaries of the xDSL passes whose classes have no docstring (`ipu-opt --list-passes`).
_XDSL_SUMMARIES = {
    "cse": "xDSL's common subexpression elimination: merges identical side-effect-free ops.",
    "dce": "xDSL's dead code elimination: erases ops whose results are unused and that have no side effects.",
}


def _loader(module: str, cls: str) -> Callable[[], type[ModulePass]]:
    return lambda: getattr(import_module(module), cls)


def all_passes() -> list[tuple[str, Callable[[], type[ModulePass]]]]:
    """Every pass whose module exists, as (name, lazy class factory)."""
    return [
        (name, _loader(module, cls))
        for name, module, cls in _XDSL_PASSES + _PROJECT_PASSES
        if find_spec(module) is not None
    ]


def _field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a pass class's options (the string literal under each field), first line."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith(("xdsl.", "builtins")):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for a, b in zip(body, body[1:]):
            if (
                isinstance(a, ast.AnnAssign)
                and isinstance(a.target, ast.Name)
                and isinstance(b, ast.Expr)
                and isinstance(b.value, ast.Constant)
                and isinstance(b.value.value, str)
            ):
                docs[a.target.id] = " ".join(b.value.value.strip().split())
    return docs


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return "none" if v is None else str(v)


def describe_pass(cls: type[ModulePass]) -> tuple[str, list[str]]:
    """(one-line summary, one line per option: `name: type = default  doc`) of a pass class."""
    import dataclasses

    doc = (cls.__doc__ or "").strip()
    summary = " ".join(doc.split("\n\n")[0].split()) if doc else ""
    if summary.startswith(cls.__name__ + "("):  # a dataclass's generated docstring: no summary
        summary = ""
    if not summary:  # the module's docstring, first sentence
        import sys

        mdoc = (getattr(sys.modules.get(cls.__module__), "__doc__", None) or "").strip()
        summary = " ".join(mdoc.split("\n\n")[0].split())
    if len(summary) > 160 and ". " in summary:
        summary = summary.split(". ")[0] + "."
    options = []
    docs = _field_docs(cls)
    for f in dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ():
        if f.name == "name" or not f.init:
            continue
        kind = getattr(f.type, "__name__", str(f.type))
        default = f.default if f.default is not dataclasses.MISSING else None
        line = f"{f.name}: {kind} = {_value(default)}"
        if f.name in docs:
            line += f"  -- {docs[f.name]}"
        options.append(line)
    return summary, options


def list_passes() -> str:
    """Every pass `ipu-opt` knows with its one-line summary and options (`ipu-opt --list-passes`)."""
    out = []
    for name, factory in all_passes():
        summary, options = describe_pass(factory())
        summary = summary or _XDSL_SUMMARIES.get(name, "")
        out.append(f"{name}: {summary or '(no summary)'}")
        out += [f"    {o}" for o in options]
    return "\n".join(out)
