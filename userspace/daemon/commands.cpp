// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// commands.cpp: the control protocol's commands (docs/control.md): the table that registers
// each one, handle(), which checks a request against it, and the handlers.
#include "daemon_internal.hpp"

#include "tricolor/policy_fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace tricolor {

using namespace daemon_internal;

// One row a command: its fields, and whether it changes anything (then it needs root or
// CAP_NET_ADMIN; a dry run is a change here too: it costs a compile of the whole set).
struct Daemon::Command {
    enum Access : bool { read_only = false, changes = true };
    std::string_view name;
    json (Daemon::*handler)(const json &);
    std::vector<Field> fields;
    Access access;
};

std::span<const Daemon::Command> Daemon::commands() {
    using enum Command::Access;
    // iface or match_ifname: attachment_from says which it needs.
    static const std::vector<Field> kAttach = {
        {"iface", Kind::string}, {"match_ifname", Kind::string}, {"managed_by", Kind::string},
        {"hook", Kind::string},  {"direction", Kind::string},    {"xdp_mode", Kind::string}};
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
    return kCommands;
}

namespace {

// "a, b, c": the names of the commands @keep accepts.
template <typename Row, typename Keep>
std::string names_of(std::span<const Row> rows, Keep keep) {
    std::string out;
    for (const auto &k : rows)
        if (keep(k))
            out += (out.empty() ? "" : ", ") + std::string(k.name);
    return out;
}

} // namespace

json Daemon::handle(const json &r, const Peer &peer) {
    {
        std::lock_guard lock(mu_);
        room_wanted_.reset();
        json out = handle_locked(r, peer);
        if (!room_wanted_)
            return out;
    }
    // A change the policy tables have no room for, refused with nothing changed: made again
    // with walk_mu_ held too (no flow pass reads the data path that growing replaces), so that
    // make_room grows the tables first. The order of the locks is the flow table growth's.
    std::lock_guard walking(walk_mu_);
    std::lock_guard lock(mu_);
    room_wanted_.reset();
    tables_grow_now_ = true;
    json out = handle_locked(r, peer);
    tables_grow_now_ = false;
    return out;
}

json Daemon::handle_locked(const json &r, const Peer &peer) {
    auto cmd = request_command(r);
    if (!cmd)
        return error(cmd.error());
    const std::string &c = *cmd;
    auto row = std::ranges::find(commands(), std::string_view(c), &Command::name);
    if (row == commands().end())
        return error(fmt::format("unknown command '{}' (known: {})", c,
                                 names_of(commands(), [](auto &) { return true; })));
    if (row->access == Command::changes && !peer.may_change)
        return error(fmt::format("{} changes tricolord's state: it needs root or CAP_NET_ADMIN "
                                 "(the caller, pid {}, is uid {} without CAP_NET_ADMIN); the "
                                 "socket's group may use {}",
                                 c, peer.pid, peer.uid, names_of(commands(), [](auto &k) {
                                     return k.access == Command::read_only;
                                 })));
    if (auto ok_fields = check_fields(c, r, row->fields); !ok_fields)
        return error(ok_fields.error());
    try {
        return (this->*row->handler)(r);
    } catch (const std::exception &e) {
        return error(fmt::format("{}: {}", c, e.what()));
    }
}

// The handlers read their fields as the table has already checked them: present where
// required, of the kind it names.

namespace {

// attach and detach name an interface or a pattern: the table cannot say "one of two".
json need_iface_or_pattern(const char *cmd) {
    return error(fmt::format("{}: the request needs \"iface\" (a non-empty string) or "
                             "\"match_ifname\" (a glob)",
                             cmd));
}

} // namespace

json Daemon::cmd_attach(const json &r) {
    if (!r.contains("iface") && !r.contains("match_ifname"))
        return need_iface_or_pattern("attach");
    auto a = attachment_from(r);
    if (!a)
        return error(a.error());
    if (!a->match_ifname.empty())
        return cmd_attach_pattern(*a, true);
    a->ifindex = 0;
    auto idx = interface_index(a->iface);
    if (!idx)
        return error(idx.error());
    a->ifindex = *idx;
    auto next = attachments_without(*a);
    next.push_back(*a);
    auto res = staged(state_json(specs(), next), [&] { return do_attach(*a); });
    if (!res)
        return error(res.error());
    a->mode = res->mode;
    next.back() = *a;
    json out = {{"mode", res->mode}};
    if (!res->warning.empty())
        out["warning"] = res->warning;
    return commit_attachments(std::move(next), out);
}

