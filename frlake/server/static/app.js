/* frlake pages, one module for all of them: sortable tables, charts (Chart.js, vendored) with their
   "no data" states, the SQL console, uploads and the "mark complete" button. */
"use strict";

/* ---------- requests ---------- */

function token() {
  const field = document.getElementById("token");
  if (!field) return null;
  if (field.value) localStorage.setItem("frlake-token", field.value);
  return field.value || localStorage.getItem("frlake-token");
}

// the token is kept as it is typed, for this page's later requests and the next pages
document.addEventListener("input", (event) => {
  if (event.target && event.target.id === "token" && event.target.value) {
    localStorage.setItem("frlake-token", event.target.value);
  }
});

function authHeaders(extra) {
  const headers = Object.assign({}, extra || {});
  const t = token();
  if (t) headers["Authorization"] = "Bearer " + t;
  return headers;
}

async function errorText(response) {
  try { const body = await response.json(); return body.error ? body.error.message : response.statusText; }
  catch (e) { return response.status + " " + response.statusText; }
}

function element(tag, props, children) {
  const el = document.createElement(tag);
  Object.assign(el, props || {});
  (children || []).forEach(c => el.append(c));
  return el;
}

/* ---------- tables: click a header to sort (numbers as numbers, data-sort wins over the text) ---------- */

function sortKey(cell) {
  const raw = cell.querySelector("[data-sort]") && !cell.dataset.sort
    ? cell.querySelector("[data-sort]").dataset.sort : (cell.dataset.sort ?? cell.textContent.trim());
  if (/^-?\d{16,}$/.test(raw)) return BigInt(raw);  // past 2**53 doubles tie neighbours: an id sorts exactly
  const number = Number(raw);
  return raw !== "" && !Number.isNaN(number) ? number : raw.toLowerCase();
}

const numeric = v => typeof v === "number" || typeof v === "bigint";

function sortTable(table, th) {
  const body = table.tBodies[0];
  if (!body) return;
  const index = Array.from(th.parentNode.children).indexOf(th);
  const ascending = th.getAttribute("aria-sort") !== "ascending";
  table.querySelectorAll("thead th").forEach(h => h.removeAttribute("aria-sort"));
  th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  const rows = Array.from(body.rows).filter(r => !r.classList.contains("empty"));
  const keyed = rows.map((r, i) => [r.cells[index] ? sortKey(r.cells[index]) : "", i, r]);
  keyed.sort((a, b) => {
    const [x, y] = [a[0], b[0]];
    let c = (numeric(x) && numeric(y)) ? (x < y ? -1 : x > y ? 1 : 0)  // < and > compare a BigInt with a number
      : numeric(x) ? -1 : numeric(y) ? 1 : String(x).localeCompare(String(y));
    if (!ascending) c = -c;
    return c || a[1] - b[1];  // stable: ties keep their order
  });
  keyed.forEach(k => body.appendChild(k[2]));
}

document.addEventListener("click", event => {
  const th = event.target.closest("table.sortable thead th");
  if (th) sortTable(th.closest("table"), th);
});
document.addEventListener("keydown", event => {
  const th = event.target.closest && event.target.closest("table.sortable thead th");
  if (th && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); sortTable(th.closest("table"), th); }
});

/* ---------- charts ---------- */

function noData(canvas, text) {
  const box = canvas.closest(".chart-box");
  const existing = Chart.getChart(canvas);
  if (existing) existing.destroy();
  canvas.hidden = true;
  let p = box.querySelector(".no-data");
  if (!p) { p = element("p", {className: "no-data"}); box.appendChild(p); }
  p.textContent = text || box.dataset.empty || "no data to chart";
  box.classList.add("empty");
}

function showCanvas(canvas) {
  const box = canvas.closest(".chart-box");
  canvas.hidden = false;
  box.classList.remove("empty");
  const p = box.querySelector(".no-data");
  if (p) p.remove();
}

function rowsOf(canvas) { return JSON.parse(canvas.dataset.rows || "[]"); }

const VERDICT_COLOURS = {mismatch: "#ad1457", hang: "#d84315", incomplete: "#6a1b9a", straggler: "#f9a825",
                         healthy: "#2e7d32"};
