// datapath_bench: per-packet cost of the data path through BPF_PROG_TEST_RUN, as ratios to an
// empty XDP program measured in the same run. Rounds alternate the programs and the median of
// each figure is reported, so a noisy neighbour on the VM moves baseline and subject alike.
//   RESULT name=<figure> ns=<median> ratio=<to empty XDP>
#include "packet.hpp"
#include "tricolor/datapath.hpp"
#include "tricolor/replay.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>

#include "bench.skel.h"

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

Policy always_green(uint32_t id, tc_per per) {
    Policy p;
    p.id = id;
    p.name = "bench" + std::to_string(id);
    p.meter.algo = Algo::trtcm;
    p.meter.cir = TC_METER_MAX_RATE;
    p.meter.cbs = TC_METER_MAX_SIZE;
    p.meter.pir = TC_METER_MAX_RATE;
    p.meter.pbs = TC_METER_MAX_SIZE;
    p.per = per;
    p.match.dst = parse_prefix("198.18.0.0/15").value();
    return p;
}

double median(std::vector<double> v) {
    std::ranges::sort(v);
    return v[v.size() / 2];
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

    DatapathOptions o; // the real clock, as in production
    o.flow_capacity = 1 << 20;
    Datapath none(o), agg(o), per_src(o);
    DatapathOptions spread = o;
    spread.bench_spread_sources = true;
    Datapath million(spread);
    if (auto r = agg.apply({always_green(1, TC_PER_AGGREGATE)}); !r)
        throw std::runtime_error(r.error());
    if (auto r = per_src.apply({always_green(1, TC_PER_SRC)}); !r)
        throw std::runtime_error(r.error());
    if (auto r = million.apply({always_green(1, TC_PER_SRC)}); !r)
        throw std::runtime_error(r.error());

    auto frame = Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1000, 2000).l3_size(64).build();
    // A million flows: the spreading program creates one per source on its first pass.
    std::fprintf(stderr, "creating 1M flows...\n");
    run_repeat(million.xdp_prog_fd(), frame, 1 << 20);
    size_t flows = million.flows().size();

    std::map<std::string, std::vector<double>> ns;
    for (int round = 0; round < kRounds; ++round) {
        ns["empty_xdp"].push_back(run_repeat(empty_fd, frame));
        ns["clock_only"].push_back(run_repeat(clock_fd, frame));
        ns["parse_only"].push_back(run_repeat(none.xdp_prog_fd(), frame));
        ns["green_aggregate_xdp"].push_back(run_repeat(agg.xdp_prog_fd(), frame));
        ns["green_aggregate_tc"].push_back(run_repeat(agg.tc_prog_fd(), frame));
        ns["green_per_src_1_flow"].push_back(run_repeat(per_src.xdp_prog_fd(), frame));
        ns["green_per_src_1M_flows"].push_back(run_repeat(million.xdp_prog_fd(), frame));
    }
    double base = median(ns["empty_xdp"]);
    std::printf("%-30s %10s %10s\n", "figure (median of 7)", "ns/packet", "x empty");
    for (const char *name :
         {"empty_xdp", "clock_only", "parse_only", "green_aggregate_xdp", "green_aggregate_tc",
          "green_per_src_1_flow", "green_per_src_1M_flows"}) {
        double m = median(ns[name]);
        std::printf("%-30s %10.1f %10.2f\n", name, m, m / base);
    }
    std::printf("active flows: %zu\n", flows);
    for (const auto &[name, v] : ns) {
        double m = median(v);
        std::printf("RESULT name=%s ns=%.1f ratio=%.2f\n", name.c_str(), m, m / base);
    }
    bench::destroy(baseline);
    return 0;
}
