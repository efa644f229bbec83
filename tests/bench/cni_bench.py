#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
"""cni_bench.py: a pod's bandwidth limit by the reference `bandwidth` CNI plugin and by
`tricolor`, in the same run, on the same chain (containernetworking-plugins' bridge and
host-local, then the limiting plugin), invoked as a runtime invokes them (CNI env and stdin,
runtimeConfig.bandwidth: 20 Mbit/s and 64 KiB each way; DEL in reverse). For each: UDP offered
at 40 Mbit/s each way (what arrives), TCP each way (iperf3), and ping's RTT to the pod while
TCP runs each way (the queue a limit keeps). RESULT lines for docs/containers.md.

  tests/bench/cni_bench.py [BUILD_DIR]    (root; tricolord from BUILD_DIR, default ./build)
Addresses: 198.19.78.0/24 on a bridge of its own; nothing leaves the machine.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
REF = "/usr/lib/cni"
OURS = os.path.join(BUILD, "tools", "cni")
RATE, BURST_BITS = 20000000, 65536 * 8
SECONDS = int(os.environ.get("CNI_BENCH_SECONDS", "5"))
NETNS, BRIDGE = "tccnibench", "tccnibenchbr"
NETNS_PATH = "/var/run/netns/" + NETNS


def sh(*argv, stdin=None, check=True, env=None):
    r = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        raise SystemExit(f"cni_bench: {' '.join(argv)}: {r.stdout}{r.stderr}")
    return r


def conflist(limiter, ipam_dir, socket):
    last = {"type": limiter, "capabilities": {"bandwidth": True}}
    if limiter == "tricolor":
        last["socket"] = socket
    return {"cniVersion": "1.0.0", "name": "cnibench",
            "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
                         "ipam": {"type": "host-local", "dataDir": ipam_dir,
                                  "ranges": [[{"subnet": "198.19.78.0/24"}]]}},
                        last]}


def invoke(command, conf_list, i, prev, container):
    conf = dict(conf_list["plugins"][i])
    conf["cniVersion"], conf["name"] = conf_list["cniVersion"], conf_list["name"]
    if conf.get("capabilities", {}).get("bandwidth"):
        conf["runtimeConfig"] = {"bandwidth": {"ingressRate": RATE, "ingressBurst": BURST_BITS,
                                               "egressRate": RATE, "egressBurst": BURST_BITS}}
    if prev is not None:
        conf["prevResult"] = prev
    kind = conf["type"]
    path = os.path.join(OURS if kind == "tricolor" else REF, kind)
    env = dict(os.environ, CNI_COMMAND=command, CNI_CONTAINERID=container, CNI_NETNS=NETNS_PATH,
               CNI_IFNAME="eth0", CNI_PATH=f"{OURS}:{REF}")
    r = sh(path, stdin=json.dumps(conf), check=False, env=env)
    if r.returncode != 0:
        raise SystemExit(f"cni_bench: {command} {kind}: {r.stdout}{r.stderr}")
    return json.loads(r.stdout) if r.stdout.strip() else None


def iperf(pod_ip, reverse, udp):
    argv = ["iperf3", "-c", pod_ip, "-t", str(SECONDS), "-J"]
    if udp:
        argv += ["-u", "-b", str(2 * RATE), "-l", "1200"]
    if reverse:
        argv.append("-R")
    out = json.loads(sh(*argv).stdout)
    end = out["end"]
    got = end.get("sum_received") or end["sum"]
    return got["bits_per_second"] / 1e6


def ping_under_tcp(pod_ip, reverse):
    """ping's average RTT (ms) to the pod while TCP runs one way."""
    argv = ["iperf3", "-c", pod_ip, "-t", str(SECONDS + 2), "-J"] + (["-R"] if reverse else [])
    load = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    p = sh("ping", "-n", "-q", "-i", "0.2", "-c", str(5 * SECONDS), pod_ip, check=False)
    load.wait()
    m = re.search(r"= [\d.]+/([\d.]+)/", p.stdout)
    return float(m.group(1)) if m else float("nan")


