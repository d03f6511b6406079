"""SRAM use per tile of the tiny SigLIP (issue 6: code, exchange tables, tensors, free). Not a test: run by hand.

    .venv/bin/python -m bench.bench_sram

The tiny SigLIP (`PRESETS["tiny"]`) with its layers as one loop (`pipeline_spec(target, outline_repeat=True)`, as
`compile_model` does) on `Target.small(tiles=16, sram_kib=624)` and on `IPU21`, lowered (`Lowering(f, target)`).
Per tile, min / median / max over the tiles, in bytes:

- code: the code image (`len(pkg.code)`, the same on every tile) and the `code` reservation;
- exchange tables: the `exchange_tables` reservation and the lowering's "low" data (`image.used["low"]`: call
  frames, exchange and loop tables, placed in [exchange_tables, code));
- other reservations: runtime_state, host_descriptors (whole program) and host_aperture (at the host events);
- parameters / transients: from the memory plan (`model_from_function` -> `placement_json`) at each tile's peak
  event (the event of most planned live bytes, the same as placement.json's per-class `peak_bytes`): resident
  parameters (incl. the stacked layer parameters) and everything else live there (transients, inputs, outputs);
  also the transients' own maximum over events (not added to the rest);
- lowering high: the lowering's own data above the plan (`image.used["high"]`: kernel-format weights, C/A/aux
  scratch elements, ...), which starts at the plan's high-water and runs through the `lowering_scratch`
  reservation (that reservation only guarantees room, so the two are not added: the larger counts);
- free: SRAM - (code and exchange reservations + other reservations + parameters + transients + max(lowering high,
  lowering_scratch)), i.e. at each tile's peak.
"""

from __future__ import annotations

import numpy as np

from bench.common import header

COLUMNS = [
    ("code_image", "code image"),
    ("code", "code reservation"),
    ("xtab", "exchange_tables reservation"),
    ("low", "lowering low used"),
    ("other", "other reservations at peak"),
    ("params", "parameters"),
    ("transient", "transients at peak"),
    ("transient_max", "transients, max over events"),
    ("high", "lowering high used"),
    ("scratch", "lowering_scratch reservation"),
    ("free", "free at peak"),
]


def measure(target) -> dict[str, np.ndarray]:
    """Per-tile bytes of each column (arrays of target.num_tiles)."""
    from xdsl.context import Context
    from xdsl.dialects import func
    from xdsl.passes import PassPipeline

    from ipu.backend.lower.lowering import Lowering, pipeline_spec
    from ipu.frontend.siglip import PRESETS, build_vision_model
    from ipu.passes.registry import all_passes
    from ipu.runtime.reports.placement import model_from_function, placement_json

    m = build_vision_model(PRESETS["tiny"])
    PassPipeline.parse_spec(dict(all_passes()), pipeline_spec(target, outline_repeat=True)).apply(
        Context(), m
    )
    f = next(o for o in m.walk() if isinstance(o, func.FuncOp))
    doc = placement_json(model_from_function(f))
    lowering = Lowering(f, target)
    pkg = lowering.run()
    used = dict(lowering.image.used)

    tc = np.asarray(doc["tile_class"], np.int64)
    nc, ne = len(doc["classes"]), len(doc["events"])
    keys = ("code", "exchange_tables", "lowering_scratch", "other", "params", "transient")
    live = {k: np.zeros((nc, ne + 1), np.int64) for k in keys}  # difference arrays over events
    for al in doc["allocations"]:
        f0, f1 = al["live"]
        kind = al["sequence"]["of"] if al["kind"] == "repeat-member" else al["kind"]
        if kind == "reservation":
            key = al["reserve"] if al["reserve"] in keys else "other"  # runtime_state, host_*
        else:
            key = "params" if kind == "parameter" else "transient"
        for p in al["placed"]:
            live[key][p[0], f0] += p[2] + p[3]
            live[key][p[0], f1 + 1] -= p[2] + p[3]
    live = {k: np.cumsum(v, 1)[:, :ne] for k, v in live.items()}
    total = sum(live.values())
    assert (total.max(1) == [c["peak_bytes"] for c in doc["classes"]]).all()  # placement.json's own peaks
    peak = np.argmax(total, axis=1)  # per class: the event of most planned live bytes
    at = {k: v[np.arange(nc), peak] for k, v in live.items()}
    cls = {
        "code_image": np.full(nc, len(pkg.code), np.int64),
        "code": at["code"],
        "xtab": at["exchange_tables"],
        "low": np.full(nc, used["low"], np.int64),
        "other": at["other"],
        "params": at["params"],
        "transient": at["transient"],
        "transient_max": live["transient"].max(1),
        "high": np.full(nc, used["high"], np.int64),
        "scratch": at["lowering_scratch"],
    }
    taken = (
        cls["code"]
        + cls["xtab"]
        + cls["other"]
        + cls["params"]
        + cls["transient"]
        + np.maximum(cls["high"], cls["scratch"])
    )
    cls["free"] = target.sram_bytes - taken
    assert (cls["free"] >= 0).all(), cls["free"]
    assert (cls["code_image"] <= cls["code"]).all() and (cls["low"] <= cls["xtab"]).all()
    out = {k: v[tc] for k, v in cls.items()}
    out["peak_event"] = np.asarray([doc["events"][e] for e in peak], object)[tc]
    return out


def stats(v: np.ndarray) -> str:
    lo, med, hi = int(v.min()), float(np.median(v)), int(v.max())
    if lo == hi:
        return f"{lo:,}"
    return f"{lo:,} / {med:,.0f} / {hi:,}"


def main() -> None:
    from ipu.backend.target import IPU21, Target

    targets = [Target.small(tiles=16, sram_kib=624), IPU21]
    results = [(t, measure(t)) for t in targets]
    lines = [
        "| bytes per tile (min / median / max) | "
        + " | ".join(f"{t.name}: {t.num_tiles} tiles x {t.sram_bytes:,} B" for t, _ in results)
        + " |",
        "|---|" + "---:|" * len(results),
    ]
    for key, label in COLUMNS:
        lines.append(f"| {label} | " + " | ".join(stats(r[key]) for _, r in results) + " |")
    print(header())
    print("\n".join(lines))
    for t, r in results:
        names, counts = np.unique(r["peak_event"].astype(str), return_counts=True)
        print(f"{t.name}: peak events " + ", ".join(f"{n} ({c} tiles)" for n, c in zip(names, counts)))


if __name__ == "__main__":
    main()
