// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// bpf_load.hpp: what the running kernel offers, and loading BPF objects with errors a user can
// act on: a verifier rejection reads as one (program, the verifier's own explanation, kernel),
// never as a permissions problem.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tricolor/units.hpp" // Result

namespace tricolor {

// The oldest kernel tricolor supports: the oldest it is tested on (see docs/platforms.md).
inline constexpr int kMinKernelMajor = 6;
inline constexpr int kMinKernelMinor = 1;

struct KernelRelease {
    std::string release; // uname -r
    int major = 0;
    int minor = 0;
};

KernelRelease running_kernel();

// Empty when the running kernel can run the data path; otherwise one sentence naming the kernel
// and what it lacks. TRICOLOR_ALLOW_OLD_KERNEL=1 lets a kernel older than the oldest supported
// one through when the features probe present (untested: at your own risk).
std::string kernel_support_problem();

// Runs @load (a skeleton's load, returning a negative errno) with libbpf's messages captured.
// On failure the message names @what, and for a verifier rejection the program and the
// verifier's last words. TRICOLOR_BPF_LOG=1 also prints libbpf's full output to stderr.
Result<void> load_bpf(const std::string &what, const std::function<int()> &load);

// The ids of the maps the program @prog_fd uses (empty if the kernel will not say).
std::vector<uint32_t> prog_map_ids(int prog_fd);

// Keeps libbpf's warnings on stderr with a "libbpf: " prefix and drops its debug chatter.
void quiet_libbpf_logging();

} // namespace tricolor
