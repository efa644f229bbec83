// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// hier_replay.cpp: `replay -f` (docs/spec.md §2, §9): trace lines with addresses, the model engine
// (classifier, flow keys and chains in user space over the shared C meter) and the bpf engine
// (the real data-path program on a synthesized frame a line, with its test clock).
#include "tricolor/hier_replay.hpp"
#include "tricolor/hierarchy.hpp"
#include "tricolor/policy_fields.hpp"
#include "tricolor/rules.hpp"
#include "tricolor/text.hpp"
#include "tricolor/yaml.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <istream>
#include <ostream>
#include <sstream>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

namespace tricolor {
namespace {

// Bytes of the L4 header the data path reads (and so must be there).
uint32_t l4_header_len(uint8_t proto) {
    switch (proto) {
    case 6:
        return 20;
    case 17:
    case 136:
        return 8;
    case 132:
        return 12;
    case 1:
    case 58:
        return 8;
    default:
        return 0;
    }
}

// The IP and L4 headers a packet of @p's family and protocol must hold.
uint32_t headers_len(const FlowTracePacket &p) {
    return (p.ipv6 ? 40 : 20) + l4_header_len(p.proto);
}

// IPv6 next-header values the parser walks as extension headers: a trace cannot use them as
// the protocol of a packet without building the extension.
bool is_ipv6_extension(uint8_t proto) {
    return proto == 0 || proto == 43 || proto == 44 || proto == 51 || proto == 60 || proto == 135 ||
           proto == 139 || proto == 140 || proto == 59;
}

constexpr uint32_t kEthLen = 14;

} // namespace

bool protocol_has_ports(uint8_t proto) {
    return proto == 6 || proto == 17 || proto == 136 || proto == 132;
}

Result<std::optional<FlowTracePacket>> parse_flow_trace_line(std::string_view line,
                                                             size_t line_no) {
    auto fail = [&](const std::string &why) {
        return std::unexpected(fmt::format("line {}: {}", line_no, why));
    };
    auto f = split_trace_fields(line);
    if (f.empty() || f[0].front() == '#')
        return std::optional<FlowTracePacket>{};
    FlowTracePacket p;
    if (f.size() < 4)
        return fail(fmt::format("expected 'time_ns bytes [color] SRC DST [PROTO [SPORT DPORT]]', "
                                "got '{}'",
                                line));
    if (!parse_whole(f[0], p.time_ns))
        return fail(fmt::format("time '{}' is not a whole number of nanoseconds (0 to {})", f[0],
                                UINT64_MAX));
    size_t i = 2;
    if (auto c = parse_color(f[2])) {
        p.color = *c;
        ++i;
    }
    if (f.size() < i + 2)
        return fail("expected SRC and DST addresses after the length and colour");
    auto addr = [&](std::string_view text, std::array<uint8_t, 16> &out, bool &v6) {
        std::string s(text);
        v6 = s.find(':') != std::string::npos;
        return inet_pton(v6 ? AF_INET6 : AF_INET, s.c_str(), out.data()) == 1;
    };
    bool v6src = false, v6dst = false;
    if (!addr(f[i], p.src, v6src))
        return fail(fmt::format("source '{}' is not an IPv4 or IPv6 address", f[i]));
    if (!addr(f[i + 1], p.dst, v6dst))
        return fail(fmt::format("destination '{}' is not an IPv4 or IPv6 address", f[i + 1]));
    if (v6src != v6dst)
        return fail(fmt::format("'{}' and '{}' are of different address families", f[i], f[i + 1]));
    p.ipv6 = v6src;
    i += 2;
    if (i < f.size()) {
        auto proto = parse_protocol(f[i]);
        if (!proto)
            return fail(fmt::format("protocol '{}' is not tcp, udp, icmp, icmpv6, sctp or a number "
                                    "0-255",
                                    f[i]));
        if (p.ipv6 && is_ipv6_extension(*proto))
            return fail(fmt::format("protocol {} is an IPv6 extension header", *proto));
        p.proto = *proto;
        p.ports = protocol_has_ports(p.proto);
        ++i;
    }
    if (i < f.size()) {
        if (!p.ports)
            return fail(fmt::format("protocol {} has no ports, got '{}'", p.proto, f[i]));
        if (i + 2 != f.size() && i + 1 >= f.size())
            return fail("expected SPORT and DPORT");
        if (!parse_whole(f[i], p.sport))
            return fail(fmt::format("source port '{}' is not 0 to 65535", f[i]));
        if (i + 1 >= f.size() || !parse_whole(f[i + 1], p.dport))
            return fail(fmt::format("destination port '{}' is not 0 to 65535",
                                    i + 1 < f.size() ? f[i + 1] : ""));
        i += 2;
    }
    if (i < f.size())
        return fail(fmt::format("unexpected field '{}' after the ports", f[i]));
    uint64_t bytes = 0;
    uint32_t headers = headers_len(p);
    if (!parse_whole(f[1], bytes) || bytes < headers || bytes > 65535)
        return fail(fmt::format("packet length '{}' is not an IP length from {} (its headers) to "
                                "65535",
                                f[1], headers));
    p.bytes = static_cast<uint32_t>(bytes);
    return std::optional<FlowTracePacket>{p};
}

Result<std::vector<FlowTracePacket>> parse_flow_trace(std::istream &in) {
    std::vector<FlowTracePacket> trace;
    std::string line;
    for (size_t line_no = 1; std::getline(in, line); ++line_no) {
        auto parsed = parse_flow_trace_line(line, line_no);
        if (!parsed)
            return std::unexpected(parsed.error());
        if (*parsed)
            trace.push_back(**parsed);
    }
    if (in.bad())
        return std::unexpected("read error");
    return trace;
}

Result<std::vector<Policy>> load_policy_file(const std::string &path) {
    std::ifstream file(path);
    if (!file)
        return std::unexpected(
            fmt::format("cannot open policy file '{}': {}", path, std::strerror(errno)));
    std::stringstream text;
    text << file.rdbuf();
    auto doc = yaml_to_json(text.str());
    if (!doc)
        return std::unexpected(fmt::format("{}: {}", path, doc.error()));
    if (!doc->is_object() || !doc->contains("policies") || !(*doc)["policies"].is_array())
        return std::unexpected(fmt::format("{}: expected a 'policies:' list", path));
    std::vector<Policy> out;
    std::vector<std::string> errors;
    uint32_t id = 0;
    for (const auto &spec : (*doc)["policies"]) {
        auto p = to_policy(spec, id++);
        if (!p) {
            errors.push_back(p.error());
            continue;
        }
        if (p->match.ifindex)
            errors.push_back(fmt::format("policy '{}': match.iface cannot be replayed (replayed "
                                         "packets arrive on no interface)",
                                         p->name));
        if (p->match.cgroup)
            errors.push_back(fmt::format("policy '{}': match.cgroup cannot be replayed (replayed "
                                         "packets were sent by no process)",
                                         p->name));
        out.push_back(std::move(*p));
    }
    if (errors.empty()) {
        // What apply would refuse (names, ids, meters, the graph, classifier limits).
        std::set<std::string> names;
        for (const auto &p : out)
            if (!names.insert(p.name).second)
                errors.push_back(fmt::format("policy '{}': the name is used twice", p.name));
        for (auto &e : hierarchy_errors(out))
            errors.push_back(std::move(e));
    }
    if (!errors.empty()) {
        std::string all;
        for (const auto &e : errors)
            all += (all.empty() ? "" : "\n") + fmt::format("{}: {}", path, e);
        return std::unexpected(all);
    }
    return out;
}

// ---- the model ---------------------------------------------------------------------------

namespace {

// The packet's classifier key, as bpf/lib/parse.h fills it: a replayed frame is untagged (vlan
// 0), comes in on no interface, and carries its colour's DSCP (dscp_of_color).
tcm_class_key class_key_of(const FlowTracePacket &pkt) {
    tcm_class_key k{};
    uint32_t unused[4];
    const uint8_t len = pkt.ipv6 ? 128 : 32;
    store_prefix(Prefix{.ipv6 = pkt.ipv6, .addr = pkt.src, .len = len}, k.src, unused);
    store_prefix(Prefix{.ipv6 = pkt.ipv6, .addr = pkt.dst, .len = len}, k.dst, unused);
    k.flags = (pkt.ipv6 ? TCM_KEY_F_IPV6 : 0) | (pkt.ports ? TCM_KEY_F_PORTS : 0);
    k.proto = pkt.proto;
    if (pkt.ports) {
        k.sport = pkt.sport;
        k.dport = pkt.dport;
    }
    k.dscp = dscp_of_color(pkt.color);
    return k;
}

// Whether a rule takes the key: the data path's masked lookup, word by word.
bool covers(const RuleEntry &rule, const tcm_class_key &key) {
    uint32_t k[TCM_CLASS_KEY_WORDS], m[TCM_CLASS_KEY_WORDS], r[TCM_CLASS_KEY_WORDS];
    std::memcpy(k, &key, sizeof(k));
    std::memcpy(m, &rule.mask, sizeof(m));
    std::memcpy(r, &rule.key, sizeof(r));
    for (int i = 0; i < TCM_CLASS_KEY_WORDS; ++i)
        if ((k[i] & m[i]) != r[i])
            return false;
    return true;
}

void mask_bits(uint8_t *addr, size_t n, unsigned bits) {
    for (size_t i = 0; i < n; ++i) {
        unsigned keep = bits > 8 * i ? std::min(8u, bits - static_cast<unsigned>(8 * i)) : 0;
        addr[i] &= keep == 0 ? 0 : static_cast<uint8_t>(0xff << (8 - keep));
    }
}

// The length a level meters: its own `length` and `overhead` (docs/spec.md §3).
uint32_t level_len(const Policy &p, const FlowTracePacket &pkt) {
    return pkt.bytes + (p.length == TCM_LEN_L2 ? kEthLen : 0) + p.overhead;
}

} // namespace

uint8_t dscp_of_color(Color color) {
    switch (color) {
    case Color::yellow:
        return 12; // AF12
    case Color::red:
        return 14; // AF13
    default:
        return 0;
    }
}

HierModelEngine::HierModelEngine(std::vector<Policy> policies) : policies_(std::move(policies)) {
    for (const auto &p : policies_)
        configs_.push_back(make_meter_config(p.meter));
    for (const auto &p : policies_)
        exts_.push_back(make_policy_ext(p.meter));
    for (const auto &p : policies_) {
        ranked_.push_back(&p);
        // Matched by the rules the data path would hold (a cgroup policy has none here: a
        // replayed packet has no socket), so a new match field needs nothing of the model.
        rules_.push_back(rule_entries(p, 0, 0));
    }
    // The data path's rank (Datapath::apply): priority, then the longer prefix, then the name.
    std::ranges::sort(ranked_, [](const Policy *a, const Policy *b) {
        return std::tuple(a->priority, -static_cast<int>(specificity(a->match)), a->name) <
               std::tuple(b->priority, -static_cast<int>(specificity(b->match)), b->name);
    });
}

HierModelEngine::Key HierModelEngine::key_of(const Policy &p, const FlowTracePacket &pkt) const {
    Key k{};
    size_t n = pkt.ipv6 ? 16 : 4;
    k[0] = pkt.ipv6;
    switch (p.per) {
    case TCM_PER_AGGREGATE:
        k[0] = 0; // one bucket for both families
        break;
    case TCM_PER_SRC:
    case TCM_PER_DST: {
        uint8_t *a = &k[1];
        std::memcpy(a, (p.per == TCM_PER_SRC ? pkt.src : pkt.dst).data(), n);
        mask_bits(a, n, pkt.ipv6 ? p.prefix6 : p.prefix4);
        break;
    }
    case TCM_PER_CGROUP: // refused by load_policy_file: replayed packets have no process
        break;
    case TCM_PER_5TUPLE:
        std::memcpy(&k[1], pkt.src.data(), n);
        std::memcpy(&k[17], pkt.dst.data(), n);
        k[33] = pkt.proto;
        if (pkt.ports) {
            k[34] = pkt.sport >> 8;
            k[35] = pkt.sport & 0xff;
            k[36] = pkt.dport >> 8;
            k[37] = pkt.dport & 0xff;
        }
        break;
    }
    return k;
}

const tcm_meter_state *HierModelEngine::state(uint32_t policy_id,
                                              const FlowTracePacket &pkt) const {
    auto p = std::ranges::find(policies_, policy_id, &Policy::id);
    if (p == policies_.end())
        return nullptr;
    auto it = buckets_.find({policy_id, key_of(*p, pkt)});
    return it == buckets_.end() || !it->second.started ? nullptr : &it->second.state;
}

HierVerdict HierModelEngine::mark(const FlowTracePacket &pkt) {
    HierVerdict v;
    const Policy *matched = nullptr;
    const tcm_class_key key = class_key_of(pkt);
    for (const Policy *p : ranked_)
        if (std::ranges::any_of(rules_[p - policies_.data()],
                                [&](const RuleEntry &r) { return covers(r, key); })) {
            matched = p;
            break;
        }
    if (!matched)
        return v;
    v.policy_id = matched->id;

    // Decide every level on copies, at one instant; then commit all or nothing.
    struct Level {
        const Policy *policy;
        Bucket *bucket;
        tcm_meter_state next;
        tcm_ext_state next_ext;
    };
    std::vector<Level> levels;
    for (const Policy *p : chain_of(policies_, matched->name))
        levels.push_back({p, &buckets_[{p->id, key_of(*p, pkt)}], {}, {}});
    uint32_t color = static_cast<uint32_t>(pkt.color);
    const uint64_t now = pkt.time_ns; // the trace's clock is UTC for the quotas' periods
    if (levels.size() == 1 && matched->meter.has_warmup_or_quota()) {
        // As the data path's ext_meter_packet: on the bucket itself, a red packet a packet too.
        auto &b = *levels[0].bucket;
        const size_t i = matched - policies_.data();
        v.color = static_cast<Color>(quota_mark(&configs_[i], &exts_[i], &b.state, &b.ext, now, now,
                                                level_len(*matched, pkt), color, 0));
        b.started = true;
        return v;
    }
    for (size_t i = 0; i < levels.size(); ++i) {
        auto &l = levels[i];
        const size_t k = l.policy - policies_.data();
        const tcm_meter_config &cfg = configs_[k];
        const uint32_t len = level_len(*l.policy, pkt);
        l.next = l.bucket->state;
        l.next_ext = l.bucket->ext;
        if (l.policy->meter.has_warmup_or_quota()) {
            color = quota_mark(&cfg, &exts_[k], &l.next, &l.next_ext, now, now, len, color, i > 0);
            continue;
        }
        if (!l.bucket->started)
            meter_start(&cfg, &l.next, now);
        color = i == 0 ? meter_mark(&cfg, &l.next, now, len, color)
                       : meter_mark_aware(&cfg, &l.next, now, len, color);
    }
    for (auto &l : levels) {
        const size_t k = l.policy - policies_.data();
        if (color != TCM_RED) {
            l.bucket->state = l.next;
            l.bucket->ext = l.next_ext;
        } else if (l.policy->meter.has_warmup_or_quota()) {
            // The data path's chain_ext_level: a level meets a packet that ended red, red.
            quota_mark(&configs_[k], &exts_[k], &l.bucket->state, &l.bucket->ext, now, now,
                       level_len(*l.policy, pkt), TCM_RED, 1);
        } else if (!l.bucket->started) {
            meter_start(&configs_[k], &l.bucket->state, now);
        }
        l.bucket->started = true;
    }
    v.color = static_cast<Color>(color);
    return v;
}

// ---- the real data path --------------------------------------------------------------------

std::vector<uint8_t> synthesize_frame(const FlowTracePacket &p) {
    // The trace parser refuses such packets; a caller that builds its own must not get a frame
    // whose headers were written past its end.
    if (uint32_t headers = headers_len(p); p.bytes < headers)
        throw std::invalid_argument(fmt::format(
            "a {}-byte IP packet cannot hold its headers ({} bytes)", p.bytes, headers));
    std::vector<uint8_t> f(kEthLen + p.bytes, 0);
    f[12] = p.ipv6 ? 0x86 : 0x08;
    f[13] = p.ipv6 ? 0xdd : 0x00;
    uint8_t *ip = &f[kEthLen];
    uint8_t dscp = dscp_of_color(p.color);
    uint32_t l4 = 0;
    if (p.ipv6) {
        uint32_t word = 6u << 28 | static_cast<uint32_t>(dscp) << 22;
        uint32_t be = htonl(word);
        std::memcpy(ip, &be, 4);
        uint16_t payload = htons(static_cast<uint16_t>(p.bytes - 40));
        std::memcpy(ip + 4, &payload, 2);
        ip[6] = p.proto;
        ip[7] = 64;
        std::memcpy(ip + 8, p.src.data(), 16);
        std::memcpy(ip + 24, p.dst.data(), 16);
        l4 = 40;
    } else {
        ip[0] = 0x45;
        ip[1] = static_cast<uint8_t>(dscp << 2);
        uint16_t tot = htons(static_cast<uint16_t>(p.bytes));
        std::memcpy(ip + 2, &tot, 2);
        ip[8] = 64;
        ip[9] = p.proto;
        std::memcpy(ip + 12, p.src.data(), 4);
        std::memcpy(ip + 16, p.dst.data(), 4);
        uint32_t sum = 0;
        for (int i = 0; i < 20; i += 2)
            sum += static_cast<uint32_t>(ip[i]) << 8 | ip[i + 1];
        while (sum >> 16)
            sum = (sum & 0xffff) + (sum >> 16);
        uint16_t csum = htons(static_cast<uint16_t>(~sum));
        std::memcpy(ip + 10, &csum, 2);
        l4 = 20;
    }
    uint8_t *th = ip + l4;
    if (p.ports) {
        uint16_t s = htons(p.sport), d = htons(p.dport);
        std::memcpy(th, &s, 2);
        std::memcpy(th + 2, &d, 2);
        if (p.proto == 6)
            th[12] = 5 << 4; // data offset: 20 bytes
        if (p.proto == 17 || p.proto == 136) {
            uint16_t ulen = htons(static_cast<uint16_t>(p.bytes - l4));
            std::memcpy(th + 4, &ulen, 2);
        }
    } else if (p.proto == 1 || p.proto == 58) {
        th[0] = p.proto == 1 ? 8 : 128; // echo request
    }
    return f;
}

namespace {
DatapathOptions testing_options() {
    DatapathOptions o;
    o.testing = true;
    o.programs = DatapathOptions::kXdpProgram; // what mark_frame runs
    return o;
}
} // namespace

HierBpfEngine::HierBpfEngine(const std::vector<Policy> &policies) : dp_(testing_options()) {
    if (auto r = dp_.apply(policies); !r)
        throw std::runtime_error(r.error());
}

HierVerdict HierBpfEngine::mark(const FlowTracePacket &packet) {
    set_wall_offset(0); // a trace's times are UTC
    return mark_frame(packet.time_ns, synthesize_frame(packet));
}

HierVerdict HierBpfEngine::mark_frame(uint64_t time_ns, const std::vector<uint8_t> &frame) {
    dp_.set_clock(time_ns);
    dp_.run_xdp_verdict(frame);
    auto d = dp_.last_verdict();
    return HierVerdict{d.policy_id, d.color};
}

HierTotals run_hier_replay(HierEngine &engine, const std::vector<Policy> &policies,
                           const std::vector<FlowTracePacket> &trace, std::ostream &out) {
    HierTotals t;
    std::map<uint32_t, std::string> names;
    for (const auto &p : policies)
        names[p.id] = p.name;
    std::string buf;
    for (const auto &p : trace) {
        HierVerdict v = engine.mark(p);
        if (v.policy_id) {
            auto i = static_cast<size_t>(v.color);
            t.packets[i] += 1;
            t.bytes[i] += p.bytes;
        } else {
            t.unclassified_packets += 1;
            t.unclassified_bytes += p.bytes;
        }
        fmt::format_to(std::back_inserter(buf), "{},{},{},{}\n", p.time_ns, p.bytes,
                       to_string(v.color), v.policy_id ? names[*v.policy_id] : "-");
        if (buf.size() > (1 << 16) - 256) {
            out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
            buf.clear();
        }
    }
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    return t;
}

} // namespace tricolor