const UTC = t => new Date(t).toISOString().replace("T", " ").slice(0, 19) + " UTC";

/* Lateness on one fixed scale (ms), the same on every attempt, so a healthy attempt looks healthy. */
const LATENESS = [
  {label: "< 1 ms", max: 1, colour: "#1b5e20"},
  {label: "1-10 ms", max: 10, colour: "#7cb342"},
  {label: "10-100 ms", max: 100, colour: "#fbc02d"},
  {label: "100 ms-1 s", max: 1000, colour: "#ef6c00"},
  {label: "≥ 1 s", max: Infinity, colour: "#b71c1c"},
];

/* The room of one rank x collective cell of a category scatter: per category, not per tick (a dense axis
   shows a tick for only some of its labels). */
function cellSize(chart) {
  const {chartArea} = chart;
  return {dx: chartArea.width / Math.max(1, chart.scales.x.getLabels().length),
          dy: chartArea.height / Math.max(1, chart.scales.y.getLabels().length)};
}

/* Points shrink to fit a dense grid. */
function cellRadius(chart, most) {
  if (!chart.chartArea) return most;
  const {dx, dy} = cellSize(chart);
  return Math.max(1.5, Math.min(most, Math.min(dx, dy) / 2 - 0.5));
}

const pointValues = {  // draws each point's value beside it when there is room: no hover needed
  id: "pointValues",
  afterDatasetsDraw(chart) {
    const {ctx} = chart;
    const {dx, dy} = cellSize(chart);
    if (dx < 24 || dy < 11) return;
    ctx.save();
    ctx.font = "10px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "bottom";
    chart.data.datasets.forEach((ds, i) => {
      if (!chart.isDatasetVisible(i)) return;
      chart.getDatasetMeta(i).data.forEach((point, j) => {
        const raw = ds.data[j];
        if (ctx.measureText(raw.text).width > dx - 2) return;  // "no dump" is wider than a number: no overlaps
        ctx.fillStyle = raw.unknown ? "#757575" : raw.late === undefined ? "#4a148c" : "#333";
        ctx.fillText(raw.text, point.x, point.y - 6);
      });
    });
    ctx.restore();
  },
};

const culpritRows = {  // a band along each culprit's row, named in the right margin: found among hundreds of ranks
  id: "culpritRows",
  beforeDatasetsDraw(chart, args, options) {
    const {ctx, chartArea} = chart, ys = chart.scales.y;
    const labels = ys.getLabels();
    const band = Math.min(24, Math.max(cellSize(chart).dy, 6));
    ctx.save();
    (options.culprits || []).forEach(c => {
      const at = labels.indexOf(String(c.rank));
      if (at < 0) return;
      ctx.fillStyle = c.role === "root" ? "rgba(198, 40, 40, 0.16)" : "rgba(106, 27, 154, 0.10)";
      ctx.fillRect(chartArea.left, ys.getPixelForValue(at) - band / 2, chartArea.width, band);
    });
    ctx.restore();
  },
  afterDatasetsDraw(chart, args, options) {
    const {ctx, chartArea} = chart, ys = chart.scales.y;
    const labels = ys.getLabels();
    ctx.save();
    ctx.font = "bold 11px system-ui, sans-serif";
    ctx.textAlign = "left";
    ctx.textBaseline = "middle";
    (options.culprits || []).forEach(c => {
      const at = labels.indexOf(String(c.rank));
      if (at < 0) return;
      ctx.fillStyle = c.role === "root" ? "#b71c1c" : "#4a148c";
      ctx.fillText(`◀ rank ${c.rank}`, chartArea.right + 6, ys.getPixelForValue(at) - 7);
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillText(c.role === "root" ? "root cause" : c.role, chartArea.right + 6, ys.getPixelForValue(at) + 7);
      ctx.font = "bold 11px system-ui, sans-serif";
    });
    ctx.restore();
  },
};

function msText(late) { return late < 10 ? late.toFixed(1) : Math.round(late).toString(); }

