"""The long run of the fuzzer (issue 24): counts per input class of clean errors, tracebacks, hangs and accepted
(or accepted-and-wrong) cases.

    python -m bench.bench_fuzz [--seed 24] [--scale 1.0] [--json out.json] [--show 3] [--log cases.log]
                               [--max-memory-gib 6] [--hang-seconds 120]

Every case runs in this process (`ipu.tools.fuzz.call`), one class after the other; a hang is a case still running
after the hang detector's limit. The process's address space is capped (`--max-memory-gib`, RLIMIT_AS): an input
that makes a command allocate more ends in that command's "out of memory" diagnostic, which is counted (and
shown) as `oom` -- a robustness bug too (a hostile size must be refused before it is allocated), but one that no
longer lets the kernel's OOM killer end the whole run. `--log` names every case before it runs, with the
process's resident memory. `--show N` prints up to N examples of every traceback, hang, oom and wrong outcome.
"""

from __future__ import annotations

import argparse
import json
import resource
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
KINDS = ("clean", "accepted", "traceback", "hang", "oom", "wrong")
BAD = ("traceback", "hang", "oom", "wrong")
OOM = "out of memory"


def rss_mib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() >> 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every class's case count")
    ap.add_argument("--json", help="write the counts and the failing cases here")
    ap.add_argument("--show", type=int, default=3)
    ap.add_argument("--only", help="comma-separated classes")
    ap.add_argument("--log", help="append a line per case here, written before the case runs")
    ap.add_argument("--max-memory-gib", type=float, default=6.0, help="RLIMIT_AS of this process (0: none)")
    ap.add_argument("--hang-seconds", type=int, default=fuzz.HANG_SECONDS)
    args = ap.parse_args()
    if args.max_memory_gib > 0:
        cap = int(args.max_memory_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    fuzz.HANG_SECONDS = args.hang_seconds
    log = open(args.log, "a", buffering=1) if args.log else None  # noqa: SIM115 (open for the whole run)

    def before(cls: str, i: int, case: fuzz.Case) -> None:
        if log:
            log.write(f"{cls} {i} rss={rss_mib()}MiB {case.tool} {case.what[:200]}\n")

    counts = {k: max(1, round(v * args.scale)) for k, v in COUNTS.items()}
    if args.only:
        counts = {k: v for k, v in counts.items() if k in args.only.split(",")}
    table: dict[str, Counter] = defaultdict(Counter)
    bad: dict[str, list] = defaultdict(list)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for cls, case, outcome, err in fuzz.run(args.seed, counts, Path(tmp), before):
            if outcome == "clean" and OOM in err:
                outcome = "oom"
            table[cls][outcome] += 1
            if log:
                log.write(f"  -> {outcome} {err[:200]}\n")
            if outcome in BAD:
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
        for kind in BAD:
            shown = [i for i in items if i["outcome"] == kind][: args.show]
            for i in shown:
                print(f"  {cls} {kind}: {i['what'][:160]} -> {i['stderr'][:200]}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"counts": {k: dict(v) for k, v in table.items()}, "bad": bad}, indent=1)
        )


if __name__ == "__main__":
    main()
