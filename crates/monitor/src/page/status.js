// flotilla's status page: polls /api/status and draws it. No build step, no dependency.
// Every value from the server is set as text (never as HTML).
"use strict";

const POLL_MS = 2000;
const token = new URLSearchParams(window.location.search).get("token");
let last = null; // the last answer, and when it came
let lastAt = 0;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return e;
}

function duration(s) {
  if (s === null || s === undefined) return "";
  s = Math.max(0, Math.floor(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (h > 0) return `${h}h ${String(m).padStart(2, "0")}m`;
  if (m > 0) return `${m}m ${String(sec).padStart(2, "0")}s`;
  return `${sec}s`;
}

function clock(iso) {
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleTimeString();
}

function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

function summary(r) {
  const c = r.counts || {};
  const running = r.jobs.filter((j) => j.phase === "running").length;
  const waiting = r.jobs.filter((j) => j.phase === "waiting").length;
  const item = (id, value, label) =>
    el("div", { "data-testid": id }, el("b", { text: String(value) }), label);
  return el("div", { class: "summary" },
    item("instance-count", r.instances.length, r.instances.length === 1 ? "instance" : "instances"),
    item("requested-count", c.requested || 0, "requested"),
    item("idle-slots", c.idle || 0, "idle slots"),
    item("running-jobs", running, running === 1 ? "job running" : "jobs running"),
    item("waiting-jobs", waiting, waiting === 1 ? "job waiting" : "jobs waiting"));
}

function fleet(r) {
  if (r.instances.length === 0) {
    return el("p", { class: "empty", "data-testid": "fleet-empty", text: "No instances." });
  }
  const grid = el("div", { class: "fleet", "data-testid": "fleet" });
  for (const i of r.instances) {
    const slots = el("div", { class: "slots" });
    i.slots.forEach((s, n) => {
      const title = `slot ${n}: ${s.state}` + (s.job ? ` (job ${s.job})` : "");
      slots.appendChild(el("span", { class: `slot s-${s.state}`, title, "data-state": s.state }));
    });
    const meta = [i.state, i.readiness === "ready" ? null : `ready-up ${i.readiness}`,
      plural(i.use_count, "job", "jobs"), duration(i.age_s) + " old",
      i.removing ? `removing: ${i.removing}` : null, i.missing ? "missing from listing" : null]
      .filter(Boolean).join(" · ");
    grid.appendChild(el("div", { class: "instance" + (i.removing ? " removing" : ""), "data-testid": "instance" },
      el("div", { class: "id", text: i.id }), el("div", { class: "meta", text: meta }), slots));
  }
  return grid;
}

// A job's id, linked to its page on GitLab when the server gave one (only http(s)
// addresses reach the page; the link opens apart from the page).
function jobLink(j) {
  if (!j.url) return el("span", { text: String(j.id) });
  return el("a", { href: j.url, target: "_blank", rel: "noopener noreferrer", text: String(j.id) });
}

function jobs(r) {
  if (r.jobs.length === 0) {
    return el("p", { class: "empty", "data-testid": "jobs-empty", text: "No jobs." });
  }
  const body = el("tbody");
  for (const j of r.jobs) {
    const where = j.instance ? `${j.instance} #${j.slot}` : "waiting for a slot";
    body.appendChild(el("tr", { "data-testid": "job", "data-job": String(j.id) },
      el("td", { class: "num" }, jobLink(j)),
      el("td", { text: j.name }),
      el("td", { text: j.phase }),
      el("td", { text: j.level || "" }),
      el("td", { text: where }),
      el("td", { class: "num elapsed", "data-elapsed": String(j.elapsed_s), text: duration(j.elapsed_s) })));
  }
  return el("table", {},
    el("thead", {}, el("tr", {}, ...["job", "name", "state", "isolation", "where", "elapsed"].map((h) => el("th", { text: h })))),
    body);
}

function ended(r) {
  const list = r.ended || [];
  if (list.length === 0) {
    return el("p", { class: "empty", "data-testid": "ended-empty", text: "No job ended in the last hour." });
  }
  const body = el("tbody");
  for (const j of list) {
    const result = j.result || "ended";
    const label = j.failure_reason ? `failed: ${j.failure_reason.replaceAll("_", " ")}` : result;
    const where = j.instance ? `${j.instance} #${j.slot}` : "never got a slot";
    const took = j.waited_s === null || j.waited_s === undefined
      ? duration(j.duration_s)
      : `${duration(j.duration_s)} (waited ${duration(j.waited_s)})`;
    body.appendChild(el("tr", { "data-testid": "ended-job", "data-ended-job": String(j.id), "data-result": result },
      el("td", { class: "num" }, jobLink(j)),
      el("td", { text: j.name }),
      el("td", {}, el("span", { class: `badge ${result}`, text: label })),
      el("td", { text: j.level || "" }),
      el("td", { text: where }),
      el("td", { class: "num", text: took }),
      el("td", { class: "num ago", "data-ago": String(j.ago_s), text: `${duration(j.ago_s)} ago` })));
  }
  return el("table", {},
    el("thead", {}, el("tr", {}, ...["job", "name", "result", "isolation", "ran on", "took", "ended"].map((h) => el("th", { text: h })))),
    body);
}

function decisions(r) {
  if (r.decisions.length === 0) return el("p", { class: "empty", text: "No decision yet." });
  const body = el("tbody");
  for (const d of r.decisions) {
    body.appendChild(el("tr", { "data-testid": "decision" },
      el("td", { text: d.count > 1 ? `${clock(d.at)} (×${d.count} since ${clock(d.since)})` : clock(d.at) }),
      el("td", {}, el("span", { class: `badge ${d.kind}`, text: d.kind.replaceAll("_", " ") })),
      el("td", { class: "explanation", text: d.explanation })));
  }
  return el("table", {}, el("thead", {}, el("tr", {}, el("th", { text: "time" }), el("th", { text: "decision" }), el("th", { text: "why" }))), body);
}

function removals(r) {
  if (r.removals.length === 0) return el("p", { class: "empty", text: "No instance removed yet." });
  const body = el("tbody");
  for (const x of r.removals) {
    body.appendChild(el("tr", { "data-testid": "removal" },
      el("td", { text: clock(x.at) }),
      el("td", { class: "explanation", text: x.instance }),
      el("td", { text: x.reason.replaceAll("_", " ") }),
      el("td", { class: "num", text: `${duration(x.life_s)}, ${plural(x.use_count, "job", "jobs")}` })));
  }
  return el("table", {}, el("thead", {}, el("tr", {}, ...["gone at", "instance", "reason", "lived"].map((h) => el("th", { text: h })))), body);
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function chart(r) {
  const W = 720, H = 140, P = 28;
  const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "instances and demand over the last hour" });
  const pts = r.chart;
  const now = pts.length ? pts[pts.length - 1].t : Math.floor(Date.now() / 1000);
  const t0 = now - 3600;
  const max = Math.max(1, ...pts.map((p) => Math.max(p.instances, p.demand, p.idle_target)));
  const x = (t) => P + ((t - t0) / 3600) * (W - P - 8);
  const y = (v) => H - 18 - (v / max) * (H - 30);
  for (const v of [0, max]) {
    const t = svg("text", { x: 4, y: y(v) + 3 });
    t.textContent = String(v);
    box.appendChild(t);
  }
  const l = svg("text", { x: P, y: H - 4 }); l.textContent = "−60 min"; box.appendChild(l);
  const rr = svg("text", { x: W - 40, y: H - 4 }); rr.textContent = "now"; box.appendChild(rr);
  for (const [key, cls] of [["instances", "instances"], ["demand", "demand"], ["idle_target", "target"]]) {
    const line = pts.filter((p) => p.t >= t0).map((p) => `${x(p.t).toFixed(1)},${y(p[key]).toFixed(1)}`).join(" ");
    if (line) box.appendChild(svg("polyline", { class: cls, points: line }));
  }
  const legend = el("div", { class: "key" },
    el("span", {}, el("i", { class: "k-instances" }), "instances"),
    el("span", {}, el("i", { class: "k-demand" }), "jobs wanting a slot (running + waiting)"),
    el("span", {}, el("i", { class: "k-target" }), "idle target"));
  return el("div", { class: "chart", "data-testid": "chart" }, box, legend);
}

function runner(r) {
  const policy = r.policy
    ? `policy ${r.policy.index === null ? "default" : "#" + r.policy.index}: idle_count ${r.policy.idle_count}, idle_time ${duration(r.policy.idle_time_s)}, scale_factor ${r.policy.scale_factor}${r.policy.preemptive ? ", preemptive" : ""}`
    : "";
  const limits = r.provider
    ? `${r.provider} · ${plural(r.capacity_per_instance, "slot", "slots")} per instance · max ${r.max_instances || "unlimited"} instances`
    : "";
  return el("section", { class: "runner", "data-testid": "runner", "data-runner": r.name },
    el("div", { class: "runner-head" },
      el("h2", { text: r.name || "(unnamed runner)" }),
      el("span", { class: `badge ${r.phase}`, "data-testid": "phase", text: r.phase }),
      el("span", { class: "muted", text: limits }),
      el("span", { class: "muted", text: policy })),
    r.error ? el("p", { class: "problem", text: r.error }) : null,
    summary(r),
    el("h3", { text: "Fleet" }), fleet(r),
    el("h3", { text: "Instances and demand, last hour" }), chart(r),
    el("h3", { text: "Jobs" }), jobs(r),
    el("h3", { text: "Ended in the last hour" }), ended(r),
    el("div", { class: "columns" },
      el("div", {}, el("h3", { text: "Scaler decisions" }), decisions(r)),
      el("div", {}, el("h3", { text: "Removals" }), removals(r))));
}

function render(status) {
  document.getElementById("version").textContent = `version ${status.version} · concurrent ${status.concurrent}`;
  const main = document.getElementById("runners");
  main.replaceChildren(...status.runners.map(runner));
  if (status.runners.length === 0) main.appendChild(el("p", { class: "empty", text: "No runner." }));
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

function tickElapsed() {
  if (!last) return;
  const extra = (Date.now() - lastAt) / 1000;
  for (const td of document.querySelectorAll("td.elapsed")) {
    td.textContent = duration(Number(td.dataset.elapsed) + extra);
  }
  for (const td of document.querySelectorAll("td.ago")) {
    td.textContent = `${duration(Number(td.dataset.ago) + extra)} ago`;
  }
}

async function poll() {
  const problem = document.getElementById("problem");
  try {
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    const resp = await fetch("/api/status", { headers, cache: "no-store" });
    if (!resp.ok) throw new Error(`${resp.status}: ${(await resp.text()).trim()}`);
    last = await resp.json();
    lastAt = Date.now();
    render(last);
    problem.hidden = true;
  } catch (e) {
    problem.textContent = `Cannot load the status: ${e.message}`;
    problem.hidden = false;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

setInterval(tickElapsed, 1000);
poll();
