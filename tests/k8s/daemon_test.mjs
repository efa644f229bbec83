// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// daemon_test.mjs: the DaemonSet of deploy/kubernetes/tricolor.yaml as a node would run it,
// without a cluster: the built tricolord and tricolorctl ($BUILD_DIR, default build/) run with
// the manifest's own command lines, with the node's paths moved to a scratch directory (and the
// pin dir to one of its own under /sys/fs/bpf), in a network namespace of the test, and with
// the container's capabilities alone (setpriv: the bounding set is exactly the manifest's
// capabilities.add). It runs, in order:
//   - the prepare init step's script (bpffs check, the ConfigMap's file copied only when it
//     changed);
//   - a first pod: tricolord started from the ConfigMap's config, the startup, readiness and
//     liveness probes' commands, then what the CNI plugin asks for (a tc attachment on a veth
//     and a policy), and SIGTERM;
//   - a second pod over the same node paths: it adopts the data path and applies the state
//     (the attachment still attached, the policy kept), not the unchanged ConfigMap;
//   - the uninstall's last pod (README.md: --detach-on-exit added): SIGTERM takes everything
//     off and removes the pins.
// Needs root and a build; says "skipped" and exits 0 without them. Prints each step, then
// 'N passed, N failed'; exits 1 when any failed.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const build = path.resolve(repo, process.env.BUILD_DIR ?? "build");
const bin = {
  tricolord: path.join(build, "userspace/daemon/tricolord"),
  tricolorctl: path.join(build, "tools/tricolorctl"),
};

function skip(why) {
  console.log(`daemon_test: skipped (${why})`);
  process.exit(0);
}
if (process.getuid() !== 0) skip("needs root: it loads the BPF data path");
for (const b of Object.values(bin)) if (!existsSync(b)) skip(`no ${b}: build first (./tricolor.sh build)`);
for (const tool of ["setpriv", "nsenter", "ip"])
  if (spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0) skip(`no ${tool}`);

// ---- the manifest ----

const manifest = path.join(repo, "deploy/kubernetes/tricolor.yaml");
const docs = parseAllDocuments(readFileSync(manifest, "utf8")).map((d) => d.toJS());
const ds = docs.find((d) => d?.kind === "DaemonSet");
const cm = docs.find((d) => d?.kind === "ConfigMap");
const pod = ds.spec.template.spec;
const daemon = pod.containers.find((c) => c.name === "tricolord");
const prepare = pod.initContainers.find((c) => c.name === "prepare");
// TRICOLOR_TEST_CAPS=bpf,net_admin,... tries another set (to see what a capability is for).
const caps = (process.env.TRICOLOR_TEST_CAPS?.split(",") ?? daemon.securityContext.capabilities.add)
  .map((c) => c.replace(/^CAP_/, "").toLowerCase());

// ---- the node, moved ----

const id = `k8stest${process.pid}`;
const work = mkdtempSync(path.join(os.tmpdir(), "tricolor-k8s-"));
const pinDir = `/sys/fs/bpf/tricolor-${id}`;
const netns = id;
// The hostPath of each mount of the pod, by its path in the container.
const moved = new Map([
  ["/sys/fs/bpf/tricolor", pinDir],
  ["/var/lib/tricolor", path.join(work, "var-lib-tricolor")],
  ["/run/tricolor", path.join(work, "run-tricolor")],
  ["/etc/tricolor-configmap", path.join(work, "configmap")],
]);
for (const [from, to] of moved) if (!from.startsWith("/sys/")) mkdirSync(to, { recursive: true });
for (const [name, text] of Object.entries(cm.data)) writeFileSync(path.join(moved.get("/etc/tricolor-configmap"), name), text);
const move = (s) => {
  for (const [from, to] of moved) s = s.split(from).join(to);
  return s;
};
// $(VAR) of the container's env; the node's address is the loopback of the test's namespace,
// and the metrics port any free one.
const env = Object.fromEntries(daemon.env.map((e) => [e.name, e.value ?? (e.valueFrom?.fieldRef?.fieldPath === "status.hostIP" ? "127.0.0.1" : "")]));
const expand = (s) => s.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, v) => env[v] ?? m);
const ctlOf = (cmd) => {
  if (cmd[0] !== "tricolorctl") throw new Error(`a probe runs ${cmd[0]}, not tricolorctl`);
  return [bin.tricolorctl, ...cmd.slice(1).map((a) => move(expand(a)))];
};
const daemonArgs = daemon.args.map((a) => move(expand(a))).map((a) => (a.startsWith("--metrics=") ? a.replace(/:\d+$/, ":0") : a));
const socket = move(env.TRICOLOR_SOCKET);

let passed = 0,
  failed = 0;
const ok = (what) => (console.log(`ok   ${what}`), passed++);
const fail = (what) => (console.log(`FAIL ${what}`), failed++);
const check = (cond, what, detail = "") => (cond ? ok(what) : fail(detail ? `${what}: ${detail}` : what));

// The container's capabilities, and nothing else, for whatever runs in the pod.
const inPod = (argv) => ["setpriv", `--bounding-set=-all,${caps.map((c) => `+${c}`).join(",")}`, "--inh-caps=-all", "--", ...argv];
const run = (argv, opts = {}) => spawnSync(argv[0], argv.slice(1), { encoding: "utf8", timeout: 30000, ...opts });
const ctl = (...a) => run(inPod([bin.tricolorctl, "--socket", socket, ...a]));
const ctlJson = (...a) => {
  const r = ctl("-j", ...a);
  try {
    return JSON.parse(r.stdout);
  } catch {
    return { error: `${r.stdout}${r.stderr}` };
  }
};

