#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
"""soak.py: tricolord under everything at once for MINUTES (./tricolor.sh soak [MINUTES], 30 by
default; in the benchmarks, not the tests).

Load, all the while:
  - UDP at twice the CIR through XDP ingress (udp-in, 8 Mbit/s, from namespace tcsoak) and tc
    egress (udp-out, 8 Mbit/s, to it), and through a fleet policy (fleet-p, 4 Mbit/s, --fleet on
    a redis-server of the soak's own, exchanging every 50 ms);
  - TCP through --shape sockets (tcp, 20 Mbit/s, tc egress), a connection at a time;
  - policies added, changed and removed 10 times a second (churn-N, matching nothing sent);
  - SIGHUP every 30 s (the config, unchanged: a reload of everything);
  - kill -9 and a restart every 5 minutes;
  - veth pairs made and deleted under an interface pattern (soakv*, tc ingress), one every 2 s;
  - cgroups made and removed under a --match cgroup --per cgroup policy, one every 2 s.
Checked:
  - the bound, on every pair of the samples (stats each second, kept across restarts): green
    bytes between two samples at most CBS + CIR * (the time between them, read around the
    reads), for udp-in, udp-out and fleet-p; "over" counts the pairs that were not;
  - no counter ever goes back (a restart adopts them);
  - the daemon's resources, read in each 5-minute life at the same point (4.5 minutes in, the
    churn, veths and cgroups stopped and cleared): its heap (RssAnon, within 10%; the maps'
    mapped pages are printed beside it), open fds, threads, pinned objects and policies
    (exactly): the last life's against the second's, the first to adopt the data path as every
    later one does (a leak of one per cycle would show); the flow entries printed.
Prints RESULT lines (docs/benchmarks.md, "Soak"); exits non-zero when a check fails.
Needs root, a build (BUILD_DIR), redis-server. Test addresses from 198.19.100.0/24.
"""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("BUILD_DIR", os.path.join(REPO, "build")))
DAEMON = os.path.join(BUILD, "userspace", "daemon", "tricolord")
CTL = os.path.join(BUILD, "tools", "tricolorctl")
UDP = os.path.join(BUILD, "tests", "udp_tool")
NS, HOST_IF, NS_IF = "tcsoak", "tcsoakh", "tcsoakn"
HOST, PEER = "198.19.100.1", "198.19.100.2"
LIFE = float(os.environ.get("SOAK_LIFE", 300))  # seconds between kill -9s
HUP_EVERY = 30
BOUNDED = {"udp-in": (8e6, 16384), "udp-out": (8e6, 16384), "fleet-p": (4e6, 16384)}


def sh(*argv, check=True, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stdout}{r.stderr}")
    return r


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cgroup2():
    for line in open("/proc/mounts"):
        f = line.split()
        if f[2] == "cgroup2":
            return f[1]
    os.makedirs("/sys/fs/cgroup/unified", exist_ok=True)
    sh("mount", "-t", "cgroup2", "none", "/sys/fs/cgroup/unified")
    return "/sys/fs/cgroup/unified"


