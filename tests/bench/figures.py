#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
"""figures.py: the docs' measured figures, written from the benchmarks' RESULT lines.

Every benchmark prints `RESULT name=<id> key=value ...`. `./tricolor.sh bench` saves its output;
this script keeps those lines with the date, kernel, machine and commit of the run in
docs/figures.results, and rewrites the blocks of README.md and docs/*.md that quote them:

    <!-- figures:<block> -->
    ...generated, never edited by hand...
    <!-- /figures -->

<block> is one of the named tables below, or, for a new benchmark, a generic table that names
its RESULT ids (rows) and keys (columns), so a bench can be quoted without code here:

    <!-- figures:table ids=<id>,<id>... keys=<key>,<key>... -->

and a figure inside a sentence is quoted by id and key, its value rewritten like a block's:

    <!-- fig:<id>.<key> -->12.3<!-- /fig -->

  figures.py collect BENCH_OUTPUT...   the RESULT lines of a run -> docs/figures.results
                                       (lines of ids the new run did not produce are kept,
                                       each with the header of the run that made it)
  figures.py write                     rewrite every block from docs/figures.results
  figures.py check                     exit 1 if a block differs from what write would make,
                                       names an unknown block, or quotes a RESULT id the
                                       results do not hold (the test suite runs this)
"""
import datetime
import os
import platform
import re
import subprocess
import sys

# FIGURES_ROOT: another tree to work on (the writer's own test uses a scratch one).
ROOT = os.environ.get("FIGURES_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "docs", "figures.results")
DOCS = ["README.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))


# ---- the results file --------------------------------------------------------------------

def parse_result(line):
    m = re.match(r"^RESULT (.*)$", line.strip())
    if not m:
        return None
    fields = dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)
    return fields if "name" in fields else None


def run_header():
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                                  cwd=ROOT).stdout.strip()
        except OSError:
            return ""
    cpu = sh("sed -n 's/^model name\\s*: //p' /proc/cpuinfo | head -1") or platform.machine()
    return "run={} kernel={} machine={}x{} commit={}".format(
        datetime.date.today().isoformat(), platform.release(), os.cpu_count(),
        cpu.replace(" ", "_"), sh("git rev-parse --short HEAD") or "unknown")


def load():
    """id -> (fields, header of the run that produced it)."""
    out, header = {}, ""
    if not os.path.exists(RESULTS):
        return out
    for line in open(RESULTS):
        if line.startswith("# run="):
            header = line[2:].strip()
        r = parse_result(line)
        if r:
            out[r["name"]] = (r, header)
    return out


def collect(paths):
    old = load()
    header = run_header()
    new = {}
    for p in paths:
        for line in open(p, errors="replace"):
            r = parse_result(line)
            if r:
                new[r["name"]] = line.strip()
    if not new:
        sys.exit("figures.py: no RESULT lines in " + " ".join(paths))
    runs = {}
    for name, (fields, h) in old.items():
        if name not in new:
            runs.setdefault(h, []).append(
                "RESULT " + " ".join(f"{k}={v}" for k, v in fields.items()))
    with open(RESULTS, "w") as f:
        f.write("# RESULT lines of ./tricolor.sh bench, written by tests/bench/figures.py collect;\n"
                "# each run's lines under its header. docs blocks are generated from these.\n")
        for h, lines in runs.items():
            f.write(f"# {h}\n" + "\n".join(sorted(lines)) + "\n")
        f.write(f"# {header}\n" + "\n".join(new[k] for k in sorted(new)) + "\n")
    print(f"figures.py: {len(new)} results of this run, {sum(map(len, runs.values()))} kept")


# ---- the blocks --------------------------------------------------------------------------

class Missing(Exception):
    pass


def value(res, name, key):
    if name not in res:
        raise Missing(f"no RESULT name={name}")
    fields = res[name][0]
    if key not in fields:
        raise Missing(f"RESULT name={name} has no {key}")
    return fields[key]


def num(res, name, key, fmt="{:.0f}"):
    return fmt.format(float(value(res, name, key)))