function drawArrivals(canvas, data) {
  const existing = Chart.getChart(canvas);
  if (existing) existing.destroy();
  if (!data.seqs.length || !data.ranks.length) { noData(canvas); return; }
  showCanvas(canvas);
  // a row per rank: the height follows the group's size (2 ranks or 64)
  canvas.closest(".chart-box").style.height = Math.max(240, Math.min(1000, 130 + 38 * data.ranks.length)) + "px";
  const ranks = data.ranks.map(String), seqs = data.seqs.map(String);
  const radius = most => ctx => cellRadius(ctx.chart, most);
  const shownCulprits = (data.culprits || []).filter(c => data.ranks.includes(c.rank));
  const buckets = LATENESS.map(b => ({label: b.label, data: [], pointRadius: radius(6), pointHoverRadius: radius(8),
                                      backgroundColor: b.colour, borderColor: b.colour}));
  const missing = [], unknown = [];
  const noDump = new Set(data.no_dump || []);
  data.ranks.forEach((rank, i) => data.seqs.forEach((seq, j) => {
    const late = data.late_ms[i][j];
    const point = {x: String(seq), y: String(rank)};
    if (noDump.has(rank)) { unknown.push(Object.assign(point, {text: "no dump", unknown: true})); return; }
    if (late === null) { missing.push(Object.assign(point, {text: "never"})); return; }
    const b = LATENESS.findIndex(l => late < l.max);
    buckets[b].data.push(Object.assign(point, {late: late, text: msText(late)}));
  }));
  const datasets = buckets;  // every step of the scale in the legend, even those no point falls in
  // crosses stay large on a dense grid: what never arrived is what the chart is for
  datasets.push({label: "never arrived", data: missing, pointStyle: "crossRot", pointRadius: 9,
                 borderColor: "#4a148c", backgroundColor: "#4a148c", borderWidth: 3});
  if (unknown.length) datasets.push({label: "left no dump (unknown)", data: unknown, pointStyle: "rectRot", pointRadius: radius(6),
                                     borderColor: "#9e9e9e", backgroundColor: "#eeeeee", borderWidth: 2});
  new Chart(canvas, {
    type: "scatter",
    data: {datasets: datasets},
    plugins: [culpritRows, pointValues],
    options: {
      animation: false, maintainAspectRatio: false,
      // room on the right for the culprits' names, beside their rows
      layout: {padding: {top: 12, right: shownCulprits.length ? 90 : 0}},
      plugins: {
        culpritRows: {culprits: shownCulprits},
        title: {display: true, text: `process group ${data.pg} (${data.pg_desc || ""}): ms after the first member, per rank and collective`},
        legend: {position: "top"},
        tooltip: {callbacks: {label: c => `rank ${c.raw.y}, seq ${c.raw.x}: ` + (c.raw.unknown ? "left no dump: unknown"
          : c.raw.late !== undefined ? `+${c.raw.late} ms` : "never arrived")}},
      },
      scales: {x: {type: "category", labels: seqs, offset: true, title: {display: true, text: "collective sequence id"}},
               y: {type: "category", labels: ranks, offset: true, title: {display: true, text: "rank (members of the group)"}}},
    },
  });
}

function arrivalsShown(data) {  /* what the chart shows of the group: at 16,384 ranks never all of it */
  const p = document.getElementById("arrivals-shown");
  if (!p) return;
  if (!data.seqs.length) { p.textContent = ""; return; }
  const parts = [`ranks: ${data.ranks.length} of ${data.ranks_total}` + (data.ranks_truncated ? " (the culprits and the ranks nearest them first)" : ""),
                 `collectives: sequence ids ${data.seq_window[0]}-${data.seq_window[1]}, ${data.seqs.length} of ${data.seqs_total}`];
  if (data.focus) parts.push(`centred on rank ${data.focus.rank} at sequence id ${data.focus.seq}` +
                             (data.waiting.length ? `; ${data.waiting.length} of the ranks shown wait there` : ""));
  p.textContent = parts.join(" · ");
}

