// daemon.cpp: see daemon.hpp.
#include "daemon.hpp"

#include "tricolor/policy_spec.hpp"
#include "tricolor/text.hpp"
#include "tricolor/yaml.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <arpa/inet.h>
#include <filesystem>
#include <fstream>
#include <set>

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

json counters_json(const tc_counters &c) {
    json out;
    const char *names[] = {"green", "yellow", "red"};
    for (int i = 0; i < TC_NR_COLORS; ++i)
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

std::string flow_key_text(const tc_flow_key &k, const Policy &p) {
    bool v4 = is_v4_mapped(k.src) || is_v4_mapped(k.dst);
    auto with_len = [&](const uint32_t a[4], bool ipv4) {
        unsigned len = ipv4 ? p.prefix4 : p.prefix6;
        std::string s = addr_text(a, ipv4);
        return (ipv4 ? len < 32 : len < 128) ? fmt::format("{}/{}", s, len) : s;
    };
    switch (p.per) {
    case TC_PER_SRC:
        return "src " + with_len(k.src, is_v4_mapped(k.src));
    case TC_PER_DST:
        return "dst " + with_len(k.dst, is_v4_mapped(k.dst));
    case TC_PER_5TUPLE:
        return fmt::format("proto {} {}:{} > {}:{}", k.proto, addr_text(k.src, v4), k.sport,
                           addr_text(k.dst, v4), k.dport);
    default:
        return "aggregate";
    }
}

} // namespace

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {
    DatapathOptions o;
    o.pin_dir = options_.pin_dir;
    o.flow_capacity = options_.flow_capacity;
    dp_ = std::make_unique<Datapath>(o);
    dp_->set_drop_malformed(options_.drop_malformed);
    for (const auto &p : dp_->policies())
        adopted_ids_[p.name] = p.id;
    if (auto r = load_config(true); !r)
        throw std::runtime_error(r.error());
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

Result<void> Daemon::apply_specs(const std::vector<json> &specs, bool dry_run,
                                 std::vector<std::string> *warnings) {
    std::vector<Entry> next;
    std::vector<Policy> policies;
    IdAllocator id_for(policies_, adopted_ids_);
    std::vector<std::string> errors;
    std::set<std::string> names;
    for (const auto &spec : specs) {
        std::string name = spec.is_object() ? spec.value("name", "") : "";
        if (!name.empty() && !names.insert(name).second) {
            errors.push_back(fmt::format("policy '{}' is defined twice", name));
            continue;
        }
        uint32_t id = id_for(name);
        auto p = to_policy(spec, id);
        if (!p) {
            errors.push_back(p.error());
            continue;
        }
        if (warnings) {
            for (const auto &w : validate(p->meter).warnings)
                warnings->push_back(fmt::format("policy '{}': {}", name, w));
            bool xdp_only = !attachments_.empty() &&
                            std::ranges::none_of(attachments_, [](const AttachmentSpec &a) {
                                return a.hook == Hook::tc;
                            });
            for (const auto &a : p->actions)
                if (xdp_only && (a.kind == TC_ACT_KIND_MARK || a.kind == TC_ACT_KIND_PRIORITY))
                    warnings->push_back(fmt::format(
                        "policy '{}': {} only acts on tc attachments; on XDP the packet passes",
                        name, to_string(a)));
        }
        next.push_back({id, spec});
        policies.push_back(*p);
    }
    if (!errors.empty())
        return std::unexpected(join_lines(errors));
    // apply() checks the whole set before it touches anything, and refuses with check()'s
    // message; only a dry run needs check() on its own.
    if (dry_run)
        return dp_->check(policies);
    if (auto r = dp_->apply(policies); !r)
        return r;
    policies_ = std::move(next);
    adopted_ids_.clear();
    return persist();
}

Result<AttachResult> Daemon::do_attach(const AttachmentSpec &a) {
    auto idx = interface_index(a.iface);
    if (!idx)
        return std::unexpected(idx.error());
    if (a.hook == Hook::xdp)
        return attach_xdp(*idx, dp_->xdp_prog_fd(), a.xdp_mode);
    return attach_tc(*idx, a.direction, dp_->tc_prog_fd(), link_dir());
}

json Daemon::config_json() const {
    json cfg = {{"policies", json::array()}, {"attachments", json::array()}};
    for (const auto &e : policies_)
        cfg["policies"].push_back(e.spec);
    for (const auto &a : attachments_)
        cfg["attachments"].push_back(attachment_json(a));
    return cfg;
}

Result<void> Daemon::persist() const {
    namespace fs = std::filesystem;
    fs::path path(options_.config);
    std::error_code ec;
    if (path.has_parent_path())
        fs::create_directories(path.parent_path(), ec);
    // Temp file and rename: a reader (or a crash) sees the old file or the new, never half.
    std::string tmp = options_.config + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        if (path.extension() == ".json")
            out << config_json().dump(2) << "\n";
        else
            out << "# tricolord's configuration: rewritten by tricolorctl changes.\n"
                << json_to_yaml(config_json());
        out.flush();
        if (!out)
            return std::unexpected(fmt::format("applied, but cannot write {}: the change will "
                                               "not survive a restart",
                                               tmp));
    }
    fs::rename(tmp, path, ec);
    if (ec)
        return std::unexpected(
            fmt::format("applied, but cannot replace {}: {}", options_.config, ec.message()));
    return {};
}

