"""The long run of the fuzzer (issue 24): counts per input class of clean errors, tracebacks, hangs and accepted
(or accepted-and-wrong) cases.

    python -m bench.bench_fuzz [--seed 24] [--scale 1.0] [--json out.json] [--show 3]

Every case runs in this process (`ipu.tools.fuzz.call`); a hang is a case still running after the hang
detector's limit. `--show N` prints up to N examples of every traceback, hang and wrong outcome.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench.common import header
from ipu.tools import fuzz

COUNTS = {
    "lit": 500,
    "ir-nn": 250,
    "ir-exchange": 250,
    "ir-memory": 200,
    "options": 250,
    "report": 100,
    "checkpoint": 200,
    "config": 150,
    "input": 80,
    "package": 80,
    "flags": 60,
}
KINDS = ("clean", "accepted", "traceback", "hang", "wrong")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every class's case count")
    ap.add_argument("--json", help="write the counts and the failing cases here")
    ap.add_argument("--show", type=int, default=3)
    ap.add_argument("--only", help="comma-separated classes")
    args = ap.parse_args()
    counts = {k: max(1, round(v * args.scale)) for k, v in COUNTS.items()}
    if args.only:
        counts = {k: v for k, v in counts.items() if k in args.only.split(",")}
    table: dict[str, Counter] = defaultdict(Counter)
    bad: dict[str, list] = defaultdict(list)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for cls, case, outcome, err in fuzz.run(args.seed, counts, Path(tmp)):
            table[cls][outcome] += 1
            if outcome in ("traceback", "hang", "wrong"):
                bad[cls].append({"outcome": outcome, "what": case.what, "tool": case.tool, "stderr": err})
    wall = time.perf_counter() - t0
    print(f"fuzz run, seed {args.seed}, {header()}; {wall:.0f} s")
    print(f"| class | cases | {' | '.join(KINDS)} |")
    print("|---|---:|" + "---:|" * len(KINDS))
    total: Counter = Counter()
    for cls in counts:
        c = table[cls]
        total.update(c)
        print(f"| {cls} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in KINDS) + " |")
    print(f"| all | {sum(total.values())} | " + " | ".join(str(total[k]) for k in KINDS) + " |")
    for cls, items in bad.items():
        for kind in ("traceback", "hang", "wrong"):
            shown = [i for i in items if i["outcome"] == kind][: args.show]
            for i in shown:
                print(f"  {cls} {kind}: {i['what'][:160]} -> {i['stderr'][:200]}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"counts": {k: dict(v) for k, v in table.items()}, "bad": bad}, indent=1)
        )


if __name__ == "__main__":
    main()