function arrivalsChart(canvas) {
  const select = document.getElementById("arrivals-group");
  const show = data => {
    if (select && !select.options.length) {
      data.groups.forEach(g => select.append(element("option", {value: g.pg,
        textContent: `${g.pg_desc || "pg"} ${g.pg} (${g.size} ranks)`})));
      if (!data.groups.length) select.disabled = true;
    }
    if (select && data.pg !== null) select.value = data.pg;
    drawArrivals(canvas, data);
    arrivalsShown(data);
    canvas.dataset.loaded = data.pg === null ? "" : data.pg;
  };
  const load = pg => {
    const url = new URL(canvas.dataset.src, window.location.href);
    const last = document.getElementById("arrivals-last");
    if (pg) url.searchParams.set("pg", pg);
    if (last && last.value) url.searchParams.set("last", last.value);
    return fetch(url).then(r => r.ok ? r.json() : Promise.reject(r)).then(show)
      .catch(() => noData(canvas, "the arrivals could not be loaded"));
  };
  if (select) select.addEventListener("change", () => {
    // another group has other sequence ids: its window starts from the default again
    ["arrivals-seq", "arrivals-around"].forEach(id => { const input = document.getElementById(id); if (input) input.value = ""; });
    load(select.value);
  });
  const embedded = document.getElementById("arrivals-data");  // the page's own arrivals: no second request
  if (embedded) show(JSON.parse(embedded.textContent)); else load(null);
}

function barChart(canvas, label, labelOf, valueOf) {
  const rows = rowsOf(canvas);
  if (!rows.length) { noData(canvas); return; }
  new Chart(canvas, {
    type: "bar",
    data: {labels: rows.map(labelOf), datasets: [{label: label, data: rows.map(valueOf), backgroundColor: "#c62828"}]},
    options: {animation: false, maintainAspectRatio: false, indexAxis: "y"},
  });
}

/* Round steps for a time axis, in ms: the one that gives at most `most` ticks is used, on multiples of
   itself (so 07:40, 07:45, 07:50 UTC, never 07:41:23). */
const TIME_STEPS = [1, 2, 5, 10, 15, 30].map(s => s * 1000)
  .concat([1, 2, 5, 10, 15, 30].map(m => m * 60e3), [1, 2, 3, 6, 12].map(h => h * 3600e3), [1, 2, 7, 14, 28].map(d => d * 86400e3));

function timeStep(lo, hi, most) {
  return TIME_STEPS.find(s => (hi - lo) / s <= most) || TIME_STEPS[TIME_STEPS.length - 1];
}

function timeLabel(t, step, oneDay) {  /* as much of the UTC time as the step needs; the day once, if one */
  const text = UTC(t);  // 2026-11-29 07:40:00 UTC
  if (step >= 86400e3) return text.slice(5, 10);
  const time = step >= 60e3 ? text.slice(11, 16) : text.slice(11, 19);
  return oneDay ? time : text.slice(5, 11) + time;
}

function jobChart(canvas) {
  const rows = rowsOf(canvas).filter(a => a.started_ns !== null);
  if (!rows.length) { noData(canvas); return; }
  const bars = rows.map(a => {
    const start = a.started_ns / 1e6, end = (a.ended_ns || a.started_ns) / 1e6;
    return {x: [start, Math.max(end, start + 1000)], y: `attempt ${a.attempt}`, verdict: a.verdict || "not diagnosed",
            root: a.root ? `rank ${a.root.rank} on ${a.root.host || "an unknown host"}` : ""};
  });
  const lo = Math.min(...bars.map(b => b.x[0])), hi = Math.max(...bars.map(b => b.x[1]));
  const step = timeStep(lo, hi, Math.max(2, Math.min(7, Math.floor(canvas.closest(".chart-box").clientWidth / 110))));
  const min = Math.floor(lo / step) * step, max = Math.ceil(hi / step) * step + (hi % step === 0 ? step : 0);
  const oneDay = UTC(min).slice(0, 10) === UTC(max - 1).slice(0, 10);
  const colour = v => VERDICT_COLOURS[v] || "#9e9e9e";
  const shown = [...Object.keys(VERDICT_COLOURS), "not diagnosed"].filter(v => bars.some(b => b.verdict === v));
  canvas.closest(".chart-box").style.height = Math.max(190, Math.min(720, 120 + 44 * bars.length)) + "px";
  new Chart(canvas, {
    type: "bar",
    data: {labels: bars.map(b => b.y), datasets: [{label: "attempt (start to last entry), coloured by verdict", data: bars,
      backgroundColor: bars.map(b => colour(b.verdict)), borderSkipped: false, barPercentage: 0.6}]},
    plugins: [{id: "verdictLabels", afterDatasetsDraw(chart) {  // beside each bar, where there is room
      const {ctx, chartArea} = chart;
      ctx.save(); ctx.font = "12px system-ui, sans-serif"; ctx.fillStyle = "#1d2330"; ctx.textBaseline = "middle";
      chart.getDatasetMeta(0).data.forEach((bar, i) => {
        const b = bars[i];
        const right = chartArea.right - bar.x - 6, left = bar.base - 6 - chartArea.left;
        let text = b.verdict + (b.root ? ": " + b.root : "");
        if (ctx.measureText(text).width > Math.max(right, left)) text = b.verdict;  // a phone: the verdict alone
        const onRight = ctx.measureText(text).width <= right || right >= left;
        ctx.textAlign = onRight ? "left" : "right";
        ctx.fillText(text, onRight ? bar.x + 6 : bar.base - 6, bar.y);
      });
      ctx.restore();
    }}],
    options: {
      indexAxis: "y", animation: false, maintainAspectRatio: false,
      plugins: {
        // one entry per verdict on the chart, in its colour (the bars are one dataset)
        legend: {position: "top", onClick: () => {}, labels: {generateLabels: () => shown.map(v => ({
          text: v, fillStyle: colour(v), strokeStyle: colour(v), lineWidth: 0, hidden: false}))}},
        tooltip: {callbacks: {label: c => `${bars[c.dataIndex].verdict} ${bars[c.dataIndex].root}, from ${UTC(c.raw.x[0])}`}},
      },
      scales: {x: {type: "linear", min: min, max: max,
                   ticks: {stepSize: step, autoSkip: false, maxRotation: 0, callback: v => timeLabel(v, step, oneDay)},
                   title: {display: true, text: `time (UTC${oneDay ? ", " + UTC(min).slice(0, 10) : ""}), `
                                                + `a tick every ${stepText(step)}`}}},
    },
  });
}

