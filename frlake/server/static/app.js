/* frlake pages: charts (Chart.js, vendored), the SQL console and uploads. */
"use strict";

function token() {
  const field = document.getElementById("token");
  if (!field) return null;
  if (field.value) localStorage.setItem("frlake-token", field.value);
  return field.value || localStorage.getItem("frlake-token");
}

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

function arrivalsChart(canvas) {
  fetch(canvas.dataset.src).then(r => r.json()).then(data => {
    const arrived = [], missing = [];
    data.ranks.forEach((rank, i) => data.seqs.forEach((seq, j) => {
      const late = data.late_ms[i][j];
      if (late === null) missing.push({x: seq, y: rank}); else arrived.push({x: seq, y: rank, late: late});
    }));
    const maxLate = Math.max(1, ...arrived.map(p => p.late));
    new Chart(canvas, {
      type: "scatter",
      data: {datasets: [
        {label: "arrived (darker = later)", data: arrived, pointRadius: 5,
         backgroundColor: arrived.map(p => `rgba(198, 40, 40, ${0.12 + 0.88 * p.late / maxLate})`)},
        {label: "never arrived", data: missing, pointStyle: "crossRot", pointRadius: 8, borderColor: "#c62828",
         backgroundColor: "#c62828", borderWidth: 2},
      ]},
      options: {
        animation: false, maintainAspectRatio: false,
        plugins: {title: {display: true, text: `process group ${data.pg} (${data.pg_desc || ""}): ranks x collectives`},
                  tooltip: {callbacks: {label: c => `rank ${c.raw.y}, seq ${c.raw.x}` + (c.raw.late !== undefined ? `: +${c.raw.late} ms` : ": never arrived")}}},
        scales: {x: {title: {display: true, text: "collective sequence id"}, ticks: {precision: 0}},
                 y: {title: {display: true, text: "rank"}, reverse: true, ticks: {precision: 0}}},
      },
    });
  });
}

function barChart(canvas, label, labelOf, valueOf) {
  const rows = JSON.parse(canvas.dataset.rows || "[]");
  new Chart(canvas, {
    type: "bar",
    data: {labels: rows.map(labelOf), datasets: [{label: label, data: rows.map(valueOf), backgroundColor: "#c62828"}]},
    options: {animation: false, maintainAspectRatio: false, indexAxis: "y"},
  });
}

function renderTable(table, columns, rows) {
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  columns.forEach(c => { const th = document.createElement("th"); th.textContent = c; head.appendChild(th); });
  const body = table.createTBody();
  rows.forEach(r => { const tr = body.insertRow();
    r.forEach(v => { tr.insertCell().textContent = v === null ? "" : (typeof v === "object" ? JSON.stringify(v) : v); }); });
}

function sqlConsole(form) {
  const status = document.getElementById("sql-status");
  document.querySelectorAll("button.example").forEach(b => b.addEventListener("click", () => {
    document.getElementById("sql").value = b.dataset.sql;
  }));
  form.addEventListener("submit", async event => {
    event.preventDefault();
    status.textContent = "running…";
    const response = await fetch("/api/query", {method: "POST",
      headers: authHeaders({"Content-Type": "application/json"}),
      body: JSON.stringify({sql: document.getElementById("sql").value})});
    if (!response.ok) { status.textContent = "error: " + await errorText(response); return; }
    const data = await response.json();
    renderTable(document.getElementById("sql-result"), data.columns, data.rows);
    status.textContent = `${data.rows.length} row(s) in ${data.seconds} s` + (data.truncated ? " (truncated at the row cap)" : "");
  });
}

function uploadForm(form) {
  const out = document.getElementById("upload-result");
  form.addEventListener("submit", async event => {
    event.preventDefault();
    out.textContent = "uploading…";
    const response = await fetch("/api/dumps", {method: "POST", headers: authHeaders(), body: new FormData(form)});
    if (!response.ok) { out.innerHTML = ""; out.textContent = "refused: " + await errorText(response); return; }
    const data = await response.json();
    const lines = [`ingested ${data.ingested}, already present ${data.already_present}, rejected ${data.rejected}`];
    data.files.forEach(f => lines.push(`✓ ${f.path}: ${f.job} attempt ${f.attempt}, rank ${f.rank} on ${f.host}`));
    data.rejected_files.forEach(f => lines.push(`✗ ${f.path}: ${f.reason}: ${f.detail}`));
    data.diagnosed.forEach(d => lines.push(`→ ${d.summary}`));
    out.replaceChildren(...lines.map(l => { const p = document.createElement("p"); p.textContent = l; return p; }));
    out.dataset.done = "1";
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const arrivals = document.getElementById("arrivals");
  if (arrivals) arrivalsChart(arrivals);
  const hosts = document.getElementById("hosts-chart");
  if (hosts) barChart(hosts, "score (Wilson lower bound)", r => r.host, r => r.score);
  const slow = document.getElementById("slow-chart");
  if (slow) barChart(slow, "lateness ms", r => `${r.job} r${r.rank} ${r.host}`, r => r.lateness_ms);
  const sql = document.getElementById("sql-form");
  if (sql) sqlConsole(sql);
  const upload = document.getElementById("upload-form");
  if (upload) uploadForm(upload);
});
