// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_spec.cpp: parsing a policy object into the data path's Policy.
#include "tricolor/policy_spec.hpp"
#include "tricolor/text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <net/if.h>

#include <algorithm>
#include <charconv>

namespace tricolor {

using nlohmann::json;

const std::vector<PolicyFlag> &policy_flags() {
    using enum PolicyFlagKind;
    // The actions' words (policy.cpp's table), each with its ':' where it takes a value.
    static const std::vector<std::string> actions = [] {
        std::vector<std::string> words;
        for (const ActionWord &w : action_words())
            words.push_back(w.parse ? fmt::format("{}:", w.word) : std::string(w.word));
        return words;
    }();
    static const std::string algo_help = algo_names(true);
    static const std::vector<std::string> algos = [] {
        std::vector<std::string> names;
        for (const AlgoInfo &a : algorithms())
            names.emplace_back(a.name);
        return names;
    }();
    static const std::vector<PolicyFlag> flags = {
        {.key = "name", .kind = Name, .help = "Policy name", .required_on_add = true},
        {.key = "algo",
         .kind = Text,
         .help = algo_help,
         .required_on_add = true,
         .choices = algos,
         .meter = true},
        {.key = "cir",
         .kind = Text,
         .help = "Committed rate (e.g. 10mbit)",
         .required_on_add = true,
         .meter = true,
         .value = "RATE"},
        {.key = "cbs",
         .kind = Text,
         .help = "Committed burst (e.g. 15k)",
         .required_on_add = true,
         .meter = true,
         .value = "SIZE"},
        {.key = "ebs",
         .kind = Text,
         .help = "Excess burst (srtcm, rfc4115)",
         .meter = true,
         .value = "SIZE"},
        {.key = "pir", .kind = Text, .help = "Peak rate (trtcm)", .meter = true, .value = "RATE"},
        {.key = "pbs", .kind = Text, .help = "Peak burst (trtcm)", .meter = true, .value = "SIZE"},
        {.key = "eir",
         .kind = Text,
         .help = "Excess rate (rfc4115)",
         .meter = true,
         .value = "RATE"},
        {.key = "match",
         .kind = Match,
         .help = "KEY VALUE: src|dst PREFIX, proto tcp|udp|icmp|N, sport|dport PORT[-PORT], dscp "
                 "N, vlan N, iface NAME, cgroup PATH (repeatable; all must hold)",
         .value = "KEY VALUE",
         .suggest = match_fields()},
        {.key = "priority",
         .kind = Text,
         .help = "Lower first; ties go to the longest prefix",
         .value = "N"},
        {.key = "per",
         .kind = Text,
         .help = "aggregate, src, dst, src/N, dst/N, 5tuple or cgroup",
         .value = "KEY",
         .suggest = {"aggregate", "src", "dst", "src/", "dst/", "5tuple", "cgroup"}},
        {.key = "green",
         .kind = Text,
         .help = "Action for green: pass, drop, dscp:X, mark:N, ...",
         .value = "ACTION",
         .suggest = actions},
        {.key = "yellow",
         .kind = Text,
         .help = "Action for yellow",
         .value = "ACTION",
         .suggest = actions},
        {.key = "red",
         .kind = Text,
         .help = "Action for red",
         .value = "ACTION",
         .suggest = actions},
        {.key = "color_aware",
         .kind = On,
         .help = "Take the incoming colour into account (from DSCP; replay: from the trace)",
         .meter = true},
        {.key = "color_map",
         .kind = Text,
         .help = "DSCP to colour map (af)",
         .value = "MAP",
         .suggest = {"af"}},
        {.key = "packet_mode",
         .kind = On,
         .help = "Meter packets: rates in pps, sizes in packets",
         .meter = true},
        {.key = "length", .kind = Text, .help = "l3 (default) or l2", .suggest = {"l3", "l2"}},
        {.key = "overhead", .kind = Text, .help = "Bytes added to every packet", .value = "N"},
        {.key = "shape",
         .kind = Text,
         .help = "off, sockets (pace this host's TCP sockets) or edt (fq departure times)",
         .suggest = {"off", "sockets", "edt"}},
        {.key = "aqm",
         .kind = Text,
         .help = "off, drop or ecn: an early signal as the bucket drains",
         .suggest = {"off", "drop", "ecn"}},
        {.key = "fleet",
         .kind = On,
         .help = "Share the committed bucket with every host of the fleet (tricolord --fleet)"},
        {.key = "parent",
         .kind = Text,
         .help = "Meter through this policy's buckets as well (§9)", // docs/spec.md §9
         .value = "NAME"},
        {.key = "only_parent", .kind = On, .help = "Match no traffic: a parent of others only"},
        {.key = "direction",
         .kind = Text,
         .help = "A cgroup policy meters what the cgroup sends (egress, default) or receives",
         .choices = {"egress", "ingress"}},
        {.key = "coupling",
         .kind = On,
         .help = "rfc4115: what overflows C goes to E (MEF CF=1)",
         .meter = true},
        {.key = "start",
         .kind = Text,
         .help = "A new flow's buckets start full (default) or empty",
         .choices = {"full", "empty"},
         .meter = true},
        {.key = "managed_by",
         .kind = Text,
         .help = "What made the policy for a container (cni, docker, podman): a reload of the "
                 "config keeps it",
         .value = "WHAT"},
        {.key = "owner",
         .kind = Text,
         .help = "Who the policy is for, shown beside its name in stats and flows (e.g. a pod "
                 "as NAMESPACE/NAME)",
         .value = "TEXT"},
        // The way back, on `policy set` only (listed last, as its --help has them).
        {.key = "fleet", .kind = Off, .help = "Back to a bucket of this host's own"},
        {.key = "color_aware", .kind = Off, .help = "Back to colour-blind"},
        {.key = "packet_mode", .kind = Off, .help = "Back to byte mode"},
        {.key = "parent", .kind = Clear, .help = "Leave the parent: a top-level policy again"},
        {.key = "only_parent", .kind = Off, .help = "Match traffic again"},
        {.key = "coupling", .kind = Off, .help = "Back to uncoupled rfc4115"},
    };
    return flags;
}

std::string policy_flag_option(const PolicyFlag &flag) {
    if (flag.kind == PolicyFlagKind::Name)
        return "NAME";
    bool negated = flag.kind == PolicyFlagKind::Off || flag.kind == PolicyFlagKind::Clear;
    std::string option = negated ? "--no-" : "--";
    for (char c : flag.key)
        option += c == '_' ? '-' : c;
    return option;
}

const std::vector<std::string> &policy_fields() {
    static const std::vector<std::string> fields = [] {
        std::vector<std::string> keys;
        for (const auto &flag : policy_flags())
            if (flag.kind != PolicyFlagKind::Off && flag.kind != PolicyFlagKind::Clear)
                keys.emplace_back(flag.key);
        return keys;
    }();
    return fields;
}

const std::vector<std::string> &match_fields() {
    static const std::vector<std::string> fields = {"src",  "dst",  "proto", "sport", "dport",
                                                    "dscp", "vlan", "iface", "cgroup"};
    return fields;
}

namespace {

// Collects problems; each names the field.
class Reader {
  public:
    explicit Reader(std::vector<std::string> &errors, std::string prefix = "")
        : errors_(errors), prefix_(std::move(prefix)) {}

