"""Checks of pass options every pipeline gets (`parse_pipeline`), beside each pass's own `__post_init__` checks.

- A repeated option (`memory-plan{tiles=4 tiles=8}`, also spelled `tiles` and `tiles` with dashes) is refused:
  xDSL's spec parser keeps the last value silently.
- Integer options: an integer (not a boolean), inside int32 (a wrapped id or size is never meant), and at
  least the least meaningful value their default implies: default >= 1 -> at least 1 (a size or count; `min_*`
  options: at least 0), default 0 -> at least 0 (0: "automatic" / "from the IR"), default -1 -> at least -1 (-1:
  "measured"). `LOWER_BOUNDS` names the exceptions.
- Float options: finite and non-negative.
- Boolean options: true or false. String-list options: no empty or repeated entry.

Every failure is a `ValueError` naming the pass, the option and the value.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

from xdsl.passes import ModulePass, PassPipeline

INT32_MAX = 2**31 - 1
# (pass, option) -> least value, where the default's rule above does not fit.
LOWER_BOUNDS: dict[tuple[str, str], int | None] = {
    ("nn-quantize-weights", "scale"): None,  # signed; the pass checks its range
    ("memory-plan", "host_descriptor_bytes"): 0,
}


def check_pass_options(p: ModulePass) -> None:
    if not dataclasses.is_dataclass(p):
        return
    for f in dataclasses.fields(p):
        value = getattr(p, f.name)
        default = f.default
        label = f"{p.name}: option '{f.name}'"
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"{label} must be true or false, got {value!r}")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{label} must be an integer, got {value!r}")
            if (p.name, f.name) in LOWER_BOUNDS:
                least = LOWER_BOUNDS[(p.name, f.name)]
            elif default >= 1:
                least = 0 if f.name.startswith("min_") else 1
            else:
                least = min(default, 0) if default >= -1 else None
            if least is not None and value < least:
                raise ValueError(f"{label} must be at least {least}, got {value}")
            if abs(value) > INT32_MAX:
                raise ValueError(f"{label} must fit in 32 bits, got {value}")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{label} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{label} must be finite and non-negative, got {value}")
        elif isinstance(default, tuple) and isinstance(value, tuple):
            seen = set()
            for item in value:
                if isinstance(item, str) and not item:
                    raise ValueError(f"{label} has an empty entry")
                if item in seen:
                    raise ValueError(f"{label} lists {item!r} twice")
                seen.add(item)


_KEY = re.compile(r"([A-Za-z_][\w-]*)\s*=")


def repeated_options(spec: str) -> list[tuple[str, str]]:
    """(pass, option) of every option given twice in one pass's braces of an xDSL pipeline spec."""
    out = []
    i, n = 0, len(spec)
    name_start = 0
    while i < n:
        ch = spec[i]
        if ch == ",":
            name_start = i + 1
        elif ch == "{":
            name = spec[name_start:i].strip()
            j, depth, in_str, body = i + 1, 1, False, []
            while j < n and depth:
                c = spec[j]
                if in_str:
                    in_str = not (c == '"' and spec[j - 1] != "\\")
                    body.append(" ")
                elif c == '"':
                    in_str = True
                    body.append(" ")
                else:
                    depth += {"{": 1, "}": -1}.get(c, 0)
                    body.append(c if depth else "")
                j += 1
            seen = set()
            for key in _KEY.findall("".join(body)):
                k = key.replace("-", "_")
                if k in seen:
                    out.append((name, k))
                seen.add(k)
            i = j
            continue
        i += 1
    return out


def parse_pipeline(
    available: dict[str, Callable[[], type[ModulePass]]], spec: str, callback=None
) -> PassPipeline:
    """xDSL's `PassPipeline.parse_spec` with the checks of this module (raises ValueError)."""
    for name, key in repeated_options(spec):
        raise ValueError(f"{name}: option '{key}' is given twice")
    try:
        pipeline = PassPipeline.parse_spec(available, spec, callback)
    except ValueError as e:
        if str(e).startswith("Incompatible types"):
            _name_the_mistyped_option(available, spec)
        raise
    for p in pipeline.passes:
        check_pass_options(p)
    return pipeline


def _name_the_mistyped_option(available: dict[str, Callable[[], type[ModulePass]]], spec: str) -> None:
    """Raises xDSL's "Incompatible types: given ('1e3',), expected <class 'int'>" again with the pass and the
    option it is about (xDSL's message names neither), if one option alone reproduces it."""
    from xdsl.utils.arg_spec import ArgSpec
    from xdsl.utils.arg_spec import parse_pipeline as parse_specs

    for s in parse_specs(spec):
        cls = available[s.name]()
        for key, value in s.normalize_parameter_names().parameters.items():
            try:
                cls.from_spec(ArgSpec(s.name, {key: value}))
            except ValueError as e:
                if str(e).startswith("Incompatible types"):
                    shown = ",".join(str(v) for v in value)
                    raise ValueError(
                        f"{s.name}: option '{key}' = {shown!r} has the wrong type ({str(e).split(': ', 1)[1]})"
                    ) from None
            except Exception:  # noqa: BLE001, S112 (another problem of that option alone: not the one looked for)
                continue