def source(res, names):
    headers = sorted({res[n][1] for n in names if n in res})
    hs = "; ".join(h.replace("run=", "").replace(" kernel=", ", kernel ")
                   .replace(" machine=", ", ").replace(" commit=", ", commit ").replace("_", " ")
                   for h in headers)
    return f"*Generated from `docs/figures.results` ({hs}) by `tests/bench/figures.py`.*"


def table(res, head, rows, names):
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n\n" + source(res, names)


DATAPATH_ROWS = [
    ("empty XDP program (baseline)", "empty_xdp"),
    ("clock only (`bpf_ktime_get_ns`)", "clock_only"),
    ("parse, classify and count; no policy matches", "parse_only"),
    ("green, aggregate, XDP", "green_aggregate_xdp"),
    ("green, aggregate, XDP, `--aqm ecn`", "green_aggregate_xdp_aqm_ecn"),
    ("green, aggregate, tc", "green_aggregate_tc"),
    ("green, per source, 1 flow", "green_per_src_1_flow"),
    ("green, per source, 2²⁰ flows in scattered order", "green_per_src_1M_flows"),
]


def block_datapath(res):
    rows = [(label, num(res, n, "ns"), num(res, n, "ratio", "{:.2f}")) for label, n in DATAPATH_ROWS]
    return table(res, ["figure", "ns/packet", "× empty XDP"], rows, [n for _, n in DATAPATH_ROWS])


def block_chains(res):
    names = ["green_per_src_1_flow", "green_chain_2_levels", "green_chain_3_levels",
             "green_chain_4_levels"]
    rows = [("per source alone", num(res, names[0], "ns"), "1.00")]
    labels = {2: "per source under aggregate (2 levels)",
              3: "5-tuple under source under aggregate (3)",
              4: "5-tuple, source, destination, aggregate (4)"}
    for lv in (2, 3, 4):
        r = num(res, f"chain_{lv}_levels_vs_per_src", "ratio", "{:.2f}")
        rows.append((labels[lv], num(res, f"green_chain_{lv}_levels", "ns"),
                     f"**{r}** (target ≤ 1.4)" if lv == 2 else r))
    names += [f"chain_{lv}_levels_vs_per_src" for lv in (2, 3, 4)]
    return table(res, ["chain", "ns/packet", "× per-src alone"], rows, names)


def block_invariants(res):
    names = ["two_cpu_over_admission", "two_cpu_chain_over_admission", "aqm_cost_on_green"]
    rows = [
        ("two CPUs on one flow, 10⁶ runs each, clock stopped: bytes admitted over CBS + EBS",
         value(res, names[0], "bytes"), "0"),
        ("two CPUs on one 3-level chain: bytes over at any level",
         value(res, names[1], "bytes"), "0"),
        ("`--aqm ecn` on a green packet, × `--aqm off`",
         num(res, names[2], "ratio", "{:.3f}"), "≤ 1.10"),
    ]
    return table(res, ["what", "measured", "target"], rows, names)


def block_control(res):
    names = ["apply_16k_policies", "stats_16k_policies", "change_one_of_16k_policies",
             "remove_one_of_16k_policies", "add_one_of_16k_policies", "list_1M_flows"]
    one = lambda n: (num(res, n, "us", "{:.0f}") + " µs",
                     num(res, n, "ratio", "{:.1f}") + " × one `bpf_map_update_elem`")
    rows = [
        ("apply a set of 16k policies (configs, rules, masks, fresh state; one atomic switch)",
         num(res, names[0], "ms"), num(res, names[0], "ratio", "{:.2f}") + " × 16k `bpf_map_update_elem`"),
        ("read the counters of 16k policies (batched, summed over CPUs)",
         num(res, names[1], "ms", "{:.1f}"), num(res, names[1], "ratio", "{:.2f}") + " × 16k `bpf_map_lookup_elem`"),
        ("change one policy of 16k (checks, the inactive set's differences, one atomic switch)",
         *one(names[2])),
        ("remove one policy of 16k", *one(names[3])),
        ("add one policy to 16k", *one(names[4])),
        ("list 2²⁰ flows (batched)", num(res, names[5], "ms"), "—"),
    ]
    return table(res, ["operation", "ms", "× baseline"], rows, names)


