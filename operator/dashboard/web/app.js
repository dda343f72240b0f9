// otad fleet dashboard. Everything shown comes from devices, which are
// outside input: it is only ever set as text (textContent, text nodes),
// never as markup, and the Content-Security-Policy forbids inline script.
"use strict";

const view = {
  offset: 0,
  limit: 50,
  q: "",
  state: "",
  chips: {}, // filter name → value, from clicks on the charts
  total: 0,
  device: null, // the device page's ID, or null
};

const $ = (id) => document.getElementById(id);

// el makes an element; props may set className, href, title and data-*;
// the children are elements or strings (text).
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "className") e.className = v;
    else if (k === "href") e.setAttribute("href", v);
    else if (k === "title") e.title = v;
    else if (k.startsWith("data-")) e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue; // an optional part left out
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function dash(s) {
  return s === undefined || s === null || s === "" ? "-" : String(s);
}

function brief(o) {
  if (!o) return "-";
  return o.code ? o.result + "/" + o.code : dash(o.result);
}

function when(t) {
  if (!t) return "-";
  const d = new Date(t);
  return isNaN(d) ? "-" : d.toLocaleString();
}

function deviceLink(id) {
  return el("a", { href: "#device=" + encodeURIComponent(id), className: "device-link" }, id);
}

// ---- the overview (live) ----

function renderOverview(o) {
  const s = o.summary;
  $("total").textContent = s.devices;
  $("online").textContent = s.online.yes || 0;
  $("offline").textContent = s.online.no || 0;
  $("failed").textContent = Object.values(s.failures).reduce((a, b) => a + b, 0);
  $("coverage").textContent = o.coverage || "";
  chart($("chart-states"), s.states);
  chart($("chart-versions"), s.versions);
  chart($("chart-online"), s.online);
  chart($("chart-failures"), s.failures);
  chart($("chart-refusals"), s.refusals || {});
  // As otactl status: no trust chart while no device reports a root.
  const trust = s.trust || {};
  $("chart-trust").parentElement.hidden = !Object.keys(trust).some((k) => k !== "");
  chart($("chart-trust"), trust);
  renderRollouts(o.rollouts, o.actions);
}

// chart draws one bar a key, the largest first; a click filters the table.
function chart(node, counts) {
  clear(node);
  const entries = Object.entries(counts).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const most = entries.length ? entries[0][1] : 0;
  if (!entries.length) node.append(el("p", { className: "muted" }, "none"));
  for (const [key, n] of entries) {
    const bar = el("span", { className: "bar" });
    bar.style.width = (most ? (100 * n) / most : 0) + "%";
    const row = el("button", { className: "chart-row", "data-key": key, title: "show only these devices" },
      el("span", { className: "chart-label" }, key === "" ? "(none)" : key),
      el("span", { className: "chart-track" }, bar),
      el("span", { className: "chart-count" }, n));
    row.type = "button";
    row.addEventListener("click", () => {
      if (key === "(other)") return;
      view.chips[node.dataset.filter] = key;
      view.offset = 0;
      renderChips();
      loadDevices();
    });
    node.append(row);
  }
}

function renderChips() {
  const chips = $("chips");
  clear(chips);
  for (const [k, v] of Object.entries(view.chips)) {
    const b = el("button", { className: "chip", title: "remove this filter" }, k + ": " + (v === "" ? "(none)" : v) + " ×");
    b.type = "button";
    b.addEventListener("click", () => {
      delete view.chips[k];
      view.offset = 0;
      renderChips();
      loadDevices();
    });
    chips.append(b);
  }
}

// ---- rollouts ----

function renderRollouts(rollouts, actions) {
  const list = $("rollout-list");
  clear(list);
  $("no-rollouts").hidden = rollouts.length > 0;
  for (const r of rollouts) list.append(rolloutCard(r, actions));
}

// actionNotes keeps what the last action on each rollout answered, across
// the redraws of the live stream.
const actionNotes = {};

