"""The dialects `ipu-opt` knows: this project's own and the builtin ones its IR uses.

Each entry is (name, factory); factories import lazily so that `ipu-opt --help` stays fast.
To add a dialect, add one line to `_PROJECT_DIALECTS`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from importlib.util import find_spec

from xdsl.ir import Dialect

# (dialect name, module path, attribute holding the Dialect object)
_PROJECT_DIALECTS: list[tuple[str, str, str]] = [
    ("nn", "ipu.dialects.nn", "NN"),
    ("asm", "ipu.dialects.asm", "ASM"),
    ("tile", "ipu.dialects.tile", "TILE"),
    ("exchange", "ipu.dialects.exchange", "EXCHANGE"),
    ("memory", "ipu.dialects.memory", "MEMORY"),
]

_BUILTIN_DIALECTS: list[tuple[str, str, str]] = [
    ("builtin", "xdsl.dialects.builtin", "Builtin"),
    ("func", "xdsl.dialects.func", "Func"),
    ("arith", "xdsl.dialects.arith", "Arith"),
    ("test", "xdsl.dialects.test", "Test"),
]


def _loader(module: str, attr: str) -> Callable[[], Dialect]:
    return lambda: getattr(import_module(module), attr)


def all_dialects() -> list[tuple[str, Callable[[], Dialect]]]:
    """Every dialect whose module exists, as (name, lazy factory)."""
    return [
        (name, _loader(module, attr))
        for name, module, attr in _BUILTIN_DIALECTS + _PROJECT_DIALECTS
        if find_spec(module) is not None
    ]
