"""`ipu-run`: run a compiled package on the device (the simulator), or compile a model and run it.

    ipu-run model.ipupkg --weights ckpt/ --input x.npy --inferences 3 [--compare-reference]
    ipu-run --model siglip-tiny [--tiles 16] [--weights ckpt/] [-o model.ipupkg] [--compare-reference]
    ipu-run --model siglip-tiny [--layers N] --emit-nn model.mlir

A package run opens the package on the simulator, uploads the parameters once (from `--weights`, a safetensors
checkpoint, or seeded random weights for the package's model config) and runs the inferences, printing cycles per
inference and whether the outputs of successive inferences agree. `--compare-reference` prints, per output, cosine
and relative L2 against the fp32 numpy reference evaluator on the same weights and input.

`--model` compiles first (`ipu.backend.lower.compile_model`: nn passes, tile planning, exchange, memory placement,
asm lowering) for the full 1472-tile IPU21 or, with `--tiles N`, a smaller machine, then runs the package the same
way. `--reference-only` skips the device and compares the device-precision reference evaluator with fp32 instead.

`--emit-nn FILE` (with `--model`; `-` for stdout) writes the model's nn IR, the builder's output before any pass,
as MLIR text and stops: `ipu-opt FILE --pass-pipeline='builtin.module(ipu-compile-pipeline{tiles=16})' -t
ipu-package -o m.ipupkg` then gives the same package, byte for byte, as `ipu-run --model ... --tiles 16 -o`
(both run the named pass `ipu-compile-pipeline`; the IR records the config for the package's metadata).

`--per-op` (with `--compare-reference`; `--model` compiles with `debug_values=True`, see
`ipu.backend.lower.debug`) reads every kept nn op result back from the device and prints, per op in program order,
rel-L2 and cosine against the device-precision reference (the backend's correctness) and against fp32 (the effect
of quantization), then names the first op whose rel-L2 against the device-precision reference exceeds
`--threshold`. It compiles the layers unrolled (no `tile.repeat` loop: one kept copy per op and layer), so the
package, its code size and its cycles differ from the default looped build.

`--profile DIR` records the first inference on the simulator (every tile's clock at each kernel call site,
exchange routine call and internal sync; `Session.run(..., profile=True)`) and writes `DIR/profile.json` and the
self-contained `DIR/profile.html` (docs/reports.md): supersteps, per-kernel and per-operator tables, busiest tiles,
the layer loop's first iteration in detail and the rest summed. `--profile-merge-rounds` sums each exchange
phase's rounds into one exchange and one sync step (smaller files for phases of many rounds).

The profile also goes to `DIR/profile.trace.json`, a Chrome trace / Perfetto file (`ipu.runtime.reports.trace`),
and profile.html shows the cycles per layer and the planner's estimate beside the measurement.

`--memory-map DIR` writes the package's memory map (`DIR/placement.{json,html}`: per tile class what is live
at each program step, the fullest tiles and what holds them at their peak). `--save-outputs DIR` writes the
outputs of the last inference as `DIR/last_hidden_state.npy` and `DIR/pooler_output.npy` (float32). `--model` shows the compile phases (each pass, then the asm lowering) as a
progress bar on stderr when stderr is a terminal; `--quiet` turns it off (`ipu.progress`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np


def default_nn_pipeline(module) -> str:
    """`--reference-only`'s default passes: the nn-level passes `--model` compiles with for the full IPU21 (the
    default precision policy, the MLP's FP8 activations and the K splits whose f16 partial sums they round),
    resolved for `module`."""
    from ipu.backend.lower.debug import nn_passes
    from ipu.passes.compile_pipeline import IpuCompilePipelinePass

    return nn_passes(IpuCompilePipelinePass().resolved(module).pipeline_text())[0]


def _summary(module) -> str:
    counts = Counter(op.name for op in module.walk() if op.dialect_name() == "nn")
    width = max(len(k) for k in counts)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in sorted(counts.items()))


def metrics(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(cosine, relative L2) of a against the reference b, in float64."""
    a64, b64 = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    cos = float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))
    rel = float(np.linalg.norm(a64 - b64) / np.linalg.norm(b64))
    return cos, rel