// actionButtons are pause, resume and abort, as otactl rollout pause,
// resume and abort (the server offers them only behind its token).
function actionButtons(r) {
  const box = el("div", { className: "actions" });
  const final = r.state === "finished" || r.state === "aborted";
  const ops = [];
  if (!final && r.state !== "paused" && r.state !== "halted") ops.push("pause");
  if (r.state === "paused" || r.state === "halted") ops.push("resume");
  if (!final) ops.push("abort");
  for (const op of ops) {
    const b = el("button", { className: "action", "data-op": op }, op);
    b.addEventListener("click", () => act(r.name, op));
    box.append(b);
  }
  if (actionNotes[r.name]) box.append(el("span", { className: "action-note muted" }, actionNotes[r.name]));
  return box;
}

async function act(name, op) {
  let note;
  try {
    const res = await fetch("api/rollouts/" + encodeURIComponent(name) + "/" + op, {
      method: "POST", credentials: "same-origin",
      headers: { "X-Otad-Action": "1", "Content-Type": "application/json" },
      body: JSON.stringify({ reason: "from the dashboard" }),
    });
    note = res.ok ? op + " published; the controller applies it" : op + " refused: " + (await res.text()).trim();
  } catch (e) {
    note = op + " failed: " + e;
  }
  actionNotes[name] = note;
  const box = document.querySelector('.rollout[data-name="' + CSS.escape(name) + '"] .actions');
  if (box) {
    const old = box.querySelector(".action-note");
    if (old) old.remove();
    box.append(el("span", { className: "action-note muted" }, note));
  }
}

function rolloutCard(r, actions) {
  const card = el("article", { className: "rollout", "data-name": r.name, "data-state": r.state || "bad" });
  card.append(el("h3", {}, r.name, " ", el("span", { className: "phase phase-" + (r.state || "bad") }, r.state || "bad state")));
  if (r.bad_state) {
    card.append(el("p", { className: "bad" }, "the retained state does not decode: " + r.bad_state));
    return card;
  }
  if (r.reason) card.append(el("p", { className: "reason" }, r.reason));
  if (actions) card.append(actionButtons(r));
  const c = r.counts;
  card.append(el("p", { className: "muted" },
    "offer " + r.offer.id + " to group " + r.group + " — wave " + r.wave + " of " + r.wave_count +
    ", " + c.devices + " devices offered, " + (c.devices - c.pending) + " with an outcome" +
    (r.pace > 0 ? ", " + r.pace.toFixed(1) + " outcomes/min" : "")));
  const waves = el("div", { className: "waves" });
  for (const w of r.waves) waves.append(waveRow(w));
  card.append(waves);
  if (r.failed.length) {
    const rows = r.failed.map((f) =>
      el("tr", { className: "failed-device", "data-device": f.device },
        el("td", {}, deviceLink(f.device)), el("td", { className: "bad" }, f.result),
        el("td", {}, dash(f.code)), el("td", { className: "message" }, dash(f.message))));
    const more = r.failed_total > r.failed.length ? el("p", { className: "muted" }, "and " + (r.failed_total - r.failed.length) + " more") : null;
    card.append(el("h4", {}, "failed devices (" + r.failed_total + ")"),
      el("table", { className: "failed" },
        el("thead", {}, el("tr", {}, el("th", {}, "device"), el("th", {}, "outcome"), el("th", {}, "code"), el("th", {}, "message"))),
        el("tbody", {}, ...rows)));
    if (more) card.append(more);
  }
  if (r.history.length) {
    const items = r.history.slice().reverse().map((h) => el("li", {}, el("time", {}, when(h.time)), " ", h.event));
    card.append(el("details", {}, el("summary", {}, "history"), el("ol", { className: "history" }, ...items)));
  }
  return card;
}

