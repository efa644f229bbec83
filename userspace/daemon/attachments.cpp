// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// attachments.cpp: the data path on interfaces: attaching, detaching, and what the kernel runs
// on each hook (status's attachments).
#include "daemon_internal.hpp"

#include "tricolor/shape.hpp"
#include "tricolor/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fnmatch.h>
#include <iostream>
#include <net/if.h>

namespace tricolor {

using namespace daemon_internal;

namespace daemon_internal {

bool same_hook(const AttachmentSpec &a, const AttachmentSpec &b) {
    return a.iface == b.iface && a.match_ifname == b.match_ifname && a.hook == b.hook &&
           a.direction == b.direction;
}

bool made_by(const AttachmentSpec &a, const AttachmentSpec &pattern) {
    return !a.by.empty() && a.by == pattern.match_ifname && a.hook == pattern.hook &&
           a.direction == pattern.direction;
}

std::string hook_text(const AttachmentSpec &a) {
    std::string name = a.match_ifname.empty() ? a.iface : "'" + a.match_ifname + "'";
    return a.hook == Hook::xdp ? fmt::format("{} xdp", name)
                               : fmt::format("{} tc {}", name, to_string(a.direction));
}

HookState query_hook(const AttachmentSpec &a, int ifindex, const ProgramIds &ours) {
    return a.hook == Hook::xdp ? query_xdp(ifindex, ours) : query_tc(ifindex, a.direction, ours);
}

std::vector<uint32_t> egress_ifindexes(const std::vector<AttachmentSpec> &attachments) {
    std::vector<uint32_t> out;
    for (const auto &a : attachments)
        if (a.hook == Hook::tc && a.direction == Direction::egress)
            if (auto idx = interface_index(a.iface))
                out.push_back(static_cast<uint32_t>(*idx));
    return out;
}

} // namespace daemon_internal

namespace {

bool runs_tricolor(const HookState &s) {
    return s.prog_id != 0 && s.ours;
}

// The name @a's interface has now, when its own name is gone but its ifindex is not (renamed).
std::optional<std::string> renamed_to(const AttachmentSpec &a) {
    char buf[IF_NAMESIZE] = {};
    if (a.ifindex > 0 && if_indextoname(static_cast<unsigned>(a.ifindex), buf))
        return std::string(buf);
    return std::nullopt;
}

// The options of `tricolorctl attach|detach IFACE` that name this hook.
std::string hook_options(Hook h, Direction d) {
    return h == Hook::tc ? fmt::format(" --hook tc --direction {}", to_string(d)) : "";
}

} // namespace

std::string Daemon::link_dir() const {
    return dp_->pin_path().empty() ? "" : dp_->pin_path() + "/links";
}

Result<AttachResult> Daemon::do_attach(AttachmentSpec &a) {
    auto idx = interface_index(a.iface);
    if (!idx)
        return std::unexpected(idx.error());
    a.ifindex = *idx;
    if (a.hook == Hook::xdp)
        return attach_xdp(*idx, dp_->xdp_prog_fd(), a.xdp_mode, dp_->program_ids());
    return attach_tc(*idx, a.direction, dp_->tc_prog_fd(), link_dir(), dp_->program_ids());
}

Result<void> Daemon::detach_hook(const AttachmentSpec &a, int ifindex) {
    return a.hook == Hook::xdp ? detach_xdp(ifindex, dp_->program_ids())
                               : detach_tc(ifindex, a.direction, link_dir());
}

// Takes @a off its hook. An interface that is gone (deleted, moved to another namespace) has
// nothing left to detach here: its pinned tcx link, if any, is released. Returns a note.
Result<std::string> Daemon::detach_one(const AttachmentSpec &a) {
    auto idx = interface_index(a.iface);
    if (!idx) {
        // Renamed: the ifindex still exists under another name, and the program runs there.
        if (auto now = renamed_to(a)) {
            if (auto r = detach_hook(a, a.ifindex); !r)
                return std::unexpected(r.error());
            return fmt::format("{} is now called {}: detached from it", a.iface, *now);
        }
        int released = a.hook == Hook::tc ? release_defunct_tcx_links(link_dir()) : 0;
        return fmt::format("{} no longer exists (deleted, or moved to another namespace): entry "
                           "removed{}",
                           a.iface, released ? ", its pinned tcx link released" : "");
    }
    if (!runs_tricolor(query_hook(a, *idx, dp_->program_ids()))) {
        // Not in the kernel (taken off by hand): only the entry is left to remove.
        if (a.hook == Hook::tc)
            (void)detach_tc(*idx, a.direction, link_dir()); // a pinned link, if one is left
        return fmt::format("the kernel had no tricolor program on {}: entry removed", hook_text(a));
    }
    if (auto r = detach_hook(a, *idx); !r)
        return std::unexpected(r.error());
    return std::string();
}

void Daemon::detach_all() {
    for (const auto &a : attachments_)
        (void)detach_one(a);
    attachments_.clear();
    detach_sockops(link_dir());
    detach_cgroup_ingress(link_dir());
    Datapath::remove_pins(options_.pin_dir);
}

// An earlier daemon's programs, pinned for their ids (Datapath::program_ids), go once no hook of
// ours runs them: they would keep flows --top from the heavy hitters (writers it cannot see).
// Nothing to query once they are gone: an attach or detach request (a pod's, among hundreds of
// attachments) does not pay a netlink query per attachment.
void Daemon::release_previous_programs() {
    if (dp_->holds_previous_programs()) {
        const ProgramIds ours = dp_->program_ids();
        ProgramIds running;
        for (const auto &a : attachments_)
            if (auto idx = interface_index(a.iface))
                if (auto s = query_hook(a, *idx, ours); s.prog_id)
                    running.push_back(s.prog_id);
        dp_->release_previous_programs(running);
        if (root_cgroup_swapped_)
            dp_->drop_cgroup_rules_of_before();
    }
    fold_counters_when_safe();
}

void Daemon::fold_counters_when_safe() {
    // The cgroup ingress program counts --aqm into tcm_tcp_stats: it must be this data path's.
    if (!dp_->holds_counters_of_before() || dp_->holds_previous_programs() ||
        (!root_cgroup_swapped_ && cgroup_ingress_attached(link_dir())))
        return;
    try {
        const size_t n = dp_->fold_counters_of_before();
        std::cerr << fmt::format("tricolord: the counters of {} {} carried over from the "
                                 "counter arrays of before the policy tables' resize",
                                 n, n == 1 ? "policy" : "policies")
                  << std::endl;
    } catch (const std::exception &e) {
        std::cerr << "tricolord: " << e.what() << " (tried again at the next release)" << std::endl;
    }
}

std::vector<AttachmentSpec> Daemon::attachments_without(const AttachmentSpec &a) const {
    auto out = attachments_;
    std::erase_if(out, [&](const AttachmentSpec &x) { return same_hook(x, a); });
    return out;
}

// What the kernel has, not what the daemon remembers: the entry is queried, and if the kernel
// does not run it, "stale" says why (and how to remove it).
json Daemon::attachment_status(const AttachmentSpec &a) const {
    json j = attachment_json(a);
    j["mode"] = a.mode;
    auto idx = interface_index(a.iface);
    HookState s;
    std::string stale;
    int where = idx ? *idx : 0;
    if (!idx)
        if (auto now = renamed_to(a)) {
            where = a.ifindex;
            stale = fmt::format("{} is now called {} (ifindex {})", a.iface, *now, a.ifindex);
        }
    if (where)
        s = query_hook(a, where, dp_->program_ids());
    bool attached = runs_tricolor(s);
    if (!where)
        stale = fmt::format("no interface named '{}' (deleted, or moved to another "
                            "namespace)",
                            a.iface);
    else if (!attached && stale.empty())
        stale = !s.prog_id ? "the kernel has no tricolor program there"
                : s.prog_name.empty()
                    ? fmt::format("the kernel runs program id {} there, not tricolor", s.prog_id)
                    : fmt::format("the kernel runs '{}' there, not tricolor", s.prog_name);
    if (attached && !s.mode.empty())
        j["mode"] = s.mode; // as the kernel reports it
    j["prog_id"] = s.prog_id;
    j["attached"] = attached && where == (idx ? *idx : -1);
    if (!stale.empty())
        j["stale"] = stale + fmt::format("; tricolorctl detach {}{} removes this entry", a.iface,
                                         hook_options(a.hook, a.direction));
    return j;
}

// What the kernel runs of this data path (its programs on its maps) that no entry names: left
// by hand or by an older daemon. Listed so that it can be adopted or taken off.
json Daemon::unlisted_attachments() const {
    json out = json::array();
    struct if_nameindex *all = if_nameindex();
    if (!all)
        return out;
    // Ours: one of this pin directory's programs by id, or (where the kernel names programs to
    // us) a tricolor program on these very maps, left by a daemon from before programs were
    // pinned; never another pin directory's.
    const ProgramIds ids = dp_->program_ids();
    auto mine = [&](const HookState &s, int prog_fd) {
        return std::ranges::find(ids, s.prog_id) != ids.end() ||
               (s.ours && shares_maps(s.prog_id, prog_fd));
    };
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
                name, hook_options(h, d));
            out.push_back(j);
        };
        if (!listed(Hook::xdp, Direction::ingress)) {
            HookState s = query_xdp(idx, ids);
            if (s.prog_id && mine(s, dp_->xdp_prog_fd()))
                add(Hook::xdp, Direction::ingress, s);
        }
        for (Direction d : {Direction::ingress, Direction::egress})
            if (!listed(Hook::tc, d)) {
                HookState s = query_tc(idx, d, ids);
                if (s.prog_id && mine(s, dp_->tc_prog_fd()))
                    add(Hook::tc, d, s);
            }
    }
    if_freenameindex(all);
    return out;
}

