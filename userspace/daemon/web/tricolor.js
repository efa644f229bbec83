// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolor.js: the live page (docs/page.md). Once a second it asks the daemon for the rate
// samples it does not have yet (/api/v1/samples?after=SEQ) and for the view (/api/v1/view:
// stats, status and flows --top as tricolorctl reads them), and redraws. Nothing here writes.
"use strict";

(function () {
  const COLORS = ["green", "yellow", "red"];
  const FILL = { green: "rgba(46,160,67,0.75)", yellow: "rgba(222,170,0,0.8)", red: "rgba(207,34,46,0.8)" };
  const KEEP = 300;      // samples: the daemon's 5 minutes
  const WINDOW = 10;     // the table's rates: the mean over the last 10 samples
  const AUTO_CHARTS = 6; // the busiest policies charted without a click
  const POLL_MS = 1000;
  // The rates come from the samples, asked for at every poll; the view (counters, buckets,
  // status, flows) costs the daemon more to make (a JSON of every policy): every other poll.
  const VIEW_EVERY = 2;   // polls
  const SPECS_EVERY = 10; // polls

  // The rate history: t[i] (ms) and, per policy, bit/s per colour (null: no rate then).
  const hist = { seq: 0, t: [], bps: new Map() };
  let view = null;
  let specs = {};   // each policy's spec, asked for now and then (SPECS_EVERY) and on a change
  let polls = 0;
  const pinned = new Set(); // charted because clicked
  const charts = new Map(); // policy -> {plot, el}
  let totalPlot = null;
  let rendered = false;

  // ---- formatting, as iproute2 prints rates (SI prefixes, bits) ----
  function fmtRate(bps) {
    if (bps === null || bps === undefined || Number.isNaN(bps)) return "–";
    const units = [[1e9, "Gbit/s"], [1e6, "Mbit/s"], [1e3, "kbit/s"]];
    for (const [f, u] of units) if (bps >= f) return (bps / f).toFixed(bps >= 100 * f ? 0 : bps >= 10 * f ? 1 : 2) + " " + u;
    return Math.round(bps) + " bit/s";
  }
  function fmtBytes(b) {
    if (b === undefined || b === null) return "–";
    const units = [[2 ** 40, "TiB"], [2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]];
    for (const [f, u] of units) if (b >= f) return (b / f).toFixed(1) + " " + u;
    return b + " B";
  }
  function esc(s) {
    return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  function rows(tbody, html, empty, cols) {
    tbody.innerHTML = html.length ? html.join("") : `<tr class="empty"><td colspan="${cols}">${esc(empty)}</td></tr>`;
  }

  // ---- the history ----
  function merge(s) {
    if (s.seq < hist.seq) { // the daemon restarted: its history starts again
      hist.t = []; hist.bps.clear();
    }
    const n = s.t.length;
    if (n === 0) { hist.seq = s.seq; return; }
    const before = hist.t.length;
    hist.t.push(...s.t);
    for (const [name, cols] of Object.entries(s.bps)) {
      let h = hist.bps.get(name);
      if (!h) { h = [[], [], []]; for (const c of h) c.length = before, c.fill(null); hist.bps.set(name, h); }
      for (let c = 0; c < 3; c++) h[c].push(...cols[c]);
    }
    for (const h of hist.bps.values()) for (const c of h) while (c.length < hist.t.length) c.push(null);
    const drop = hist.t.length - KEEP;
    if (drop > 0) {
      hist.t.splice(0, drop);
      for (const [name, h] of hist.bps) {
        for (const c of h) c.splice(0, drop);
        if (h.every((c) => c.every((v) => v === null))) hist.bps.delete(name);
      }
    }
    hist.seq = s.seq;
  }

  // A policy's mean rate per colour over the last WINDOW samples: each sample's rate covers
  // the time since the one before, so the mean is weighted by those times. from/to: the
  // window's ends (ms), as the daemon read the counters.
  function windowRate(name) {
    const h = hist.bps.get(name);
    const n = hist.t.length;
    if (!h || n < 2) return null;
    const first = Math.max(1, n - WINDOW);
    const out = { from: hist.t[first - 1], to: hist.t[n - 1], green: 0, yellow: 0, red: 0 };
    let ms = 0;
    for (let i = first; i < n; i++) {
      if (h[0][i] === null) continue;
      const dt = hist.t[i] - hist.t[i - 1];
      ms += dt;
      COLORS.forEach((c, k) => { out[c] += h[k][i] * dt; });
    }
    if (ms === 0) return null;
    if (ms !== hist.t[n - 1] - hist.t[first - 1]) out.from = hist.t[n - 1] - ms; // partly new
    COLORS.forEach((c) => { out[c] /= ms; });
    return out;
  }

  // ---- charts: the colours stacked (red on yellow on green) ----
  function stacked(cols) {
    const g = cols[0], y = cols[1], r = cols[2];
    const gy = g.map((v, i) => (v === null ? null : v + (y[i] ?? 0)));
    const all = gy.map((v, i) => (v === null ? null : v + (r[i] ?? 0)));
    return [hist.t.map((t) => t / 1000), all, gy, g];
  }
  function chartOpts(title, width, cols) {
    const own = (k) => (u, v, si, i) => (i === null || i === undefined ? "–" : fmtRate(cols()[k][i]));
    return {
      title, width, height: 170,
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max, 1)] } },
      axes: [{}, { size: 80, values: (u, vals) => vals.map(fmtRate) }],
      series: [
        {},
        { label: "red", stroke: "#cf222e", fill: FILL.red, value: own(2), points: { show: false } },
        { label: "yellow", stroke: "#b58800", fill: FILL.yellow, value: own(1), points: { show: false } },
        { label: "green", stroke: "#2ea043", fill: FILL.green, value: own(0), points: { show: false } },
      ],
    };
  }
  function totalCols() {
    // Top-level policies only: a child's packets are its parent's too (docs/spec.md §9).
    const top = new Set((view?.stats.policies ?? []).filter((p) => p.parent === null).map((p) => p.name));
    const cols = [0, 1, 2].map(() => hist.t.map(() => null));
    for (const [name, h] of hist.bps) {
      if (!top.has(name)) continue;
      for (let c = 0; c < 3; c++) h[c].forEach((v, i) => { if (v !== null) cols[c][i] = (cols[c][i] ?? 0) + v; });
    }
    return cols;
  }
  function width(el) { return Math.max(300, el.clientWidth - 4); }
  let totalNow = [[], [], []];
  function drawTotal() {
    const el = document.getElementById("total-chart");
    totalNow = totalCols();
    if (!totalPlot) totalPlot = new uPlot(chartOpts("", width(el), () => totalNow), stacked(totalNow), el);
    else totalPlot.setData(stacked(totalNow));
  }
  function drawCharts(busiest) {
    const want = [...new Set([...busiest.slice(0, AUTO_CHARTS), ...pinned])].filter((n) => hist.bps.has(n));
    const box = document.getElementById("charts");
    for (const [name, c] of charts) if (!want.includes(name)) { c.plot.destroy(); c.el.remove(); charts.delete(name); }
    for (const name of want) {
      const cols = () => hist.bps.get(name) ?? [[], [], []];
      let c = charts.get(name);
      if (!c) {
        const el = document.createElement("div");
        el.className = "chart policy-chart";
        el.dataset.policy = name;
        box.appendChild(el);
        const title = name + (pinned.has(name) ? " (pinned)" : "");
        c = { el, plot: new uPlot(chartOpts(title, Math.min(width(box), 620), cols), stacked(cols()), el) };
        charts.set(name, c);
      } else {
        c.plot.setData(stacked(cols()));
      }
    }
    // In the order wanted: the busiest first.
    for (const name of want) box.appendChild(charts.get(name).el);
  }

  // ---- the tables ----
  function meterText(spec) {
    const parts = [spec.algo ?? "srtcm"];
    for (const k of ["cir", "cbs", "ebs", "pir", "pbs", "eir"]) if (spec[k] !== undefined) parts.push(`${k} ${spec[k]}`);
    if (spec.per) parts.push(`per ${spec.per}`);
    if (spec.parent) parts.push(`parent ${spec.parent}`);
    if (spec.fleet) parts.push("fleet");
    if (spec.warmup) parts.push(`warmup ${spec.warmup}`);
    if (spec.quota) parts.push(`quota ${spec.quota}`);
    return parts.join(" ");
  }
  function matchText(spec) {
    const m = spec.match;
    if (!m || typeof m !== "object") return "everything";
    return Object.entries(m).map(([k, v]) => `${k} ${Array.isArray(v) ? v.join(",") : v}`).join(" ");
  }
  function bucketBars(b) {
    if (!b) return "";
    return ["c", "e", "p"].filter((k) => b[k]).map((k) => {
      const pct = Math.max(0, Math.min(100, b[k].percent));
      return `<span class="bucket" title="${k.toUpperCase()}: ${b[k][b.unit]} of ${b[k].size} ${b.unit}">` +
        `${k.toUpperCase()} <span class="bar"><span style="width:${pct.toFixed(1)}%"></span></span> ${pct.toFixed(0)}%</span>`;
    }).join(" ");
  }
  // --quota: what a bucket used of its period, and when the period ends (stats, flows).
  function quotaText(q) {
    if (!q) return "";
    return `<span class="quota" title="resets ${esc(q.reset)}">quota ${fmtBytes(q.used)} of ` +
      `${fmtBytes(q.quota)} used, ${fmtBytes(q.left)} left, resets ${esc(q.reset)}</span>`;
  }
  function drawPolicies() {
    const filter = document.getElementById("filter").value.trim().toLowerCase();
    const list = view.stats.policies.map((p) => ({ p, r: windowRate(p.name), s: specs[p.name] ?? {}, b: view.buckets[p.name] }));
    const total = (x) => (x.r ? x.r.green + x.r.yellow + x.r.red : -1);
    list.sort((a, b) => total(b) - total(a) || a.p.name.localeCompare(b.p.name));
    const html = [];
    for (const { p, r, s, b } of list) {
      if (filter && !p.name.toLowerCase().includes(filter) && !(p.owner ?? "").toLowerCase().includes(filter)) continue;
      const sum = r ? r.green + r.yellow + r.red : 0;
      const cells = COLORS.map((c) =>
        `<td class="num rate ${c}" data-color="${c}" data-bps="${r ? r[c].toFixed(0) : ""}">${r ? fmtRate(r[c]) : "–"}</td>`).join("");
      const f = p.fleet;
      html.push(`<tr class="policy${pinned.has(p.name) ? " pinned" : ""}" data-policy="${esc(p.name)}"` +
        (r ? ` data-from="${r.from}" data-to="${r.to}"` : "") + `>` +
        `<td class="name">${esc(p.name)}</td><td>${esc(p.owner ?? "")}</td><td>${esc(meterText(s))}</td>` +
        `<td>${esc(matchText(s))}</td>${cells}` +
        `<td class="num">${r && sum > 0 ? (100 * r.red / sum).toFixed(1) + "%" : "–"}</td>` +
        `<td>${b ? bucketBars(b) : s.per ? "per flow: see the flows" : ""} ${quotaText(p.quota)}</td>` +
        `<td>${f ? esc(f.mode) : ""}</td></tr>`);
    }
    rows(document.querySelector("#policies tbody"), html, filter ? "no policy matches the filter" : "no policies", 10);
    const any = list.find((x) => x.r);
    document.getElementById("window-note").textContent = any
      ? `rates: the mean of the last ${Math.round((any.r.to - any.r.from) / 1000)} s; click a row to chart it`
      : "rates appear after two samples";
    return list.filter((x) => total(x) > 0).map((x) => x.p.name);
  }
  function drawFlows() {
    const f = view.flows ?? { flows: [] };
    const html = f.flows.map((x) =>
      `<tr><td>${esc(x.policy)}</td><td>${esc(x.key)}</td>` +
      COLORS.map((c) => `<td class="num">${fmtBytes(x[c].bytes)}</td>`).join("") +
      `<td>${bucketBars(x.buckets)} ${quotaText(x.quota)}</td></tr>`);
    rows(document.querySelector("#flows tbody"), html, "no flows", 6);
    document.getElementById("flows-note").textContent = f.as_of_ms
      ? `by bytes, as of ${new Date(f.as_of_ms).toLocaleTimeString()} (${f.via === "hot" ? "from the heavy hitters" : "a walk of the table"})`
      : "";
  }
  function drawCgroups() {
    const html = [];
    for (const p of view.stats.policies) {
      for (const cg of p.cgroups ?? [])
        html.push(`<tr><td>${esc(p.name)}</td><td>${esc(p.owner ?? "")}</td><td>${esc(cg.path)}</td>` +
          COLORS.map((c) => `<td class="num">${cg[c] ? fmtBytes(cg[c].bytes) : "(policy's)"}</td>`).join("") + `</tr>`);
      // A container's policies, made by the CNI plugin or the engines' follower, name it.
      if (!p.cgroups && p.owner && /^(pod|docker|podman) /.test(p.owner))
        html.push(`<tr><td>${esc(p.name)}</td><td>${esc(p.owner)}</td><td>(its interface)</td>` +
          COLORS.map((c) => `<td class="num">${fmtBytes(p[c].bytes)}</td>`).join("") + `</tr>`);
    }
    rows(document.querySelector("#cgroups tbody"), html, "no cgroup or container policies", 6);
    const eng = (view.status.containers ?? []).map((e) =>
      `<tr><td>${esc(e.engine)}</td><td>${esc(e.socket)}</td>` +
      `<td>${e.connected ? "following" : "not connected" + (e.last_error ? ": " + esc(e.last_error) : "")}</td>` +
      `<td>${e.containers.map((c) => esc(`${c.name} (${c.id}, ${c.iface})`)).join("<br>")}</td>` +
      `<td>${Object.entries(e.bad_labels).map(([n, w]) => esc(`${n}: ${w}`)).join("<br>")}</td></tr>`);
    rows(document.querySelector("#engines tbody"), eng, "no container engines followed (tricolord --containers)", 5);
  }
  function drawAttachments() {
    const st = view.status;
    rows(document.querySelector("#attachments tbody"), st.attachments.map((a) =>
      `<tr class="${a.attached === false ? "bad" : ""}"><td>${esc(a.iface ?? "")}</td><td>${esc(a.hook)}</td>` +
      `<td>${esc(a.direction ?? "")}</td><td>${esc(a.mode ?? "")}</td>` +
      `<td>${a.attached === false ? "no" + (a.error ? ": " + esc(a.error) : "") : "yes"}</td><td>${esc(a.by ?? a.managed_by ?? "")}</td></tr>`),
      "not attached anywhere", 6);
    rows(document.querySelector("#patterns tbody"), st.patterns.map((p) =>
      `<tr><td>${esc(p.match_ifname)}</td><td>${esc(p.hook)}</td><td>${esc(p.direction ?? "")}</td>` +
      `<td>${esc(p.interfaces.join(", "))}</td></tr>`), "no interface patterns", 4);
  }
  function drawFleet() {
    const f = view.status.fleet;
    document.getElementById("fleet-section").hidden = !f;
    if (!f) return;
    document.getElementById("fleet-summary").textContent =
      `node ${f.node} (${f.instance}) on ${f.redis}` + (f.in_fallback ? `: in fallback (${f.fallback})` : "") +
      (f.name_held_by ? `: name held by ${f.name_held_by}` : "");
    rows(document.querySelector("#fleet tbody"), Object.entries(f.policies ?? {}).map(([name, p]) =>
      `<tr data-policy="${esc(name)}"><td>${esc(name)}</td><td>${esc(p.mode)}</td><td class="num">${fmtRate(p.lease_rate)}</td>` +
      `<td class="num">${fmtRate(p.fair_share)}</td><td class="num">${p.hosts_seen}</td></tr>`), "no fleet policies", 5);
  }
  function drawSummary() {
    const st = view.status, s = view.stats;
    const parts = [
      `${st.policies.used} of ${st.policies.capacity} policies`,
      `${st.flows.used} of ${st.flows.capacity} flows`,
      `unclassified ${fmtBytes(s.unclassified.bytes)}`,
      `table full ${s.table_full}`, `lock timeouts ${s.lock_timeouts}`,
      `pin dir ${st.pin_dir}`,
    ];
    document.getElementById("summary").textContent = parts.join(" · ");
  }

  function draw() {
    drawSummary();
    const busiest = drawPolicies();
    drawTotal();
    drawCharts(busiest);
    drawFlows();
    drawCgroups();
    drawAttachments();
    drawFleet();
    if (!rendered) {
      rendered = true;
      // The time from navigation to the first full page (tests/web reads it).
      window.tricolorFirstRenderMs = performance.now();
    }
    document.body.dataset.seq = String(hist.seq);
  }

  async function getJson(url) {
    const r = await fetch(url, { cache: "no-store" });
    if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
    return r.json();
  }
  async function poll() {
    try {
      // Specs change only when policies do: asked for every SPECS_EVERY polls, and at once when
      // the daemon's policies are not those the page has specs of.
      const names = view ? view.stats.policies.map((p) => p.name) : [];
      const stale = !view || polls % SPECS_EVERY === 0 || names.length !== Object.keys(specs).length ||
        names.some((n) => !(n in specs));
      const wantView = !view || stale || polls % VIEW_EVERY === 0;
      const [s, v] = await Promise.all([getJson(`/api/v1/samples?after=${hist.seq}`),
        wantView ? getJson(`/api/v1/view?specs=${stale ? 1 : 0}`) : null]);
      merge(s);
      if (v) {
        view = v;
        if (v.specs) specs = v.specs;
      }
      polls++;
      draw();
      document.getElementById("error").hidden = true;
    } catch (e) {
      const el = document.getElementById("error");
      el.textContent = `cannot reach tricolord: ${e.message} (retrying)`;
      el.hidden = false;
    }
    setTimeout(poll, POLL_MS);
  }

  document.getElementById("filter").addEventListener("input", () => view && drawPolicies());
  document.querySelector("#policies tbody").addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-policy]");
    if (!tr) return;
    const name = tr.dataset.policy;
    if (pinned.has(name)) pinned.delete(name); else pinned.add(name);
    const c = charts.get(name);
    if (c) { c.plot.destroy(); c.el.remove(); charts.delete(name); }
    if (view) draw();
  });
  poll();
})();