function cleanup() {
  spawnSync("ip", ["netns", "del", netns]);
  rmSync(pinDir, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
}
process.on("exit", cleanup);
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(1));

// A node's network: a veth pair standing in for a pod's.
execFileSync("ip", ["netns", "add", netns]);
execFileSync("ip", ["-n", netns, "link", "set", "lo", "up"]);
execFileSync("ip", ["-n", netns, "link", "add", "k8s0", "type", "veth", "peer", "name", "k8s1"]);
execFileSync("ip", ["-n", netns, "link", "set", "k8s0", "up"]);
execFileSync("ip", ["-n", netns, "link", "set", "k8s1", "up"]);

// ---- the steps ----

function runPrepare(expectCopy) {
  // The script as the init container runs it, on the moved paths; /sys/fs/bpf is the host's.
  const script = move(prepare.command.slice(2).join("\n"));
  // As root with no capability: the init container drops them all.
  const r = run(["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--", ...prepare.command.slice(0, 2), script]);
  const copied = /config changed/.test(r.stdout);
  check(r.status === 0 && copied === expectCopy, `prepare step (${expectCopy ? "copies the new config" : "config unchanged: not copied"})`, `status ${r.status}: ${r.stdout}${r.stderr}`);
}

let log = "";
async function startDaemon(extra = []) {
  const argv = ["nsenter", `--net=/run/netns/${netns}`, ...inPod([bin.tricolord, ...daemonArgs, ...extra])];
  const child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
  log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  child.exited = new Promise((res) => child.on("exit", (code) => res(code)));
  // The startup probe: period and threshold as the manifest says.
  const p = daemon.startupProbe;
  const probe = inPod(ctlOf(p.exec.command));
  for (let i = 0; i < p.failureThreshold; i++) {
    if (child.exitCode !== null) break;
    if (run(probe).status === 0) return child;
    await new Promise((r) => setTimeout(r, p.periodSeconds * 1000));
  }
  fail(`tricolord did not become ready (startup probe): ${log}`);
  child.kill("SIGKILL");
  process.exit(1);
}

async function stop(child) {
  child.kill("SIGTERM");
  return child.exited;
}

runPrepare(true);
runPrepare(false);

// The first pod.
let d = await startDaemon();
ok(`tricolord starts with the manifest's arguments and capabilities (${caps.join(", ")})`);
for (const probe of ["readinessProbe", "livenessProbe"]) {
  const r = run(inPod(ctlOf(daemon[probe].exec.command)));
  check(r.status === 0, `${probe} command exits 0`, r.stderr);
}
let st = ctlJson("status");
check(st.started_from === "config", "the first start applies the ConfigMap's config", JSON.stringify(st));
// What the CNI plugin asks for a pod (an address policy, a tc attachment on its host side).
let r = ctl("attach", "k8s0", "--hook", "tc", "--direction", "egress");
check(r.status === 0, "attach k8s0 tc egress", r.stderr);
st = ctlJson("status");
check((st.attachments ?? []).find((a) => a.iface === "k8s0")?.attached === true, "status shows it attached", JSON.stringify(st.attachments));
r = ctl("policy", "add", "cni-test-out", "--algo", "srtcm", "--cir", "20mbit", "--cbs", "64k", "--ebs", "64k", "--match", "src", "10.1.0.2/32");
check(r.status === 0, "policy add", r.stderr);
check((await stop(d)) === 0, "SIGTERM: tricolord exits 0", log);
const pins = () => (existsSync(pinDir) ? readdirSync(pinDir, { recursive: true }) : []);
check(pins().some((f) => /tcm_/.test(f)), "the pinned maps outlive the pod", pins().join(", "));

// The second pod: the same node paths, the ConfigMap unchanged.
runPrepare(false);
d = await startDaemon();
st = ctlJson("status");
const att = (st.attachments ?? []).find((a) => a.iface === "k8s0");
check(st.started_from === "state", "a restarted pod applies the state, not the unchanged config", JSON.stringify(st));
check(att?.attached === true, "the attachment is adopted, attached", JSON.stringify(st.attachments));
const policies = ctlJson("policy", "list");
check(JSON.stringify(policies).includes("cni-test-out"), "the CNI plugin's policy is kept", JSON.stringify(policies));
check((await stop(d)) === 0, "SIGTERM: tricolord exits 0", log);

// The uninstall's last pod.
d = await startDaemon(["--detach-on-exit"]);
st = ctlJson("status");
check((st.attachments ?? []).find((a) => a.iface === "k8s0")?.attached === true, "the uninstall's pod has k8s0 attached", JSON.stringify(st.attachments));
check((await stop(d)) === 0, "with --detach-on-exit, SIGTERM exits 0", log);
check(/detached and unpinned/.test(log), "and says it detached and unpinned", log);
check(pins().length === 0, "and leaves no pins", pins().join(", "));
const progs = run(["nsenter", `--net=/run/netns/${netns}`, bin.tricolorctl, "--socket", socket, "status"]);
check(progs.status !== 0, "and no daemon answers any more");

console.log(`${passed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;
