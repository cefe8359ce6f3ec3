// streamanon dashboard: polls /api/status once a second and redraws. Counts and times only.
"use strict";

const POLL_MS = 1000;
const views = new Map(); // survey id -> {root, plot, chartKey}

function fmtInt(x) { return x == null ? "–" : Math.round(x).toLocaleString("en-US"); }
function fmtNum(x, digits) { return x == null ? "–" : Number(x).toFixed(digits); }
function fmtPercent(x) { return x == null ? "–" : `${x > 0 ? "+" : ""}${(100 * x).toFixed(1)} %`; }
function fmtDuration(seconds) {
  if (seconds == null) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60), r = s % 60;
  if (m < 60) return `${m} min ${String(r).padStart(2, "0")} s`;
  const h = Math.floor(m / 60);
  return `${h} h ${String(m % 60).padStart(2, "0")} min`;
}
function countdown(at, now, doneText) {
  if (at == null) return "–";
  return at <= now ? doneText : fmtDuration(at - now);
}
function clockTime(t) {
  return t == null ? "–" : new Date(t * 1000).toLocaleTimeString([], {hour12: false});
}

function field(root, name) { return root.querySelector(`[data-field="${name}"]`); }
function setText(root, name, text) {
  const el = field(root, name);
  if (el.textContent !== text) el.textContent = text;
}

function rows(tbody, pairs) {
  tbody.replaceChildren(...pairs.map(([k, v]) => {
    const tr = document.createElement("tr");
    const a = document.createElement("td"); a.textContent = k;
    const b = document.createElement("td"); b.textContent = v;
    tr.append(a, b);
    return tr;
  }));
}

function createView(s) {
  const tpl = document.getElementById("survey-template");
  const root = tpl.content.firstElementChild.cloneNode(true);
  root.dataset.survey = s.id;
  root.querySelector(".name").textContent = s.id;
  document.getElementById("surveys").append(root);
  const view = {root, plot: null, markers: {}};
  views.set(s.id, view);
  return view;
}

// vertical marker lines (planned base snapshot, close, deadline) drawn on the chart
function markerPlugin(view) {
  return {
    hooks: {
      draw: [u => {
        const ctx = u.ctx;
        const marks = [["base", "#b54708"], ["close", "#b42318"], ["deadline", "#6941c6"]];
        ctx.save();
        ctx.setLineDash([6, 4]);
        ctx.lineWidth = 1.5 * devicePixelRatio;
        ctx.font = `${11 * devicePixelRatio}px system-ui`;
        for (const [name, colour] of marks) {
          const t = view.markers[name];
          if (t == null) continue;
          const x = u.valToPos(t, "x", true);
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.strokeStyle = colour;
          ctx.fillStyle = colour;
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
          ctx.fillText(name, x + 4 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio);
        }
        ctx.restore();
      }],
    },
  };
}

function chartData(s) {
  const xs = new Set();
  for (const [t] of s.arrivals) xs.add(t);
  for (const [t] of s.forecast) xs.add(t);
  const times = [...xs].sort((a, b) => a - b);
  const actual = new Map(s.arrivals), forecast = new Map(s.forecast);
  return [times, times.map(t => actual.has(t) ? actual.get(t) : null),
          times.map(t => forecast.has(t) ? forecast.get(t) : null)];
}

function drawChart(view, s) {
  view.markers = {
    base: s.base_started_at ?? s.base_at, close: s.close_requested_at ?? s.close_at,
    deadline: s.deadline_at,
  };
  const data = chartData(s);
  const box = field(view.root, "chart");
  if (view.plot === null) {
    view.plot = new uPlot({
      width: Math.max(320, box.clientWidth), height: 300,
      scales: {x: {time: true, range: (u, lo, hi) => {
        const ms = Object.values(view.markers).filter(t => t != null);
        return [Math.min(lo ?? Infinity, ...ms), Math.max(hi ?? -Infinity, ...ms) + 1];
      }}},
      series: [
        {},
        {label: "stored (actual)", stroke: "#2457c5", width: 2, spanGaps: true},
        {label: "forecast", stroke: "#98a2b3", width: 2, dash: [8, 6], spanGaps: true},
      ],
      axes: [{}, {label: "records", size: 70}],
      plugins: [markerPlugin(view)],
    }, data, box);
    new ResizeObserver(() => view.plot.setSize({width: Math.max(320, box.clientWidth),
                                                height: 300})).observe(box);
  } else {
    view.plot.setData(data);
  }
}

