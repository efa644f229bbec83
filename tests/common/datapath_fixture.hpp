// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_fixture.hpp: the one fixture of the BPF suites that drive the data path through
// BPF_PROG_TEST_RUN (datapath_*, aqm, fleet, hierarchy, flow_top): a real Datapath in testing
// mode (its own maps, the test clock at 1 s) for each test, root required. The suites differ in
// the flow table's size and (flow_top) the heavy hitters' sizes, which they override. Beside
// it, what the datapath_* files share: prefixes, a UDP packet (their policies are
// test::policy's).
#pragma once

#include "packet.hpp"
#include "test_util.hpp"
#include "tricolor/datapath.hpp"

#include <gtest/gtest.h>

#include <linux/bpf.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tricolor::test {

class DatapathFixture : public ::testing::Test {
  protected:
    virtual uint32_t flow_capacity() const { return 8192; }
    // The options SetUp loads with: testing mode, flow_capacity(), the XDP program alone (the
    // verifier's time for the others is most of a load's) and what a suite adds here (a suite
    // that runs the tc program: o.programs |= DatapathOptions::kTcProgram).
    virtual void configure(DatapathOptions &) const {}
    DatapathOptions options() const {
        DatapathOptions o;
        o.testing = true;
        o.flow_capacity = flow_capacity();
        o.programs = DatapathOptions::kXdpProgram;
        configure(o);
        return o;
    }
    void SetUp() override {
        TRICOLOR_REQUIRE_ROOT();
        quiet_libbpf_logging();
        load(options());
    }
    void load(const DatapathOptions &o) {
        dp.reset();
        dp = std::make_unique<Datapath>(o);
        dp->set_clock(1000000000);
    }
    // A case that runs the tc program in a suite that loads the XDP program alone: loaded again
    // with both, before the case has applied anything.
    void load_tc_too() {
        auto o = options();
        o.programs |= DatapathOptions::kTcProgram;
        load(o);
    }
    void apply(const std::vector<Policy> &ps) {
        auto r = dp->apply(ps);
        ASSERT_TRUE(r.has_value()) << r.error();
    }
    // Packets of every colour counted against policy @id.
    uint64_t packets(uint32_t id) {
        auto c = dp->policy_counters()[id];
        return c.packets[0] + c.packets[1] + c.packets[2];
    }
    std::unique_ptr<Datapath> dp;
};

// The datapath_* suites' fixture: the shared one with its default table (8192 flows).
using DatapathTest = DatapathFixture;

inline Prefix prefix(const char *text) {
    return parse_prefix(text).value();
}

// IPv4/UDP from 198.18.0.1:1000 to 198.19.0.2:2000, 100 bytes of payload (128 IP bytes).
inline Packet v4udp() {
    return Packet().ipv4("198.18.0.1", "198.19.0.2").udp(1000, 2000).payload(100);
}

} // namespace tricolor::test