def per_embedding(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int]:
    """(min cosine, max relative L2, count) over the embeddings (rows of the last dimension) of a against the
    reference b, in float64."""
    a64 = np.asarray(a, np.float64).reshape(-1, np.shape(b)[-1])
    b64 = np.asarray(b, np.float64).reshape(-1, np.shape(b)[-1])
    nb = np.linalg.norm(b64, axis=1)
    cos = np.sum(a64 * b64, 1) / (np.linalg.norm(a64, axis=1) * nb)
    return float(cos.min()), float((np.linalg.norm(a64 - b64, axis=1) / nb).max()), len(cos)


def _error(message: str) -> int:
    print(f"ipu-run: error: {message}", file=sys.stderr)
    return 1


def _weights_and_config(args, cfg=None):
    """(weights, config): from --weights (the config from `cfg`, else the checkpoint's config.json, which must then
    agree with --model), else seeded random weights for `cfg` or --model (with --layers)."""
    from pathlib import Path

    from ipu.frontend.siglip import get_config
    from ipu.frontend.weights import CheckpointError, check_finite, load_checkpoint, random_weights

    if args.weights:
        if cfg is None and args.model:
            wanted = get_config(args.model)
            path = Path(args.weights)
            beside = (path if path.is_dir() else path.parent) / "config.json"
            if beside.is_file():
                from ipu.frontend.siglip import SiglipVisionConfig

                found = SiglipVisionConfig.from_json(beside)
                diff = [k for k, v in wanted.to_dict().items() if found.to_dict()[k] != v]
                if diff:
                    shown = ", ".join(
                        f"{k} {getattr(found, k)!r} (--model: {getattr(wanted, k)!r})" for k in diff[:4]
                    )
                    raise CheckpointError(
                        f"{beside}: the checkpoint's config disagrees with --model {args.model}: {shown}"
                    )
            cfg = wanted
        params, cfg = load_checkpoint(args.weights, cfg)
        if not args.allow_nonfinite:
            check_finite(params)
        return params, cfg
    if cfg is None:
        cfg = get_config(args.model)
    if args.layers is not None:
        cfg = cfg.with_layers(args.layers)
    return random_weights(cfg, seed=args.seed), cfg


INPUT_SUFFIX = ".npy"


def _input(args, cfg) -> np.ndarray:
    """--input (a .npy of [1, C, H, W] real numbers, finite unless --allow-nonfinite), else seeded uniform."""
    if args.input:
        return load_input(args.input, cfg, args.allow_nonfinite)
    return _uniform_image(cfg, args.seed + 1)


def _calibration_input(args, cfg) -> np.ndarray:
    """--calibrate NPY, else a seeded uniform image in [-1, 1] other than `_input`'s (seed + 2)."""
    if args.calibrate:
        return load_input(args.calibrate, cfg, args.allow_nonfinite)
    return _uniform_image(cfg, args.seed + 2)


def _uniform_image(cfg, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (1, cfg.num_channels, cfg.image_size, cfg.image_size)).astype(np.float32)


def load_input(path: str, cfg, allow_nonfinite: bool = False) -> np.ndarray:
    if not str(path).endswith(INPUT_SUFFIX):
        raise ValueError(f"--input {path}: expected a {INPUT_SUFFIX} file (numpy.save of the pixel values)")
    try:
        x = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"--input {path}: not a readable .npy array ({e})") from None
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiub":
        raise ValueError(
            f"--input {path}: pixel values must be real numbers, got dtype {getattr(x, 'dtype', type(x))}"
        )
    want = (1, cfg.num_channels, cfg.image_size, cfg.image_size)
    if x.shape != want:
        batch = (
            "; the package is compiled for batch 1 (one image per inference: give the images one at a time)"
            if x.ndim == 4 and x.shape[1:] == want[1:]
            else ""
        )
        raise ValueError(
            f"--input {path}: shape {list(x.shape)}, the model expects {list(want)} [1, C, H, W]{batch}"
        )
    x = x.astype(np.float32)
    if not allow_nonfinite:
        bad = ~np.isfinite(x)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"--input {path}: {int(bad.sum())} non-finite pixel values (first at {list(first)}: {x[first]}); "
                "--allow-nonfinite to run anyway"
            )
    return x


