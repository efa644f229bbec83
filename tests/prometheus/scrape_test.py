#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
"""scrape_test.py: deploy/prometheus and deploy/grafana against a real Prometheus (Debian's)
scraping a real tricolord with traffic.

  1. promtool check rules, and promtool test rules on tricolor-rules.test.yml;
  2. a veth lab (198.19.95.0/24), tricolord on it (XDP), one policy at 8 Mbit/s offered 16 by
     UDP for 75 s, an owner set; Prometheus on loopback scrapes it every second with the rules
     loaded;
  3. each recording rule returns its series with the values the traffic makes (rates to 10%,
     the red share 0.5 +- 0.1), each alert's expression returns what the run should make of it
     (the red share's alert is pending, the others' conditions hold for no series while the
     series they read are there), and every query of every panel of the Grafana dashboard
     returns data.
Needs root, a build (BUILD_DIR, default build/) and prometheus. Prints "N passed, N failed";
exits non-zero on any failure. The fleet's rules read metrics only a --fleet daemon has: their
expressions are checked by promtool test rules, not here.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("BUILD_DIR", os.path.join(REPO, "build")))
RULES = os.path.join(REPO, "deploy", "prometheus", "tricolor-rules.yml")
RULE_TESTS = os.path.join(REPO, "deploy", "prometheus", "tricolor-rules.test.yml")
DASHBOARD = os.path.join(REPO, "deploy", "grafana", "tricolor.json")
NS, HOST_IF, NS_IF = "tcprom", "tcpromh", "tcpromn"
RATE = 8000000  # bit/s; UDP offered at twice it

results = []


def check(ok, what):
    results.append(ok)
    print(("ok   " if ok else "FAIL ") + what, flush=True)


def sh(*argv, check_rc=True):
    r = subprocess.run(argv, capture_output=True, text=True)
    if check_rc and r.returncode != 0:
        raise SystemExit(f"scrape_test: {' '.join(argv)}: {r.stdout}{r.stderr}")
    return r


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def query(prom, expr):
    url = f"http://{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        j = json.load(r)
    if j.get("status") != "success":
        raise RuntimeError(f"{expr}: {j}")
    return j["data"]["result"]


def main():
    if os.geteuid() != 0:
        print("scrape_test: skipped (needs root)")
        return 0
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        raise SystemExit("scrape_test: prometheus is not installed (apt-get install prometheus)")

    # 1. promtool.
    r = sh(promtool, "check", "rules", RULES, check_rc=False)
    check(r.returncode == 0, f"promtool check rules: {r.stdout.strip()} {r.stderr.strip()}")
    r = sh(promtool, "test", "rules", RULE_TESTS, check_rc=False)
    check(r.returncode == 0, "promtool test rules" + ("" if r.returncode == 0 else ": " + r.stdout + r.stderr))

    work = tempfile.mkdtemp(prefix="tricolor-prom-")
    procs = []
    pins = f"/sys/fs/bpf/tricolor-prom-{os.getpid()}"
    try:
        # 2. The lab, the daemon, its policy.
        sh("ip", "netns", "del", NS, check_rc=False)
        sh("ip", "link", "del", HOST_IF, check_rc=False)
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        sh("ip", "link", "set", NS_IF, "netns", NS)
        sh("ip", "addr", "add", "198.19.95.1/24", "dev", HOST_IF)
        sh("ip", "link", "set", HOST_IF, "up")
        sh("ip", "-n", NS, "addr", "add", "198.19.95.2/24", "dev", NS_IF)
        sh("ip", "-n", NS, "link", "set", NS_IF, "up")
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        mport = free_port()
        sock = os.path.join(work, "sock")
        procs.append(subprocess.Popen(
            [os.path.join(BUILD, "userspace", "daemon", "tricolord"), "--socket", sock,
             "--pin-dir", pins, "--config", os.path.join(work, "c.yaml"), "--state",
             os.path.join(work, "s.yaml"), "--metrics", f"127.0.0.1:{mport}", "--flows", "65536",
             "--detach-on-exit"],
            stdout=open(os.path.join(work, "tricolord.log"), "w"), stderr=subprocess.STDOUT))
        ctl = os.path.join(BUILD, "tools", "tricolorctl")
        for _ in range(200):
            if sh(ctl, "--socket", sock, "status", check_rc=False).returncode == 0:
                break
            time.sleep(0.05)
        sh(ctl, "--socket", sock, "attach", HOST_IF)
        sh(ctl, "--socket", sock, "policy", "add", "web", "--algo", "srtcm", "--cir", str(RATE),
           "--cbs", "16k", "--ebs", "0", "--match", "proto", "udp", "--owner", "pod shop/web-0")
        # Prometheus, every second, the rules loaded.
        pport = free_port()
        prom = f"127.0.0.1:{pport}"
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{RULES}]
scrape_configs:
  - job_name: tricolor
    static_configs: [{{targets: ['127.0.0.1:{mport}']}}]
""")
        procs.append(subprocess.Popen(
            [prometheus, f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/tsdb",
             f"--web.listen-address={prom}"],
            stdout=open(os.path.join(work, "prometheus.log"), "w"), stderr=subprocess.STDOUT))
        # UDP at twice the rate for 75 s (1000-byte payloads: 1028-byte IP packets): the rules'
        # rates are over a minute, and a minute of samples makes them the traffic's.
        pps = 2 * RATE // (8 * 1028)
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", NS, os.path.join(BUILD, "tests", "udp_tool"), "send",
             "198.19.95.1", "9", str(pps * 75), "1000", str(pps)]))
        time.sleep(68)

        # 3. The recording rules, from what was scraped.
        up = query(prom, 'up{job="tricolor"}')
        check(len(up) == 1 and up[0]["value"][1] == "1", f"scraped: up = {up}")
        got = {s["metric"]["color"]: float(s["value"][1])
               for s in query(prom, 'tricolor:policy_bytes:rate1m{policy="web"}')}
        check(abs(got.get("green", 0) * 8 - RATE) < 0.1 * RATE,
              f"tricolor:policy_bytes:rate1m green {got.get('green', 0) * 8:.0f} bit/s ~ {RATE}")
        check(got.get("red", 0) > 0, f"tricolor:policy_bytes:rate1m red {got.get('red', 0) * 8:.0f} bit/s")
        pk = query(prom, 'tricolor:policy_packets:rate1m{policy="web",color="green"}')
        check(len(pk) == 1 and abs(float(pk[0]["value"][1]) - RATE / 8 / 1028) < 0.1 * RATE / 8 / 1028,
              f"tricolor:policy_packets:rate1m green {pk}")
        share = query(prom, 'tricolor:policy_red_share:ratio5m{policy="web"}')
        check(len(share) == 1 and abs(float(share[0]["value"][1]) - 0.5) < 0.1,
              f"tricolor:policy_red_share:ratio5m {share}")
        ft = query(prom, "tricolor:flow_table:ratio")
        check(len(ft) == 1 and 0 <= float(ft[0]["value"][1]) < 0.9, f"tricolor:flow_table:ratio {ft}")
        # The alerts: the red share's is pending (its 5 minutes have not passed); the others'
        # conditions hold for no series, while what they read is there.
        alerts = query(prom, 'ALERTS{alertname="TricolorRedShareHigh"}')
        check(any(a["metric"].get("alertstate") == "pending" and a["metric"].get("policy") == "web"
                  for a in alerts), f"TricolorRedShareHigh pending: {alerts}")
        for name, cond, base in (
                ("TricolorFlowTableNearlyFull", "tricolor:flow_table:ratio > 0.9", "tricolor:flow_table:ratio"),
                ("TricolorLockTimeouts", "increase(tricolor_lock_timeouts_total[5m]) > 0",
                 "increase(tricolor_lock_timeouts_total[5m])"),
                ("TricolorDown", 'up{job="tricolor"} == 0', 'up{job="tricolor"}')):
            check(query(prom, cond) == [] and len(query(prom, base)) == 1,
                  f"{name}: its condition holds for no series, and its series is there")
        # Every rule of the file was loaded and evaluated without error.
        with urllib.request.urlopen(f"http://{prom}/api/v1/rules", timeout=10) as r:
            groups = json.load(r)["data"]["groups"]
        bad = [ru["name"] for g in groups for ru in g["rules"] if ru.get("health") != "ok"]
        n = sum(len(g["rules"]) for g in groups)
        check(n == len(re.findall(r"^\s+- (record|alert):", open(RULES).read(), re.M)) and not bad,
              f"{n} rules loaded, unhealthy: {bad}")

        # The dashboard: every target of every panel returns data.
        dash = json.load(open(DASHBOARD))
        for p in dash["panels"]:
            for t in p.get("targets", []):
                expr = t["expr"].replace("$__rate_interval", "1m").replace("$instance", ".*")
                res = query(prom, expr)
                check(len(res) > 0, f"panel '{p['title']}' {t['refId']}: {len(res)} series")
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        sh("ip", "netns", "del", NS, check_rc=False)
        sh("ip", "link", "del", HOST_IF, check_rc=False)
        shutil.rmtree(pins, ignore_errors=True)
        if all(results):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"scrape_test: logs kept in {work}")
    print(f"scrape_test: {results.count(True)} passed, {results.count(False)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