Result<void> Daemon::load_config(bool at_start) {
    std::ifstream in(options_.config);
    if (!in) {
        if (at_start)
            return {}; // no config yet: start empty, the first change creates it
        return std::unexpected(fmt::format("cannot read {}", options_.config));
    }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto parsed = yaml_to_json(text);
    if (!parsed)
        return std::unexpected(fmt::format("{}: {}", options_.config, parsed.error()));
    json cfg = *parsed;
    if (cfg.is_null())
        cfg = json::object(); // an empty file
    if (!cfg.is_object())
        return std::unexpected(
            fmt::format("{}: expected sections policies: and attachments:", options_.config));
    for (const auto &[key, value] : cfg.items())
        if (key != "policies" && key != "attachments")
            return std::unexpected(fmt::format("{}: unknown section '{}'", options_.config, key));
    std::vector<json> specs;
    if (cfg.contains("policies")) {
        if (!cfg["policies"].is_array())
            return std::unexpected(fmt::format("{}: policies must be a list", options_.config));
        specs.assign(cfg["policies"].begin(), cfg["policies"].end());
    }
    std::vector<AttachmentSpec> attach;
    if (cfg.contains("attachments")) {
        if (!cfg["attachments"].is_array())
            return std::unexpected(fmt::format("{}: attachments must be a list", options_.config));
        for (const auto &a : cfg["attachments"]) {
            auto spec = attachment_from(a);
            if (!spec)
                return std::unexpected(
                    fmt::format("{}: attachment {}: {}", options_.config, a.dump(), spec.error()));
            attach.push_back(*spec);
        }
    }
    std::vector<std::string> warnings;
    if (auto r = apply_specs(specs, false, &warnings); !r)
        return std::unexpected(fmt::format("{}: {}", options_.config, r.error()));
    startup_warnings.insert(startup_warnings.end(), warnings.begin(), warnings.end());
    std::vector<AttachmentSpec> done;
    for (auto a : attach) {
        auto r = do_attach(a);
        if (!r) {
            startup_warnings.push_back(r.error());
            continue;
        }
        if (!r->warning.empty())
            startup_warnings.push_back(r->warning);
        a.mode = r->mode;
        done.push_back(a);
    }
    attachments_ = done;
    return {};
}

Result<void> Daemon::reload() {
    std::lock_guard lock(mu_);
    return load_config(false);
}

