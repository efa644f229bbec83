// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// wire.cpp: the JSON of the control protocol (docs/control.md): replies, the request's envelope
// and fields, and the JSON of attachments, counters, flows and buckets.
#include "daemon_internal.hpp"

#include <ctime>

#include "tricolor/control.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <arpa/inet.h>

namespace tricolor::daemon_internal {

json error(const std::string &message) {
    return json{{"ok", false}, {"error", message}};
}
json ok(json body) {
    body["ok"] = true;
    return body;
}

json warnings_body(const std::vector<std::string> &w) {
    json out = json::object();
    if (!w.empty())
        out["warnings"] = w;
    return out;
}

Result<std::string> need_string(const json &r, const char *field) {
    auto it = r.find(field);
    if (it == r.end() || !it->is_string() || it->get<std::string>().empty())
        return std::unexpected(fmt::format("the request needs \"{}\" (a non-empty string)", field));
    return it->get<std::string>();
}

Result<std::string> request_command(const json &r) {
    if (!r.is_object())
        return std::unexpected("a request must be a JSON object");
    auto cmd = r.find("cmd");
    if (cmd == r.end() || !cmd->is_string())
        return std::unexpected("the request needs \"cmd\" (a string)");
    auto version = r.find("version");
    if (version == r.end() || !version->is_number_integer())
        return std::unexpected(fmt::format(
            "the request needs \"version\" (the control protocol's: {})", kControlProtocolVersion));
    if (*version != kControlProtocolVersion)
        return std::unexpected(
            fmt::format("control protocol version {} asked; this tricolord speaks "
                        "version {} (tricolorctl and tricolord from one release agree)",
                        version->dump(), kControlProtocolVersion));
    return cmd->get<std::string>();
}

namespace {

bool is_kind(const json &v, Kind k) {
    switch (k) {
    case Kind::string:
        return v.is_string();
    case Kind::boolean:
        return v.is_boolean();
    case Kind::count:
        return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    case Kind::object:
        return v.is_object();
    case Kind::array:
        return v.is_array();
    }
    return false;
}

std::string_view kind_text(Kind k) {
    switch (k) {
    case Kind::string:
        return "a string";
    case Kind::boolean:
        return "true or false";
    case Kind::count:
        return "a whole number from 0";
    case Kind::object:
        return "an object";
    case Kind::array:
        return "an array";
    }
    return "?";
}

} // namespace

Result<void> check_fields(std::string_view cmd, const json &r, std::span<const Field> fields) {
    for (const auto &[key, value] : r.items()) {
        if (key == "cmd" || key == "version")
            continue;
        auto f = std::ranges::find(fields, std::string_view(key), &Field::name);
        if (f == fields.end()) {
            std::string known;
            for (const auto &k : fields)
                known += fmt::format("{}{}", known.empty() ? "" : ", ", k.name);
            return std::unexpected(
                fmt::format("{}: unknown field \"{}\" ({})", cmd, key,
                            known.empty() ? "it takes no fields" : "its fields: " + known));
        }
        if (!is_kind(value, f->kind))
            return std::unexpected(
                fmt::format("{}: \"{}\" must be {}", cmd, key, kind_text(f->kind)));
    }
    for (const auto &f : fields)
        if (f.required && !r.contains(f.name))
            return std::unexpected(
                fmt::format("{}: the request needs \"{}\" ({})", cmd, f.name, kind_text(f.kind)));
    return {};
}

Result<AttachmentSpec> attachment_from(const json &r) {
    AttachmentSpec a;
    if (r.contains("match_ifname")) {
        auto glob = need_string(r, "match_ifname");
        if (!glob)
            return std::unexpected(glob.error());
        if (r.contains("iface"))
            return std::unexpected("an attachment names an interface (iface) or a pattern "
                                   "(match_ifname), not both");
        if (auto bad = check_ifname_pattern(*glob); !bad.empty())
            return std::unexpected(fmt::format("match_ifname '{}': {}", *glob, bad));
        a.match_ifname = *glob;
    } else {
        auto iface = need_string(r, "iface");
        if (!iface)
            return std::unexpected(iface.error());
        a.iface = *iface;
    }
    if (r.contains("managed_by")) {
        auto m = need_string(r, "managed_by");
        if (!m)
            return std::unexpected(m.error());
        a.managed_by = *m;
    }
    std::string hook = r.value("hook", "xdp"), dir = r.value("direction", "ingress"),
                mode = r.value("xdp_mode", "auto");
    if (hook == "xdp")
        a.hook = Hook::xdp;
    else if (hook == "tc")
        a.hook = Hook::tc;
    else
        return std::unexpected(fmt::format("hook '{}' is not xdp or tc", hook));
    if (dir == "ingress")
        a.direction = Direction::ingress;
    else if (dir == "egress")
        a.direction = Direction::egress;
    else
        return std::unexpected(fmt::format("direction '{}' is not ingress or egress", dir));
    if (a.hook == Hook::xdp && a.direction == Direction::egress)
        return std::unexpected("XDP only sees ingress traffic: use --hook tc for egress");
    if (mode == "auto")
        a.xdp_mode = XdpMode::auto_mode;
    else if (mode == "native")
        a.xdp_mode = XdpMode::native;
    else if (mode == "generic")
        a.xdp_mode = XdpMode::generic;
    else
        return std::unexpected(fmt::format("xdp mode '{}' is not native, generic or auto", mode));
    if (auto it = r.find("ifindex"); it != r.end() && it->is_number_integer())
        a.ifindex = it->get<int>(); // recorded in the state file
    return a;
}

json attachment_json(const AttachmentSpec &a) {
    json j = {{"hook", to_string(a.hook)}, {"direction", to_string(a.direction)}};
    if (a.match_ifname.empty())
        j["iface"] = a.iface;
    else
        j["match_ifname"] = a.match_ifname;
    if (a.hook == Hook::xdp)
        j["xdp_mode"] = to_string(a.xdp_mode);
    if (!a.by.empty())
        j["by"] = a.by;
    if (!a.managed_by.empty())
        j["managed_by"] = a.managed_by;
    return j;
}

// Why @glob cannot name an interface ("" if it can): a name is 1 to 15 bytes of anything but
// '/', ':' and white space (dev_valid_name); a glob is no longer than a name's worth of
// characters and brackets.
std::string check_ifname_pattern(const std::string &glob) {
    if (glob.empty())
        return "empty";
    if (glob.size() > 64)
        return "longer than any pattern of a 15-byte name needs";
    for (unsigned char c : glob)
        if (c == '/' || c == ':' || std::isspace(c) || !std::isprint(c))
            return "an interface name has no '/', ':', white space or control characters";
    if (glob == "." || glob == "..")
        return "not an interface name";
    if (glob.find_first_of("*?[") == std::string::npos)
        return "no wildcard (*, ? or [...]): attach the interface by name";
    if (std::ranges::count(glob, '[') != std::ranges::count(glob, ']'))
        return "a '[' without its ']'";
    return "";
}

json counters_json(const tcm_counters &c) {
    json out;
    const char *names[] = {"green", "yellow", "red"};
    for (int i = 0; i < TCM_NR_COLORS; ++i)
        out[names[i]] = {{"packets", c.packets[i]}, {"bytes", c.bytes[i]}};
    return out;
}

// @ns since the Unix epoch as ISO 8601 UTC, to the second ("never": past 2^64 ns).
static std::string format_utc(uint64_t ns) {
    if (ns == UINT64_MAX)
        return "never";
    time_t t = static_cast<time_t>(ns / 1000000000);
    tm u{};
    gmtime_r(&t, &u);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &u);
    return buf;
}

