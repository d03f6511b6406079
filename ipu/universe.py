"""The project as an xDSL plugin: its dialects, passes and the `ipu-asm` target for `xdsl-opt` and the other
xDSL tools, found through the `xdsl.universe` entry point in pyproject.toml (`xdsl.universe.Universe`).

    xdsl-opt model.mlir -p nn-fuse-qkv,nn-outline-repeat

Left out because xDSL 0.74 defines the same names, and a clash makes every xDSL tool refuse to start: the `asm`
dialect (xDSL has its own `asm`; IR of this project's `asm` dialect is for `ipu-opt`) and the generic passes
`ipu-opt` re-registers (`canonicalize`, `cse`, `dce`: xDSL's own). The binary `ipu-package` target writes bytes
that `xdsl-opt`'s text output cannot carry: use `ipu-opt -t ipu-package -o FILE`.
"""

from __future__ import annotations

from xdsl.universe import Universe

from ipu.dialects.registry import _PROJECT_DIALECTS
from ipu.dialects.registry import _loader as _dialect_loader
from ipu.passes.registry import _PROJECT_PASSES
from ipu.passes.registry import _loader as _pass_loader

CLASHING_DIALECTS = {"asm"}


def _asm_target():
    from ipu.backend.asm_target import IpuAsmTarget

    return IpuAsmTarget


IPU_UNIVERSE = Universe(
    all_dialects={
        name: _dialect_loader(module, attr)
        for name, module, attr in _PROJECT_DIALECTS
        if name not in CLASHING_DIALECTS
    },
    all_passes={name: _pass_loader(module, cls) for name, module, cls in _PROJECT_PASSES},
    all_targets={"ipu-asm": _asm_target},
)