def nonfinite_outputs(outputs: dict[str, np.ndarray]) -> list[str]:
    """One line per output holding NaN or Inf values."""
    lines = []
    for name, value in outputs.items():
        v = np.asarray(value)
        nan, inf = int(np.isnan(v).sum()), int(np.isinf(v).sum())
        if nan or inf:
            lines.append(f"output {name!r}: {nan} NaN and {inf} infinite of {v.size} values")
    return lines


def _reference(cfg, params, x) -> dict[str, np.ndarray]:
    from ipu.frontend.reference import evaluate
    from ipu.frontend.siglip import build_vision_model

    return evaluate(build_vision_model(cfg), {"pixel_values": x}, params, mode="fp32").outputs


def per_op(session, pkg, cfg, params, x) -> list[tuple]:
    """After a run: (name, shape, rel-L2, cosine vs the device-precision reference, rel-L2, cosine vs fp32) for
    each of the package's debug values, in program order."""
    from ipu.backend.lower.debug import nn_module
    from ipu.frontend.reference import OpId, evaluate

    module = nn_module(cfg, pkg.target, pkg.metadata.get("nn_passes"))
    inputs = {"pixel_values": x}
    dev = evaluate(module, inputs, params, mode="device", capture=True).values
    f32 = evaluate(module, inputs, params, mode="fp32", capture=True).values
    rows = []
    for b, pos in zip(pkg.debug, pkg.metadata["debug_positions"], strict=True):
        value = session.read(b)
        key = OpId((int(pos),))
        cos_d, rel_d = metrics(value, dev[key])
        cos_f, rel_f = metrics(value, f32[key])
        rows.append((b.name, b.shape, rel_d, cos_d, rel_f, cos_f))
    return rows


def first_divergence(rows, threshold: float) -> str | None:
    """The first op (program order) whose rel-L2 against the device-precision reference exceeds threshold
    (NaN counts as diverged)."""
    return next((r[0] for r in rows if not r[2] <= threshold), None)


def print_per_op(rows, threshold: float) -> None:
    width = max((len(r[0]) for r in rows), default=2)
    print(f"  per op ({len(rows)} device-computed values kept; device = device-precision reference):")
    print(
        f"  {'op':<{width}}  {'shape':<12} {'rel-L2 dev':>10} {'cos dev':>9}  {'rel-L2 fp32':>11} {'cos fp32':>9}"
    )
    for name, shape, rel_d, cos_d, rel_f, cos_f in rows:
        print(
            f"  {name:<{width}}  {str(list(shape)):<12} {rel_d:>10.2e} {cos_d:>9.6f}  {rel_f:>11.2e} {cos_f:>9.6f}"
        )
    first = first_divergence(rows, threshold)
    if first is None:
        print(f"  no op diverges: rel-L2 vs the device-precision reference <= {threshold:g} everywhere")
    else:
        print(f"  first divergence (rel-L2 vs device-precision reference > {threshold:g}): {first}")


def _names(text: str | None) -> tuple[str, ...]:
    """A comma-separated option's entries, blanks left out."""
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


def _sim_threads(choice: str) -> int:
    """The simulator's threads (`--threads`): "auto" = IPU_SIM_THREADS, else one per idle core (`jit.auto_threads`);
    the outputs and cycles are the same bits whatever the count (tests/unit/test_sim_threads.py)."""
    from ipu.runtime import jit

    return jit.auto_threads() if choice == "auto" else jit.set_threads(int(choice))


