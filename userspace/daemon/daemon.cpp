// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// daemon.cpp: see daemon.hpp.
#include "daemon.hpp"

#include "tricolor/control.hpp"
#include "tricolor/policy_spec.hpp"
#include "tricolor/shape.hpp"
#include "tricolor/text.hpp"
#include "tricolor/yaml.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <net/if.h>
#include <optional>
#include <set>
#include <span>
#include <unistd.h>

namespace tricolor {

using nlohmann::json;

namespace {

json error(const std::string &message) {
    return json{{"ok", false}, {"error", message}};
}
json ok(json body = json::object()) {
    body["ok"] = true;
    return body;
}

Result<std::string> need_string(const json &r, const char *field) {
    auto it = r.find(field);
    if (it == r.end() || !it->is_string() || it->get<std::string>().empty())
        return std::unexpected(fmt::format("the request needs \"{}\" (a non-empty string)", field));
    return it->get<std::string>();
}

json counters_json(const tcm_counters &c) {
    json out;
    const char *names[] = {"green", "yellow", "red"};
    for (int i = 0; i < TCM_NR_COLORS; ++i)
        out[names[i]] = {{"packets", c.packets[i]}, {"bytes", c.bytes[i]}};
    return out;
}

Result<AttachmentSpec> attachment_from(const json &r) {
    AttachmentSpec a;
    auto iface = need_string(r, "iface");
    if (!iface)
        return std::unexpected(iface.error());
    a.iface = *iface;
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
    json j = {
        {"iface", a.iface}, {"hook", to_string(a.hook)}, {"direction", to_string(a.direction)}};
    if (a.hook == Hook::xdp)
        j["xdp_mode"] = to_string(a.xdp_mode);
    return j;
}

bool same_hook(const AttachmentSpec &a, const AttachmentSpec &b) {
    return a.iface == b.iface && a.hook == b.hook && a.direction == b.direction;
}

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

std::string flow_key_text(const tcm_flow_key &k, const Policy &p) {
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
    default:
        return "aggregate";
    }
}

// The two buckets of @f as of @now_ns: what a packet arriving now would find (the refill since
// the last packet included). In bytes (packets in packet mode) and percent of the size.
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
    return {{"c", one(st.c_tokens, cfg.c_size)},
            {p.meter.algo == Algo::trtcm ? "p" : "e", one(st.e_tokens, cfg.e_size)},
            {"unit", unit}};
}

} // namespace

std::string default_state_path(const std::string &pin_dir) {
    std::string dir = pin_dir;
    while (dir.size() > 1 && dir.back() == '/')
        dir.pop_back();
    if (dir == kDefaultPinDir)
        return "/var/lib/tricolor/state.yaml";
    std::string key;
    for (char c : dir)
        key += c == '/' ? '-' : c;
    while (!key.empty() && key.front() == '-')
        key.erase(key.begin());
    return fmt::format("/var/lib/tricolor/state-{}.yaml", key);
}

namespace {

namespace fs = std::filesystem;

// A config or state file, read and checked for shape (the policies are checked later, whole).
struct Doc {
    std::vector<json> specs;
    std::vector<AttachmentSpec> attachments;
    uint64_t text_hash = 0; // of the file as read: names the state a journal extends
};

// FNV-1a: tells one state file's text from another's, nothing more.
uint64_t text_hash(std::string_view text) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : text)
        h = (h ^ c) * 1099511628211ull;
    return h;
}

