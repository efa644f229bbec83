// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// whatif.hpp: `tricolorctl whatif` (docs/spec.md §12): every packet of a capture through the real
// data path (HierBpfEngine: tricolor.bpf.c by BPF_PROG_TEST_RUN, its clock set to the capture's
// timestamps from the first packet), what each policy would have done, binned for a plot, and a
// bisection for the smallest CBS or CIR that keeps a policy's red bytes under a share.
//
// Bytes are IP lengths, as `replay -f` counts them, and a packet counts at the policy it matched
// and at each parent above it, with the colour the chain gave it. The capture streams: memory grows
// with policies, flows kept for
// --flows and plot bins (at most kMaxBins a policy), never with packets.
#pragma once

#include "tricolor/hier_replay.hpp"
#include "tricolor/result.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tricolor {

struct ColorCounts {
    std::array<uint64_t, TCM_NR_COLORS> packets{}, bytes{};
    uint64_t total_bytes() const { return bytes[0] + bytes[1] + bytes[2]; }
    void add(Color c, uint64_t len) {
        packets[static_cast<size_t>(c)] += 1;
        bytes[static_cast<size_t>(c)] += len;
    }
};

// One plot bin of a policy: bytes offered per colour, and the lowest level each bucket was left
// at by a packet in the bin or had at its end (bytes or packets; C, then E or P).
struct WhatIfBin {
    std::array<uint64_t, TCM_NR_COLORS> bytes{};
    uint64_t c_low = 0, e_low = 0;
    // --warmup: the step the meter fills at when the bin ends, 1..K (K + 1: warm, the full
    // rate); --quota: the bytes used of the period then. An aggregate policy's; 0 without.
    uint32_t warm_step = 0;
    uint64_t quota_used = 0;
};

struct WhatIfPolicy {
    uint32_t id = 0;
    std::string name;
    ColorCounts counts;
    uint64_t peak_red_bytes = 0;  // red bytes in the busiest second (from the first packet)
    uint64_t peak_red_second = 0; // that second's start, whole seconds from the first packet
    bool levels = false;          // bucket levels in the bins (an aggregate policy's one bucket)
    uint32_t cold_factor = 0;     // --warmup's K (its steps in the bins); 0: none
    uint64_t quota = 0;           // --quota's bytes (its use in the bins); 0: none
    std::vector<WhatIfBin> bins;  // with WhatIfOptions::plot
};

struct WhatIfFlow {
    FlowTracePacket key; // addresses, protocol and ports (time and bytes unused)
    std::string policy;  // "-" when unclassified
    ColorCounts counts;
};

struct WhatIfOptions {
    size_t flows = 0;                // the N flows with most bytes
    bool plot = false;               // keep the bins
    std::ostream *packets = nullptr; // one "time_ns,bytes,color,POLICY" line a packet
    // Called about every 64 Ki packets with the share of the file read.
    std::function<void(double done, uint64_t packets)> progress;
};

struct WhatIfResult {
    std::string link_type;
    uint64_t packets = 0;
    uint64_t duration_ns = 0;                      // first to last packet
    uint64_t bin_ns = 0;                           // the bins' width (with plot)
    std::vector<WhatIfPolicy> policies;            // in the file's order
    ColorCounts unclassified;                      // IP that no policy matched (counted green)
    uint64_t not_ip_packets = 0, not_ip_bytes = 0; // frame bytes after Ethernet
    uint64_t backwards = 0;                        // packets stamped before the one ahead of them
    std::string first_backwards;   // where the first was (packet number, by how much)
    std::vector<WhatIfFlow> flows; // busiest first
};

inline constexpr size_t kWhatIfMaxBins = 1024;

// An Ethernet frame's IP length, addresses, protocol and ports (VLAN tags and IPv6 extension
// headers walked), as a trace line of replay -f would carry them; nullopt for a frame that is not
// IP or whose IP header is cut short (the data path counts both apart from the policies).
std::optional<FlowTracePacket> frame_flow(const std::vector<uint8_t> &frame);

// Runs the capture at @path through @policies. A capture error (not a capture, a truncated
// packet, an unsupported link type) is returned with the packet's number; the data path's
// failure to load throws std::runtime_error.
Result<WhatIfResult> run_whatif(const std::vector<Policy> &policies, const std::string &path,
                                const WhatIfOptions &options);
// The same on a data path already loaded (loading takes about a second): its policies are
// replaced, and every one starts afresh.
Result<WhatIfResult> run_whatif(HierBpfEngine &engine, const std::vector<Policy> &policies,
                                const std::string &path, const WhatIfOptions &options);

struct WhatIfSuggestion {
    std::string what;     // "cbs", "cir", or for trTCM "pbs", "pir"
    uint64_t value = 0;   // the smallest that keeps red at most the share (bytes or bit/s)
    double red_share = 0; // the policy's red bytes / its bytes at that value
    unsigned runs = 0;    // passes over the capture
};

// The smallest CBS (@what "cbs") or CIR ("cir"), for trTCM PBS or PIR (its red is the peak
// bucket's alone), of policy @name for which at most @red_share
// (0 to 1) of its bytes are red, each candidate run over the whole capture through the data
// path; exponential search up from the smallest value validation allows, then bisection to one
// byte (CBS) or one bit/s (CIR): the value returned keeps red at most the share and one less
// does not. That it is the smallest takes red to fall as either grows (more tokens), which a
// token bucket holds in practice but not for every pattern; the tests hold it to an exhaustive
// grid. A policy that matched no packet is an error (any value would do).
Result<WhatIfSuggestion> suggest_whatif(const std::vector<Policy> &policies,
                                        const std::string &path, const std::string &name,
                                        const std::string &what, double red_share);

// The SVG of a run with plot bins: a panel a policy, offered rate stacked by colour with the
// CIR (and PIR) lines, and below it the lowest bucket levels against CBS (and EBS or PBS).
std::string whatif_svg(const WhatIfResult &result, const std::vector<Policy> &policies);

} // namespace tricolor
