// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_bench: per-packet cost of the data path through BPF_PROG_TEST_RUN, as ratios to an
// empty XDP program measured in the same run. Rounds alternate the programs and the median of
// each figure is reported, so a noisy neighbour on the VM moves baseline and subject alike.
//   RESULT name=<figure> ns=<median> ratio=<to empty XDP>
// TRICOLOR_BENCH_SCALE=1: only the figures at 2^20 flows and of classification;
// TRICOLOR_BENCH_ONLY=flows_top: only flows --top at 2^20.
// TRICOLOR_BENCH_ONLY=2e20: only the per-flow figures at 2^20 flows.
// TRICOLOR_BENCH_ONLY=classify: only classification as shapes grow (TRICOLOR_BENCH_SHAPES).
// TRICOLOR_BENCH_ONLY=hot: only the hot path's ratios to the plain and floor meters (no 2^20
// flows: a minute), for work on the green path; with TRICOLOR_BENCH_SPIN=<figure>, that one
// figure repeated for a profiler (tests/bench/hot_profile.sh) for TRICOLOR_BENCH_SPIN_SECONDS
// (8), and nothing printed but a line when it begins.
#include "bench_meters.h"
#include "packet.hpp"
#include "test_util.hpp"
#include "tricolor/flow_sizing.hpp"
#include "tricolor/datapath.hpp"
#include "tricolor/replay.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>

#include "bench.skel.h"

#include <cstdlib>
#include <cstring>
#include <unistd.h>

using namespace tricolor;
using test::Packet;

namespace {

constexpr int kRounds = 7;
constexpr int kRepeat = 2000000;

double run_repeat(int prog_fd, const std::vector<uint8_t> &frame, int repeat = kRepeat) {
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()), .repeat = repeat);
    if (bpf_prog_test_run_opts(prog_fd, &opts) < 0)
        throw std::runtime_error("test run failed");
    return opts.duration;
}

Policy always_green(uint32_t id, tcm_per per) {
    Policy p = test::policy(id, "bench" + std::to_string(id), Algo::trtcm, TCM_METER_MAX_RATE,
                            TCM_METER_MAX_SIZE, TCM_METER_MAX_SIZE, TCM_METER_MAX_RATE);
    p.per = per;
    p.match.dst = parse_prefix("198.18.0.0/15").value();
    return p;
}

// A chain of @levels (docs/spec.md §9), every level always green: per-src under aggregate (2), then
// a 5-tuple level below (3), then per-dst between source and aggregate (4). The bottom level
// matches the traffic; the others are only_parent.
std::vector<Policy> chain(int levels) {
    static const tcm_per pers[4][4] = {
        {TCM_PER_SRC},
        {TCM_PER_SRC, TCM_PER_AGGREGATE},
        {TCM_PER_5TUPLE, TCM_PER_SRC, TCM_PER_AGGREGATE},
        {TCM_PER_5TUPLE, TCM_PER_SRC, TCM_PER_DST, TCM_PER_AGGREGATE}};
    std::vector<Policy> out;
    for (int i = 0; i < levels; ++i) {
        Policy p = always_green(10 + i, pers[levels - 1][i]);
        p.name = "level" + std::to_string(i);
        if (i > 0) {
            p.match = {};
            p.only_parent = true;
        }
        if (i + 1 < levels)
            p.parent = "level" + std::to_string(i + 1);
        out.push_back(p);
    }
    return out;
}

double median(std::vector<double> v) {
    std::ranges::sort(v);
    return v[v.size() / 2];
}

double ms_since(std::chrono::steady_clock::time_point a) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}

