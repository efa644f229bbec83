// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// hier_replay.hpp: `tricolorctl replay -f POLICIES` (docs/spec.md §2 and §9): a trace whose lines
// carry addresses, classified and metered through the policies of a config file, hierarchies and
// all, by the model (the C meter in user space, with a classifier and flow table of its own)
// or by the real data-path program (tricolor.bpf.c through BPF_PROG_TEST_RUN, test clock).
#pragma once

#include "tricolor/datapath.hpp"
#include "tricolor/meter.hpp"
#include "tricolor/rules.hpp"
#include "tricolor/units.hpp"

#include <array>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tricolor {

// A packet of a `replay -f` trace: `time_ns bytes [color] SRC DST [PROTO [SPORT DPORT]]`.
struct FlowTracePacket {
    uint64_t time_ns = 0;
    uint32_t bytes = 0; // the IP length
    Color color = Color::green;
    bool ipv6 = false;
    std::array<uint8_t, 16> src{}, dst{}; // IPv4 in the first 4 bytes
    uint8_t proto = kNoProto;
    bool ports = false; // a protocol with ports (tcp, udp, udplite, sctp)
    uint16_t sport = 0, dport = 0;

    // A line without PROTO: an IP packet of an unassigned protocol (253, RFC 3692's
    // experimentation number), with no L4 header.
    static constexpr uint8_t kNoProto = 253;
};

// TCP, UDP, UDP-Lite and SCTP: the protocols whose packets carry ports.
bool protocol_has_ports(uint8_t proto);

Result<std::optional<FlowTracePacket>> parse_flow_trace_line(std::string_view line, size_t line_no);
Result<std::vector<FlowTracePacket>> parse_flow_trace(std::istream &in);

// The policies of a config file (its `policies:` list; ids are their positions), checked as
// apply would check them. Interface matches are refused: replayed packets arrive on none.
Result<std::vector<Policy>> load_policy_file(const std::string &path);

struct HierVerdict {
    std::optional<uint32_t> policy_id; // the matched policy; none: unclassified
    Color color = Color::green;        // unclassified traffic passes: green
};

class HierEngine {
  public:
    virtual ~HierEngine() = default;
    virtual HierVerdict mark(const FlowTracePacket &packet) = 0;
};

// The model of docs/spec.md §9 over the shared C meter: classification as the data path ranks
// policies, one bucket pair per (policy, key), chains metered all or nothing.
class HierModelEngine final : public HierEngine {
  public:
    explicit HierModelEngine(std::vector<Policy> policies);
    HierVerdict mark(const FlowTracePacket &packet) override;
    // Buckets of one level: nullptr if that flow has not started.
    const tcm_meter_state *state(uint32_t policy_id, const FlowTracePacket &packet) const;

  private:
    struct Bucket {
        tcm_meter_state state{};
        bool started = false;
        tcm_ext_state ext{}; // --warmup, --quota (a chain of one: the data path's refusal)
    };
    using Key = std::array<uint8_t, 40>;
    Key key_of(const Policy &p, const FlowTracePacket &pkt) const;
    std::vector<Policy> policies_;
    std::vector<tcm_meter_config> configs_;
    std::vector<tcm_policy_ext> exts_; // by the policy's index in policies_
    std::vector<const Policy *> ranked_;
    std::vector<std::vector<RuleEntry>> rules_; // by the policy's index in policies_
    std::map<std::pair<uint32_t, Key>, Bucket> buckets_;
};

// The real data path in testing mode: one synthesized Ethernet frame a line through XDP.
class HierBpfEngine final : public HierEngine {
  public:
    explicit HierBpfEngine(const std::vector<Policy> &policies); // throws std::runtime_error
    HierVerdict mark(const FlowTracePacket &packet) override;
    // A frame as it is (whatif: a captured packet), at @time_ns of the test clock.
    HierVerdict mark_frame(uint64_t time_ns, const std::vector<uint8_t> &frame);
    Datapath &datapath() { return dp_; }
    // UTC against the packets' times, for quotas' periods: 0 for a trace (its times are UTC),
    // the first packet's stamp for whatif (it meters from 0).
    void set_wall_offset(uint64_t offset_ns) {
        if (offset_ns != wall_offset_)
            dp_.set_wall_offset(wall_offset_ = offset_ns);
    }

  private:
    Datapath dp_;
    uint64_t wall_offset_ = 0;
};

// The frame HierBpfEngine sends: Ethernet, IPv4 or IPv6 (DSCP 0, AF12 or AF13 for an incoming
// green, yellow or red), the L4 header of the protocol, zeroes up to the IP length. A packet
// shorter than its headers (which parse_flow_trace_line refuses) throws std::invalid_argument.
std::vector<uint8_t> synthesize_frame(const FlowTracePacket &packet);
// The DSCP that carries an incoming colour under the AF colour map.
uint8_t dscp_of_color(Color color);

struct HierTotals {
    uint64_t packets[TCM_NR_COLORS] = {};
    uint64_t bytes[TCM_NR_COLORS] = {};
    uint64_t unclassified_packets = 0, unclassified_bytes = 0;
};

// Writes "time_ns,bytes,color,POLICY" a packet (POLICY "-" when unclassified).
HierTotals run_hier_replay(HierEngine &engine, const std::vector<Policy> &policies,
                           const std::vector<FlowTracePacket> &trace, std::ostream &out);

} // namespace tricolor
