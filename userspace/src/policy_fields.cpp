// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_fields.cpp: the policy object's one table of fields, each with its reader, and
// to_policy(), which reads a policy object by it.
#include "tricolor/policy_fields.hpp"
#include "tricolor/text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <net/if.h>

#include <algorithm>
#include <charconv>
#include <span>

namespace tricolor {

using nlohmann::json;

namespace {

// Collects problems; each names the field.
class Reader {
  public:
    explicit Reader(std::vector<std::string> &errors, std::string prefix = "")
        : errors_(errors), prefix_(std::move(prefix)) {}

    // A reader of the fields of an object inside (its problems named "match.KEY").
    Reader inside(std::string_view field) const {
        return Reader(errors_, fmt::format("{}{}.", prefix_, field));
    }

    void error(std::string_view field, const std::string &why) {
        errors_.push_back(fmt::format("{}{}: {}", prefix_, field, why));
    }

    // A text value: strings as they are, whole numbers as their digits.
    std::optional<std::string> text(const json &obj, std::string_view field) {
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

    std::optional<bool> flag(const json &obj, std::string_view field) {
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
    std::optional<uint64_t> number(const json &obj, std::string_view field, uint64_t max) {
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

struct FieldIn {
    Reader &r;
    const json &obj; // the object the field is in (the policy, or its match)
    std::string_view key;
    Policy &p;
    MeterSpec &m;

    std::optional<std::string> text() { return r.text(obj, key); }
    std::optional<bool> flag() { return r.flag(obj, key); }
    std::optional<uint64_t> number(uint64_t max) { return r.number(obj, key, max); }
    void error(const std::string &why) { r.error(key, why); }
};

namespace {

// A field whose value is one of a few words.
struct Word {
    std::string_view word;
    uint8_t value;
    std::string_view note{}; // what it means, in the option's help
};

// "off, sockets (pace ...) or edt (...)": the words, with their notes when @notes.
std::string words_text(std::span<const Word> words, bool notes) {
    std::vector<std::string> parts;
    for (const Word &w : words)
        parts.push_back(notes && !w.note.empty() ? fmt::format("{} ({})", w.word, w.note)
                                                 : std::string(w.word));
    return or_list(parts);
}

std::vector<std::string> word_list(std::span<const Word> words) {
    std::vector<std::string> out;
    for (const Word &w : words)
        out.emplace_back(w.word);
    return out;
}

// The value of the word the field holds; an error naming them all if it is none of them.
std::optional<uint8_t> read_word(FieldIn &in, std::span<const Word> words) {
    auto t = in.text();
    if (!t)
        return std::nullopt;
    for (const Word &w : words)
        if (w.word == *t)
            return w.value;
    in.error(fmt::format("'{}' is not {}", *t, words_text(words, false)));
    return std::nullopt;
}

constexpr Word kLengths[] = {{"l3", TCM_LEN_L3, "default"}, {"l2", TCM_LEN_L2}};
constexpr Word kShapes[] = {{"off", TCM_SHAPE_OFF},
                            {"sockets", TCM_SHAPE_SOCKETS, "pace this host's TCP sockets"},
                            {"edt", TCM_SHAPE_EDT, "fq departure times"}};
constexpr Word kAqms[] = {{"off", TCM_AQM_OFF}, {"drop", TCM_AQM_DROP}, {"ecn", TCM_AQM_ECN}};
constexpr Word kDirections[] = {{"egress", TCM_CGROUP_EGRESS}, {"ingress", TCM_CGROUP_INGRESS}};
constexpr Word kStarts[] = {{"full", 0}, {"empty", 1}};
constexpr Word kColorMaps[] = {{"af", 0}};
constexpr Word kProtocols[] = {{"tcp", 6},     {"udp", 17},       {"icmp", 1},
                               {"icmpv6", 58}, {"ipv6-icmp", 58}, {"sctp", 132}};

// --per: what keeps a bucket of its own.
struct PerWord {
    std::string_view word;
    tcm_per per;
    bool prefix_len; // also WORD/N: the key's address cut to N bits
};
constexpr PerWord kPers[] = {{"aggregate", TCM_PER_AGGREGATE, false},
                             {"src", TCM_PER_SRC, true},
                             {"dst", TCM_PER_DST, true},
                             {"5tuple", TCM_PER_5TUPLE, false},
                             {"cgroup", TCM_PER_CGROUP, false}};

std::vector<std::string> per_words(bool suggest) {
    std::vector<std::string> out;
    for (const PerWord &w : kPers) {
        out.emplace_back(w.word);
        if (w.prefix_len)
            out.push_back(fmt::format("{}/{}", w.word, suggest ? "" : "N"));
    }
    return out;
}

void read_per(FieldIn &in) {
    auto t = in.text();
    if (!t)
        return;
    std::string_view s = *t;
    for (const PerWord &w : kPers) {
        if (s == w.word) {
            in.p.per = w.per;
            return;
        }
        if (!w.prefix_len || !s.starts_with(w.word) || s.size() == w.word.size() ||
            s[w.word.size()] != '/')
            continue;
        unsigned len = 0;
        auto num = s.substr(w.word.size() + 1);
        auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), len);
        if (ec != std::errc() || ptr != num.data() + num.size() || num.empty() || len > 128) {
            in.error(fmt::format("'{}': the prefix length must be 0 to 128", s));
            return;
        }
        in.p.per = w.per;
        // One N for both families: IPv4 keys use min(N, 32).
        in.p.prefix4 = static_cast<uint8_t>(std::min(len, 32u));
        in.p.prefix6 = static_cast<uint8_t>(len);
        return;
    }
    in.error(fmt::format("'{}' is not {}", s, or_list(per_words(false))));
}

// The algorithms that take the second bucket's parameter @key ("srtcm, rfc4115").
std::string algos_taking(std::string_view key) {
    std::vector<std::string> names;
    for (const SecondParam &sp : second_params())
        if (sp.key == key)
            for (const AlgoInfo &a : algorithms())
                if (takes(a.algo, sp))
                    names.emplace_back(a.name);
    return fmt::format("{}", fmt::join(names, ", "));
}

std::string algos_coupling() {
    std::vector<std::string> names;
    for (const AlgoInfo &a : algorithms())
        if (a.coupling)
            names.emplace_back(a.name);
    return fmt::format("{}", fmt::join(names, ", "));
}

std::string action_usages() {
    std::vector<std::string> usages;
    for (const ActionWord &w : action_words())
        usages.emplace_back(w.usage);
    return or_list(usages);
}

// A meter parameter's text, for parse_meter_spec to read with the others.
template <std::optional<std::string> MeterSpec::*F>
void read_meter_text(FieldIn &in) {
    in.m.*F = in.text();
}
template <bool MeterSpec::*F>
void read_meter_flag(FieldIn &in) {
    in.m.*F = in.flag().value_or(false);
}

// The fields under "match", each with its reader: what the packet must carry.
struct MatchField {
    std::string_view key;
    std::string_view value; // its value in --help and the man page
    void (*read)(FieldIn &in);
};

template <bool Src>
void read_prefix(FieldIn &in) {
    if (auto t = in.text()) {
        if (auto pr = parse_prefix(*t))
            (Src ? in.p.match.src : in.p.match.dst) = *pr;
        else
            in.error(pr.error());
    }
}

template <bool Src>
void read_ports(FieldIn &in) {
    if (auto t = in.text()) {
        if (auto pr = parse_port_range(*t))
            (Src ? in.p.match.sport : in.p.match.dport) = *pr;
        else
            in.error(pr.error());
    }
}

const std::vector<MatchField> &match_table() {
    static const std::vector<MatchField> fields = {
        {"src", "PREFIX", read_prefix<true>},
        {"dst", "PREFIX", read_prefix<false>},
        {"proto", "tcp|udp|icmp|N",
         [](FieldIn &in) {
             if (auto t = in.text()) {
                 if (auto v = parse_protocol(*t))
                     in.p.match.proto = *v;
                 else
                     in.error(fmt::format("'{}' is not {}", *t, or_list([] {
                                              auto w = word_list(kProtocols);
                                              w.emplace_back("a number 0-255");
                                              return w;
                                          }())));
             }
         }},
        {"sport", "PORT[-PORT]", read_ports<true>},
        {"dport", "PORT[-PORT]", read_ports<false>},
        {"dscp", "N|NAME",
         [](FieldIn &in) {
             if (auto t = in.text()) {
                 if (auto d = parse_dscp(*t))
                     in.p.match.dscp = *d;
                 else
                     in.error(fmt::format("'{}': {}", *t, d.error()));
             }
         }},
        {"vlan", "N",
         [](FieldIn &in) {
             if (auto v = in.number(4095))
                 in.p.match.vlan = static_cast<uint16_t>(*v);
         }},
        {"iface", "NAME",
         [](FieldIn &in) {
             if (auto t = in.text()) {
                 unsigned idx = if_nametoindex(t->c_str());
                 if (idx == 0)
                     in.error(fmt::format("no interface named '{}'", *t));
                 else
                     in.p.match.ifindex = idx;
             }
         }},
        {"cgroup", "PATH",
         [](FieldIn &in) {
             auto t = in.text();
             if (!t)
                 return;
             if (auto bad = cgroup_pattern_problem(*t); !bad.empty())
                 in.error(bad);
             else
                 in.p.match.cgroup = normal_cgroup_pattern(*t);
             // The data path finds a cgroup's policy by the socket alone (bpf/lib/classify.h).
             for (const MatchField &other : match_table())
                 if (other.key != "cgroup" && in.obj.contains(other.key))
                     in.error(fmt::format("a cgroup match takes no other field yet (this one has "
                                          "{}): make a policy per cgroup, or match the addresses "
                                          "instead",
                                          other.key));
         }},
    };
    return fields;
}

void read_match(FieldIn &in) {
    auto it = in.obj.find(in.key);
    if (it == in.obj.end() || it->is_null())
        return;
    if (!it->is_object()) {
        in.error(fmt::format("expected an object of {}", fmt::join(match_fields(), ", ")));
        return;
    }
    Reader mr = in.r.inside(in.key);
    for (const auto &[key, value] : it->items())
        if (std::ranges::find(match_fields(), key) == match_fields().end())
            mr.error(key, "unknown field");
    for (const MatchField &f : match_table()) {
        FieldIn fin{mr, *it, f.key, in.p, in.m};
        f.read(fin);
    }
    if (in.p.match.src && in.p.match.dst && in.p.match.src->ipv6 != in.p.match.dst->ipv6)
        in.error("src and dst are of different address families");
}

std::string match_help() {
    std::vector<std::string> parts;
    for (const MatchField &f : match_table())
        parts.push_back(fmt::format("{} {}", f.key, f.value));
    return fmt::format("KEY VALUE: {} (repeatable; all must hold)", fmt::join(parts, ", "));
}

// The action of colour C (the green, yellow and red rows).
template <int C>
void read_action(FieldIn &in) {
    if (auto t = in.text()) {
        if (auto a = parse_action(*t))
            in.p.actions[C] = *a;
        else
            in.error(a.error());
    }
}

template <typename T, T Policy::*F>
void read_on(FieldIn &in) {
    if (auto f = in.flag())
        in.p.*F = *f;
}

} // namespace

const std::vector<PolicyFlag> &policy_flags() {
    using enum PolicyFlagKind;
    // The actions' words (policy.cpp's table), each with its ':' where it takes a value.
    static const std::vector<std::string> actions = [] {
        std::vector<std::string> words;
        for (const ActionWord &w : action_words())
            words.push_back(w.parse ? fmt::format("{}:", w.word) : std::string(w.word));
        return words;
    }();
    static const std::vector<std::string> algos = [] {
        std::vector<std::string> names;
        for (const AlgoInfo &a : algorithms())
            names.emplace_back(a.name);
        return names;
    }();
    static const std::vector<PolicyFlag> flags = {
        {.key = "name",
         .kind = Name,
         .help = "Policy name",
         .required_on_add = true,
         .read =
             [](FieldIn &in) {
                 auto name = in.text();
                 if (!name || name->empty())
                     return; // missing: every policy needs one (read_fields says so)
                 if (name->size() > 63 || name->find_first_of(" \t\n\"/") != std::string::npos)
                     in.error(fmt::format("'{}' must be 1 to 63 characters without spaces, "
                                          "quotes or slashes",
                                          *name));
                 else
                     in.p.name = *name;
             }},
        {.key = "algo",
         .kind = Text,
         .help = algo_names(true),
         .required_on_add = true,
         .choices = algos,
         .meter = true,
         .read = [](FieldIn &in) { in.m.algo = in.text().value_or(""); }},
        {.key = "cir",
         .kind = Text,
         .help = "Committed rate (e.g. 10mbit)",
         .required_on_add = true,
         .meter = true,
         .value = "RATE",
         .read = [](FieldIn &in) { in.m.cir = in.text().value_or(""); }},
        {.key = "cbs",
         .kind = Text,
         .help = "Committed burst (e.g. 15k)",
         .required_on_add = true,
         .meter = true,
         .value = "SIZE",
         .read = [](FieldIn &in) { in.m.cbs = in.text().value_or(""); }},
        {.key = "ebs",
         .kind = Text,
         .help = fmt::format("Excess burst ({})", algos_taking("ebs")),
         .meter = true,
         .value = "SIZE",
         .read = read_meter_text<&MeterSpec::ebs>},
        {.key = "pir",
         .kind = Text,
         .help = fmt::format("Peak rate ({})", algos_taking("pir")),
         .meter = true,
         .value = "RATE",
         .read = read_meter_text<&MeterSpec::pir>},
        {.key = "pbs",
         .kind = Text,
         .help = fmt::format("Peak burst ({})", algos_taking("pbs")),
         .meter = true,
         .value = "SIZE",
         .read = read_meter_text<&MeterSpec::pbs>},
        {.key = "eir",
         .kind = Text,
         .help = fmt::format("Excess rate ({})", algos_taking("eir")),
         .meter = true,
         .value = "RATE",
         .read = read_meter_text<&MeterSpec::eir>},
        {.key = "match",
         .kind = Match,
         .help = match_help(),
         .value = "KEY VALUE",
         .suggest = match_fields(),
         .read = read_match},
        {.key = "priority",
         .kind = Text,
         .help = "Lower first; ties go to the longest prefix",
         .value = "N",
         .read =
             [](FieldIn &in) {
                 if (auto v = in.number(65535))
                     in.p.priority = static_cast<uint32_t>(*v);
             }},
        {.key = "per",
         .kind = Text,
         .help = or_list(per_words(false)),
         .value = "KEY",
         .suggest = per_words(true),
         .read = read_per},
        {.key = "green",
         .kind = Text,
         .help = "Action for green: " + action_usages(),
         .value = "ACTION",
         .suggest = actions,
         .read = read_action<0>},
        {.key = "yellow",
         .kind = Text,
         .help = "Action for yellow",
         .value = "ACTION",
         .suggest = actions,
         .read = read_action<1>},
        {.key = "red",
         .kind = Text,
         .help = "Action for red",
         .value = "ACTION",
         .suggest = actions,
         .read = read_action<2>},
        {.key = "color_aware",
         .kind = On,
         .help = "Take the incoming colour into account (from DSCP; replay: from the trace)",
         .meter = true,
         .read = read_meter_flag<&MeterSpec::color_aware>},
        {.key = "color_map",
         .kind = Text,
         .help = "DSCP to colour map (" + words_text(kColorMaps, false) + ")",
         .value = "MAP",
         .suggest = word_list(kColorMaps),
         .read = [](FieldIn &in) { read_word(in, kColorMaps); }},
        {.key = "packet_mode",
         .kind = On,
         .help = "Meter packets: rates in pps, sizes in packets",
         .meter = true,
         .read = read_meter_flag<&MeterSpec::packet_mode>},
        {.key = "length",
         .kind = Text,
         .help = words_text(kLengths, true),
         .suggest = word_list(kLengths),
         .read =
             [](FieldIn &in) {
                 if (auto v = read_word(in, kLengths))
                     in.p.length = static_cast<tcm_length_mode>(*v);
             }},
        {.key = "overhead",
         .kind = Text,
         .help = "Bytes added to every packet",
         .value = "N",
         .read =
             [](FieldIn &in) {
                 if (auto v = in.number(65535))
                     in.p.overhead = static_cast<uint32_t>(*v);
             }},
        {.key = "shape",
         .kind = Text,
         .help = words_text(kShapes, true),
         .suggest = word_list(kShapes),
         .read =
             [](FieldIn &in) {
                 if (auto v = read_word(in, kShapes))
                     in.p.shape = static_cast<tcm_shape_mode>(*v);
             }},
        {.key = "aqm",
         .kind = Text,
         .help = words_text(kAqms, false) + ": an early signal as the bucket drains",
         .suggest = word_list(kAqms),
         .read =
             [](FieldIn &in) {
                 if (auto v = read_word(in, kAqms))
                     in.p.aqm = static_cast<tcm_aqm_mode>(*v);
             }},
        {.key = "fleet",
         .kind = On,
         .help = "Share the committed bucket with every host of the fleet (tricolord --fleet)",
         .read = read_on<bool, &Policy::fleet>}, // docs/spec.md §10; the daemon checks --fleet
        {.key = "parent",
         .kind = Text,
         .help = "Meter through this policy's buckets as well (§9)", // docs/spec.md §9
         .value = "NAME",
         // The graph (does the parent exist, cycles, depth) is checked with the whole set.
         .read =
             [](FieldIn &in) {
                 if (auto t = in.text(); t && !t->empty())
                     in.p.parent = *t;
             }},
        {.key = "only_parent",
         .kind = On,
         .help = "Match no traffic: a parent of others only",
         .read = read_on<bool, &Policy::only_parent>},
        {.key = "direction",
         .kind = Text,
         .help = "A cgroup policy meters what the cgroup sends (egress, default) or receives",
         .choices = word_list(kDirections),
         .read =
             [](FieldIn &in) {
                 if (auto v = read_word(in, kDirections))
                     in.p.direction = static_cast<tcm_cgroup_dir>(*v);
             }},
        {.key = "coupling",
         .kind = On,
         .help = fmt::format("{}: what overflows C goes to E (MEF CF=1)", algos_coupling()),
         .meter = true,
         .read = read_meter_flag<&MeterSpec::coupling>},
        {.key = "start",
         .kind = Text,
         .help = "A new flow's buckets start " + words_text(kStarts, false) + " (default: full)",
         .choices = word_list(kStarts),
         .meter = true,
         .read = [](FieldIn &in) { in.m.start = in.text(); }},
        {.key = "warmup",
         .kind = Text,
         .help = fmt::format("Cold at the first packet and after a gap this long, the buckets fill "
                             "at rate*j/K in the j-th of K steps of DURATION/K (docs/spec.md §14)"),
         .meter = true,
         .value = "DURATION",
         .read = read_meter_text<&MeterSpec::warmup>},
        {.key = "cold_factor",
         .kind = Text,
         .help = fmt::format("K of --warmup, {} to {} (default {})", TCM_WARM_MIN_K, TCM_WARM_MAX_K,
                             kDefaultColdFactor),
         .meter = true,
         .value = "K",
         .read = read_meter_text<&MeterSpec::cold_factor>},
        {.key = "quota",
         .kind = Text,
         .help = "At most BYTES coloured green or yellow a PERIOD (50g/30d, 2g/1d, 100g/month), "
                 "then --over (docs/spec.md §14)",
         .meter = true,
         .value = "BYTES/PERIOD",
         .read = read_meter_text<&MeterSpec::quota>},
        {.key = "quota_reset",
         .kind = Text,
         .help = "When a period starts, UTC: a time (2026-11-01T06:00:00Z; default the Unix "
                 "epoch), or for month a day 1-28 and a time (15T06:00; default 1)",
         .meter = true,
         .value = "TIME",
         .read = read_meter_text<&MeterSpec::quota_reset>},
        {.key = "over",
         .kind = Text,
         .help = "What meters once the quota is used: cir=RATE,cbs=SIZE[,ebs=,pir=,pbs=,eir=,"
                 "algo=] or drop (the default)",
         .meter = true,
         .value = "METER|drop",
         .read = read_meter_text<&MeterSpec::over>},
        {.key = "managed_by",
         .kind = Text,
         .help = "What made the policy for a container (cni, docker, podman): a reload of the "
                 "config keeps it",
         .value = "WHAT",
         .read =
             [](FieldIn &in) {
                 if (auto t = in.text())
                     if (t->empty() || t->size() > 16 || !std::ranges::all_of(*t, [](char c) {
                             return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
                         }))
                         in.error("1 to 16 of a-z, 0-9 and '-'");
             }},
        {.key = "owner",
         .kind = Text,
         .help = "Who the policy is for, shown beside its name in stats and flows (e.g. a pod "
                 "as NAMESPACE/NAME)",
         .value = "TEXT",
         // Only shown (stats, flows): what a table's line and a metric's label can carry.
         .read =
             [](FieldIn &in) {
                 if (auto t = in.text())
                     if (t->size() > 253 || std::ranges::any_of(*t, [](char c) {
                             return c < ' ' || c == '"' || c == 127;
                         }))
                         in.error("at most 253 characters, without quotes or control "
                                  "characters");
             }},
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
            if (flag.read)
                keys.emplace_back(flag.key);
        return keys;
    }();
    return fields;
}

const std::vector<std::string> &match_fields() {
    static const std::vector<std::string> fields = [] {
        std::vector<std::string> keys;
        for (const MatchField &f : match_table())
            keys.emplace_back(f.key);
        return keys;
    }();
    return fields;
}

std::optional<uint8_t> parse_protocol(std::string_view t) {
    for (const Word &w : kProtocols)
        if (w.word == t)
            return w.value;
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

namespace {

// Reads every field of @spec by its row (@meter_only: the meter's rows alone), into @p and @m.
void read_fields(Reader &r, const json &spec, Policy &p, MeterSpec &m, bool meter_only) {
    for (const PolicyFlag &row : policy_flags()) {
        if (!row.read || (meter_only && !row.meter))
            continue;
        FieldIn in{r, spec, row.key, p, m};
        row.read(in);
    }
    // What a policy cannot be without (`policy add` requires their options).
    for (const PolicyFlag &row : policy_flags()) {
        if (!row.required_on_add || (meter_only && !row.meter))
            continue;
        auto it = spec.find(row.key);
        if (it != spec.end() && !it->is_null() &&
            !(it->is_string() && it->get<std::string>().empty()))
            continue;
        if (row.kind == PolicyFlagKind::Name)
            r.error(row.key, "every policy needs a name");
        else if (!row.choices.empty())
            r.error(row.key, "missing: " + or_list(row.choices));
        else
            r.error(row.key, "missing");
    }
}

// The meter the fields describe, once the ones it cannot be without are there.
std::optional<ParsedMeter> parse_meter(const MeterSpec &m, std::vector<std::string> &errors) {
    if (m.algo.empty() || m.cir.empty() || m.cbs.empty())
        return std::nullopt;
    auto meter = parse_meter_spec(m);
    if (!meter) {
        errors.push_back(meter.error());
        return std::nullopt;
    }
    return *meter;
}

// What one field says of another: each field alone was read by its row.
void check_across(Reader &r, const json &spec, const Policy &p) {
    if (p.per == TCM_PER_CGROUP && !p.match.cgroup)
        r.error("per", "cgroup keeps a bucket per cgroup its cgroup match names: it needs "
                       "--match cgroup PATH");
    if (p.shape == TCM_SHAPE_SOCKETS) {
        if (p.meter.packet_mode)
            r.error("shape", "sockets paces TCP in bytes: it needs a byte-mode policy, not "
                             "--packet-mode");
        if (p.match.proto && *p.match.proto != 6)
            r.error("shape", fmt::format("sockets paces TCP sockets, and the policy matches only "
                                         "protocol {}",
                                         *p.match.proto));
    }
    if (p.shape == TCM_SHAPE_EDT && p.fleet)
        r.error("shape", "edt waits for the tokens a bucket earns in time, and a fleet policy's "
                         "committed bucket earns none (the fleet grants them)");
    if (p.meter.warmup_ns && p.fleet)
        r.error("warmup", "a fleet policy's committed bucket earns what the fleet leases it, not "
                          "a rate of its own to warm up");
    if (p.meter.quota_bytes && p.fleet)
        r.error("quota", "a fleet policy's bound is the fleet's: its quota would be one host's "
                         "(give the quota to a policy of its own)");
    if (p.shape == TCM_SHAPE_EDT && p.meter.has_warmup_or_quota())
        r.error(p.meter.warmup_ns ? "warmup" : "quota",
                "edt gives a red packet the time its bucket earns the tokens back at the full "
                "rate: not yet with a warm-up or a quota (use --shape sockets or --aqm)");
    if (spec.contains("direction") && !spec["direction"].is_null() && !p.match.cgroup)
        r.error("direction", "only a cgroup policy states a direction (an address policy meters "
                             "where it is attached: attach --direction)");
    if (p.direction == TCM_CGROUP_INGRESS && p.match.cgroup) {
        // What the cgroup_skb hook can do (bpf/cgroup_in.bpf.c).
        const char *colors[] = {"green", "yellow", "red"};
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
}

} // namespace

Result<ParsedMeter> to_meter(const json &spec) {
    if (!spec.is_object())
        return std::unexpected(fmt::format("a meter must be an object, got {}", spec.dump()));
    std::vector<std::string> errors;
    Reader r(errors);
    Policy p;
    MeterSpec m;
    read_fields(r, spec, p, m, true);
    auto meter = parse_meter(m, errors);
    if (!errors.empty())
        return std::unexpected(join_lines(errors));
    return *meter;
}

Result<Policy> to_policy(const json &spec, uint32_t id) {
    if (!spec.is_object())
        return std::unexpected(fmt::format("a policy must be an object, got {}", spec.dump()));
    std::vector<std::string> errors;
    Reader r(errors);
    for (const auto &[key, value] : spec.items())
        if (std::ranges::find(policy_fields(), key) == policy_fields().end())
            r.error(key, "unknown field");
    Policy p;
    p.id = id;
    MeterSpec m;
    read_fields(r, spec, p, m, false);
    if (auto meter = parse_meter(m, errors))
        p.meter = meter->params;
    check_across(r, spec, p);
    if (!errors.empty())
        return std::unexpected(
            join_lines(errors, p.name.empty() ? "" : "policy '" + p.name + "': "));
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