// Control plane, each against raw map syscalls on the same number of entries in the same run.
// @million: a table of 2^20 flows to list (null: not listed).
void control_plane(Datapath *million) {
    const int n = 16000;
    std::vector<Policy> set;
    for (int i = 0; i < n; ++i) {
        Policy p = always_green(i, TCM_PER_AGGREGATE);
        p.name = "p" + std::to_string(i);
        p.match.dst = Prefix{false, {198, 18, uint8_t(i >> 8), uint8_t(i & 0xff)}, 32};
        set.push_back(p);
    }
    DatapathOptions o;
    o.flow_capacity = 1024;
    Datapath dp(o);
    // Baseline: one bpf_map_update_elem per policy into a plain hash.
    int raw = bpf_map_create(BPF_MAP_TYPE_HASH, "bench_raw", 52, 8, 2 * n, nullptr);
    auto a = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < static_cast<uint32_t>(n); ++i) {
        uint8_t key[52] = {};
        std::memcpy(key, &i, 4);
        uint64_t v = i;
        bpf_map_update_elem(raw, key, &v, 0);
    }
    double raw_ms = ms_since(a);
    a = std::chrono::steady_clock::now();
    if (auto r = dp.apply(set); !r)
        throw std::runtime_error(r.error());
    double apply_ms = ms_since(a);
    a = std::chrono::steady_clock::now();
    auto counters = dp.policy_counters();
    double stats_ms = ms_since(a);
    a = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < static_cast<uint32_t>(n); ++i) {
        uint8_t key[52] = {};
        std::memcpy(key, &i, 4);
        uint64_t v;
        bpf_map_lookup_elem(raw, key, &v);
    }
    double raw_lookup_ms = ms_since(a);
    close(raw);
    a = std::chrono::steady_clock::now();
    size_t flows = million ? million->flows().size() : 0;
    double flows_ms = ms_since(a);
    // One policy changed among n, then removed and added back: what a `policy set|del|add`
    // costs the data path (the CLI's whole cost is tests/bench/policy_bench.sh), against one
    // bpf_map_update_elem.
    std::vector<double> change_us, remove_us, add_us, raw_us;
    Policy one = set[n / 2];
    for (int round = 0; round < 200; ++round) {
        one.meter.cir = 8000000 + 8000 * (round % 7);
        auto t = std::chrono::steady_clock::now();
        if (auto r = dp.upsert(one); !r)
            throw std::runtime_error(r.error());
        change_us.push_back(ms_since(t) * 1000);
        t = std::chrono::steady_clock::now();
        if (auto r = dp.remove(one.id); !r)
            throw std::runtime_error(r.error());
        remove_us.push_back(ms_since(t) * 1000);
        t = std::chrono::steady_clock::now();
        if (auto r = dp.upsert(one); !r)
            throw std::runtime_error(r.error());
        add_us.push_back(ms_since(t) * 1000);
        int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "bench_one", 52, 8, 4, nullptr);
        uint8_t key[52] = {};
        uint64_t v = 1;
        t = std::chrono::steady_clock::now();
        bpf_map_update_elem(fd, key, &v, 0);
        raw_us.push_back(ms_since(t) * 1000);
        close(fd);
    }
    double raw_one = median(raw_us);
    std::printf("%-34s %10s %12s\n", "control plane", "ms", "x raw syscalls");
    std::printf("%-34s %10.1f %12.2f\n", "apply 16k policies", apply_ms, apply_ms / raw_ms);
    std::printf("%-34s %10.1f %12.2f\n", "stats of 16k policies", stats_ms,
                stats_ms / raw_lookup_ms);
    std::printf("%-34s %10.3f %12.2f\n", "change one of 16k", median(change_us) / 1000,
                median(change_us) / raw_one);
    std::printf("%-34s %10.3f %12.2f\n", "remove one of 16k", median(remove_us) / 1000,
                median(remove_us) / raw_one);
    std::printf("%-34s %10.3f %12.2f\n", "add one to 16k", median(add_us) / 1000,
                median(add_us) / raw_one);
    if (million)
        std::printf("%-34s %10.1f %12s   (%zu flows)\n", "list all flows", flows_ms, "-", flows);
    std::printf("RESULT name=apply_16k_policies ms=%.1f ratio=%.2f baseline=16k_map_updates\n",
                apply_ms, apply_ms / raw_ms);
    std::printf("RESULT name=stats_16k_policies ms=%.1f ratio=%.2f baseline=16k_map_lookups\n",
                stats_ms, stats_ms / raw_lookup_ms);
    for (auto [name, v] : {std::pair{"change", &change_us}, std::pair{"remove", &remove_us},
                           std::pair{"add", &add_us}})
        std::printf("RESULT name=%s_one_of_16k_policies us=%.1f ratio=%.1f "
                    "baseline=one_map_update\n",
                    name, median(*v), median(*v) / raw_one);
    if (million)
        std::printf("RESULT name=list_1M_flows ms=%.1f flows=%zu\n", flows_ms, flows);
    (void)counters;
}

// Two CPUs on one flow with the clock stopped: any byte admitted beyond CBS + EBS would be a
// lost update. Target 0.
void over_admission(const std::vector<uint8_t> &frame) {
    DatapathOptions o;
    o.testing = true;
    o.flow_capacity = 16;
    Datapath dp(o);
    dp.set_clock(1000000000);
    Policy p;
    p.id = 1;
    p.name = "shared";
    p.meter.algo = Algo::srtcm;
    p.meter.cir = 8;
    p.meter.cbs = 1000000;
    p.meter.ebs = 1000000;
    if (auto r = dp.apply({p}); !r)
        throw std::runtime_error(r.error());
    test::run_on_two_cpus(dp.xdp_prog_fd(), frame, 1000000);
    auto c = dp.policy_counters()[1];
    int64_t admitted = static_cast<int64_t>(c.bytes[TCM_GREEN] + c.bytes[TCM_YELLOW]);
    int64_t over = admitted - 2000000;
    std::printf(
        "two CPUs, one flow, 2x10^6 packets: admitted %lld of 2000000 bytes, over-admission "
        "%lld bytes, lock timeouts %llu\n",
        static_cast<long long>(admitted), static_cast<long long>(std::max<int64_t>(over, 0)),
        static_cast<unsigned long long>(dp.global_counters().lock_timeouts));
    std::printf("RESULT name=two_cpu_over_admission bytes=%lld target=0\n",
                static_cast<long long>(std::max<int64_t>(over, 0)));
}

// The same on a 3-level chain (5-tuple under source under aggregate, one flow at each level):
// every level must give out exactly what its buckets held, no more.
void chain_over_admission(const std::vector<uint8_t> &frame) {
    DatapathOptions o;
    o.testing = true;
    o.flow_capacity = 16;
    Datapath dp(o);
    dp.set_clock(1000000000);
    const uint64_t sizes[3] = {300000, 600000, 1000000}; // conn, user, link: CBS = EBS
    const tcm_per pers[3] = {TCM_PER_5TUPLE, TCM_PER_SRC, TCM_PER_AGGREGATE};
    std::vector<Policy> set;
    for (int i = 0; i < 3; ++i) {
        Policy p;
        p.id = 1 + i;
        p.name = "level" + std::to_string(i);
        p.meter.algo = Algo::srtcm;
        p.meter.cir = 8;
        p.meter.cbs = sizes[i];
        p.meter.ebs = sizes[i];
        p.per = pers[i];
        if (i > 0)
            p.only_parent = true;
        if (i < 2)
            p.parent = "level" + std::to_string(i + 1);
        set.push_back(p);
    }
    if (auto r = dp.apply(set); !r)
        throw std::runtime_error(r.error());
    test::run_on_two_cpus(dp.xdp_prog_fd(), frame, 1000000);
    auto c = dp.policy_counters();
    int64_t worst = 0;
    for (int i = 0; i < 3; ++i) {
        int64_t admitted =
            static_cast<int64_t>(c[1 + i].bytes[TCM_GREEN] + c[1 + i].bytes[TCM_YELLOW]);
        worst = std::max(worst, admitted - static_cast<int64_t>(2 * sizes[0]));
    }
    std::printf("two CPUs, one 3-level chain, 2x10^6 packets: admitted %llu bytes at every level "
                "(the child's CBS + EBS: %llu), lock timeouts %llu\n",
                static_cast<unsigned long long>(c[1].bytes[TCM_GREEN] + c[1].bytes[TCM_YELLOW]),
                static_cast<unsigned long long>(2 * sizes[0]),
                static_cast<unsigned long long>(dp.global_counters().lock_timeouts));
    std::printf("RESULT name=two_cpu_chain_over_admission bytes=%lld target=0\n",
                static_cast<long long>(std::max<int64_t>(worst, 0)));
}

