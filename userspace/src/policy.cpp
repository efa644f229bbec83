// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy.cpp: the parsers and printers of match and action values, and the pacing rate a
// policy's --shape sockets gives its TCP sockets.
#include "tricolor/policy.hpp"
#include "tricolor/rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <arpa/inet.h>
#include <charconv>
#include <cstring>

namespace tricolor {
namespace {

template <typename T>
bool parse_number(std::string_view text, T &out) {
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && ptr == text.data() + text.size() && !text.empty();
}

} // namespace

Result<Prefix> parse_prefix(std::string_view text) {
    auto fail = [&](std::string_view why) {
        return std::unexpected(fmt::format("invalid prefix '{}': {}", text, why));
    };
    Prefix p;
    std::string addr(text.substr(0, text.find('/')));
    p.ipv6 = addr.find(':') != std::string::npos;
    if (inet_pton(p.ipv6 ? AF_INET6 : AF_INET, addr.c_str(), p.addr.data()) != 1)
        return fail(p.ipv6 ? "not an IPv6 address" : "not an IPv4 address");
    unsigned max = p.ipv6 ? 128 : 32;
    p.len = static_cast<uint8_t>(max);
    if (auto slash = text.find('/'); slash != std::string_view::npos) {
        unsigned len = 0;
        if (!parse_number(text.substr(slash + 1), len) || len > max)
            return fail(fmt::format("prefix length must be 0 to {}", max));
        p.len = static_cast<uint8_t>(len);
    }
    // Host bits set below the prefix are a typo more often than not: refuse them.
    uint32_t key[4], mask[4];
    store_prefix(p, key, mask);
    for (int i = 0; i < 4; ++i)
        if (key[i] & ~mask[i])
            return fail("host bits are set beyond the prefix length");
    return p;
}

std::string to_string(const Prefix &p) {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(p.ipv6 ? AF_INET6 : AF_INET, p.addr.data(), buf, sizeof(buf));
    return fmt::format("{}/{}", buf, p.len);
}

Result<PortRange> parse_port_range(std::string_view text) {
    auto fail = [&] {
        return std::unexpected(fmt::format(
            "invalid port '{}': use a port 0-65535 or a range LO-HI with LO <= HI", text));
    };
    PortRange r;
    auto dash = text.find('-');
    uint32_t lo = 0, hi = 0;
    if (dash == std::string_view::npos) {
        if (!parse_number(text, lo) || lo > 65535)
            return fail();
        hi = lo;
    } else if (!parse_number(text.substr(0, dash), lo) ||
               !parse_number(text.substr(dash + 1), hi) || lo > 65535 || hi > 65535 || lo > hi) {
        return fail();
    }
    r.lo = static_cast<uint16_t>(lo);
    r.hi = static_cast<uint16_t>(hi);
    return r;
}

namespace {
struct DscpName {
    std::string_view name;
    uint8_t value;
};
constexpr DscpName kDscpNames[] = {
    {"ef", 46},   {"af11", 10}, {"af12", 12}, {"af13", 14}, {"af21", 18}, {"af22", 20},
    {"af23", 22}, {"af31", 26}, {"af32", 28}, {"af33", 30}, {"af41", 34}, {"af42", 36},
    {"af43", 38}, {"cs0", 0},   {"cs1", 8},   {"cs2", 16},  {"cs3", 24},  {"cs4", 32},
    {"cs5", 40},  {"cs6", 48},  {"cs7", 56},
};

Result<uint32_t> parse_dscp_arg(std::string_view, std::string_view arg) {
    return parse_dscp(arg);
}

Result<uint32_t> parse_u32(std::string_view word, std::string_view arg) {
    uint32_t v = 0;
    if (!parse_number(arg, v))
        return std::unexpected(fmt::format("{} must be a number 0 to 4294967295", word));
    return v;
}

// tc writes class ids in hex: 1:10 is 0x0001:0x0010, skb->priority 0x00010010.
Result<uint32_t> parse_classid(std::string_view, std::string_view arg) {
    auto c2 = arg.find(':');
    uint32_t maj = 0, min = 0;
    auto hex = [](std::string_view s, uint32_t &out) {
        auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
        return ec == std::errc() && ptr == s.data() + s.size() && !s.empty() && out <= 0xffff;
    };
    if (c2 == std::string_view::npos || !hex(arg.substr(0, c2), maj) ||
        !hex(arg.substr(c2 + 1), min))
        return std::unexpected("classid must be MAJ:MIN in hex, each 0 to ffff (e.g. 1:10)");
    return maj << 16 | min;
}

// The first row of a kind is the word its actions are printed with.
constexpr ActionWord kActionWords[] = {
    {"pass", TCM_ACT_KIND_PASS, "pass", nullptr, false},
    {"drop", TCM_ACT_KIND_DROP, "drop", nullptr, false},
    {"dscp", TCM_ACT_KIND_DSCP, "dscp:N|NAME", parse_dscp_arg, false},
    {"mark", TCM_ACT_KIND_MARK, "mark:N", parse_u32, true},
    {"priority", TCM_ACT_KIND_PRIORITY, "priority:N", parse_u32, true},
    {"classid", TCM_ACT_KIND_PRIORITY, "classid:MAJ:MIN", parse_classid, true},
};

} // namespace

Result<uint8_t> parse_dscp(std::string_view text) {
    for (const auto &d : kDscpNames)
        if (text == d.name)
            return d.value;
    uint32_t v = 0;
    if (!parse_number(text, v) || v > 63)
        return std::unexpected("DSCP must be 0 to 63 or a name (ef, af11..af43, cs0..cs7)");
    return static_cast<uint8_t>(v);
}

std::span<const ActionWord> action_words() {
    return kActionWords;
}

bool action_is_tc_only(tcm_action_kind kind) {
    return std::ranges::any_of(kActionWords,
                               [&](const ActionWord &w) { return w.kind == kind && w.tc_only; });
}

Result<Action> parse_action(std::string_view text) {
    auto fail = [&](std::string_view why) {
        return std::unexpected(fmt::format("invalid action '{}': {}", text, why));
    };
    auto colon = text.find(':');
    std::string_view word = text.substr(0, colon);
    for (const ActionWord &w : kActionWords) {
        if (w.word != word)
            continue;
        if (!w.parse) {
            if (colon != std::string_view::npos)
                return fail(fmt::format("{} takes no value", w.word));
            return Action{w.kind, 0};
        }
        if (colon == std::string_view::npos)
            return fail(fmt::format("{} takes a value: {}", w.word, w.usage));
        auto v = w.parse(w.word, text.substr(colon + 1));
        if (!v)
            return fail(v.error());
        return Action{w.kind, *v};
    }
    std::string all;
    for (const ActionWord &w : kActionWords)
        all += fmt::format("{}{}", all.empty() ? "" : ", ", w.usage);
    if (colon == std::string_view::npos)
        return fail(fmt::format("use one of {}", all));
    return fail(fmt::format("unknown action '{}' (use one of {})", word, all));
}

std::string to_string(const Action &a) {
    if (a.kind == TCM_ACT_KIND_DSCP)
        for (const auto &d : kDscpNames)
            if (d.value == a.value)
                return fmt::format("dscp:{}", d.name);
    for (const ActionWord &w : kActionWords)
        if (w.kind == a.kind)
            return w.parse ? fmt::format("{}:{}", w.word, a.value) : std::string(w.word);
    return "?";
}

std::array<Color, 64> af_color_map() {
    std::array<Color, 64> map;
    map.fill(Color::green);
    for (int cls = 1; cls <= 4; ++cls) {
        map[cls * 8 + 4] = Color::yellow; // AFx2
        map[cls * 8 + 6] = Color::red;    // AFx3
    }
    return map;
}

uint64_t shape_payload_rate(const Policy &p) {
    if (p.meter.packet_mode)
        return 0;
    // Linux's pacing counts a segment's TCP payload and header (1448 + 32 with timestamps); the
    // meter counts 20 more of IP, 14 more of Ethernet with --length l2, and the policy's
    // overhead. This rate puts CIR on the wire; the sockets pace a little over or under their
    // share of it as the bucket's level moves (bpf/lib/shape.h), so that being off by a few
    // header bytes (IPv6, options) costs nothing in the long run.
    const uint64_t paced = 1448 + 32;
    uint64_t wire = paced + 20 + (p.length == TCM_LEN_L2 ? 14 : 0) + p.overhead;
    unsigned __int128 r = static_cast<unsigned __int128>(p.meter.cir) * paced;
    uint64_t rate = static_cast<uint64_t>(r / (static_cast<unsigned __int128>(wire) * 8));
    return std::max<uint64_t>(rate, 1);
}

} // namespace tricolor