function stepText(ms) {
  const units = [[86400e3, "day"], [3600e3, "hour"], [60e3, "minute"], [1e3, "second"]];
  const [size, name] = units.find(([u]) => ms >= u && ms % u === 0);
  const n = ms / size;
  return n === 1 ? name : `${n} ${name}s`;
}

function hostChart(canvas) {
  const weeks = rowsOf(canvas);
  if (!weeks.length) { noData(canvas); return; }
  new Chart(canvas, {
    type: "bar",
    data: {labels: weeks.map(w => "week of " + w.week), datasets: [
      {label: "attempts it took part in", data: weeks.map(w => w.attempts), backgroundColor: "#90a4ae", stack: "used"},
      {label: "root cause", data: weeks.map(w => w.root_cause), backgroundColor: "#c62828", stack: "named"},
      {label: "involved", data: weeks.map(w => w.involved), backgroundColor: "#ef6c00", stack: "named"},
    ]},
    options: {animation: false, maintainAspectRatio: false, scales: {y: {beginAtZero: true, ticks: {precision: 0}}}},
  });
}

/* ---------- the SQL console ---------- */

/* JSON whose integers stay what the lake holds: an integer past 2**53, which a double would round
   (5775541967842821955 as 5775541967842822000), is read from its source text as a BigInt (JSON.parse's
   source text access), printed and sorted as it is. */
function exactJson(text) {
  return JSON.parse(text, (key, value, context) =>
    typeof value === "number" && !Number.isSafeInteger(value) && context && /^-?\d+$/.test(context.source)
      ? BigInt(context.source) : value);
}

const bigIntsAsText = (key, value) => typeof value === "bigint" ? value.toString() : value;
function cellText(v) { return v === null ? "" : (typeof v === "object" ? JSON.stringify(v, bigIntsAsText) : String(v)); }

function renderTable(table, columns, rows) {
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  columns.forEach(c => head.appendChild(element("th", {scope: "col", textContent: c, tabIndex: 0})));
  const body = table.createTBody();
  rows.forEach(r => { const tr = body.insertRow(); r.forEach(v => { tr.insertCell().textContent = cellText(v); }); });
}

/* The SQL's words in colours, for the editor: a small tokenizer (comments, strings, quoted names,
   numbers, keywords, function names), not a parser; what it does not know stays plain. */
