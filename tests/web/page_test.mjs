// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// page_test.mjs: tricolord --web's page in a real browser (Debian's chromium, headless, driven
// by puppeteer-core), against a real daemon policing real traffic.
//   1. a veth lab (198.19.97.0/24), tricolord on it (XDP) with --web on a free loopback port,
//      three policies: "web" (aggregate srTCM, 8 Mbit/s, offered 16 by UDP), "bulk" (trTCM per
//      source, 2/4 Mbit/s, offered 6), "idle" (no traffic);
//   2. while the traffic runs, `tricolorctl -j stats` every 100 ms, each read stamped with the
//      time it was answered;
//   3. the page loaded; once it has 14 samples, each policy's row: every policy is there, and
//      each colour's rate it shows (the mean over the window the row names) agrees with the
//      counters tricolorctl read over those same milliseconds within 5% (of the policy's total
//      rate, for a colour near 0), its text says the same number; the charts, the busiest
//      flows, the attachments are shown;
//   4. read-only: the page made GET requests alone, and the daemon refuses any other method;
//      bad queries are refused with a message.
// Options: --screenshot FILE (a PNG of the page at the end: docs/images/page.png, made by
// ./tricolor.sh figures-page), --bench (tests/bench/page_bench: 500 policies, 1000 flows;
// prints the render time and the daemon's CPU with one viewer).
// Needs root, a build (BUILD_DIR, default build/), chromium (CHROMIUM: its binary). Prints
// "N passed, N failed"; exits non-zero on any failure.
import puppeteer from "puppeteer-core";
import { execFile, execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const build = path.resolve(process.env.BUILD_DIR ?? path.join(repo, "build"));
const daemonBin = path.join(build, "userspace/daemon/tricolord");
const ctlBin = path.join(build, "tools/tricolorctl");
const udpTool = path.join(build, "tests/udp_tool");
const args = process.argv.slice(2);
const screenshot = args.includes("--screenshot") ? args[args.indexOf("--screenshot") + 1] : null;
const bench = args.includes("--bench");
const NS = "tcpage", HOST_IF = "tcpageh", NS_IF = "tcpagen";
const HOST = "198.19.97.1", PEER = "198.19.97.2";
const run = promisify(execFile);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const results = [];
function check(ok, what) {
  results.push(!!ok);
  console.log((ok ? "ok   " : "FAIL ") + what);
}
function sh(...argv) { return execFileSync(argv[0], argv.slice(1), { encoding: "utf8" }); }
function shOk(...argv) { // cleanup: what it removes may not exist
  try { execFileSync(argv[0], argv.slice(1), { stdio: "ignore" }); } catch { /* nothing to do */ }
}

function chromium() {
  for (const c of [process.env.CHROMIUM, "/usr/lib/chromium/chromium", "/usr/bin/chromium"])
    if (c && fs.existsSync(c)) return c;
  throw new Error("chromium is not installed (apt-get install chromium)");
}

// "7.96 Mbit/s" -> bit/s, as the page prints rates.
function parseRate(text) {
  const m = /^([\d.]+) (bit|kbit|Mbit|Gbit)\/s$/.exec(text.trim());
  if (!m) return NaN;
  return Number(m[1]) * { bit: 1, kbit: 1e3, Mbit: 1e6, Gbit: 1e9 }[m[2]];
}

// The bytes tricolorctl read at time t (ms), by linear interpolation between the two reads
// around it: the traffic is steady, the reads 100 ms apart.
function bytesAt(reads, name, color, t) {
  for (let i = 1; i < reads.length; i++) {
    const a = reads[i - 1], b = reads[i];
    if (a.t <= t && t <= b.t) {
      const va = a.bytes[name]?.[color], vb = b.bytes[name]?.[color];
      if (va === undefined || vb === undefined) return undefined;
      return va + ((vb - va) * (t - a.t)) / (b.t - a.t);
    }
  }
  return undefined;
}

async function ctl(sock, ...argv) {
  const { stdout } = await run(ctlBin, ["--socket", sock, ...argv]);
  return stdout;
}

async function cpuSeconds(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime + stime, in USER_HZ
}

async function main() {
  if (process.getuid() !== 0) {
    console.log("page_test: skipped (needs root)");
    return 0;
  }
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "tricolor-page-"));
  const pins = `/sys/fs/bpf/tricolor-page-${process.pid}`;
  const sock = path.join(work, "sock");
  const procs = [];
  let browser;
  try {
    // 1. The lab, the daemon, its policies.
    shOk("ip", "netns", "del", NS);
    shOk("ip", "link", "del", HOST_IF);
    sh("ip", "netns", "add", NS);
    sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF);
    sh("ip", "link", "set", NS_IF, "netns", NS);
    sh("ip", "addr", "add", `${HOST}/24`, "dev", HOST_IF);
    sh("ip", "link", "set", HOST_IF, "up");
    sh("ip", "-n", NS, "addr", "add", `${PEER}/24`, "dev", NS_IF);
    sh("ip", "-n", NS, "link", "set", NS_IF, "up");
    sh("ip", "-n", NS, "link", "set", "lo", "up");
    const log = fs.openSync(path.join(work, "tricolord.log"), "w");
    const daemon = spawn(daemonBin, ["--socket", sock, "--pin-dir", pins, "--config", path.join(work, "c.yaml"),
      "--state", path.join(work, "s.yaml"), "--metrics", "none", "--web", "0", "--flows", "65536",
      "--detach-on-exit"], { stdio: ["ignore", log, log] });
    procs.push(daemon);
    let status;
    for (let i = 0; i < 200 && !status; i++) {
      try { status = JSON.parse(await ctl(sock, "-j", "status")); } catch { await sleep(50); }
    }
    if (!status) throw new Error("tricolord did not answer");
    const base = `http://${status.web}`;
    check(/^127\.0\.0\.1:[1-9]\d*$/.test(status.web), `status says where the page is: ${status.web}`);
    const text = await ctl(sock, "status");
    check(text.includes(`page        http://${status.web}/`), "tricolorctl status prints the page's address");
    await ctl(sock, "attach", HOST_IF);
    const policies = bench ? await benchPolicies(sock) : ["web", "bulk", "idle"];
    if (!bench) {
      await ctl(sock, "policy", "add", "web", "--algo", "srtcm", "--cir", "8mbit", "--cbs", "16k", "--ebs", "0",
        "--match", "proto", "udp", "--match", "dport", "9", "--owner", "pod shop/web-0",
        "--quota", "100g/month");
      await ctl(sock, "policy", "add", "bulk", "--algo", "trtcm", "--cir", "2mbit", "--cbs", "16k", "--pir", "4mbit",
        "--pbs", "16k", "--match", "proto", "udp", "--match", "dport", "10", "--per", "src");
      await ctl(sock, "policy", "add", "idle", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "16k", "--match", "proto", "udp", "--match", "dport", "11");
    }
    // 1000-byte payloads: 1028-byte IP packets.
    const seconds = bench ? 75 : 30;
    const send = (port, bps, size = 1000) => {
      const pps = Math.round(bps / (8 * (size + 28)));
      procs.push(spawn("ip", ["netns", "exec", NS, udpTool, "send", HOST, String(port), String(pps * seconds),
        String(size), String(pps)], { stdio: "ignore" }));
    };
    if (bench) {
      benchTraffic(procs, seconds);
    } else {
      send(9, 16e6);
      send(10, 6e6, 500);
    }

    // 2. tricolorctl's counters, read every 100 ms, stamped with when they were answered.
    const reads = [];
    let reading = !bench;
    const reader = (async () => {
      while (reading) {
        const before = Date.now();
        const s = JSON.parse(await ctl(sock, "-j", "stats"));
        const t = (before + Date.now()) / 2;
        const bytes = {};
        for (const p of s.policies) bytes[p.name] = { green: p.green.bytes, yellow: p.yellow.bytes, red: p.red.bytes };
        reads.push({ t, bytes });
        await sleep(100);
      }
    })();

    // 3. The page.
    browser = await puppeteer.launch({ executablePath: chromium(), headless: true,
      args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    const requests = [], errors = [];
    page.on("request", (r) => requests.push(`${r.method()} ${r.url()}`));
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    await sleep(bench ? 20000 : 0); // the bench: a full table and history first
    await page.goto(base + "/", { waitUntil: "load" });
    await page.waitForFunction(() => window.tricolorFirstRenderMs !== undefined, { timeout: 20000 });
    const renderMs = await page.evaluate(() => window.tricolorFirstRenderMs);
    if (bench) {
      await benchReport(page, daemon.pid, renderMs, policies.length);
      return 0;
    }
    await page.waitForFunction(() => Number(document.body.dataset.seq) >= 14, { timeout: 30000 });
    const shown = await page.$$eval("#policies tr.policy", (trs) => trs.map((tr) => ({
      name: tr.dataset.policy, from: Number(tr.dataset.from), to: Number(tr.dataset.to),
      cells: Object.fromEntries([...tr.querySelectorAll("td.rate")].map((td) =>
        [td.dataset.color, { bps: Number(td.dataset.bps), text: td.textContent }])),
    })));
    await sleep(400); // a read after the window's end
    reading = false;
    await reader;

    // --quota: the row of a policy with one shows its use of the period and the next reset.
    const quota = await page.$eval('#policies tr.policy[data-policy="web"]', (tr) =>
      tr.querySelector(".quota")?.textContent ?? "");
    const stq = JSON.parse(await ctl(sock, "-j", "stats", "web")).policies[0].quota;
    check(/^quota \S+ \S+ of 100\.0 GiB used, .* left, resets \d{4}-\d\d-01T00:00:00Z$/.test(quota) &&
      stq && stq.used > 0, `the page shows web's quota: "${quota}" (stats: ${JSON.stringify(stq)})`);
    check(JSON.stringify(shown.map((r) => r.name).sort()) === JSON.stringify([...policies].sort()),
      `every policy has its row: ${shown.map((r) => r.name).join(", ")}`);
    for (const row of shown) {
      const expect = {};
      for (const c of ["green", "yellow", "red"]) {
        const a = bytesAt(reads, row.name, c, row.from), b = bytesAt(reads, row.name, c, row.to);
        expect[c] = a === undefined || b === undefined ? undefined : ((b - a) * 8) / ((row.to - row.from) / 1000);
      }
      const total = (expect.green ?? 0) + (expect.yellow ?? 0) + (expect.red ?? 0);
      for (const c of ["green", "yellow", "red"]) {
        const got = row.cells[c]?.bps, want = expect[c];
        // 5% of the colour's rate; a colour near 0 within 5% of the policy's total (and an
        // idle policy within 1 kbit/s).
        const tol = Math.max(0.05 * (want ?? 0), want < 0.05 * total ? 0.05 * total : 0, 1000);
        check(want !== undefined && Math.abs(got - want) <= tol,
          `${row.name} ${c}: the page shows ${got} bit/s over ${row.to - row.from} ms, tricolorctl's counters ` +
          `${want?.toFixed(0)} bit/s over the same milliseconds`);
        const text = parseRate(row.cells[c]?.text ?? "");
        check(got === 0 ? text === 0 || row.cells[c].text === "0 bit/s" : Math.abs(text - got) <= 0.01 * got,
          `${row.name} ${c}: its text "${row.cells[c]?.text}" says ${got} bit/s`);
      }
    }
    const web = shown.find((r) => r.name === "web");
    check(web && Math.abs(web.cells.green.bps - 8e6) < 0.05 * 8e6, `web's green is its CIR: ${web?.cells.green.bps}`);
    const charts = await page.$$eval(".policy-chart", (els) => els.map((e) => e.dataset.policy));
    check(charts.includes("web") && charts.includes("bulk") && !charts.includes("idle"),
      `the busy policies are charted, the idle one is not: ${charts}`);
    check(await page.$eval("#total-chart", (e) => e.querySelector("canvas") !== null), "the total is charted");
    // A click pins a chart; a second click unpins it.
    await page.click('#policies tr.policy[data-policy="idle"]');
    check(await page.$('.policy-chart[data-policy="idle"]') !== null, "a click on idle's row charts it");
    await page.click('#policies tr.policy[data-policy="idle"]');
    check(await page.$('.policy-chart[data-policy="idle"]') === null, "a second click takes it away");
    const flows = await page.$$eval("#flows tbody tr", (trs) => trs.map((t) => t.textContent));
    check(flows.some((f) => f.includes("bulk") && f.includes(`src ${PEER}`)), `the busiest flows: ${flows}`);
    const atts = await page.$$eval("#attachments tbody tr", (trs) => trs.map((t) => t.textContent));
    check(atts.some((a) => a.includes(HOST_IF) && a.includes("xdp")), `the attachments: ${atts}`);
    const owners = await page.$$eval("#cgroups tbody tr", (trs) => trs.map((t) => t.textContent));
    check(owners.some((o) => o.includes("pod shop/web-0")), `containers by name: ${owners}`);
    check(errors.length === 0, `no errors in the page: ${errors}`);
    if (screenshot) {
      await page.screenshot({ path: screenshot, fullPage: true });
      console.log(`page_test: screenshot in ${screenshot}`);
    }

    // 4. Read-only.
    const notGet = requests.filter((r) => !r.startsWith("GET "));
    check(notGet.length === 0 && requests.length > 0, `the page made ${requests.length} requests, none but GET: ${notGet}`);
    for (const m of ["POST", "PUT", "DELETE", "PATCH", "HEAD"]) {
      const r = await fetch(base + "/api/v1/view", { method: m });
      check(r.status === 405, `${m} /api/v1/view: ${r.status}`);
    }
    for (const [u, want] of [["/api/v1/samples?after=x", /after: expected a sample number/],
                             ["/api/v1/view?top=99999", /top: expected a number of flows/],
                             ["/nothing", /no such page: \/nothing/]]) {
      const r = await fetch(base + u);
      const body = await r.text();
      check(r.status >= 400 && want.test(body), `GET ${u}: ${r.status} ${body.trim()}`);
    }
    console.log(`page_test: first full render ${renderMs.toFixed(0)} ms after navigation`);
  } finally {
    if (browser) await browser.close();
    for (const p of procs.reverse()) p.kill("SIGTERM");
    await sleep(300);
    shOk("ip", "netns", "del", NS);
    shOk("ip", "link", "del", HOST_IF);
    fs.rmSync(pins, { recursive: true, force: true });
    if (results.every(Boolean)) fs.rmSync(work, { recursive: true, force: true });
    else console.log(`page_test: logs kept in ${work}`);
  }
  console.log(`page_test: ${results.filter(Boolean).length} passed, ${results.filter((r) => !r).length} failed`);
  return results.every(Boolean) ? 0 : 1;
}