def measure(limiter):
    ipam_dir = tempfile.mkdtemp(prefix="tricolor-cnibench-")
    daemon = None
    socket = ""
    sh("ip", "netns", "del", NETNS, check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    try:
        if limiter == "tricolor":
            work = tempfile.mkdtemp(prefix="tricolor-cnibench-d-")
            socket = os.path.join(work, "sock")
            pins = f"/sys/fs/bpf/tricolor-cnibench-{os.getpid()}"
            daemon = subprocess.Popen(
                [os.path.join(BUILD, "userspace", "daemon", "tricolord"), "--socket", socket,
                 "--pin-dir", pins, "--config", os.path.join(work, "c.yaml"), "--state",
                 os.path.join(work, "s.yaml"), "--metrics", "none", "--detach-on-exit"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(200):
                if os.path.exists(socket):
                    break
                time.sleep(0.05)
            time.sleep(0.3)
        sh("ip", "netns", "add", NETNS)
        cl = conflist(limiter, ipam_dir, socket)
        container = f"cnibench{os.getpid()}"
        prev = None
        for i in range(len(cl["plugins"])):
            prev = invoke("ADD", cl, i, prev, container)
        pod_ip = prev["ips"][0]["address"].split("/")[0]
        pidfile = os.path.join(ipam_dir, "iperf3.pid")
        sh("nsenter", f"--net={NETNS_PATH}", "iperf3", "-s", "-D", "-B", pod_ip, "--pidfile",
           pidfile)
        time.sleep(0.5)
        try:
            idle = sh("ping", "-n", "-q", "-i", "0.2", "-c", "10", pod_ip, check=False).stdout
            m = re.search(r"= [\d.]+/([\d.]+)/", idle)
            res = {"rtt_idle_ms": float(m.group(1)) if m else float("nan"),
                   "udp_in_mbit": iperf(pod_ip, False, True),
                   "udp_out_mbit": iperf(pod_ip, True, True),
                   "tcp_in_mbit": iperf(pod_ip, False, False),
                   "tcp_out_mbit": iperf(pod_ip, True, False),
                   "rtt_tcp_in_ms": ping_under_tcp(pod_ip, False),
                   "rtt_tcp_out_ms": ping_under_tcp(pod_ip, True)}
        finally:
            sh("sh", "-c", f"kill $(cat {pidfile}) 2>/dev/null", check=False)
        for i in reversed(range(len(cl["plugins"]))):
            invoke("DEL", cl, i, prev, container)
        return res
    finally:
        sh("ip", "netns", "del", NETNS, check=False)
        sh("ip", "link", "del", BRIDGE, check=False)
        if daemon:
            daemon.terminate()
            daemon.wait()
        sh("rm", "-rf", ipam_dir, check=False)


def main():
    if os.geteuid() != 0:
        raise SystemExit("cni_bench: run as root")
    for need in (os.path.join(REF, "bandwidth"), os.path.join(OURS, "tricolor")):
        if not os.access(need, os.X_OK):
            raise SystemExit(f"cni_bench: {need} is missing (containernetworking-plugins, build)")
    rows = {lim: measure(lim) for lim in ("bandwidth", "tricolor")}
    for lim, r in rows.items():
        print(f"RESULT name=cni_{lim} rate_mbit={RATE / 1e6:.0f} "
              + " ".join(f"{k}={v:.2f}" for k, v in r.items()))
    ref, ours = rows["bandwidth"], rows["tricolor"]
    print(f"RESULT name=cni_rtt_ratio in={ours['rtt_tcp_in_ms'] / ref['rtt_tcp_in_ms']:.3f} "
          f"out={ours['rtt_tcp_out_ms'] / ref['rtt_tcp_out_ms']:.3f}")


if __name__ == "__main__":
    main()
