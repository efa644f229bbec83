#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
"""An exact rational model of docs/spec.md §1 (the three meters) and §14's warm-up, written from
the spec with Python's fractions and nothing of bpf/lib/meter.h: tokens are fractions of a
byte's 8e9 (a packet's 1e9), a warm-up's rate steps are integrated over their edges as they fall.

  reference.py --check            every NAME.args here replayed: equal to NAME.expected
  reference.py --write-warmup     (re)writes the warm-up vectors (their traces are seeded)
  reference.py --write-quota      (re)writes the quota vectors
  reference.py --write-per-flow   (re)writes hier-quota-per-src (a per-source policy file)
  reference.py --write-hier       (re)writes hier-quota-warm-3level (a warm-up and a quota at
                                  levels of a hierarchy)
  reference.py --states NAME      NAME's packets, each with its colours and the buckets after it
  reference.py --case SEED        a random warm-up meter (its flags on the first line) and trace,
                                  each packet with its colours and the buckets after it
A bucket is written as a fraction of tokens, N/D, in lowest terms.
"""
import calendar
import copy
import random
import sys
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).resolve().parent
DURATION = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


SIZE = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3,
        "gb": 1024**3}


def size_of(text):
    digits = len(text) - len(text.lstrip("0123456789"))
    return int(text[:digits]) * SIZE[text[digits:].lower()]


def duration(text):
    for unit in sorted(DURATION, key=len, reverse=True):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * DURATION[unit]
    raise ValueError(f"duration {text!r}")


