// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// meter_bench: tricolor's meter core against DPDK's rte_meter in user space, on one random
// trace at about twice CIR: ns per packet (alternating rounds, medians) and how far each is
// from the exact model: an independent reference in 128-bit integers
// (tests/common/hier_reference.hpp, which shares no code with the meter), against which both
// meters' colours are counted, so tricolor's 0 is measured, not assumed; rte_meter's count is
// what its period/bytes-per-period rounding costs.
//   RESULT name=meter_<algo>_<mode> tricolor_ns=… rte_ns=… ratio=… rte_mismatches=… …
#include "tricolor/meter.hpp"

#include "../common/hier_reference.hpp"

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_meter.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

using namespace tricolor;

namespace {

constexpr uint64_t kCir = 100000000, kSecondRate = 200000000; // bit/s
constexpr uint64_t kCbs = 15000, kSecondSize = 30000;         // bytes
constexpr size_t kPackets = 2000000;
constexpr int kRounds = 5;

struct Trace {
    std::vector<uint64_t> ns, cycles;
    std::vector<uint32_t> len;
    std::vector<uint8_t> in_color;
};

Trace make_trace(uint64_t hz) {
    Trace t;
    std::mt19937_64 rng(42);
    const uint32_t sizes[] = {64, 576, 1500, 9000, 40, 1280};
    std::uniform_int_distribution<int> pick(0, 5), color(0, 2);
    double mean_bits = 2080 * 8.0;
    std::exponential_distribution<double> gap(2.0 * kCir / mean_bits / 1e9); // ~2x CIR
    uint64_t now = 1000000000;
    for (size_t i = 0; i < kPackets; ++i) {
        now += static_cast<uint64_t>(gap(rng));
        t.ns.push_back(now);
        // DPDK counts time in TSC cycles: the same instants, converted exactly (floor).
        t.cycles.push_back(static_cast<uint64_t>((unsigned __int128)now * hz / 1000000000));
        t.len.push_back(sizes[pick(rng)]);
        t.in_color.push_back(static_cast<uint8_t>(color(rng)));
    }
    return t;
}

template <typename F>
double time_ns_per_packet(F run) {
    auto a = std::chrono::steady_clock::now();
    run();
    auto b = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(b - a).count() / kPackets;
}

double median(std::vector<double> v) {
    std::ranges::sort(v);
    return v[v.size() / 2];
}

struct Case {
    const char *name;
    Algo algo;
    bool aware;
};

} // namespace