// Per-flow state at 2^20 flows, against a bare 2^20-entry hash looked up and written in the
// same scattered order (bench_hash_2e20), for each key kind and family: one data path each,
// every flow created by a first pass, then rounds alternating the baseline and the subjects.
void million_flows(bench *b) {
    // BENCH_INDEX's chunks: 256 of 4096 flows, made here as a daemon would add them.
    for (uint32_t c = 0; c < 256; ++c) {
        int chunk = bpf_map_create(BPF_MAP_TYPE_ARRAY, "bench_chunk", 4, 24 + sizeof(tcm_flow),
                                   4096, nullptr);
        int outer = bpf_map__fd(b->maps.bench_flow_index_chunked_chunks);
        if (chunk < 0 || bpf_map_update_elem(outer, &c, &chunk, 0) != 0)
            throw std::runtime_error("cannot make BENCH_INDEX's chunks");
        close(chunk);
    }
    int empty_fd = bpf_program__fd(b->progs.bench_empty);
    int bare_fd = bpf_program__fd(b->progs.bench_hash_2e20);
    // Steps from the bare hash towards tcm_flows' layout, one change each (bpf/bench.bpf.c).
    const std::pair<const char *, bpf_program *> steps[] = {
        {"hash_k44_v8", b->progs.bench_hash_k44_v8},
        {"hash_k44_v32", b->progs.bench_hash_k44_v32},
        {"hash_k44_v80", b->progs.bench_hash_k44_v80},
        {"hash_k44_v80_prealloc", b->progs.bench_hash_k44_v80_prealloc},
        {"hash_k44_v80_locked", b->progs.bench_hash_k44_v80_locked},
        {"hash_k44_v80_locked_clock", b->progs.bench_hash_k44_v80_locked_clock},
        {"hash_k44_v80_clock_first", b->progs.bench_hash_k44_v80_clock_first},
        {"hash_bare_clock", b->progs.bench_hash_2e20_clock},
        // A green packet's memory work alone, by key size (bench.bpf.c, BENCH_FLOW).
        {"flow_k44", b->progs.bench_flow_k44},
        {"flow_k20", b->progs.bench_flow_k20},
        {"flow_k8", b->progs.bench_flow_k8},
        // The 20-byte key in an array of slots probed by our own hash (BENCH_SLOTS).
        {"flow_slots", b->progs.bench_flow_slots},
        // The same behind an index of 8-byte entries, the flows in a dense store (BENCH_INDEX).
        {"flow_index", b->progs.bench_flow_index},
        {"flow_index_chunked", b->progs.bench_flow_index_chunked},
        // The slots at a half, two thirds and four fifths full, in tables of any size.
        {"flow_slots_l50", b->progs.bench_flow_slots_l50},
        {"flow_slots_l67", b->progs.bench_flow_slots_l67},
        {"flow_slots_l80", b->progs.bench_flow_slots_l80},
        // The same with work before or after the lookup, and on one key (BENCH_FLOW's @work).
        {"flow_k44_one", b->progs.bench_flow_k44_one},
        {"flow_k44_pre", b->progs.bench_flow_k44_pre},
        {"flow_k44_pre_one", b->progs.bench_flow_k44_pre_one},
        {"flow_k44_post", b->progs.bench_flow_k44_post},
        {"flow_k44_post_one", b->progs.bench_flow_k44_post_one}};
    struct Case {
        const char *name;
        tcm_per per;
        bool v6;
    };
    const Case cases[] = {
        {"src_v4", TCM_PER_SRC, false},       {"dst_v4", TCM_PER_DST, false},
        {"5tuple_v4", TCM_PER_5TUPLE, false}, {"src_v6", TCM_PER_SRC, true},
        {"dst_v6", TCM_PER_DST, true},        {"5tuple_v6", TCM_PER_5TUPLE, true}};
    auto v4 = Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1000, 2000).l3_size(64).build();
    auto v6 = Packet().ipv6("2001:db8::1", "2001:db8:1::1").udp(1000, 2000).l3_size(64).build();
    std::vector<std::unique_ptr<Datapath>> dps;
    for (const auto &c : cases) {
        DatapathOptions o;
        o.flow_capacity = 1 << 20;
        // The address that spreads is the key's; the policy matches on the other one.
        o.bench_spread = c.per == TCM_PER_DST ? 2 : 1;
        dps.push_back(std::make_unique<Datapath>(o));
        Policy p = always_green(1, c.per);
        p.match = {};
        auto &on = c.per == TCM_PER_DST ? p.match.src : p.match.dst;
        on = parse_prefix(c.v6 ? "2001:db8::/32" : "198.18.0.0/15").value();
        if (auto r = dps.back()->apply({p}); !r)
            throw std::runtime_error(r.error());
        run_repeat(dps.back()->xdp_prog_fd(), c.v6 ? v6 : v4, 1 << 20);
    }
    // One flow per source and the plain meter on one key: the same work without the misses.
    DatapathOptions one_o;
    Datapath one_flow(one_o);
    if (auto r = one_flow.apply({always_green(1, TCM_PER_SRC)}); !r)
        throw std::runtime_error(r.error());
    int plain_one_fd = bpf_program__fd(b->progs.bench_plain_meter);
    run_repeat(bare_fd, v4, 1 << 20);
    int plain_fd = bpf_program__fd(b->progs.bench_plain_meter_2e20);
    run_repeat(plain_fd, v4, 1 << 20); // every source once: the table full, as the flows are
    for (const auto &[name, prog] : steps)
        run_repeat(bpf_program__fd(prog), v4, 1 << 20);
    std::map<std::string, std::vector<double>> ns;
    for (int round = 0; round < kRounds; ++round) {
        ns["empty_xdp"].push_back(run_repeat(empty_fd, v4));
        ns["bare_hash"].push_back(run_repeat(bare_fd, v4));
        ns["plain_meter_2e20"].push_back(run_repeat(plain_fd, v4));
        ns["plain_meter_one"].push_back(run_repeat(plain_one_fd, v4));
        ns["one_flow"].push_back(run_repeat(one_flow.xdp_prog_fd(), v4));
        for (const auto &[name, prog] : steps)
            ns[name].push_back(run_repeat(bpf_program__fd(prog), v4));
        for (size_t i = 0; i < std::size(cases); ++i)
            ns[cases[i].name].push_back(run_repeat(dps[i]->xdp_prog_fd(), cases[i].v6 ? v6 : v4));
    }
    double bare = median(ns["bare_hash"]);
    std::printf("%-30s %10s %10s %10s\n", "2^20 flows (median of 7)", "ns/packet", "x bare",
                "flows");
    std::printf("%-30s %10.1f %10s\n", "empty XDP", median(ns["empty_xdp"]), "");
    std::printf("%-30s %10.1f %10.2f\n", "bare 2^20 hash lookup+write", bare, 1.0);
    std::printf("RESULT name=bare_hash_2e20 ns=%.1f ratio_to_bare=1.00 ratio_to_empty=%.2f\n", bare,
                bare / median(ns["empty_xdp"]));
    for (const auto &[name, prog] : steps) {
        double m = median(ns[name]);
        std::printf("%-30s %10.1f %10.2f\n", name, m, m / bare);
        std::printf("RESULT name=%s_2e20 ns=%.1f ratio_to_bare=%.2f\n", name, m, m / bare);
    }
    for (size_t i = 0; i < std::size(cases); ++i) {
        double m = median(ns[cases[i].name]);
        size_t flows = dps[i]->count_flows();
        std::printf("%-30s %10.1f %10.2f %10zu\n",
                    fmt::format("green per {} at 2^20", cases[i].name).c_str(), m, m / bare, flows);
        std::printf("RESULT name=per_%s_2e20 ns=%.1f ratio_to_bare=%.2f flows=%zu target=1.5\n",
                    cases[i].name, m, m / bare, flows);
    }
    // The hot path's goal (docs/datapath.md, "Against a plain meter"): each per-key figure at
    // most the plain eBPF meter over 2^20 sources in the same order.
    double plain = median(ns["plain_meter_2e20"]);
    std::printf("%-30s %10.1f %10.2f\n", "plain eBPF meter at 2^20", plain, plain / bare);
    for (const auto &c : cases) {
        double m = median(ns[c.name]);
        std::printf("RESULT name=per_%s_2e20_vs_plain_meter ratio=%.2f plain_ns=%.1f target=1.0\n",
                    c.name, m / plain, plain);
    }
    // Where the per-key gap is (docs/datapath.md, "Where the per-flow gap is"): what
    // 2^20 keys add to one key, tricolor's and the plain meter's, and what one key costs each;
    // and the memory work alone by key size, against the plain meter at 2^20.
    double one = median(ns["one_flow"]), plain_one = median(ns["plain_meter_one"]);
    double src = median(ns["src_v4"]);
    std::printf("%-30s %10.1f\n", "green per src_v4, 1 flow", one);
    std::printf("%-30s %10.1f\n", "plain eBPF meter, 1 key", plain_one);
    std::printf("RESULT name=per_src_v4_2e20_split misses_ns=%.1f plain_misses_ns=%.1f "
                "one_flow_ns=%.1f plain_one_ns=%.1f\n",
                src - one, plain - plain_one, one, plain_one);
    for (const char *k :
         {"flow_k44", "flow_k20", "flow_k8", "flow_slots", "flow_index", "flow_index_chunked",
          "flow_slots_l50", "flow_slots_l67", "flow_slots_l80"})
        std::printf("RESULT name=%s_2e20_vs_plain_meter ratio=%.2f\n", k, median(ns[k]) / plain);
    // What work costs on one key and at 2^20 keys: the mock's added before and after its lookup,
    // and the plain meter's beyond the mock's (its spin lock, divisions and compares).
    double mock = median(ns["flow_k44"]), mock_one = median(ns["flow_k44_one"]);
    std::printf("RESULT name=flow_work_2e20 pre_one_ns=%.1f pre_2e20_ns=%.1f post_one_ns=%.1f "
                "post_2e20_ns=%.1f plain_one_ns=%.1f plain_2e20_ns=%.1f\n",
                median(ns["flow_k44_pre_one"]) - mock_one, median(ns["flow_k44_pre"]) - mock,
                median(ns["flow_k44_post_one"]) - mock_one, median(ns["flow_k44_post"]) - mock,
                plain_one - mock_one, plain - mock);
    std::printf("\n");
}