    void error(const std::string &field, const std::string &why) {
        errors_.push_back(fmt::format("{}{}: {}", prefix_, field, why));
    }

    // A text value: strings as they are, whole numbers as their digits.
    std::optional<std::string> text(const json &obj, const std::string &field) {
        auto it = obj.find(field);
        if (it == obj.end() || it->is_null())
            return std::nullopt;
        if (it->is_string())
            return it->get<std::string>();
        if (it->is_number_unsigned())
            return std::to_string(it->get<uint64_t>());
        if (it->is_number_integer())
            return std::to_string(it->get<int64_t>());
        error(field, fmt::format("expected a string, got {}", it->dump()));
        return std::nullopt;
    }

    std::optional<bool> flag(const json &obj, const std::string &field) {
        auto it = obj.find(field);
        if (it == obj.end() || it->is_null())
            return std::nullopt;
        if (!it->is_boolean()) {
            error(field, fmt::format("expected true or false, got {}", it->dump()));
            return std::nullopt;
        }
        return it->get<bool>();
    }

    // A whole number in [0, max], given as a number or as decimal text.
    std::optional<uint64_t> number(const json &obj, const std::string &field, uint64_t max) {
        auto t = text(obj, field);
        if (!t)
            return std::nullopt;
        uint64_t v = 0;
        auto [ptr, ec] = std::from_chars(t->data(), t->data() + t->size(), v);
        if (ec != std::errc() || ptr != t->data() + t->size() || t->empty() || v > max) {
            error(field, fmt::format("'{}' is not a whole number from 0 to {}", *t, max));
            return std::nullopt;
        }
        return v;
    }