// attach --match-ifname. A rescan of the namespace's interfaces (one netlink dump) at most four
// times a second while a pattern exists: an interface made is attached within a second, and a
// rescan cannot miss what a burst of netlink events might overrun.
bool Daemon::expand_patterns(const std::vector<AttachmentSpec> &patterns,
                             std::vector<AttachmentSpec> &have, std::vector<std::string> &failed) {
    bool changed = false;
    // Made by a pattern that is gone, or on an interface that is gone or no longer matches
    // (renamed): let go. A renamed one is detached (detach_one finds it by its ifindex).
    std::erase_if(have, [&](const AttachmentSpec &a) {
        if (a.by.empty())
            return false;
        bool wanted =
            std::ranges::any_of(patterns, [&](const AttachmentSpec &p) { return made_by(a, p); });
        auto idx = interface_index(a.iface);
        if (wanted && idx && *idx == a.ifindex)
            return false;
        (void)detach_one(a);
        changed = true;
        return true;
    });
    struct if_nameindex *all = if_nameindex();
    if (!all)
        return changed;
    for (const auto &p : patterns)
        for (auto *i = all; i->if_index != 0; ++i) {
            std::string name = i->if_name;
            if (fnmatch(p.match_ifname.c_str(), name.c_str(), 0) != 0)
                continue;
            AttachmentSpec a = p;
            a.match_ifname.clear();
            a.iface = name;
            a.by = p.match_ifname;
            // An interface attached by name, or by an earlier pattern, keeps that attachment.
            if (std::ranges::any_of(have, [&](const AttachmentSpec &x) { return same_hook(x, a); }))
                continue;
            auto r = do_attach(a);
            if (!r) {
                failed.push_back(fmt::format("{}: {}", hook_text(a), r.error()));
                continue;
            }
            a.mode = r->mode;
            have.push_back(a);
            changed = true;
        }
    if_freenameindex(all);
    return changed;
}

