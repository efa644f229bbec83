// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_changes.cpp: checking policies (alone and as a set) and changing the running set: one
// policy at a time (change_one) or the whole set (apply_specs), each recorded in the state file
// before the data path changes, all or nothing.
#include "daemon_internal.hpp"

#include "tricolor/cgroups.hpp"
#include "tricolor/policy_sets.hpp"

#include "tricolor/policy_fields.hpp"
#include "tricolor/shape.hpp"
#include "tricolor/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_map>

namespace tricolor {

using namespace daemon_internal;

namespace {

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

} // namespace

// Policy ids for one change: a name keeps the id it has (active, else adopted from the pinned
// maps); a new name takes the lowest id nobody holds. Built once per change, not per policy,
// in one pass over the set: a change of one policy (one name asked) finds it by a scan, and
// only a whole set (more names) is worth an index.
class Daemon::IdAllocator {
  public:
    IdAllocator(const std::vector<Entry> &active, const std::map<std::string, uint32_t> &adopted)
        : active_(active), adopted_(adopted), held_(TCM_MAX_POLICIES) {
        for (const auto &e : active)
            hold(e.id);
        for (const auto &[name, id] : adopted)
            hold(id);
    }
    uint32_t operator()(const std::string &name) {
        if (auto id = known(name))
            return *id;
        while (cursor_ < held_.size() && held_[cursor_])
            ++cursor_;
        hold(cursor_);
        return cursor_;
    }