  private:
    std::vector<std::string> &errors_;
    std::string prefix_;
};

} // namespace

std::optional<uint8_t> parse_protocol(std::string_view t) {
    if (t == "tcp")
        return 6;
    if (t == "udp")
        return 17;
    if (t == "icmp")
        return 1;
    if (t == "icmpv6" || t == "ipv6-icmp")
        return 58;
    if (t == "sctp")
        return 132;
    unsigned v = 0;
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || ptr != t.data() + t.size() || t.empty() || v > 255)
        return std::nullopt;
    return static_cast<uint8_t>(v);
}

std::string cgroup_pattern_problem(std::string_view t) {
    if (t.empty())
        return "the path is empty: give one below the cgroup2 mount, e.g. "
               "system.slice/nginx.service";
    if (t.starts_with("/sys/fs/cgroup"))
        return fmt::format("'{}' names the mount point: give the path below the cgroup2 mount "
                           "(system.slice/nginx.service, not /sys/fs/cgroup/system.slice/...)",
                           t);
    std::string_view rest = t.front() == '/' ? t.substr(1) : t;
    if (rest.empty())
        return "'/' is the root cgroup, which holds every process: match the addresses instead, "
               "or name a cgroup below it";
    while (!rest.empty() && rest.back() == '/')
        rest.remove_suffix(1);
    for (size_t at = 0; at <= rest.size();) {
        size_t end = rest.find('/', at);
        if (end == std::string_view::npos)
            end = rest.size();
        std::string_view part = rest.substr(at, end - at);
        if (part.empty())
            return fmt::format("'{}' has an empty component (//)", t);
        if (part == "." || part == "..")
            return fmt::format("'{}': '{}' is not allowed in a cgroup path", t, part);
        if (part.find_first_of("\n\t") != std::string_view::npos)
            return fmt::format("'{}' has a control character", t);
        // Globs that can never match a cgroup: fnmatch would read an unclosed '[' as a literal
        // one, and a name is at most NAME_MAX bytes.
        if (auto open = part.find('[');
            open != std::string_view::npos && part.find(']', open + 2) == std::string_view::npos)
            return fmt::format("'{}': '{}' has a '[' without its ']' (a glob that can never "
                               "match)",
                               t, part);
        if (part.size() > 255 && part.find_first_of("*?[") == std::string_view::npos)
            return fmt::format("'{}': a component of {} bytes, longer than any cgroup name "
                               "(255)",
                               t, part.size());
        at = end + 1;
    }
    return "";
}

std::string normal_cgroup_pattern(std::string_view t) {
    while (!t.empty() && t.front() == '/')
        t.remove_prefix(1);
    while (!t.empty() && t.back() == '/')
        t.remove_suffix(1);
    return std::string(t);
}