std::vector<std::string> Daemon::follow_interfaces() {
    std::lock_guard lock(mu_);
    std::vector<std::string> said;
    auto now = std::chrono::steady_clock::now();
    // Every attachment a pattern made goes with its pattern (cmd_attach_pattern, reload).
    if (patterns_.empty())
        return said;
    if (now - interfaces_scanned_ < std::chrono::milliseconds(250))
        return said;
    interfaces_scanned_ = now;
    std::vector<std::string> failed;
    auto next = attachments_;
    if (expand_patterns(patterns_, next, failed)) {
        attachments_ = std::move(next);
        dp_->set_shape_ifaces(egress_ifindexes(attachments_));
    }
    // A failure is said once, until it stops.
    std::set<std::string> now_failing;
    for (const auto &f : failed) {
        now_failing.insert(f);
        if (!interface_failures_.contains(f))
            said.push_back(fmt::format("cannot attach {}", f));
    }
    interface_failures_ = std::move(now_failing);
    return said;
}

// attach|detach --match-ifname: the pattern kept (or dropped) and applied at once.
json Daemon::cmd_attach_pattern(AttachmentSpec a, bool attach) {
    auto next_patterns = patterns_;
    std::erase_if(next_patterns, [&](const AttachmentSpec &p) { return same_hook(p, a); });
    bool known = next_patterns.size() != patterns_.size();
    if (!attach && !known)
        return error(
            fmt::format("no pattern {} to detach: status lists the patterns", hook_text(a)));
    if (attach)
        next_patterns.push_back(a);
    if (auto s = stage(state_json(specs(), attachments_, &next_patterns)); !s)
        return error(s.error());
    auto next = attachments_;
    std::vector<std::string> failed;
    expand_patterns(next_patterns, next, failed);
    patterns_ = std::move(next_patterns);
    json covered = json::array();
    for (const auto &x : next)
        if (made_by(x, a))
            covered.push_back(x.iface);
    json out = {{"interfaces", covered}};
    if (!failed.empty())
        out["warning"] = join_lines(failed);
    return commit_attachments(std::move(next), out);
}

} // namespace tricolor