json Daemon::cmd_detach(const json &r) {
    if (!r.contains("iface") && !r.contains("match_ifname"))
        return need_iface_or_pattern("detach");
    auto a = attachment_from(r);
    if (!a)
        return error(a.error());
    if (!a->match_ifname.empty())
        return cmd_attach_pattern(*a, false);
    auto known = std::ranges::find_if(attachments_,
                                      [&](const AttachmentSpec &x) { return same_hook(x, *a); });
    if (known == attachments_.end()) {
        // Not ours to remember, but the kernel may still run our program there (an older
        // daemon's attachment): take it off.
        auto idx = interface_index(a->iface);
        if (!idx)
            return error(idx.error());
        if (auto res = detach_hook(*a, *idx); !res)
            return error(res.error());
        return ok();
    }
    if (!known->by.empty())
        return error(
            fmt::format("{} was attached by the pattern '{}', which would attach it again: "
                        "detach --match-ifname '{}' removes the pattern",
                        hook_text(*known), known->by, known->by));
    auto next = attachments_without(*a);
    auto note = staged(state_json(specs(), next), [&] { return detach_one(*known); });
    if (!note)
        return error(note.error());
    json out = json::object();
    if (!note->empty())
        out["note"] = *note;
    return commit_attachments(std::move(next), out);
}

// @next made the attachments once the kernel has taken the change: the shaping interfaces
// follow, and the staged state file is committed (a failure to is the reply's "warning").
json Daemon::commit_attachments(std::vector<AttachmentSpec> next, json reply) {
    attachments_ = std::move(next);
    release_previous_programs();
    dp_->set_shape_ifaces(egress_ifindexes(attachments_));
    if (auto c = commit(); !c)
        reply["warning"] = c.error();
    return ok(reply);
}

json Daemon::cmd_policy_add(const json &r) {
    auto it = r.find("policy");
    std::string name = it->value("name", "");
    if (std::ranges::find(policies_, name, &Entry::name) != policies_.end())
        return error(fmt::format("policy '{}' exists: use policy set to change it", name));
    std::vector<std::string> warnings;
    auto res = change_one(name, &*it, &warnings);
    return res ? ok(warnings_body(warnings)) : error(res.error());
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
    auto res = change_one(*name, &spec, &warnings);
    return res ? ok(warnings_body(warnings)) : error(res.error());
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
        if (auto o = e.spec.value("owner", std::string()); !o.empty())
            p["owner"] = o;
        p.update(tcp_counters_json(tcp[e.id]));
        if (fleet_)
            if (auto f = fleet_->policy_status(name); !f.is_null())
                p["fleet"] = f;
        // docs/spec.md §14: an aggregate quota's use of this period (a per-key one: flows).
        if (auto q = aggregate(e.spec) ? dp_->quota_use(e.id) : std::nullopt)
            p["quota"] = quota_json(*q);
        // docs/spec.md §9: each policy names its parent (null at the top); counters are per level.
        auto parent = e.spec.find("parent");
        p["parent"] = parent != e.spec.end() && parent->is_string() ? *parent : json(nullptr);
        // --match cgroup: the cgroups the pattern names now, by path; per cgroup, each bucket's
        // counters.
        if (e.spec.contains("match") && e.spec["match"].is_object() &&
            e.spec["match"].contains("cgroup")) {
            bool per = e.spec.value("per", "") == "cgroup";
            json cg = json::array();
            for (const auto &b : dp_->cgroup_buckets(e.id)) {
                json j = per ? counters_json(b.counters) : json::object();
                j["path"] = b.path;
                cg.push_back(j);
            }
            p["cgroups"] = cg;
        }
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
    std::map<uint32_t, std::string> owners; // "owner" of the policies that say one
    for (const auto &e : policies_) {
        if (!only.empty() && e.spec.value("name", "") != only)
            continue;
        if (auto p = to_policy(e.spec, e.id))
            by_id[e.id] = *p;
        if (auto o = e.spec.value("owner", std::string()); !o.empty())
            owners[e.id] = o;
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
        if (auto o = owners.find(p.id); o != owners.end())
            j["owner"] = o->second;
        j["parent"] = p.parent.empty() ? json(nullptr) : json(p.parent);
        j["key"] = flow_key_text(f.key, p, [&](uint64_t id) { return dp_->cgroup_path(id); });
        j["buckets"] = buckets_json(p, f.state, now);
        if (auto q = f.id.head ? dp_->quota_use(p.id, &f.id) : std::nullopt)
            j["quota"] = quota_json(*q);
        list.push_back(j);
    }
    return ok({{"flows", list}, {"via", via}});
}