def run_package(args, pkg=None) -> int:
    from ipu.frontend.siglip import SiglipVisionConfig
    from ipu.runtime.host import Session
    from ipu.runtime.package import Package

    t0 = time.perf_counter()
    if pkg is None:
        pkg = Package.load(args.package)
    config = pkg.metadata.get("config")
    cfg = SiglipVisionConfig.from_dict(config) if config else None
    if cfg is None and not args.weights:
        return _error("the package names no model config; give --weights with a config.json")
    params, cfg = _weights_and_config(args, cfg)
    x = _input(args, cfg)
    session = Session(pkg, progress=not getattr(args, "quiet", False))
    session.upload_parameters(params)
    threads = _sim_threads(getattr(args, "threads", "auto"))
    print(
        f"package {args.package or '(compiled)'}: {pkg.target.name}, {pkg.target.num_tiles} tiles; loaded and parameters uploaded "
        f"in {time.perf_counter() - t0:.2f} s; simulating on {threads} thread{'s' if threads > 1 else ''}"
    )
    previous = None
    profile_dir = getattr(args, "profile", None)
    for i in range(args.inferences):
        t0 = time.perf_counter()
        result = session.run({"pixel_values": x}, profile=bool(profile_dir) and i == 0)
        wall = time.perf_counter() - t0
        if result.trace is not None:
            write_profile(pkg, result, profile_dir, getattr(args, "profile_merge_rounds", False))
        ms = result.cycles / pkg.target.clock_hz * 1e3
        same = ""
        if previous is not None:
            equal = all(
                np.array_equal(previous[k], result.outputs[k], equal_nan=True) for k in result.outputs
            )
            same = (
                "; outputs identical to the previous inference"
                if equal
                else "; OUTPUTS DIFFER from the previous"
            )
        print(
            f"inference {i + 1}: {result.cycles} cycles ({ms:.3f} ms at {pkg.target.clock_hz / 1e9:.2f} GHz), "
            f"simulated in {wall:.2f} s{same}"
        )
        previous = result.outputs
        bad = nonfinite_outputs(result.outputs)
        if bad:
            print(
                f"ipu-run: {'warning' if args.allow_nonfinite else 'error'}: inference {i + 1}: "
                + "; ".join(bad),
                file=sys.stderr,
            )
            if not args.allow_nonfinite:
                return 1
    if getattr(args, "memory_map", None):
        write_memory_map(pkg, args.memory_map)
    if getattr(args, "save_outputs", None):
        for path in save_outputs(previous, args.save_outputs):
            print(f"  output written to {path}")
    if args.compare_reference:
        ref = _reference(cfg, params, x)
        for name, value in previous.items():
            cos, rel = metrics(value, ref[name])
            # Per embedding: each row of the output's last dimension (a token of last_hidden_state, the pooled).
            row_cos, row_rel, rows = per_embedding(value, ref[name])
            print(
                f"  {name:<18} cosine {cos:.6f}  rel-L2 {rel:.3e}  (vs fp32 reference); per embedding: min cosine "
                f"{row_cos:.6f}, max rel-L2 {row_rel:.3e} ({rows})"
            )
        if getattr(args, "per_op", False):
            if not pkg.debug:
                return _error("--per-op: the package keeps no debug values (compile with --model --per-op)")
            print_per_op(per_op(session, pkg, cfg, params, x), args.threshold)
    return 0


def write_memory_map(pkg, out_dir) -> None:
    """The package's memory map (placement.json + placement.html, with liveness per program step) into
    out_dir."""
    from ipu.runtime.reports.placement import write_placement_report

    doc = pkg.metadata.get("memory_map")
    if not doc:
        raise ValueError("--memory-map: the package carries no memory map")
    jpath, hpath = write_placement_report(doc, out_dir)
    top = doc["fullest"][0] if doc.get("fullest") else None
    peak = (
        f"; fullest: tile {top['first_tile']} (a class of {top['tiles']}), {top['peak_bytes']} B live at "
        f"{top['peak_event_name']}"
        if top
        else ""
    )
    print(f"memory map: {jpath}, {hpath}{peak}")


