#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
"""ablate.py: the green aggregate's time with one part of the data path taken out or moved, to
find where its time goes (docs/datapath.md, "Where the time went"). Each ablation is a few
literal replacements in bpf/ (one, in the bench's baseline), made in a scratch copy of the tree (as tests/mutate.sh plants its
mutants), and datapath_bench is built from it; then every build, the unchanged one first, runs
`TRICOLOR_BENCH_ONLY=hot` in turn, ROUNDS times, and each prints the median of its runs' least
rounds (the hot path's last line, which the host's noise can only raise) as RESULT lines.

    tests/bench/ablate.py [-l|-n] [ID...]  (root: BPF_PROG_TEST_RUN)
      -l          list the ablations and exit
      -n          check only that every ablation still applies to the tree (no build, no root;
                  a ctest case): what it replaces occurs exactly once
      ID...       only these (default: all)
    ABLATE_DIR    scratch directory (default /tmp/tricolor-ablate): the tree is copied to
                  ABLATE_DIR/src and built in ABLATE_DIR/build (minutes the first time; a
                  rebuild of the data path, under a minute, for each ablation)
    ROUNDS        runs of each build, alternated (default 3)

Not part of ./tricolor.sh bench: the builds take longer than its figures. Every ablation is a
throwaway: some would be wrong (a constant clock), most do less than the path must; they say
what a part costs, not what the path could be.
"""
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.environ.get("ABLATE_DIR", "/tmp/tricolor-ablate")
ROUNDS = int(os.environ.get("ROUNDS", "3"))

PIPELINE, CHAIN, CLASSIFY, MAPS = ("bpf/lib/pipeline.h", "bpf/lib/chain.h",
                                   "bpf/lib/classify.h", "bpf/lib/maps.h")
CLOCK_LINE = "    __u64 now = clock_now_ns();\n"
FOUND = "    if (!f0)\n        return TCM_NR_COLORS;\n"
# The masks probed: the replacement of the probe's rule lookup the one-rule ablations make.
PROBE = "    struct tcm_rule *r = classify_rule(ctx->set, ctx->key, m);\n"


def masks_shaped(name):
    """A map declared as tcm_masks is (maps.h), named @name, of values struct @name."""
    text = open(os.path.join(ROOT, MAPS)).read()
    end = text.index("} tcm_masks SEC(\".maps\");") + len("} tcm_masks SEC(\".maps\");")
    decl = text[text.rindex("struct {", 0, end):end]
    return decl.replace("struct tcm_mask)", f"struct {name})").replace("tcm_masks", name) + "\n"


# The one-rule ablations' map, beside tcm_masks and indexed as it is.
ONE_MAP = "} tcm_masks SEC(\".maps\");\n\n" + masks_shaped("ablate_one")

