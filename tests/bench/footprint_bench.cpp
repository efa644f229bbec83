// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// footprint_bench: what a tricolord costs in memory at 0, 10^3, 10^5 and 2^20 flows (docs/
// benchmarks.md, "Footprint"). A real daemon with its defaults (a flow table of 16384 flows that
// grows to 2^20) and its own pin directory, one per-source policy; flows made by running its XDP
// program through BPF_PROG_TEST_RUN, one packet per IPv6 source of 2001:db8::/64 (nothing is sent
// anywhere), waiting for the table to grow whenever it is about to, and at each count for it to
// settle (a growth sizes it for the flows that come while it loads, at the rate it saw: here,
// made as fast as a CPU runs the program, more than come; it shrinks back half a minute on,
// flow_sizing.hpp). At each count:
//   the kernel memory of every map its programs use (memlock, as bpftool shows it), the flow
//   table's share of it (slots, tuples, meta, the last growth's own table), what each CPU of
//   the host adds to it (the per-CPU maps' memory divided by the CPUs, but the classification
//   cache's), the classification cache's (per CPU too, but each CPU's a share of the flow
//   table's capacity: about the same in all whatever the CPUs), and the daemon's resident
//   memory:
//   RESULT name=footprint_<flows> flows=<in the table> capacity=<the table's> map_mib=<all maps>
//          flow_table_mib=<its part> per_cpu_kib=<a CPU's share> class_cache_kib=<all CPUs'>
//          rss_mib=<the daemon's> slots_mib=<the table's slots'>
//          goal_mib=<what spec §15 allows them: 1.5 a flow plus the least table's>
//          [target_map_mib=16 target_rss_mib=32]
// Then the policy tables, in a daemon of their own: none, 16384 policies (one with a quota),
// and one left once they have shrunk:
//   RESULT name=footprint_policies_<none|all|gone> policies= slots= rule_slots= map_mib= rss_mib=
#include "bench_daemon.hpp"
#include "tricolor/flow_sizing.hpp"
#include "packet.hpp"
#include "test_util.hpp"

#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

using namespace tricolor;
using nlohmann::json;

namespace {

// The memory the kernel charges for the map @fd (fdinfo's memlock).
uint64_t map_memlock(int fd) {
    std::ifstream in(fmt::format("/proc/self/fdinfo/{}", fd));
    std::string key;
    uint64_t value = 0;
    while (in >> key) {
        if (key == "memlock:" && (in >> value))
            return value;
        in.ignore(1 << 16, '\n');
    }
    return 0;
}

struct Footprint {
    // per_cpu: the per-CPU maps' but the classification cache's, all CPUs; class_cache: its.
    uint64_t maps = 0, flow_table = 0, per_cpu = 0, class_cache = 0;
};

bool per_cpu_map(uint32_t type) {
    return type == BPF_MAP_TYPE_PERCPU_ARRAY || type == BPF_MAP_TYPE_PERCPU_HASH ||
           type == BPF_MAP_TYPE_LRU_PERCPU_HASH;
}

// Every map the daemon's programs pinned under progs/ use, and every map pinned: by id, once.
Footprint footprint(const std::string &pin) {
    const std::string abi = pin + "/abi" + std::to_string(TCM_ABI_VERSION);
    std::set<uint32_t> ids;
    auto note_map = [&](int fd) {
        bpf_map_info info{};
        uint32_t len = sizeof(info);
        if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0)
            ids.insert(info.id);
    };
    for (const auto &e : std::filesystem::recursive_directory_iterator(abi)) {
        if (!e.is_regular_file())
            continue;
        int fd = bpf_obj_get(e.path().c_str());
        if (fd < 0)
            continue;
        if (e.path().parent_path().filename() == "progs") {
            for (uint32_t id : prog_map_ids(fd))
                ids.insert(id);
        } else if (e.path().parent_path().filename() != "links") {
            note_map(fd);
        }
        close(fd);
    }
    Footprint f;
    for (uint32_t id : ids) {
        int fd = bpf_map_get_fd_by_id(id);
        if (fd < 0)
            continue;
        bpf_map_info info{};
        uint32_t len = sizeof(info);
        bpf_obj_get_info_by_fd(fd, &info, &len);
        const uint64_t bytes = map_memlock(fd);
        f.maps += bytes;
        const std::string name = info.name;
        // tcm_flows_prev: the last growth's own table (its hash's bucket array), which the
        // programs hold until the next.
        if (name == "tcm_flow_slots" || name == "tcm_flow_tuples" || name == "tcm_flow_meta" ||
            name == "tcm_flows_prev")
            f.flow_table += bytes;
        if (name == "tcm_class_cache")
            f.class_cache += bytes;
        else if (per_cpu_map(info.type))
            f.per_cpu += bytes;
        close(fd);
    }
    return f;
}

