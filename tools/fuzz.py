"""A seeded fuzzer of the command-line tools (issue 24): hostile inputs of every class, run in-process.

Each case is one call of a tool's `main(argv)` (`ipu-opt`, `ipu-run`, `ipu-report`, `python -m ipu.backend.lower`)
on a mutated input, classified as

- `clean`: a non-zero exit with a diagnostic on stderr and no traceback;
- `accepted`: exit 0 (and, for IR printed by ipu-opt, the output parses again);
- `traceback`: an exception escaped `main`, or stderr shows a Python traceback or an "internal error";
- `hang`: the call ran longer than the hang detector's generous limit (SIGALRM; not a performance limit);
- `wrong`: accepted although the mutation makes the input unusable by construction (a use before its definition,
  a tile id past int32, a non-finite weight, a negative option, ...), or accepted output that does not re-parse.

Input classes: the lit inputs (`tests/filecheck`, split at `// -----`), the tiny model's IR at the nn, exchange
and memory levels, pass options, checkpoints, config.json files, `--input` files, packages and command-line
flags. `run(seed, counts)` yields `(class, Case, outcome, detail)`; `tests/unit/test_fuzz.py` runs a few cases of
each class, `bench/bench_fuzz.py` many.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import signal
import struct
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HANG_SECONDS = int(os.environ.get("IPU_FUZZ_HANG_SECONDS", "120"))  # a hang detector only (the slowest
# legitimate case here takes a few seconds), not a performance limit

INTERESTING_INTS = [
    "0",
    "-1",
    "1",
    "2147483647",
    "2147483648",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "65536",
    "3",
]
INTERESTING_FLOATS = ["0.0", "-1.0", "1.0e+300", "nan", "inf", "-inf", "1.0e-300", "0x7FF0000000000000"]


class Hang(Exception):
    pass


@dataclass
class Case:
    tool: str  # "ipu-opt", "ipu-run", "ipu-report", "lower"
    argv: list[str]
    must_refuse: bool = False  # accepted would be wrong by construction
    what: str = ""
    check_roundtrip: bool = False


def _mains() -> dict[str, Callable]:
    from ipu.backend.lower.__main__ import main as lower_main
    from ipu.tools.ipu_opt import main as opt_main
    from ipu.tools.ipu_report import main as report_main
    from ipu.tools.ipu_run import main as run_main

    return {"ipu-opt": opt_main, "ipu-run": run_main, "ipu-report": report_main, "lower": lower_main}


def clear_caches() -> None:
    """Empties the project's memo caches (`functools.lru_cache`/`cache` of every `ipu.*` module): a command line
    process ends after one input, but the fuzzer runs thousands in one process, and a cache keeps what a hostile
    input made it build (tile tables of a layout of 2^20 blocks, 4 MB each, after the command refused it) -- a
    growth of the harness, not of a command."""
    import sys

    for name, mod in list(sys.modules.items()):
        if name == "ipu" or name.startswith("ipu."):
            for obj in list(vars(mod).values()):
                clear = getattr(obj, "cache_clear", None)
                if callable(clear) and getattr(obj, "__module__", None) == name:
                    clear()


def call(tool: str, argv: list[str], limit: int | None = None) -> tuple[str, int | None, str, str]:
    """(kind, exit code, stdout, stderr) of one in-process run; kind is clean/accepted/traceback/hang."""
    main = _mains()[tool]
    limit = HANG_SECONDS if limit is None else limit
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_):
        raise Hang()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(limit)
    rc: int | None = None
    kind = ""
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except Hang:
        kind = "hang"
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # noqa: B036 (anything escaping main is what a user would see as a traceback)
        if isinstance(e, KeyboardInterrupt):
            raise
        kind = "traceback"
        err.write(f"\n[escaped] {type(e).__name__}: {str(e)[:300]}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        clear_caches()
    e_text = err.getvalue()
    if not kind:
        if "Traceback (most recent call last)" in e_text or "internal error" in e_text:
            kind = "traceback"
        elif rc == 0:
            kind = "accepted"
        else:
            kind = "clean" if e_text.strip() else "traceback"
    return kind, rc, out.getvalue(), e_text


# ----------------------------------------------------------------------------------------------------------------
# Mutators of text


_NUMBER = re.compile(r"(?<![\w.%#@^])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])")
_SSA_DEF = re.compile(r"^\s*(%[\w.$-]+)(?::\d+)?\s*=", re.M)


def mutate_text(rng: random.Random, text: str) -> tuple[str, str]:
    """One random mutation of MLIR text: (mutant, description)."""
    lines = text.split("\n")
    op = rng.choice(
        [
            "truncate",
            "truncate",
            "number",
            "number",
            "delete_line",
            "dup_line",
            "swap_lines",
            "char",
            "quote",
            "ssa",
        ]
    )
    if op == "truncate":
        cut = rng.randrange(len(text) + 1)
        # Within a string literal (e.g. a hex dense) about half of the time: the parser-hang class.
        quotes = [m.start() for m in re.finditer('"', text)]
        if quotes and rng.random() < 0.5:
            cut = min(len(text), rng.choice(quotes) + 1 + rng.randrange(40))
        return text[:cut], f"truncate at {cut}"
    if op == "number":
        nums = list(_NUMBER.finditer(text))
        if nums:
            m = rng.choice(nums)
            new = rng.choice(INTERESTING_FLOATS if "." in m.group() or "e" in m.group() else INTERESTING_INTS)
            return text[: m.start()] + new + text[m.end() :], f"number {m.group()} -> {new} at {m.start()}"
    if op == "delete_line" and len(lines) > 1:
        i = rng.randrange(len(lines))
        return "\n".join(lines[:i] + lines[i + 1 :]), f"delete line {i + 1}"
    if op == "dup_line" and lines:
        i = rng.randrange(len(lines))
        return "\n".join(lines[: i + 1] + lines[i:]), f"duplicate line {i + 1}"
    if op == "swap_lines" and len(lines) > 2:
        i = rng.randrange(len(lines) - 1)
        j = min(len(lines) - 1, i + 1 + rng.randrange(4))
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines), f"swap lines {i + 1} and {j + 1}"
    if op == "char" and text:
        i = rng.randrange(len(text))
        c = rng.choice(["", "}", "{", ">", "<", "(", ")", ",", ":", "x", "0", "\\", "@", "%", "!", "#"])
        return text[:i] + c + text[i + 1 :], f"char {text[i]!r} -> {c!r} at {i}"
    if op == "quote" and text:
        i = rng.randrange(len(text))
        return text[:i] + '"' + text[i:], f"quote inserted at {i}"
    if op == "ssa":
        defs = _SSA_DEF.findall(text)
        if len(defs) > 1:
            a, b = rng.sample(defs, 2)
            uses = [m.start() for m in re.finditer(re.escape(a) + r"\b", text)]
            if len(uses) > 1:
                k = rng.choice(uses[1:])
                return text[:k] + b + text[k + len(a) :], f"use of {a} -> {b} at {k}"
    return text[: len(text) // 2], "truncate at half"


def use_before_def(rng: random.Random, text: str) -> tuple[str, str] | None:
    """Moves an op above the op defining one of its operands (in the same block): refused by construction."""
    lines = text.split("\n")
    defs = {}
    for i, line in enumerate(lines):
        m = re.match(r"^\s*(%[\w.$-]+)\s*=", line)
        if m and not line.rstrip().endswith("{") and line.strip() != "}":
            defs[m.group(1)] = i
    candidates = []
    for i, line in enumerate(lines):
        if line.rstrip().endswith("{") or "}" in line:
            continue
        rhs = line.split("=", 1)[-1]
        for name in re.findall(r"%[\w.$-]+", rhs):
            j = defs.get(name)
            if (
                j is not None
                and j < i
                and all("{" not in lines[k] and "}" not in lines[k] for k in range(j, i))
            ):
                indent = len(lines[j]) - len(lines[j].lstrip())
                if len(line) - len(line.lstrip()) == indent:
                    candidates.append((j, i, name))
    if not candidates:
        return None
    j, i, name = rng.choice(candidates)
    moved = lines[i]
    del lines[i]
    lines.insert(j, moved)
    return "\n".join(lines), f"line {i + 1} (uses {name}) moved above its definition at line {j + 1}"


MUST_REFUSE_EDITS: list[tuple[str, str, str]] = [
    # (regex, replacement, what): each makes the IR unusable (wrong numbers or a wrapped id) if accepted.
    (r"#tile\.affine<(\d+),", r"#tile.affine<4294967296,", "tile table start past int32"),
    # (A stride only matters in a layout of more than one block: the edit is made where shape != block.)
    (
        r"(#tile\.layout<shape = (\[[^\]]*\]), block = (?!\2,)\[[^\]]*\][^>]*?#tile\.affine<\d+), \d+,",
        r"\1, 2147483647,",
        "tile stride past int32",
    ),
    (r"#tile\.affine<\d+,", r"#tile.affine<1472,", "tile id past the target's tiles"),
    (r"tiles = \d+ : i64", r"tiles = 2147483647 : i64", "tile count past int32 / the target's"),
    (
        r"tile\.repeat \d+ carried",
        r"tile.repeat 2147483647 carried",
        "repeat count disagreeing with its stacked operands",
    ),
    (r"eps ?= ?[-\d.e+]+", "eps=1.0e+300", "eps overflowing f32"),
    (r"eps ?= ?[-\d.e+]+", "eps=-1.0", "negative eps"),
    (r"heads ?= ?(\d+)", "heads=0", "zero heads"),
    (r"heads ?= ?(\d+)", "heads=-2", "negative heads"),
    (r"scale = [-\d.e+]+ : f32", "scale = 0x7FC00000 : f32", "NaN scale"),
    (r"scale = [-\d.e+]+ : f32", "scale = 0x7F800000 : f32", "infinite scale"),
    (
        r"(dtype = f8E4M3FNUZ), scale = -4>",
        r"\1, scale = -3>",
        "layout FP8 scale disagreeing with its producer",
    ),
    (
        r"(tile\.layout = #tile\.layout<[^>]*?)dtype = f16>(\} : tensor<[0-9x]*xf16>)",
        r"\1dtype = f32>\2",
        "layout dtype disagreeing with its value",
    ),
    (r"addr = 0x[0-9a-f]+, bytes = (\d+)", r"addr = 0xe7ff8, bytes = \1", "buffer past the SRAM"),
]


def must_refuse_edit(rng: random.Random, text: str) -> tuple[str, str] | None:
    options = [(p, r, w) for p, r, w in MUST_REFUSE_EDITS if re.search(p, text)]
    if not options:
        return None
    p, r, w = rng.choice(options)
    matches = list(re.finditer(p, text))
    m = rng.choice(matches)
    return text[: m.start()] + m.expand(r) + text[m.end() :], f"{w} at {m.start()}"


# ----------------------------------------------------------------------------------------------------------------
# Seeds


def lit_inputs() -> list[tuple[str, str]]:
    """(name, chunk) of every lit input, split at `// -----`, RUN/CHECK lines kept (they are comments)."""
    out = []
    for path in sorted((ROOT / "tests" / "filecheck").rglob("*.mlir")):
        for i, chunk in enumerate(path.read_text().split("// -----")):
            if chunk.strip():
                out.append((f"{path.relative_to(ROOT)}#{i}", chunk))
    return out


class Workdir:
    """The unmutated seeds of one fuzz run, built once in `root`: the tiny model's IR at each level, a checkpoint,
    a package, an input."""

    def __init__(self, root: Path):
        from ipu.frontend.siglip import PRESETS, build_vision_model
        from ipu.frontend.weights import random_weights, save_checkpoint

        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        cfg = PRESETS["tiny-1layer"]
        self.cfg = cfg
        self.nn = str(build_vision_model(cfg)) + "\n"
        (root / "nn.mlir").write_text(self.nn)
        self.levels = {"nn": self.nn}
        for level, stop in (("exchange", "nn-to-exchange-pipeline"), ("memory", "")):
            opts = f"tiles=4 sram_kib=624{' stop_after=' + stop if stop else ''}"
            kind, rc, out, err = call(
                "ipu-opt", [str(root / "nn.mlir"), "-p", f"ipu-compile-pipeline{{{opts}}}"]
            )
            if kind != "accepted":
                raise RuntimeError(f"seed {level}: {err}")
            self.levels[level] = out
            (root / f"{level}.mlir").write_text(out)
        self.ckpt = root / "ckpt"
        save_checkpoint(random_weights(cfg, seed=1), cfg, self.ckpt)
        self.package = root / "tiny.ipupkg"
        kind, rc, out, err = call("lower", [str(root / "memory.mlir"), "-o", str(self.package)])
        if kind != "accepted":
            raise RuntimeError(f"seed package: {err}")
        self.input = root / "x.npy"
        x = np.random.default_rng(0).uniform(-1, 1, (1, cfg.num_channels, cfg.image_size, cfg.image_size))
        np.save(self.input, x.astype(np.float32))
        self.n = 0

    def path(self, suffix: str) -> Path:
        self.n += 1
        return self.root / f"case{self.n}{suffix}"


# ----------------------------------------------------------------------------------------------------------------
# Case generators, per input class


def gen_lit(rng: random.Random, w: Workdir) -> Case:
    name, chunk = rng.choice(LIT)
    text, what = mutate_text(rng, chunk)
    p = w.path(".mlir")
    p.write_text(text)
    return Case("ipu-opt", [str(p)], what=f"{name}: {what}", check_roundtrip=True)


def _gen_level(level: str, pipeline: str | None) -> Callable[[random.Random, Workdir], Case]:
    def gen(rng: random.Random, w: Workdir) -> Case:
        text = w.levels[level]
        must = False
        r = rng.random()
        res = None
        if r < 0.15:
            res = use_before_def(rng, text)
        elif r < 0.3:
            res = must_refuse_edit(rng, text)
        if res is not None:
            text, what = res
            must = True
        else:
            text, what = mutate_text(rng, text)
        p = w.path(".mlir")
        p.write_text(text)
        argv = [str(p)]
        tool = "ipu-opt"
        if pipeline and rng.random() < 0.3:
            if pipeline == "lower":
                tool, argv = "lower", [str(p), "-o", str(w.path(".ipupkg"))]
            else:
                argv += ["-p", pipeline]
        return Case(
            tool,
            argv,
            must_refuse=must,
            what=f"{level}: {what}",
            check_roundtrip=tool == "ipu-opt" and len(argv) == 1,
        )

    return gen


PASS_OPTIONS: dict[str, list[str]] = {
    "memory-plan": [
        "tiles",
        "sram_kib",
        "reserve_code_bytes",
        "exchange_table_bytes",
        "host_descriptor_bytes",
        "reserve_scratch_bytes",
    ],
    "tile-plan": ["tiles", "sram_kib", "memory_fraction", "attention", "weights_order"],
    "exchange-schedule": ["mode", "stream_words", "max_slowdown"],
    "nn-split-attention-keys": ["tiles", "chunks", "max_chunks", "max_rows", "min_keys", "min_rows"],
    "nn-split-k": ["tiles", "max_rows"],
    "nn-quantize-activations": ["format", "scale"],
    "nn-split-mlp": ["max_k", "min_rows"],
    "nn-outline-repeat": ["min_layers"],
    "nn-quantize-weights": ["format", "scale", "activations", "keep_f16"],
    "kernel-select": ["tiles", "sram_kib", "max_key_chunk", "scores", "pv"],
    "ipu-compile-pipeline": ["tiles", "sram_kib", "stop_after"],
    "nn-to-exchange-pipeline": ["tiles", "sram_kib", "memory_fraction", "mode", "stream_words"],
}
BAD_VALUES = ["-1", "0", "-1.0", "nan", "1e400", '"bogus"', "bogus", "2147483648", '"a,b"', "true"]


def gen_options(rng: random.Random, w: Workdir) -> Case:
    name = rng.choice(sorted(PASS_OPTIONS))
    opt = rng.choice(PASS_OPTIONS[name])
    value = rng.choice(BAD_VALUES)
    if rng.random() < 0.2:
        spec = f"{name}{{{opt}={value} {opt}={value}}}"
        must = True
    else:
        spec = f"{name}{{{opt}={value}}}"
        must = (
            opt == "keep_f16"
            or value in ("-1", "-1.0", "nan", "1e400")
            and opt
            not in (
                "scale",
                "reserve_code_bytes",
                "exchange_table_bytes",
                "reserve_scratch_bytes",
            )
        )
    level = "nn" if name.startswith("nn-") or name == "ipu-compile-pipeline" else "exchange"
    src = str(w.root / f"{level}.mlir")
    return Case("ipu-opt", [src, "-p", spec], must_refuse=must, what=spec)


def _safetensors_parts(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _write_safetensors(path: Path, header: object, data: bytes, raw_header: bytes | None = None) -> None:
    blob = raw_header if raw_header is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def gen_checkpoint(rng: random.Random, w: Workdir) -> Case:
    header, data = _safetensors_parts(w.ckpt / "model.safetensors")
    keys = [k for k in header if k != "__metadata__"]
    key = rng.choice(keys)
    d = w.path("")
    d.mkdir()
    (d / "config.json").write_text((w.ckpt / "config.json").read_text())
    kind = rng.choice(
        [
            "list",
            "no_dtype",
            "string_entry",
            "neg_offset",
            "overlap",
            "past_end",
            "shape",
            "dtype",
            "nan",
            "inf",
            "truncate",
            "bad_json",
            "header_len",
            "offsets_type",
            "shape_type",
            "int_dtype",
            "dup_key",
            "trailing",
        ]
    )
    must = kind in (
        "neg_offset",
        "overlap",
        "past_end",
        "nan",
        "inf",
        "shape",
        "truncate",
        "dup_key",
        "trailing",
    )
    raw_header = None
    info = header[key]
    if kind == "list":
        header = list(header.items())
    elif kind == "no_dtype":
        del info["dtype"]
    elif kind == "string_entry":
        header[key] = "F32"
    elif kind == "neg_offset":
        b, e = info["data_offsets"]
        info["data_offsets"] = [b - 64, e - 64]
    elif kind == "overlap":
        other = header[rng.choice([k for k in keys if k != key])]
        size = info["data_offsets"][1] - info["data_offsets"][0]
        osize = other["data_offsets"][1] - other["data_offsets"][0]
        b = other["data_offsets"][0]
        if osize >= size:
            info["data_offsets"] = [b, b + size]
        else:
            info["data_offsets"] = [b, b + size] if b + size <= len(data) else [0, size]
    elif kind == "past_end":
        b, e = info["data_offsets"]
        info["data_offsets"] = [len(data) - (e - b) + 4, len(data) + 4]
    elif kind == "shape":
        info["shape"] = list(reversed(info["shape"])) + [1] if info["shape"] else [2]
    elif kind == "dtype":
        info["dtype"] = rng.choice(["F16", "I64", "XX", 3])
    elif kind in ("nan", "inf"):
        b, e = info["data_offsets"]
        pos = b + 4 * rng.randrange(max(1, (e - b) // 4))
        bad = struct.pack("<f", float("nan") if kind == "nan" else float("-inf"))
        data = data[:pos] + bad + data[pos + 4 :]
    elif kind == "truncate":
        data = data[: rng.randrange(len(data))]
    elif kind == "bad_json":
        raw_header = json.dumps(header).encode()[: rng.randrange(10, 200)]
    elif kind == "header_len":
        raw_header = json.dumps(header).encode()
        (d / "model.safetensors").write_bytes(struct.pack("<Q", len(raw_header) + 10**6) + raw_header + data)
    elif kind == "offsets_type":
        info["data_offsets"] = rng.choice([["0", "4"], [0], None, 7, [0.5, 4]])
    elif kind == "shape_type":
        info["shape"] = rng.choice([["4"], None, [-1, 64], 64, [1e20]])
    elif kind == "int_dtype":
        info["dtype"] = "I32"
    elif kind == "dup_key":  # a second entry for the key (json.loads would keep the last)
        other = header[rng.choice([k for k in keys if k != key])]
        raw_header = (json.dumps(header)[:-1] + f", {json.dumps(key)}: {json.dumps(other)}}}").encode()
    elif kind == "trailing":
        data = data + bytes(rng.randrange(1, 64))
    if kind != "header_len":
        _write_safetensors(d / "model.safetensors", header, data, raw_header)
    argv = ["--model", str(d), "--weights", str(d), "--reference-only"]
    return Case("ipu-run", argv, must_refuse=must, what=f"checkpoint {kind} {key}")


def gen_config(rng: random.Random, w: Workdir) -> Case:
    cfg = json.loads((w.ckpt / "config.json").read_text())
    keys = [
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_hidden_layers",
        "image_size",
        "patch_size",
        "num_channels",
        "layer_norm_eps",
        "hidden_act",
        "vision_use_head",
    ]
    key = rng.choice(keys)
    value = rng.choice(
        [
            '"64"',
            "null",
            "[64]",
            "-1",
            "0",
            "-1.0",
            "1e300",
            "NaN",
            "Infinity",
            "true",
            "64.5",
            '"gelu"',
            "{}",
            "2147483648",
        ]
    )
    cfg[key] = "@@"
    text = json.dumps(cfg).replace('"@@"', value)
    if rng.random() < 0.1:
        text = text[: rng.randrange(len(text))]
    d = w.path("")
    d.mkdir()
    (d / "config.json").write_text(text)
    v = json.loads(value) if value not in ("NaN", "Infinity") else float(value.replace("Infinity", "inf"))
    good = (
        (
            key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_channels")
            and type(v) is int
            and 0 < v < 2048
        )
        or (key == "layer_norm_eps" and isinstance(v, float) and 0 < v < 1)
        or (key == "hidden_act" and v == "gelu")
        or (key == "vision_use_head" and v is True)
    )
    argv = ["--model", str(d), "--emit-nn", str(w.path(".mlir"))]
    return Case("ipu-run", argv, must_refuse=not good, what=f"config {key}={value}")


def gen_input(rng: random.Random, w: Workdir) -> Case:
    c = w.cfg
    kind = rng.choice(["shape", "dtype", "nan", "inf", "npz", "garbage", "object", "ext", "scalar", "int"])
    good_shape = (1, c.num_channels, c.image_size, c.image_size)
    x = np.random.default_rng(rng.randrange(1000)).uniform(-1, 1, good_shape).astype(np.float32)
    p = w.path(".npy")
    must = kind in ("shape", "nan", "inf", "scalar")
    if kind == "shape":
        np.save(p, x.reshape(rng.choice([(1, 3, 16, 64), (3, 32, 32), (2, 3, 32, 32)[:3] + (16,)])))
    elif kind == "dtype":
        np.save(p, x.astype(rng.choice([np.float16, np.float64, np.complex64])))
        must = x.dtype == np.complex64
    elif kind in ("nan", "inf"):
        x.flat[rng.randrange(x.size)] = np.nan if kind == "nan" else np.inf
        np.save(p, x)
    elif kind == "npz":
        p = w.path(".npz")
        np.savez(p, x=x)
    elif kind == "garbage":
        p.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(200))))
    elif kind == "object":
        np.save(p, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        must = True
    elif kind == "ext":
        p = w.path(".txt")
        np.save(p, x)
        p = p.with_suffix(".txt.npy")
    elif kind == "scalar":
        np.save(p, np.float32(1.0))
    elif kind == "int":
        np.save(p, (x * 100).astype(np.int32))
    argv = ["--model", "tiny-1layer", "--reference-only", "--input", str(p)]
    return Case("ipu-run", argv, must_refuse=must, what=f"input {kind}")


def gen_package(rng: random.Random, w: Workdir) -> Case:
    src = zipfile.ZipFile(w.package)
    members = {n: src.read(n) for n in src.namelist()}
    manifest = json.loads(members["manifest.json"])
    kind = rng.choice(
        [
            "num_tiles",
            "metadata",
            "truncate",
            "flip",
            "segments",
            "binding_shape",
            "entry",
            "labels",
            "config",
            "missing_member",
            "tiles_array",
            "protected",
        ]
    )
    must = kind in ("binding_shape", "config", "tiles_array")
    if kind == "num_tiles":
        manifest["target"]["num_tiles"] = rng.choice(["4", None, -1, 0, 2**40, 4.5, 2])
        must = manifest["target"]["num_tiles"] == 2
    elif kind == "metadata":
        manifest["metadata"] = rng.choice(
            [[], "x", None, 7, {"config": []}, {"config": {"hidden_size": "64"}}]
        )
    elif kind == "segments":
        s = rng.choice(manifest["segments"])
        field = rng.choice(["rows", "bytes", "address", "name"])
        s[field] = rng.choice([-1, 0, 2**40, "x", None, 3])
    elif kind == "binding_shape":
        b = rng.choice(manifest["parameters"] + manifest["inputs"])
        b["shape"] = [d * 2 for d in b["shape"]] if rng.random() < 0.5 else b["shape"][::-1] + [2]
    elif kind == "entry":
        manifest["entry"] = rng.choice(["nope", 3, None])
    elif kind == "labels":
        lab = rng.choice(sorted(manifest["code"]["labels"]))
        manifest["code"]["labels"][lab] = rng.choice([-5, 2**40, "x", 10**6])
        must = manifest["code"]["labels"][lab] in (-5, 2**40, 10**6)
    elif kind == "config":
        cfgd = manifest["metadata"].get("config", {})
        cfgd["num_hidden_layers"] = 3
        cfgd["hidden_size"] = rng.choice([128, 32])
        manifest["metadata"]["config"] = cfgd
    elif kind == "missing_member":
        victims = [n for n in members if n != "manifest.json"]
        del members[rng.choice(victims)]
    elif kind == "tiles_array":
        keys = [k for k in members if k.endswith(".tiles.npy")]
        if keys:
            buf = io.BytesIO()
            np.save(buf, np.full(4, 2**20, np.int32))
            members[rng.choice(keys)] = buf.getvalue()
        else:
            must = False
    elif kind == "protected":
        manifest["protected"] = rng.choice([[[0, 2**40, "all"]], "x", [[1, 2]]])
    members["manifest.json"] = json.dumps(manifest).encode()
    p = w.path(".ipupkg")
    with zipfile.ZipFile(p, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    if kind in ("truncate", "flip"):
        raw = bytearray(p.read_bytes())
        if kind == "truncate":
            raw = raw[: rng.randrange(len(raw))]
        else:
            for _ in range(rng.randrange(1, 8)):
                i = rng.randrange(len(raw))
                raw[i] ^= 1 << rng.randrange(8)
        p.write_bytes(bytes(raw))
    return Case("ipu-run", [str(p)], must_refuse=must, what=f"package {kind}")


def gen_flags(rng: random.Random, w: Workdir) -> Case:
    pkg, ck = str(w.package), str(w.ckpt)
    cases = [
        ([pkg, "--tiles", "3"], True),
        ([pkg, "--layers", "1"], True),
        ([pkg, "-o", str(w.path(".ipupkg"))], True),
        ([pkg, "--pipeline", "nn-fuse-qkv"], True),
        ([pkg, "--no-split-rows"], True),
        (["--model", "so400m-patch14-384", "--weights", ck, "--reference-only"], True),
        (["--model", "tiny-1layer", "--weights", ck, "--layers", "3", "--reference-only"], True),
        (["--model", "tiny-1layer", "--tiles", "3", "--layers", "1"], False),
        (["--model", "tiny-1layer", "--tiles", "0"], True),
        (["--model", "tiny-1layer", "--tiles", "-4"], True),
        (["--model", "tiny-1layer", "--layers", "0", "--reference-only"], True),
        (["--model", "tiny-1layer", "--layers", "-1", "--emit-nn", "-"], True),
        (["--model", "tiny-1layer", "--tiles", "4", "--pipeline", "nn-fuse-qkv", "--inferences", "1"], True),
        (["--model", "tiny-1layer", "--reference-only", "--threshold", "nan"], True),
        (["--model", "tiny-1layer", "--reference-only", "--pipeline", "nn-split-k{tiles=-1}"], True),
        (["--model", "tiny-1layer", "--reference-only", "--pipeline", "nn-split-k{tiles=4 tiles=8}"], True),
        (["--model", "tiny-1layer", "--reference-only", "--inferences", "0"], True),
        (["--model", "tiny-1layer", "--reference-only", "--seed", "-1"], False),
        ([pkg, "--weights", ck, "--inferences", "1"], False),
        ([pkg, "--threshold", "0.5"], True),
        ([pkg, "--profile-merge-rounds"], True),
        ([pkg, "--weights", ck, "--input", str(w.input), "--seed", "3"], True),
        (["--model", "tiny-1layer", "--reference-only", "--inferences", "3"], True),
        (["--model", "tiny-1layer", "--reference-only", "--compare-reference"], True),
        (["--model", "tiny-1layer", "--emit-nn", str(w.path(".mlir")), "--input", str(w.input)], True),
    ]
    argv, must = rng.choice(cases)
    return Case(
        "ipu-run", list(argv), must_refuse=must, what="flags " + " ".join(argv).replace(str(w.root), "W")
    )


def gen_report(rng: random.Random, w: Workdir) -> Case:
    level = rng.choice(["exchange", "memory"])
    res = must_refuse_edit(rng, w.levels[level]) if rng.random() < 0.25 else None
    text, what = res if res is not None else mutate_text(rng, w.levels[level])
    p = w.path(".mlir")
    p.write_text(text)
    report = rng.choice(["placement", "profile"])
    out = w.path("")
    extra = []
    if report == "placement" and rng.random() < 0.5:
        extra = [
            "--memory-plan",
            rng.choice(["tiles=4 sram_kib=-1", "tiles=0", "sram_kib=16", "tiles=4 tiles=4", "bogus=1"]),
        ]
    return Case(
        "ipu-report",
        [report, str(p), "-o", str(out), *extra],
        must_refuse=res is not None,
        what=f"report {level}: {what} {extra}",
    )


LIT: list[tuple[str, str]] = []

CLASSES: dict[str, Callable[[random.Random, Workdir], Case]] = {
    "lit": gen_lit,
    "ir-nn": _gen_level("nn", "nn-outline-repeat,nn-quantize-weights"),
    "ir-exchange": _gen_level("exchange", "lowering-storage{tiles=4},memory-plan{tiles=4}"),
    "ir-memory": _gen_level("memory", "lower"),
    "options": gen_options,
    "report": gen_report,
    "checkpoint": gen_checkpoint,
    "config": gen_config,
    "input": gen_input,
    "package": gen_package,
    "flags": gen_flags,
}


def judge(case: Case, kind: str, out: str) -> str:
    """The outcome of a case: its kind, or `wrong` for an accepted must-refuse case or output that does not
    re-parse."""
    if kind != "accepted":
        return kind
    if case.must_refuse:
        return "wrong"
    if case.check_roundtrip and out.strip():
        from ipu.tools.ipu_opt import main as opt_main

        tmp = Path(case.argv[0]).with_suffix(".out.mlir")
        tmp.write_text(out)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                rc = opt_main([str(tmp)])
            except BaseException:  # noqa: B036
                rc = -1
        if rc != 0:
            return "wrong"
        del err
    return "accepted"


def run(
    seed: int,
    counts: dict[str, int],
    workdir: Path,
    before: Callable[[str, int, Case], None] | None = None,
) -> Iterator[tuple[str, Case, str, str]]:
    """Yields (class, case, outcome, stderr tail) for counts[class] cases of each class, seeded; `before(class,
    index, case)` is called before each case runs (a log that names the case a crash of the whole process was
    in)."""
    if not LIT:
        LIT.extend(lit_inputs())
    w = Workdir(workdir)
    for cls, n in counts.items():
        rng = random.Random(f"{seed}:{cls}")
        for i in range(n):
            case = CLASSES[cls](rng, w)
            if before is not None:
                before(cls, i, case)
            kind, rc, out, err = call(case.tool, case.argv)
            yield cls, case, judge(case, kind, out), err.strip().splitlines()[-1][:300] if err.strip() else ""