# id -> (what it does, [(file, old, new), ...]); each old must occur exactly once.
ABLATIONS = {
    "after_parse": (
        "returns after the parse (and the entry's two lookups); the key is kept (a barrier)",
        [(PIPELINE, "    testing_spread(p);\n",
          "    testing_spread(p);\n    asm volatile(\"\" ::\"r\"(p) : \"memory\");\n"
          "    return v;\n")]),
    "after_classify": (
        "returns once the policy's config is found",
        [(PIPELINE, "    if (!pol) {\n        if (g) {",
          "    if (pol) {\n        asm volatile(\"\" ::\"r\"(pol->policy_id));\n"
          "        return v;\n    }\n    if (!pol) {\n        if (g) {")]),
    "after_state": (
        "returns after the clock read and the bucket's lookup",
        [(CHAIN, FOUND, FOUND + "    asm volatile(\"\" ::\"r\"(now), \"r\"(f0));\n"
          "    return TCM_GREEN;\n")]),
    "after_lock": (
        "returns after the clock read, the bucket's lookup and its lock taken and released",
        [(CHAIN, FOUND, FOUND + "    if (flow_lock(f0))\n        flow_unlock(f0);\n"
          "    asm volatile(\"\" ::\"r\"(now));\n    return TCM_GREEN;\n")]),
    "no_clock": (
        "the whole path, the clock read replaced by a counter of 1 us steps (wrong: no clock)",
        [(CHAIN, "__attribute__((noinline)) int chain_meter_packet(",
          "__u64 ablate_ns = 0;\n__attribute__((noinline)) int chain_meter_packet("),
         (CHAIN, CLOCK_LINE, "    __u64 now = (ablate_ns += 1000);\n")]),
    "clock_after_parse": (
        "the clock read after the parse, passed down to chain_meter_packet",
        [(CHAIN, "struct tcm_global_counters *g) {\n    const struct tcm_policy *lp",
          "struct tcm_global_counters *g, __u64 now) {\n    const struct tcm_policy *lp"),
         (CHAIN, CLOCK_LINE, ""),
         (PIPELINE, "    testing_spread(p);\n",
          "    testing_spread(p);\n    __u64 now = clock_now_ns();\n"),
         (CHAIN, "    return chain_meter_packet(pol, key, in, g);",
          "    return chain_meter_packet(pol, key, in, g, clock_now_ns());"),
         (PIPELINE, "chain_or_ext(pol, &p->key, &in, g);",
          "chain_meter_packet(pol, &p->key, &in, g, now);"),
         ("bpf/cgroup_in.bpf.c",
          "chain_or_ext(pol, &p.key, &in, bpf_map_lookup_elem(&tcm_global_stats, &zero));",
          "chain_meter_packet(pol, &p.key, &in, bpf_map_lookup_elem(&tcm_global_stats, &zero),\n"
          "                           clock_now_ns());")]),
    "clock_before_lock": (
        "the clock read after the buckets are found, just before the locks",
        [(CHAIN, CLOCK_LINE, ""),
         (CHAIN, "    if (!chain_lock(lf, n)) {", CLOCK_LINE + "    if (!chain_lock(lf, n)) {")]),
    "classify_inlined": (
        "classify_index inlined into the entry (its cache dropped, for the stack)",
        [(CLASSIFY, "__attribute__((noinline)) int classify_index(",
          "static __always_inline int classify_index("),
         (CLASSIFY, re.compile(r"    struct tcm_class_cache_entry \*c = NULL;.*?(?=    /\* The first shape)",
                               re.S), ""),
         (CLASSIFY, re.compile(r"    if \(c && classify_door.*?(?=    return index;)", re.S),
          "")]),
    "plain_wire": (
        "the plain meter keyed by the frame's source (it parses Ethernet and IP), not a constant",
        [("tests/bench/datapath_bench.cpp",
          "{\"plain_meter_aggregate\", bpf_program__fd(b->progs.bench_plain_meter)}",
          "{\"plain_meter_aggregate\", bpf_program__fd(b->progs.bench_plain_meter_wire)}")]),
    "one_rule_copy": (
        "a mask's rule kept beside it (a copy, filled by the first probe): no hash, no table read",
        [(MAPS, "} tcm_masks SEC(\".maps\");\n",
          "} tcm_masks SEC(\".maps\");\n\nstruct ablate_one {\n    __u32 valid;\n"
          "    struct tcm_rule rule;\n    struct tcm_class_key key;\n};\n"
          + ONE_MAP[len("} tcm_masks SEC(\".maps\");\n"):]),
         (CLASSIFY, PROBE, """    struct ablate_one *o = bpf_map_lookup_elem(&ablate_one, &idx);
    if (!o)
        return 1;
    const __u32 *kw = (const __u32 *)ctx->key, *mw = (const __u32 *)&m->mask;
    struct tcm_rule *r;
    if (o->valid) {
        const __u32 *ow = (const __u32 *)&o->key;
        __u32 diff = 0;
#pragma unroll
        for (int k = 0; k < TCM_CLASS_KEY_WORDS; k++)
            diff |= ow[k] ^ (kw[k] & mw[k]);
        r = diff ? NULL : &o->rule;
    } else {
        r = classify_rule(ctx->set, ctx->key, m);
        if (r) {
            __u32 *ow = (__u32 *)&o->key;
#pragma unroll
            for (int k = 0; k < TCM_CLASS_KEY_WORDS; k++)
                ow[k] = kw[k] & mw[k];
            o->rule = *r;
            o->valid = 1;
        }
    }
""")]),
    "one_rule_slot": (
        "a mask's rule slot kept beside it (filled by the first probe), read and checked",
        [(MAPS, "} tcm_masks SEC(\".maps\");\n",
          "} tcm_masks SEC(\".maps\");\n\nstruct ablate_one {\n    __u32 valid;\n"
          "    __u32 slot;\n};\n" + ONE_MAP[len("} tcm_masks SEC(\".maps\");\n"):]),
         (CLASSIFY, "        if (!diff)\n            return &s->rule;\n",
          "        if (!diff) {\n            ablate_at = (home + i) & (TCM_RULE_SLOTS - 1);\n"
          "            return &s->rule;\n        }\n"),
         (CLASSIFY, "static __always_inline struct tcm_rule *classify_rule(",
          """__u32 ablate_at = 0;

static __always_inline struct tcm_rule *ablate_rule_at(__u32 set, const struct tcm_class_key *key,
                                                       const struct tcm_mask *m, __u32 at) {
    __u32 idx = (set & 1) * TCM_RULE_SLOTS + (at & (TCM_RULE_SLOTS - 1));
    struct tcm_rule_slot *s = bpf_map_lookup_elem(&tcm_rule_table, &idx);
    if (!s)
        return NULL;
    const __u32 *sw = (const __u32 *)&s->key;
    __u32 diff = 0;
#pragma unroll
    for (int k = 0; k < TCM_RULE_KEY_WORDS; k++)
        diff |= sw[k] ^ CLASSIFY_WORD(k);
    return diff ? NULL : &s->rule;
}

static __always_inline struct tcm_rule *classify_rule("""),
         (CLASSIFY, PROBE, """    struct ablate_one *o = bpf_map_lookup_elem(&ablate_one, &idx);
    if (!o)
        return 1;
    struct tcm_rule *r = o->valid ? ablate_rule_at(ctx->set, ctx->key, m, o->slot) : NULL;
    if (!r) {
        r = classify_rule(ctx->set, ctx->key, m);
        if (r) {
            o->slot = ablate_at;
            o->valid = 1;
        }
    }
""")]),
}


