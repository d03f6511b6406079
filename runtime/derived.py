"""Parameters derived from other parameters on the host, when they are uploaded.

A rewrite may fold constants of the model into a new parameter (e.g. `nn-fold-probe-attention`: the MAP head's
probe query through its key projection). Such an `nn.param` carries a `derived` property naming a recipe of this
module and its arguments; parameter arguments name weights-file tensors, optionally a range of rows:
"head.attention.in_proj_weight[1152:2304]". The package lists every derived parameter's spec
(`metadata["derived_parameters"]`) and `Session.upload_parameters` computes them from the uploaded weights; the
reference evaluator does the same, so both see the same values. Recipes compute in float64 and return float32.

Recipes:

- `probe_key_scores` (query, wq, bq (optional), wk; heads, scale): the per-head score directions of an attention
  whose query is a constant: q = query @ wq^T + bq, and for head h (channels [h*dh, (h+1)*dh)) row h is
  u_h = scale * wk_h^T q_h, so that scale * q_h . (x wk_h^T + bk_h) = x . u_h + scale * q_h . bk_h. The constant
  term is the same for every key, so the softmax over the keys drops it: bk is not an argument. Result [heads, D].
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

_REF = re.compile(r"^(?P<name>[^\[\]]+)(\[(?P<lo>\d+):(?P<hi>\d+)\])?$")


class DerivationError(ValueError):
    """A derived parameter cannot be computed: an unknown recipe, a missing or mis-shaped argument."""


def spec_from_attr(attr) -> dict[str, Any]:
    """The `derived` property of an `nn.param` (a DictionaryAttr) as a plain, JSON-able dict."""
    from xdsl.dialects.builtin import ArrayAttr, FloatAttr, IntegerAttr, StringAttr

    def value(a):
        if isinstance(a, StringAttr):
            return a.data
        if isinstance(a, IntegerAttr):
            return int(a.value.data)
        if isinstance(a, FloatAttr):
            return float(a.value.data)
        if isinstance(a, ArrayAttr):
            return [value(x) for x in a.data]
        raise DerivationError(f"derived parameter spec: unsupported attribute {a}")

    return {k: value(v) for k, v in attr.data.items()}


def spec_to_attr(spec: Mapping[str, Any]):
    """The inverse of `spec_from_attr` (strings, ints, floats and lists of strings)."""
    from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FloatAttr, IntegerAttr, StringAttr, f32, i64

    def attr(v):
        if isinstance(v, str):
            return StringAttr(v)
        if isinstance(v, bool | int):
            return IntegerAttr(int(v), i64)
        if isinstance(v, float):
            return FloatAttr(v, f32)
        if isinstance(v, list | tuple):
            return ArrayAttr([attr(x) for x in v])
        raise DerivationError(f"derived parameter spec: unsupported value {v!r}")

    return DictionaryAttr({k: attr(v) for k, v in spec.items()})


def resolve_ref(ref: str, weights: Mapping[str, np.ndarray], what: str) -> np.ndarray:
    """A parameter argument: "name" or "name[lo:hi]" (rows lo..hi of the tensor's first dimension)."""
    m = _REF.match(ref)
    if m is None:
        raise DerivationError(f"{what}: argument {ref!r} is not 'name' or 'name[lo:hi]'")
    try:
        t = np.asarray(weights[m["name"]])
    except KeyError:
        raise DerivationError(f"{what}: parameter {m['name']!r} is missing from the weights") from None
    if m["lo"] is not None:
        lo, hi = int(m["lo"]), int(m["hi"])
        if not 0 <= lo < hi <= t.shape[0]:
            raise DerivationError(
                f"{what}: rows [{lo}:{hi}] are outside {m['name']!r} of shape {list(t.shape)}"
            )
        t = t[lo:hi]
    return t.astype(np.float64)  # after the slice: only the rows used are converted


def _probe_key_scores(spec, weights, shape, what):
    heads, scale = int(spec["heads"]), float(spec["scale"])
    if heads < 1 or not np.isfinite(scale):
        raise DerivationError(
            f"{what}: probe_key_scores needs heads >= 1 and a finite scale, got {heads}, {scale}"
        )
    wq = resolve_ref(spec["wq"], weights, what)
    wk = resolve_ref(spec["wk"], weights, what)
    query = resolve_ref(spec["query"], weights, what)
    d = wk.shape[0] if wk.ndim == 2 else -1  # the attention's width (the key projection's out-dimension)
    if wq.ndim != 2 or d <= 0 or query.size != wq.shape[1] or wq.shape[0] != d or d % heads:
        raise DerivationError(
            f"{what}: probe_key_scores needs one query row and q / k projections to one width of {heads} heads: "
            f"query {list(query.shape)}, wq {list(wq.shape)}, wk {list(wk.shape)}"
        )
    q = query.reshape(1, -1) @ wq.T
    if spec.get("bq"):
        bq = resolve_ref(spec["bq"], weights, what)
        if bq.size != d:
            raise DerivationError(f"{what}: bq has {bq.size} elements, expected {d}")
        q = q + bq.reshape(1, -1)
    dh = d // heads
    qh = q.reshape(heads, dh)
    u = np.einsum("hj,hji->hi", qh, wk.reshape(heads, dh, -1)) * scale
    return u.astype(np.float32)


RECIPES: dict[str, Callable[..., np.ndarray]] = {
    "probe_key_scores": _probe_key_scores,
}


def derive(name: str, spec: Mapping[str, Any], shape, weights: Mapping[str, np.ndarray]) -> np.ndarray:
    """The value of derived parameter `name` (of `shape`) from `weights`."""
    what = f"derived parameter {name!r}"
    recipe = RECIPES.get(spec.get("recipe", ""))
    if recipe is None:
        raise DerivationError(f"{what}: unknown recipe {spec.get('recipe')!r} (known: {', '.join(RECIPES)})")
    out = recipe(spec, weights, tuple(shape), what)
    if tuple(out.shape) != tuple(shape):
        raise DerivationError(f"{what}: the recipe gives shape {list(out.shape)}, expected {list(shape)}")
    return out


class WithDerived(Mapping):
    """`weights` plus the derived parameters {name: (spec, shape)}, computed on first access (a derived name that
    `weights` holds already, e.g. values read back from a device, is taken as given)."""

    def __init__(self, weights: Mapping[str, np.ndarray], specs: Mapping[str, tuple[Mapping, tuple]]):
        self.weights, self.specs, self._cache = weights, dict(specs), {}

    def __getitem__(self, name: str):
        if name in self.specs and name not in self.weights:
            if name not in self._cache:
                spec, shape = self.specs[name]
                self._cache[name] = derive(name, spec, shape, self.weights)
            return self._cache[name]
        return self.weights[name]

    def __contains__(self, name: object) -> bool:
        return name in self.specs or name in self.weights

    def __iter__(self) -> Iterator[str]:
        yield from self.specs
        yield from (k for k in self.weights if k not in self.specs)

    def __len__(self) -> int:
        return len(self.specs) + sum(1 for k in self.weights if k not in self.specs)


def derived_specs(root) -> dict[str, tuple[dict[str, Any], tuple[int, ...]]]:
    """{name: (spec, shape)} of the derived `nn.param`s under the op `root` (a module or function); two different
    recipes under one name are an error."""
    from ipu.dialects import nn

    out: dict[str, tuple[dict[str, Any], tuple[int, ...]]] = {}
    for op in root.walk():
        if isinstance(op, nn.ParamOp) and op.derived is not None:
            entry = (spec_from_attr(op.derived), tuple(op.result.type.get_shape()))
            if out.setdefault(op.param_name, entry) != entry:
                raise DerivationError(
                    f"nn.param {op.param_name!r}: two derived parameters of this name with different recipes"
                )
    return out


def with_derived(weights: Mapping[str, np.ndarray], root) -> Mapping[str, np.ndarray]:
    """`weights` plus the derived parameters of the IR under `root` (the reference evaluator's and the tile
    interpreter's view of the parameters: the same as the host's after an upload)."""
    specs = derived_specs(root)
    return WithDerived(weights, specs) if specs else weights


def with_package_derived(weights: Mapping[str, np.ndarray], package) -> Mapping[str, np.ndarray]:
    """`weights` plus the derived parameters a package lists (`metadata["derived_parameters"]`)."""
    listed = package.metadata.get("derived_parameters") or {}
    if not listed:
        return weights
    return WithDerived(weights, {n: (d["spec"], tuple(d["shape"])) for n, d in listed.items()})