class Soak:
    def __init__(self, minutes):
        self.seconds = minutes * 60
        self.work = tempfile.mkdtemp(prefix="tricolor-soak-")
        self.sock = os.path.join(self.work, "sock")
        self.pins = f"/sys/fs/bpf/tricolor-soak-{os.getpid()}"
        self.config = os.path.join(self.work, "c.yaml")
        self.cg_root = os.path.join(cgroup2(), "tricolor-soak.slice")
        self.procs, self.daemon = [], None
        self.stop = threading.Event()
        # The same point of each life: churn and the veths and cgroups stopped and cleared
        # (each thread says so), so that what the daemon holds is comparable.
        self.pause = threading.Event()
        self.churn_clear = threading.Event()
        self.env_clear = threading.Event()
        self.samples = []  # (t_before, t_after, {policy: green bytes}, {policy: total packets})
        self.lives = []  # per life: resources read 4.5 minutes in
        self.failures = []
        self.counts = {"restarts": 0, "hups": 0, "churn": 0, "veths": 0, "cgroups": 0}

    # ---- the lab, the daemon ----
    def lab(self):
        self.cleanup_lab()
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        sh("ip", "link", "set", NS_IF, "netns", NS)
        sh("ip", "addr", "add", f"{HOST}/24", "dev", HOST_IF)
        sh("ip", "link", "set", HOST_IF, "up")
        sh("ip", "-n", NS, "addr", "add", f"{PEER}/24", "dev", NS_IF)
        sh("ip", "-n", NS, "link", "set", NS_IF, "up")
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        os.makedirs(self.cg_root, exist_ok=True)
        rel = os.path.relpath(self.cg_root, cgroup2())
        self.redis_port = free_port()
        self.procs.append(subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with open(self.config, "w") as f:
            f.write(f"""policies:
  - {{name: udp-in, algo: srtcm, cir: 8mbit, cbs: 16k, ebs: 0, match: {{proto: udp, dport: 9}}}}
  - {{name: udp-out, algo: srtcm, cir: 8mbit, cbs: 16k, ebs: 0, match: {{proto: udp, dport: 10}}}}
  - {{name: fleet-p, algo: srtcm, cir: 4mbit, cbs: 16k, ebs: 0, fleet: true, match: {{proto: udp, dport: 11}}}}
  - {{name: tcp, algo: srtcm, cir: 20mbit, cbs: 64k, ebs: 0, shape: sockets, match: {{proto: tcp, dport: 5201}}}}
  - {{name: cgroups, algo: srtcm, cir: 10mbit, cbs: 64k, ebs: 0, per: cgroup, match: {{cgroup: '{rel}/*'}}}}
attachments:
  - {{iface: {HOST_IF}, hook: xdp}}
  - {{iface: {HOST_IF}, hook: tc, direction: egress}}
  - {{match_ifname: 'soakv*', hook: tc, direction: ingress}}
""")

    def start_daemon(self):
        log = open(os.path.join(self.work, "tricolord.log"), "a")
        self.daemon = subprocess.Popen(
            [DAEMON, "--socket", self.sock, "--pin-dir", self.pins, "--config", self.config,
             "--state", os.path.join(self.work, "s.yaml"), "--metrics", "none", "--flows", "65536",
             "--fleet", f"redis://127.0.0.1:{self.redis_port}", "--fleet-node", "soak"],
            stdout=log, stderr=subprocess.STDOUT)
        for _ in range(400):
            if sh(CTL, "--socket", self.sock, "status", check=False).returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError("tricolord did not answer")

    def ctl(self, *args, check=False):
        return sh(CTL, "--socket", self.sock, *args, check=check)

    def cleanup_lab(self):
        sh("ip", "netns", "del", NS, check=False)
        sh("ip", "link", "del", HOST_IF, check=False)
        for l in os.listdir("/sys/class/net"):
            if l.startswith("soakv"):
                sh("ip", "link", "del", l, check=False)

    # ---- the load ----
    def traffic(self):
        """Senders, each for the whole soak (restarted if they end early)."""
        pps16 = int(16e6 / (8 * 1028))
        specs = [
            ["ip", "netns", "exec", NS, UDP, "send", HOST, "9", str(pps16 * self.seconds), "1000", str(pps16)],
            [UDP, "send", PEER, "10", str(pps16 * self.seconds), "1000", str(pps16)],
            ["ip", "netns", "exec", NS, UDP, "send", HOST, "11", str(pps16 // 2 * self.seconds), "1000", str(pps16 // 2)],
        ]
        for s in specs:
            self.procs.append(subprocess.Popen(s, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def tcp(self):
        while not self.stop.is_set():
            recv = subprocess.Popen(["ip", "netns", "exec", NS, UDP, "tcp-recv", PEER, "5201", "12"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            time.sleep(0.3)
            sh(UDP, "tcp-send", PEER, "5201", "10", check=False)
            recv.wait()

    def held(self, cleared, clear):
        """While the soak is paused: @clear once, say so (@cleared), wait; False otherwise."""
        if not self.pause.is_set():
            return False
        if not cleared.is_set():
            clear()
            cleared.set()
        self.stop.wait(0.1)
        return True

    def clear_churn(self):
        for i in range(20):
            self.ctl("policy", "del", f"churn-{i}")

    def clear_env(self):
        for i in range(4):
            sh("ip", "link", "del", f"soakv{i}", check=False)
            try:
                os.rmdir(os.path.join(self.cg_root, f"c{i}"))
            except OSError:
                pass

    def churn(self):
        n = 0
        while not self.stop.is_set():
            if self.held(self.churn_clear, self.clear_churn):
                continue
            began = time.time()
            name = f"churn-{n % 20}"
            op = n % 3
            if op == 0:
                self.ctl("policy", "add", name, "--algo", "srtcm", "--cir", f"{1 + n % 7}mbit", "--cbs", "8k",
                         "--match", "proto", "udp", "--match", "dport", str(20000 + n % 20))
            elif op == 1:
                self.ctl("policy", "set", name, "--cir", f"{2 + n % 5}mbit")
            else:
                self.ctl("policy", "del", name)
            n += 1
            self.counts["churn"] += 1
            time.sleep(max(0, 0.1 - (time.time() - began)))  # 10 a second

    def veths_and_cgroups(self):
        k = 0
        while not self.stop.is_set():
            if self.held(self.env_clear, self.clear_env):
                continue
            name = f"soakv{k % 4}"
            if os.path.exists(f"/sys/class/net/{name}"):
                sh("ip", "link", "del", name, check=False)
            else:
                sh("ip", "link", "add", name, "type", "veth", "peer", "name", f"soakp{k % 4}", check=False)
                sh("ip", "link", "set", name, "up", check=False)
            self.counts["veths"] += 1
            cg = os.path.join(self.cg_root, f"c{k % 4}")
            try:
                if os.path.isdir(cg):
                    os.rmdir(cg)
                else:
                    os.mkdir(cg)
                self.counts["cgroups"] += 1
            except OSError:
                pass
            k += 1
            self.stop.wait(2)

    # ---- what is checked ----
    def sample(self):
        t0 = time.time()
        r = self.ctl("-j", "stats")
        t1 = time.time()
        if r.returncode != 0:
            return  # restarting
        s = json.loads(r.stdout)
        green, total = {}, {}
        for p in s["policies"]:
            green[p["name"]] = p["green"]["bytes"]
            total[p["name"]] = sum(p[c]["packets"] for c in ("green", "yellow", "red"))
        self.samples.append((t0, t1, green, total))

    def resources(self):
        pid = self.daemon.pid
        status = open(f"/proc/{pid}/status").read()
        kib = {l.split(":")[0]: int(l.split()[1]) for l in status.splitlines() if l.startswith("Rss")}
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        threads = len(os.listdir(f"/proc/{pid}/task"))
        pinned = sum(len(fs) + len(ds) for _, ds, fs in os.walk(self.pins))
        st = json.loads(self.ctl("-j", "status").stdout)
        # The heap apart: the mapped maps' pages (RssFile, RssShmem) come and go with the walks.
        return {"rss_kib": sum(kib.values()), "heap_kib": kib.get("RssAnon", 0), "fds": fds, "threads": threads, "pinned": pinned,
                "flows": st["flows"]["used"], "policies": st["policies"]["used"]}

    def check_bound(self):
        over, pairs, back = 0, 0, 0
        for name, (cir, cbs) in BOUNDED.items():
            seq = [(a, b, g[name]) for a, b, g, _ in self.samples if name in g]
            for i in range(len(seq)):
                for j in range(i + 1, len(seq)):
                    ti, _, gi = seq[i]
                    _, tj, gj = seq[j]
                    pairs += 1
                    if gj - gi > cbs + cir / 8 * (tj - ti):
                        over += 1
                if i and seq[i][2] < seq[i - 1][2]:
                    back += 1
        return over, pairs, back

    def run(self):
        self.lab()
        self.start_daemon()
        self.traffic()
        threads = [threading.Thread(target=f, daemon=True) for f in (self.tcp, self.churn, self.veths_and_cgroups)]
        for t in threads:
            t.start()
        start = time.time()
        born, last_hup, read_this_life = start, start, False
        while time.time() - start < self.seconds:
            now = time.time()
            self.sample()
            if now - last_hup >= HUP_EVERY:
                self.daemon.send_signal(signal.SIGHUP)
                last_hup = now
                self.counts["hups"] += 1
            if not read_this_life and now - born >= 0.9 * LIFE:
                # The same point of each life, churn and veths and cgroups cleared: what it holds.
                self.pause.set()
                self.churn_clear.wait(15)
                self.env_clear.wait(15)
                time.sleep(2)  # patterns and cgroups are rescanned every 250 ms
                self.lives.append(self.resources())
                self.churn_clear.clear()
                self.env_clear.clear()
                self.pause.clear()
                read_this_life = True
            if now - born >= LIFE:
                self.daemon.kill()
                self.daemon.wait()
                self.start_daemon()
                self.counts["restarts"] += 1
                born, read_this_life = time.time(), False
            time.sleep(max(0, 1 - (time.time() - now)))
        self.stop.set()
        for t in threads:
            t.join(timeout=20)

    def report(self):
        over, pairs, back = self.check_bound()
        print(f"soak: {self.seconds / 60:.0f} min, {len(self.samples)} samples, {self.counts}")
        for i, l in enumerate(self.lives):
            print(f"soak: life {i + 1}: {l}")
        ok = over == 0 and back == 0 and len(self.samples) > 0.9 * self.seconds
        print(f"RESULT name=soak minutes={self.seconds / 60:.0f} samples={len(self.samples)} "
              f"pairs={pairs} over={over} counters_back={back} restarts={self.counts['restarts']} "
              f"hups={self.counts['hups']} churn={self.counts['churn']} veths={self.counts['veths']} "
              f"cgroups={self.counts['cgroups']}")
        if len(self.lives) >= 3:
            # Against the second life, the first that adopted the data path as every later one
            # does (the first started on nothing: its heap holds less).
            first, last = self.lives[1], self.lives[-1]
            print("RESULT name=soak_resources " + " ".join(
                f"{k}_first={first[k]} {k}_last={last[k]}" for k in first))
            # fds, threads, pinned objects and policies: exact; the heap within 10%.
            for k in ("fds", "threads", "pinned", "policies"):
                if last[k] != first[k]:
                    self.failures.append(f"{k}: {first[k]} in the first life, {last[k]} in the last")
            if last["heap_kib"] > 1.1 * first["heap_kib"]:
                self.failures.append(f"heap {first['heap_kib']} KiB -> {last['heap_kib']} KiB")
        if over:
            self.failures.append(f"{over} of {pairs} pairs of samples over CBS + CIR*T")
        if back:
            self.failures.append(f"{back} counters went back")
        for f in self.failures:
            print("FAIL " + f)
        return 0 if ok and not self.failures else 1

    def close(self):
        self.stop.set()
        if self.daemon:
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait(timeout=10)
        for p in self.procs:
            p.kill()
        self.clear_env()
        self.cleanup_lab()
        try:
            os.rmdir(self.cg_root)
        except OSError:
            pass
        # The soak's pin directory: its tcx, sock_ops and cgroup links go with their pins (XDP
        # went with the veth).
        shutil.rmtree(self.pins, ignore_errors=True)


def main():
    if os.geteuid() != 0:
        print("soak: needs root")
        return 1
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 30
    s = Soak(minutes)
    try:
        s.run()
        return s.report()
    finally:
        s.close()
        print(f"soak: logs in {s.work}")


if __name__ == "__main__":
    sys.exit(main())