// ---- --bench: 500 policies, 1000 flows ----

async function benchPolicies(sock) {
  // One apply of 500 policies: 499 of one destination port each (20 s of traffic to 50 of
  // them), and one per-source policy whose 1000 flows are UDP from 1000 source ports.
  const lines = ["policies:"];
  for (let i = 0; i < 499; i++)
    lines.push(`  - {name: p${String(i).padStart(3, "0")}, algo: srtcm, cir: ${1 + (i % 8)}mbit, cbs: 16k, match: {proto: udp, dport: ${2000 + i}}}`);
  lines.push("  - {name: flows, algo: trtcm, cir: 1mbit, cbs: 16k, pir: 2mbit, pbs: 16k, per: 5tuple, match: {proto: udp, dport: 9}}");
  const file = path.join(os.tmpdir(), `tricolor-page-bench-${process.pid}.yaml`);
  fs.writeFileSync(file, lines.join("\n") + "\n");
  await ctl(sock, "apply", "-f", file);
  fs.rmSync(file);
  return [...Array(499).keys()].map((i) => `p${String(i).padStart(3, "0")}`).concat(["flows"]);
}

function benchTraffic(procs, seconds) {
  // 50 policies with traffic (2 Mbit/s each), and 1000 flows (source ports 30000..30999).
  for (let i = 0; i < 50; i++) {
    const pps = 250;
    procs.push(spawn("ip", ["netns", "exec", NS, udpTool, "send", HOST, String(2000 + i * 10), String(pps * seconds),
      "1000", String(pps)], { stdio: "ignore" }));
  }
  procs.push(spawn("ip", ["netns", "exec", NS, udpTool, "flows", HOST, "9", "1000", String(2000 * seconds), "2000"],
    { stdio: "ignore" }));
}

