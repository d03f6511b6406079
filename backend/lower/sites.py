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

The walk also puts a marker line `// op: <name>` before each operator it lowers (`op_marker`); `label_sites`
removes the markers and names the sites that follow with the operator (`op_name`: a linear or layer norm by its
weight parameter, e.g. `nn.linear self_attn.q_proj`, other operators by result name or their position among the
same operators of their block, `nn.add #2`; `layer ` before operators of a `tile.repeat` body). Exchange, sync and
layer-loop sites keep the names of `op_of`.

A site dict: `label`, `pc`, `kind` (compute, exchange = `xch_timed`, sync = `exchange.sync`), `kernel` (the
routine called: `gemm_f16_sup_ld64`, `ew_sup`, `copy_sup`, ...; `sync`; `main` for the return), `what` (the
lowering's comment, e.g. `nn.linear (unnamed): GEMM`), `op` (`op_of(what)`), `repeat` (the loop id for
sites of a `tile.repeat` body and its control code, else None), `role` (body, setup, next, end, or None); the
sites of an exchange phase (its send staging, rounds and copies) also `detail` (`phase_detail`, one dict shared
by the phase's sites), which `exchange_phases` turns into `phase_index`, an index into
`Package.metadata["exchange_phases"]`: each phase's summary stored once (docs/reports.md, "Exchange in the
profile").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
from xdsl.ir import BlockArgument, Operation, SSAValue

from ipu.backend.lower import exchange as lx

SITE_PREFIX = ".Lsite"
OP_MARKER = "    // op: "
PHASE_MARKER = "    // phase: "
NO_CODE = {"nn.param", "nn.input", "memory.plan", "memory.reserve", "func.return", "tile.yield", "exchange.sync",
           "exchange.phase"}  # fmt: skip
_REP_END = re.compile(r"^\.Lrep(\d+)_end:")
_CALL = re.compile(r"^\s*call \$(?:lr|m10), (\S+)")

KIND_OF_ROUTINE = {"xch_timed": "exchange"}


def _param_name(v: SSAValue) -> str | None:
    """The parameter a weight operand comes from (through single-operand casts and reshapes and exchange phases):
    `self_attn.q_proj`
    for `encoder.layers.*.self_attn.q_proj.weight` or a repeat body's `q_proj_weight` argument."""
    for _ in range(8):
        if isinstance(v, BlockArgument):
            hint = v.name_hint or ""
            for suffix in ("_weight", "_bias"):
                if hint.endswith(suffix):
                    return hint[: -len(suffix)]
            return None
        op = v.owner
        if not isinstance(op, Operation):
            return None
        if op.name == "nn.param":
            name = op.param_name
            for prefix in ("encoder.layers.*.", "vision_model."):
                name = name.removeprefix(prefix)
            return name.rsplit(".", 1)[0] if name.endswith((".weight", ".bias")) else name
        if op.name == "exchange.phase" and len(op.operands) == len(op.results):
            v = op.operands[v.index]  # result i of a phase is source i moved
            continue
        if len(op.operands) != 1:
            return None
        v = op.operands[0]
    return None


def op_name(op: Operation) -> str:
    """A readable name of an operator for the profile (see the module docstring)."""
    name = op.name
    sym = getattr(op, "sym", None) if name == "nn.output" else None
    if sym is not None:
        name += f" {sym.data!r}"
    else:
        param = next((p for p in map(_param_name, op.operands[1:]) if p), None)
        hint = op.results[0].name_hint if op.results else None
        if param:
            name += f" {param}"
        elif hint:
            name += f" %{hint}"
        else:
            block = op.parent_block()
            k = 0
            if block is not None:
                for o in block.ops:
                    if o is op:
                        break
                    k += o.name == op.name
            name += f" #{k}"
    parent = op.parent_op()
    return ("layer " if parent is not None and parent.name == "tile.repeat" else "") + name


def _ranges(tiles, limit: int = 0) -> str:
    """Tile numbers as ranges: `0-3,8,10-11`; with `limit`, at most about that many characters (the ranges that
    fit, then `,... (N tiles)`)."""
    out, ts = [], sorted({int(t) for t in tiles})
    i = 0
    while i < len(ts):
        j = i
        while j + 1 < len(ts) and ts[j + 1] == ts[j] + 1:
            j += 1
        out.append(str(ts[i]) if i == j else f"{ts[i]}-{ts[j]}")
        i = j + 1
    text = ",".join(out)
    if limit and len(text) > limit:
        text = text[: text.rfind(",", 0, limit)] + f",... ({len(ts)} tiles)"
    return text


RANGES_LIMIT = 64  # characters of a phase's sending or receiving tiles in its summary (the counts are exact)
_NAMES: list = []  # [function, {value: IR name}, {phase op: its index among the phases}, {op: its position}]


def _function_of(op: Operation) -> Operation | None:
    f = op
    while f is not None and f.name != "func.func":
        f = f.parent_op()
    return f


def ir_names(f: Operation) -> tuple[dict[SSAValue, str], dict[Operation, int], dict[Operation, int]]:
    """The names xDSL's printer gives the values of a function (`%name` or `%name_1` for name hints, `%0`, `%1`,
    ... in print order otherwise: results before the op's regions, a block's arguments before its ops), as in
    the placed IR that `ipu-opt` writes; each `exchange.phase`'s position among the function's phases; each op's
    position in the printed function."""
    names: dict[SSAValue, str] = {}
    phases: dict[Operation, int] = {}
    order: dict[Operation, int] = {}
    hints: dict[str, int] = {}
    counter = [0]

    def name(v: SSAValue) -> None:
        if v in names:
            return
        if v.name_hint:
            k = hints.get(v.name_hint, 0)
            names[v] = "%" + v.name_hint + (f"_{k}" if k else "")
            hints[v.name_hint] = k + 1
        else:
            names[v] = f"%{counter[0]}"
            counter[0] += 1

    def region(r) -> None:
        for b in r.blocks:
            for a in b.args:
                name(a)
            for o in b.ops:
                order[o] = len(order)
                for v in o.results:
                    name(v)
                if o.name == "exchange.phase":
                    phases[o] = len(phases)
                for inner in o.regions:
                    region(inner)

    for r in f.regions:
        region(r)
    return names, phases, order


def _names_for(op: Operation) -> tuple[dict[SSAValue, str], dict[Operation, int], dict[Operation, int]]:
    """`ir_names` of op's function, computed once per lowering walk (the walk starts at the function's first op,
    which resets it: passes between two lowerings may add values)."""
    f = _function_of(op)
    if f is None:
        return {}, {}, {}
    if not _NAMES or _NAMES[0] is not f or op not in _NAMES[2]:
        _NAMES[:] = [f, *ir_names(f)]
    return _NAMES[1], _NAMES[2], _NAMES[3]


def phase_detail(op: Operation) -> dict:
    """What an `exchange.phase` moves, for its profile sites: compact (its size grows with the phase's tensors,
    never with the tiles). `phase` (`exchange.phase %<first result>`), `ir` (its position among the function's
    phases), `values` (source -> result, by IR name) and per tensor (`tensors`: IR name, result, the operator
    that makes it (`of`, through earlier phases: `... via exchange`), the first that reads the result (`for`,
    through later phases), bytes sent, received, copied on tiles, sends), the totals (`bytes` sent, a multicast once; `received`, once per receiver; `copied`; `transfers`, `receives`, `copies`), `src_tiles` and `dst_tiles`
    (how many tiles send and receive), `busiest_receiver` and `busiest_sender` ([tile, bytes, transfers]),
    `port_words` (the busiest port's words), `rounds` (the lowering's), `schedule_cycles` (exchange-schedule's
    cycles), the sending and receiving tiles as ranges (`senders`, `receivers`: at most about RANGES_LIMIT
    characters) and the three largest sends ([tile, receiving tiles, bytes])."""
    s, r, c = op.send_table(), op.recv_table(), op.copy_table()
    names, phases, order = _names_for(op)

    def name(v: SSAValue) -> str:
        if v in names:
            return names[v]
        return f"%{v.name_hint}" if v.name_hint else "%?"

    def made_by(v: SSAValue) -> str:
        """The operator that makes v, through the exchange phases that moved it before (`... via exchange`)."""
        via = ""
        for _ in range(16):
            if isinstance(v, BlockArgument):
                parent = v.owner.parent_op()
                return f"an argument of {parent.name if parent is not None else 'a block'}" + via
            owner = v.owner
            if owner.name != "exchange.phase" or len(owner.operands) != len(owner.results):
                break
            v, via = owner.operands[v.index], " via exchange"
        return op_name(v.owner) + via

    def used_by(v: SSAValue) -> str:
        """The first operator (in program order) that reads v, through later phases that move it further."""
        via = ""
        for _ in range(16):
            users = sorted({u.operation for u in v.uses}, key=lambda o: order.get(o, 1 << 60))
            if not users:
                return "nothing"
            u = users[0]
            if u.name != "exchange.phase" or len(u.operands) != len(u.results):
                return op_name(u) + via
            v, via = u.results[next(i for i, a in enumerate(u.operands) if a is v)], " via exchange"
        return "?"

    summary = lx.transfer_summary(s, r, c, len(op.operands))
    tensors = [
        dict(name=name(a), to=name(b), of=made_by(a), **{"for": used_by(b)}, **per)
        for a, b, per in zip(op.operands, op.results, summary.pop("buffers"))
    ]
    largest = []
    if len(s):
        for i in np.argsort(-s[:, 3], kind="stable")[:3].tolist():
            to = r[r[:, 3] == i, 0] if len(r) else []
            largest.append([int(s[i, 0]), _ranges(to, RANGES_LIMIT), int(s[i, 3])])
    return {
        "phase": f"exchange.phase {name(op.results[0])}" if op.results else "exchange.phase",
        "ir": phases.get(op, -1),
        "values": [f"{name(a)} -> {name(b)}" for a, b in zip(op.operands, op.results)],
        "tensors": tensors,
        **summary,
        "schedule_cycles": int(op.cycles.value.data),
        "senders": _ranges(s[:, 0], RANGES_LIMIT) if len(s) else "",
        "receivers": _ranges(r[:, 0], RANGES_LIMIT) if len(r) else "",
        "largest": largest,
    }


@dataclass(frozen=True)
class OpMarker:
    """The operator whose code follows in the walk's program items (names the profile sites, `op_name`)."""

    name: str


@dataclass
class PhaseMarker:
    """The exchange phase whose code follows (`phase_detail`, completed by the lowering's timing figures)."""

    detail: dict


def op_marker(op: Operation) -> list[OpMarker | PhaseMarker]:
    """The marker the walk puts before an operator's code ([] for operators without code of their own; an
    exchange phase's marker carries `phase_detail` for its sites). `asm-lower-calls` writes them as the marker
    lines `label_sites` reads."""
    if op.prev_op is None and (p := op.parent_op()) is not None and p.name == "func.func":
        _NAMES.clear()  # a new walk of a function: its names afresh
    if op.name == "exchange.phase":
        return [PhaseMarker(phase_detail(op))]
    if op.name in NO_CODE:
        return []
    return [OpMarker(op_name(op))]


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
    current_op: list[str | None] = [None]  # the operator of the last marker
    current_phase: list[dict | None] = [None]  # the exchange phase of the last phase marker

    def add(what: str, kind: str, role: str | None = None, repeat: int | None = None) -> None:
        label = f"{SITE_PREFIX}{len(sites)}"
        out.append(f"{label}:")
        if repeat is None and open_loop:
            repeat, role = open_loop[-1], role or "body"
        op = op_of(what)
        if current_op[0] and kind == "compute" and op not in ("tile.repeat", "exchange.phase"):
            op = current_op[0]
        sites.append(dict(label=label, kind=kind, kernel=None, what=what, op=op, repeat=repeat, role=role))
        if op == "exchange.phase" and current_phase[0] is not None:
            sites[-1]["detail"] = current_phase[0]

    for line in lines:
        if line.startswith(OP_MARKER):
            current_op[0] = line[len(OP_MARKER) :]
            current_phase[0] = None
            continue
        if line.startswith(PHASE_MARKER):
            current_phase[0] = json.loads(line[len(PHASE_MARKER) :])
            continue
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
    sites[-1]["kernel"] = sites[-1]["op"] = "main"
    for s in sites:
        if s["kernel"] is None:
            s["kernel"] = "main"
    lines[:] = out
    return sites


def exchange_phases(sites: list[dict]) -> list[dict]:
    """The exchange phases of `label_sites`' sites, once each (`Package.metadata["exchange_phases"]`, in program
    order): each phase's `phase_detail` with `index` (its position in this list) and `sites` (its sites' numbers).
    The sites lose their `detail` and name the phase by `phase_index` instead: a phase with staging, rounds and
    copies is stored once, not once per site (in place)."""
    out: list[dict] = []
    seen: dict[int, dict] = {}
    for i, s in enumerate(sites):
        d = s.pop("detail", None)
        if d is None:
            continue
        p = seen.get(id(d))
        if p is None:
            p = seen[id(d)] = {"index": len(out), **d, "sites": []}
            out.append(p)
        p["sites"].append(i)
        s["phase_index"] = p["index"]
    return out


def resolve(sites: list[dict], labels: dict[str, int]) -> list[dict]:
    """The sites with their code addresses (`pc`)."""
    return [dict(s, pc=int(labels[s["label"]])) for s in sites]