// Green per source by the flows the table holds (docs/benchmarks.md, "Footprint"): 1, 10^3,
// 10^5 and 2^20 sources in a scattered order, each in a data path whose table has the capacity
// the daemon's settles at for that many (flow_capacity_settled: from 16384, at most 2^20),
// against the plain eBPF meter over as many keys in the same order, alternated.
void flows_by_count() {
    auto v4 = Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1000, 2000).l3_size(64).build();
    std::printf("%-22s %10s %10s %12s %10s %10s\n", "green per src_v4", "flows", "capacity",
                "ns/packet", "plain ns", "ratio");
    for (auto [flows, name] : {std::pair{1u, "1"}, std::pair{1000u, "1e3"},
                               std::pair{100000u, "1e5"}, std::pair{1u << 20, "2e20"}}) {
        const uint32_t capacity = flow_capacity_settled(flows, TCM_START_FLOWS, 1u << 20);
        DatapathOptions o;
        o.flow_capacity = capacity;
        o.bench_spread = flows > 1 ? 1 : 0;
        o.bench_flows = flows > 1 ? flows : 1u << 20;
        Datapath dp(o);
        if (auto r = dp.apply({always_green(1, TCM_PER_SRC)}); !r)
            throw std::runtime_error(r.error());
        bench *plain = bench::open();
        if (!plain)
            throw std::runtime_error("cannot open the baseline programs");
        plain->rodata->plain_flows = flows;
        if (bench::load(plain) != 0)
            throw std::runtime_error("cannot load the baseline programs");
        int plain_fd = bpf_program__fd(flows > 1 ? plain->progs.bench_plain_meter_2e20
                                                 : plain->progs.bench_plain_meter);
        // Every flow made: each packet of this pass is its flow's first (its slot claimed and
        // filled), as the plain meter's is its key's (an insert into its hash).
        const double first = run_repeat(dp.xdp_prog_fd(), v4, static_cast<int>(flows));
        const double plain_first = run_repeat(plain_fd, v4, static_cast<int>(flows));
        std::vector<double> ns, plain_ns;
        for (int round = 0; round < kRounds; ++round) {
            ns.push_back(run_repeat(dp.xdp_prog_fd(), v4));
            plain_ns.push_back(run_repeat(plain_fd, v4));
        }
        const double m = median(ns), pm = median(plain_ns);
        const size_t counted = dp.count_flows();
        std::printf("%-22s %10zu %10u %12.1f %10.1f %10.2f\n", "", counted, capacity, m, pm,
                    m / pm);
        // The goal is at 2^20 (spec §15); with fewer, the misses the table saves are fewer.
        std::printf("RESULT name=per_src_v4_%s_flows ns=%.1f plain_ns=%.1f ratio=%.2f flows=%zu "
                    "capacity=%u first_ns=%.1f plain_first_ns=%.1f%s\n",
                    name, m, pm, m / pm, counted, capacity, first, plain_first,
                    flows == 1u << 20 ? " target=1.0" : "");
        bench::destroy(plain);
    }
    std::printf("\n");
}