int main() {
    char a0[] = "meter_bench", a1[] = "-l", a2[] = "0", a3[] = "--no-huge", a4[] = "--no-pci",
         a5[] = "--no-telemetry", a6[] = "--log-level=error", a7[] = "-m", a8[] = "64";
    char *eal_argv[] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, nullptr};
    if (rte_eal_init(9, eal_argv) < 0) {
        std::fprintf(stderr, "meter_bench: DPDK EAL did not start\n");
        return 1;
    }
    const uint64_t hz = rte_get_tsc_hz();
    Trace t = make_trace(hz);
    std::printf("trace: %zu packets at ~2x CIR (%.0f Mbit/s), TSC %.2f GHz\n", kPackets, kCir / 1e6,
                hz / 1e9);
    std::printf("%-22s %12s %10s %8s %14s %18s\n", "meter", "tricolor ns", "rte ns", "rte/tc",
                "rte mismatches", "rte green excess B");

    const Case cases[] = {
        {"srtcm_blind", Algo::srtcm, false},     {"srtcm_aware", Algo::srtcm, true},
        {"trtcm_blind", Algo::trtcm, false},     {"trtcm_aware", Algo::trtcm, true},
        {"rfc4115_blind", Algo::rfc4115, false}, {"rfc4115_aware", Algo::rfc4115, true}};
    for (const Case &c : cases) {
        MeterParams p;
        p.algo = c.algo;
        p.cir = kCir;
        p.cbs = kCbs;
        p.color_aware = c.aware;
        if (c.algo == Algo::trtcm) {
            p.pir = kSecondRate;
            p.pbs = kSecondSize;
        } else {
            p.ebs = kSecondSize;
            if (c.algo == Algo::rfc4115)
                p.eir = kSecondRate;
        }
        const tcm_meter_config cfg = make_meter_config(p);
        std::vector<uint8_t> exact(kPackets), rte(kPackets);

        // rte_meter profiles: rates in bytes per second.
        rte_meter_srtcm_profile sp{};
        rte_meter_trtcm_profile tp{};
        rte_meter_trtcm_rfc4115_profile rp{};
        rte_meter_srtcm_params sparams{kCir / 8, kCbs, kSecondSize};
        rte_meter_trtcm_params tparams{kCir / 8, kSecondRate / 8, kCbs, kSecondSize};
        rte_meter_trtcm_rfc4115_params rparams{kCir / 8, kSecondRate / 8, kCbs, kSecondSize};
        rte_meter_srtcm_profile_config(&sp, &sparams);
        rte_meter_trtcm_profile_config(&tp, &tparams);
        rte_meter_trtcm_rfc4115_profile_config(&rp, &rparams);

        auto run_tricolor = [&] {
            tcm_meter_state st{};
            meter_start(&cfg, &st, t.ns[0]);
            for (size_t i = 0; i < kPackets; ++i)
                exact[i] =
                    static_cast<uint8_t>(meter_mark(&cfg, &st, t.ns[i], t.len[i], t.in_color[i]));
        };
        auto run_rte = [&] {
            rte_meter_srtcm sm{};
            rte_meter_trtcm tm{};
            rte_meter_trtcm_rfc4115 rm{};
            rte_meter_srtcm_config(&sm, &sp);
            rte_meter_trtcm_config(&tm, &tp);
            rte_meter_trtcm_rfc4115_config(&rm, &rp);
            sm.time = tm.time_tc = tm.time_tp = rm.time_tc = rm.time_te = t.cycles[0];
            for (size_t i = 0; i < kPackets; ++i) {
                auto in = static_cast<rte_color>(t.in_color[i]);
                rte_color out;
                switch (c.algo) {
                case Algo::srtcm:
                    out =
                        c.aware
                            ? rte_meter_srtcm_color_aware_check(&sm, &sp, t.cycles[i], t.len[i], in)
                            : rte_meter_srtcm_color_blind_check(&sm, &sp, t.cycles[i], t.len[i]);
                    break;
                case Algo::trtcm:
                    out =
                        c.aware
                            ? rte_meter_trtcm_color_aware_check(&tm, &tp, t.cycles[i], t.len[i], in)
                            : rte_meter_trtcm_color_blind_check(&tm, &tp, t.cycles[i], t.len[i]);
                    break;
                default:
                    out = c.aware ? rte_meter_trtcm_rfc4115_color_aware_check(&rm, &rp, t.cycles[i],
                                                                              t.len[i], in)
                                  : rte_meter_trtcm_rfc4115_color_blind_check(&rm, &rp, t.cycles[i],
                                                                              t.len[i]);
                }
                rte[i] = static_cast<uint8_t>(out);
            }
        };
        std::vector<double> tc_ns, rte_ns;
        for (int r = 0; r < kRounds; ++r) {
            tc_ns.push_back(time_ns_per_packet(run_tricolor));
            rte_ns.push_back(time_ns_per_packet(run_rte));
        }
        // The reference, once: colour-aware on the trace's colours, or blind (all green in).
        test::RefLevel ref{.algo = c.algo,
                           .cir = kCir,
                           .cbs = kCbs,
                           .second_rate = c.algo == Algo::srtcm ? 0 : kSecondRate,
                           .second_size = kSecondSize,
                           .aware = c.aware};
        test::RefBucket bucket;
        size_t mismatches = 0, tricolor_mismatches = 0;
        int64_t green_excess = 0; // bytes rte_meter coloured green beyond the exact model
        for (size_t i = 0; i < kPackets; ++i) {
            auto in = c.aware ? static_cast<Color>(t.in_color[i]) : Color::green;
            auto want =
                static_cast<uint8_t>(test::RefMeter::mark(ref, bucket, t.ns[i], t.len[i], in));
            tricolor_mismatches += exact[i] != want;
            if (want != rte[i])
                ++mismatches;
            green_excess += (rte[i] == TCM_GREEN ? int64_t(t.len[i]) : 0) -
                            (want == TCM_GREEN ? int64_t(t.len[i]) : 0);
        }
        double m_tc = median(tc_ns), m_rte = median(rte_ns);
        std::printf("%-22s %12.2f %10.2f %8.2f %14zu %18lld\n", c.name, m_tc, m_rte, m_rte / m_tc,
                    mismatches, static_cast<long long>(green_excess));
        std::printf("RESULT name=meter_%s tricolor_ns=%.2f rte_ns=%.2f ratio=%.2f "
                    "tricolor_mismatches=%zu rte_mismatches=%zu rte_green_excess_bytes=%lld\n",
                    c.name, m_tc, m_rte, m_rte / m_tc, tricolor_mismatches, mismatches,
                    static_cast<long long>(green_excess));
    }
    rte_eal_cleanup();
    return 0;
}