json quota_json(const Datapath::QuotaUse &q) {
    return {{"quota", q.quota},
            {"used", q.used},
            {"left", q.left},
            {"reset", format_utc(q.reset_ns)},
            {"reset_ns", q.reset_ns}};
}

json tcp_counters_json(const ShapeCounters &c) {
    auto pb = [](uint64_t packets, uint64_t bytes) {
        return json{{"packets", packets}, {"bytes", bytes}};
    };
    return {{"aqm",
             {{"marked", pb(c.tcp.aqm_marked_packets, c.tcp.aqm_marked_bytes)},
              {"dropped", pb(c.tcp.aqm_dropped_packets, c.tcp.aqm_dropped_bytes)}}},
            {"shape",
             {{"sockets", c.sockets},
              {"delayed", pb(c.tcp.shape_delayed_packets, c.tcp.shape_delayed_bytes)},
              {"dropped", pb(c.tcp.shape_dropped_packets, c.tcp.shape_dropped_bytes)}}}};
}

namespace {

std::string addr_text(const uint32_t a[4], bool v4) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (v4)
        inet_ntop(AF_INET, &a[3], buf, sizeof(buf));
    else
        inet_ntop(AF_INET6, a, buf, sizeof(buf));
    return buf;
}

bool is_v4_mapped(const uint32_t a[4]) {
    return a[0] == 0 && a[1] == 0 && a[2] == htonl(0x0000ffff);
}

} // namespace

