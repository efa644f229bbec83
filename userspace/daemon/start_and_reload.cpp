// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// start_and_reload.cpp: making a file the running state: at start (the config or the state
// file, whichever is newer) and on SIGHUP (the config, all or nothing).
#include "daemon_internal.hpp"
#include "tricolor/control.hpp"
#include "tricolor/flow_sizing.hpp"

#include "tricolor/shape.hpp"
#include "tricolor/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <net/if.h>
#include <unistd.h>

namespace tricolor {

using namespace daemon_internal;
namespace fs = std::filesystem;

namespace {

// What the CNI plugin and the engines' followers made for containers (managed_by) is not a
// config's: carried into @into from @specs and @attachments (what ran), unless @into names a
// policy of the same name (then the config's) or the same hook. @present_only: only
// attachments whose interface exists.
void keep_managed(Doc &into, const std::vector<json> &specs,
                  const std::vector<AttachmentSpec> &attachments, bool present_only) {
    for (const auto &spec : specs)
        if (spec.is_object() && spec.contains("managed_by") &&
            std::ranges::none_of(into.specs, [&](const json &c) {
                return c.is_object() && c.value("name", "") == spec.value("name", "");
            }))
            into.specs.push_back(spec);
    for (const auto &a : attachments)
        if (!a.managed_by.empty() && (!present_only || if_nametoindex(a.iface.c_str()) != 0) &&
            std::ranges::none_of(into.attachments, [&](const auto &d) { return same_hook(d, a); }))
            into.attachments.push_back(a);
}

// What a start applies (tricolord --help), and why.
struct StartChoice {
    Doc doc;
    std::string from;    // "config", "state" or "nothing": status's started_from
    std::string note;    // which file, and why
    std::string warning; // the config does not check, so the state runs: what is wrong with it
};

// The newer of the config and the state file (the state on a tie; changes in its @journal count
// as the state's), the state when the config does not check, or nothing when neither exists.
Result<StartChoice> choose_start(const DaemonOptions &o, const std::string &journal_path,
                                 const Result<std::optional<Doc>> &cfg,
                                 const std::optional<Doc> &st, const std::vector<json> &journal) {
    std::error_code e1, e2, e3;
    bool cfg_exists = !cfg || *cfg;
    auto state_time = fs::last_write_time(o.state, e1);
    if (!journal.empty())
        state_time = std::max(state_time, fs::last_write_time(journal_path, e3));
    bool use_state = st && (!cfg_exists || state_time >= fs::last_write_time(o.config, e2));
    StartChoice out;
    if (!cfg && !use_state) {
        if (!st)
            return std::unexpected(cfg.error());
        // The user's newest edit is broken: keep policing with what ran last, and say so.
        out.warning = fmt::format("{}; applying the state {} instead (what ran last); fix the "
                                  "config and send SIGHUP",
                                  cfg.error(), o.state);
        use_state = true;
    }
    if (use_state) {
        out.doc = *st;
        replay_journal(out.doc, journal);
        out.from = "state";
        out.note =
            !cfg ? fmt::format("applying the state {}: the config {} does not check (below)",
                               o.state, o.config)
            : cfg_exists
                ? fmt::format("applying the state {}: it is newer than the config {} (changes made "
                              "with tricolorctl since the config was edited; SIGHUP applies the "
                              "config)",
                              o.state, o.config)
                : fmt::format("applying the state {} (no config at {})", o.state, o.config);
    } else if (*cfg) {
        out.doc = **cfg;
        out.from = "config";
        out.note = st ? fmt::format("applying the config {}: it is newer than the state {}, whose "
                                    "tricolorctl changes it replaces",
                                    o.config, o.state)
                      : fmt::format("applying the config {}", o.config);
    } else {
        out.from = "nothing";
        out.note = fmt::format(
            "no config at {} and no state at {}: starting with no policies and no attachments",
            o.config, o.state);
    }
    return out;
}

// The flow table's capacity at this start: --flows for a new one; a pinned one's own, unless it
// is over --max-flows or under --flows, is not within the goal for its flows (a spike long gone),
// would grow at once, or is of the layout of before 2026-11-30 (a power of two of slots, twice
// its capacity): then one made for its flows (flow_capacity_settled), its flows moved into it
// with their tokens and counters.
uint32_t start_capacity(const DaemonOptions &o) {
    const uint32_t first = std::min(o.flow_capacity, o.max_flows);
    auto pinned = Datapath::pinned_flow_table(o.pin_dir);
    if (!pinned)
        return first;
    const uint32_t least = flow_least_capacity(o.flow_capacity, o.max_flows);
    const uint32_t c = pinned->capacity;
    if (c > o.max_flows || c < first || pinned->slots != flow_slots_for(c) ||
        !flow_table_within_goal(c, pinned->live, least) || flow_table_grows(c, pinned->live))
        return std::max(first, flow_capacity_settled(pinned->live, least, o.max_flows));
    return c;
}

} // namespace

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {
    if (options_.state.empty())
        options_.state = default_state_path(options_.pin_dir);
    // Without --max-flows, the config's max_flows: the table's size at this start depends on it
    // (any fault in the file is load_at_start's to report).
    const auto cfg = read_doc(options_.config);
    max_flows_default_ = options_.max_flows;
    if (!options_.max_flows_given && cfg && *cfg && (*cfg)->max_flows)
        options_.max_flows = *(*cfg)->max_flows;
    DatapathOptions o;
    o.pin_dir = options_.pin_dir;
    o.flow_capacity = start_capacity(options_);
    o.top_keep = options_.top_keep;
    o.tables = {TCM_START_POLICY_SLOTS, TCM_START_RULE_SLOTS, false};
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
    if (auto r = load_at_start(cfg); !r)
        throw std::runtime_error(r.error());
    // Once the config is applied, so that the sock_ops program knows which policies shape
    // from its first socket.
    swap_root_cgroup_programs(startup_warnings);
    // Every hook runs this daemon's programs now: a resize's flows of before can move.
    move_flows_of_before(true);
    // Container engines last: what they make goes through handle(), on the set just loaded.
    follow_engines();
}

Daemon::~Daemon() = default;

Result<void> Daemon::load_at_start(const Result<std::optional<Doc>> &cfg) {
    auto st = read_doc(options_.state);
    if (!st)
        return std::unexpected(fmt::format("{} (the daemon's state file: remove it to start from "
                                           "{})",
                                           st.error(), options_.config));
    // Changes since the state file was last written whole, if the journal extends that file.
    std::vector<json> journal;
    if (*st)
        journal = read_journal(journal_path(), (*st)->text_hash);
    auto start = choose_start(options_, journal_path(), cfg, *st, journal);
    if (!start)
        return std::unexpected(start.error());
    if (!start->warning.empty())
        startup_warnings.push_back(start->warning);
    started_from_ = start->from;
    startup_notes.push_back(start->note);
    bool use_state = start->from == "state";
    // Started from a config newer than the state: the state's containers' policies stay.
    if (!use_state && *st)
        keep_managed(start->doc, (*st)->specs, (*st)->attachments, false);
    if (cfg && *cfg)
        config_containers_ = (*cfg)->containers;
    // The policy tables grow before the policies are applied where they are too small: at
    // once if this data path is new; if it adopted an earlier daemon's (its programs on the
    // hooks, reading the tables that growing replaces), once every hook runs this daemon's.
    const std::string from = use_state ? options_.state : options_.config;
    // (A growth loads the data path again on the pins the first load made: adopted() is then
    // true of a data path made afresh.)
    const bool afresh = !dp_->adopted();
    tables_grow_now_ = afresh;
    auto applied = apply_at_start(start->doc.specs, from);
    tables_grow_now_ = false;
    if (!applied && !room_wanted_)
        return applied;
    // A data path made afresh (a reboot, or pins removed): the quotas' use as last saved, before
    // any hook runs it (a packet first would make a bucket's state, and the saved use be lost).
    if (afresh)
        if (size_t n = restore_quota_uses())
            startup_notes.push_back(
                fmt::format("the use of {} quota bucket(s) restored from {}", n, quota_path()));
    attach_at_start(start->doc.attachments);
    // attach --match-ifname: what the patterns name now (what they attached before this start is
    // not in the state: the pattern attaches it again, over the pinned link that kept it running).
    patterns_ = start->doc.patterns;
    {
        std::vector<std::string> failed;
        expand_patterns(patterns_, attachments_, failed);
        for (const auto &f : failed)
            startup_warnings.push_back("cannot attach " + f);
    }
    release_previous_programs();
    if (!applied) {
        swap_root_cgroup_programs(startup_warnings);
        room_wanted_.reset();
        tables_grow_now_ = true;
        applied = apply_at_start(start->doc.specs, from);
        tables_grow_now_ = false;
        if (!applied)
            return applied;
    }
    if (use_state)
        state_hash_ = (*st)->text_hash;
    if (!use_state || !journal.empty() ||
        std::ranges::any_of(attachments_, [](auto &a) { return a.ifindex; })) {
        if (auto s = write_state_whole(); !s)
            startup_warnings.push_back(s.error());
    } else {
        unlink(journal_path().c_str()); // stale: it extends another state than this one
    }
    dp_->set_shape_ifaces(egress_ifindexes(attachments_));
    return {};
}

// The policies of the file @from, whole; any error refuses the start.
Result<void> Daemon::apply_at_start(const std::vector<json> &specs, const std::string &from) {
    std::vector<std::string> warnings;
    auto prep = prepare(specs, &warnings);
    if (!prep)
        return std::unexpected(fmt::format("{}: {}", from, prep.error()));
    if (auto r = make_room(Datapath::tables_needed(prep->policies, dp_->table_sizes())); !r)
        return std::unexpected(fmt::format("{}: {}", from, r.error()));
    if (auto r = dp_->apply(prep->policies); !r)
        return std::unexpected(fmt::format("{}: {}", from, r.error()));
    // The fleet policies of the file lease from the start (a restarted daemon's, adopted, too:
    // until its first exchange its data path runs the lease of before to that lease's deadline).
    if (fleet_)
        fleet_->set_policies(dp_->policies());
    // The root cgroup's programs, if a policy needs one and no earlier daemon left its link
    // pinned (after a reboot, or --detach-on-exit): a warning, as an interface that is gone is.
    if (std::ranges::any_of(prep->policies,
                            [](const Policy &p) { return p.shape == TCM_SHAPE_SOCKETS; }))
        if (auto r = start_socket_shaping(); !r)
            warnings.push_back(r.error());
    if (std::ranges::any_of(prep->policies, is_cgroup_ingress))
        if (auto r = start_cgroup_ingress(); !r)
            warnings.push_back(r.error());
    policies_ = std::move(prep->entries);
    adopted_ids_.clear();
    startup_warnings.insert(startup_warnings.end(), warnings.begin(), warnings.end());
    return {};
}

// An interface that is not there (yet) does not stop the start: the attachment is kept, and
// status shows it as not attached until it is attached again or detached.
void Daemon::attach_at_start(const std::vector<AttachmentSpec> &attachments) {
    for (auto a : attachments) {
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
}

Result<void> Daemon::reload() {
    // walk_mu_ first (as a growth takes them): a reload that needs bigger policy tables grows
    // them in place (make_room).
    std::lock_guard walking(walk_mu_);
    std::lock_guard lock(mu_);
    tables_grow_now_ = true;
    struct Reset {
        bool &flag;
        ~Reset() { flag = false; }
    } reset{tables_grow_now_};
    auto cfg = read_doc(options_.config);
    if (!cfg)
        return std::unexpected(cfg.error());
    if (!*cfg)
        return std::unexpected(fmt::format("cannot read {}: no such file", options_.config));
    Doc doc = **cfg;
    // What runs for containers stays (an interface gone with its container goes: the reload
    // would refuse it).
    keep_managed(doc, specs(), attachments_, true);
    std::vector<std::string> warnings;
    auto prep = check_reload(doc.specs, doc.attachments, &warnings);
    if (!prep)
        return std::unexpected(fmt::format("{}: {}", options_.config, prep.error()));
    // Room for the new set before anything is attached: a growth puts its programs on the hooks
    // this daemon has (a failed reload leaves the tables bigger, nothing else).
    if (auto r = make_room(Datapath::tables_needed(prep->policies, dp_->table_sizes())); !r)
        return std::unexpected(fmt::format("{}: {}", options_.config, r.error()));
    if (auto s = stage(state_json(doc.specs, doc.attachments, &doc.patterns)); !s)
        return s;
    // Attach first, then switch the policies: anything that fails undoes what this reload added.
    std::vector<AttachmentSpec> added;
    auto undo = [&] {
        for (const auto &a : added)
            (void)detach_hook(a, a.ifindex);
        unstage();
    };
    auto attached = attach_for_reload(doc.attachments, added, warnings);
    if (!attached) {
        undo();
        return std::unexpected(fmt::format("{}: {}", options_.config, attached.error()));
    }
    // Before the policies that need it: an ingress cgroup policy without its program meters
    // nothing.
    if (std::ranges::any_of(prep->policies, is_cgroup_ingress))
        if (auto r = start_cgroup_ingress(); !r) {
            undo();
            return std::unexpected(fmt::format("{}: {}", options_.config, r.error()));
        }
    {
        // As change_policy_set: no lease written into a set being switched, and the agent
        // told the fleet policies after (a fleet policy the config adds leases from now; one it
        // removes stops exchanging).
        std::unique_lock<std::mutex> hold;
        if (fleet_)
            hold = fleet_->hold();
        if (auto r = dp_->apply(prep->policies); !r) {
            undo();
            return std::unexpected(fmt::format("{}: {}", options_.config, r.error()));
        }
    }
    if (fleet_)
        fleet_->set_policies(dp_->policies());
    // The config's patterns attach again what they name, as attach_for_reload does for the
    // interfaces it names (over the same program: no gap), so detach_unlisted keeps them.
    {
        std::vector<std::string> failed;
        expand_patterns(doc.patterns, *attached, failed);
        for (const auto &f : failed)
            warnings.push_back("cannot attach " + f);
    }
    patterns_ = doc.patterns;
    detach_unlisted(*attached, warnings);
    attachments_ = std::move(*attached);
    release_previous_programs();
    if (!std::ranges::any_of(prep->policies,
                             [](const Policy &p) { return p.shape == TCM_SHAPE_SOCKETS; }))
        dp_->set_shape_ifaces(egress_ifindexes(attachments_));
    else if (auto r = start_socket_shaping(); !r)
        warnings.push_back(r.error());
    policies_ = std::move(prep->entries);
    adopted_ids_.clear();
    if (auto c = commit(); !c)
        warnings.push_back(c.error());
    reload_warnings = std::move(warnings);
    config_containers_ = doc.containers;
    // A max_flows the config raises lets the table grow further; one it lowers stops its growth
    // there (the table does not shrink while the daemon runs).
    if (!options_.max_flows_given)
        options_.max_flows = doc.max_flows.value_or(max_flows_default_);
    return {};
}

// Everything a reload would refuse, found before anything changes: every interface named, and
// the policies whole.
Result<Daemon::Prepared> Daemon::check_reload(const std::vector<json> &specs,
                                              const std::vector<AttachmentSpec> &attachments,
                                              std::vector<std::string> *warnings) {
    std::vector<std::string> errors;
    for (const auto &a : attachments)
        if (auto idx = interface_index(a.iface); !idx)
            errors.push_back(fmt::format("attachment {}: {}", hook_text(a), idx.error()));
    auto prep = prepare(specs, warnings);
    if (!prep)
        errors.push_back(prep.error());
    else if (auto c = dp_->check(prep->policies); !c)
        errors.push_back(c.error());
    if (!errors.empty())
        return std::unexpected(join_lines(errors));
    return prep;
}

// Attaches every one of @attachments and returns them as attached; @added gets those whose hook
// ran no program before (what an undo takes off).
Result<std::vector<AttachmentSpec>>
Daemon::attach_for_reload(const std::vector<AttachmentSpec> &attachments,
                          std::vector<AttachmentSpec> &added, std::vector<std::string> &warnings) {
    std::vector<AttachmentSpec> done;
    for (auto a : attachments) {
        auto idx = interface_index(a.iface);
        HookState before = idx ? query_hook(a, *idx, dp_->program_ids()) : HookState{};
        auto r = do_attach(a);
        if (!r)
            return std::unexpected(fmt::format("attachment {}: {}", hook_text(a), r.error()));
        if (!r->warning.empty())
            warnings.push_back(r->warning);
        a.mode = r->mode;
        done.push_back(a);
        if (!before.prog_id)
            added.push_back(a);
    }
    return done;
}

// What the config no longer names comes off.
void Daemon::detach_unlisted(const std::vector<AttachmentSpec> &kept,
                             std::vector<std::string> &warnings) {
    for (const auto &old : attachments_) {
        if (std::ranges::any_of(kept, [&](const AttachmentSpec &d) { return same_hook(d, old); }))
            continue;
        auto note = detach_one(old);
        warnings.push_back(note
                               ? fmt::format("detached {}: not in {}{}", hook_text(old),
                                             options_.config, note->empty() ? "" : "; " + *note)
                               : fmt::format("cannot detach {}: {}", hook_text(old), note.error()));
    }
}

void Daemon::follow_engines() {
    std::vector<std::unique_ptr<ContainerWatcher>> gone;
    {
        std::lock_guard lock(mu_);
        std::vector<EngineSpec> want;
        for (const auto *list : {&options_.containers, &config_containers_})
            for (const auto &t : *list)
                if (auto e = parse_engine(t); e && std::ranges::find(want, *e) == want.end())
                    want.push_back(*e);
        for (auto it = watchers_.begin(); it != watchers_.end();) {
            if (std::ranges::find(want, (*it)->engine()) != want.end()) {
                ++it;
            } else {
                gone.push_back(std::move(*it));
                it = watchers_.erase(it);
            }
        }
        for (const auto &e : want)
            if (std::ranges::none_of(watchers_, [&](const auto &w) { return w->engine() == e; }))
                watchers_.push_back(std::make_unique<ContainerWatcher>(e, [this](json r) {
                    r["version"] = kControlProtocolVersion;
                    return handle(r, Peer{});
                }));
    }
    // Stopped here, without the lock their threads may be waiting for. What they made stays
    // (policies are the state's); a follower started again reads the engine anew.
    gone.clear();
}

} // namespace tricolor
