// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy.hpp: a policy as the user writes it (match, meter, actions, per-key, chain) and the
// parsers of its match and action values. YAML (yaml.hpp) and the CLI (policy_fields.hpp) both
// produce these; rules.hpp compiles a set of them for the classifier; datapath.hpp applies it.
#pragma once

#include "tricolor/meter.hpp"
#include "tricolor/result.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

extern "C" {
#include "tricolor_abi.h"
}

namespace tricolor {

struct Prefix {
    bool ipv6 = false;
    std::array<uint8_t, 16> addr{}; // IPv4 in the first 4 bytes
    uint8_t len = 0;
    bool operator==(const Prefix &) const = default;
};
// "198.18.0.0/15", "2001:db8::/32", or a bare address (a host prefix).
Result<Prefix> parse_prefix(std::string_view text);
std::string to_string(const Prefix &p);

struct PortRange {
    uint16_t lo = 0, hi = 65535;
    bool operator==(const PortRange &) const = default;
};
// "80" or "1024-65535".
Result<PortRange> parse_port_range(std::string_view text);

struct Match {
    std::optional<Prefix> src, dst;
    std::optional<uint8_t> proto;
    std::optional<PortRange> sport, dport;
    std::optional<uint8_t> dscp;
    std::optional<uint16_t> vlan;
    std::optional<uint32_t> ifindex;
    // The sending process's cgroup (docs/spec.md §11): a path below the cgroup2 mount, glob
    // characters allowed per component ("system.slice/*.service"). Matches the cgroups it names
    // and every cgroup below them.
    std::optional<std::string> cgroup;
    bool operator==(const Match &) const = default;
};

struct Action {
    tcm_action_kind kind = TCM_ACT_KIND_PASS;
    uint32_t value = 0;
    bool operator==(const Action &) const = default;
};
// "pass", "drop", "dscp:46", "dscp:ef", "mark:N", "priority:N", "classid:1:10".
Result<Action> parse_action(std::string_view text);
// A DSCP by number (0 to 63) or name (ef, af11..af43, cs0..cs7), as dscp:X and --match dscp.
Result<uint8_t> parse_dscp(std::string_view text);
std::string to_string(const Action &a);

// The actions' table (policy.cpp), a row per word a user writes: a new action is its kind in
// tricolor_abi.h, its effect in bpf/lib/act.h and a row here (docs/hacking.md).
struct ActionWord {
    std::string_view word;  // "dscp"
    tcm_action_kind kind;   // what the data path does
    std::string_view usage; // "dscp:N|NAME"; no ':' when it takes no value
    // The value after "word:", or an error saying what it must be; null: takes no value.
    Result<uint32_t> (*parse)(std::string_view word, std::string_view arg);
    bool tc_only; // acts on tc attachments only (XDP has no skb to write)
};
std::span<const ActionWord> action_words();
bool action_is_tc_only(tcm_action_kind kind);

// The AF colour map of docs/spec.md §7: AFx1 green, AFx2 yellow, AFx3 red, everything else green.
std::array<Color, 64> af_color_map();

struct Policy {
    uint32_t id = 0; // stable identity, < TCM_MAX_POLICIES: indexes counters and state
    std::string name;
    MeterParams meter;
    Match match;
    uint32_t priority = 0; // lower first; ties go to the longest prefix
    tcm_per per = TCM_PER_AGGREGATE;
    uint8_t prefix4 = 32, prefix6 = 128; // for per src/N, dst/N
    std::array<Action, TCM_NR_COLORS> actions{
        Action{TCM_ACT_KIND_PASS, 0}, Action{TCM_ACT_KIND_PASS, 0}, Action{TCM_ACT_KIND_DROP, 0}};
    std::array<Color, 64> color_map = af_color_map();
    tcm_length_mode length = TCM_LEN_L3;
    uint32_t overhead = 0;
    tcm_shape_mode shape = TCM_SHAPE_OFF; // docs/spec.md §8
    tcm_aqm_mode aqm = TCM_AQM_OFF;
    // docs/fleet.md: the committed bucket earns at the rate the fleet leases (fleet_set_lease).
    // Aggregate policies only.
    bool fleet = false;
    // docs/spec.md §9: packets of this policy are metered by @parent's buckets as well (by name, in
    // the same policy set; empty: none). An only_parent policy matches no traffic itself.
    std::string parent;
    bool only_parent = false;
    // docs/spec.md §11: a cgroup policy meters what the cgroup's sockets send (tc) or receive
    // (the cgroup_skb ingress program); an address policy meters where it is attached.
    tcm_cgroup_dir direction = TCM_CGROUP_EGRESS;

    bool operator==(const Policy &) const = default;
};

// The rate, bytes/s as Linux's TCP pacing counts them (payload and TCP header), that puts a
// policy's CIR on the wire in full-sized segments (with its IP, --length l2 Ethernet and
// overhead bytes): --shape sockets paces the policy's sockets around their share of it.
uint64_t shape_payload_rate(const Policy &p);

} // namespace tricolor
