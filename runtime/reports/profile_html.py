"""The profile.html viewer (inline CSS/JS; `profile.profile_html` embeds the JSON at __DATA__).

A timeline of steps (compute / exchange / sync, a Repeat loop's first iteration in detail and the rest summed)
with a superstep lane when the profile has `supersteps` (simulator runs), a per-tile view on the same cycle axis
(one row per tile; only the rows and steps in view are drawn, one step per pixel column where steps are
narrower), the per-kernel table, the per-operator table (when the profile has `ops`), the busiest tiles and a
virtualised step list; per-layer cycles (each iteration of a layer loop, with the planner's estimate beside a
measurement when the package carries one) and how the measured total compares with the estimate. Exchange
steps' tooltips name the values moved, bytes, sending and receiving tiles and the largest sends, and (simulator
profiles of packages with `exchange_phases`) the phase's summary: bytes per tensor by IR name, source and
destination tiles, the busiest receiver and sender, rounds and the measured cycles and bytes per cycle; the table
of the heaviest exchange phases shows the same per phase (a row's title is the summary; a click zooms to the
phase's first step). The step list's rows carry their tooltip text as `title`.
`window.profileReport.state()` exposes the view for the browser tests.
"""

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
 body{margin:0;font:13px/1.35 system-ui,sans-serif;color:#222;background:#fafafa;display:flex;flex-direction:column;height:100vh}
 header{padding:6px 10px;border-bottom:1px solid #ccc;background:#fff}
 h1{font-size:15px;margin:0 0 4px 0}
 .controls{display:flex;flex-wrap:wrap;gap:6px 14px;align-items:center;margin-top:4px}
 .controls input{width:80px}
 #summary{color:#555}
 #status{color:#055}
 .legend span{display:inline-block;width:11px;height:11px;margin:0 3px 0 8px;vertical-align:-1px}
 #top{padding:4px 10px 0}
 #timeline{display:block;border:1px solid #bbb;background:#fff;cursor:crosshair}
 #range{padding:2px 0}
 #mid{flex:1;display:flex;min-height:0;padding:4px 10px;gap:10px}
 #tilebox{flex:3;display:flex;flex-direction:column;min-width:0}
 #scroller{flex:1;overflow-y:scroll;border:1px solid #bbb;background:#fff;position:relative}
 #tiles{position:sticky;top:0;display:block;cursor:crosshair}
 #side{flex:2;display:flex;flex-direction:column;gap:6px;min-width:330px;overflow:auto}
 table{border-collapse:collapse;font:12px monospace;background:#fff}
 td,th{border:1px solid #ddd;padding:1px 5px;text-align:right}
 th{background:#f0f0f0} td:first-child{text-align:left} #xphases td:nth-child(2){text-align:left} #xphases td{white-space:nowrap}
 tr.click{cursor:pointer} tr.click:hover{background:#eef}
 #steplist{height:220px;overflow-y:scroll;border:1px solid #bbb;background:#fff;position:relative;font:12px monospace}
 #steplist .row{position:absolute;left:0;right:0;height:18px;line-height:18px;padding:0 4px;white-space:nowrap;cursor:pointer;overflow:hidden}
 #steplist .row:hover{background:#eef}
 #tip{position:fixed;pointer-events:none;background:#fffff0;border:1px solid #888;padding:4px 6px;font:12px monospace;
      white-space:pre;display:none;z-index:10;box-shadow:2px 2px 4px rgba(0,0,0,.2)}
 h2{font-size:13px;margin:2px 0}
</style></head><body>
<header>
 <h1>__TITLE__</h1>
 <div id="summary"></div>
 <div class="controls">
  <label>Tile <input id="tile-input" type="number" min="0" value="0"></label><button id="tile-go">Go</button>
  <button id="undo">Undo zoom</button><button id="reset">Reset</button>
  <span class="legend" id="legend"></span>
 </div>
 <div id="status"></div>
</header>
<div id="top"><div id="range"></div><canvas id="timeline" height="92"></canvas></div>
<div id="mid">
 <div id="tilebox"><h2>Per tile (rows: tiles; cell shade: the tile's share of the step's cycles)</h2>
  <div id="scroller"><canvas id="tiles"></canvas><div id="spacer"></div></div></div>
 <div id="side">
  <div id="estbox" style="display:none"><h2>Estimate vs measurement</h2><div id="estimate"></div><table id="estkinds"></table></div>
  <div id="layersbox" style="display:none"><h2>Layers (iterations of the layer loop)</h2><table id="layers"></table></div>
  <div><h2>Kernels</h2><table id="kernels"></table></div>
  <div id="xphasesbox" style="display:none"><h2>Heaviest exchange phases (measured cycles, all visits; hover a row for what it moves)</h2><table id="xphases"></table></div>
  <div id="opsbox" style="display:none"><h2>Operators</h2><table id="ops"></table></div>
  <div><h2>Busiest tiles</h2><table id="busiest"></table></div>
  <div><h2>Steps</h2><div id="steplist"><div id="stepspacer"></div></div></div>
 </div>
</div>
<div id="tip"></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const T = D.tiles, ST = D.steps, TOTAL = Math.max(1, D.total_cycles), SS = D.supersteps || [], XP = D.exchange_phases || [];
const TLH = SS.length ? 92 : 74;
const COLORS = {compute: "#3c9a4a", exchange: "#c8413b", sync: "#d4a017", "repeat-rest": "#6c7fa8"};
const GUTTER = 64, ROW = 6;
const $ = id => document.getElementById(id);
const S = {lo: 0, hi: TOTAL, zoom: [], drag: null, flashTile: -1, selStep: -1};
const tl = $("timeline"), tiles = $("tiles"), scroller = $("scroller"), tip = $("tip");
const dpr = window.devicePixelRatio || 1;
const starts = Float64Array.from(ST.map(s => s.start)), ends = Float64Array.from(ST.map(s => s.start + s.cycles));
const ssStarts = Float64Array.from(SS.map(s => s.start)), ssEnds = Float64Array.from(SS.map(s => s.start + s.cycles));
const pct = (x, t) => (100 * x / Math.max(1, t)).toFixed(1) + "%";
function sizeCanvas(cv, w, h) { cv.width = w * dpr; cv.height = h * dpr; cv.style.width = w + "px"; cv.style.height = h + "px"; }
function width() { return scroller.clientWidth; }
function xOf(c) { return GUTTER + (c - S.lo) / (S.hi - S.lo) * (width() - GUTTER); }
function cycOf(x) { return S.lo + (x - GUTTER) / (width() - GUTTER) * (S.hi - S.lo); }
function firstVisible() { let lo = 0, hi = ST.length; while (lo < hi) { const m = (lo + hi) >> 1; if (ends[m] <= S.lo) lo = m + 1; else hi = m; } return lo; }
function ssAt(c) { let lo = 0, hi = SS.length - 1; while (lo < hi) { const m = (lo + hi + 1) >> 1; if (ssStarts[m] <= c) lo = m; else hi = m - 1; } return SS.length && ssStarts[lo] <= c && c < ssEnds[lo] ? lo : -1; }
function ssFirstVisible() { let lo = 0, hi = SS.length; while (lo < hi) { const m = (lo + hi) >> 1; if (ssEnds[m] <= S.lo) lo = m + 1; else hi = m; } return lo; }
function stepAt(c) { let lo = 0, hi = ST.length - 1; while (lo < hi) { const m = (lo + hi + 1) >> 1; if (starts[m] <= c) lo = m; else hi = m - 1; } return ST.length && starts[lo] <= c && c < ends[lo] ? lo : -1; }

function drawTimeline() {
  const w = width(), h = TLH; sizeCanvas(tl, w, h);
  const g = tl.getContext("2d"); g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.fillStyle = "#fff"; g.fillRect(0, 0, w, h); g.font = "11px monospace"; g.textBaseline = "middle";
  // Ruler (cycles).
  const span = S.hi - S.lo, p = Math.pow(10, Math.floor(Math.log10(span / 6))), step = span / p > 30 ? 5 * p : span / p > 12 ? 2 * p : p;
  g.strokeStyle = "#ccc"; g.fillStyle = "#333";
  for (let c = Math.ceil(S.lo / step) * step; c <= S.hi; c += step) { const x = xOf(c); g.beginPath(); g.moveTo(x, 12); g.lineTo(x, h); g.stroke(); g.fillText(Math.round(c).toString(), x + 2, 7); }
  g.fillStyle = "#555"; g.fillText("cycles", 4, 7); g.fillText("repeat", 4, 26); g.fillText("steps", 4, 52);
  // Repeat lane: the first iteration and the summed rest.
  for (const r of D.repeats) {
    const a = ST[r.first_step], b = ST[r.last_step];
    if (!a) continue;
    const x0 = Math.max(GUTTER, xOf(a.start)), x1 = Math.min(w, xOf(b.start + b.cycles));
    g.fillStyle = "#dde5f5"; g.fillRect(x0, 18, Math.max(1, x1 - x0), 16);
    g.fillStyle = "#223"; if (x1 - x0 > 60) g.fillText(r.label + ": iteration 1 (detail)", x0 + 3, 26);
    if (r.rest_step !== undefined) {
      const s = ST[r.rest_step], y0 = Math.max(GUTTER, xOf(s.start)), y1 = Math.min(w, xOf(s.start + s.cycles));
      g.fillStyle = "#c7cfe6"; g.fillRect(y0, 18, Math.max(1, y1 - y0), 16);
      g.fillStyle = "#223"; if (y1 - y0 > 60) g.fillText("iterations 2.." + r.count + " (summed)", y0 + 3, 26);
    }
  }
  // Steps.
  for (let i = firstVisible(); i < ST.length && starts[i] < S.hi; i++) {
    const s = ST[i], x0 = Math.max(GUTTER, xOf(s.start)), x1 = Math.min(w, xOf(s.start + s.cycles));
    g.fillStyle = COLORS[s.kind] || "#888"; g.fillRect(x0, 38, Math.max(1, x1 - x0 - (x1 - x0 > 4 ? 1 : 0)), 30);
    if (i === S.selStep) { g.strokeStyle = "#000"; g.lineWidth = 2; g.strokeRect(x0 + 1, 39, Math.max(2, x1 - x0 - 2), 28); g.lineWidth = 1; }
    if (x1 - x0 > 46) { g.save(); g.beginPath(); g.rect(x0, 38, x1 - x0, 30); g.clip(); g.fillStyle = "#fff"; g.fillText(s.kind === "compute" ? s.name.replace(/^nn\./, "") : s.kind, x0 + 3, 53); g.restore(); }
  }
  // Supersteps (simulator runs): alternating bands, the summed rest of a loop in the repeat colour.
  if (SS.length) {
    g.fillStyle = "#555"; g.fillText("superstep", 4, 80);
    for (let i = ssFirstVisible(); i < SS.length && ssStarts[i] < S.hi; i++) {
      const s = SS[i], x0 = Math.max(GUTTER, xOf(s.start)), x1 = Math.min(w, xOf(s.start + s.cycles));
      g.fillStyle = s.kind === "repeat-rest" ? "#c7cfe6" : (s.index % 2 ? "#9aa3ad" : "#c9d0d6"); g.fillRect(x0, 73, Math.max(1, x1 - x0), 14);
    }
  }
  if (S.drag) { const a = Math.min(S.drag.x0, S.drag.x1), b = Math.max(S.drag.x0, S.drag.x1); g.fillStyle = "rgba(40,90,200,.18)"; g.fillRect(a, 0, b - a, h); }
  $("range").textContent = "cycles " + Math.round(S.lo) + " \u2013 " + Math.round(S.hi) + " of " + D.total_cycles + (S.zoom.length ? " (zoom depth " + S.zoom.length + ")" : "");
}

function drawTiles() {
  const w = width(), h = scroller.clientHeight; sizeCanvas(tiles, w, h);
  const g = tiles.getContext("2d"); g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.fillStyle = "#fff"; g.fillRect(0, 0, w, h); g.font = "10px monospace"; g.textBaseline = "middle";
  const top = scroller.scrollTop, t0 = Math.floor(top / ROW), t1 = Math.min(T, Math.ceil((top + h) / ROW));
  const i0 = firstVisible();
  for (let i = i0; i < ST.length && starts[i] < S.hi; i++) {
    let s = ST[i], x0 = Math.max(GUTTER, xOf(s.start)), x1 = Math.min(w, xOf(s.start + s.cycles));
    if (x1 - x0 < 1) {  // sub-pixel steps: the longest step of this pixel column stands for all of them
      const px = Math.floor(x0); let best = i;
      while (i + 1 < ST.length && starts[i + 1] < S.hi && Math.floor(Math.max(GUTTER, xOf(starts[i + 1]))) === px) { i++; if (ST[i].cycles > ST[best].cycles) best = i; }
      s = ST[best]; x0 = px; x1 = px + 1;
    }
    const wd = Math.max(1, x1 - x0);
    g.fillStyle = COLORS[s.kind] || "#888";
    for (let t = t0; t < t1; t++) {
      const v = s.tile_cycles[t] / Math.max(1, s.cycles);
      if (v <= 0) continue;
      g.globalAlpha = 0.15 + 0.85 * Math.min(1, v); g.fillRect(x0, t * ROW - top, wd, ROW - 1);
    }
  }
  g.globalAlpha = 1;
  for (let t = t0; t < t1; t++) {
    const y = t * ROW - top;
    if (t === S.flashTile) { g.fillStyle = "rgba(255,220,0,.45)"; g.fillRect(0, y - 1, w, ROW + 1); }
    if (t % 16 === 0 || t === S.flashTile) { g.fillStyle = "#333"; g.fillText("tile " + t, 3, y + ROW / 2); }
  }
}
let pending = false;
function redraw() { if (pending) return; pending = true; requestAnimationFrame(() => { pending = false; drawTimeline(); drawTiles(); }); }
function status(s) { $("status").textContent = s; }
function zoomTo(lo, hi) { lo = Math.max(0, lo); hi = Math.min(TOTAL, hi); if (hi - lo < 1) return; S.zoom.push([S.lo, S.hi]); S.lo = lo; S.hi = hi; status("zoomed to cycles " + Math.round(lo) + " \u2013 " + Math.round(hi)); redraw(); }
function undoZoom() { if (S.zoom.length) { [S.lo, S.hi] = S.zoom.pop(); status("zoom undone"); redraw(); } }
function gotoTile(t) { t = Math.max(0, Math.min(T - 1, t | 0)); S.flashTile = t; scroller.scrollTop = Math.max(0, t * ROW - 40); status("tile " + t + ": busy " + D.tile_busy[t] + " cycles"); redraw(); }
function selectStep(i) { const s = ST[i]; S.selStep = i; zoomTo(s.start - s.cycles * 0.5, s.start + s.cycles * 1.5); status("step " + i + ": " + s.label); }
function reset() { S.lo = 0; S.hi = TOTAL; S.zoom = []; S.flashTile = -1; S.selStep = -1; scroller.scrollTop = 0; status("view reset"); redraw(); }

function stepText(i) {
  const s = ST[i], tc = s.tile_cycles; let mx = 0, at = 0, sum = 0, n = 0;
  for (let t = 0; t < tc.length; t++) { if (tc[t] > mx) { mx = tc[t]; at = t; } if (tc[t] > 0) { sum += tc[t]; n++; } }
  const lines = ["step " + i + " (superstep " + s.superstep + "): " + s.kind, s.label, "cycles " + s.cycles + " from " + s.start + " (" + pct(s.cycles, TOTAL) + " of the program)",
    "active tiles " + s.active_tiles + " of " + T + ", busiest tile " + at + " (" + mx + "), mean active " + (n ? Math.round(sum / n) : 0)];
  if (s.op !== undefined) lines.push("operator " + s.op + ", kernel " + s.kernel);
  if (s.rounds !== undefined) lines.push(s.rounds + " exchange rounds summed (--profile-merge-rounds)");
  if (s.by_kind !== undefined) lines.push("measured: compute " + s.by_kind.compute + ", exchange " + s.by_kind.exchange + ", sync " + s.by_kind.sync);
  if (s.bytes !== undefined) lines.push("transfers " + s.transfers + ", " + s.bytes + " B" + (s.max_row_bytes !== undefined ? ", max table " + s.max_row_bytes + " B/tile" : ""));
  if (s.phase !== undefined) {
    lines.push(s.phase + ": " + s.values.join(", "), "tiles " + s.senders + " -> " + s.receivers);
    for (const [from, to, b] of s.largest) lines.push("  send tile " + from + " -> " + to + ": " + b + " B");
  }
  if (s.phase_index !== undefined && XP[s.phase_index]) lines.push("", ...phaseLines(XP[s.phase_index]));
  if (s.repeat !== null && s.repeat !== undefined) lines.push(s.kind === "repeat-rest" ? s.iterations + " iterations summed" : "in " + D.repeats[s.repeat].label + ", iteration 1");
  return lines.join("\n");
}
// An exchange phase's summary (D.exchange_phases: what the compiler says it moves, what the run measured).
function phaseLines(p) {
  const out = [p.phase + " (exchange phase " + p.index + " of " + XP.length + ", IR phase " + p.ir + ")",
    "moves " + p.bytes + " B sent, " + p.received + " B received" + (p.received > p.bytes ? " (multicast)" : "") + ", " + p.copied + " B copied on tiles; " + p.transfers + " sends, " + p.receives + " receives, " + p.rounds + " rounds"];
  for (const t of p.tensors) out.push("  " + t.name + " -> " + t.to + " (" + t.of + (t.for ? ", for " + t.for : "") + "): " + t.bytes + " B sent, " + t.received + " B received, " + t.copied + " B copied");
  const br = p.busiest_receiver, bs = p.busiest_sender;
  out.push(p.src_tiles + " source tiles -> " + p.dst_tiles + " destination tiles" +
    (br ? "; busiest receiver tile " + br[0] + ": " + br[1] + " B in " + br[2] + " receives" : "") +
    (bs ? "; busiest sender tile " + bs[0] + ": " + bs[1] + " B in " + bs[2] + " sends" : ""));
  out.push("busiest port " + p.port_words + " words; exchange-schedule: " + p.schedule_cycles + " cycles");
  if (p.visits !== undefined) out.push("measured: " + p.cycles + " cycles in " + p.visits + " visit" + (p.visits === 1 ? "" : "s") +
    " (" + p.cycles_per_visit + " per visit; exchange " + p.exchange + ", sync " + p.sync + ", compute " + p.compute + "), " +
    p.bytes_per_cycle + " B/cycle sent, " + p.received_per_cycle + " B/cycle received");
  return out;
}
function phaseText(p) { return phaseLines(p).join("\n"); }
function ssText(j) {
  const s = SS[j], head = s.kind === "repeat-rest" ? s.supersteps + " supersteps of iterations 2.. of " + D.repeats[s.repeat].label + " (summed)" : "superstep " + s.index;
  return [head, "cycles " + s.cycles + " from " + s.start + " (" + pct(s.cycles, TOTAL) + ")", "compute " + s.compute + ", exchange " + s.exchange + ", sync " + s.sync, "steps " + s.first_step + ".." + s.last_step].join("\n");
}
function showTip(text, ev) { tip.textContent = text; tip.style.display = "block"; tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 4) + "px"; tip.style.top = Math.min(ev.clientY + 14, window.innerHeight - tip.offsetHeight - 4) + "px"; }
function hideTip() { tip.style.display = "none"; }
const lx = (ev, el) => ev.clientX - el.getBoundingClientRect().left;
for (const el of [tl, tiles]) {
  el.addEventListener("mousedown", ev => { if (ev.button !== 0) return; const x = Math.max(GUTTER, lx(ev, el)); S.drag = {x0: x, x1: x, el}; ev.preventDefault(); });
  el.addEventListener("contextmenu", ev => { ev.preventDefault(); undoZoom(); });
  el.addEventListener("mouseleave", hideTip);
}
window.addEventListener("mousemove", ev => { if (S.drag) { S.drag.x1 = Math.max(GUTTER, Math.min(width(), lx(ev, S.drag.el))); hideTip(); redraw(); } });
window.addEventListener("mouseup", ev => {
  if (!S.drag) return; const d = S.drag; S.drag = null;
  if (Math.abs(d.x1 - d.x0) > 4) zoomTo(cycOf(Math.min(d.x0, d.x1)), cycOf(Math.max(d.x0, d.x1)));
  else { const i = stepAt(cycOf(d.x0)); if (i >= 0) { S.selStep = i; status("step " + i + ": " + ST[i].label); } }
  redraw();
});
window.addEventListener("keydown", ev => { if (ev.key === "Escape" && S.drag) { S.drag = null; status("drag cancelled"); redraw(); } });
tl.addEventListener("mousemove", ev => {
  if (S.drag) return; const x = lx(ev, tl); if (x < GUTTER) return hideTip();
  if (SS.length && ev.clientY - tl.getBoundingClientRect().top >= 72) { const j = ssAt(cycOf(x)); return j >= 0 ? showTip(ssText(j), ev) : hideTip(); }
  const i = stepAt(cycOf(x)); if (i >= 0) showTip(stepText(i), ev); else hideTip();
});
tiles.addEventListener("mousemove", ev => {
  if (S.drag) return; const r = tiles.getBoundingClientRect(), x = ev.clientX - r.left;
  const t = Math.floor((ev.clientY - r.top + scroller.scrollTop) / ROW), i = x >= GUTTER ? stepAt(cycOf(x)) : -1;
  if (t >= T) return hideTip();
  if (i < 0) return showTip("tile " + t + ": busy " + D.tile_busy[t] + " cycles (" + pct(D.tile_busy[t], TOTAL) + ")", ev);
  const s = ST[i]; showTip("tile " + t + ", step " + i + " (" + s.kind + ")\n" + s.label + "\ntile cycles " + s.tile_cycles[t] + " of " + s.cycles + " (" + pct(s.tile_cycles[t], s.cycles) + ")", ev);
});
tiles.addEventListener("wheel", ev => { if (!ev.shiftKey) return; ev.preventDefault(); const c = cycOf(lx(ev, tiles)), f = ev.deltaY > 0 ? 1.25 : 0.8; zoomTo(c - (c - S.lo) * f, c + (S.hi - c) * f); }, {passive: false});
scroller.addEventListener("scroll", redraw);
window.addEventListener("resize", redraw);
$("tile-go").onclick = () => gotoTile(parseInt($("tile-input").value, 10));
$("tile-input").onkeydown = ev => { if (ev.key === "Enter") $("tile-go").click(); };
$("undo").onclick = undoZoom; $("reset").onclick = reset;

// Tables and the virtualised step list.
(function tables() {
  const t = D.totals, all = t.compute + t.exchange + t.sync;
  $("summary").textContent = "source: " + D.source + (D.source === "estimate" ? " (exchange-level estimates, not measured)" : D.source === "simulator" ? " (measured on the instruction-level simulator, " + (D.run ? D.run.internal_syncs + " internal syncs" : "") + ")" : "") + "; " + D.total_cycles +
    " cycles: compute " + t.compute + " (" + pct(t.compute, all) + "), exchange " + t.exchange + " (" + pct(t.exchange, all) + "), sync " + t.sync + " (" + pct(t.sync, all) + "); " +
    ST.length + " steps on " + T + " tiles" + D.repeats.map(r => "; " + r.label + " (iteration 1 in detail, the rest summed)").join("");
  $("legend").innerHTML = Object.keys(COLORS).map(k => '<span style="background:' + COLORS[k] + '"></span>' + k).join("");
  $("kernels").innerHTML = "<tr><th>kernel</th><th>calls</th><th>cycles</th><th>share</th></tr>" +
    D.kernels.map(k => "<tr><td>" + k.name + "</td><td>" + k.calls + "</td><td>" + k.cycles + "</td><td>" + pct(k.cycles, t.compute) + "</td></tr>").join("");
  $("busiest").innerHTML = "<tr><th>tile</th><th>busy</th><th>compute</th><th>exchange</th><th>idle</th></tr>" +
    D.busiest_tiles.slice(0, 12).map(b => '<tr class="click" data-tile="' + b.tile + '"><td>' + b.tile + "</td><td>" + b.busy + "</td><td>" + b.compute + "</td><td>" + b.exchange + "</td><td>" + b.idle + "</td></tr>").join("");
  for (const tr of $("busiest").querySelectorAll("tr.click")) tr.onclick = () => gotoTile(+tr.dataset.tile);
  if (D.ops) {
    const esc = x => String(x).replace(/&/g, "&amp;").replace(/</g, "&lt;");
    $("opsbox").style.display = "";
    $("ops").innerHTML = "<tr><th>operator</th><th>steps</th><th>cycles</th><th>compute</th><th>exchange</th><th>sync</th></tr>" +
      D.ops.slice(0, 40).map(o => "<tr><td>" + esc(o.name) + "</td><td>" + o.steps + "</td><td>" + o.cycles + "</td><td>" + o.compute + "</td><td>" + o.exchange + "</td><td>" + o.sync + "</td></tr>").join("");
  }
  if (XP.length && XP[0].visits !== undefined) {
    const esc = x => String(x).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/"/g, "&quot;");
    const heavy = XP.slice().sort((a, b) => b.cycles - a.cycles || b.bytes - a.bytes).slice(0, 20);
    $("xphasesbox").style.display = "";
    $("xphases").innerHTML = "<tr><th>phase</th><th>tensors</th><th>visits</th><th>bytes</th><th>received</th><th>cycles / visit</th><th>B / cycle</th><th>rounds</th><th>tiles</th></tr>" +
      heavy.map(p => '<tr class="click" data-phase="' + p.index + '" title="' + esc(phaseText(p)) + '"><td>' + esc(p.phase) + "</td><td>" + esc(p.tensors.map(t => t.name).join(" ")) + "</td><td>" + p.visits + "</td><td>" + p.bytes + "</td><td>" + p.received + "</td><td>" +
        p.cycles_per_visit + "</td><td>" + p.bytes_per_cycle + "</td><td>" + p.rounds + "</td><td>" + p.src_tiles + " \u2192 " + p.dst_tiles + "</td></tr>").join("");
    for (const tr of $("xphases").querySelectorAll("tr.click")) tr.onclick = () => { const p = XP[+tr.dataset.phase]; if (p.first_step >= 0) selectStep(p.first_step); };
  }
  const its = D.repeats.flatMap(r => (r.iterations || []).map(it => [r, it]));
  const E = D.estimate, est = E ? E.repeats.flatMap(r => r.iterations) : [];
  if (its.length) {
    $("layersbox").style.display = "";
    $("layers").innerHTML = "<tr><th>layer</th><th>cycles</th><th>share</th><th>compute</th><th>exchange</th><th>sync</th>" + (E ? "<th>estimate</th><th>measured / est.</th>" : "") + "</tr>" +
      its.map(([r, it], k) => '<tr class="click" data-layer="' + k + '"><td>' + r.label + " #" + it.iteration + "</td><td>" + it.cycles + "</td><td>" + pct(it.cycles, TOTAL) + "</td><td>" + it.compute + "</td><td>" + it.exchange + "</td><td>" + it.sync + "</td>" +
        (E ? "<td>" + (est[k] !== undefined ? est[k] : "") + "</td><td>" + (est[k] ? (it.cycles / est[k]).toFixed(2) + "x" : "") + "</td>" : "") + "</tr>").join("");
    for (const tr of $("layers").querySelectorAll("tr.click")) tr.onclick = () => { const [r, it] = its[+tr.dataset.layer], a = it.start !== undefined ? it.start : ST[r.first_step].start + (it.iteration - 1) * it.cycles; zoomTo(a, a + it.cycles); };
  }
  if (E && D.source !== "estimate") {
    const ratio = D.total_cycles / Math.max(1, E.total_cycles), off = Math.abs(ratio - 1) >= 0.1;
    $("estbox").style.display = "";
    $("estimate").textContent = "The planner's estimate (ipu-report profile) is " + E.total_cycles + " cycles; measured " + D.total_cycles +
      " (" + ratio.toFixed(2) + "x the estimate" + (off ? ": the estimate is " + (ratio > 1 ? "too low" : "too high") + " by " + Math.round(Math.abs(D.total_cycles - E.total_cycles)) + " cycles, " + pct(Math.abs(D.total_cycles - E.total_cycles), D.total_cycles) + " of the measurement)" : ", within 10%)");
    $("estkinds").innerHTML = "<tr><th>kind</th><th>estimate</th><th>measured</th><th>measured / est.</th></tr>" +
      ["compute", "exchange", "sync"].map(k => "<tr><td>" + k + "</td><td>" + E.totals[k] + "</td><td>" + t[k] + "</td><td>" + (E.totals[k] ? (t[k] / E.totals[k]).toFixed(2) + "x" : "") + "</td></tr>").join("");
  }
  const list = $("steplist"), RH = 18; $("stepspacer").style.height = ST.length * RH + "px";
  const rows = [];
  function renderList() {
    const a = Math.floor(list.scrollTop / RH), b = Math.min(ST.length, a + Math.ceil(list.clientHeight / RH) + 1);
    for (const r of rows) r.remove(); rows.length = 0;
    for (let i = a; i < b; i++) {
      const s = ST[i], d = document.createElement("div"); d.className = "row"; d.style.top = i * RH + "px";
      d.innerHTML = '<span style="color:' + COLORS[s.kind] + '">\u25A0</span> ' + i + " " + s.label.replace(/&/g, "&amp;").replace(/</g, "&lt;") + " \u2014 " + s.cycles;
      d.title = stepText(i); d.onclick = () => selectStep(i); list.appendChild(d); rows.push(d);
    }
  }
  list.addEventListener("scroll", renderList); renderList();
})();
$("spacer").style.height = T * ROW + "px";
drawTimeline(); drawTiles();
window.profileReport = {
  state: () => ({lo: S.lo, hi: S.hi, zoomDepth: S.zoom.length, flashTile: S.flashTile, selStep: S.selStep, firstTile: Math.floor(scroller.scrollTop / ROW)}),
  stepX: i => (xOf(ST[i].start) + xOf(ST[i].start + ST[i].cycles)) / 2,
  ssX: j => (xOf(SS[j].start) + xOf(SS[j].start + SS[j].cycles)) / 2, tileY: t => t * ROW - scroller.scrollTop + ROW / 2, gotoTile, ready: true,
};
</script></body></html>
"""
