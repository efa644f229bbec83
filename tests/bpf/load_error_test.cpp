// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// load_error_test.cpp: what a user reads when the kernel refuses a BPF program, checked with a
// program the verifier really refuses, on the kernel the tests run on.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "tricolor/bpf_load.hpp"
#include "tricolor/datapath.hpp"

#include "rejected.skel.h"

namespace tricolor {
namespace {

TEST(LoadErrors, AVerifierRejectionIsReportedAsOneNotAsPermissions) {
    TRICOLOR_REQUIRE_ROOT();
    quiet_libbpf_logging();
    rejected *skel = rejected::open();
    ASSERT_NE(skel, nullptr);
    auto loaded = load_bpf("the test program", [&] { return rejected::load(skel); });
    rejected::destroy(skel);
    ASSERT_FALSE(loaded);
    const std::string &msg = loaded.error();
    EXPECT_NE(msg.find("cannot load the test program"), std::string::npos) << msg;
    EXPECT_NE(msg.find("verifier"), std::string::npos) << msg;
    EXPECT_NE(msg.find("refused program rejected_prog"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Linux " + running_kernel().release), std::string::npos) << msg;
    // The verifier's own reason, not a guess: arithmetic on the map value pointer it cannot bound.
    EXPECT_NE(msg.find("map_value"), std::string::npos) << msg;
    // The source line the verifier stopped at, the last of a log of tens of KiB; its file and
    // line too where the kernel's log names them: 6.4 and later (6.1 gives the line alone).
    EXPECT_NE(msg.find("(at: return v[i] + sum"), std::string::npos) << msg;
    KernelRelease k = running_kernel();
    if (k.major > 6 || (k.major == 6 && k.minor >= 4)) {
        EXPECT_NE(msg.find("@ rejected.bpf.c:30)"), std::string::npos) << msg;
    }
    EXPECT_EQ(msg.find("CAP_BPF"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("Permission denied"), std::string::npos) << msg;
}

TEST(LoadErrors, TheRunningKernelIsSupportedAndNamed) {
    TRICOLOR_REQUIRE_ROOT();
    KernelRelease k = running_kernel();
    EXPECT_FALSE(k.release.empty());
    EXPECT_GE(k.major * 1000 + k.minor, kMinKernelMajor * 1000 + kMinKernelMinor) << k.release;
    EXPECT_EQ(kernel_support_problem(), "");
}

// The BPF suites load the programs they run and no others (DatapathOptions::programs): one left
// out is named when asked for, and outside testing every program loads.
TEST(LoadErrors, AProgramLeftOutOfATestingLoadIsNamedWhenAskedFor) {
    TRICOLOR_REQUIRE_ROOT();
    quiet_libbpf_logging();
    DatapathOptions o;
    o.testing = true;
    o.flow_capacity = 64;
    o.programs = DatapathOptions::kXdpProgram;
    Datapath dp(o);
    EXPECT_GE(dp.xdp_prog_fd(), 0);
    auto said = [](auto &&call) {
        try {
            call();
        } catch (const std::logic_error &e) {
            return std::string(e.what());
        }
        return std::string("nothing");
    };
    EXPECT_EQ(said([&] { dp.tc_prog_fd(); }),
              "the tc program is not loaded: this testing Datapath left it out "
              "(DatapathOptions::programs)");
    EXPECT_NE(said([&] { dp.run_tc(std::vector<uint8_t>(64)); }).find("the tc program"),
              std::string::npos);
    EXPECT_NE(said([&] { dp.sockops_prog_fd(); }).find("the sock_ops program is not loaded"),
              std::string::npos);
    o.testing = false;
    EXPECT_EQ(said([&] { Datapath{o}; }),
              "DatapathOptions::programs: every program loads outside testing");
}

} // namespace
} // namespace tricolor