size_t Daemon::reclaim_idle_flows() {
    std::lock_guard lock(mu_);
    size_t n = dp_->reclaim_idle_flows();
    reclaimed_total_ += n;
    return n;
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
    for (const auto &e : policies_) {
        const auto &c = counters[e.id];
        std::string name = e.spec.value("name", "");
        for (int i = 0; i < TC_NR_COLORS; ++i) {
            ClientMetric m;
            m.label = {{"color", colors[i]}, {"policy", name}};
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
            single("tricolor_flows", "Flows in the flow table", MetricType::Gauge,
                   static_cast<double>(dp_->flows().size())),
            single("tricolor_flows_reclaimed_total",
                   "Idle flows deleted because their buckets were full again", MetricType::Counter,
                   static_cast<double>(reclaimed_total_)),
            single("tricolor_flow_capacity", "Capacity of the flow table", MetricType::Gauge,
                   static_cast<double>(options_.flow_capacity)),
            single("tricolor_policies", "Active policies", MetricType::Gauge,
                   static_cast<double>(policies_.size()))};
}

void Daemon::detach_all() {
    for (const auto &a : attachments_) {
        auto idx = interface_index(a.iface);
        if (!idx)
            continue;
        if (a.hook == Hook::xdp)
            (void)detach_xdp(*idx);
        else
            (void)detach_tc(*idx, a.direction, link_dir());
    }
    attachments_.clear();
    Datapath::remove_pins(options_.pin_dir);
}

json Daemon::handle(const json &r) {
    std::lock_guard lock(mu_);
    if (!r.is_object())
        return error("a request must be a JSON object");
    auto cmd = r.find("cmd");
    if (cmd == r.end() || !cmd->is_string())
        return error("the request needs \"cmd\" (a string)");
    const std::string c = *cmd;
    try {
        if (c == "attach")
            return cmd_attach(r);
        if (c == "detach")
            return cmd_detach(r);
        if (c == "policy_add")
            return cmd_policy_add(r);
        if (c == "policy_set")
            return cmd_policy_set(r);
        if (c == "policy_del")
            return cmd_policy_del(r);
        if (c == "policy_list")
            return cmd_policy_list(r);
        if (c == "policy_show")
            return cmd_policy_show(r);
        if (c == "apply")
            return cmd_apply(r);
        if (c == "stats")
            return cmd_stats(r);
        if (c == "flows")
            return cmd_flows(r);
        if (c == "status")
            return cmd_status(r);
    } catch (const std::exception &e) {
        return error(fmt::format("{}: {}", c, e.what()));
    }
    return error(fmt::format("unknown command '{}'", c));
}

json Daemon::cmd_attach(const json &r) {
    auto a = attachment_from(r);
    if (!a)
        return error(a.error());
    auto res = do_attach(*a);
    if (!res)
        return error(res.error());
    a->mode = res->mode;
    std::erase_if(attachments_, [&](const AttachmentSpec &x) { return same_hook(x, *a); });
    attachments_.push_back(*a);
    json out = {{"mode", res->mode}};
    if (!res->warning.empty())
        out["warning"] = res->warning;
    if (auto p = persist(); !p)
        out["warning"] = p.error();
    return ok(out);
}

json Daemon::cmd_detach(const json &r) {
    auto a = attachment_from(r);
    if (!a)
        return error(a.error());
    auto idx = interface_index(a->iface);
    if (!idx)
        return error(idx.error());
    auto res = a->hook == Hook::xdp ? detach_xdp(*idx) : detach_tc(*idx, a->direction, link_dir());
    if (!res)
        return error(res.error());
    std::erase_if(attachments_, [&](const AttachmentSpec &x) { return same_hook(x, *a); });
    if (auto p = persist(); !p)
        return ok({{"warning", p.error()}});
    return ok();
}

namespace {
json warnings_body(const std::vector<std::string> &w) {
    json out = json::object();
    if (!w.empty())
        out["warnings"] = w;
    return out;
}
} // namespace

json Daemon::cmd_policy_add(const json &r) {
    auto it = r.find("policy");
    if (it == r.end() || !it->is_object())
        return error("the request needs \"policy\" (an object)");
    std::string name = it->value("name", "");
    for (const auto &e : policies_)
        if (e.spec.value("name", "") == name)
            return error(fmt::format("policy '{}' exists: use policy set to change it", name));
    std::vector<json> specs;
    for (const auto &e : policies_)
        specs.push_back(e.spec);
    specs.push_back(*it);
    std::vector<std::string> warnings;
    if (auto res = apply_specs(specs, false, &warnings); !res)
        return error(res.error());
    return ok(warnings_body(warnings));
}

json Daemon::cmd_policy_set(const json &r) {
    auto name = need_string(r, "name");
    if (!name)
        return error(name.error());
    auto patch = r.find("patch");
    if (patch == r.end() || !patch->is_object())
        return error("the request needs \"patch\" (an object of fields to change)");
    if (patch->contains("name") && (*patch)["name"] != *name)
        return error("a policy cannot be renamed: delete it and add it under the new name");
    std::vector<json> specs;
    bool found = false;
    for (const auto &e : policies_) {
        if (e.spec.value("name", "") == *name) {
            specs.push_back(merge_policy(e.spec, *patch));
            found = true;
        } else {
            specs.push_back(e.spec);
        }
    }
    if (!found)
        return error(fmt::format("no policy named '{}'", *name));
    std::vector<std::string> warnings;
    if (auto res = apply_specs(specs, false, &warnings); !res)
        return error(res.error());
    return ok(warnings_body(warnings));
}

json Daemon::cmd_policy_del(const json &r) {
    auto name = need_string(r, "name");
    if (!name)
        return error(name.error());
    std::vector<json> specs;
    bool found = false;
    for (const auto &e : policies_) {
        if (e.spec.value("name", "") == *name)
            found = true;
        else
            specs.push_back(e.spec);
    }
    if (!found)
        return error(fmt::format("no policy named '{}'", *name));
    if (auto res = apply_specs(specs, false, nullptr); !res)
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
        if (e.spec.value("name", "") == *name)
            return ok({{"policy", e.spec}, {"id", e.id}});
    return error(fmt::format("no policy named '{}'", *name));
}

json Daemon::cmd_apply(const json &r) {
    auto it = r.find("policies");
    if (it == r.end() || !it->is_array())
        return error("the request needs \"policies\" (a list)");
    bool dry_run = r.value("dry_run", false);
    std::vector<json> specs(it->begin(), it->end());
    std::vector<std::string> warnings;
    if (auto res = apply_specs(specs, dry_run, &warnings); !res)
        return error(res.error());
    json out = warnings_body(warnings);
    out["policies"] = specs.size();
    out["dry_run"] = dry_run;
    return ok(out);
}

json Daemon::cmd_stats(const json &r) {
    std::string only = r.value("name", "");
    auto counters = dp_->policy_counters();
    json list = json::array();
    bool found = only.empty();
    for (const auto &e : policies_) {
        std::string name = e.spec.value("name", "");
        if (!only.empty() && name != only)
            continue;
        found = true;
        json p = counters_json(counters[e.id]);
        p["name"] = name;
        // SPEC §9: each policy names its parent (null at the top); counters are per level.
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
    auto flows = dp_->flows();
    std::erase_if(flows, [&](const Flow &f) { return !by_id.contains(f.key.policy_id); });
    auto total = [](const Flow &f) {
        return f.state.counters.bytes[0] + f.state.counters.bytes[1] + f.state.counters.bytes[2];
    };
    std::ranges::sort(flows, [&](const Flow &a, const Flow &b) { return total(a) > total(b); });
    if (top && flows.size() > top)
        flows.resize(top);
    json list = json::array();
    for (const auto &f : flows) {
        const Policy &p = by_id[f.key.policy_id];
        json j = counters_json(f.state.counters);
        j["policy"] = p.name;
        j["parent"] = p.parent.empty() ? json(nullptr) : json(p.parent);
        j["key"] = flow_key_text(f.key, p);
        list.push_back(j);
    }
    return ok({{"flows", list}});
}

json Daemon::cmd_status(const json &) {
    json att = json::array();
    for (const auto &a : attachments_) {
        json j = attachment_json(a);
        j["mode"] = a.mode;
        auto idx = interface_index(a.iface);
        HookState s;
        if (idx)
            s = a.hook == Hook::xdp ? query_xdp(*idx) : query_tc(*idx, a.direction);
        j["prog_id"] = s.prog_id;
        j["attached"] =
            s.prog_id != 0 && (s.prog_name == kXdpProgName || s.prog_name == kTcProgName);
        att.push_back(j);
    }
    return ok({{"attachments", att},
               {"metrics", metrics_address_.empty() ? "none" : metrics_address_},
               {"pin_dir", options_.pin_dir},
               {"config", options_.config},
               {"policies", {{"used", policies_.size()}, {"capacity", TC_MAX_POLICIES}}},
               {"flows",
                {{"used", dp_->flows().size()},
                 {"capacity", options_.flow_capacity},
                 {"reclaimed", reclaimed_total_}}}});
}

} // namespace tricolor