uint64_t rss_bytes(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/status", pid));
    std::string line;
    while (std::getline(in, line))
        if (line.starts_with("VmRSS:"))
            return std::stoull(line.substr(6)) * 1024;
    return 0;
}

double mib(uint64_t bytes) {
    return static_cast<double>(bytes) / (1 << 20);
}

} // namespace

int main() {
    quiet_libbpf_logging();
    if (geteuid() != 0) {
        std::fprintf(stderr, "footprint_bench: needs root\n");
        return 1;
    }
    try {
        bench::BenchDaemon d("footprint", {"--reclaim-interval", "0"});
        auto flows_status = [&] { return d.ask({{"cmd", "status"}})["flows"]; };
        auto report = [&](const char *name, bool idle) {
            // The last pass's count is not needed: the table's own is in its meta.
            auto meta = Datapath::pinned_flow_table(d.pin);
            auto f = footprint(d.pin);
            const uint64_t rss = rss_bytes(d.pid);
            const double cpu_kib =
                static_cast<double>(f.per_cpu) / 1024 / std::max(libbpf_num_possible_cpus(), 1);
            const double cache_kib = static_cast<double>(f.class_cache) / 1024;
            std::printf("%-10s %10llu %10u %12.1f %12.1f %12.1f %12.1f %10.1f\n", name,
                        static_cast<unsigned long long>(meta ? meta->live : 0),
                        meta ? meta->capacity : 0, mib(f.maps), mib(f.flow_table), cpu_kib,
                        cache_kib, mib(rss));
            // The slots against the goal (spec §15): 1.5 a flow plus the least table's.
            const uint64_t live = meta ? meta->live : 0;
            const double slots_mib = mib(uint64_t{meta ? meta->slots : 0} * sizeof(tcm_flow_slot));
            const double goal_mib =
                mib((3 * live / 2 + flow_slots_for(TCM_START_FLOWS)) * sizeof(tcm_flow_slot));
            std::printf("RESULT name=footprint_%s flows=%llu capacity=%u map_mib=%.1f "
                        "flow_table_mib=%.1f per_cpu_kib=%.1f class_cache_kib=%.1f "
                        "rss_mib=%.1f slots_mib=%.1f goal_mib=%.1f%s\n",
                        name, static_cast<unsigned long long>(live), meta ? meta->capacity : 0,
                        mib(f.maps), mib(f.flow_table), cpu_kib, cache_kib, mib(rss), slots_mib,
                        goal_mib, idle ? " target_map_mib=16 target_rss_mib=32" : "");
        };
        std::printf("%-10s %10s %10s %12s %12s %12s %12s %10s\n", "", "flows", "capacity",
                    "maps MiB", "flow tbl MiB", "KiB a CPU", "cache KiB", "RSS MiB");
        report("idle", true);
        d.ask({{"cmd", "policy_add"},
               {"policy",
                {{"name", "per-src"},
                 {"algo", "trtcm"},
                 {"cir", "1tbit"},
                 {"cbs", "1g"},
                 {"pir", "1tbit"},
                 {"pbs", "1g"},
                 {"per", "src"},
                 {"match", {{"dst", "2001:db8:ffff::1/128"}}}}}});
        auto frame =
            test::Packet().ipv6("2001:db8::", "2001:db8:ffff::1").udp(1, 2).l3_size(64).build();
        int prog = d.xdp_prog();
        uint32_t made = 0;
        for (auto [target, name] :
             {std::pair{1000u, "1e3"}, std::pair{100000u, "1e5"}, std::pair{1u << 20, "2e20"}}) {
            for (; made < target; ++made) {
                // About to grow: the daemon grows the table (programs loaded again); the flows
                // made meanwhile would go to the policy's bucket, so wait for it.
                if (made % 1024 == 0) {
                    auto meta = Datapath::pinned_flow_table(d.pin);
                    if (meta && flow_table_grows(meta->capacity, meta->live + 2048) &&
                        meta->capacity < (1u << 20)) {
                        const uint32_t before = meta->capacity;
                        for (int i = 0; i < 500; ++i) {
                            std::this_thread::sleep_for(std::chrono::milliseconds(10));
                            auto now = Datapath::pinned_flow_table(d.pin);
                            if (now && now->capacity != before)
                                break;
                        }
                        close(prog);
                        prog = d.xdp_prog();
                    }
                }
                // The source's low 32 bits: IPv6 source at 22..37 of the frame.
                frame[34] = made >> 24;
                frame[35] = made >> 16;
                frame[36] = made >> 8;
                frame[37] = made;
                bench::run_once(prog, frame);
            }
            // The table settled: within the goal for its flows (a growth that sized it for more
            // shrunk back), no table of before left.
            close(prog);
            for (int i = 0; i < 900; ++i) {
                auto meta = Datapath::pinned_flow_table(d.pin);
                if (meta && flow_table_within_goal(meta->capacity, meta->live, TCM_START_FLOWS) &&
                    !flows_status()["moving"].get<bool>())
                    break;
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            prog = d.xdp_prog();
            report(name, false);
        }
        close(prog);
        auto st = flows_status();
        std::printf("grown %d times, shrunk %d; table_full %llu\n", st["grown"].get<int>(),
                    st["shrunk"].get<int>(),
                    static_cast<unsigned long long>(
                        d.ask({{"cmd", "stats"}})["table_full"].get<uint64_t>()));
        // The policy tables: a daemon of its own, 16384 policies of one rule each (the most a
        // set holds), then one: the tables grow, then shrink back half a minute after the
        // growth (docs/daemon.md), the warm-up and quota states with them.
        bench::BenchDaemon p("footprint_policies", {"--reclaim-interval", "0"});
        auto tables = [&] { return p.ask({{"cmd", "status"}})["policies"]; };
        auto report_policies = [&](const char *name) {
            auto f = footprint(p.pin);
            auto t = tables();
            std::printf("%-10s %10u %10u %12.1f %10.1f\n", name, t["used"].get<uint32_t>(),
                        t["slots"].get<uint32_t>(), mib(f.maps), mib(rss_bytes(p.pid)));
            std::printf("RESULT name=footprint_policies_%s policies=%u slots=%u rule_slots=%u "
                        "map_mib=%.1f rss_mib=%.1f\n",
                        name, t["used"].get<uint32_t>(), t["slots"].get<uint32_t>(),
                        t["rule_slots"].get<uint32_t>(), mib(f.maps), mib(rss_bytes(p.pid)));
        };
        auto spec = [](uint32_t i) {
            json q = {{"name", fmt::format("p{}", i)},
                      {"algo", "srtcm"},
                      {"cir", "1mbit"},
                      {"cbs", "16k"},
                      {"match", {{"dst", fmt::format("2001:db8:1::{:x}/128", i + 1)}}}};
            if (i == 0) // a quota: the warm-up and quota states made
                q["quota"] = "1g/1d";
            return q;
        };
        std::printf("\n%-10s %10s %10s %12s %10s\n", "", "policies", "slots", "maps MiB",
                    "RSS MiB");
        report_policies("none");
        json all = json::array();
        for (uint32_t i = 0; i < TCM_MAX_POLICIES; ++i)
            all.push_back(spec(i));
        if (auto r = p.ask({{"cmd", "apply"}, {"policies", all}}); !r.value("ok", false))
            throw std::runtime_error("apply of 16384 policies: " + r.dump());
        report_policies("all");
        const auto shrink_from = std::chrono::steady_clock::now();
        if (auto r = p.ask({{"cmd", "apply"}, {"policies", json::array({spec(1)})}});
            !r.value("ok", false))
            throw std::runtime_error("apply of one policy: " + r.dump());
        for (int i = 0; i < 600 && tables()["shrunk"].get<int>() == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (tables()["shrunk"].get<int>() == 0)
            throw std::runtime_error("the policy tables did not shrink within a minute");
        std::printf("shrunk %.0f s after the set went to one policy\n",
                    bench::ms_since(shrink_from) / 1000);
        report_policies("gone");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "footprint_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
