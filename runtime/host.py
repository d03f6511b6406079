"""The host API: open a package on a device, upload parameters once, run inferences many times.

    session = Session(Package.load("model.ipupkg"))      # default device: the simulator
    session.upload_parameters(weights)                    # once; parameters stay resident
    result = session.run({"pixel_values": x})             # as often as needed
    result.outputs["pooler_output"], result.cycles
    result = session.run({"pixel_values": x}, profile=True)   # also records the profile trace (result.trace)

`profile=True` records every tile's clock at the package's profile sites (`metadata["profile_sites"]`, one per
kernel call site, exchange routine call and sync of `main`, see `ipu.backend.lower.sites`) and at every internal
sync: `result.trace` (a `simulator.Trace`); `ipu.runtime.reports.profile_sim.profile_from_run(package, result)`
turns it into profile.json. Off by default: the simulator then does no recording at all.

The device is this project's instruction-level simulator (`ipu.runtime.simulator.Simulator`); a hardware loader
would implement the same three steps (load the image, write bindings, run the entry) behind this class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ipu.backend.encoding import decode_program
from ipu.runtime.package import Binding, Package, PackageError, from_device, to_device
from ipu.runtime.simulator import Recorder, RunResult, Simulator, Trace


@dataclass
class InferenceResult:
    outputs: dict[str, np.ndarray]
    run: RunResult
    trace: Trace | None = None  # with run(..., profile=True)

    @property
    def cycles(self) -> int:
        """Device cycles of this inference: the slowest tile."""
        return self.run.max_cycles


class Session:
    """One package loaded on one device."""

    def __init__(self, package: Package, device: Simulator | None = None, *, progress: bool = False):
        """`progress`: show simulated cycles, rate and ETA on stderr while an inference runs, if stderr is a
        terminal (`ipu.runtime.progress`; the ETA from the previous inference's cycles, for the first inference from
        the compiler's estimate in the package metadata)."""
        package.validate()
        self.progress = progress
        self._last_cycles: int | None = None
        self.package = package
        self.target = package.target
        self.device = device or Simulator(package.target)
        program = decode_program(package.code, package.code_base, package.kernels)
        program.labels.update(package.labels)
        self.device.load(program)
        for seg in package.segments:
            tiles = seg.tiles
            if tiles is None and seg.data.shape[0] == self.target.num_tiles and self.target.num_tiles > 1:
                tiles = np.arange(self.target.num_tiles)
            if tiles is None:
                self.device.write(seg.address, seg.data[0])
            else:
                self.device.write(seg.address, seg.data, tiles=tiles)
        for lo, hi, _ in package.protected:
            self.device.protect(lo, hi)
        self.parameters_uploaded = False
        self.inferences = 0

    # ------------------------------------------------------------------------------------------------------------
    def _scatter(self, binding: Binding, host: np.ndarray) -> None:
        if tuple(host.shape) != binding.shape:
            raise PackageError(
                f"{binding.name!r}: host tensor has shape {list(host.shape)}, the package expects {list(binding.shape)}"
            )
        values = np.asarray(host, dtype=np.float32).reshape(-1)[binding.element_index()]
        if binding.via:  # host-side rounding through another format first (see Binding.via)
            values = from_device(
                to_device(values, binding.via, binding.via_scale), binding.via, binding.via_scale
            )
        try:
            values = to_device(values, binding.dtype, binding.scale)
        except PackageError as e:
            raise PackageError(f"{binding.name!r}: {e}") from None
        # every chunk's bytes in one batched write (chunk after chunk, as element_index orders the values)
        self.device.write_runs(binding.chunks[:, 0], binding.chunks[:, 1], binding.chunks[:, 3] * binding.itemsize,
                               values.view(np.uint8))  # fmt: skip

    def _gather(self, binding: Binding) -> np.ndarray:
        out = np.zeros(int(np.prod(binding.shape)), dtype=np.float32)
        dt = np.dtype(to_device(np.zeros(1), binding.dtype).dtype)
        pieces = []
        for tile, address, _, count in binding.chunks[:, :4].tolist():
            pieces.append(self.device.read(int(address), int(count) * binding.itemsize, tiles=[int(tile)])[0])
        raw = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
        out[binding.element_index()] = from_device(raw.view(dt), binding.dtype, binding.scale)
        return out.reshape(binding.shape)

    # ------------------------------------------------------------------------------------------------------------
    def upload_parameters(self, weights: Mapping[str, np.ndarray]) -> None:
        """Writes every parameter binding from `weights` (stacked names resolve to [L, ...] stacks); the
        package's derived parameters are computed from them (`ipu.runtime.derived`)."""
        from ipu.runtime.derived import with_package_derived

        weights = with_package_derived(weights, self.package)
        for b in self.package.parameters:
            try:
                host = weights[b.name]
            except KeyError:
                raise PackageError(
                    f"parameter {b.name!r} (shape {list(b.shape)}) is missing from the weights"
                ) from None
            self._scatter(b, np.asarray(host))
        self.parameters_uploaded = True

    def run(self, inputs: Mapping[str, np.ndarray], profile: bool = False) -> InferenceResult:
        if self.package.parameters and not self.parameters_uploaded:
            raise PackageError("run before upload_parameters: the package has parameters")
        for b in self.package.inputs:
            if b.name not in inputs:
                raise PackageError(f"input {b.name!r} (shape {list(b.shape)}) is missing")
            self._scatter(b, np.asarray(inputs[b.name]))
        trace = None
        if self.progress:
            from ipu.runtime.progress import Progress

            expected, estimated = self._last_cycles, False
            if expected is None:  # the first inference: the compiler's estimate, if the package has one
                estimate = (self.package.metadata or {}).get("estimate") or {}
                expected = estimate.get("total_cycles") if isinstance(estimate, dict) else None
                estimated = expected is not None
            self.device.progress = Progress(
                expected_cycles=expected, estimated=estimated, label=f"inference {self.inferences + 1}"
            )
        try:
            result, trace = self._run(profile)
        finally:
            self.device.progress = None
        self._last_cycles = result.max_cycles
        self.inferences += 1
        return InferenceResult({b.name: self._gather(b) for b in self.package.outputs}, result, trace)

    def _run(self, profile: bool):
        trace = None
        if profile:
            sites = self.package.metadata.get("profile_sites")
            if sites is None:
                raise PackageError("profile: the package names no profile sites (metadata['profile_sites'])")
            self.device.recorder = Recorder(self.target.num_tiles, [s["pc"] for s in sites])
            try:
                result = self.device.run(self.package.labels[self.package.entry])
                trace = self.device.recorder.trace()
            finally:
                self.device.recorder = None
        else:
            result = self.device.run(self.package.labels[self.package.entry])
        return result, trace

    def read(self, binding: Binding) -> np.ndarray:
        """Reads any binding (e.g. an intermediate tensor's) from the device as float32."""
        return self._gather(binding)