function update(view, s, now) {
  const r = view.root;
  const state = field(r, "state");
  state.textContent = s.state;
  state.className = `state ${s.state}`;
  const chosen = s.engine === "auto" && s.plan && s.plan.engine ?
    ` (planner: ${s.plan.engine}, expected IL ${fmtPercent(s.plan.expected_delta)} vs one-shot MDAV)` : "";
  const stage = s.incremental === "auto" && s.plan && s.plan.stage ?
    `auto (planned: ${s.plan.stage})` : s.incremental;
  const provisional = s.cost_model_measured === false ?
    " · cost models provisional, being measured on this machine" : "";
  setText(r, "engines", `k = ${s.k} · ${s.engine}${chosen} + ${stage}${provisional}`);
  if (s.plan && s.plan.choice) field(r, "engines").title = s.plan.choice;
  const err = field(r, "error");
  err.hidden = !s.error;
  err.textContent = s.error || "";
  setText(r, "stored", fmtInt(s.stored));
  setText(r, "received", fmtInt(s.received));
  setText(r, "pace", fmtNum(s.pace, 1));
  setText(r, "s", fmtNum(s.arrival_coefficient, 3));
  setText(r, "nu", fmtNum(s.nu, 4));
  const baseAt = s.base_started_at ?? s.base_at;
  setText(r, "base-countdown", s.base_started_at ? "started" :
          countdown(baseAt, now, "due"));
  const closeAt = s.close_requested_at ?? s.close_at;
  setText(r, "close-countdown", s.close_requested_at ? "closed" :
          s.close_at == null ? "on command" : countdown(s.close_at, now, "due"));
  setText(r, "deadline", s.deadline_at != null ? clockTime(s.deadline_at) :
          s.deadline_seconds != null ? `${fmtDuration(s.deadline_seconds)} after close` : "none");

  const box = field(r, "progress");
  box.hidden = !s.progress;
  if (s.progress) {
    const p = s.progress;
    const frac = p.expected_seconds ? Math.min(1, p.elapsed_seconds / p.expected_seconds) : 0;
    field(r, "progress-fill").style.width = `${(100 * frac).toFixed(1)}%`;
    setText(r, "progress-label", `${p.stage} running for ${fmtDuration(p.elapsed_seconds)}` +
            (p.expected_seconds != null ? ` (expected ${fmtDuration(p.expected_seconds)}` +
             (p.refine_seconds ? `, of which refinement ${fmtDuration(p.refine_seconds)})` : ")")
             : ""));
  }

  // fields computed on the raw answers come with the control token only (withheld)
  const held = new Set(s.withheld || []);
  const WITHHELD = "withheld: for the data holder (/api/status with the control token)";
  const dead = Object.entries(s.dead_lettered).sort();
  rows(field(r, "dead"), held.has("dead_lettered")
    ? [["all reasons", fmtInt(s.dead_lettered_total)], ["by reason", WITHHELD]]
    : dead.length ? dead.map(([k, v]) => [k, fmtInt(v)]) : [["none", "0"]]);

  const rel = s.release;
  field(r, "release-box").hidden = !rel;
  if (rel) {
    rows(field(r, "release"), [
      ["status", rel.status],
      ["records n", fmtInt(rel.n)],
      ["k", String(rel.k)],
      ["engines", rel.mode === "two-stage" ? `${rel.engine} + ${rel.incremental}` :
                  `${rel.engine} (one-shot)`],
      ["nu (late records)", fmtNum(rel.nu, 4)],
      ["distortion D", held.has("release.distortion") ? WITHHELD : fmtNum(rel.distortion, 4)],
      ["information loss IL", held.has("release.information_loss") ? WITHHELD
                              : `${fmtNum(rel.information_loss, 2)} %`],
      ["close to release", fmtDuration(rel.close_to_release_seconds) +
                           ` (${fmtNum(rel.close_to_release_seconds, 2)} s)`],
      ["one-shot estimate", fmtDuration(rel.one_shot_estimate_seconds) +
                            ` (${fmtNum(rel.one_shot_estimate_seconds, 2)} s)`],
      ...(rel.one_shot_measured_seconds == null ? [] : [
        ["one-shot measured", fmtDuration(rel.one_shot_measured_seconds) +
                              ` (${fmtNum(rel.one_shot_measured_seconds, 2)} s)`]]),
    ]);
  }
  drawChart(view, s);
}

function render(status) {
  for (const s of status.surveys) {
    update(views.get(s.id) ?? createView(s), s, status.now);
  }
  document.body.dataset.updated = String(status.now);
}

// The control token, if the data holder gives it: /api/status then includes the fields
// computed on the raw answers. Kept in this tab's sessionStorage only, sent as a bearer token.
const TOKEN_KEY = "streamanon-token";

function statusHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? {Authorization: `Bearer ${token}`} : {};
}

async function poll() {
  const conn = document.getElementById("connection");
  try {
    const resp = await fetch("/api/status", {cache: "no-store", headers: statusHeaders()});
    if (!resp.ok) throw new Error(resp.statusText);
    const status = await resp.json();
    render(status);
    if (status.stale) {  // the service answered; the store did not: its last known state
      conn.textContent = `stale: ${status.unreachable.join(", ")} not answering · ` +
        clockTime(Number(document.body.dataset.updated));
      conn.className = "connection lost";
    } else {
      conn.textContent = `live · ${clockTime(Number(document.body.dataset.updated))}`;
      conn.className = "connection live";
    }
  } catch (e) {
    conn.textContent = "connection lost, retrying";
    conn.className = "connection lost";
  }
  setTimeout(poll, POLL_MS);
}

// a page written by streamanon.service.web.snapshot_html carries its status and does not poll
if (window.STREAMANON_SNAPSHOT) {
  const conn = document.getElementById("connection");
  render(window.STREAMANON_SNAPSHOT);
  conn.textContent = `snapshot · ${clockTime(window.STREAMANON_SNAPSHOT.now)}`;
  conn.className = "connection snapshot";
  document.getElementById("token-form").hidden = true;
} else {
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token");
    if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value);
    else sessionStorage.removeItem(TOKEN_KEY);
    input.value = "";
  });
  poll();
}