class Meter:
    def __init__(self, args):
        o = {"algo": None, "cir": 0, "cbs": 0, "ebs": 0, "pir": 0, "pbs": 0, "eir": 0}
        flags = set()
        it = iter(args)
        for a in it:
            key = a[2:].replace("-", "_")
            if key in ("color_aware", "packet_mode", "coupling"):
                flags.add(key)
            elif key == "warmup":
                o[key] = duration(next(it))
            elif key == "quota":
                amount, period = next(it).split("/")
                o["quota"] = size_of(amount)
                o["period"] = period if period == "month" else duration(period)
            else:
                o[key] = next(it)
        self.algo = o["algo"]
        self.aware = "color_aware" in flags
        self.coupling = "coupling" in flags
        unit = 10**9 if "packet_mode" in flags else 8 * 10**9
        self.packet_mode = "packet_mode" in flags
        self.unit = unit
        self.cir = int(o["cir"])
        self.csize = int(o["cbs"]) * unit
        if self.algo == "trtcm":
            self.erate, self.esize = int(o["pir"]), int(o["pbs"]) * unit
        else:
            self.erate = int(o["eir"]) if self.algo == "rfc4115" else 0
            self.esize = int(o["ebs"]) * unit
        self.d = o.get("warmup", 0)
        self.k = int(o.get("cold_factor", 3)) if self.d else 0
        self.started = False
        # A quota (§14): bytes coloured green or yellow in the period; the over meter after.
        self.quota = o.get("quota", 0)
        self.period = o.get("period")
        self.reset = o.get("quota_reset")
        self.over = None
        if self.quota and o.get("over", "drop") != "drop":
            over = dict(kv.split("=") for kv in o["over"].split(","))
            rest = [a for a in args if a in ("--color-aware", "--packet-mode")]
            flags = sum((["--" + k, v] for k, v in over.items()), [])
            if "algo" not in over:
                flags = ["--algo", self.algo] + flags
            self.over = Meter(flags + rest)
        self.period_end = None
        self.used = 0

    def next_reset(self, now):
        """The end of the period that holds @now (ns since the Unix epoch, UTC)."""
        if self.period != "month":
            anchor = 0
            if self.reset:
                anchor = int(datetime.fromisoformat(self.reset.replace("Z", "+00:00"))
                             .timestamp()) * 10**9
            return anchor + ((now - anchor) // self.period + 1) * self.period
        day, _, tod = self.reset.partition("T") if self.reset else ("1", "", "")
        h, mi, *sec = (tod or "00:00").split(":")
        tod_ns = ((int(h) * 60 + int(mi)) * 60 + int(sec[0] if sec else 0)) * 10**9
        t = datetime.fromtimestamp(now // 10**9, timezone.utc)
        y, m = t.year, t.month
        while True:
            b = calendar.timegm((y, m, int(day), 0, 0, 0)) * 10**9 + tod_ns
            if b > now:
                return b
            y, m = (y + 1, 1) if m == 12 else (y, m + 1)

    def earned(self, t0, t1):
        """The ns of full rate that [t0, t1) earns: during the j-th step of a warm-up from s,
        [s + (j-1)D/K, s + jD/K), each ns counts j/K."""
        if not self.d:
            return Fraction(t1 - t0)
        total = Fraction(0)
        edges = [self.s + Fraction(j * self.d, self.k) for j in range(self.k + 1)]
        for j in range(1, self.k + 1):
            lo, hi = max(Fraction(t0), edges[j - 1]), min(Fraction(t1), edges[j])
            if hi > lo:
                total += (hi - lo) * Fraction(j, self.k)
        lo = max(Fraction(t0), edges[self.k])
        if t1 > lo:
            total += t1 - lo
        return total

    def refill(self, now):
        if now <= self.last:
            return
        dt = self.earned(self.last, now)
        self.last = now
        c = self.c + self.cir * dt
        over = max(c - self.csize, 0)
        self.c = min(c, self.csize)
        e = self.e + self.erate * dt
        if self.algo == "srtcm" or (self.algo == "rfc4115" and self.coupling):
            e += over
        self.e = min(e, self.esize)

    def mark(self, now, size, color, aware=None):
        """@aware: True for a level above another in a hierarchy (§9), whatever the flags say."""
        if not self.quota:
            return self.mark_meter(now, size, color, aware)
        if self.period_end is None or now >= self.period_end:
            self.used = 0
            self.period_end = self.next_reset(now)
        if self.used < self.quota:
            got = self.mark_meter(now, size, color, aware)
            if got != "red":
                self.used += size
            return got
        return self.over.mark(now, size, color, aware) if self.over else "red"

    def mark_meter(self, now, size, color, aware=None):
        if not self.started:
            self.started = True
            self.last = now
            self.s = now
            self.c, self.e = Fraction(self.csize), Fraction(self.esize)
        cold = self.d and now > self.last and now - self.last >= self.d
        self.refill(now)
        if cold:
            self.s = now
        if not (self.aware if aware is None else aware):
            color = "green"
        cost = self.unit if self.packet_mode else size * self.unit
        if self.algo == "trtcm":
            if color == "red" or self.e < cost:
                return "red"
            self.e -= cost
            if color == "yellow" or self.c < cost:
                return "yellow"
            self.c -= cost
            return "green"
        if color == "green" and self.c >= cost:
            self.c -= cost
            return "green"
        if color != "red" and self.e >= cost:
            self.e -= cost
            return "yellow"
        return "red"


def chain_mark(levels, now, size, color):
    """A packet up a hierarchy's chain of meters @levels (§9): each level decides at one instant
    on a copy of itself, those above colour-aware on the colour from below; if the packet does
    not end red every level becomes its copy, else every level meets it red (colour-aware: it
    earns to now, a warm-up's gap ends, a meter starts, a period turns; nothing is taken)."""
    copies = [copy.deepcopy(m) for m in levels]
    for i, m in enumerate(copies):
        color = m.mark(now, size, color, True if i else None)
    if color != "red":
        for m, c in zip(levels, copies):
            m.__dict__.update(c.__dict__)
    else:
        for m in levels:
            m.mark(now, size, "red", True)
    return color


def replay(args, trace_text):
    m = Meter(args)
    out = []
    for line in trace_text.splitlines():
        f = line.replace(",", " ").split()
        if not f or f[0].startswith("#"):
            continue
        now, size = int(f[0]), int(f[1])
        out.append(f"{now},{size},{m.mark(now, size, f[2] if len(f) > 2 else 'green')}")
    return "\n".join(out) + "\n"


def states(args, packets):
    """Lines 'time size IN OUT C E' (the incoming colour and the meter's, the buckets' tokens as
    N/D) for @packets [(time, size, incoming colour)]."""
    m = Meter(args)
    out = []
    for now, size, color in packets:
        got = m.mark(now, size, color)
        out.append(f"{now} {size} {color} {got} {m.c.numerator}/{m.c.denominator} "
                   f"{m.e.numerator}/{m.e.denominator}")
    return "\n".join(out) + "\n"


def parse_trace(text):
    packets = []
    for line in text.splitlines():
        f = line.replace(",", " ").split()
        if f and not f[0].startswith("#"):
            packets.append((int(f[0]), int(f[1]), f[2] if len(f) > 2 else "green"))
    return packets


def random_case(seed):
    """Flags from every corner of the limits (1 bit/s to 1 Tbit/s, 1 byte to 1 GiB, K 2..16, D
    1 ms to 24 h) and a trace that crosses a warm-up's steps, its edges and its end."""
    rng = random.Random(seed)
    algo = rng.choice(["srtcm", "trtcm", "rfc4115"])
    packet_mode = rng.random() < 0.2
    rate = lambda: rng.choice([1, 1000, 10**6, rng.randint(1, 10**9), 10**12])
    size = lambda: rng.choice([1, 64, 1500, rng.randint(1, 10**6), 2**30]) if not packet_mode \
        else rng.choice([1, 3, 100, 2**30])
    d = rng.choice([10**6, 10**9, rng.randint(10**6, 10**10), 24 * 3600 * 10**9])
    k = rng.randint(2, 16)
    cir = rate()
    args = ["--algo", algo, "--cir", str(cir), "--cbs", str(size())]
    if algo == "trtcm":
        args += ["--pir", str(max(cir, rate())), "--pbs", str(size())]
    else:
        args += ["--ebs", str(rng.choice([0, size()]))]
    if algo == "rfc4115":
        args += ["--eir", str(rng.choice([0, rate()]))]
        if rng.random() < 0.5:
            args += ["--coupling"]
    if packet_mode:
        args += ["--packet-mode"]
    if rng.random() < 0.3:
        args += ["--color-aware"]
    args += ["--warmup", f"{d}ns", "--cold-factor", str(k)]
    m = Meter(args)
    packets, t = [], rng.randint(0, 10**12)
    for _ in range(300):
        r = rng.random()
        if r < 0.3:
            gap = 0
        elif r < 0.5:  # near a step's edge of the warm-up that may be running
            gap = rng.choice([d // k, d // k + 1, d - 1, d, d + 1, 2 * d])
        else:
            gap = int(rng.expovariate(1.0) * d / rng.choice([4, 50, 1000]))
        t += gap
        packets.append((t, rng.choice([1, 64, 1500, 9000, 65536]),
                        rng.choice(["green", "yellow", "red"])))
    return args, packets


def check():
    bad = 0
    names = sorted(HERE.glob("*.args"))
    for a in names:
        got = replay(a.read_text().split(), a.with_suffix(".trace").read_text())
        if got != a.with_suffix(".expected").read_text():
            print(f"{a.stem}: the model differs from {a.stem}.expected", file=sys.stderr)
            bad += 1
    print(f"{len(names) - bad} of {len(names)} vectors equal to the model")
    return 1 if bad else 0


# The warm-up vectors: K = 2, 3 and 16 over the three algorithms; every trace has packets at and
# one ns either side of each step's edge, gaps of D - 1, D and D + 1 ns (cold only from D on),
# back-to-back bursts and exponential gaps around the rate.
WARMUP = {
    "srtcm-warmup-k3": "--algo srtcm --cir 1000000 --cbs 3000 --ebs 3000 --warmup 1s --cold-factor 3",
    "trtcm-warmup-k2-aware": "--algo trtcm --cir 1000000 --cbs 3000 --pir 3000000 --pbs 4500 "
    "--warmup 500ms --cold-factor 2 --color-aware",
    "rfc4115-warmup-k16": "--algo rfc4115 --cir 2000000 --cbs 4000 --eir 1000000 --ebs 3000 "
    "--warmup 1s --cold-factor 16",
    "rfc4115-warmup-k3-coupled": "--algo rfc4115 --cir 1000000 --cbs 2000 --eir 300000 --ebs 3000 "
    "--warmup 200ms --cold-factor 3 --coupling",
}


def warm_trace(args, seed):
    m = Meter(args.split())
    rng = random.Random(seed)
    rate_bps = max(m.cir, m.erate) or m.cir
    lines = []
    t = 10**9
    colors = ["green", "yellow", "red"]

    def pkt(at, size):
        c = f" {rng.choice(colors)}" if m.aware and rng.random() < 0.3 else ""
        lines.append(f"{at} {size}{c}")

    for period in range(4):
        start = t
        # Every step edge of a warm-up from start, and one ns either side.
        edges = [start + (j * m.d) // m.k for j in range(1, m.k + 1)]
        marks = sorted({e + o for e in edges for o in (-1, 0, 1)})
        now = start
        pkt(now, 1500)
        end = start + m.d + m.d // 4
        while now < end:
            size = rng.choice([64, 300, 576, 1000, 1500])
            gap = int(rng.expovariate(1.0) * size * 8 * 10**9 / rate_bps / 1.6)
            if rng.random() < 0.1:
                gap = 0  # back to back
            nxt = now + gap
            while marks and marks[0] <= nxt:
                at = marks.pop(0)
                if at >= now:
                    pkt(at, rng.choice([64, 1500]))
                    now = at
            now = max(now, nxt)
            pkt(now, size)
        # The gap before the next period: just under D (stays warm), D, then just over D.
        t = now + [m.d - 1, m.d, m.d + 1, 3 * m.d][period]
    return "\n".join(lines) + "\n"


# The quota vectors: a period reset inside each trace (packets at a reset and one ns either side),
# an over meter, a drop, calendar months with a reset on the 15th at 06:00 across February, and a
# quota beside a warm-up. Times are ns since the Unix epoch (UTC), from November 2026.
NOV_2026 = 1793491200 * 10**9  # 2026-11-01T00:00:00Z
QUOTA = {
    "srtcm-quota-over": ("--algo srtcm --cir 8000000 --cbs 15000 --ebs 15000 --quota 300000/2s "
                         "--quota-reset 2026-11-01T00:00:00Z --over cir=1000000,cbs=3000,ebs=3000",
                         NOV_2026 + 5 * 10**8, 7 * 10**9, 700_000, 2 * 10**9),
    "trtcm-quota-month-drop": ("--algo trtcm --cir 1000000 --cbs 3000 --pir 2000000 --pbs 6000 "
                               "--quota 500k/month --quota-reset 15T06:00 --over drop",
                               NOV_2026, 120 * 86400 * 10**9, 1800 * 10**9, "month"),
    "rfc4115-quota-warmup": ("--algo rfc4115 --cir 2000000 --cbs 4000 --eir 1000000 --ebs 3000 "
                             "--warmup 300ms --cold-factor 4 --quota 100k/1s --over "
                             "algo=srtcm,cir=500000,cbs=1500,ebs=1500 --color-aware",
                             NOV_2026 + 123456789, 5 * 10**9, 3_000_000, 10**9),
}


def quota_trace(args, start, length, mean_gap, period, seed):
    m = Meter(args.split())
    rng = random.Random(seed)
    resets, t = [], start
    while True:
        t = m.next_reset(t)
        if t > start + length:
            break
        resets.append(t)
    marks = sorted({r + o for r in resets for o in (-1, 0, 1)})
    lines, now = [], start
    colors = ["green", "yellow", "red"]
    while now < start + length:
        nxt = now + int(rng.expovariate(1.0) * mean_gap)
        while marks and marks[0] <= nxt:
            at = marks.pop(0)
            if at >= now:
                lines.append(f"{at} {rng.choice([64, 1500])}")
                now = at
        now = max(now, nxt)
        c = f" {rng.choice(colors)}" if m.aware and rng.random() < 0.3 else ""
        lines.append(f"{now} {rng.choice([64, 300, 576, 1000, 1500])}{c}")
    return "\n".join(lines) + "\n", len(resets)


def write_quota():
    for i, (name, (args, start, length, gap, period)) in enumerate(QUOTA.items()):
        trace, resets = quota_trace(args, start, length, gap, period, 2000 + i)
        (HERE / f"{name}.args").write_text(args + "\n")
        (HERE / f"{name}.trace").write_text(trace)
        (HERE / f"{name}.expected").write_text(replay(args.split(), trace))
        print(f"{name}: {trace.count(chr(10))} packets, {resets} resets")


# A per-source policy (replay -f): each source's own meter, warm-up and quota, as one meter of
# the flags alone would be. Its .expected is each source's replay through that meter, merged.
PER_FLOW = {
    "hier-quota-per-src": ("--algo srtcm --cir 2000000 --cbs 3000 --ebs 3000 --warmup 200ms "
                           "--cold-factor 4 --quota 60000/2s --over cir=500000,cbs=1500,ebs=1500",
                           ["198.18.0.1", "198.18.0.2", "198.18.0.3"]),
}


def write_per_flow():
    for i, (name, (args, sources)) in enumerate(PER_FLOW.items()):
        rng = random.Random(3000 + i)
        # Each source its own trace (resets inside, at 2 s from a multiple of 2 s: relative and
        # absolute times see the same periods), at times the others do not use.
        # The first packet at 2026-11-01T00:00:00Z, a multiple of the period: a test that
        # replays the trace from its first packet's time sees the same periods.
        packets, used = [(NOV_2026, 1500, "green", sources[0])], {NOV_2026}
        for j, src in enumerate(sources):
            trace, _ = quota_trace(args, NOV_2026 + 10**8 * (j + 1), 25 * 10**8,
                                   3_000_000 * (j + 1), 2 * 10**9, 4000 + 10 * i + j)
            for now, size, color in parse_trace(trace):
                while now in used:
                    now += 1
                used.add(now)
                packets.append((now, size, color, src))
        packets.sort()
        expected = {}
        for src in sources:
            m = Meter(args.split())
            for now, size, color, s in packets:
                if s == src:
                    expected[now] = m.mark(now, size, color)
        flags = dict(zip(args.split()[::2], args.split()[1::2]))
        yaml = ["policies:", "  - name: tenants"]
        for k, v in flags.items():
            key = k[2:].replace("-", "_")
            yaml.append(f"    {key}: {v}" if key != "over" else f'    {key}: "{v}"')
        yaml += ["    per: src", "    match: {proto: udp}"]
        (HERE / f"{name}.yaml").write_text("\n".join(yaml) + "\n")
        lines = ["# time_ns bytes [color] SRC DST PROTO SPORT DPORT"]
        lines += [f"{now} {size}{'' if color == 'green' else ' ' + color} {src} 198.19.0.1 udp "
                  f"1000 7000" for now, size, color, src in packets]
        (HERE / f"{name}.trace").write_text("\n".join(lines) + "\n")
        (HERE / f"{name}.expected").write_text(
            "".join(f"{now},{size},{expected[now]},tenants\n" for now, size, _, _ in packets))
        print(f"{name}: {len(packets)} packets from {len(sources)} sources")


# A hierarchy with a warm-up and a quota at its levels (§9, §14): every connection (5-tuple: a
# quota of its own, an over meter) under its source (a warm-up) under the link (aggregate: a
# quota, dropped once used: the sources meet red packets from above for longer than D, which
# keeps them warm). Its .expected is every packet up its chain (chain_mark): model, replay and
# data path equal it.
HIER = {
    "hier-quota-warm-3level": [
        ("link", "--algo rfc4115 --cir 4000000 --cbs 6000 --eir 2000000 --ebs 6000 "
                 "--quota 300000/1s --over drop", "aggregate", None),
        ("user", "--algo srtcm --cir 2500000 --cbs 4500 --ebs 3000 --warmup 200ms "
                 "--cold-factor 4", "src", "link"),
        ("conn", "--algo trtcm --cir 1500000 --cbs 3000 --pir 3000000 --pbs 4500 --quota "
                 "60000/1s --over cir=500000,cbs=1500,pir=1000000,pbs=3000", "5tuple", "user"),
    ],
}


def write_hier():
    for i, (name, levels) in enumerate(HIER.items()):
        rng = random.Random(5000 + i)
        flows = [(f"198.18.0.{j + 1}", 1000 + p) for j in range(3) for p in range(2)]
        start, length = NOV_2026, 2_150_000_000
        packets, used = [], set()
        # Each source quiet for 190 ms (under D, warm after it), 200 ms (D: cold) and 350 ms.
        quiet = {src: [(start + int(t * 10**9), start + int(t * 10**9) + q) for t, q in
                       zip(rng.sample([0.3, 0.8, 1.4, 2.0], 3), [190_000_000, 200_000_000,
                                                                  350_000_000])]
                 for src, _ in flows}
        for src, port in flows:
            # The first packet at a period's start (2026-11-01T00:00:00Z): replayed from its own
            # time or from 0 (replay's relative times, whatif's), the trace meets the same resets.
            now = start + (rng.randint(1, 10**6) if packets else 0)
            while now < start + length:
                size = rng.choice([64, 300, 576, 1000, 1500])
                for a, b in quiet[src]:
                    if a <= now < b:
                        now = b
                while now in used:
                    now += 1
                used.add(now)
                packets.append((now, size, src, port))
                now += int(rng.expovariate(1.0) * size * 8 * 10**9 / 900_000)
        # Packets at each period's reset and one ns either side.
        for r in range(1, 3):
            for o in (-1, 0, 1):
                at = start + r * 10**9 + o
                if at not in used:
                    used.add(at)
                    packets.append((at, 1500, *flows[r]))
        packets.sort()
        meters = {}
        names = [n for n, _, _, _ in levels]
        lines = ["# time_ns bytes [color] SRC DST PROTO SPORT DPORT"]
        expected = []
        for now, size, src, port in packets:
            chain = []
            for lname, args, per, _ in reversed(levels):  # the matched level first
                key = {"aggregate": (), "src": (src,), "5tuple": (src, port)}[per]
                chain.append(meters.setdefault((lname, key), Meter(args.split())))
            got = chain_mark(chain, now, size, "green")
            lines.append(f"{now} {size} {src} 198.19.0.1 udp {port} 7000")
            expected.append(f"{now},{size},{got},{names[-1]}\n")
        yaml = ["policies:"]
        for lname, args, per, parent in levels:
            yaml.append(f"  - name: {lname}")
            a = args.split()
            for k, v in zip(a[::2], a[1::2]):
                key = k[2:].replace("-", "_")
                yaml.append(f"    {key}: {v}" if key != "over" else f'    {key}: "{v}"')
            yaml.append(f"    per: {per}")
            if parent:
                yaml.append(f"    parent: {parent}")
            if lname != names[-1]:
                yaml.append("    only_parent: true")
            else:
                yaml.append("    match: {proto: udp}")
        (HERE / f"{name}.yaml").write_text("\n".join(yaml) + "\n")
        (HERE / f"{name}.trace").write_text("\n".join(lines) + "\n")
        (HERE / f"{name}.expected").write_text("".join(expected))
        counts = {c: sum(e.split(",")[2] == c for e in expected) for c in ("green", "yellow",
                                                                           "red")}
        print(f"{name}: {len(packets)} packets, {counts}")


def write_warmup():
    for i, (name, args) in enumerate(WARMUP.items()):
        trace = warm_trace(args, 1000 + i)
        (HERE / f"{name}.args").write_text(args + "\n")
        (HERE / f"{name}.trace").write_text(trace)
        (HERE / f"{name}.expected").write_text(replay(args.split(), trace))
        print(f"{name}: {trace.count(chr(10))} packets")


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(check())
    if len(sys.argv) == 3 and sys.argv[1] == "--states":
        a = HERE / f"{sys.argv[2]}.args"
        sys.stdout.write(states(a.read_text().split(),
                                parse_trace(a.with_suffix(".trace").read_text())))
        sys.exit(0)
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        args, packets = random_case(int(sys.argv[2]))
        sys.stdout.write(" ".join(args) + "\n" + states(args, packets))
        sys.exit(0)
    if sys.argv[1:] == ["--write-warmup"]:
        write_warmup()
        sys.exit(0)
    if sys.argv[1:] == ["--write-quota"]:
        write_quota()
        sys.exit(0)
    if sys.argv[1:] == ["--write-per-flow"]:
        write_per_flow()
        sys.exit(0)
    if sys.argv[1:] == ["--write-hier"]:
        write_hier()
        sys.exit(0)
    print(__doc__, file=sys.stderr)
    sys.exit(2)