def save_outputs(outputs, out_dir) -> list:
    """Each output of the last inference as OUT_DIR/<name>.npy (float32); returns the paths."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, value in outputs.items():
        path = out / f"{name}.npy"
        np.save(path, np.asarray(value, np.float32))
        paths.append(path)
    return paths


def write_profile(pkg, result, out_dir, merge_rounds: bool = False) -> dict:
    """profile.json + profile.html of one profiled inference into out_dir; prints where and a one-line summary;
    returns the profile document."""
    from ipu.runtime.reports.profile import write_profile_report
    from ipu.runtime.reports.profile_sim import profile_from_run

    doc = profile_from_run(pkg, result, merge_rounds)
    jpath, hpath, tpath = write_profile_report(doc, out_dir)
    t = doc["totals"]
    print(
        f"profile of inference 1: {doc['total_cycles']} cycles (compute {t['compute']}, exchange {t['exchange']}, "
        f"sync {t['sync']}), {len(doc['supersteps'])} superstep entries, {len(doc['steps'])} steps: {jpath}, {hpath}, "
        f"{tpath} (Perfetto / chrome://tracing)"
    )
    return doc


def compile_and_run(args) -> int:
    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target

    params, cfg = _weights_and_config(args)
    target = Target.ipu21() if args.tiles in (None, 1472) else Target.small(tiles=args.tiles, sram_kib=624)
    from ipu.progress import CompileProgress

    t0 = time.perf_counter()
    with CompileProgress(enabled=False if args.quiet else None) as progress:
        pkg = compile_model(
            cfg,
            target,
            weights=params,
            debug_values=args.per_op,
            split_rows=args.split_rows,
            progress=progress,
            keep_f16=None if args.precision is None else tuple(args.precision.split(",")),
            activations=args.activations,
            calibration=None if args.calibrate is None else {"pixel_values": _calibration_input(args, cfg)},
            weights_order=args.weights_order or "auto",
            fp8_linears=_names(args.fp8_linears),
        )
    print(
        f"compiled SigLIP vision ({cfg.num_hidden_layers} layers, width {cfg.hidden_size}, {cfg.num_patches} "
        f"tokens) for {target.name} ({target.num_tiles} tiles) in {time.perf_counter() - t0:.2f} s; "
        f"code {len(pkg.code)} B"
    )
    for note in pkg.metadata.get("notes", []):
        print(f"  note: {note}")
    if args.output:
        pkg.save(args.output)
        print(f"package written to {args.output}")
    return run_package(args, pkg)


def _given(flags) -> list[str]:
    """The names of the (name, given) pairs that were given."""
    return [flag for flag, given in flags if given]


def _do_not_apply(flags: list[str]) -> str:
    return f"{', '.join(flags)} {'does' if len(flags) == 1 else 'do'} not apply"


def check_flags(p: argparse.ArgumentParser, args) -> None:
    """Refuses flags that would be ignored, and values out of range (argparse's error: exit 2)."""
    import math

    if args.package:
        given = [
            flag
            for flag, value in (
                ("--tiles", args.tiles),
                ("--layers", args.layers),
                ("-o", args.output),
                ("--pipeline", args.pipeline),
                ("--reference-only", args.reference_only or None),
                ("--no-split-rows", None if args.split_rows else True),
                ("--precision", args.precision),
                ("--activations", args.activations),
                ("--calibrate", args.calibrate),
                ("--fp8-linears", args.fp8_linears),
                ("--weights-order", args.weights_order),
            )
            if value is not None
        ]
        if given:
            p.error(f"{', '.join(given)}: only with --model (a package is already compiled)")
    if args.pipeline is not None and args.model and not args.reference_only:
        p.error(
            "--pipeline applies to --reference-only; --model compiles with ipu-compile-pipeline (for other passes: "
            "--emit-nn, then ipu-opt)"
        )
    if args.weights and args.layers is not None:
        p.error("--layers does not apply with --weights: the checkpoint's config sets the layers")
    if args.tiles is not None and args.tiles < 1:
        p.error(f"--tiles must be at least 1, got {args.tiles}")
    if args.layers is not None and args.layers < 1:
        p.error(f"--layers must be at least 1, got {args.layers}")
    if args.seed is not None and args.seed < 0:
        p.error(f"--seed must be >= 0, got {args.seed}")
    if args.threads != "auto" and not (args.threads.isdigit() and 1 <= int(args.threads) <= 64):
        p.error(f"--threads must be auto or a count of 1 to 64, got {args.threads!r}")
    if args.threshold is not None and (not math.isfinite(args.threshold) or args.threshold < 0):
        p.error(f"--threshold must be finite and >= 0, got {args.threshold}")
    # Flags that the chosen run would not read.
    if args.threshold is not None and not args.per_op:
        p.error("--threshold applies to --per-op only")
    if args.profile_merge_rounds and not args.profile:
        p.error("--profile-merge-rounds applies to --profile only")
    if args.seed is not None and args.weights and args.input:
        p.error("--seed: nothing is random with both --weights and --input")
    if args.emit_nn:
        unread = _given(
            (
                ("--inferences", args.inferences is not None),
                ("--threads", args.threads != "auto"),
                ("--compare-reference", args.compare_reference),
                ("--input", args.input),
                ("--seed", args.seed is not None),
                ("--pipeline", args.pipeline is not None),
                ("--profile", args.profile),
                ("--memory-map", args.memory_map),
                ("--save-outputs", args.save_outputs),
                ("--allow-nonfinite", args.allow_nonfinite),
                ("--no-split-rows", not args.split_rows),
                ("--precision", args.precision is not None),
                ("--activations", args.activations is not None),
                ("--calibrate", args.calibrate is not None),
                ("--fp8-linears", args.fp8_linears is not None),
                ("--weights-order", args.weights_order is not None),
            )
        )
        if unread:
            p.error(f"--emit-nn stops after writing the nn IR: {_do_not_apply(unread)}")
    if args.reference_only:
        unread = _given(
            (
                ("--inferences", args.inferences is not None),
                ("--threads", args.threads != "auto"),
                ("--compare-reference", args.compare_reference),
                ("--memory-map", args.memory_map),
                ("--save-outputs", args.save_outputs),
            )
        )
        if unread:
            p.error(f"--reference-only evaluates once and always compares with fp32: {_do_not_apply(unread)}")
    if args.reference_only and (
        args.output
        or args.tiles is not None
        or not args.split_rows
        or args.precision is not None
        or args.activations is not None
        or args.weights_order is not None
    ):
        p.error(
            "-o, --tiles, --no-split-rows, --precision, --activations and --weights-order need a compilation (not "
            "--reference-only)"
        )
    if args.calibrate is not None and args.activations == "f16":
        p.error(
            "--calibrate sets the FP8 activations' scales: it needs --activations fp8 or mlp (the default)"
        )
    if args.fp8_linears is not None and args.activations != "fp8":
        p.error("--fp8-linears chooses the linears with FP8 activations: it needs --activations fp8")
    if args.fp8_linears is not None and not _names(args.fp8_linears):
        p.error("--fp8-linears needs at least one parameter-name substring (for every linear: leave it out)")
    if args.emit_nn and (args.output or args.reference_only or args.tiles is not None):
        p.error("--emit-nn stops after writing the nn IR: -o, --tiles and --reference-only do not apply")


def emit_nn(args) -> int:
    from ipu.frontend.siglip import build_vision_model, get_config

    if args.weights:
        _, cfg = _weights_and_config(args)
    else:
        cfg = get_config(args.model)
        if args.layers is not None:
            cfg = cfg.with_layers(args.layers)
    text = str(build_vision_model(cfg)) + "\n"
    if args.emit_nn == "-":
        sys.stdout.write(text)
    else:
        with open(args.emit_nn, "w") as f:
            f.write(text)
        print(
            f"nn IR of SigLIP vision ({cfg.num_hidden_layers} layers, width {cfg.hidden_size}) written to "
            f"{args.emit_nn}"
        )
    return 0


def run_reference_only(args) -> int:
    from xdsl.context import Context

    from ipu.dialects.parsing import verify_module
    from ipu.frontend.reference import evaluate
    from ipu.frontend.siglip import build_vision_model
    from ipu.passes.options import parse_pipeline
    from ipu.passes.registry import all_passes

    params, cfg = _weights_and_config(args)
    t0 = time.perf_counter()
    module = build_vision_model(cfg)
    spec = default_nn_pipeline(module) if args.pipeline is None else args.pipeline

    def verify(previous, module, following) -> None:
        if previous is not None:
            verify_module(module, f"the model's nn IR after pass '{previous.name}'")

    try:
        pipeline = parse_pipeline(dict(all_passes()), spec, verify) if spec else None
    except (ValueError, BaseException) as e:  # ArgSpecParseError derives from BaseException
        if isinstance(e, KeyboardInterrupt | SystemExit):
            raise
        return _error(f"bad --pipeline: {e}")
    if pipeline is not None:
        pipeline.apply(Context(), module)
    verify_module(module, "the model's nn IR")
    args.pipeline = spec
    print(
        f"model: SigLIP vision, {cfg.num_hidden_layers} layers, width {cfg.hidden_size}, {cfg.num_patches} tokens; "
        f"passes: {args.pipeline or '(none)'} ({time.perf_counter() - t0:.2f} s)"
    )
    print(_summary(module))
    x = _input(args, cfg)
    t0 = time.perf_counter()
    ref = _reference(cfg, params, x)
    dev = evaluate(module, {"pixel_values": x}, params, mode="device").outputs
    print(f"reference evaluator: fp32 and device precision in {time.perf_counter() - t0:.2f} s")
    for name in ref:
        cos, rel = metrics(dev[name], ref[name])
        print(
            f"  {name:<18} shape {list(ref[name].shape)}  device precision vs fp32: cosine {cos:.6f}  rel-L2 {rel:.3e}"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Errors end in `ipu.tools.boundary`'s one diagnostic (or "internal error"), never a traceback."""
    from ipu.tools.boundary import guarded

    return guarded("ipu-run", _main, argv)


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="ipu-run", description=__doc__.splitlines()[0])
    p.add_argument("package", nargs="?", help="a compiled package (.ipupkg)")
    p.add_argument(
        "--model", help="compile this model first: a preset (siglip-tiny, so400m-patch14-384) or config.json"
    )
    p.add_argument(
        "--weights", help="a safetensors checkpoint (file or directory); default: seeded random weights"
    )
    p.add_argument(
        "--input", help="pixel values as a .npy file [1, C, H, W]; default: seeded uniform in [-1, 1]"
    )
    p.add_argument("--inferences", type=int, help="inferences after one parameter upload (default 1)")
    p.add_argument(
        "--threads",
        default="auto",
        help="simulator threads: auto (default: IPU_SIM_THREADS, else one per core other processes leave idle) or "
        "a count; the outputs and cycles are the same whatever the count",
    )
    p.add_argument(
        "--compare-reference", action="store_true", help="cosine and rel-L2 against the fp32 reference"
    )
    p.add_argument("--seed", type=int, help="seed of random weights and input (default 0)")
    p.add_argument("--layers", type=int, help="override the number of encoder layers (--model)")
    p.add_argument(
        "--tiles", type=int, help="--model: compile for a machine with this many tiles (default 1472)"
    )
    p.add_argument("-o", "--output", help="--model: also write the compiled package here")
    p.add_argument(
        "--precision",
        metavar="POLICY",
        help="--model: the linears kept in F16, the rest FP8: default (patch embedding, q/k, MAP head), compact "
        "(patch embedding, MAP head), none, or parameter-name substrings (comma-separated); without it the "
        "default policy, or the compact one when the default does not fit (the package says so)",
    )
    p.add_argument(
        "--activations",
        choices=("f16", "fp8", "mlp"),
        help="--model: the activations of the FP8-weight K-split linears: f16 (the F16 AMP), fp8 (cast to FP8 "
        "with a power-of-two scale, the FP8 AMP: nn-quantize-activations) or mlp (default: fp8 into the MLP's fc1 "
        "and fc2 at scale 2^0, f16 into the attention's linears)",
    )
    p.add_argument(
        "--fp8-linears",
        metavar="NAMES",
        help="--model with --activations fp8: only the linears whose weight parameter names contain one of these "
        "comma-separated substrings take FP8 activations (e.g. mlp_fc2: the GELU output), the others keep f16",
    )
    p.add_argument(
        "--weights-order",
        choices=("auto", "row_major"),
        help="--model: GEMM weight storage (tile-plan's weights_order): auto (default: the weights of FP8-activation "
        "K splits and of F16 GEMMs that read them in place as AMP panels, permuted by the host at upload) or "
        "row_major (panels made on the device at every inference)",
    )
    p.add_argument(
        "--calibrate",
        nargs="?",
        const="",
        metavar="NPY",
        help="--model: each FP8 cast's scale from the fp32 activations of a calibration input (a .npy of pixel "
        "values; without NPY a seeded uniform image other than the run's input) instead of the fixed 2^-4 (mlp: "
        "2^0) (ipu.frontend.calibrate; the package notes the scales; not with --activations f16)",
    )
    p.add_argument(
        "--emit-nn",
        metavar="FILE",
        help="--model: write the model's nn IR (MLIR text, before any pass) to FILE (- for stdout) and stop",
    )
    p.add_argument(
        "--reference-only",
        action="store_true",
        help="--model: no device; compare the device-precision reference evaluator with fp32",
    )
    p.add_argument(
        "--per-op",
        action="store_true",
        help="with --compare-reference: per nn op rel-L2/cosine (keeps every op result on the device; --model "
        "then compiles the layers unrolled, without the tile.repeat loop)",
    )
    p.add_argument(
        "--threshold", type=float, help="--per-op: rel-L2 that counts as a divergence (default 0.02)"
    )
    p.add_argument(
        "--profile",
        metavar="DIR",
        help="record the first inference on the simulator and write DIR/profile.json and DIR/profile.html",
    )
    p.add_argument(
        "--profile-merge-rounds",
        action="store_true",
        help="--profile: one exchange and one sync step per exchange phase (rounds summed) instead of per round",
    )
    p.add_argument(
        "--no-split-rows",
        dest="split_rows",
        action="store_false",
        help="--model: split only few-row linears along K (nn-split-k{many_rows=false}); by default many-row "
        "linears are split too where the estimate wins",
    )
    p.add_argument(
        "--memory-map",
        metavar="DIR",
        help="write the package's memory map (what is live on each tile at each program step) as "
        "DIR/placement.json and DIR/placement.html",
    )
    p.add_argument(
        "--save-outputs",
        metavar="DIR",
        help="write the outputs of the last inference as DIR/<name>.npy (last_hidden_state, pooler_output)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress on stderr (compile phases; simulated cycles, rate, ETA): it is shown only when stderr "
        "is a terminal",
    )
    p.add_argument(
        "--pipeline",
        help="--reference-only: nn-level passes, xDSL syntax (default: the nn passes `--model` compiles with for "
        "the full IPU21, its default precision and activation policies; not the compact fallback a model that does "
        "not fit the default policy gets)",
    )
    p.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="run with NaN or infinite weights or pixel values (refused by default) and report non-finite outputs "
        "as a warning, not an error",
    )
    args = p.parse_args(argv)
    if bool(args.package) == bool(args.model):
        p.error("give a package, or --model to compile one")
    if args.inferences is not None and args.inferences < 1:
        p.error("--inferences must be at least 1")
    if args.per_op and not args.compare_reference:
        p.error("--per-op needs --compare-reference")
    if args.profile and args.reference_only:
        p.error("--profile needs a device run (not --reference-only)")
    if args.emit_nn and not args.model:
        p.error("--emit-nn needs --model")
    check_flags(p, args)
    args.inferences = 1 if args.inferences is None else args.inferences
    args.seed = 0 if args.seed is None else args.seed
    args.threshold = 0.02 if args.threshold is None else args.threshold
    if args.emit_nn:
        return emit_nn(args)
    if args.package:
        return run_package(args)
    return run_reference_only(args) if args.reference_only else compile_and_run(args)


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