Result<Policy> to_policy(const json &spec, uint32_t id) {
    std::vector<std::string> errors;
    Reader r(errors);
    Policy p;
    p.id = id;
    if (!spec.is_object())
        return std::unexpected(fmt::format("a policy must be an object, got {}", spec.dump()));
    for (const auto &[key, value] : spec.items())
        if (std::ranges::find(policy_fields(), key) == policy_fields().end())
            r.error(key, "unknown field");

    auto name = r.text(spec, "name");
    if (!name || name->empty())
        r.error("name", "every policy needs a name");
    else if (name->size() > 63 || name->find_first_of(" \t\n\"/") != std::string::npos)
        r.error("name", fmt::format("'{}' must be 1 to 63 characters without spaces, quotes or "
                                    "slashes",
                                    *name));
    else
        p.name = *name;

    MeterSpec m;
    m.algo = r.text(spec, "algo").value_or("");
    if (m.algo.empty())
        r.error("algo", "missing: " + algo_names());
    m.cir = r.text(spec, "cir").value_or("");
    if (m.cir.empty())
        r.error("cir", "missing");
    m.cbs = r.text(spec, "cbs").value_or("");
    if (m.cbs.empty())
        r.error("cbs", "missing");
    m.ebs = r.text(spec, "ebs");
    m.pir = r.text(spec, "pir");
    m.pbs = r.text(spec, "pbs");
    m.eir = r.text(spec, "eir");
    m.color_aware = r.flag(spec, "color_aware").value_or(false);
    m.packet_mode = r.flag(spec, "packet_mode").value_or(false);
    m.coupling = r.flag(spec, "coupling").value_or(false);
    m.start = r.text(spec, "start");
    if (!m.algo.empty() && !m.cir.empty() && !m.cbs.empty()) {
        auto meter = parse_meter_spec(m);
        if (meter)
            p.meter = meter->params;
        else
            errors.push_back(meter.error());
    }
    if (auto cm = r.text(spec, "color_map"); cm && *cm != "af")
        r.error("color_map", fmt::format("'{}' is not a known map (af)", *cm));

    if (auto it = spec.find("match"); it != spec.end() && !it->is_null()) {
        if (!it->is_object()) {
            r.error("match",
                    fmt::format("expected an object of {}", fmt::join(match_fields(), ", ")));
        } else {
            const json &mt = *it;
            Reader mr(errors, "match.");
            for (const auto &[key, value] : mt.items())
                if (std::ranges::find(match_fields(), key) == match_fields().end())
                    mr.error(key, "unknown field");
            for (const char *side : {"src", "dst"})
                if (auto t = mr.text(mt, side)) {
                    auto pr = parse_prefix(*t);
                    if (pr)
                        (std::string(side) == "src" ? p.match.src : p.match.dst) = *pr;
                    else
                        mr.error(side, pr.error());
                }
            if (p.match.src && p.match.dst && p.match.src->ipv6 != p.match.dst->ipv6)
                r.error("match", "src and dst are of different address families");
            if (auto t = mr.text(mt, "proto")) {
                if (auto v = parse_protocol(*t))
                    p.match.proto = *v;
                else
                    mr.error("proto", fmt::format("'{}' is not tcp, udp, icmp, icmpv6, sctp or "
                                                  "a number 0-255",
                                                  *t));
            }
            for (const char *side : {"sport", "dport"})
                if (auto t = mr.text(mt, side)) {
                    auto pr = parse_port_range(*t);
                    if (pr)
                        (std::string(side) == "sport" ? p.match.sport : p.match.dport) = *pr;
                    else
                        mr.error(side, pr.error());
                }
            // A number or a name, as in the dscp:NAME action (ef, af11..af43, cs0..cs7).
            if (auto t = mr.text(mt, "dscp")) {
                auto a = parse_action("dscp:" + *t);
                if (a)
                    p.match.dscp = static_cast<uint8_t>(a->value);
                else
                    mr.error("dscp", fmt::format("'{}' is not 0 to 63 or a name (ef, af11..af43, "
                                                 "cs0..cs7)",
                                                 *t));
            }
            if (auto v = mr.number(mt, "vlan", 4095))
                p.match.vlan = static_cast<uint16_t>(*v);
            if (auto t = mr.text(mt, "iface")) {
                unsigned idx = if_nametoindex(t->c_str());
                if (idx == 0)
                    mr.error("iface", fmt::format("no interface named '{}'", *t));
                else
                    p.match.ifindex = idx;
            }
            if (auto t = mr.text(mt, "cgroup")) {
                if (auto bad = cgroup_pattern_problem(*t); !bad.empty())
                    mr.error("cgroup", bad);
                else
                    p.match.cgroup = normal_cgroup_pattern(*t);
                // The data path finds a cgroup's policy by the socket alone (bpf/lib/classify.h).
                for (const std::string &other : match_fields())
                    if (other != "cgroup" && mt.contains(other))
                        mr.error("cgroup", fmt::format("a cgroup match takes no other field yet "
                                                       "(this one has {}): make a policy per "
                                                       "cgroup, or match the addresses instead",
                                                       other));
            }
        }
    }
    if (auto v = r.number(spec, "priority", 65535))
        p.priority = static_cast<uint32_t>(*v);
    if (auto t = r.text(spec, "per")) {
        std::string_view s = *t;
        auto with_len = [&](std::string_view base, tcm_per per) {
            if (s == base) {
                p.per = per;
                return true;
            }
            if (!s.starts_with(std::string(base) + "/"))
                return false;
            unsigned len = 0;
            auto num = s.substr(base.size() + 1);
            auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), len);
            if (ec != std::errc() || ptr != num.data() + num.size() || num.empty() || len > 128) {
                r.error("per", fmt::format("'{}': the prefix length must be 0 to 128", s));
                return true;
            }
            p.per = per;
            // One N for both families: IPv4 keys use min(N, 32).
            p.prefix4 = static_cast<uint8_t>(std::min(len, 32u));
            p.prefix6 = static_cast<uint8_t>(len);
            return true;
        };
        if (s == "aggregate")
            p.per = TCM_PER_AGGREGATE;
        else if (s == "cgroup")
            p.per = TCM_PER_CGROUP;
        else if (s == "5tuple")
            p.per = TCM_PER_5TUPLE;
        else if (!with_len("src", TCM_PER_SRC) && !with_len("dst", TCM_PER_DST))
            r.error("per", fmt::format("'{}' is not aggregate, src, dst, src/N, dst/N, 5tuple or "
                                       "cgroup",
                                       s));
    }
    if (p.per == TCM_PER_CGROUP && !p.match.cgroup)
        r.error("per", "cgroup keeps a bucket per cgroup its cgroup match names: it needs "
                       "--match cgroup PATH");
    const char *colors[] = {"green", "yellow", "red"};
    for (int c = 0; c < TCM_NR_COLORS; ++c)
        if (auto t = r.text(spec, colors[c])) {
            auto a = parse_action(*t);
            if (a)
                p.actions[c] = *a;
            else
                r.error(colors[c], a.error());
        }
    if (auto t = r.text(spec, "length")) {
        if (*t == "l3")
            p.length = TCM_LEN_L3;
        else if (*t == "l2")
            p.length = TCM_LEN_L2;
        else
            r.error("length", fmt::format("'{}' is not l3 or l2", *t));
    }
    if (auto v = r.number(spec, "overhead", 65535))
        p.overhead = static_cast<uint32_t>(*v);
    if (auto t = r.text(spec, "shape")) {
        if (*t == "off")
            p.shape = TCM_SHAPE_OFF;
        else if (*t == "sockets")
            p.shape = TCM_SHAPE_SOCKETS;
        else if (*t == "edt")
            p.shape = TCM_SHAPE_EDT;
        else
            r.error("shape", fmt::format("'{}' is not off, sockets or edt", *t));
    }
    if (auto t = r.text(spec, "aqm")) {
        if (*t == "off")
            p.aqm = TCM_AQM_OFF;
        else if (*t == "drop")
            p.aqm = TCM_AQM_DROP;
        else if (*t == "ecn")
            p.aqm = TCM_AQM_ECN;
        else
            r.error("aqm", fmt::format("'{}' is not off, drop or ecn", *t));
    }
    if (p.shape == TCM_SHAPE_SOCKETS) {
        if (p.meter.packet_mode)
            r.error("shape", "sockets paces TCP in bytes: it needs a byte-mode policy, not "
                             "--packet-mode");
        if (p.match.proto && *p.match.proto != 6)
            r.error("shape", fmt::format("sockets paces TCP sockets, and the policy matches only "
                                         "protocol {}",
                                         *p.match.proto));
    }
    if (auto f = r.flag(spec, "fleet"))
        p.fleet = *f; // docs/spec.md §10; the daemon refuses it without --fleet
    if (p.shape == TCM_SHAPE_EDT && p.fleet)
        r.error("shape", "edt waits for the tokens a bucket earns in time, and a fleet policy's "
                         "committed bucket earns none (the fleet grants them)");
    // The graph (does the parent exist, cycles, depth) is checked with the whole set.
    if (auto t = r.text(spec, "parent"); t && !t->empty())
        p.parent = *t;
    p.only_parent = r.flag(spec, "only_parent").value_or(false);
    if (auto t = r.text(spec, "managed_by"))
        if (t->empty() || t->size() > 16 || !std::ranges::all_of(*t, [](char c) {
                return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
            }))
            r.error("managed_by", "1 to 16 of a-z, 0-9 and '-'");
    // Only shown (stats, flows): what a table's line and a metric's label can carry.
    if (auto t = r.text(spec, "owner"))
        if (t->size() > 253 ||
            std::ranges::any_of(*t, [](char c) { return c < ' ' || c == '"' || c == 127; }))
            r.error("owner", "at most 253 characters, without quotes or control characters");
    if (auto t = r.text(spec, "direction")) {
        if (*t == "egress" || *t == "ingress")
            p.direction = *t == "egress" ? TCM_CGROUP_EGRESS : TCM_CGROUP_INGRESS;
        else
            r.error("direction", fmt::format("'{}' is not egress or ingress", *t));
        if (!p.match.cgroup)
            r.error("direction", "only a cgroup policy states a direction (an address policy "
                                 "meters where it is attached: attach --direction)");
    }
    if (p.direction == TCM_CGROUP_INGRESS && p.match.cgroup) {
        // What the cgroup_skb hook can do (bpf/cgroup_in.bpf.c).
        for (int c = 0; c < TCM_NR_COLORS; ++c)
            if (p.actions[c].kind != TCM_ACT_KIND_PASS && p.actions[c].kind != TCM_ACT_KIND_DROP)
                r.error(colors[c], fmt::format("{} on ingress to a cgroup's sockets: a packet "
                                               "there can be passed or dropped, not rewritten",
                                               to_string(p.actions[c])));
        if (p.shape != TCM_SHAPE_OFF)
            r.error("shape",
                    "ingress to a cgroup's sockets is not shaped: use --aqm ecn (or drop)");
        if (p.per != TCM_PER_AGGREGATE && p.per != TCM_PER_CGROUP)
            r.error("per", "ingress to a cgroup's sockets is metered aggregate or per cgroup");
    }
    if (p.only_parent && spec.contains("match") && !spec["match"].is_null() &&
        !spec["match"].empty())
        r.error("only_parent", "an only_parent policy matches no traffic: drop its match");

    if (!errors.empty()) {
        return std::unexpected(
            join_lines(errors, p.name.empty() ? "" : "policy '" + p.name + "': "));
    }
    return p;
}

json merge_policy(json spec, const json &patch) {
    // A new algorithm drops the old one's own parameters (unless the patch gives them again),
    // so a policy can change algorithm in place, keeping its id and so its counters.
    if (auto it = patch.find("algo");
        it != patch.end() && it->is_string() && spec.value("algo", json()) != *it) {
        // An unknown name keeps them all: to_policy refuses it, naming it.
        if (auto algo = parse_algo(it->get<std::string>()))
            for (const SecondParam &sp : second_params())
                if (!takes(*algo, sp) && !patch.contains(sp.key))
                    spec.erase(sp.key);
    }
    for (const auto &[key, value] : patch.items()) {
        if (value.is_null())
            spec.erase(key);
        else
            spec[key] = value;
    }
    return spec;
}

} // namespace tricolor
