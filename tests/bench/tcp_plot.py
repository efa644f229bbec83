#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
"""tcp_plot.py TSV SVG: goodput (% of CIR) against CBS, one line per mode, one panel per RTT
and number of flows, from the rows tests/bench/tcp_bench.sh appends to TSV
(rtt cbs_kib mode flows pct_cir retransmits jain). Plain SVG: no plotting library needed."""
import sys
from collections import defaultdict

COLORS = {"htb": "#444444", "tbf": "#999999", "police": "#d62728", "sockets": "#2ca02c",
          "aqm_drop": "#ff7f0e", "aqm_ecn": "#1f77b4"}
DASH = {"htb": "6,3", "tbf": "2,3"}


def main():
    rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
    data = defaultdict(lambda: defaultdict(dict))  # (rtt, flows) -> mode -> cbs -> pct
    for rtt, cbs, mode, flows, pct, *_ in rows:
        data[(int(rtt), int(flows))][mode][int(cbs)] = float(pct)
    panels = sorted(data)
    w, h, pad = 330, 260, 50
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{cols * w}" '
           f'height="{nrows * h + 40}" font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="18" font-size="14">TCP goodput through a 20 Mbit/s policy '
           f'against CBS (CUBIC, iperf3); HTB is the line to reach</text>']
    all_cbs = sorted({c for p in data.values() for m in p.values() for c in m})
    for i, key in enumerate(panels):
        ox, oy = (i % cols) * w, 30 + (i // cols) * h
        pw, ph = w - pad - 20, h - pad - 30
        x0, y0 = ox + pad, oy + 20 + ph

        def xpos(c):
            if len(all_cbs) == 1:
                return x0 + pw / 2
            return x0 + pw * all_cbs.index(c) / (len(all_cbs) - 1)

        def ypos(v):
            return y0 - ph * min(max(v, 0), 110) / 110

        rtt, flows = key
        out.append(f'<text x="{ox + pad}" y="{oy + 14}">RTT {rtt} ms, {flows} '
                   f'flow{"s" if flows > 1 else ""}</text>')
        out.append(f'<rect x="{x0}" y="{y0 - ph}" width="{pw}" height="{ph}" fill="none" '
                   f'stroke="#ccc"/>')
        for v in (0, 25, 50, 75, 100):
            out.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{ypos(v)}" y2="{ypos(v)}" '
                       f'stroke="#eee"/><text x="{x0 - 6}" y="{ypos(v) + 4}" '
                       f'text-anchor="end">{v}%</text>')
        for c in all_cbs:
            out.append(f'<text x="{xpos(c)}" y="{y0 + 14}" text-anchor="middle">{c} KiB</text>')
        for mode, pts in sorted(data[key].items()):
            pts = sorted(pts.items())
            path = " ".join(f"{xpos(c):.1f},{ypos(v):.1f}" for c, v in pts)
            color = COLORS.get(mode, "#000")
            dash = f' stroke-dasharray="{DASH[mode]}"' if mode in DASH else ""
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                       f'stroke-width="2"{dash}/>')
            for c, v in pts:
                out.append(f'<circle cx="{xpos(c):.1f}" cy="{ypos(v):.1f}" r="3" fill="{color}"/>')
    # legend
    lx = 10
    ly = nrows * h + 30
    for mode in ["htb", "tbf", "police", "sockets", "aqm_drop", "aqm_ecn"]:
        if not any(mode in p for p in data.values()):
            continue
        out.append(f'<line x1="{lx}" x2="{lx + 20}" y1="{ly}" y2="{ly}" stroke="{COLORS[mode]}" '
                   f'stroke-width="2"/><text x="{lx + 24}" y="{ly + 4}">{mode}</text>')
        lx += 95
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