def replace_once(text, old, new, where):
    if isinstance(old, re.Pattern):
        out, n = old.subn(new.replace("\\", "\\\\"), text)
    else:
        n = text.count(old)
        out = text.replace(old, new)
    if n != 1:
        sys.exit(f"ablate.py: {where}: the text to replace occurs {n} times, not once")
    return out


def sh(cmd, log):
    with open(log, "w") as f:
        if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode:
            sys.exit(f"ablate.py: {' '.join(cmd)} failed: {log}")


def copy_tree():
    """The tracked files into WORK/src, keeping mtimes: only what changed rebuilds."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src, dst = os.path.join(ROOT, f), os.path.join(WORK, "src", f)
        if not os.path.isfile(src):
            continue
        if os.path.exists(dst) and open(src, "rb").read() == open(dst, "rb").read():
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)


def build(name):
    """datapath_bench of the scratch tree as it is now, copied to WORK/bin/NAME."""
    sh(["cmake", "--build", f"{WORK}/build", "-j", str(os.cpu_count()), "--target",
        "datapath_bench"], f"{WORK}/logs/{name}.build.log")
    os.makedirs(f"{WORK}/bin", exist_ok=True)
    shutil.copy2(f"{WORK}/build/tests/datapath_bench", f"{WORK}/bin/{name}")


def ablated_build(aid):
    edits = ABLATIONS[aid][1]
    saved = {}
    try:
        for f, old, new in edits:
            path = os.path.join(WORK, "src", f)
            if f not in saved:
                saved[f] = open(path).read()
            text = open(path).read()
            open(path, "w").write(replace_once(text, old, new, f"{aid}: {f}"))
        build(aid)
    finally:
        for f, text in saved.items():
            open(os.path.join(WORK, "src", f), "w").write(text)


LEAST = re.compile(r"least of the rounds: aggregate (\d+) ns, plain meter (\d+) ns, "
                   r"/ plain meter ([\d.]+)")


def main(argv):
    if argv[:1] == ["-l"]:
        for aid, (desc, _) in ABLATIONS.items():
            print(f"{aid:20} {desc}")
        return 0
    check = argv[:1] == ["-n"]
    ids = argv[1:] if check else argv
    ids = ids or list(ABLATIONS)
    for aid in ids:
        if aid not in ABLATIONS:
            sys.exit(f"ablate.py: no ablation {aid} (-l lists them)")
    if check:
        for aid in ids:
            texts = {}
            for f, old, new in ABLATIONS[aid][1]:
                text = texts.get(f) or open(os.path.join(ROOT, f)).read()
                texts[f] = replace_once(text, old, new, f"{aid}: {f}")
            print(f"{aid}: applies")
        return 0
    os.makedirs(f"{WORK}/logs", exist_ok=True)
    copy_tree()
    if not os.path.exists(f"{WORK}/build/CMakeCache.txt"):
        sh(["cmake", "-S", f"{WORK}/src", "-B", f"{WORK}/build",
            "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], f"{WORK}/logs/configure.log")
    build("unchanged")
    for aid in ids:
        print(f"building {aid}", flush=True)
        ablated_build(aid)
    names = ["unchanged"] + ids
    runs = {n: [] for n in names}
    env = dict(os.environ, TRICOLOR_BENCH_ONLY="hot")
    for r in range(ROUNDS):
        for n in names:
            out = subprocess.run([f"{WORK}/bin/{n}"], env=env, capture_output=True, text=True)
            m = LEAST.search(out.stdout)
            if not m:
                sys.exit(f"ablate.py: {n} printed no least round:\n{out.stdout}{out.stderr}")
            runs[n].append(tuple(float(x) for x in m.groups()))
            print(f"round {r + 1}: {n} aggregate {m[1]} ns, plain meter {m[2]} ns", flush=True)
    for n in names:
        agg, plain, ratio = (statistics.median(x[i] for x in runs[n]) for i in range(3))
        print(f"RESULT name=ablation_{n} aggregate_ns={agg:.0f} plain_meter_ns={plain:.0f} "
              f"ratio={ratio:.2f} runs={len(runs[n])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
