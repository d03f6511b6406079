"""Profile sites: a label per call site and sync of `main`, named in `Package.metadata["profile_sites"]`.

The lowering emits `main` as lines of three shapes that start a *site* (a piece of code every tile executes once
per visit; tiles that skip a kernel call jump to the next site): `setzi $m0, <frame or table>  // <what>` (a kernel
call, `Lowering.call`; a routine with a table, `Lowering.table_call`; the layer loop's setup and next-iteration
code, `Lowering.repeat`), `sync TEXCH_SYNCZONE_INTERNAL` (an `exchange.sync`) and `.Lrep<r>_end:` (the loop's
reset). `label_sites` puts a label `.Lsite<i>:` before each, and one before the final `br $m9` (the return to the
host), and names the site from the line's comment and the first `call` that follows it. `resolve` turns the labels
into code addresses once the program is laid out. The simulator records every tile's clock when its supervisor
reaches one of these addresses (`Simulator.record`), so `ipu.runtime.reports.profile_sim` can cut a run into
steps: each site, from its address to the next site's.

A site dict: `label`, `pc`, `kind` (compute, exchange = `xch_rounds`, sync = `exchange.sync`), `kernel` (the
routine called: `gemm_f16_sup_ld64`, `ew_sup`, `xch_copy`, ...; `sync`; `main` for the return), `what` (the
lowering's comment, e.g. `nn.linear (unnamed): GEMM`), `op` (`op_of(what)`), `repeat` (the loop id for
sites of a `tile.repeat` body and its control code, else None), `role` (body, setup, next, end, or None).
"""

from __future__ import annotations

import re

SITE_PREFIX = ".Lsite"
_REP_END = re.compile(r"^\.Lrep(\d+)_end:")
_CALL = re.compile(r"^\s*call \$lr, (\S+)")

KIND_OF_ROUTINE = {"xch_rounds": "exchange"}


def op_of(what: str) -> str:
    """The operator a site belongs to: the comment's part before ": " (`nn.linear (unnamed)`); the exchange
    routines' tables and copies of a phase (`exchange rounds (9)`, `exchange copies`, ...) are `exchange.phase`,
    the layer loop's control code and carried-value copies `tile.repeat`."""
    if what.startswith("exchange") and not what.startswith("exchange.sync"):
        return "exchange.phase"
    if what.startswith("tile.repeat"):
        return "tile.repeat"
    return what.split(": ")[0]


def label_sites(lines: list[str]) -> list[dict]:
    """Inserts a site label before each site-starting line of `main` (in place) and one at the end (the return);
    returns the sites in program order (addresses filled in later by `resolve`)."""
    out: list[str] = []
    sites: list[dict] = []
    loops = 0
    open_loop: list[int] = []  # repeat ids whose body is being read

    def add(what: str, kind: str, role: str | None = None, repeat: int | None = None) -> None:
        label = f"{SITE_PREFIX}{len(sites)}"
        out.append(f"{label}:")
        if repeat is None and open_loop:
            repeat, role = open_loop[-1], role or "body"
        sites.append(
            dict(
                label=label,
                kind=kind,
                kernel=None,
                what=what,
                op=op_of(what),
                repeat=repeat,
                role=role,
            )
        )

    for line in lines:
        s = line.strip()
        comment = s.split("//", 1)[1].strip() if "//" in s else ""
        m_end = _REP_END.match(s)
        if s.startswith("setzi $m0,"):
            if comment.startswith("tile.repeat x"):
                add(comment + ": setup", "compute", "setup", loops)
                open_loop.append(loops)
                loops += 1
            elif comment == "tile.repeat: next iteration":
                add(comment, "compute", "next", open_loop.pop() if open_loop else None)
            else:
                add(comment, "compute")
        elif s.startswith("sync "):
            add(comment or "sync", "sync")
            sites[-1]["kernel"] = "sync"
        if m_end:
            out.append(line)
            add("tile.repeat: reset to iteration 0", "compute", "end", int(m_end.group(1)))
            continue
        m_call = _CALL.match(s)
        if m_call and sites and sites[-1]["kernel"] is None:
            sites[-1]["kernel"] = m_call.group(1)
            sites[-1]["kind"] = KIND_OF_ROUTINE.get(m_call.group(1), sites[-1]["kind"])
        out.append(line)
    add("main: return to the host", "compute")
    sites[-1]["kernel"] = "main"
    for s in sites:
        if s["kernel"] is None:
            s["kernel"] = "main"
    lines[:] = out
    return sites


def resolve(sites: list[dict], labels: dict[str, int]) -> list[dict]:
    """The sites with their code addresses (`pc`)."""
    return [dict(s, pc=int(labels[s["label"]])) for s in sites]