const SQL_KEYWORDS = new Set(("select from where group by order having limit offset with as join left right full " +
  "inner outer cross on using and or not in is null like ilike between case when then else end distinct all " +
  "union intersect except asc desc nulls first last over partition window qualify explain analyze describe " +
  "show summarize values true false cast filter exists any some lateral unnest interval struct list").split(" "));
const SQL_TOKEN = /(--[^\n]*|\/\*[\s\S]*?(?:\*\/|$))|('(?:[^']|'')*'?)|("(?:[^"]|"")*"?)|(\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)/gi;

const CALL = /\s*\(/y;  // a name followed by "(": a function
function calledAt(text, at) { CALL.lastIndex = at; return CALL.test(text); }

function highlightSql(text) {
  const escape = t => t.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  let out = "", at = 0;
  for (const m of text.matchAll(SQL_TOKEN)) {
    out += escape(text.slice(at, m.index));
    const kind = m[1] ? "com" : m[2] ? "str" : m[3] ? "name" : m[4] ? "num"
      : SQL_KEYWORDS.has(m[5].toLowerCase()) ? "kw" : calledAt(text, m.index + m[0].length) ? "fn" : "";
    out += kind ? `<span class="sql-${kind}">${escape(m[0])}</span>` : escape(m[0]);
    at = m.index + m[0].length;
  }
  return out + escape(text.slice(at)) + "\n";  // a last empty line keeps its height
}

function sqlEditor(field) {
  const shown = document.getElementById("sql-highlight");
  if (!shown) return () => {};
  const paint = () => { shown.innerHTML = highlightSql(field.value); shown.scrollTop = field.scrollTop; };
  field.addEventListener("input", paint);
  field.addEventListener("scroll", () => { shown.scrollTop = field.scrollTop; shown.scrollLeft = field.scrollLeft; });
  field.closest(".editor").classList.add("highlighted");
  paint();
  return paint;
}

/* The page's address for this query: ?sql=...(&_next=N), (&_format=csv|json): the links to share. */
function sqlUrl(sql, offset, format) {
  const url = new URL("/sql", window.location.href);
  url.searchParams.set("sql", sql);
  if (offset) url.searchParams.set("_next", offset);
  if (format) url.searchParams.set("_format", format);
  return url;
}

/* On a server with a token, the export links fetch with it (a link cannot send a header) and save the answer. */
async function authorizedDownload(event) {
  const link = event.target.closest("#sql-exports a");
  if (!link || !token()) return;
  event.preventDefault();
  const response = await fetch(link.href, {headers: authHeaders()});
  if (!response.ok) { document.getElementById("sql-status").textContent = "error: " + await errorText(response); return; }
  const saved = element("a", {href: URL.createObjectURL(await response.blob()),
                              download: link.classList.contains("export-csv") ? "query.csv" : "query.json"});
  saved.click();
  URL.revokeObjectURL(saved.href);
}

function sqlConsole(form) {
  const status = document.getElementById("sql-status");
  const field = document.getElementById("sql");
  const table = document.getElementById("sql-result");
  const exports = document.getElementById("sql-exports");
  const pages = document.getElementById("sql-pages");
  const paint = sqlEditor(field);
  const count = document.getElementById("sql-count");
  // what is on screen is the query's result or nothing: cleared while it runs and when it fails
  const clear = () => { table.replaceChildren(); pages.replaceChildren(); count.textContent = ""; exports.hidden = true; };
  document.querySelectorAll("button.example").forEach(b => b.addEventListener("click", () => {
    field.value = b.dataset.sql; paint(); field.focus();
  }));
  document.querySelectorAll("#schema code.insert").forEach(c => c.addEventListener("click", event => {
    event.preventDefault();
    const at = field.selectionStart ?? field.value.length;
    field.value = field.value.slice(0, at) + c.textContent + field.value.slice(field.selectionEnd ?? at);
    paint();
    field.focus();
  }));
  exports.addEventListener("click", authorizedDownload);
  let latest = 0;  // a run answered after a later one started is dropped: the screen shows the last query's
  const run = async (offset) => {
    const mine = ++latest;
    const sql = field.value;
    history.replaceState(null, "", sqlUrl(sql, offset));  // the query lives in the address: share it, reload it
    clear();
    status.className = "status muted";
    status.textContent = "running…";
    const response = await fetch("/api/query", {method: "POST",
      headers: authHeaders({"Content-Type": "application/json"}), body: JSON.stringify({sql: sql, next: offset || 0})});
    if (!response.ok) {
      const message = await errorText(response);
      if (mine !== latest) return;
      status.className = "status error";
      status.textContent = "error: " + message;
      return;
    }
    const data = exactJson(await response.text());
    if (mine !== latest) return;
    renderTable(table, data.columns, data.rows);
    exports.querySelector(".export-csv").href = sqlUrl(sql, offset, "csv");
    exports.querySelector(".export-json").href = sqlUrl(sql, offset, "json");
    const first = (offset || 0) + 1, last = (offset || 0) + data.rows.length;
    count.textContent = (offset ? `rows ${first}-${last}` : `${data.rows.length} row(s)`)
      + " · click a header to sort";
    exports.hidden = false;
    pages.replaceChildren();
    if (offset) pages.append(element("a", {id: "sql-first", href: sqlUrl(sql, 0), textContent: "← first rows"}));
    if (data.next !== null) pages.append(element("a", {id: "sql-next", href: sqlUrl(sql, data.next),
                                                       textContent: `next rows, from ${data.next + 1} →`}));
    status.className = "status muted";
    status.textContent = `${data.rows.length} row(s) in ${data.seconds} s`
      + (data.truncated ? " (cut at the row cap: the next rows are on the next page)" : "");
  };
  form.addEventListener("submit", event => { event.preventDefault(); run(0); });
  field.addEventListener("keydown", event => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); run(0); }
  });
  if (status.dataset.autorun && document.getElementById("token") && !token()) {
    // a shared link on a server with a token: ask for it rather than send a query that is refused
    status.className = "status error";
    status.textContent = "error: this server runs queries only with its token: paste it above, then run (Ctrl+Enter)";
  } else if (status.dataset.autorun) run(Number(status.dataset.offset) || 0);
}

