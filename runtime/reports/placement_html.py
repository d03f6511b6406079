"""The placement.html viewer (inline CSS/JS; `placement.placement_html` embeds the JSON at __DATA__).

Rendering draws only the rows and the address range in view (canvas), so a 1472-tile map with reuse rows stays
responsive. Below it, "Live at a program step": for a tile (its class) and a step (event) the allocations live
there, largest first, with the tile's liveness plot (live bytes per step); and the fullest tiles with what holds
them at their peak. `window.placementReport.state()` (and `.live.state()`) expose the view for the browser tests.
"""

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
 body{margin:0;font:13px/1.35 system-ui,sans-serif;color:#222;background:#fafafa;display:flex;flex-direction:column;height:100vh}
 header{padding:6px 10px;border-bottom:1px solid #ccc;background:#fff}
 h1{font-size:15px;margin:0 0 4px 0}
 .controls{display:flex;flex-wrap:wrap;gap:6px 14px;align-items:center}
 .controls input[type=number],.controls input:not([type]){width:90px}
 #summary{color:#555}
 #failure{background:#fde2e1;border:1px solid #d33;padding:4px 8px;margin-top:4px;white-space:pre-wrap;display:none}
 #main{flex:1;display:flex;flex-direction:column;min-height:0;padding:0 10px}
 #rangebar{display:flex;justify-content:space-between;padding:3px 0;color:#333}
 #ruler{display:block;border:1px solid #bbb;border-bottom:none;background:#fff;cursor:crosshair}
 #scroller{flex:1;overflow-y:scroll;position:relative;border:1px solid #bbb;background:#fff;min-height:120px}
 #map{position:sticky;top:0;display:block;cursor:crosshair}
 #heatwrap{padding:4px 10px 8px}
 #heat{border:1px solid #bbb;background:#fff;display:block;cursor:pointer}
 #tip{position:fixed;pointer-events:none;background:#fffff0;border:1px solid #888;padding:4px 6px;font:12px monospace;
      white-space:pre;display:none;z-index:10;box-shadow:2px 2px 4px rgba(0,0,0,.2)}
 .legend span{display:inline-block;width:11px;height:11px;margin:0 3px 0 8px;vertical-align:-1px}
 #status{color:#055}
 #livewrap{padding:4px 10px 8px;display:flex;gap:12px;max-height:270px;border-top:1px solid #ccc;background:#fff}
 #livewrap > div{overflow:auto}
 #livewrap table{border-collapse:collapse;font:12px monospace}
 #livewrap td,#livewrap th{border:1px solid #ddd;padding:1px 5px;text-align:right}
 #livewrap td:first-child,#livewrap td.l{text-align:left} #livewrap th{background:#f0f0f0}
 #livewrap tr.click{cursor:pointer} #livewrap tr.click:hover{background:#eef}
 #liveplot{border:1px solid #bbb;display:block;cursor:crosshair}
</style></head><body>
<header>
 <h1>__TITLE__</h1>
 <div id="summary"></div>
 <div id="failure"></div>
 <div class="controls">
  <label>Tile <input id="tile-input" type="number" min="0" value="0"></label><button id="tile-go">Go</button>
  <label>Address <input id="addr-input" placeholder="0x50000"></label><button id="addr-go">Go</button>
  <label>Rows <select id="row-height"><option>12</option><option selected>16</option><option>24</option></select> px</label>
  <label><input id="reuse" type="checkbox" checked> reuse rows</label>
  <button id="undo">Undo zoom</button><button id="clear">Clear highlight</button><button id="reset">Reset</button>
  <span class="legend" id="legend"></span>
 </div>
 <div id="status"></div>
</header>
<div id="main">
 <div id="rangebar"><span id="range"></span><span id="highlight-info"></span></div>
 <canvas id="ruler" height="26"></canvas>
 <div id="scroller"><canvas id="map"></canvas><div id="spacer"></div></div>
</div>
<div id="heatwrap"><div>Occupancy per tile (rows, tiles top to bottom) and event (columns), white = the least occupied, dark red = the peak; click to go to a tile.</div>
 <canvas id="heat" height="110"></canvas></div>
<div id="livewrap">
 <div><b>Live at a program step</b> (liveness: the tile's live bytes at each step; click the plot to pick a step)<br>
  <label>Tile <input id="live-tile" type="number" min="0" value="0" style="width:70px"></label>
  <label>Step <input id="live-event" type="range" min="0" value="0" style="width:220px"></label>
  <button id="live-peak">Its peak</button><br><span id="live-info"></span><br>
  <canvas id="liveplot" width="420" height="120"></canvas></div>
 <div><table id="live-table"></table></div>
 <div><b>Fullest tiles</b> (what holds them at their peak; click to show)<table id="fullest"></table></div>
</div>
<details id="contents-wrap" style="display:none;padding:6px 10px"><summary><b>Inside the reservations</b>: the lowering's own
 allocations (kernel frames, tables, scratch elements, per-iteration data), the same address on every tile</summary>
 <table id="contents"></table></details>
<div id="tip"></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const T = D.tiles, NC = D.classes.length, EV = D.events.length, LAST = EV - 1;
const tileClass = Int32Array.from(D.tile_class);
const COLORS = {parameter:"#d4a017", "repeat-member":"#e0b84a", transient:"#3c9a4a", input:"#c8413b",
  output:"#e0605a", reservation:"#7d5ba6", host_aperture:"#b9a6d6"};
const GUTTER = 78;
const hex = a => "0x" + Math.round(a).toString(16);
const $ = id => document.getElementById(id);
function color(al) { return al.reserve === "host_aperture" ? COLORS.host_aperture : (COLORS[al.kind] || "#888"); }
// Map label: name and owner; an unnamed result ("%?") is named by its producer and last user instead.
const LABELS = D.allocations.map(al => {
  const seq = al.sequence ? "[" + al.sequence.member + "]" : "";
  if (al.name !== "%?") return al.name + seq + " " + al.owner;
  return al.owner + seq + (al.whole_program ? "" : " \u2192 " + al.live_ops[1]);
});

// Lanes: per class and row, placements sorted by address (disjoint within a row): parallel typed arrays.
const lanes = [];
(function buildLanes() {
  const tmp = D.classes.map(c => Array.from({length: c.rows}, () => []));
  for (const al of D.allocations) al.placed.forEach((p, k) => tmp[p[0]][p[4]].push([p[1], p[1] + p[2], p[1] + p[2] + p[3], al.id, p[1] + p[2] + (al.tails ? al.tails[k] : 0)]));
  for (let c = 0; c < NC; c++) lanes.push(tmp[c].map(list => {
    list.sort((x, y) => x[0] - y[0]);
    const n = list.length, a = new Float64Array(n), e = new Float64Array(n), pe = new Float64Array(n), te = new Float64Array(n), id = new Int32Array(n);
    list.forEach((v, i) => { a[i] = v[0]; e[i] = v[1]; pe[i] = v[2]; te[i] = v[4]; id[i] = v[3]; });
    return {a, e, pe, te, id, n};
  }));
})();

const full = [D.sram.base, D.sram.end];
const S = {lo: full[0], hi: full[1], rowH: 16, reuse: true, pinned: -1, zoom: [], drag: null, marker: -1, flashTile: -1};
let rowStart = new Int32Array(T + 1);
function layoutRows() {
  for (let t = 0; t < T; t++) rowStart[t + 1] = rowStart[t] + (S.reuse ? D.classes[tileClass[t]].rows : 1);
  $("spacer").style.height = (rowStart[T] * S.rowH) + "px";
}
function tileOfRow(g) {  // binary search in rowStart
  let lo = 0, hi = T - 1;
  while (lo < hi) { const m = (lo + hi + 1) >> 1; if (rowStart[m] <= g) lo = m; else hi = m - 1; }
  return lo;
}

const map = $("map"), ruler = $("ruler"), scroller = $("scroller"), heat = $("heat"), tip = $("tip");
const dpr = window.devicePixelRatio || 1;
function sizeCanvas(cv, w, h) { cv.width = w * dpr; cv.height = h * dpr; cv.style.width = w + "px"; cv.style.height = h + "px"; }
function mapW() { return scroller.clientWidth; }
function xOf(a) { return GUTTER + (a - S.lo) / (S.hi - S.lo) * (mapW() - GUTTER); }
function addrOf(x) { return S.lo + (x - GUTTER) / (mapW() - GUTTER) * (S.hi - S.lo); }

function visibleItems(lane, fn) {  // items of a lane that intersect [lo, hi)
  let lo = 0, hi = lane.n;
  while (lo < hi) { const m = (lo + hi) >> 1; if (lane.a[m] < S.lo) lo = m + 1; else hi = m; }
  let i = Math.max(0, lo - 1);
  for (; i < lane.n && lane.a[i] < S.hi; i++) if (lane.pe[i] > S.lo) fn(i);
}

function drawRuler() {
  const w = mapW(), h = 26;
  sizeCanvas(ruler, w, h);
  const g = ruler.getContext("2d"); g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.fillStyle = "#fff"; g.fillRect(0, 0, w, h);
  const span = S.hi - S.lo, raw = span / 8, p = Math.pow(2, Math.ceil(Math.log2(raw)));
  g.fillStyle = "#333"; g.font = "11px monospace"; g.strokeStyle = "#999";
  for (let a = Math.ceil(S.lo / p) * p; a <= S.hi; a += p) {
    const x = xOf(a); g.beginPath(); g.moveTo(x, 14); g.lineTo(x, h); g.stroke(); g.fillText(hex(a), x + 2, 11);
  }
  // Region boundary and aperture.
  g.fillStyle = "#d33"; const xr = xOf(D.sram.region1); if (xr >= GUTTER && xr <= w) g.fillRect(xr - 1, 14, 2, 12);
  g.fillStyle = "#555"; g.fillText("address", 4, 20);
  if (S.drag) drawDrag(g, h);
  $("range").textContent = "range " + hex(S.lo) + " \u2013 " + hex(S.hi) + " (" + Math.round(S.hi - S.lo) + " B)" +
    (S.zoom.length ? ", zoom depth " + S.zoom.length : "");
}
function drawDrag(g, h) {
  const x0 = Math.min(S.drag.x0, S.drag.x1), x1 = Math.max(S.drag.x0, S.drag.x1);
  g.fillStyle = "rgba(40,90,200,.18)"; g.fillRect(x0, 0, x1 - x0, h);
  g.strokeStyle = "#2a5ac8"; g.strokeRect(x0 + .5, .5, x1 - x0, h - 1);
}

function drawMap() {
  const w = mapW(), h = scroller.clientHeight;
  sizeCanvas(map, w, h);
  const g = map.getContext("2d"); g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.fillStyle = "#fff"; g.fillRect(0, 0, w, h);
  const rh = S.rowH, top = scroller.scrollTop, first = Math.floor(top / rh), last = Math.min(rowStart[T], Math.ceil((top + h) / rh));
  g.font = (rh >= 16 ? 11 : 9) + "px monospace"; g.textBaseline = "middle";
  // Memory-element boundaries (16 KiB in region 0, 32 KiB in region 1), faint.
  g.strokeStyle = "#eee";
  const [e0, e1] = D.sram.element_bytes, pxPerByte = (w - GUTTER) / (S.hi - S.lo);
  for (const [lo, hi, step] of [[D.sram.base, D.sram.region1, e0], [D.sram.region1, D.sram.end, e1]]) {
    if (step * pxPerByte < 6) continue;
    for (let a = lo + Math.max(0, Math.ceil((S.lo - lo) / step)) * step; a < Math.min(hi, S.hi); a += step) {
      const x = Math.round(xOf(a)) + .5; g.beginPath(); g.moveTo(x, 0); g.lineTo(x, h); g.stroke();
    }
  }
  for (let row = first; row < last; row++) {
    const t = tileOfRow(row), r = row - rowStart[t], c = tileClass[t], y = row * rh - top;
    const ls = S.reuse ? [lanes[c][r]] : lanes[c];
    for (const lane of ls) visibleItems(lane, i => {
      const al = D.allocations[lane.id[i]];
      const x0 = Math.max(GUTTER, xOf(lane.a[i])), x1 = Math.min(w, xOf(lane.e[i])), x2 = Math.min(w, xOf(lane.pe[i]));
      const dim = S.pinned >= 0 && lane.id[i] !== S.pinned;
      g.globalAlpha = dim ? 0.22 : 1;
      g.fillStyle = color(al); g.fillRect(x0, y + 1, Math.max(1, x1 - x0 - (x1 - x0 > 4 ? 1 : 0)), rh - 2);
      if (x2 > x1 + 0.5) { g.fillStyle = "#ddd"; g.fillRect(x1, y + 1, x2 - x1, rh - 2); }  // stride padding
      const x3 = Math.min(w, xOf(lane.te[i]));
      if (x3 > x1 + 0.5) { g.fillStyle = "#f0a830"; g.fillRect(x1, y + rh - 4, x3 - x1, 3); }  // access tail
      if (!dim && lane.id[i] === S.pinned) { g.strokeStyle = "#000"; g.lineWidth = 2; g.strokeRect(x0 + 1, y + 2, Math.max(1, x1 - x0) - 2, rh - 4); g.lineWidth = 1; }
      if (x1 - x0 > 50) {
        g.fillStyle = "#fff"; g.save(); g.beginPath(); g.rect(x0, y, x1 - x0, rh); g.clip();
        g.fillText(LABELS[al.id], x0 + 3, y + rh / 2); g.restore();
      }
      g.globalAlpha = 1;
    });
    // Gutter: tile number on its first row, reuse-row index below; panel border under each tile.
    g.fillStyle = t === S.flashTile ? "#ffe680" : "#f3f3f3"; g.fillRect(0, y, GUTTER - 2, rh);
    g.fillStyle = "#333";
    g.fillText(r === 0 ? "tile " + t : "  reuse " + r, 4, y + rh / 2);
    if (row === rowStart[t + 1] - 1) { g.fillStyle = "#999"; g.fillRect(0, y + rh - 1, w, 1); }
  }
  if (S.marker >= S.lo && S.marker <= S.hi) { g.fillStyle = "#d00"; g.fillRect(xOf(S.marker) - 1, 0, 2, h); }
  if (S.drag) drawDrag(g, h);
}

let pending = false;
function redraw() { if (pending) return; pending = true; requestAnimationFrame(() => { pending = false; drawRuler(); drawMap(); drawHeatCursor(); }); }
function redrawNow() { drawRuler(); drawMap(); drawHeatCursor(); }

// --- hit testing and tooltip ---------------------------------------------------------------------------------
function hit(x, y) {
  if (x < GUTTER) return null;
  const row = Math.floor((y + scroller.scrollTop) / S.rowH);
  if (row >= rowStart[T]) return null;
  const t = tileOfRow(row), r = row - rowStart[t], c = tileClass[t], a = addrOf(x);
  const ls = S.reuse ? [lanes[c][r]] : lanes[c];
  let found = null;
  for (const lane of ls) for (let i = 0; i < lane.n; i++) if (lane.a[i] <= a && a < Math.max(lane.pe[i], lane.te[i])) found = {id: lane.id[i], a: lane.a[i], e: lane.e[i], pe: lane.pe[i], te: lane.te[i], pad: a >= lane.e[i], onTail: a >= lane.e[i] && a < lane.te[i]};
  return {tile: t, row: r, cls: c, addr: a, item: found};
}
function lifetime(al) {
  if (al.whole_program) return "whole program";
  return "events " + al.live[0] + "\u2013" + al.live[1] + " (" + al.live_ops[0] + " \u2192 " + al.live_ops[1] + ")";
}
function describe(h) {
  const it = h.item, al = D.allocations[it.id];
  const lines = [al.name + "  " + al.owner, "kind " + al.kind + (al.reserve ? " (" + al.reserve + ")" : "") +
    (al.sequence ? ", member " + al.sequence.member + " of " + al.sequence.count : "") + ", region " + al.region + ", align " + al.align,
    "tile " + h.tile + " (class " + h.cls + ", " + D.classes[h.cls].tiles + " tiles)" + (h.row ? ", reuse row " + h.row : ""),
    "address " + hex(it.a) + " \u2013 " + hex(it.e) + "  " + (it.e - it.a) + " B" + (it.pe > it.e ? " + " + (it.pe - it.e) + " B stride padding" : ""),
    "live " + lifetime(al)];
  if (it.te > it.e) lines.push("access tail " + (it.te - it.e) + " B (alignment slack to " + (D.access_tails ? D.access_tails.granule : 8) + " B; memory-plan requests no tails)");
  if (it.pad) lines.push(it.onTail ? "(pointer is on the access tail)" : "(pointer is on the stride padding)");
  return lines.join("\n");
}
function showTip(text, ev) {
  tip.textContent = text; tip.style.display = "block";
  tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 4) + "px";
  tip.style.top = Math.min(ev.clientY + 14, window.innerHeight - tip.offsetHeight - 4) + "px";
}
function hideTip() { tip.style.display = "none"; }

// --- zoom, navigation, highlight -----------------------------------------------------------------------------
function zoomTo(lo, hi) {
  lo = Math.max(full[0], Math.floor(lo)); hi = Math.min(full[1], Math.ceil(hi));
  if (hi - lo < 8) return;
  S.zoom.push([S.lo, S.hi]); S.lo = lo; S.hi = hi; status("zoomed to " + hex(lo) + " \u2013 " + hex(hi)); redraw();
}
function undoZoom() { if (S.zoom.length) { [S.lo, S.hi] = S.zoom.pop(); status("zoom undone"); redraw(); } }
function gotoTile(t) {
  t = Math.max(0, Math.min(T - 1, t | 0));
  scroller.scrollTop = rowStart[t] * S.rowH; S.flashTile = t; status("tile " + t + " (class " + tileClass[t] + ")"); redraw();
}
function gotoAddr(a) {
  if (!(a >= full[0] && a < full[1])) { status("address " + hex(a) + " is outside the SRAM [" + hex(full[0]) + ", " + hex(full[1]) + ")"); return; }
  S.marker = a;
  if (a < S.lo || a >= S.hi) { const w = S.hi - S.lo; let lo = Math.max(full[0], a - w / 2); zoomTo(lo, Math.min(full[1], lo + w)); }
  status("address " + hex(a)); redraw();
}
function pin(id) {
  S.pinned = id;
  if (id < 0) { $("highlight-info").textContent = ""; status("highlight cleared"); redraw(); return; }
  const al = D.allocations[id];
  let tiles = 0; for (const p of al.placed) tiles += D.classes[p[0]].tiles;
  $("highlight-info").textContent = "highlighted " + al.name + " (" + al.owner + "): on " + tiles + " tiles in " + al.placed.length + " classes, live " + lifetime(al);
  redraw();
}
function reset() {
  S.lo = full[0]; S.hi = full[1]; S.zoom = []; S.marker = -1; S.flashTile = -1; S.rowH = 16; $("row-height").value = "16";
  S.reuse = true; $("reuse").checked = true; layoutRows(); scroller.scrollTop = 0; pin(-1); status("view reset"); redraw();
}
function status(s) { $("status").textContent = s; }

// --- events ----------------------------------------------------------------------------------------------------
function localX(ev, el) { return ev.clientX - el.getBoundingClientRect().left; }
for (const el of [map, ruler]) {
  el.addEventListener("mousedown", ev => {
    if (ev.button !== 0) return;
    const x = localX(ev, el); S.drag = {x0: Math.max(GUTTER, x), x1: Math.max(GUTTER, x), el}; ev.preventDefault();
  });
  el.addEventListener("contextmenu", ev => { ev.preventDefault(); undoZoom(); });
}
window.addEventListener("mousemove", ev => {
  if (S.drag) { S.drag.x1 = Math.max(GUTTER, Math.min(mapW(), localX(ev, S.drag.el))); hideTip(); redraw(); return; }
});
window.addEventListener("mouseup", ev => {
  if (!S.drag) return;
  const d = S.drag; S.drag = null;
  if (Math.abs(d.x1 - d.x0) > 4) zoomTo(addrOf(Math.min(d.x0, d.x1)), addrOf(Math.max(d.x0, d.x1)));
  else if (d.el === map) { const r = map.getBoundingClientRect(), h = hit(ev.clientX - r.left, ev.clientY - r.top); pin(h && h.item ? h.item.id : -1); }
  redraw();
});
window.addEventListener("keydown", ev => { if (ev.key === "Escape" && S.drag) { S.drag = null; status("drag cancelled"); redraw(); } });
map.addEventListener("mousemove", ev => {
  if (S.drag) return;
  const r = map.getBoundingClientRect(), h = hit(ev.clientX - r.left, ev.clientY - r.top);
  if (h && h.item) showTip(describe(h), ev);
  else if (h) showTip("tile " + h.tile + " (class " + h.cls + ")\naddress " + hex(h.addr) + ": no allocation in this row", ev);
  else hideTip();
});
map.addEventListener("mouseleave", hideTip);
map.addEventListener("wheel", ev => {
  if (!ev.shiftKey) return;  // plain wheel scrolls the tiles
  ev.preventDefault();
  const a = addrOf(localX(ev, map)), f = (ev.deltaY || ev.deltaX) > 0 ? 1.25 : 0.8;
  zoomTo(a - (a - S.lo) * f, a + (S.hi - a) * f);
}, {passive: false});
scroller.addEventListener("scroll", redraw);
window.addEventListener("resize", () => { drawHeat(); redraw(); });
$("tile-go").onclick = () => gotoTile(parseInt($("tile-input").value, 10));
$("tile-input").onkeydown = ev => { if (ev.key === "Enter") $("tile-go").click(); };
$("addr-go").onclick = () => gotoAddr(Number($("addr-input").value.trim()));
$("addr-input").onkeydown = ev => { if (ev.key === "Enter") $("addr-go").click(); };
$("row-height").onchange = () => { const t = tileOfRow(Math.floor(scroller.scrollTop / S.rowH)); S.rowH = +$("row-height").value; layoutRows(); gotoTile(t); };
$("reuse").onchange = () => { S.reuse = $("reuse").checked; layoutRows(); redraw(); };
$("undo").onclick = undoZoom; $("clear").onclick = () => pin(-1); $("reset").onclick = reset;

// --- heat map: occupancy per tile and event ----------------------------------------------------------------
let heatImg = null, heatPeak = 1;
function drawHeat() {
  const w = Math.max(200, document.body.clientWidth - 22), h = 110;
  sizeCanvas(heat, w, h);
  const g = heat.getContext("2d"); g.setTransform(1, 0, 0, 1, 0, 0);
  const W = heat.width, H = heat.height, img = g.createImageData(W, H);
  heatPeak = Math.max(1, ...D.occupancy.map(row => Math.max(0, ...row)));
  const heatMin = Math.min(...D.occupancy.map(row => Math.min(...row))), heatRange = Math.max(1, heatPeak - heatMin);
  for (let py = 0; py < H; py++) {
    const t0 = Math.floor(py * T / H), t1 = Math.max(t0 + 1, Math.floor((py + 1) * T / H));
    for (let px = 0; px < W; px++) {
      const e = Math.min(LAST, Math.floor(px * EV / W));
      let v = 0; for (let t = t0; t < t1; t++) v = Math.max(v, D.occupancy[tileClass[t]][e]);
      const q = (v - heatMin) / heatRange, k = (py * W + px) * 4;  // white -> orange -> dark red by fraction of the SRAM
      img.data[k] = 255 - 60 * q; img.data[k + 1] = 255 - 215 * q; img.data[k + 2] = 255 - 240 * Math.min(1, q * 1.6); img.data[k + 3] = 255;
    }
  }
  g.putImageData(img, 0, 0); heatImg = img;
}
function drawHeatCursor() {
  if (!heatImg) return;
  const g = heat.getContext("2d"); g.putImageData(heatImg, 0, 0);
  const H = heat.height, top = scroller.scrollTop / S.rowH, bottom = (scroller.scrollTop + scroller.clientHeight) / S.rowH;
  const y0 = tileOfRow(Math.floor(top)) / T * H, y1 = (tileOfRow(Math.min(rowStart[T] - 1, Math.floor(bottom))) + 1) / T * H;
  g.strokeStyle = "#2a5ac8"; g.lineWidth = 2 * dpr; g.strokeRect(dpr, y0, heat.width - 2 * dpr, Math.max(2, y1 - y0));
}
function heatAt(ev) {
  const r = heat.getBoundingClientRect();
  const t = Math.min(T - 1, Math.floor((ev.clientY - r.top) / r.height * T)), e = Math.min(LAST, Math.floor((ev.clientX - r.left) / r.width * EV));
  return {t, e};
}
heat.addEventListener("mousemove", ev => {
  const {t, e} = heatAt(ev), v = D.occupancy[tileClass[t]][e];
  showTip("tile " + t + " (class " + tileClass[t] + ")\nevent " + e + ": " + D.events[e] + "\nlive " + v + " B (" + (100 * v / (D.sram.end - D.sram.base)).toFixed(1) + "% of SRAM)", ev);
});
heat.addEventListener("mouseleave", hideTip);
heat.addEventListener("click", ev => gotoTile(heatAt(ev).t));

// --- header ------------------------------------------------------------------------------------------------
(function header() {
  const k = D.summary.kinds, peak = Math.max(0, ...D.classes.map(c => c.peak_bytes));
  $("summary").textContent = T + " tiles in " + NC + " classes, " + EV + " events, " + D.summary.allocations + " allocations (" +
    Object.keys(k).map(x => k[x] + " " + x).join(", ") + "), peak live " + peak + " B of " + (D.sram.end - D.sram.base) +
    " B per tile; SRAM " + hex(D.sram.base) + "\u2013" + hex(D.sram.end) + ", interleaved from " + hex(D.sram.region1) +
    ", host aperture " + hex(D.aperture[0]) + "\u2013" + hex(D.aperture[1]);
  const b = D.budgets || {}, r = b.resident_bytes;
  if (r) $("summary").textContent += "; resident parameters per tile " + r.min + " / " + r.median + " / " + r.max + " B (min / median / max)";
  if (b.gemm_budget !== undefined) $("summary").textContent += "; GEMM operand budget " + b.gemm_budget + " B per tile";
  if (D.failure) {
    const f = D.failure; $("failure").style.display = "block";
    $("failure").textContent = "PLACEMENT FAILED on tile " + f.tile + " at " + f.event_name + " placing " + f.request + " (" + f.owner + "): map shows everything placed before the failure.\n" + f.message;
  }
  $("legend").innerHTML = [["parameter", "parameter (whole program)"], ["repeat-member", "Repeat member"], ["transient", "transient"],
    ["input", "input"], ["output", "output"], ["reservation", "support"], ["host_aperture", "host aperture"]]
    .map(([k, l]) => '<span style="background:' + COLORS[k] + '"></span>' + l).join("") + '<span style="background:#ddd"></span>stride padding<span style="background:#f0a830"></span>access tail';
})();
layoutRows(); drawHeat(); redrawNow();
if (D.failure) gotoTile(D.failure.tile);
// The lowering's allocations inside the support reservations, totals per reservation first.
(function contents() {
  if (!D.contents || !D.contents.length) return;
  const esc = x => String(x).replace(/&/g, "&amp;").replace(/</g, "&lt;");
  const tot = {};
  for (const c of D.contents) tot[c.reservation || "(outside every reservation)"] = (tot[c.reservation || "(outside every reservation)"] || 0) + c.bytes;
  let h = "<tr><th>reservation</th><th>owner</th><th>what</th><th>count</th><th>bytes</th><th>addresses</th></tr>";
  for (const r of Object.keys(tot)) h += "<tr><td><b>" + esc(r) + "</b></td><td></td><td>all</td><td></td><td><b>" + tot[r] + "</b></td><td></td></tr>";
  for (const c of D.contents)
    h += "<tr><td>" + esc(c.reservation || "(outside)") + "</td><td>" + esc(c.owner) + "</td><td>" + esc(c.what) + "</td><td>" + c.count +
      "</td><td>" + c.bytes + "</td><td>" + hex(c.lo) + "\u2013" + hex(c.hi) + "</td></tr>";
  $("contents").innerHTML = h;
  $("contents-wrap").style.display = "block";
})();
// Live at a program step: per tile (its class), the allocations live at the chosen event, and the liveness plot.
const LIVE = (function live() {
  const esc = x => String(x).replace(/&/g, "&amp;").replace(/</g, "&lt;");
  const ev = $("live-event"), tin = $("live-tile"), plot = $("liveplot"), NE = D.events.length;
  ev.max = Math.max(0, NE - 1);
  const L = {tile: 0, event: 0};
  function cls() { return D.tile_class[L.tile]; }
  function liveAt(c, e) {
    const out = [];
    for (const al of D.allocations) {
      if (al.live[0] > e || e > al.live[1]) continue;
      for (const p of al.placed) if (p[0] === c) out.push({id: al.id, name: al.name, owner: al.owner, kind: al.kind, addr: p[1], bytes: p[2] + p[3]});
    }
    return out.sort((a, b) => b.bytes - a.bytes || a.id - b.id);
  }
  function draw() {
    const c = cls(), occ = D.occupancy[c] || [], g = plot.getContext("2d"), w = plot.width, h = plot.height;
    const top = Math.max(1, ...D.classes.map(k => k.peak_bytes));  // the highest peak of any tile: plots compare
    g.fillStyle = "#fff"; g.fillRect(0, 0, w, h);
    g.strokeStyle = "#bbb"; g.strokeRect(0, 0, w, h);
    g.fillStyle = "#7a9cc6";
    for (let e = 0; e < NE; e++) { const x0 = e * w / NE, x1 = (e + 1) * w / NE, y = h * (1 - occ[e] / top); g.fillRect(x0, y, Math.max(1, x1 - x0), h - y); }
    g.fillStyle = "#c00"; g.fillRect(L.event * w / NE, 0, Math.max(1, w / NE), h);
    g.fillStyle = "#333"; g.font = "10px monospace"; g.fillText("scale: the fullest tile's peak, " + top + " B", 3, 10);
  }
  function show() {
    const c = cls(), rows = liveAt(c, L.event), occ = (D.occupancy[c] || [])[L.event] || 0;
    ev.value = L.event; tin.value = L.tile;
    $("live-info").textContent = "tile " + L.tile + " (class " + c + ", " + D.classes[c].tiles + " tiles), step " + L.event + " of " + NE + " (" + D.events[L.event] + "): " + occ + " B live in " + rows.length + " allocations; peak " + D.classes[c].peak_bytes + " B";
    $("live-table").innerHTML = "<tr><th>live allocation</th><th>owner</th><th>kind</th><th>address</th><th>bytes</th></tr>" +
      rows.slice(0, 200).map(r => "<tr><td>" + esc(r.name) + '</td><td class="l">' + esc(r.owner) + '</td><td class="l">' + r.kind + "</td><td>0x" + r.addr.toString(16) + "</td><td>" + r.bytes + "</td></tr>").join("");
    draw();
  }
  function select(tile, event) {
    L.tile = Math.max(0, Math.min(D.tiles - 1, tile | 0));
    L.event = event === undefined ? L.event : Math.max(0, Math.min(NE - 1, event | 0)); show();
  }
  function peak() { const occ = D.occupancy[cls()] || [0]; let e = 0; for (let i = 1; i < occ.length; i++) if (occ[i] > occ[e]) e = i; select(L.tile, e); }
  ev.oninput = () => select(L.tile, +ev.value);
  tin.onchange = () => select(+tin.value);
  $("live-peak").onclick = peak;
  plot.addEventListener("click", e2 => { const r = plot.getBoundingClientRect(); select(L.tile, Math.floor((e2.clientX - r.left) / r.width * NE)); });
  const F = D.fullest || [];
  $("fullest").innerHTML = "<tr><th>tile</th><th>tiles alike</th><th>peak B</th><th>at step</th><th>largest holders</th></tr>" +
    F.map((f, k) => '<tr class="click" data-k="' + k + '"><td>' + f.first_tile + "</td><td>" + f.tiles + "</td><td>" + f.peak_bytes + '</td><td class="l">' + f.peak_event + " " + esc(f.peak_event_name) + '</td><td class="l">' +
      f.holders.slice(0, 3).map(hh => esc(hh.name) + " " + hh.bytes).join(", ") + "</td></tr>").join("");
  for (const tr of $("fullest").querySelectorAll("tr.click")) tr.onclick = () => { const f = F[+tr.dataset.k]; select(f.first_tile, f.peak_event); };
  if (F.length) select(F[0].first_tile, F[0].peak_event); else show();
  return {select, state: () => ({tile: L.tile, event: L.event, live: liveAt(cls(), L.event).length}), liveAt};
})();
window.placementReport = {
  state: () => ({lo: S.lo, hi: S.hi, rowH: S.rowH, reuse: S.reuse, pinned: S.pinned, zoomDepth: S.zoom.length,
    firstTile: tileOfRow(Math.floor(scroller.scrollTop / S.rowH)), marker: S.marker}),
  rowY: (tile, row) => (rowStart[tile] + (row || 0)) * S.rowH - scroller.scrollTop + S.rowH / 2,
  addrX: a => xOf(a), gotoTile, gotoAddr, zoomTo, live: LIVE, ready: true,
};
</script></body></html>
"""