def block_flows_top(res):
    """flows --top 10 at 2^20 flows: datapath_bench's Datapath::top_flows, flows_top_bench's
    daemon and CLI, and what the pass that keeps the heavy hitters costs."""
    names = ["flows_top10_2e20", "flows_top10_2e20_daemon", "flow_pass_2e20"]
    d = names[1]
    rows = [
        ("`Datapath::top_flows(10)`: a walk of the table", num(res, names[0], "full_ms", "{:.0f}"),
         "1"),
        ("`Datapath::top_flows(10)`: from the heavy hitters",
         num(res, names[0], "tracked_ms", "{:.2f}"), "1/" + num(res, names[0], "ratio")),
        ("the daemon's `flows` request with `\"walk\": true` (socket)",
         num(res, d, "walk_socket_ms", "{:.0f}"), "1"),
        ("the daemon's `flows` request, `top` 10 (socket)", num(res, d, "socket_ms", "{:.1f}"),
         "1/" + num(res, d, "ratio")),
        ("**`tricolorctl -j flows --top 10`**, the process included",
         "**" + num(res, d, "cli_ms", "{:.1f}") + "** (target ≤ 50)", "—"),
        ("`tricolorctl status` (flows counted by the last pass)",
         num(res, d, "status_ms", "{:.1f}"), "—"),
        ("a pass over the table (walk, next threshold)", num(res, names[2], "ms", "{:.0f}"), "—"),
    ]
    return table(res, ["at 2²⁰ flows, median of 7", "ms", "× walk"], rows, names)


METERS = [("srTCM blind", "srtcm_blind"), ("srTCM aware", "srtcm_aware"),
          ("trTCM blind", "trtcm_blind"), ("trTCM aware", "trtcm_aware"),
          ("RFC 4115 blind", "rfc4115_blind"), ("RFC 4115 aware", "rfc4115_aware")]


def block_meter(res):
    rows, names = [], []
    for label, m in METERS:
        n = "meter_" + m
        names.append(n)
        excess = int(value(res, n, "rte_green_excess_bytes"))
        rows.append((label, num(res, n, "tricolor_ns", "{:.2f}"), num(res, n, "rte_ns", "{:.2f}"),
                     num(res, n, "ratio", "{:.2f}"), value(res, n, "tricolor_mismatches"),
                     value(res, n, "rte_mismatches"), f"{excess:+d}".replace("-", "−")))
    return table(res, ["meter", "tricolor ns", "rte_meter ns", "rte / tricolor",
                       "tricolor mismatches", "rte mismatches", "rte green excess (B)"],
                 rows, names)


TCP_MODES = [("htb", "HTB"), ("tbf", "TBF"), ("police", "police (tc egress)"),
             ("sockets", "--shape sockets"), ("xdp", "police (XDP)"), ("aqm_drop", "--aqm drop"),
             ("aqm_ecn", "--aqm ecn")]
TCP_LABELS = dict(TCP_MODES + [("edt", "--shape edt (fq)")])
TCP_ID = re.compile(r"^tcp_rtt(\d+)_cbs(\d+)k_([a-z_]+)_f(\d+)$")


def block_opts(args):
    """A block's key=value arguments."""
    return dict(a.split("=", 1) for a in args.split() if "=" in a)