/* ---------- Open in Perfetto: ui.perfetto.dev's postMessage protocol (perfetto.dev/docs/visualization/
   deep-linking-to-perfetto-ui): open it, PING it until it answers PONG, then post the trace's bytes. ---------- */

const PERFETTO = "https://ui.perfetto.dev";

function perfettoMessage(buffer, title, url) {
  return {perfetto: {buffer: buffer, title: title, url: url}};
}

function openInPerfetto(button) {
  button.addEventListener("click", async () => {
    const win = window.open(PERFETTO);  // at once, in the click: a later window.open is a blocked pop-up
    if (!win) { button.textContent = "Open in Perfetto (allow pop-ups for this page)"; return; }
    const trace = fetch(button.dataset.trace).then(r => r.ok ? r.arrayBuffer() : Promise.reject(r));
    const ping = setInterval(() => win.postMessage("PING", PERFETTO), 50);
    const answered = async event => {
      if (event.source !== win || event.origin !== PERFETTO || event.data !== "PONG") return;
      clearInterval(ping);
      window.removeEventListener("message", answered);
      const buffer = await trace;
      win.postMessage(perfettoMessage(buffer, button.dataset.title, window.location.href), PERFETTO, [buffer]);
    };
    window.addEventListener("message", answered);
  });
}

/* ---------- narrow screens: the facets and the schema fold above the table ---------- */

/* A card's lines are "header: value": each cell is labelled with its column's header (CSS shows the label
   on a phone only). */
function labelCells(table) {
  const headers = Array.from(table.querySelectorAll("thead th"), th => th.textContent.trim());
  table.querySelectorAll("tbody tr:not(.empty)").forEach(tr => {
    Array.from(tr.cells).forEach((td, i) => { if (headers[i]) td.dataset.label = headers[i]; });
  });
}