  private:
    std::optional<uint32_t> known(const std::string &name) {
        if (++asked_ == 2)
            for (const auto &e : active_)
                index_.emplace(e.name, e.id);
        if (asked_ >= 2) {
            if (auto it = index_.find(name); it != index_.end())
                return it->second;
        } else if (auto at = std::ranges::find(active_, name, &Entry::name); at != active_.end()) {
            return at->id;
        }
        if (auto it = adopted_.find(name); it != adopted_.end())
            return it->second;
        return std::nullopt;
    }
    void hold(uint32_t id) {
        if (id >= held_.size())
            held_.resize(id + 1);
        held_[id] = true;
    }
    const std::vector<Entry> &active_;
    const std::map<std::string, uint32_t> &adopted_;
    std::unordered_map<std::string_view, uint32_t> index_; // active_ by name, from the 2nd name
    std::vector<bool> held_;
    size_t asked_ = 0;
    uint32_t cursor_ = 0;
};

Daemon::Entry Daemon::make_entry(uint32_t id, const json &spec, const Policy &p) {
    // A cgroup's egress and ingress policies have the same match and never shadow each other.
    return {id, spec, p.name,
            fmt::format("{}|{}|{}", p.priority, spec.value("match", json::object()).dump(),
                        p.match.cgroup ? static_cast<int>(p.direction) : 0)};
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
        for (const auto &a : p->actions)
            if (xdp_only && action_is_tc_only(a.kind))
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
    if (p->match.cgroup) {
        // docs/spec.md §11: a path that does not exist yet is accepted (it may come later).
        if (auto mount = cgroup2_mount(); !mount)
            errors.push_back(fmt::format("policy '{}': match.cgroup: {}", name, mount.error()));
        else if (warnings && match_cgroups(*p->match.cgroup, scan_cgroups(*mount)).empty())
            warnings->push_back(fmt::format(
                "policy '{}': no cgroup matches '{}' under {} now; one made later is matched "
                "within a second",
                name, *p->match.cgroup, *mount));
    }
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

Result<void> Daemon::change_policy_set(const TableSizes &need,
                                       const std::function<Result<void>()> &change) {
    if (auto r = make_room(need); !r)
        return r;
    {
        // The fleet agent must not grant into a set being changed: the data path's grant words
        // have one writer at a time.
        std::unique_lock<std::mutex> hold;
        if (fleet_)
            hold = fleet_->hold();
        if (auto r = change(); !r)
            return r;
    }
    if (fleet_)
        fleet_->set_policies(dp_->policies());
    return {};
}

// --shape sockets: the sock_ops program goes on the root cgroup before the first shaping
// policy is live, and stays (it returns at once while no policy shapes).
Result<void> Daemon::start_socket_shaping() {
    dp_->set_shape_ifaces(egress_ifindexes(attachments_));
    if (!sockops_attached(link_dir()))
        if (auto r = attach_sockops(dp_->sockops_prog_fd(), link_dir()); !r)
            return std::unexpected(r.error());
    return {};
}

// The sock_ops and cgroup ingress links an earlier daemon (or this one's data path of before)
// pinned: this data path's programs swapped in (they read the same maps). What fails goes into
// @problems.
void Daemon::swap_root_cgroup_programs(std::vector<std::string> &problems) {
    if (sockops_attached(link_dir()))
        if (auto r = attach_sockops(dp_->sockops_prog_fd(), link_dir()); !r)
            problems.push_back(r.error());
    // The cgroup ingress program is loaded only if an earlier one was attached.
    if (cgroup_ingress_attached(link_dir())) {
        try {
            if (auto r = attach_cgroup_ingress(dp_->cgroup_in_prog_fd(), link_dir()); !r)
                problems.push_back(r.error());
        } catch (const std::exception &e) {
            problems.push_back(e.what());
        }
    }
    root_cgroup_swapped_ = true;
    dp_->drop_cgroup_rules_of_before();
    fold_counters_when_safe();
}

// Ingress cgroup policies (docs/spec.md §11): the cgroup_skb program goes on the root cgroup
// before the first such policy is live, and stays. Loaded only then (bpf/cgroup_in.bpf.c).
Result<void> Daemon::start_cgroup_ingress() {
    if (cgroup_ingress_attached(link_dir()))
        return {};
    try {
        return attach_cgroup_ingress(dp_->cgroup_in_prog_fd(), link_dir());
    } catch (const std::exception &e) {
        return std::unexpected(std::string(e.what()));
    }
}

bool daemon_internal::is_cgroup_ingress(const Policy &p) {
    return p.match.cgroup && p.direction == TCM_CGROUP_INGRESS;
}

// One policy added or changed (@spec) or deleted (no @spec): checked on its own and against the
// set around it, one record appended to the state journal, one atomic change of the data path.
// A change to one policy of thousands costs that policy's, not the set's.
Result<void> Daemon::change_one(const std::string &name, const json *spec,
                                std::vector<std::string> *warnings) {
    auto at = std::ranges::find(policies_, name, &Entry::name);
    if (!spec && at == policies_.end())
        return std::unexpected(fmt::format("no policy named '{}'", name));
    uint32_t id = at != policies_.end() ? at->id : IdAllocator(policies_, adopted_ids_)(name);
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
        if (policy->shape == TCM_SHAPE_SOCKETS)
            if (auto r = start_socket_shaping(); !r)
                return r;
        if (is_cgroup_ingress(*policy))
            if (auto r = start_cgroup_ingress(); !r)
                return r;
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
    const SetChange c = policy ? SetChange{{*policy}, {}} : SetChange{{}, {id}};
    if (auto r = change_policy_set(dp_->tables_needed(c),
                                   [&] { return policy ? dp_->upsert(*policy) : dp_->remove(id); });
        !r) {
        if (journaled)
            journal_undo();
        else
            unstage();
        return r;
    }
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
    if (!dry_run && std::ranges::any_of(prep->policies, [](const Policy &p) {
            return p.shape == TCM_SHAPE_SOCKETS;
        }))
        if (auto r = start_socket_shaping(); !r)
            return r;
    if (!dry_run && std::ranges::any_of(prep->policies, is_cgroup_ingress))
        if (auto r = start_cgroup_ingress(); !r)
            return r;
    // apply() checks the whole set before it touches anything, and refuses with check()'s
    // message; only a dry run needs check() on its own.
    if (dry_run)
        return dp_->check(prep->policies);
    if (auto r = staged(state_json(specs, attachments_),
                        [&] {
                            return change_policy_set(
                                Datapath::tables_needed(prep->policies, dp_->table_sizes()),
                                [&] { return dp_->apply(prep->policies); });
                        });
        !r)
        return r;
    policies_ = std::move(prep->entries);
    adopted_ids_.clear();
    if (auto c = commit(); !c && warnings)
        warnings->push_back(c.error());
    return {};
}

} // namespace tricolor

namespace tricolor {

// Called by the main loop: cgroups made or removed since the last scan, under the lock changes
// are made under. A scan four times a second, only while a policy matches cgroups.
std::string Daemon::follow_cgroups() {
    std::lock_guard lock(mu_);
    auto now = std::chrono::steady_clock::now();
    if (now - cgroups_scanned_ < std::chrono::milliseconds(250))
        return "";
    cgroups_scanned_ = now;
    auto r = dp_->follow_cgroups();
    std::string said = !r && r.error() != cgroups_error_ ? r.error() : "";
    cgroups_error_ = r ? "" : r.error();
    return said;
}

} // namespace tricolor