def block_tcp(res, args=""):
    """tests/bench/tcp_bench.sh's matrix, one row an (RTT, CBS, flows), one column a mode; a
    cell is goodput as % of CIR / retransmits (/ Jain's index, with more than one flow). Rows
    are every (RTT, CBS, flows) the results hold with ids that end in suffix= (default none:
    a matrix run with ID_SUFFIX, such as _bbr or the 6.1 guest's _g61, is a table of its own);
    modes= (default: the native matrix's) names the columns; every mode of a row must be
    there."""
    opts = block_opts(args)
    suffix = opts.get("suffix", "")
    modes = [m for m in opts.get("modes", "").split(",") if m] or [m for m, _ in TCP_MODES]
    unknown = [m for m in modes if m not in TCP_LABELS]
    if unknown:
        raise Missing(f"unknown TCP mode {unknown[0]}")
    keys = set()
    for r in res:
        if not r.endswith(suffix):
            continue
        m = TCP_ID.match(r[:len(r) - len(suffix)] if suffix else r)
        if m:
            keys.add((int(m[1]), int(m[2]), int(m[4])))
    if not keys:
        raise Missing(f"no RESULT name=tcp_rtt<R>_cbs<K>k_<mode>_f<N>{suffix}")
    rows, names = [], []
    for rtt, cbs, flows in sorted(keys):
        row = [f"{rtt} ms", f"{cbs} KiB", str(flows)]
        for mode in modes:
            n = f"tcp_rtt{rtt}_cbs{cbs}k_{mode}_f{flows}{suffix}"
            names.append(n)
            cell = f"{value(res, n, 'pct_cir')}% / {value(res, n, 'retransmits')}"
            if flows > 1:
                cell += f" / {value(res, n, 'jain')}"
            row.append(cell)
        rows.append(row)
    return table(res, ["RTT", "CBS", "flows"] + [TCP_LABELS[m] for m in modes], rows, names)


def block_table(res, args):
    """The generic table: one row a RESULT id, one column a key, values as the bench printed."""
    opts = block_opts(args)
    ids = [i for i in opts.get("ids", "").split(",") if i]
    keys = [k for k in opts.get("keys", "").split(",") if k]
    if not ids or not keys:
        raise Missing("a table needs ids=<id>,... and keys=<key>,...")
    rows = [[f"`{i}`"] + [value(res, i, k) for k in keys] for i in ids]
    return table(res, ["RESULT"] + keys, rows, ids)


BLOCKS = {"datapath": block_datapath, "chains": block_chains, "invariants": block_invariants,
          "control": block_control, "meter": block_meter, "flows_top": block_flows_top}
BLOCK_RE = re.compile(r"(<!-- figures:([a-z0-9_-]+)((?: [^>]*?)?) -->\n)(.*?)(<!-- /figures -->)",
                      re.S)
INLINE_RE = re.compile(r"(<!-- fig:([A-Za-z0-9_.-]+)\.([A-Za-z0-9_]+) -->)([^<]*)(<!-- /fig -->)")


def render(text, res, problems, path):
    def sub(m):
        name, args = m.group(2), m.group(3).strip()
        try:
            if name == "table":
                body = block_table(res, args)
            elif name == "tcp":
                body = block_tcp(res, args)
            elif name in BLOCKS and not args:
                body = BLOCKS[name](res)
            else:
                problems.append(f"{path}: unknown block figures:{name}{' ' + args if args else ''}")
                return m.group(0)
            return m.group(1) + body + "\n" + m.group(5)
        except Missing as e:
            problems.append(f"{path}: block figures:{name}: {e}")
            return m.group(0)

    def inline(m):
        try:
            return m.group(1) + value(res, m.group(2), m.group(3)) + m.group(5)
        except Missing as e:
            problems.append(f"{path}: figure {m.group(2)}.{m.group(3)}: {e}")
            return m.group(0)
    return INLINE_RE.sub(inline, BLOCK_RE.sub(sub, text))


def write_or_check(check):
    res, problems, stale = load(), [], []
    for doc in DOCS:
        path = os.path.join(ROOT, doc)
        text = open(path).read()
        new = render(text, res, problems, doc)
        if new != text:
            if check:
                stale.append(doc)
            else:
                open(path, "w").write(new)
                print(f"figures.py: wrote {doc}")
    for p in problems:
        print("figures.py: " + p, file=sys.stderr)
    for d in stale:
        print(f"figures.py: {d} differs from docs/figures.results: run tests/bench/figures.py "
              "write", file=sys.stderr)
    return 1 if problems or stale else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "collect":
        collect(sys.argv[2:])
        return 0
    if len(sys.argv) == 2 and sys.argv[1] in ("write", "check"):
        return write_or_check(sys.argv[1] == "check")
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