/* A table wider than its box says so: a shade at the edge it scrolls towards and "scroll sideways" above it. */
function showScrolling(box) {
  const outer = box.closest(".table-box");
  const tools = outer.querySelector(".table-tools");
  const mark = () => {
    const wide = box.scrollWidth > box.clientWidth + 1;
    outer.classList.toggle("scrolls", wide);
    outer.classList.toggle("at-end", box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
    if (wide) outer.style.setProperty("--scroll-top", `${box.offsetTop}px`);
    let hint = tools && tools.querySelector(".scroll-hint");
    if (wide && tools && !hint) tools.prepend(hint = element("span", {className: "scroll-hint", textContent: "scroll sideways →"}));
    if (hint) hint.hidden = !wide;
  };
  box.addEventListener("scroll", mark, {passive: true});
  // first called once the page is laid out (no layout forced before the load), then on every resize
  const sizes = new ResizeObserver(mark);
  sizes.observe(box);
  if (box.firstElementChild) sizes.observe(box.firstElementChild);
}

function foldOnNarrowScreens() {
  if (!window.matchMedia("(max-width: 760px)").matches) return;
  document.querySelectorAll("details.facets:not([data-active]), details.schema").forEach(d => { d.open = false; });
}

/* ---------- uploads and "no more dumps will come" ---------- */

function uploadForm(form) {
  const out = document.getElementById("upload-result");
  form.addEventListener("submit", async event => {
    event.preventDefault();
    delete out.dataset.done;
    out.replaceChildren(element("p", {className: "muted", textContent: "uploading…"}));
    const response = await fetch("/api/dumps", {method: "POST", headers: authHeaders(), body: new FormData(form)});
    if (!response.ok) {
      out.replaceChildren(element("p", {className: "error", textContent: "Not uploaded: " + await errorText(response)}));
      out.dataset.done = "error";
      return;
    }
    const data = await response.json();
    const parts = [element("p", {className: "upload-counts", textContent:
      `ingested ${data.ingested}, already present ${data.already_present}, rejected ${data.rejected}`})];
    if (data.attempts.length) {
      parts.push(element("h2", {textContent: "Attempts that received dumps"}));
      parts.push(element("ul", {className: "upload-attempts"}, data.attempts.map(a => element("li", {}, [
        element("a", {href: a.url, className: "attempt-link", textContent: `${a.job} attempt ${a.attempt}`}),
        a.summary ? ": " + a.summary : ""]))));
    }
    const named = path => path.replace(/^upload:[^/]+\//, "");  // the file's own name, not the upload folder's
    data.files.forEach(f => parts.push(element("p", {textContent: `✓ ${named(f.path)}: ${f.job} attempt ${f.attempt}, rank ${f.rank} on ${f.host}`})));
    data.rejected_files.forEach(f => parts.push(element("p", {className: "error", textContent: `✗ ${named(f.path)}: ${f.reason}: ${f.detail}`})));
    out.replaceChildren(...parts);
    out.dataset.done = "1";
  });
}

function completeForm(form) {
  const status = document.getElementById("complete-status");
  form.addEventListener("submit", async event => {
    event.preventDefault();
    status.textContent = "diagnosing…";
    const response = await fetch(form.dataset.url, {method: "POST", headers: authHeaders()});
    if (!response.ok) { status.textContent = "refused: " + await errorText(response); return; }
    window.location.reload();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const found = id => document.getElementById(id);
  if (found("arrivals")) arrivalsChart(found("arrivals"));
  if (found("hosts-chart")) barChart(found("hosts-chart"), "score (Wilson lower bound)", r => r.host, r => r.score);
  if (found("slow-chart")) barChart(found("slow-chart"), "lateness ms", r => `${r.job} r${r.rank} ${r.host || "?"}`, r => r.lateness_ms);
  if (found("job-chart")) jobChart(found("job-chart"));
  if (found("host-chart")) hostChart(found("host-chart"));
  if (found("sql-form")) sqlConsole(found("sql-form"));
  if (found("upload-form")) uploadForm(found("upload-form"));
  if (found("complete-form")) completeForm(found("complete-form"));
  if (found("open-perfetto")) openInPerfetto(found("open-perfetto"));
  foldOnNarrowScreens();
  // the labels show on a narrow screen only (app.css): made when the screen is, or becomes, narrow
  const narrow = window.matchMedia("(max-width: 760px)");
  const label = () => { if (narrow.matches) document.querySelectorAll("table.data.cards:not([data-labelled])")
    .forEach(t => { labelCells(t); t.dataset.labelled = ""; }); };
  label();
  narrow.addEventListener("change", label);
  // the scroll cue waits for the page to have loaded: it is not worth delaying the first rows for
  window.addEventListener("load", () => document.querySelectorAll(".table-box .scroll").forEach(showScrolling));
});
