#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
"""figures_test.py: the figures writer on a scratch tree, so the check the suite relies on
(unit.Docs.FiguresMatchTheirResults) is known to fail when a doc and the results disagree.

Runs tests/bench/figures.py (collect, write, check) with FIGURES_ROOT pointing at a temporary
tree holding one doc with a generic table and inline figures, and asserts: write fills them from
the RESULT lines; check passes on what write made; check fails on a hand-edited figure, on a
figure whose id no RESULT line has, and on a table naming a key its RESULT line lacks."""
import os
import subprocess
import sys
import tempfile

FIGURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures.py")
failures = []


def run(root, *args):
    env = dict(os.environ, FIGURES_ROOT=root)
    return subprocess.run([sys.executable, FIGURES, *args], env=env, capture_output=True,
                          text=True)


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what, file=sys.stderr)


DOC = """# x
Flows at scale: <!-- fig:flows_1m.ns -->0<!-- /fig --> ns a packet, and again
<!-- fig:flows_1m.ns -->0<!-- /fig --> in another sentence.

<!-- figures:table ids=flows_1m,apply_1k keys=ms,ratio -->
<!-- /figures -->
"""

with tempfile.TemporaryDirectory() as root:
    os.makedirs(os.path.join(root, "docs"))
    bench = os.path.join(root, "bench.out")
    with open(bench, "w") as f:
        f.write("noise\nRESULT name=flows_1m ns=41.7 ms=12 ratio=1.93 baseline=empty_xdp\n"
                "RESULT name=apply_1k ms=3.5 ratio=2.10\n")
    with open(os.path.join(root, "README.md"), "w") as f:
        f.write(DOC)
    doc = os.path.join(root, "docs", "x.md")
    with open(doc, "w") as f:
        f.write(DOC)

    r = run(root, "collect", bench)
    expect(r.returncode == 0, "collect: " + r.stderr)
    results = open(os.path.join(root, "docs", "figures.results")).read()
    expect("# run=" in results and "kernel=" in results and "machine=" in results,
           "figures.results has the run's header (date, kernel, machine)")
    expect(sum(l.startswith("RESULT ") for l in results.splitlines()) == 2, "figures.results keeps exactly the two RESULT lines")

    expect(run(root, "check").returncode == 1, "check fails before write (the docs quote 0)")
    r = run(root, "write")
    expect(r.returncode == 0, "write: " + r.stderr)
    text = open(doc).read()
    expect(text.count("<!-- fig:flows_1m.ns -->41.7<!-- /fig -->") == 2,
           "both inline figures rewritten to 41.7:\n" + text)
    expect("| `flows_1m` | 12 | 1.93 |" in text and "| `apply_1k` | 3.5 | 2.10 |" in text,
           "the generic table has one row an id, one column a key:\n" + text)
    expect(run(root, "check").returncode == 0, "check passes on what write made")

    # A figure edited by hand: the doc and the results disagree.
    open(doc, "w").write(text.replace("-->41.7<", "-->40.0<", 1))
    r = run(root, "check")
    expect(r.returncode == 1 and "docs/x.md differs" in r.stderr,
           "check fails on a hand-edited figure: " + r.stderr)

    # A figure no RESULT line produced.
    open(doc, "w").write(text + "<!-- fig:nobench.ns -->5<!-- /fig -->\n")
    r = run(root, "check")
    expect(r.returncode == 1 and "no RESULT name=nobench" in r.stderr,
           "check fails on a figure no bench produced: " + r.stderr)

    # A table naming a key its RESULT line lacks.
    open(doc, "w").write(text.replace("keys=ms,ratio", "keys=ms,p99"))
    r = run(root, "check")
    expect(r.returncode == 1 and "has no p99" in r.stderr,
           "check fails on a key the RESULT line lacks: " + r.stderr)

# The TCP matrix: a suffixed run (ID_SUFFIX=_g61) is a table of its own, with its own modes,
# and stays out of the unsuffixed table.
TCP_DOC = """# t
<!-- figures:tcp modes=htb,sockets -->
<!-- /figures -->

<!-- figures:tcp suffix=_g61 modes=htb,edt -->
<!-- /figures -->
"""
with tempfile.TemporaryDirectory() as root:
    os.makedirs(os.path.join(root, "docs"))
    bench = os.path.join(root, "bench.out")
    with open(bench, "w") as f:
        for name, pct in [("htb_f1", 95.6), ("sockets_f1", 96.3), ("htb_f1_g61", 95.1),
                          ("edt_f1_g61", 96.5), ("edt_f4_g61", 96.4), ("htb_f4_g61", 95.0)]:
            f.write(f"RESULT name=tcp_rtt0_cbs16k_{name} goodput_mbit=19 pct_cir={pct} "
                    "retransmits=0 jain=0.999\n")
    open(os.path.join(root, "README.md"), "w").write("# r\n")
    doc = os.path.join(root, "docs", "x.md")
    open(doc, "w").write(TCP_DOC)
    expect(run(root, "collect", bench).returncode == 0, "collect (tcp)")
    r = run(root, "write")
    expect(r.returncode == 0, "write (tcp): " + r.stderr)
    text = open(doc).read()
    native, guest = text.split("suffix=_g61")
    expect("| 0 ms | 16 KiB | 1 | 95.6% / 0 | 96.3% / 0 |" in native and "| 4 |" not in native,
           "the unsuffixed table has the native row only:\n" + text)
    expect("| RTT | CBS | flows | HTB | --shape edt (fq) |" in guest and
           "| 0 ms | 16 KiB | 1 | 95.1% / 0 | 96.5% / 0 |" in guest and
           "| 0 ms | 16 KiB | 4 | 95.0% / 0 / 0.999 | 96.4% / 0 / 0.999 |" in guest,
           "the _g61 table has its own rows and columns:\n" + text)
    # A mode a row lacks fails the check, as a missing figure does.
    open(doc, "w").write(TCP_DOC.replace("modes=htb,edt", "modes=htb,edt,police"))
    r = run(root, "check")
    expect(r.returncode == 1 and "no RESULT name=tcp_rtt0_cbs16k_police_f1_g61" in r.stderr,
           "check fails on a mode the suffixed run lacks: " + r.stderr)

print(f"figures_test.py: {len(failures)} failures")
sys.exit(1 if failures else 0)