// flows --top 10 at 2^20 flows (docs/datapath.md, "flows --top at 2^20"): Datapath::top_flows,
// what the daemon's flows command calls, walking the table against answering from the heavy
// hitters, after the two passes that give a threshold. The table is filled through the data
// path: every flow one 64-byte packet, then a staircase of heavy hitters (the first 4096 flows
// of the spreading order get a 1500-byte packet, the first 1024 another, ... down to 1), each
// step followed by 64-byte packets for the rest of the 2^20, so that the spreading counter
// comes back to the first flow. Medians of 7 queries each; also what a pass costs.
void flows_top(const std::vector<uint8_t> &small, const std::vector<uint8_t> &big) {
    DatapathOptions o;
    o.flow_capacity = 1 << 20;
    o.bench_spread = 1;
    Datapath dp(o);
    if (auto r = dp.apply({always_green(1, TCM_PER_SRC)}); !r)
        throw std::runtime_error(r.error());
    run_repeat(dp.xdp_prog_fd(), small, 1 << 20);
    for (int r = 4096; r >= 1; r /= 4) {
        run_repeat(dp.xdp_prog_fd(), big, r);
        run_repeat(dp.xdp_prog_fd(), small, (1 << 20) - r);
    }
    std::vector<double> pass_ms, full_ms, hot_ms;
    for (int i = 0; i < 2; ++i) { // the first picks the threshold, the second installs it
        auto a = std::chrono::steady_clock::now();
        dp.count_flows();
        pass_ms.push_back(ms_since(a));
    }
    std::vector<Flow> full, hot;
    std::string via;
    for (int round = 0; round < kRounds; ++round) {
        auto a = std::chrono::steady_clock::now();
        full = dp.top_flows(10, {}, true);
        full_ms.push_back(ms_since(a));
        a = std::chrono::steady_clock::now();
        hot = dp.top_flows(10, {}, false, &via);
        hot_ms.push_back(ms_since(a));
    }
    bool same = full.size() == hot.size() && via == "hot";
    for (size_t i = 0; same && i < full.size(); ++i)
        same = std::memcmp(&full[i].key, &hot[i].key, sizeof(tcm_flow_key)) == 0 &&
               flow_bytes(full[i].state) == flow_bytes(hot[i].state);
    auto t = dp.top_tracking();
    double f = median(full_ms), h = median(hot_ms);
    std::printf("%-34s %10s %10s %10s\n", "flows --top 10 at 2^20 (median)", "walk ms", "hot ms",
                "x faster");
    std::printf("%-34s %10.1f %10.2f %10.0f   (%zu candidates of %llu bytes or more; %s)\n", "", f,
                h, f / h, t.candidates, static_cast<unsigned long long>(t.threshold),
                same ? "same list" : "LISTS DIFFER");
    std::printf("%-34s %10.1f\n", "a pass over 2^20 flows, ms", median(pass_ms));
    std::printf("RESULT name=flows_top10_2e20 full_ms=%.1f tracked_ms=%.2f ratio=%.0f "
                "candidates=%zu same=%d target_ms=50\n",
                f, h, f / h, t.candidates, same ? 1 : 0);
    std::printf("RESULT name=flow_pass_2e20 ms=%.1f flows=%zu\n\n", median(pass_ms),
                dp.counted_flows());
    if (!same)
        throw std::runtime_error("flows --top from the heavy hitters differs from the walk");
}

