// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// daemon.hpp: tricolord's state and request handling. The daemon owns the policy set (specs as
// users wrote them, with their stable ids) and the attachments; every change is validated
// whole, written to the daemon's state file (a temp file, fsynced), applied to the data path
// all or nothing, and only then made the state (rename). The user's config file is only ever
// read: at start (when it is newer than the state file) and on SIGHUP.
#pragma once

#include "tricolor/attach.hpp"
#include "tricolor/datapath.hpp"
#include "containers.hpp"
#include "tricolor/fleet.hpp"

#include <nlohmann/json.hpp>

#include <prometheus/metric_family.h>

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace tricolor {

namespace daemon_internal {
struct Doc; // a config or state file as read (daemon_internal.hpp)
}

struct DaemonOptions {
    std::string config;
    std::string state; // the daemon's own record of what tricolorctl changed
    std::string socket;
    std::string pin_dir;
    // The flow table's capacity at the start (--flows) and the most it grows to (--max-flows):
    // it grows 4x while it runs whenever it is half full (flow_passes.cpp).
    uint32_t flow_capacity = TCM_START_FLOWS;
    uint32_t max_flows = TCM_DEFAULT_FLOWS;
    bool max_flows_given = false; // on the command line: the config's max_flows is not read
    bool detach_on_exit = false;
    bool drop_malformed = false;
    double reclaim_interval = 10;   // seconds between idle-flow reclaims; 0: never
    double flow_idle_timeout = 300; // seconds without a packet before a flow may go
    uint32_t top_keep = 1024;       // flows --top: heavy hitters a pass keeps (DatapathOptions)
    std::string metrics = "127.0.0.1:9464"; // "none": no metrics endpoint
    // docs/spec.md §10: redis://HOST:PORT[,HOST:PORT...] to join a fleet ("" none), this host's
    // name in it, and what fleet policies do while Redis does not answer.
    std::string fleet;
    std::string fleet_node;
    fleet::Fallback fleet_fallback = fleet::Fallback::share;
    uint32_t fleet_period_ms = 50;
    uint32_t fleet_lease_ms = 1000;
    // docs/containers.md: container engines to follow, "docker[=SOCKET]" / "podman[=SOCKET]".
    std::vector<std::string> containers;
};

// Who sent a request: the control socket's peer as the kernel saw it at connect (SO_PEERCRED).
// Read-only commands answer anyone who can open the socket (root, or --socket-group's members);
// a change needs root or CAP_NET_ADMIN (may_change).
struct Peer {
    uint32_t uid = 0;
    int32_t pid = 0;
    bool may_change = true;
};

struct AttachmentSpec {
    std::string iface;
    // attach --match-ifname GLOB: this spec is the pattern (iface empty), kept apart from the
    // attachments; on one made by a pattern, the pattern's glob (status lists it as "by").
    std::string match_ifname;
    std::string by;
    Hook hook = Hook::xdp;
    Direction direction = Direction::ingress;
    XdpMode xdp_mode = XdpMode::auto_mode;
    std::string mode; // what it runs in: native, generic, tc
    int ifindex = 0;  // when last attached: finds a pinned tcx link once the name is gone
    // Made for a container by the CNI plugin or an engine's follower ("cni", "docker",
    // "podman"): a reload of the config keeps it, as it keeps their policies (managed_by).
    std::string managed_by;
};

// A policy's byte counters by colour (green, yellow, red) as of one read: the live page's rate
// history (web.cpp) is made of these.
struct PolicyTotal {
    std::string name;
    uint32_t id = 0; // a policy removed and added again under its name has another
    std::array<uint64_t, 3> bytes{};
};

// The state file's default for a pin directory: /var/lib/tricolor/state.yaml for the default
// one, else /var/lib/tricolor/state-<pin dir, '/' as '-'>.yaml, so daemons side by side (one per
// pin directory) never share one.
std::string default_state_path(const std::string &pin_dir);

class Daemon {
  public:
    explicit Daemon(DaemonOptions options); // throws on what prevents starting
    ~Daemon();

    // Answers one request; never throws for a bad request. A peer that may not change state
    // gets the read-only commands alone.
    nlohmann::json handle(const nlohmann::json &request, const Peer &peer = {});
    // The container engines of --containers and of the config's containers: followed, those no
    // longer named stopped (at start, and after each reload; not under the request lock: a
    // watcher being stopped may be waiting for it).
    void follow_engines();
    // Re-reads the config file and makes it the running state: all or nothing, attachments
    // included (an interface that does not exist refuses the whole file).
    Result<void> reload();
    // Takes the data path off every interface and removes the pinned maps.
    void detach_all();
    // The periodic pass over the flow table, which also keeps flows --top's heavy hitters:
    // deletes flows whose buckets are full again (no colour changes) and returns how many;
    // count_flows only counts them, for the metrics, when no reclaim pass does
    // (--reclaim-interval 0). Either may run on a thread of its own: the walk of the table does
    // not hold the lock requests are served under.
    size_t reclaim_idle_flows();
    void count_flows();
    // --quota's use of the current periods, saved beside the state file (<state>.quota, written
    // whole and fsynced) at every pass over the flow table and at exit; restored into a data
    // path made afresh (after a reboot: bpffs is gone) for the policies of the same name and
    // periods. What a reboot loses: the use since the last pass (--reclaim-interval, 10 s).
    void save_quota_uses() const;
    size_t restore_quota_uses();
    std::string quota_path() const { return options_.state + ".quota"; }
    mutable std::string saved_quota_text_; // what save_quota_uses wrote last
    // Grows the flow table 4x (at most to --max-flows) if it is half full; true if it did. Its
    // programs are loaded again and put on every hook over the old ones (no gap), the policies
    // applied to them as they are, the flows moved with their tokens and counters. Called
    // often (main.cpp: every 10 ms): a look at one counter unless it grows.
    bool grow_flow_table_if_needed();
    // The Prometheus families, from one consistent read of the counters.
    std::vector<prometheus::MetricFamily> metrics() const;
    std::vector<prometheus::MetricFamily> fleet_metrics() const; // empty without --fleet
    // Writes the state file whole and drops the journal, once no change came for half a second
    // (@now: at once). Called by the main loop.
    void compact_state(bool now = false);
    // --match cgroup: a scan of the cgroup tree, the rules rewritten if it changed under them
    // (at most every 250 ms). Called by the main loop. Returns a failure to log, once each.
    std::string follow_cgroups();
    // attach --match-ifname: every interface of the namespace a pattern names and no attachment
    // covers is attached, and what a pattern attached to an interface gone or renamed is let go
    // (at most every 250 ms). Called by the main loop. Returns what to log.
    std::vector<std::string> follow_interfaces();
    // Where the metrics are served, once known (for status).
    void set_metrics_address(std::string address);
    // The live page (page_data.cpp): every policy's byte counters, in one read; and what the
    // page shows beside its rates: stats, status and (unless nullopt) flows --top @top_flows as
    // the control socket answers them, each aggregate policy's buckets, and (@with_specs) each
    // policy's spec.
    std::vector<PolicyTotal> policy_totals() const;
    void set_page_address(std::string address); // where --web serves it, for status
    nlohmann::json page_view(std::optional<size_t> top_flows, bool with_specs);
    const DaemonOptions &options() const { return options_; }
    std::vector<std::string> startup_warnings;
    std::vector<std::string> startup_notes;   // which file the start applied, and why
    std::vector<std::string> reload_warnings; // of the last successful reload

  private:
    // The member functions are defined by job, each group in the file its comment names; the
    // public ones above in start_and_reload.cpp (the constructor, reload), commands.cpp
    // (handle), attachments.cpp (detach_all), flow_passes.cpp, metrics.cpp and state_file.cpp
    // (compact_state).

    struct Entry { // one active policy
        uint32_t id;
        nlohmann::json spec;
        std::string name;
        std::string match_key; // priority and match: two alike means one never matches
    };

    // policy_changes.cpp
    static Entry make_entry(uint32_t id, const nlohmann::json &spec, const Policy &p);
    static std::string same_match_warning(const std::string &later, const std::string &first);
    struct Prepared {
        std::vector<Entry> entries;
        std::vector<Policy> policies;
    };
    class IdAllocator;
    // Checks @specs whole; warnings only about the policy named @warn_about ("" for all).
    Result<Prepared> prepare(const std::vector<nlohmann::json> &specs,
                             std::vector<std::string> *warnings,
                             const std::string &warn_about = "");
    // One spec on its own: its policy, and warnings about it when @warnings.
    Result<Policy> prepare_one(const nlohmann::json &spec, uint32_t id,
                               std::vector<std::string> *warnings) const;
    // Adds or replaces (@spec) or deletes (null) the policy @name: see policy_changes.cpp.
    Result<void> change_one(const std::string &name, const nlohmann::json *spec,
                            std::vector<std::string> *warnings);
    Result<void> apply_specs(const std::vector<nlohmann::json> &specs, bool dry_run,
                             std::vector<std::string> *warnings,
                             const std::string &warn_about = "");
    // Runs @change on the data path's policy set with the fleet agent held off, then gives the
    // agent the set now active.
    // @need: the policy tables the set after the change needs (make_room).
    Result<void> change_policy_set(const TableSizes &need,
                                   const std::function<Result<void>()> &change);
    // The policy tables made @need (Datapath::tables_needed), under mu_: grown now where that
    // is safe (tables_grow_now_), else nothing changed, room_wanted_ set and an error returned,
    // for the caller to grow (resize_tables, under walk_mu_) and try again.
    Result<void> make_room(const TableSizes &need);
    Result<void> resize_tables(const TableSizes &sizes);
    // The policy tables shrunk to what the active set leaves room for (Datapath::
    // tables_for_shrink) half a minute after they last changed size, nothing else under way
    // (the periodic look of grow_flow_table_if_needed; walk_mu_ and mu_ are its).
    void shrink_policy_tables_if_unused(std::chrono::steady_clock::time_point now);
    // Every hook, the root cgroup's programs and the data path's settings on the data path just
    // loaded (a growth), the programs of before let go and retired; what fails in @problems.
    void reattach_everything(std::vector<std::string> &problems);
    bool tables_grow_now_ = false;
    std::optional<TableSizes> room_wanted_;
    uint64_t tables_grown_ = 0; // times the policy tables grew while this daemon ran
    uint64_t tables_shrunk_ = 0;
    // When the policy tables last changed size (a shrink waits 30 s after) and when a shrink
    // last failed (tried again 30 s on); none yet: the start's tables may shrink at once.
    std::optional<std::chrono::steady_clock::time_point> tables_resized_at_;
    std::chrono::steady_clock::time_point tables_looked_at_;
    // Readies --shape sockets before a shaping policy goes live: the egress interfaces it
    // paces on, and the sock_ops program on the root cgroup.
    Result<void> start_socket_shaping();
    Result<void> start_cgroup_ingress();

    // state_file.cpp
    // stage() writes @state to a temp file beside the state file (fsynced), commit() renames it
    // into place, unstage() drops it. A change that cannot be staged is refused.
    Result<void> stage(const nlohmann::json &state) const;
    Result<void> commit() const;
    void unstage() const;
    // A change's middle: @state staged, then @kernel (returning a Result) run, and unstaged if
    // the kernel refused, so that the state file never says what the kernel did not take. The
    // caller commits once its model follows.
    template <class Kernel>
    auto staged(const nlohmann::json &state, Kernel &&kernel) const -> decltype(kernel()) {
        if (auto s = stage(state); !s)
            return std::unexpected(s.error());
        auto r = kernel();
        if (!r)
            unstage();
        return r;
    }
    Result<void> write_state_whole(); // the running state, staged and committed
    // The state journal, <state>.journal: one JSON record a line ({"put": spec} or
    // {"del": name}) after a header naming the text of the state file it extends, each fsynced
    // before its change is applied, so that a change of one policy writes one line rather than
    // the whole set. commit() folds it away; so does compact_state() once changes pause.
    // append: false when there is no state file to extend (the caller writes the state whole).
    Result<bool> journal_append(const nlohmann::json &record);
    void journal_undo(); // the last record, whose change the data path refused
    std::string journal_path() const;
    // The state file's content; @patterns: attach --match-ifname's (NULL: the daemon's). What a
    // pattern attached is not written: the pattern makes it again at the next start.
    nlohmann::json state_json(const std::vector<nlohmann::json> &specs,
                              const std::vector<AttachmentSpec> &attachments,
                              const std::vector<AttachmentSpec> *patterns = nullptr) const;
    std::vector<nlohmann::json> specs() const;

    // attachments.cpp
    std::string link_dir() const; // where tcx links are pinned
    Result<AttachResult> do_attach(AttachmentSpec &a);
    Result<std::string> detach_one(const AttachmentSpec &a);
    Result<void> detach_hook(const AttachmentSpec &a, int ifindex);
    std::vector<AttachmentSpec> attachments_without(const AttachmentSpec &a) const;
    void release_previous_programs();
    // The counter arrays of before a growth: carried into the pinned carried counts once no
    // program of before runs on a hook or the root cgroup (logged; a failure too, retried at the
    // next release).
    void fold_counters_when_safe();
    nlohmann::json attachment_status(const AttachmentSpec &a) const;
    nlohmann::json unlisted_attachments() const;

    // start_and_reload.cpp
    // @cfg: the config file as the constructor read it (it sizes the flow table too).
    Result<void> load_at_start(const Result<std::optional<daemon_internal::Doc>> &cfg);
    Result<void> apply_at_start(const std::vector<nlohmann::json> &specs, const std::string &from);
    void attach_at_start(const std::vector<AttachmentSpec> &attachments);
    Result<Prepared> check_reload(const std::vector<nlohmann::json> &specs,
                                  const std::vector<AttachmentSpec> &attachments,
                                  std::vector<std::string> *warnings);
    Result<std::vector<AttachmentSpec>>
    attach_for_reload(const std::vector<AttachmentSpec> &attachments,
                      std::vector<AttachmentSpec> &added, std::vector<std::string> &warnings);
    void detach_unlisted(const std::vector<AttachmentSpec> &kept,
                         std::vector<std::string> &warnings);

    // flow_passes.cpp
    size_t flow_pass(bool reclaim);
    // After a resize of the flow table (another --flows): its flows of before that no packet
    // has moved yet, moved (at the start once every hook runs this daemon's programs, then at
    // each pass until none is left). Under mu_.
    Datapath::MoveResult move_flows_of_before(bool at_start);
    void grow_flow_table(uint32_t capacity); // under walk_mu_ and mu_
    // policy_changes.cpp: the sock_ops and cgroup ingress programs pinned on the root cgroup
    // replaced by this data path's; failures into @problems.
    void swap_root_cgroup_programs(std::vector<std::string> &problems);
    // The root cgroup's programs are this daemon's (swapped at the start): with no earlier
    // program on a hook, nothing reads a cgroup rule map of before.
    bool root_cgroup_swapped_ = false;
    // Held for a whole pass over the flow table and while the table is grown: a pass reads the
    // table it began on. Taken before mu_.
    std::mutex walk_mu_;
    // The last growth that failed (tried again 10 s on), and the last try at the flows of a
    // table of before (grow_flow_table_if_needed).
    std::optional<std::chrono::steady_clock::time_point> grow_failed_at_;
    std::chrono::steady_clock::time_point moved_at_;
    // The live flows a second or so ago and when (new flows a second: rate_), the last resize
    // of the flow table and how long its load took: a growth sizes the table for the flows that
    // will come while it loads, and a shrink waits a while after any resize.
    std::chrono::steady_clock::time_point rate_mark_at_, resized_at_;
    uint64_t rate_mark_live_ = 0;
    int stuck_moves_ = 0; // tries in a row that left flows of a table of before
    double rate_ = 0, resize_seconds_ = 1;

    // commands.cpp: the control protocol's commands, one row each in commands(), and their
    // handlers (handle_locked: under mu_).
    struct Command;
    static std::span<const Command> commands();
    nlohmann::json handle_locked(const nlohmann::json &request, const Peer &peer);
    nlohmann::json cmd_attach(const nlohmann::json &r);
    nlohmann::json cmd_detach(const nlohmann::json &r);
    nlohmann::json cmd_policy_add(const nlohmann::json &r);
    nlohmann::json cmd_policy_set(const nlohmann::json &r);
    nlohmann::json cmd_policy_del(const nlohmann::json &r);
    nlohmann::json cmd_policy_list(const nlohmann::json &r);
    nlohmann::json cmd_policy_show(const nlohmann::json &r);
    nlohmann::json cmd_apply(const nlohmann::json &r);
    nlohmann::json cmd_stats(const nlohmann::json &r);
    nlohmann::json cmd_flows(const nlohmann::json &r);
    nlohmann::json cmd_status(const nlohmann::json &r);
    nlohmann::json commit_attachments(std::vector<AttachmentSpec> next, nlohmann::json reply);
    nlohmann::json fleet_status() const;

    DaemonOptions options_;
    std::unique_ptr<Datapath> dp_;
    std::vector<Entry> policies_;
    std::vector<AttachmentSpec> attachments_;
    std::vector<AttachmentSpec> patterns_; // attach --match-ifname (attachments.cpp)
    std::chrono::steady_clock::time_point interfaces_scanned_;
    std::set<std::string> interface_failures_; // "hook iface: error", each logged once
    // The attachments @patterns want on this namespace's interfaces now, made from @have: what a
    // pattern attached to an interface that is gone or renamed is dropped (its hook released), a
    // matching interface without its hook is attached. Returns whether anything changed, and
    // failures in @failed.
    bool expand_patterns(const std::vector<AttachmentSpec> &patterns,
                         std::vector<AttachmentSpec> &have, std::vector<std::string> &failed);
    nlohmann::json cmd_attach_pattern(AttachmentSpec a, bool attach);
    std::map<std::string, uint32_t> adopted_ids_; // names the pinned set already knew
    std::string metrics_address_;
    std::string page_address_; // --web: "" none
    std::string started_from_; // "config", "state" or "nothing"
    uint64_t reclaimed_total_ = 0;
    uint64_t moved_total_ = 0; // flows moved from a table of before by this daemon
    uint64_t grown_ = 0;       // times the flow table grew while this daemon ran
    uint64_t shrunk_ = 0;      // times it shrank (flows gone)
    mutable int journal_fd_ = -1;
    mutable off_t journal_before_ = 0; // its size before the last record
    mutable size_t journal_records_ = 0;
    mutable std::optional<uint64_t> state_hash_;  // of the state file's text, written or read
    mutable std::optional<uint64_t> staged_hash_; // of the text stage() wrote
    std::chrono::steady_clock::time_point last_change_;
    std::chrono::steady_clock::time_point cgroups_scanned_; // follow_cgroups
    std::string cgroups_error_;                             // its last failure, logged once
    // Requests come from the socket loop, scrapes from the exposer's thread.
    mutable std::mutex mu_;
    // Last: stopped before the data path it grants to.
    std::unique_ptr<fleet::Agent> fleet_;
    // The engines the config names (containers:), as of the start or the last reload.
    std::vector<std::string> config_containers_;
    // --max-flows as the command line's defaults made it, before the config's max_flows.
    uint32_t max_flows_default_ = 0;
    // Last of all: their threads call handle(), so they stop before anything it uses goes.
    std::vector<std::unique_ptr<ContainerWatcher>> watchers_;
};

} // namespace tricolor