// Empty optional: there is no such file.
Result<std::optional<Doc>> read_doc(const std::string &path) {
    std::error_code ec;
    auto st = fs::status(path, ec);
    if (ec || st.type() == fs::file_type::not_found)
        return std::optional<Doc>{};
    if (st.type() == fs::file_type::directory)
        return std::unexpected(fmt::format("{} is a directory, not a file", path));
    std::ifstream in(path);
    if (!in)
        return std::unexpected(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    std::string text;
    try {
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::exception &) {
        return std::unexpected(fmt::format("cannot read {}", path));
    }
    if (in.bad())
        return std::unexpected(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    auto parsed = yaml_to_json(text);
    if (!parsed)
        return std::unexpected(fmt::format("{}: {}", path, parsed.error()));
    json cfg = *parsed;
    if (cfg.is_null())
        cfg = json::object(); // an empty file
    if (!cfg.is_object())
        return std::unexpected(
            fmt::format("{}: expected sections policies: and attachments:", path));
    for (const auto &[key, value] : cfg.items())
        if (key != "policies" && key != "attachments")
            return std::unexpected(fmt::format("{}: unknown section '{}'", path, key));
    Doc doc;
    doc.text_hash = text_hash(text);
    if (cfg.contains("policies") && !cfg["policies"].is_null()) {
        if (!cfg["policies"].is_array())
            return std::unexpected(fmt::format("{}: policies must be a list", path));
        doc.specs.assign(cfg["policies"].begin(), cfg["policies"].end());
    }
    if (cfg.contains("attachments") && !cfg["attachments"].is_null()) {
        if (!cfg["attachments"].is_array())
            return std::unexpected(fmt::format("{}: attachments must be a list", path));
        for (const auto &a : cfg["attachments"]) {
            auto spec = attachment_from(a.is_object() ? a : json::object());
            if (!spec)
                return std::unexpected(
                    fmt::format("{}: attachment {}: {}", path, a.dump(), spec.error()));
            for (const auto &b : doc.attachments)
                if (same_hook(b, *spec))
                    return std::unexpected(
                        fmt::format("{}: attachment {} is listed twice", path, a.dump()));
            doc.attachments.push_back(*spec);
        }
    }
    return std::optional<Doc>{std::move(doc)};
}

std::string hook_text(const AttachmentSpec &a) {
    return a.hook == Hook::xdp ? fmt::format("{} xdp", a.iface)
                               : fmt::format("{} tc {}", a.iface, to_string(a.direction));
}

// docs/spec.md §8: what a policy's --shape needs of the attachments. Empty if it can be applied.
std::string shape_problem(const Policy &p, const std::vector<AttachmentSpec> &attachments) {
    std::vector<const AttachmentSpec *> egress;
    for (const auto &a : attachments)
        if (a.hook == Hook::tc && a.direction == Direction::egress)
            egress.push_back(&a);
    if (p.shape == TCM_SHAPE_SOCKETS) {
        if (!attachments.empty() && egress.empty())
            return fmt::format(
                "policy '{}': shape sockets paces this host's TCP senders, whose packets tricolor "
                "sees on a tc egress attachment; {} only has {}: add `tricolorctl attach IF "
                "--hook tc --direction egress`, or use --aqm for remote senders",
                p.name, attachments.front().iface,
                attachments.front().hook == Hook::xdp ? "XDP (ingress)" : "tc ingress");
    } else if (p.shape == TCM_SHAPE_EDT) {
        if (egress.empty())
            return fmt::format("policy '{}': shape edt gives departure times on a tc egress "
                               "attachment with fq as its qdisc, and there is none",
                               p.name);
        for (const auto *a : egress)
            if (root_qdisc(a->iface) != "fq")
                return fmt::format("policy '{}': shape edt needs fq as the egress qdisc of {}: "
                                   "tc qdisc replace dev {} root fq",
                                   p.name, a->iface, a->iface);
    }
    return "";
}

std::vector<uint32_t> egress_ifindexes(const std::vector<AttachmentSpec> &attachments) {
    std::vector<uint32_t> out;
    for (const auto &a : attachments)
        if (a.hook == Hook::tc && a.direction == Direction::egress)
            if (auto idx = interface_index(a.iface))
                out.push_back(static_cast<uint32_t>(*idx));
    return out;
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

} // namespace

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {
    if (options_.state.empty())
        options_.state = default_state_path(options_.pin_dir);
    DatapathOptions o;
    o.pin_dir = options_.pin_dir;
    o.flow_capacity = options_.flow_capacity;
    o.top_keep = options_.top_keep;
    dp_ = std::make_unique<Datapath>(o);
    dp_->set_drop_malformed(options_.drop_malformed);
    if (!options_.fleet.empty()) {
        auto url = fleet::parse_redis_url(options_.fleet);
        if (!url)
            throw std::runtime_error("--fleet " + url.error());
        fleet::AgentOptions fo;
        fo.url = *url;
        fo.node = options_.fleet_node;
        fo.fallback = options_.fleet_fallback;
        fo.period = std::chrono::milliseconds(options_.fleet_period_ms);
        fo.lease = std::chrono::milliseconds(options_.fleet_lease_ms);
        fleet_ = std::make_unique<fleet::Agent>(fo, *dp_);
    }
    for (const auto &p : dp_->policies())
        adopted_ids_[p.name] = p.id;
    if (auto r = load_at_start(); !r)
        throw std::runtime_error(r.error());
    // A sock_ops link an earlier daemon pinned: swap our program in (it reads the same maps),
    // once the config is applied, so that it knows which policies shape from its first socket.
    if (sockops_attached(link_dir()))
        if (auto r = attach_sockops(dp_->sockops_prog_fd(), link_dir()); !r)
            startup_warnings.push_back(r.error());
}

Daemon::~Daemon() = default;

std::string Daemon::link_dir() const {
    return dp_->pin_path().empty() ? "" : dp_->pin_path() + "/links";
}

// Policy ids for one change: a name keeps the id it has (active, else adopted from the pinned
// maps); a new name takes the lowest id nobody holds. Built once per change, not per policy.
class Daemon::IdAllocator {
  public:
    IdAllocator(const std::vector<Entry> &active, const std::map<std::string, uint32_t> &adopted)
        : known_(adopted) {
        for (const auto &e : active)
            known_[e.spec.value("name", "")] = e.id;
        for (const auto &[name, id] : known_)
            used_.insert(id);
    }
    uint32_t operator()(const std::string &name) {
        if (auto it = known_.find(name); it != known_.end())
            return it->second;
        while (used_.contains(cursor_))
            ++cursor_;
        used_.insert(cursor_);
        return cursor_;
    }

  private:
    std::map<std::string, uint32_t> known_;
    std::set<uint32_t> used_;
    uint32_t cursor_ = 0;
};

Daemon::Entry Daemon::make_entry(uint32_t id, const json &spec, const Policy &p) {
    return {id, spec, p.name,
            fmt::format("{}|{}", p.priority, spec.value("match", json::object()).dump())};
}

Result<Policy> Daemon::prepare_one(const json &spec, uint32_t id,
                                   std::vector<std::string> *warnings) const {
    auto p = to_policy(spec, id);
    if (!p)
        return p;
    const std::string &name = p->name;
    if (warnings) {
        bool xdp_only = !attachments_.empty() &&
                        std::ranges::none_of(attachments_, [](const AttachmentSpec &a) {
                            return a.hook == Hook::tc;
                        });
        for (const auto &w : validate(p->meter).warnings)
            warnings->push_back(fmt::format("policy '{}': {}", name, w));
        if (p->meter.algo == Algo::rfc4115 && !spec.contains("eir"))
            warnings->push_back(
                fmt::format("policy '{}': rfc4115 without --eir: EIR is 0, so E never refills and "
                            "yellow only spends the EBS it starts with (give --eir, or use srtcm)",
                            name));
        for (const auto &a : p->actions)
            if (xdp_only && (a.kind == TCM_ACT_KIND_MARK || a.kind == TCM_ACT_KIND_PRIORITY))
                warnings->push_back(
                    fmt::format("policy '{}': {} only acts on tc attachments; on XDP the packet "
                                "passes",
                                name, to_string(a)));
    }
    std::vector<std::string> errors;
    if (p->fleet && !fleet_)
        errors.push_back(fmt::format("policy '{}': fleet needs tricolord --fleet "
                                     "redis://HOST:PORT (this daemon is in no fleet)",
                                     name));
    if (auto why = shape_problem(*p, attachments_); !why.empty())
        errors.push_back(why);
    if (!errors.empty())
        return std::unexpected(join_lines(errors));
    return p;
}

std::string Daemon::same_match_warning(const std::string &later, const std::string &first) {
    return fmt::format("policy '{}': same match and priority as '{}', which wins the tie by "
                       "name: '{}' will never match (give it a lower --priority or a narrower "
                       "--match)",
                       later, first, later);
}

Result<Daemon::Prepared> Daemon::prepare(const std::vector<json> &specs,
                                         std::vector<std::string> *warnings,
                                         const std::string &warn_about) {
    Prepared out;
    IdAllocator id_for(policies_, adopted_ids_);
    std::vector<std::string> errors;
    std::set<std::string> names;
    auto concerns = [&](const std::string &name) {
        return warn_about.empty() || name == warn_about;
    };
    for (const auto &spec : specs) {
        std::string name = spec.is_object() ? spec.value("name", "") : "";
        if (!name.empty() && !names.insert(name).second) {
            errors.push_back(fmt::format("policy '{}' is defined twice", name));
            continue;
        }
        uint32_t id = id_for(name);
        auto p = prepare_one(spec, id, warnings && concerns(name) ? warnings : nullptr);
        if (!p) {
            errors.push_back(p.error());
            continue;
        }
        out.entries.push_back(make_entry(id, spec, *p));
        out.policies.push_back(std::move(*p));
    }
    if (!errors.empty())
        return std::unexpected(join_lines(errors));
    // Two policies with the same match and priority: the name breaks the tie, always the same
    // way, so every later name never sees a packet.
    if (warnings) {
        std::map<std::string, std::vector<std::string>> same;
        for (const auto &e : out.entries)
            same[e.match_key].push_back(e.name);
        for (auto &[key, group] : same) {
            if (group.size() < 2)
                continue;
            std::ranges::sort(group);
            for (size_t k = 1; k < group.size(); ++k)
                if (concerns(group[0]) || concerns(group[k]))
                    warnings->push_back(same_match_warning(group[k], group[0]));
        }
    }
    return out;
}

// One policy added or changed (@spec) or deleted (no @spec): checked on its own and against the
// set around it, one record appended to the state journal, one atomic change of the data path.
// A change to one policy of thousands costs that policy's, not the set's.
Result<void> Daemon::change_one(const std::string &name, const json *spec,
                                std::vector<std::string> *warnings) {
    auto at = std::ranges::find(policies_, name, &Entry::name);
    if (!spec && at == policies_.end())
        return std::unexpected(fmt::format("no policy named '{}'", name));
    uint32_t id = 0;
    if (at != policies_.end()) {
        id = at->id;
    } else if (auto a = adopted_ids_.find(name); a != adopted_ids_.end()) {
        id = a->second;
    } else {
        std::vector<bool> used(TCM_MAX_POLICIES + 1);
        for (const auto &e : policies_)
            used[std::min<uint32_t>(e.id, TCM_MAX_POLICIES)] = true;
        for (const auto &[n, i] : adopted_ids_)
            used[std::min<uint32_t>(i, TCM_MAX_POLICIES)] = true;
        while (id < TCM_MAX_POLICIES && used[id])
            ++id;
    }
    std::optional<Policy> policy;
    if (spec) {
        auto p = prepare_one(*spec, id, warnings);
        if (!p)
            return std::unexpected(p.error());
        policy = std::move(*p);
        if (warnings) {
            std::string key = make_entry(id, *spec, *policy).match_key;
            for (const auto &e : policies_)
                if (e.name != name && e.match_key == key)
                    warnings->push_back(e.name < name ? same_match_warning(name, e.name)
                                                      : same_match_warning(e.name, name));
        }
        if (policy->shape == TCM_SHAPE_SOCKETS) {
            dp_->set_shape_ifaces(egress_ifindexes(attachments_));
            if (!sockops_attached(link_dir()))
                if (auto r = attach_sockops(dp_->sockops_prog_fd(), link_dir()); !r)
                    return std::unexpected(r.error());
        }
    }
    // Recorded before it is applied: one journal line, or (with no state file to extend) the
    // state written whole. A change that cannot be recorded is refused.
    bool journaled = false;
    if (state_hash_) {
        auto logged = journal_append(spec ? json{{"put", *spec}} : json{{"del", name}});
        if (!logged)
            return std::unexpected(logged.error());
        journaled = *logged;
    }
    if (!journaled) {
        std::vector<json> after;
        for (const auto &e : policies_)
            if (e.name != name)
                after.push_back(e.spec);
            else if (spec)
                after.push_back(*spec);
        if (spec && at == policies_.end())
            after.push_back(*spec);
        if (auto s = stage(state_json(after, attachments_)); !s)
            return s;
    }
    {
        // The fleet agent must not grant into a set being changed.
        std::unique_lock<std::mutex> hold;
        if (fleet_)
            hold = fleet_->hold();
        auto r = policy ? dp_->upsert(*policy) : dp_->remove(id);
        if (!r) {
            if (journaled)
                journal_undo();
            else
                unstage();
            return r;
        }
    }
    if (fleet_)
        fleet_->set_policies(dp_->policies());
    if (!spec)
        policies_.erase(at);
    else if (at != policies_.end())
        *at = make_entry(id, *spec, *policy);
    else
        policies_.push_back(make_entry(id, *spec, *policy));
    adopted_ids_.erase(name);
    if (!journaled)
        if (auto c = commit(); !c && warnings)
            warnings->push_back(c.error());
    return {};
}

Result<void> Daemon::apply_specs(const std::vector<json> &specs, bool dry_run,
                                 std::vector<std::string> *warnings,
                                 const std::string &warn_about) {
    auto prep = prepare(specs, warnings, warn_about);
    if (!prep)
        return std::unexpected(prep.error());
    // --shape sockets: the sock_ops program goes on the root cgroup before the first shaping
    // policy is live, and stays (it returns at once while no policy shapes).
    if (!dry_run && std::ranges::any_of(prep->policies, [](const Policy &p) {
            return p.shape == TCM_SHAPE_SOCKETS;
        })) {
        dp_->set_shape_ifaces(egress_ifindexes(attachments_));
        if (!sockops_attached(link_dir()))
            if (auto r = attach_sockops(dp_->sockops_prog_fd(), link_dir()); !r)
                return std::unexpected(r.error());
    }
    // apply() checks the whole set before it touches anything, and refuses with check()'s
    // message; only a dry run needs check() on its own.
    if (dry_run)
        return dp_->check(prep->policies);
    if (auto s = stage(state_json(specs, attachments_)); !s)
        return s;
    {
        // The fleet agent must not grant into a set being replaced.
        std::unique_lock<std::mutex> hold;
        if (fleet_)
            hold = fleet_->hold();
        if (auto r = dp_->apply(prep->policies); !r) {
            unstage();
            return r;
        }
    }
    if (fleet_)
        fleet_->set_policies(prep->policies);
    policies_ = std::move(prep->entries);
    adopted_ids_.clear();
    if (auto c = commit(); !c && warnings)
        warnings->push_back(c.error());
    return {};
}

Result<AttachResult> Daemon::do_attach(AttachmentSpec &a) {
    auto idx = interface_index(a.iface);
    if (!idx)
        return std::unexpected(idx.error());
    a.ifindex = *idx;
    if (a.hook == Hook::xdp)
        return attach_xdp(*idx, dp_->xdp_prog_fd(), a.xdp_mode);
    return attach_tc(*idx, a.direction, dp_->tc_prog_fd(), link_dir());
}

std::vector<json> Daemon::specs() const {
    std::vector<json> out;
    for (const auto &e : policies_)
        out.push_back(e.spec);
    return out;
}

json Daemon::state_json(const std::vector<json> &specs,
                        const std::vector<AttachmentSpec> &attachments) const {
    json cfg = {{"policies", json::array()}, {"attachments", json::array()}};
    for (const auto &s : specs)
        cfg["policies"].push_back(s);
    for (const auto &a : attachments) {
        json j = attachment_json(a);
        if (a.ifindex)
            j["ifindex"] = a.ifindex;
        cfg["attachments"].push_back(j);
    }
    return cfg;
}

Result<void> Daemon::stage(const json &state) const {
    fs::path path(options_.state);
    std::error_code ec;
    if (path.has_parent_path())
        fs::create_directories(path.parent_path(), ec);
    std::string tmp = options_.state + ".tmp";
    std::string text = "# tricolord's state: what runs now, written by the daemon on every change\n"
                       "# made through tricolorctl. Edit " +
                       options_.config +
                       " instead; see tricolord --help for which of the two a start applies.\n";
    // One line a policy, each a JSON object (which YAML reads as a flow mapping): written in
    // a few ms for 16k policies, where a block-style YAML emitter takes half a second.
    for (const char *section : {"policies", "attachments"}) {
        const json &list = state.at(section);
        text += fmt::format("{}:{}\n", section, list.empty() ? " []" : "");
        for (const auto &item : list)
            text += "  - " + item.dump() + "\n";
    }
    staged_hash_ = text_hash(text);
    auto fail = [&](const std::string &what) -> Result<void> {
        int err = errno;
        unlink(tmp.c_str());
        return std::unexpected(
            fmt::format("cannot write the state file {}: {}: {}; nothing changed", options_.state,
                        what, std::strerror(err)));
    };
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail("open " + tmp);
    for (size_t off = 0; off < text.size();) {
        ssize_t n = write(fd, text.data() + off, text.size() - off);
        if (n < 0) {
            int err = errno;
            close(fd);
            errno = err;
            return fail("write");
        }
        off += static_cast<size_t>(n);
    }
    if (fsync(fd) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return fail("fsync");
    }
    close(fd);
    return {};
}

Result<void> Daemon::commit() const {
    std::string tmp = options_.state + ".tmp";
    if (rename(tmp.c_str(), options_.state.c_str()) < 0)
        return std::unexpected(fmt::format("applied, but cannot replace {}: {}", options_.state,
                                           std::strerror(errno)));
    state_hash_ = staged_hash_;
    // The state file holds every change now: the journal goes (one left by a crash right here
    // names the state before, and is ignored).
    if (journal_fd_ >= 0)
        close(journal_fd_);
    journal_fd_ = -1;
    journal_records_ = 0;
    unlink(journal_path().c_str());
    fs::path parent = fs::path(options_.state).parent_path();
    if (int dir = open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        dir >= 0) {
        fsync(dir); // the rename itself survives a crash
        close(dir);
    }
    return {};
}

std::string Daemon::journal_path() const {
    return options_.state + ".journal";
}

namespace {

bool write_all(int fd, std::string_view text) {
    for (size_t off = 0; off < text.size();) {
        ssize_t n = write(fd, text.data() + off, text.size() - off);
        if (n < 0)
            return false;
        off += static_cast<size_t>(n);
    }
    return true;
}

void fsync_parent(const std::string &path) {
    fs::path parent = fs::path(path).parent_path();
    if (int dir = open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        dir >= 0) {
        fsync(dir);
        close(dir);
    }
}

} // namespace

Result<bool> Daemon::journal_append(const json &record) {
    if (!state_hash_)
        return false; // no state file this daemon wrote or read: nothing to extend
    std::string path = journal_path();
    auto fail = [&](const std::string &what) -> Result<bool> {
        return std::unexpected(fmt::format("cannot write the state journal {}: {}: {}; nothing "
                                           "changed",
                                           path, what, std::strerror(errno)));
    };
    if (journal_fd_ < 0) {
        int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            return fail("open");
        std::string head = json{{"extends", fmt::format("{:016x}", *state_hash_)}}.dump() + "\n";
        if (!write_all(fd, head) || fsync(fd) < 0) {
            int err = errno;
            close(fd);
            unlink(path.c_str());
            errno = err;
            return fail("write");
        }
        fsync_parent(path);
        journal_fd_ = fd;
        journal_records_ = 0;
    }
    journal_before_ = lseek(journal_fd_, 0, SEEK_END);
    std::string line = record.dump() + "\n";
    if (!write_all(journal_fd_, line) || fdatasync(journal_fd_) < 0) {
        int err = errno;
        if (ftruncate(journal_fd_, journal_before_) == 0)
            fdatasync(journal_fd_);
        errno = err;
        return fail("write");
    }
    ++journal_records_;
    last_change_ = std::chrono::steady_clock::now();
    return true;
}

void Daemon::journal_undo() {
    if (journal_fd_ < 0 || journal_records_ == 0)
        return;
    if (ftruncate(journal_fd_, journal_before_) == 0)
        fdatasync(journal_fd_);
    --journal_records_;
}

void Daemon::compact_state(bool now) {
    std::lock_guard lock(mu_);
    if (journal_records_ == 0)
        return;
    if (!now && std::chrono::steady_clock::now() - last_change_ < std::chrono::milliseconds(500))
        return; // changes are still coming: one write when they pause
    auto s = stage(state_json(specs(), attachments_));
    if (s)
        s = commit();
    if (!s)
        unstage(); // the journal stays, and is tried again
}

void Daemon::unstage() const {
    unlink((options_.state + ".tmp").c_str());
}

Result<void> Daemon::load_at_start() {
    auto cfg = read_doc(options_.config);
    auto st = read_doc(options_.state);
    if (!st)
        return std::unexpected(fmt::format("{} (the daemon's state file: remove it to start from "
                                           "{})",
                                           st.error(), options_.config));
    // Changes since the state file was last written whole, if the journal extends that file.
    std::vector<json> journal;
    bool journal_valid = false;
    {
        std::ifstream in(journal_path());
        std::string line;
        if (*st && std::getline(in, line)) {
            auto head = json::parse(line, nullptr, false);
            journal_valid = head.is_object() &&
                            head.value("extends", "") == fmt::format("{:016x}", (*st)->text_hash);
            // A torn last line (a crash while appending) was never acknowledged: it ends there.
            while (journal_valid && std::getline(in, line) && !in.eof()) {
                auto rec = json::parse(line, nullptr, false);
                if (!rec.is_object() || rec.is_discarded())
                    break;
                journal.push_back(std::move(rec));
            }
        }
    }
    std::error_code e1, e2, e3;
    bool cfg_exists = !cfg || *cfg;
    auto state_time = fs::last_write_time(options_.state, e1);
    if (journal_valid && !journal.empty())
        state_time = std::max(state_time, fs::last_write_time(journal_path(), e3));
    bool use_state = *st && (!cfg_exists || state_time >= fs::last_write_time(options_.config, e2));
    Doc doc;
    if (!cfg && !use_state) {
        if (!*st)
            return std::unexpected(cfg.error());
        // The user's newest edit is broken: keep policing with what ran last, and say so.
        startup_warnings.push_back(fmt::format("{}; applying the state {} instead (what ran "
                                               "last); fix the config and send SIGHUP",
                                               cfg.error(), options_.state));
        use_state = true;
    }
    if (use_state) {
        doc = **st;
        for (const auto &rec : journal) {
            if (rec.contains("put") && rec["put"].is_object()) {
                std::string name = rec["put"].value("name", "");
                auto it = std::ranges::find_if(doc.specs, [&](const json &j) {
                    return j.is_object() && j.value("name", "") == name;
                });
                if (it != doc.specs.end())
                    *it = rec["put"];
                else
                    doc.specs.push_back(rec["put"]);
            } else if (rec.contains("del") && rec["del"].is_string()) {
                const auto &del = rec["del"].get_ref<const std::string &>();
                std::erase_if(doc.specs, [&](const json &j) {
                    return j.is_object() && j.value("name", "") == del;
                });
            }
        }
        started_from_ = "state";
        startup_notes.push_back(
            !cfg ? fmt::format("applying the state {}: the config {} does not check (below)",
                               options_.state, options_.config)
            : cfg_exists
                ? fmt::format("applying the state {}: it is newer than the config {} (changes made "
                              "with tricolorctl since the config was edited; SIGHUP applies the "
                              "config)",
                              options_.state, options_.config)
                : fmt::format("applying the state {} (no config at {})", options_.state,
                              options_.config));
    } else if (*cfg) {
        doc = **cfg;
        started_from_ = "config";
        startup_notes.push_back(
            *st ? fmt::format("applying the config {}: it is newer than the state {}, whose "
                              "tricolorctl changes it replaces",
                              options_.config, options_.state)
                : fmt::format("applying the config {}", options_.config));
    } else {
        started_from_ = "nothing";
        startup_notes.push_back(fmt::format(
            "no config at {} and no state at {}: starting with no policies and no attachments",
            options_.config, options_.state));
    }
    const std::string &from = use_state ? options_.state : options_.config;
    std::vector<std::string> warnings;
    auto prep = prepare(doc.specs, &warnings);
    if (!prep)
        return std::unexpected(fmt::format("{}: {}", from, prep.error()));
    if (auto r = dp_->apply(prep->policies); !r)
        return std::unexpected(fmt::format("{}: {}", from, r.error()));
    policies_ = std::move(prep->entries);
    adopted_ids_.clear();
    startup_warnings.insert(startup_warnings.end(), warnings.begin(), warnings.end());
    // An interface that is not there (yet) does not stop the start: the attachment is kept,
    // and status shows it as not attached until it is attached again or detached.
    for (auto a : doc.attachments) {
        int recorded = a.ifindex;
        auto r = do_attach(a);
        if (!r && !interface_index(a.iface))
            a.ifindex = 0; // an ifindex from before a reboot may name another interface now
        else if (!r)
            a.ifindex = recorded;
        if (!r)
            startup_warnings.push_back(fmt::format("attachment {}: {} (kept: status shows it as "
                                                   "not attached; tricolorctl detach removes it)",
                                                   hook_text(a), r.error()));
        else if (!r->warning.empty())
            startup_warnings.push_back(r->warning);
        if (r)
            a.mode = r->mode;
        attachments_.push_back(a);
    }
    if (use_state)
        state_hash_ = (*st)->text_hash;
    if (!use_state || !journal.empty() ||
        std::ranges::any_of(attachments_, [](auto &a) { return a.ifindex; })) {
        auto s = stage(state_json(specs(), attachments_));
        if (s)
            s = commit();
        if (!s)
            startup_warnings.push_back(s.error());
    } else {
        unlink(journal_path().c_str()); // stale: it extends another state than this one
    }
    dp_->set_shape_ifaces(egress_ifindexes(attachments_));
    return {};
}

Result<void> Daemon::reload() {
    std::lock_guard lock(mu_);
    auto cfg = read_doc(options_.config);
    if (!cfg)
        return std::unexpected(cfg.error());
    if (!*cfg)
        return std::unexpected(fmt::format("cannot read {}: no such file", options_.config));
    Doc doc = **cfg;
    std::vector<std::string> errors;
    for (const auto &a : doc.attachments)
        if (auto idx = interface_index(a.iface); !idx)
            errors.push_back(fmt::format("attachment {}: {}", hook_text(a), idx.error()));
    std::vector<std::string> warnings;
    auto prep = prepare(doc.specs, &warnings);
    if (!prep)
        errors.push_back(prep.error());
    else if (auto c = dp_->check(prep->policies); !c)
        errors.push_back(c.error());
    if (!errors.empty())
        return std::unexpected(fmt::format("{}: {}", options_.config, join_lines(errors)));
    if (auto s = stage(state_json(doc.specs, doc.attachments)); !s)
        return s;
    // Attach first, then switch the policies: anything that fails undoes what this reload added.
    std::vector<AttachmentSpec> done, added;
    auto undo = [&] {
        for (const auto &a : added)
            (void)(a.hook == Hook::xdp ? detach_xdp(a.ifindex)
                                       : detach_tc(a.ifindex, a.direction, link_dir()));
        unstage();
    };
    for (auto a : doc.attachments) {
        auto idx = interface_index(a.iface);
        HookState before = !idx                  ? HookState{}
                           : a.hook == Hook::xdp ? query_xdp(*idx)
                                                 : query_tc(*idx, a.direction);
        auto r = do_attach(a);
        if (!r) {
            undo();
            return std::unexpected(
                fmt::format("{}: attachment {}: {}", options_.config, hook_text(a), r.error()));
        }
        if (!r->warning.empty())
            warnings.push_back(r->warning);
        a.mode = r->mode;
        done.push_back(a);
        if (!before.prog_id)
            added.push_back(a);
    }
    if (auto r = dp_->apply(prep->policies); !r) {
        undo();
        return std::unexpected(fmt::format("{}: {}", options_.config, r.error()));
    }
    // What the config no longer names comes off.
    for (const auto &old : attachments_) {
        if (std::ranges::any_of(done, [&](const AttachmentSpec &d) { return same_hook(d, old); }))
            continue;
        auto note = detach_one(old);
        warnings.push_back(note
                               ? fmt::format("detached {}: not in {}{}", hook_text(old),
                                             options_.config, note->empty() ? "" : "; " + *note)
                               : fmt::format("cannot detach {}: {}", hook_text(old), note.error()));
    }
    attachments_ = std::move(done);
    dp_->set_shape_ifaces(egress_ifindexes(attachments_));
    if (std::ranges::any_of(prep->policies,
                            [](const Policy &p) { return p.shape == TCM_SHAPE_SOCKETS; }) &&
        !sockops_attached(link_dir()))
        if (auto r = attach_sockops(dp_->sockops_prog_fd(), link_dir()); !r)
            warnings.push_back(r.error());
    policies_ = std::move(prep->entries);
    adopted_ids_.clear();
    if (auto c = commit(); !c)
        warnings.push_back(c.error());
    reload_warnings = std::move(warnings);
    return {};
}

// Takes @a off its hook. An interface that is gone (deleted, moved to another namespace) has
// nothing left to detach here: its pinned tcx link, if any, is released. Returns a note.
Result<std::string> Daemon::detach_one(const AttachmentSpec &a) {
    auto idx = interface_index(a.iface);
    if (!idx) {
        // Renamed: the ifindex still exists under another name, and the program runs there.
        if (a.ifindex > 0) {
            char buf[IF_NAMESIZE] = {};
            if (if_indextoname(static_cast<unsigned>(a.ifindex), buf)) {
                auto r = a.hook == Hook::xdp ? detach_xdp(a.ifindex)
                                             : detach_tc(a.ifindex, a.direction, link_dir());
                if (!r)
                    return std::unexpected(r.error());
                return fmt::format("{} is now called {}: detached from it", a.iface, buf);
            }
        }
        int released = a.hook == Hook::tc ? release_defunct_tcx_links(link_dir()) : 0;
        return fmt::format("{} no longer exists (deleted, or moved to another namespace): entry "
                           "removed{}",
                           a.iface, released ? ", its pinned tcx link released" : "");
    }
    HookState s = a.hook == Hook::xdp ? query_xdp(*idx) : query_tc(*idx, a.direction);
    bool ours = s.prog_id && (s.prog_name == kXdpProgName || s.prog_name == kTcProgName);
    if (!ours) {
        // Not in the kernel (taken off by hand): only the entry is left to remove.
        if (a.hook == Hook::tc)
            (void)detach_tc(*idx, a.direction, link_dir()); // a pinned link, if one is left
        return fmt::format("the kernel had no tricolor program on {}: entry removed", hook_text(a));
    }
    auto r = a.hook == Hook::xdp ? detach_xdp(*idx) : detach_tc(*idx, a.direction, link_dir());
    if (!r)
        return std::unexpected(r.error());
    return std::string();
}

size_t Daemon::reclaim_idle_flows() {
    return flow_pass(true);
}

void Daemon::count_flows() {
    flow_pass(false);
}

// The lock is held only to begin and end the pass and for each chunk of deletions, not for the
// walk (0.5 s at 2^20 flows): requests, flows --top among them, and scrapes go on meanwhile.
size_t Daemon::flow_pass(bool reclaim) {
    FlowPass pass;
    {
        std::lock_guard lock(mu_);
        // Under pressure (the table 90% full) the idle timeout does not hold a full flow back.
        pass =
            dp_->begin_flow_pass(reclaim, static_cast<uint64_t>(options_.flow_idle_timeout * 1e9),
                                 static_cast<size_t>(options_.flow_capacity) / 10 * 9);
    }
    dp_->walk_flow_pass(pass); // reads the flow table only
    for (bool more = true; more;) {
        std::lock_guard lock(mu_);
        more = dp_->reclaim_some(pass, 4096);
    }
    std::lock_guard lock(mu_);
    dp_->end_flow_pass(pass);
    reclaimed_total_ += pass.reclaimed;
    return pass.reclaimed;
}

void Daemon::set_metrics_address(std::string address) {
    std::lock_guard lock(mu_);
    metrics_address_ = std::move(address);
}

std::vector<prometheus::MetricFamily> Daemon::metrics() const {
    using prometheus::ClientMetric;
    using prometheus::MetricFamily;
    using prometheus::MetricType;
    std::lock_guard lock(mu_);
    auto counters = dp_->policy_counters();
    auto g = dp_->global_counters();
    MetricFamily packets{
        "tricolor_packets_total", "Packets metered, by policy and colour", MetricType::Counter, {}};
    MetricFamily bytes{
        "tricolor_bytes_total", "Bytes metered, by policy and colour", MetricType::Counter, {}};
    const char *colors[] = {"green", "yellow", "red"};
    auto tcp = dp_->shape_counters();
    MetricFamily sockets{"tricolor_shape_sockets",
                         "TCP sockets of this host paced by the policy (--shape sockets)",
                         MetricType::Gauge,
                         {}};
    MetricFamily tcp_packets{"tricolor_tcp_signal_packets_total",
                             "Packets that would have passed, by what the policy's --aqm or "
                             "--shape did instead (aqm_marked, aqm_dropped, shape_delayed, "
                             "shape_dropped)",
                             MetricType::Counter,
                             {}};
    for (const auto &e : policies_) {
        const auto &t = tcp[e.id];
        std::string name = e.spec.value("name", "");
        std::string parent = e.spec.value("parent", "");
        ClientMetric m;
        m.label = {{"parent", parent}, {"policy", name}};
        m.gauge.value = t.sockets;
        sockets.metric.push_back(m);
        std::pair<const char *, uint64_t> what[] = {{"aqm_marked", t.tcp.aqm_marked_packets},
                                                    {"aqm_dropped", t.tcp.aqm_dropped_packets},
                                                    {"shape_delayed", t.tcp.shape_delayed_packets},
                                                    {"shape_dropped", t.tcp.shape_dropped_packets}};
        for (auto [action, v] : what) {
            ClientMetric c;
            c.label = {{"action", action}, {"parent", parent}, {"policy", name}};
            c.counter.value = static_cast<double>(v);
            tcp_packets.metric.push_back(c);
        }
    }
    for (const auto &e : policies_) {
        const auto &c = counters[e.id];
        std::string name = e.spec.value("name", "");
        std::string parent = e.spec.value("parent", "");
        for (int i = 0; i < TCM_NR_COLORS; ++i) {
            ClientMetric m;
            // parent: a chain's levels can be summed or told apart in PromQL (empty at a top).
            m.label = {{"color", colors[i]}, {"parent", parent}, {"policy", name}};
            m.counter.value = static_cast<double>(c.packets[i]);
            packets.metric.push_back(m);
            m.counter.value = static_cast<double>(c.bytes[i]);
            bytes.metric.push_back(m);
        }
    }
    auto single = [](std::string name, std::string help, MetricType type, double v) {
        ClientMetric m;
        if (type == MetricType::Counter)
            m.counter.value = v;
        else
            m.gauge.value = v;
        return MetricFamily{std::move(name), std::move(help), type, {m}};
    };
    return {packets,
            bytes,
            sockets,
            tcp_packets,
            single("tricolor_unclassified_packets_total", "IP packets no policy matched",
                   MetricType::Counter, static_cast<double>(g.unclassified_packets)),
            single("tricolor_unclassified_bytes_total", "Bytes of IP packets no policy matched",
                   MetricType::Counter, static_cast<double>(g.unclassified_bytes)),
            single("tricolor_non_ip_packets_total", "Frames that are not IPv4 or IPv6",
                   MetricType::Counter, static_cast<double>(g.non_ip_packets)),
            single("tricolor_malformed_packets_total", "Packets with truncated or invalid headers",
                   MetricType::Counter, static_cast<double>(g.malformed_packets)),
            single("tricolor_table_full_total",
                   "Packets of new flows metered in the aggregate bucket: flow table full",
                   MetricType::Counter, static_cast<double>(g.table_full)),
            single("tricolor_lock_timeouts_total",
                   "Packets coloured red because a flow lock stayed taken", MetricType::Counter,
                   static_cast<double>(g.lock_timeouts)),
            single("tricolor_flows",
                   "Flows in the flow table, as of the daemon's last pass over it (every "
                   "--reclaim-interval seconds, or 10)",
                   MetricType::Gauge, static_cast<double>(dp_->counted_flows())),
            single("tricolor_flows_reclaimed_total",
                   "Idle flows deleted because their buckets were full again", MetricType::Counter,
                   static_cast<double>(reclaimed_total_)),
            single("tricolor_flow_capacity", "Capacity of the flow table", MetricType::Gauge,
                   static_cast<double>(options_.flow_capacity)),
            single("tricolor_policies", "Active policies", MetricType::Gauge,
                   static_cast<double>(policies_.size()))};
}

void Daemon::detach_all() {
    for (const auto &a : attachments_)
        (void)detach_one(a);
    attachments_.clear();
    detach_sockops(link_dir());
    Datapath::remove_pins(options_.pin_dir);
}

namespace {

// The fields of one command's request (docs/control.md): anything else, a wrong type or a
// missing required field is refused before the command runs, naming the field. A mistyped
// "dry_run" must never become a real apply.
enum class Kind { string, boolean, count, object, array };
struct Field {
    std::string_view name;
    Kind kind;
    bool required = false;
};

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

} // namespace

json Daemon::handle(const json &r, const Peer &peer) {
    std::lock_guard lock(mu_);
    if (!r.is_object())
        return error("a request must be a JSON object");
    auto cmd = r.find("cmd");
    if (cmd == r.end() || !cmd->is_string())
        return error("the request needs \"cmd\" (a string)");
    const std::string c = *cmd;
    auto version = r.find("version");
    if (version == r.end() || !version->is_number_integer())
        return error(fmt::format("the request needs \"version\" (the control protocol's: {})",
                                 kControlProtocolVersion));
    if (*version != kControlProtocolVersion)
        return error(fmt::format("control protocol version {} asked; this tricolord speaks "
                                 "version {} (tricolorctl and tricolord from one release agree)",
                                 version->dump(), kControlProtocolVersion));
    // The control protocol's commands (docs/control.md): one row each, with its fields and
    // whether it changes anything (then it needs root or CAP_NET_ADMIN; a dry run is a change
    // here too: it costs a compile of the whole set).
    using Handler = json (Daemon::*)(const json &);
    enum Access : bool { read_only = false, changes = true };
    struct Command {
        std::string_view name;
        Handler handler;
        std::vector<Field> fields;
        Access access;
    };
    static const std::vector<Field> kAttach = {{"iface", Kind::string, true},
                                               {"hook", Kind::string},
                                               {"direction", Kind::string},
                                               {"xdp_mode", Kind::string}};
    static const Command kCommands[] = {
        {"attach", &Daemon::cmd_attach, kAttach, changes},
        {"detach", &Daemon::cmd_detach, kAttach, changes},
        {"policy_add", &Daemon::cmd_policy_add, {{"policy", Kind::object, true}}, changes},
        {"policy_set",
         &Daemon::cmd_policy_set,
         {{"name", Kind::string, true}, {"patch", Kind::object, true}},
         changes},
        {"policy_del", &Daemon::cmd_policy_del, {{"name", Kind::string, true}}, changes},
        {"policy_list", &Daemon::cmd_policy_list, {}, read_only},
        {"policy_show", &Daemon::cmd_policy_show, {{"name", Kind::string, true}}, read_only},
        {"apply",
         &Daemon::cmd_apply,
         {{"policies", Kind::array, true}, {"dry_run", Kind::boolean}},
         changes},
        {"stats", &Daemon::cmd_stats, {{"name", Kind::string}}, read_only},
        {"flows",
         &Daemon::cmd_flows,
         {{"policy", Kind::string}, {"top", Kind::count}, {"walk", Kind::boolean}},
         read_only},
        {"status", &Daemon::cmd_status, {}, read_only},
    };
    auto row = std::ranges::find(kCommands, std::string_view(c), &Command::name);
    if (row == std::end(kCommands)) {
        std::string known;
        for (const auto &k : kCommands)
            known += (known.empty() ? "" : ", ") + std::string(k.name);
        return error(fmt::format("unknown command '{}' (known: {})", c, known));
    }
    if (row->access == changes && !peer.may_change) {
        std::string readable;
        for (const auto &k : kCommands)
            if (k.access == read_only)
                readable += (readable.empty() ? "" : ", ") + std::string(k.name);
        return error(fmt::format("{} changes tricolord's state: it needs root or CAP_NET_ADMIN "
                                 "(the caller, pid {}, is uid {} without CAP_NET_ADMIN); the "
                                 "socket's group may use {}",
                                 c, peer.pid, peer.uid, readable));
    }
    if (auto ok_fields = check_fields(c, r, row->fields); !ok_fields)
        return error(ok_fields.error());
    try {
        return (this->*row->handler)(r);
    } catch (const std::exception &e) {
        return error(fmt::format("{}: {}", c, e.what()));
    }
}

json Daemon::cmd_attach(const json &r) {
    auto a = attachment_from(r);
    if (!a)
        return error(a.error());
    a->ifindex = 0;
    auto idx = interface_index(a->iface);
    if (!idx)
        return error(idx.error());
    a->ifindex = *idx;
    auto next = attachments_;
    std::erase_if(next, [&](const AttachmentSpec &x) { return same_hook(x, *a); });
    next.push_back(*a);
    if (auto s = stage(state_json(specs(), next)); !s)
        return error(s.error());
    auto res = do_attach(*a);
    if (!res) {
        unstage();
        return error(res.error());
    }
    a->mode = res->mode;
    next.back() = *a;
    attachments_ = std::move(next);
    dp_->set_shape_ifaces(egress_ifindexes(attachments_));
    json out = {{"mode", res->mode}};
    if (!res->warning.empty())
        out["warning"] = res->warning;
    if (auto c = commit(); !c)
        out["warning"] = c.error();
    return ok(out);
}

json Daemon::cmd_detach(const json &r) {
    auto a = attachment_from(r);
    if (!a)
        return error(a.error());
    auto known = std::ranges::find_if(attachments_,
                                      [&](const AttachmentSpec &x) { return same_hook(x, *a); });
    if (known == attachments_.end()) {
        // Not ours to remember, but the kernel may still run our program there (an older
        // daemon's attachment): take it off.
        auto idx = interface_index(a->iface);
        if (!idx)
            return error(idx.error());
        auto res =
            a->hook == Hook::xdp ? detach_xdp(*idx) : detach_tc(*idx, a->direction, link_dir());
        if (!res)
            return error(res.error());
        return ok();
    }
    auto next = attachments_;
    std::erase_if(next, [&](const AttachmentSpec &x) { return same_hook(x, *a); });
    if (auto s = stage(state_json(specs(), next)); !s)
        return error(s.error());
    auto note = detach_one(*known);
    if (!note) {
        unstage();
        return error(note.error());
    }
    attachments_ = std::move(next);
    dp_->set_shape_ifaces(egress_ifindexes(attachments_));
    json out = json::object();
    if (!note->empty())
        out["note"] = *note;
    if (auto c = commit(); !c)
        out["warning"] = c.error();
    return ok(out);
}

namespace {
json warnings_body(const std::vector<std::string> &w) {
    json out = json::object();
    if (!w.empty())
        out["warnings"] = w;
    return out;
}
} // namespace

// The handlers read their fields as handle()'s table has already checked them: present where
// required, of the kind it names.
json Daemon::cmd_policy_add(const json &r) {
    auto it = r.find("policy");
    std::string name = it->value("name", "");
    if (std::ranges::find(policies_, name, &Entry::name) != policies_.end())
        return error(fmt::format("policy '{}' exists: use policy set to change it", name));
    std::vector<std::string> warnings;
    if (auto res = change_one(name, &*it, &warnings); !res)
        return error(res.error());
    return ok(warnings_body(warnings));
}

json Daemon::cmd_policy_set(const json &r) {
    auto name = need_string(r, "name");
    if (!name)
        return error(name.error());
    auto patch = r.find("patch");
    if (patch->contains("name") && (*patch)["name"] != *name)
        return error("a policy cannot be renamed: delete it and add it under the new name");
    auto at = std::ranges::find(policies_, *name, &Entry::name);
    if (at == policies_.end())
        return error(fmt::format("no policy named '{}'", *name));
    json spec = merge_policy(at->spec, *patch);
    if (auto p = to_policy(spec, at->id); !p) {
        json out = error(p.error());
        out["usage"] = true; // bad values, not a refused change: tricolorctl exits 2
        return out;
    }
    std::vector<std::string> warnings;
    if (auto res = change_one(*name, &spec, &warnings); !res)
        return error(res.error());
    return ok(warnings_body(warnings));
}

json Daemon::cmd_policy_del(const json &r) {
    auto name = need_string(r, "name");
    if (!name)
        return error(name.error());
    if (auto res = change_one(*name, nullptr, nullptr); !res)
        return error(res.error());
    return ok();
}

json Daemon::cmd_policy_list(const json &) {
    json list = json::array();
    for (const auto &e : policies_)
        list.push_back(e.spec);
    return ok({{"policies", list}});
}

json Daemon::cmd_policy_show(const json &r) {
    auto name = need_string(r, "name");
    if (!name)
        return error(name.error());
    for (const auto &e : policies_)
        if (e.spec.value("name", "") == *name) {
            json out = {{"policy", e.spec}, {"id", e.id}};
            // The policy's own (aggregate) buckets; per-key policies keep theirs per flow.
            if (auto p = to_policy(e.spec, e.id); p && p->per == TCM_PER_AGGREGATE)
                out["buckets"] = buckets_json(*p, dp_->policy_state(e.id), dp_->now_ns());
            return ok(out);
        }
    return error(fmt::format("no policy named '{}'", *name));
}

json Daemon::cmd_apply(const json &r) {
    auto it = r.find("policies");
    bool dry_run = r.value("dry_run", false);
    std::vector<json> specs(it->begin(), it->end());
    // What the file does to the running set, by name.
    json added = json::array(), changed = json::array(), deleted = json::array(),
         unchanged = json::array();
    std::set<std::string> names;
    std::map<std::string, const json *> running;
    for (const auto &e : policies_)
        running[e.spec.value("name", "")] = &e.spec;
    for (const auto &spec : specs) {
        std::string name = spec.is_object() ? spec.value("name", "") : "";
        names.insert(name);
        auto old = running.find(name);
        if (old == running.end())
            added.push_back(name);
        else if (*old->second != spec)
            changed.push_back(name);
        else
            unchanged.push_back(name);
    }
    for (const auto &e : policies_)
        if (!names.contains(e.spec.value("name", "")))
            deleted.push_back(e.spec.value("name", ""));
    std::vector<std::string> warnings;
    if (auto res = apply_specs(specs, dry_run, &warnings); !res)
        return error(res.error());
    json out = warnings_body(warnings);
    out["policies"] = specs.size();
    out["dry_run"] = dry_run;
    out["added"] = added;
    out["changed"] = changed;
    out["deleted"] = deleted;
    out["unchanged"] = unchanged;
    return ok(out);
}

json Daemon::cmd_stats(const json &r) {
    std::string only = r.value("name", "");
    auto counters = dp_->policy_counters();
    auto tcp = dp_->shape_counters();
    json list = json::array();
    bool found = only.empty();
    for (const auto &e : policies_) {
        std::string name = e.spec.value("name", "");
        if (!only.empty() && name != only)
            continue;
        found = true;
        json p = counters_json(counters[e.id]);
        p["name"] = name;
        p.update(tcp_counters_json(tcp[e.id]));
        if (fleet_)
            if (auto f = fleet_->policy_status(name); !f.is_null())
                p["fleet"] = f;
        // docs/spec.md §9: each policy names its parent (null at the top); counters are per level.
        auto parent = e.spec.find("parent");
        p["parent"] = parent != e.spec.end() && parent->is_string() ? *parent : json(nullptr);
        list.push_back(p);
    }
    if (!found)
        return error(fmt::format("no policy named '{}'", only));
    auto g = dp_->global_counters();
    return ok(
        {{"policies", list},
         {"unclassified", {{"packets", g.unclassified_packets}, {"bytes", g.unclassified_bytes}}},
         {"non_ip", {{"packets", g.non_ip_packets}, {"bytes", g.non_ip_bytes}}},
         {"malformed", {{"packets", g.malformed_packets}, {"bytes", g.malformed_bytes}}},
         {"table_full", g.table_full},
         {"lock_timeouts", g.lock_timeouts}});
}

json Daemon::cmd_flows(const json &r) {
    std::string only = r.value("policy", "");
    uint64_t top = r.value("top", uint64_t{0});
    std::map<uint32_t, Policy> by_id;
    for (const auto &e : policies_) {
        if (!only.empty() && e.spec.value("name", "") != only)
            continue;
        if (auto p = to_policy(e.spec, e.id))
            by_id[e.id] = *p;
    }
    if (!only.empty() && by_id.empty())
        return error(fmt::format("no policy named '{}'", only));
    // --top from the heavy hitters the data path keeps, exactly as a walk would answer it
    // (docs/datapath.md, "flows --top at 2^20"); "walk": true always walks (to compare).
    std::string via;
    auto flows = dp_->top_flows(
        top, [&](uint32_t id) { return by_id.contains(id); }, r.value("walk", false), &via);
    json list = json::array();
    uint64_t now = dp_->now_ns();
    for (const auto &f : flows) {
        const Policy &p = by_id[f.key.policy_id];
        json j = counters_json(f.state.counters);
        j["policy"] = p.name;
        j["parent"] = p.parent.empty() ? json(nullptr) : json(p.parent);
        j["key"] = flow_key_text(f.key, p);
        j["buckets"] = buckets_json(p, f.state, now);
        list.push_back(j);
    }
    return ok({{"flows", list}, {"via", via}});
}

// What the kernel has, not what the daemon remembers: every entry is queried, and one the
// kernel does not run says why (and how to remove it).
json Daemon::cmd_status(const json &) {
    json att = json::array();
    for (const auto &a : attachments_) {
        json j = attachment_json(a);
        j["mode"] = a.mode;
        auto idx = interface_index(a.iface);
        HookState s;
        std::string stale;
        int where = idx ? *idx : 0;
        if (!idx && a.ifindex > 0) {
            char buf[IF_NAMESIZE] = {};
            if (if_indextoname(static_cast<unsigned>(a.ifindex), buf)) {
                where = a.ifindex;
                stale = fmt::format("{} is now called {} (ifindex {})", a.iface, buf, a.ifindex);
            }
        }
        if (where)
            s = a.hook == Hook::xdp ? query_xdp(where) : query_tc(where, a.direction);
        bool attached =
            s.prog_id != 0 && (s.prog_name == kXdpProgName || s.prog_name == kTcProgName);
        if (!where)
            stale = fmt::format("no interface named '{}' (deleted, or moved to another "
                                "namespace)",
                                a.iface);
        else if (!attached && stale.empty())
            stale = s.prog_id ? fmt::format("the kernel runs '{}' there, not tricolor", s.prog_name)
                              : "the kernel has no tricolor program there";
        if (attached && !s.mode.empty())
            j["mode"] = s.mode; // as the kernel reports it
        j["prog_id"] = s.prog_id;
        j["attached"] = attached && where == (idx ? *idx : -1);
        if (!stale.empty())
            j["stale"] =
                stale + fmt::format("; tricolorctl detach {}{} removes this entry", a.iface,
                                    a.hook == Hook::tc ? fmt::format(" --hook tc --direction {}",
                                                                     to_string(a.direction))
                                                       : "");
        att.push_back(j);
    }
    // What the kernel runs of this data path (its programs on its maps) that no entry names:
    // left by hand or by an older daemon. Listed so that it can be adopted or taken off.
    if (struct if_nameindex *all = if_nameindex()) {
        for (auto *i = all; i->if_index != 0; ++i) {
            int idx = static_cast<int>(i->if_index);
            std::string name = i->if_name;
            auto listed = [&](Hook h, Direction d) {
                return std::ranges::any_of(attachments_, [&](const AttachmentSpec &a) {
                    return a.hook == h && (h == Hook::xdp || a.direction == d) &&
                           (a.iface == name || a.ifindex == idx);
                });
            };
            auto add = [&](Hook h, Direction d, const HookState &s) {
                json j = {{"iface", name},   {"hook", to_string(h)}, {"direction", to_string(d)},
                          {"mode", s.mode},  {"prog_id", s.prog_id}, {"attached", true},
                          {"managed", false}};
                j["stale"] = fmt::format(
                    "not in the state (left by hand or by an older daemon): tricolorctl attach "
                    "{0}{1} adopts it, tricolorctl detach {0}{1} takes it off",
                    name,
                    h == Hook::tc ? fmt::format(" --hook tc --direction {}", to_string(d)) : "");
                att.push_back(j);
            };
            if (!listed(Hook::xdp, Direction::ingress)) {
                HookState s = query_xdp(idx);
                if (s.prog_name == kXdpProgName && shares_maps(s.prog_id, dp_->xdp_prog_fd()))
                    add(Hook::xdp, Direction::ingress, s);
            }
            for (Direction d : {Direction::ingress, Direction::egress})
                if (!listed(Hook::tc, d)) {
                    HookState s = query_tc(idx, d);
                    if (s.prog_name == kTcProgName && shares_maps(s.prog_id, dp_->tc_prog_fd()))
                        add(Hook::tc, d, s);
                }
        }
        if_freenameindex(all);
    }
    // Whether flows --top is answered from the heavy hitters, and from which threshold.
    auto t = dp_->top_tracking();
    json top = {{"tracking", t.valid},
                {"threshold", t.threshold == ~0ull ? json(nullptr) : json(t.threshold)},
                {"candidates", t.candidates}};
    json fleet = nullptr;
    if (fleet_) {
        fleet = fleet_->status();
        json ps = json::object();
        for (const auto &e : policies_) {
            std::string name = e.spec.value("name", "");
            if (auto f = fleet_->policy_status(name); !f.is_null())
                ps[name] = f;
        }
        fleet["policies"] = ps;
    }
    return ok({{"attachments", att},
               {"fleet", fleet},
               {"metrics", metrics_address_.empty() ? "none" : metrics_address_},
               {"pin_dir", options_.pin_dir},
               {"config", options_.config},
               {"state", options_.state},
               {"started_from", started_from_},
               {"policies", {{"used", policies_.size()}, {"capacity", TCM_MAX_POLICIES}}},
               {"flows",
                {{"used", dp_->counted_flows()}, // as of the last pass: a walk takes 0.5 s
                 {"capacity", options_.flow_capacity},
                 {"reclaimed", reclaimed_total_},
                 {"top", top}}}});
}

// Fleet metrics (docs/spec.md §10), apart from metrics() so each scrape adds them after it.
std::vector<prometheus::MetricFamily> Daemon::fleet_metrics() const {
    using prometheus::ClientMetric;
    using prometheus::MetricFamily;
    using prometheus::MetricType;
    std::lock_guard lock(mu_);
    auto single = [](std::string name, std::string help, MetricType type, double v) {
        ClientMetric m;
        if (type == MetricType::Counter)
            m.counter.value = v;
        else
            m.gauge.value = v;
        return MetricFamily{std::move(name), std::move(help), type, {m}};
    };
    std::vector<MetricFamily> fleet_families;
    if (fleet_) {
        auto t = fleet_->totals();
        fleet_families = {
            single("tricolor_fleet_exchanges_total", "Exchanges with the fleet's Redis",
                   MetricType::Counter, static_cast<double>(t.exchanges)),
            single("tricolor_fleet_failures_total", "Exchanges Redis did not answer in time",
                   MetricType::Counter, static_cast<double>(t.failures)),
            single("tricolor_fleet_fallbacks_total",
                   "Switches of a fleet policy to its fallback (Redis lost)", MetricType::Counter,
                   static_cast<double>(t.fallbacks)),
            single("tricolor_fleet_recoveries_total", "Returns of a fleet policy from its fallback",
                   MetricType::Counter, static_cast<double>(t.recoveries)),
            single("tricolor_fleet_in_fallback", "1 while any fleet policy runs on its fallback",
                   MetricType::Gauge, t.fallback ? 1.0 : 0.0)};
        MetricFamily hosts{
            "tricolor_fleet_hosts_seen", "Hosts in the fleet of a policy", MetricType::Gauge, {}};
        MetricFamily held{"tricolor_fleet_local_held_bits",
                          "Fleet tokens this host holds for a policy (bits or packets)",
                          MetricType::Gauge,
                          {}};
        for (const auto &e : policies_) {
            std::string name = e.spec.value("name", "");
            auto f = fleet_->policy_status(name);
            if (f.is_null())
                continue;
            ClientMetric m;
            m.label = {{"parent", e.spec.value("parent", "")}, {"policy", name}};
            m.gauge.value = f.value("hosts_seen", 0.0);
            hosts.metric.push_back(m);
            m.gauge.value = f.value("local_held", 0.0);
            held.metric.push_back(m);
        }
        fleet_families.push_back(hosts);
        fleet_families.push_back(held);
    }
    return fleet_families;
}

} // namespace tricolor
