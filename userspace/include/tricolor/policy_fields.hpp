// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_fields.hpp: a policy as users write it (docs/spec.md §7), in the one representation that
// the CLI, the control socket and the config file share: a JSON object whose values are what the
// user typed ("10mbit", "src/24", "dscp:af12"), and the one table of its fields. to_policy()
// reads every field by its row and gives all the problems at once, each naming the field and the
// value.
#pragma once

#include "tricolor/datapath.hpp"
#include "tricolor/units.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tricolor {

// What a policy flag of `tricolorctl policy add|set` puts in the policy object.
enum class PolicyFlagKind : uint8_t {
    Name,  // the positional NAME: "name" (on add; set names the policy it changes)
    Text,  // --KEY VALUE: the value as typed, a string
    Match, // --match KEY VALUE, repeatable: an object of them under "match"
    On,    // --KEY: true
    Off,   // --no-KEY, on set only: false
    Clear, // --no-KEY, on set only: null, which merge_policy() takes as "remove the field"
};

// What a row's reader is given: the field's value, the policy it builds, and where its
// problems go (each named by the field). Defined in policy_fields.cpp, where the readers are.
struct FieldIn;

// One row per flag, as xdp-tools' DEFINE_OPTION: the CLI's options (in this order, so their
// --help), the JSON the CLI sends, policy_fields(), tricolorctl's man page and bash completion
// are all made from this table, and to_policy() reads each field with its row's reader (then
// checks what one field says of another). The option is the key spelled with dashes:
// "color_aware" is --color-aware, and its Off row --no-color-aware.
struct PolicyFlag {
    std::string_view key; // the field of the policy object
    PolicyFlagKind kind;
    std::string help;                   // the option's --help text
    bool required_on_add = false;       // `policy add` needs it (set takes any of them)
    std::vector<std::string> choices{}; // the only values the CLI takes (none: the reader checks)
    bool meter = false;                 // a meter's own parameter: `tricolorctl replay` takes it
    std::string_view value{};           // the value in the man page (none: choices or suggest)
    std::vector<std::string> suggest{}; // what completion offers as the value (NAME: policies)
    // Reads the field, when the object has it, into the policy (a ways-back row has none: its
    // key's first row reads the value it leaves).
    void (*read)(FieldIn &in) = nullptr;
};
const std::vector<PolicyFlag> &policy_flags();
// The CLI spelling of @flag: NAME, --cir, --no-fleet.
std::string policy_flag_option(const PolicyFlag &flag);

// The fields a policy object may have (the table's keys), in the order `policy show` prints them.
const std::vector<std::string> &policy_fields();
// The fields under "match".
const std::vector<std::string> &match_fields();

// The meter @spec's meter rows describe, parsed and validated as to_policy() does (replay's
// flags are those rows).
Result<ParsedMeter> to_meter(const nlohmann::json &spec);

// Checks @spec (a policy object) and builds the data path's policy with identity @id.
// Interface names are resolved to ifindexes now: an unknown interface is an error.
Result<Policy> to_policy(const nlohmann::json &spec, uint32_t id);

// A --match cgroup pattern: what is wrong with it ("" if nothing), and its normal form (no
// leading or trailing slash: a path below the cgroup2 mount).
std::string cgroup_pattern_problem(std::string_view pattern);
// A protocol by name (tcp, udp, icmp, icmpv6 or ipv6-icmp, sctp) or number (0 to 255).
std::optional<uint8_t> parse_protocol(std::string_view text);
std::string normal_cgroup_pattern(std::string_view pattern);

// Applies @patch (fields to change; "match" entries replace the whole match) to @spec.
// A new "algo" drops the old algorithm's own parameters (pir, pbs, ebs, eir) the patch does not
// give.
nlohmann::json merge_policy(nlohmann::json spec, const nlohmann::json &patch);

} // namespace tricolor