// Classification as match shapes grow (docs/spec.md §3's tuple space): @n policies of @n
// distinct shapes (destination prefixes /1../32, with and without a port), the one that matches
// ranked last; a matched packet, an unmatched one, and one of a new key every time (the cache
// misses: the probes' cost plus filling the cache). Ratios to one shape: matched to matched,
// unmatched (and new keys, also unmatched) to unmatched.
void classification(int empty_fd) {
    // TRICOLOR_BENCH_SHAPES=a,b,...: other counts of shapes (the first should be 1: the ratios'
    // base).
    std::vector<int> counts = {1, 8, 16, 32, 64};
    if (const char *env = std::getenv("TRICOLOR_BENCH_SHAPES")) {
        counts.clear();
        std::string list = env;
        for (size_t at = 0; at < list.size();) {
            size_t end = list.find(',', at);
            counts.push_back(std::stoi(list.substr(at, end - at)));
            at = end == std::string::npos ? list.size() : end + 1;
        }
    }
    // 198.19.255.1 is the destination; a shape's prefix differs from it in its last bit.
    const uint32_t dst = 0xc613ff01;
    auto make_set = [&](int n) {
        std::vector<Policy> set;
        Policy catcher = always_green(1000, TCM_PER_AGGREGATE);
        catcher.name = "catcher";
        catcher.match = {};
        catcher.match.src = parse_prefix("198.18.0.0/16").value();
        catcher.priority = 1; // after every other policy
        for (int i = 0; i + 1 < n; ++i) {
            Policy p = always_green(i, TCM_PER_AGGREGATE);
            p.match = {};
            int len = 32 - i / 2;
            uint32_t a = (dst ^ (1u << (32 - len))) & (len == 32 ? ~0u : ~((1u << (32 - len)) - 1));
            p.match.dst = Prefix{false,
                                 {uint8_t(a >> 24), uint8_t(a >> 16), uint8_t(a >> 8), uint8_t(a)},
                                 uint8_t(len)};
            if (i % 2)
                p.match.dport = PortRange{9, 9};
            set.push_back(p);
        }
        set.push_back(catcher);
        return set;
    };
    auto matched = Packet().ipv4("198.18.0.1", "198.19.255.1").udp(1000, 2000).l3_size(64).build();
    auto unmatched =
        Packet().ipv4("198.19.0.1", "198.19.255.1").udp(1000, 2000).l3_size(64).build();
    std::vector<std::unique_ptr<Datapath>> dps, fresh;
    for (int n : counts) {
        DatapathOptions o;
        o.flow_capacity = 1024;
        dps.push_back(std::make_unique<Datapath>(o));
        o.bench_spread = 1; // every packet a new source: a new key for the cache
        fresh.push_back(std::make_unique<Datapath>(o));
        for (auto *dp : {dps.back().get(), fresh.back().get()})
            if (auto r = dp->apply(make_set(n)); !r)
                throw std::runtime_error(r.error());
    }
    std::map<std::string, std::vector<double>> ns;
    for (int round = 0; round < kRounds; ++round) {
        ns["empty_xdp"].push_back(run_repeat(empty_fd, matched));
        for (size_t i = 0; i < std::size(counts); ++i) {
            ns[fmt::format("matched_{}", counts[i])].push_back(
                run_repeat(dps[i]->xdp_prog_fd(), matched));
            ns[fmt::format("unmatched_{}", counts[i])].push_back(
                run_repeat(dps[i]->xdp_prog_fd(), unmatched));
            ns[fmt::format("unmatched_new_keys_{}", counts[i])].push_back(
                run_repeat(fresh[i]->xdp_prog_fd(), unmatched, 1 << 18));
        }
    }
    double one = median(ns["matched_1"]), one_unmatched = median(ns["unmatched_1"]);
    std::printf("%-30s %10s %10s %10s %10s\n", "shapes (median of 7)", "matched", "unmatched",
                "new keys", "x 1 shape");
    for (int n : counts) {
        double m = median(ns[fmt::format("matched_{}", n)]),
               u = median(ns[fmt::format("unmatched_{}", n)]),
               f = median(ns[fmt::format("unmatched_new_keys_{}", n)]);
        std::printf("%-30d %10.1f %10.1f %10.1f %5.2f/%4.2f\n", n, m, u, f, m / one,
                    u / one_unmatched);
        std::printf("RESULT name=classify_%d_shapes matched_ns=%.1f unmatched_ns=%.1f "
                    "new_keys_ns=%.1f matched_ratio=%.2f unmatched_ratio=%.2f "
                    "new_keys_ratio=%.2f%s\n",
                    n, m, u, f, m / one, u / one_unmatched, f / one_unmatched,
                    n == 64 ? " target=1.2" : "");
    }
    std::printf("\n");
}
// The hot path's four ratios alone (docs/datapath.md, "Against a plain meter"), without the
// million flows: what a change to the green path is judged by while it is made. More rounds
// than the full run, the same alternation.
void hot_path(bench *b) {
    DatapathOptions o;
    o.flow_capacity = 1024;
    Datapath agg(o), per_src(o);
    if (auto r = agg.apply({always_green(1, TCM_PER_AGGREGATE)}); !r)
        throw std::runtime_error(r.error());
    if (auto r = per_src.apply({always_green(1, TCM_PER_SRC)}); !r)
        throw std::runtime_error(r.error());
    auto frame = Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1000, 2000).l3_size(64).build();
    const std::pair<const char *, int> progs[] = {
        {"empty_xdp", bpf_program__fd(b->progs.bench_empty)},
        {"plain_meter_aggregate", bpf_program__fd(b->progs.bench_plain_meter)},
        {"floor_meter", bpf_program__fd(b->progs.bench_floor_meter)},
        {"green_aggregate_xdp", agg.xdp_prog_fd()},
        {"green_per_src_1_flow", per_src.xdp_prog_fd()},
        {"flow_k44_one", bpf_program__fd(b->progs.bench_flow_k44_one)},
        {"flow_k20_one", bpf_program__fd(b->progs.bench_flow_k20_one)},
        {"flow_k8_one", bpf_program__fd(b->progs.bench_flow_k8_one)},
        {"flow_slots_one", bpf_program__fd(b->progs.bench_flow_slots_one)}};
    if (const char *spin = std::getenv("TRICOLOR_BENCH_SPIN")) { // one figure, for `perf record`
        // For TRICOLOR_BENCH_SPIN_SECONDS (8), after a line that says it has begun: a profiler
        // that starts on that line samples the figure alone, not the loading before it (the
        // verifier) nor the idle after it, however fast the host runs the figure.
        const char *secs_env = std::getenv("TRICOLOR_BENCH_SPIN_SECONDS");
        const auto secs = std::chrono::seconds(secs_env ? std::atoi(secs_env) : 8);
        for (const auto &[name, fd] : progs)
            if (std::string(name) == spin) {
                std::printf("spinning %s\n", spin);
                std::fflush(stdout);
                const auto end = std::chrono::steady_clock::now() + secs;
                while (std::chrono::steady_clock::now() < end)
                    run_repeat(fd, frame);
            }
        return;
    }
    std::map<std::string, std::vector<double>> ns;
    for (int round = 0; round < 3 * kRounds; ++round)
        for (const auto &[name, fd] : progs)
            ns[name].push_back(run_repeat(fd, frame, kRepeat / 2));
    for (const auto &[name, fd] : progs)
        std::printf("%-30s %10.1f\n", name, median(ns[name]));
    double a = median(ns["green_aggregate_xdp"]);
    std::printf("aggregate / plain meter %.2f, / floor meter %.2f; one flow / aggregate %.2f\n",
                a / median(ns["plain_meter_aggregate"]), a / median(ns["floor_meter"]),
                median(ns["green_per_src_1_flow"]) / a);
    auto least = [&](const char *n) { return *std::min_element(ns[n].begin(), ns[n].end()); };
    std::printf("least of the rounds: aggregate %.0f ns, plain meter %.0f ns, / plain meter %.2f, "
                "one flow / aggregate %.2f\n",
                least("green_aggregate_xdp"), least("plain_meter_aggregate"),
                least("green_aggregate_xdp") / least("plain_meter_aggregate"),
                least("green_per_src_1_flow") / least("green_aggregate_xdp"));
}
} // namespace