std::string flow_key_text(const tcm_flow_key &k, const Policy &p,
                          const std::function<std::string(uint64_t)> &cgroup_path) {
    bool v4 = is_v4_mapped(k.src) || is_v4_mapped(k.dst);
    auto with_len = [&](const uint32_t a[4], bool ipv4) {
        unsigned len = ipv4 ? p.prefix4 : p.prefix6;
        std::string s = addr_text(a, ipv4);
        return (ipv4 ? len < 32 : len < 128) ? fmt::format("{}/{}", s, len) : s;
    };
    switch (p.per) {
    case TCM_PER_SRC:
        return "src " + with_len(k.src, is_v4_mapped(k.src));
    case TCM_PER_DST:
        return "dst " + with_len(k.dst, is_v4_mapped(k.dst));
    case TCM_PER_5TUPLE:
        return fmt::format("proto {} {}:{} > {}:{}", k.proto, addr_text(k.src, v4), k.sport,
                           addr_text(k.dst, v4), k.dport);
    case TCM_PER_CGROUP: {
        // flow.h keys the cgroup's id into the first two words of src.
        uint64_t id = static_cast<uint64_t>(k.src[1]) << 32 | k.src[0];
        std::string path = cgroup_path ? cgroup_path(id) : std::string();
        return path.empty() ? fmt::format("cgroup id {} (removed?)", id)
                            : fmt::format("cgroup {}", path);
    }
    default:
        return "aggregate";
    }
}

json buckets_json(const Policy &p, const tcm_flow &f, uint64_t now_ns) {
    tcm_meter_config cfg = make_meter_config(p.meter);
    tcm_meter_state st = f.meter;
    if (!(f.flags & TCM_FLOW_F_STARTED))
        meter_start(&cfg, &st, now_ns); // no packet yet: full
    else
        meter_refill(&cfg, &st, now_ns);
    const char *unit = p.meter.packet_mode ? "packets" : "bytes";
    auto one = [&](uint64_t tokens, uint64_t size) {
        uint64_t per = cfg.unit_tokens ? cfg.unit_tokens : 1;
        double pct = size ? 100.0 * static_cast<double>(tokens) / static_cast<double>(size) : 0;
        return json{{unit, tokens / per}, {"size", size / per}, {"percent", pct}};
    };
    return {
        {"c", one(st.c_tokens, cfg.c_size)},
        {info(p.meter.algo).second == SecondBucket::peak ? "p" : "e", one(st.e_tokens, cfg.e_size)},
        {"unit", unit}};
}

} // namespace tricolor::daemon_internal