function waveRow(w) {
  const c = w.counts;
  const done = c.devices ? Math.floor((100 * (c.devices - c.pending)) / c.devices) : w.started ? 100 : 0;
  const bad = c.failed + c.rolled_back + c.rejected + c.timed_out;
  const good = c.devices - c.pending - bad;
  const track = el("span", { className: "progress" });
  for (const [cls, n] of [["good", good], ["failed", bad]]) {
    const part = el("span", { className: "part " + cls });
    part.style.width = (c.devices ? (100 * n) / c.devices : 0) + "%";
    track.append(part);
  }
  let text = "not started";
  if (w.started) {
    const parts = [];
    for (const k of ["success", "up_to_date", "superseded", "failed", "rolled_back", "rejected", "timed_out", "pending"]) {
      if (c[k]) parts.push(c[k] + " " + k);
    }
    text = c.devices + " devices" + (parts.length ? ": " + parts.join(", ") : "");
    if (w.queued) text += ", " + w.queued + " not offered yet";
    if (w.per_minute > 0 && !w.ended) text += ", paced at " + w.per_minute.toFixed(0) + " offers/min";
    if (w.ended) text += " — ended";
  }
  return el("div", { className: "wave", "data-wave": w.number, "data-done": done },
    el("span", { className: "wave-name" }, "wave " + w.number), track,
    el("span", { className: "wave-pct" }, w.started ? done + "%" : "–"),
    el("span", { className: "wave-counts" }, text));
}

// ---- the device table (paged by the server) ----

let loading = false;
let again = false;

async function loadDevices() {
  if (loading) {
    again = true;
    return;
  }
  loading = true;
  try {
    const p = new URLSearchParams({ offset: view.offset, limit: view.limit, q: view.q, state: view.state });
    for (const [k, v] of Object.entries(view.chips)) p.set(k, v);
    const res = await fetch("api/devices?" + p.toString(), { credentials: "same-origin" });
    if (!res.ok) throw new Error(await res.text());
    renderDevices(await res.json());
  } catch (e) {
    $("range").textContent = "error: " + e.message;
  } finally {
    loading = false;
    if (again) {
      again = false;
      loadDevices();
    }
  }
}

function slotCell(s) {
  if (!s || !s.version) return el("td", {}, "-");
  return el("td", { className: "slot slot-" + (s.status || "unknown") }, s.version, s.status ? " (" + s.status + ")" : "");
}

function renderDevices(page) {
  view.total = page.total;
  const body = $("device-rows");
  clear(body);
  for (const d of page.devices) {
    const state = d.bad_status ? "bad status" : dash(d.state);
    const online = d.online === null ? "?" : d.online ? "yes" : "no";
    let target = "-";
    if (d.target) {
      target = dash(d.target.version);
      if (d.target.bytes_total > 0) target += " " + Math.floor((100 * d.target.bytes_done) / d.target.bytes_total) + "%";
    }
    let last = d.last_result;
    if (last && d.target && d.target.id && d.target.id !== last.id) last = null; // another install's
    const failedLast = last && ["failed", "rolled_back", "rejected"].includes(last.result);
    body.append(el("tr", { "data-device": d.device, className: d.bad_status ? "bad-row" : "" },
      el("td", {}, deviceLink(d.device)),
      el("td", { className: "online-" + online }, online),
      el("td", { className: d.bad_status ? "bad" : "" }, state),
      el("td", {}, dash(d.running)),
      el("td", {}, dash(d.booted)),
      slotCell(d.slots.A),
      slotCell(d.slots.B),
      el("td", {}, target),
      el("td", { className: failedLast ? "bad" : "" }, brief(last)),
      el("td", {}, d.trust_version ? "v" + d.trust_version : "-")));
  }
  const first = page.total ? page.offset + 1 : 0;
  $("range").textContent = first + "–" + (page.offset + page.devices.length) + " of " + page.total;
  $("prev").disabled = page.offset === 0;
  $("next").disabled = page.offset + page.devices.length >= page.total;
}

// ---- a device's page ----

async function loadDevice(id) {
  const res = await fetch("api/device?id=" + encodeURIComponent(id), { credentials: "same-origin" });
  $("device-id").textContent = id;
  if (!res.ok) {
    $("device-bad").hidden = false;
    $("device-bad").textContent = "not in the fleet view";
    return;
  }
  renderDevice(await res.json());
}