async function benchReport(page, pid, renderMs, n) {
  const rows = await page.$$eval("#policies tr.policy", (t) => t.length);
  // The daemon's CPU with one viewer: 30 s with the page open, against 30 s without (the
  // sampler, the flow passes and the traffic's share of the daemon run in both).
  const c1 = await cpuSeconds(pid), t1 = Date.now();
  await sleep(30000);
  const c2 = await cpuSeconds(pid), t2 = Date.now();
  await page.goto("about:blank");
  await sleep(30000);
  const c3 = await cpuSeconds(pid), t3 = Date.now();
  const viewer = (100 * (c2 - c1)) / ((t2 - t1) / 1000), none = (100 * (c3 - c2)) / ((t3 - t2) / 1000);
  console.log(`page_bench: ${n} policies (${rows} rows shown); first full render ${renderMs.toFixed(0)} ms ` +
    `after navigation; the daemon ${viewer.toFixed(2)}% of a core with the page open, ${none.toFixed(2)}% without`);
  console.log(`RESULT name=page_500_policies policies=${n} rows=${rows} render_ms=${renderMs.toFixed(0)} ` +
    `daemon_cpu_viewer_pct=${viewer.toFixed(2)} daemon_cpu_none_pct=${none.toFixed(2)} ` +
    `viewer_cpu_pct=${(viewer - none).toFixed(2)}`);
}

main().then((rc) => process.exit(rc), (e) => {
  console.error(`page_test: ${e.stack ?? e}`);
  process.exit(1);
});
