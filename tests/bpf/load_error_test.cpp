// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// load_error_test.cpp: what a user reads when the kernel refuses a BPF program, checked with a
// program the verifier really refuses, on the kernel the tests run on.
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "tricolor/bpf_load.hpp"

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

} // namespace
} // namespace tricolor