// What the kernel has, not what the daemon remembers: every entry is queried, and what the
// kernel runs of this data path that no entry names is listed too (attachments.cpp).
json Daemon::cmd_status(const json &) {
    json att = json::array();
    for (const auto &a : attachments_)
        att.push_back(attachment_status(a));
    for (auto &j : unlisted_attachments())
        att.push_back(std::move(j));
    // Whether flows --top is answered from the heavy hitters, and from which threshold.
    auto t = dp_->top_tracking();
    json top = {{"tracking", t.valid},
                {"threshold", t.threshold == ~0ull ? json(nullptr) : json(t.threshold)},
                {"candidates", t.candidates}};
    json patterns = json::array();
    for (const auto &p : patterns_) {
        json j = attachment_json(p);
        j["interfaces"] = json::array();
        for (const auto &a : attachments_)
            if (made_by(a, p))
                j["interfaces"].push_back(a.iface);
        patterns.push_back(j);
    }
    return ok({{"attachments", att},
               {"patterns", patterns},
               {"fleet", fleet_status()},
               {"containers",
                [&] {
                    json c = json::array();
                    for (const auto &w : watchers_)
                        c.push_back(w->status());
                    return c;
                }()},
               {"metrics", metrics_address_.empty() ? "none" : metrics_address_},
               {"web", page_address_.empty() ? "none" : page_address_},
               {"pin_dir", options_.pin_dir},
               {"config", options_.config},
               {"state", options_.state},
               {"started_from", started_from_},
               {"policies",
                {{"used", policies_.size()},
                 {"capacity", TCM_MAX_POLICIES},
                 // The policy tables as loaded now (they grow before a change needs more, and
                 // shrink once the policies that needed them are gone).
                 {"slots", dp_->table_sizes().policy_slots},
                 {"rule_slots", dp_->table_sizes().rule_slots / 2},
                 // tcm_meter_ext, made with the first warm-up or quota (a growth).
                 {"ext_states", dp_->table_sizes().ext_states},
                 {"grown", tables_grown_},
                 {"shrunk", tables_shrunk_}}},
               {"flows",
                {{"used", dp_->counted_flows()}, // as of the last pass: a walk takes 0.5 s
                 {"live", dp_->live_flows()},    // the data path's own count, now
                 {"capacity", dp_->flow_capacity()},
                 {"max", options_.max_flows},
                 {"grown", grown_},
                 {"shrunk", shrunk_},
                 {"reclaimed", reclaimed_total_},
                 // A resize's table of before still holds flows to move (moments at most).
                 {"moving", dp_->moving_flows_of_before()},
                 {"moved", moved_total_},
                 {"top", top}}}});
}

// The fleet agent's status, with each fleet policy's (null without --fleet).
json Daemon::fleet_status() const {
    if (!fleet_)
        return nullptr;
    json fleet = fleet_->status();
    json ps = json::object();
    for (const auto &e : policies_) {
        std::string name = e.spec.value("name", "");
        if (auto f = fleet_->policy_status(name); !f.is_null())
            ps[name] = f;
    }
    fleet["policies"] = ps;
    return fleet;
}

} // namespace tricolor