int main() {
    quiet_libbpf_logging();
    bench *baseline = bench::open_and_load();
    if (!baseline) {
        std::fprintf(stderr, "cannot load the baseline programs (needs root)\n");
        return 1;
    }
    int empty_fd = bpf_program__fd(baseline->progs.bench_empty);
    int clock_fd = bpf_program__fd(baseline->progs.bench_clock);
    int plain_fd = bpf_program__fd(baseline->progs.bench_plain_meter);
    int floor_fd = bpf_program__fd(baseline->progs.bench_floor_meter);
    {
        // The floor meter's one bucket: 1 byte per ns, 1 MB, full (bench.bpf.c's units).
        floor_meter f{};
        f.rate = 1ull << 32;
        f.size = f.tokens = 1000000ull << 32;
        uint32_t zero = 0;
        bpf_map_update_elem(bpf_map__fd(baseline->maps.floor_meters), &zero, &f, BPF_ANY);
    }
    auto small = Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1000, 2000).l3_size(64).build();
    auto big = Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1000, 2000).l3_size(1500).build();
    const char *only_env = std::getenv("TRICOLOR_BENCH_ONLY");
    const std::string only = only_env ? only_env : "";
    if (only == "flows_top") {
        flows_top(small, big);
        return 0;
    }
    if (only == "2e20") {
        million_flows(baseline);
        return 0;
    }
    if (only == "footprint") {
        flows_by_count();
        return 0;
    }
    if (only == "classify") {
        classification(empty_fd);
        return 0;
    }
    if (std::getenv("TRICOLOR_BENCH_SCALE")) { // only the figures of scale (issue work)
        million_flows(baseline);
        classification(empty_fd);
        flows_top(small, big);
        return 0;
    }
    if (only == "hot") {
        hot_path(baseline);
        return 0;
    }
    if (std::getenv("TRICOLOR_BENCH_CONTROL")) { // only the policy set's figures
        control_plane(nullptr);
        return 0;
    }

    DatapathOptions o; // the real clock, as in production
    o.flow_capacity = 1 << 20;
    Datapath none(o), agg(o), per_src(o), agg_aqm(o);
    DatapathOptions spread = o;
    spread.bench_spread = 1;
    Datapath million(spread);
    if (auto r = agg.apply({always_green(1, TCM_PER_AGGREGATE)}); !r)
        throw std::runtime_error(r.error());
    Policy with_aqm = always_green(1, TCM_PER_AGGREGATE);
    with_aqm.aqm = TCM_AQM_ECN; // docs/spec.md §8: the signal's cost on a green packet
    if (auto r = agg_aqm.apply({with_aqm}); !r)
        throw std::runtime_error(r.error());
    if (auto r = per_src.apply({always_green(1, TCM_PER_SRC)}); !r)
        throw std::runtime_error(r.error());
    if (auto r = million.apply({always_green(1, TCM_PER_SRC)}); !r)
        throw std::runtime_error(r.error());
    // Hierarchies: each chain in its own data path, measured in the same rounds as per_src.
    std::vector<std::unique_ptr<Datapath>> chains;
    for (int levels = 2; levels <= TCM_MAX_LEVELS; ++levels) {
        chains.push_back(std::make_unique<Datapath>(o));
        if (auto r = chains.back()->apply(chain(levels)); !r)
            throw std::runtime_error(r.error());
    }

    // docs/spec.md §11: the same always-green policy matching this process's cgroup instead of
    // the destination, on tc (test runs' sockets belong to the caller's cgroup). Only where
    // cgroup v2 is mounted.
    std::unique_ptr<test::TestCgroup> cg;
    std::unique_ptr<test::InCgroup> in_cg;
    Datapath agg_cgroup(o);
    if (!test::cgroup2_mount_or_empty().empty()) {
        cg = std::make_unique<test::TestCgroup>(fmt::format("tricolor-bench-{}", getpid()));
        Policy by_cgroup = always_green(1, TCM_PER_AGGREGATE);
        by_cgroup.match = Match{};
        by_cgroup.match.cgroup = cg->path;
        if (auto r = agg_cgroup.apply({by_cgroup}); !r)
            throw std::runtime_error(r.error());
        in_cg = std::make_unique<test::InCgroup>(*cg);
    }

    auto frame = Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1000, 2000).l3_size(64).build();
    // A million flows: the spreading program creates one per source on its first pass.
    std::fprintf(stderr, "creating 1M flows...\n");
    run_repeat(million.xdp_prog_fd(), frame, 1 << 20);
    size_t flows = million.flows().size();

    std::map<std::string, std::vector<double>> ns;
    for (int round = 0; round < kRounds; ++round) {
        ns["empty_xdp"].push_back(run_repeat(empty_fd, frame));
        ns["clock_only"].push_back(run_repeat(clock_fd, frame));
        ns["plain_meter_aggregate"].push_back(run_repeat(plain_fd, frame));
        ns["floor_meter"].push_back(run_repeat(floor_fd, frame));
        ns["parse_only"].push_back(run_repeat(none.xdp_prog_fd(), frame));
        ns["green_aggregate_xdp"].push_back(run_repeat(agg.xdp_prog_fd(), frame));
        ns["green_aggregate_tc"].push_back(run_repeat(agg.tc_prog_fd(), frame));
        if (cg)
            ns["green_aggregate_tc_cgroup"].push_back(run_repeat(agg_cgroup.tc_prog_fd(), frame));
        ns["green_aggregate_xdp_aqm_ecn"].push_back(run_repeat(agg_aqm.xdp_prog_fd(), frame));
        ns["green_per_src_1_flow"].push_back(run_repeat(per_src.xdp_prog_fd(), frame));
        ns["green_per_src_1M_flows"].push_back(run_repeat(million.xdp_prog_fd(), frame));
        // One flow's memory work alone by key size (bpf/bench.bpf.c, BENCH_FLOW): what the
        // kernel's hash of a 44-, 20- or 8-byte key costs a packet (docs/datapath.md, "One
        // flow: the key").
        for (const auto &[name, prog] :
             {std::pair{"flow_k44_one", baseline->progs.bench_flow_k44_one},
              std::pair{"flow_k20_one", baseline->progs.bench_flow_k20_one},
              std::pair{"flow_k8_one", baseline->progs.bench_flow_k8_one},
              std::pair{"flow_slots_one", baseline->progs.bench_flow_slots_one}})
            ns[name].push_back(run_repeat(bpf_program__fd(prog), frame));
        for (int levels = 2; levels <= TCM_MAX_LEVELS; ++levels)
            ns[fmt::format("green_chain_{}_levels", levels)].push_back(
                run_repeat(chains[levels - 2]->xdp_prog_fd(), frame));
    }
    double base = median(ns["empty_xdp"]);
    std::printf("%-30s %10s %10s\n", "figure (median of 7)", "ns/packet", "x empty");
    for (const char *name :
         {"empty_xdp", "clock_only", "plain_meter_aggregate", "floor_meter", "parse_only",
          "green_aggregate_xdp", "green_aggregate_xdp_aqm_ecn", "green_aggregate_tc",
          "green_per_src_1_flow", "green_per_src_1M_flows", "green_chain_2_levels",
          "green_chain_3_levels", "green_chain_4_levels"}) {
        double m = median(ns[name]);
        std::printf("%-30s %10.1f %10.2f\n", name, m, m / base);
    }
    if (cg)
        std::printf("%-30s %10.1f %10.2f\n", "green_aggregate_tc_cgroup",
                    median(ns["green_aggregate_tc_cgroup"]),
                    median(ns["green_aggregate_tc_cgroup"]) / base);
    std::printf("active flows: %zu\n", flows);
    for (const auto &[name, v] : ns) {
        double m = median(v);
        std::printf("RESULT name=%s ns=%.1f ratio=%.2f\n", name.c_str(), m, m / base);
    }
    // The hot path's goals (docs/datapath.md, "Against a plain meter"), ratios in this run.
    double agg_xdp = median(ns["green_aggregate_xdp"]);
    std::printf("RESULT name=aggregate_xdp_vs_plain_meter ratio=%.2f target=1.0\n",
                agg_xdp / median(ns["plain_meter_aggregate"]));
    std::printf("RESULT name=aggregate_xdp_vs_floor_meter ratio=%.2f target=1.5\n",
                agg_xdp / median(ns["floor_meter"]));
    std::printf("RESULT name=one_flow_per_src_vs_aggregate ratio=%.2f target=1.2\n",
                median(ns["green_per_src_1_flow"]) / agg_xdp);
    // Target: at most 10% over the same policy without --aqm.
    std::printf("RESULT name=aqm_cost_on_green ratio=%.3f target=1.10\n",
                median(ns["green_aggregate_xdp_aqm_ecn"]) / median(ns["green_aggregate_xdp"]));
    // docs/spec.md §11's: a policy matched by the sender's cgroup against one matched by the
    // destination prefix, both on tc.
    if (cg)
        std::printf("RESULT name=cgroup_vs_address_match_tc ratio=%.3f target=1.10\n",
                    median(ns["green_aggregate_tc_cgroup"]) / median(ns["green_aggregate_tc"]));
    // docs/spec.md §9's cost target: a packet through per-src under aggregate against a per-src
    // policy alone (the cost of the parent and of all-or-nothing), same run, median of each.
    double single = median(ns["green_per_src_1_flow"]);
    for (int levels = 2; levels <= TCM_MAX_LEVELS; ++levels) {
        double m = median(ns[fmt::format("green_chain_{}_levels", levels)]);
        std::printf("RESULT name=chain_%d_levels_vs_per_src ratio=%.2f%s\n", levels, m / single,
                    levels == 2 ? " target=1.4" : "");
    }
    std::printf("\n");
    if (std::getenv("TRICOLOR_BENCH_QUICK")) { // the figures above and the hierarchies' safety
        chain_over_admission(frame);
        return 0;
    }
    million_flows(baseline);
    flows_by_count();
    classification(empty_fd);
    flows_top(small, big);
    control_plane(&million);
    over_admission(frame);
    chain_over_admission(frame);
    bench::destroy(baseline);
    return 0;
}