function renderDevice(dd) {
  const d = dd.device;
  $("device-bad").hidden = !d.bad_status;
  $("device-bad").textContent = d.bad_status ? "the last status did not decode: " + d.bad_status : "";
  const facts = $("device-facts");
  clear(facts);
  const online = d.online === null ? "unknown" : d.online ? "yes" : "no";
  for (const [k, v] of [["state", dash(d.state)], ["online", online], ["running", dash(d.running) + " (slot " + dash(d.booted) + ")"],
    ["target", d.target ? dash(d.target.version) + " " + dash(d.target.id) : "-"], ["groups", d.groups.length ? d.groups.join(", ") : "-"],
    ["seq", d.seq], ["agent", dash(d.agent_version)], ["root of trust", d.trust_version ? "v" + d.trust_version : "-"], ["status time", when(d.time)]]) {
    facts.append(el("dt", {}, k), el("dd", {}, v));
  }
  const slots = $("device-slots");
  clear(slots);
  for (const name of ["A", "B"]) {
    const s = d.slots[name] || {};
    slots.append(el("tr", { "data-slot": name }, el("td", {}, name + (d.booted === name ? " (booted)" : "")), el("td", {}, dash(s.version)),
      el("td", { className: "slot-" + (s.status || "unknown") }, dash(s.status))));
  }
  const r = d.last_result;
  $("device-result").textContent = r ? r.id + ": " + brief(r) + (r.message ? " — " + r.message : "") : "-";
  const f = d.last_refusal;
  $("device-refusal").textContent = f ? dash(f.id) + ": " + f.code + (f.message ? " — " + f.message : "") + " (" + when(f.time) + ")" : "-";
  const evs = $("device-events");
  clear(evs);
  for (const e of dd.events.slice().reverse()) {
    evs.append(el("tr", {}, el("td", {}, when(e.time)), el("td", {}, e.seq), el("td", {}, dash(e.from) + " → " + dash(e.to)),
      el("td", {}, dash(e.id)), el("td", {}, e.result ? brief(e) : "-"), el("td", { className: "message" }, dash(e.message))));
  }
  if (!dd.events.length) evs.append(el("tr", {}, el("td", { className: "muted" }, "none seen since the dashboard started")));
}

// ---- routing, live updates ----

function route() {
  const m = location.hash.match(/^#device=(.*)$/);
  view.device = null;
  if (m) {
    try {
      view.device = decodeURIComponent(m[1]);
    } catch (e) {
      view.device = m[1];
    }
  }
  for (const id of ["overview", "rollouts", "devices"]) $(id).hidden = view.device !== null;
  $("device").hidden = view.device === null;
  if (view.device !== null) loadDevice(view.device);
}

let refreshTimer = null;

function refreshSoon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    if (view.device !== null) loadDevice(view.device);
    else loadDevices();
  }, 300);
}

function connect() {
  const live = $("live");
  const es = new EventSource("api/live");
  es.onopen = () => {
    live.textContent = "live";
    live.className = "live on";
  };
  es.onerror = () => {
    live.textContent = "reconnecting…";
    live.className = "live off";
  };
  es.onmessage = (m) => {
    let o;
    try {
      o = JSON.parse(m.data);
    } catch (e) {
      return;
    }
    renderOverview(o);
    document.body.dataset.updated = o.time;
    refreshSoon();
  };
}

function start() {
  let typing = null;
  $("q").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      view.q = $("q").value;
      view.offset = 0;
      loadDevices();
    }, 200);
  });
  $("state").addEventListener("change", () => {
    view.state = $("state").value;
    view.offset = 0;
    loadDevices();
  });
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  $("prev").addEventListener("click", () => {
    view.offset = Math.max(0, view.offset - view.limit);
    loadDevices();
  });
  $("next").addEventListener("click", () => {
    if (view.offset + view.limit < view.total) view.offset += view.limit;
    loadDevices();
  });
  $("back").addEventListener("click", (e) => {
    e.preventDefault();
    location.hash = "";
  });
  window.addEventListener("hashchange", route);
  route();
  loadDevices();
  connect();
}

start();
