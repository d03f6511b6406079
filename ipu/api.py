"""The Python API: compile a model to a package, open it on the device, run it as often as needed.

    import ipu

    pkg = ipu.compile("siglip-tiny", tiles=16)              # a preset, a config, a config.json or nn IR
    session = ipu.Session(pkg)                              # parameters uploaded once
    x = np.zeros(session.input_shape, np.float32)
    out = session.run(x)                                    # {"last_hidden_state": ..., "pooler_output": ...}
    out = session.run(x)                                    # again: the parameters stay resident

This is a thin layer over the pieces the tools use (`ipu.backend.lower.compile_model`, `ipu.backend.target`,
`ipu.frontend.weights.load_checkpoint` / `random_weights`, `ipu.runtime.host.Session`); `ipu-run --model M
--tiles N` compiles and runs the same package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from os import PathLike
from pathlib import Path

import numpy as np

from ipu.runtime.package import Package

__all__ = ["compile", "load", "Session", "target"]

DEFAULT_SRAM_KIB = 624


def target(tiles: int | None = None, sram_kib: int = DEFAULT_SRAM_KIB):
    """The machine `ipu-run --model --tiles N` compiles for: the full IPU21 for None or 1472 tiles of 624 KiB,
    else `Target.small(tiles, sram_kib)`."""
    from ipu.passes.tile_plan import target_for

    return target_for(tiles or 0, sram_kib)


def _is_ir_text(s: str) -> bool:
    return "func.func" in s or s.lstrip().startswith(("builtin.module", "module", '"builtin.module"'))


def _model(model):
    """(what compile_model takes: a config or a module, the config if known)."""
    from xdsl.dialects.builtin import ModuleOp

    from ipu.frontend.siglip import SiglipVisionConfig, get_config

    if isinstance(model, SiglipVisionConfig):
        return model, model
    if isinstance(model, ModuleOp):
        return model, None
    if isinstance(model, PathLike):
        model = str(model)
    if not isinstance(model, str):
        raise TypeError(
            f"ipu.compile: model must be a preset name, a SiglipVisionConfig, a config.json path, nn IR text "
            f"or a ModuleOp, got {type(model).__name__}"
        )
    if _is_ir_text(model):
        return _parse_ir(model, "<ir text>"), None
    if model.endswith(".mlir"):
        return _parse_ir(Path(model).read_text(), model), None
    cfg = get_config(model)
    return cfg, cfg


def _parse_ir(text: str, name: str):
    from xdsl.context import Context

    from ipu.dialects.parsing import IpuParser
    from ipu.dialects.registry import all_dialects

    ctx = Context()
    for dialect, factory in all_dialects():
        ctx.register_dialect(dialect, factory)
    return IpuParser(ctx, text, name).parse_module()


def _weights(weights, cfg):
    """A name -> array mapping from a mapping or a checkpoint path (with cfg, if known)."""
    if weights is None or isinstance(weights, Mapping):
        return weights
    from ipu.frontend.weights import load_checkpoint

    store, _ = load_checkpoint(weights, cfg)
    return store


def compile(
    model,
    tiles: int | None = None,
    weights=None,
    *,
    sram_kib: int = DEFAULT_SRAM_KIB,
    layers: int | None = None,
    split_rows: bool = True,
    progress: bool | Callable[[str, int, int], None] | None = None,
) -> Package:
    """Compiles `model` for a machine of `tiles` tiles (default: the full 1472-tile IPU21) into a `Package`.

    `model`: a preset name (`"siglip-tiny"`, `"so400m-patch14-384"`), a `SiglipVisionConfig`, a `config.json`
    (file or directory), nn IR (MLIR text, a `.mlir` file or a `ModuleOp`, e.g. `ipu-run --emit-nn`'s output).
    `layers` overrides a config's number of encoder layers. `weights` (a name -> array mapping or a safetensors
    checkpoint, file or directory) are checked against the package's parameters and kept with it: a `Session`
    given no weights uploads these. `progress`: True prints the compile phases on stderr (as `ipu-run --model`
    does on a terminal), a callable gets `(phase, done, total)`; default: none."""
    from ipu.backend.lower import compile_model

    module_or_config, cfg = _model(model)
    if layers is not None:
        if cfg is None:
            raise ValueError("ipu.compile: layers= needs a config or a preset, not IR")
        cfg = module_or_config = cfg.with_layers(layers)
    params = _weights(weights, cfg)
    if progress is True:
        from ipu.progress import CompileProgress

        with CompileProgress(enabled=True) as bar:
            pkg = compile_model(
                module_or_config, target(tiles, sram_kib), weights=params, split_rows=split_rows, progress=bar
            )
    else:
        pkg = compile_model(
            module_or_config,
            target(tiles, sram_kib),
            weights=params,
            split_rows=split_rows,
            progress=progress or None,
        )
    if params is not None:
        pkg.weights = params  # not saved with the package: Session uses them when given none
    return pkg


def load(path: str | PathLike) -> Package:
    """A package written by `pkg.save(path)`, `ipu-run -o` or `ipu-opt -t ipu-package`."""
    return Package.load(path)


class Session:
    """A package loaded on the device (the simulator) with its parameters uploaded once.

    `weights`: a name -> array mapping or a safetensors checkpoint (file or directory); default: the weights given
    to `ipu.compile`, else seeded random weights (`seed`) for the package's model config, as `ipu-run` uses."""

    def __init__(self, package: Package | str | PathLike, weights=None, *, seed: int = 0):
        from ipu.frontend.siglip import SiglipVisionConfig
        from ipu.runtime.host import Session as HostSession

        if not isinstance(package, Package):
            package = Package.load(package)
        self.package = package
        config = package.metadata.get("config")
        self.config = SiglipVisionConfig.from_dict(config) if config else None
        if weights is None:
            weights = getattr(package, "weights", None)
        if weights is None:
            if self.config is None:
                raise ValueError("ipu.Session: the package names no model config; give weights=")
            from ipu.frontend.weights import random_weights

            weights = random_weights(self.config, seed=seed)
        elif not isinstance(weights, Mapping):
            from ipu.frontend.weights import load_checkpoint

            weights, self.config = load_checkpoint(weights, self.config)
        self.weights = weights
        self._session = HostSession(package)
        self._session.upload_parameters(weights)
        self.cycles: int | None = None  # device cycles of the last run

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of `pixel_values` the package takes, e.g. (1, 3, 32, 32)."""
        return tuple(self._binding().shape)

    @property
    def output_names(self) -> list[str]:
        return [b.name for b in self.package.outputs]

    @property
    def inferences(self) -> int:
        return self._session.inferences

    def _binding(self):
        bindings = self.package.inputs
        if len(bindings) != 1:
            raise ValueError(f"the package takes {len(bindings)} inputs; give run() a dict")
        return bindings[0]

    def run(self, pixel_values) -> dict[str, np.ndarray]:
        """One inference: `pixel_values` (an array of `input_shape`, or a dict of input name -> array) -> the
        outputs by name (float32 numpy arrays). `self.cycles` is then its device cycles."""
        inputs = pixel_values if isinstance(pixel_values, Mapping) else {self._binding().name: pixel_values}
        result = self._session.run({k: np.asarray(v, np.float32) for k, v in inputs.items()})
        self.cycles = result.cycles
        return result.outputs
