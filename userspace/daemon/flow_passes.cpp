// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// flow_passes.cpp: the periodic pass over the flow table (main.cpp runs it on a thread of its
// own): it reclaims idle flows, counts the rest for the metrics and status, and keeps flows
// --top's heavy hitters.
#include "daemon.hpp"
#include "daemon_internal.hpp"
#include "tricolor/flow_sizing.hpp"

#include <chrono>
#include <iostream>

#include <linux/membarrier.h>
#include <malloc.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tricolor {
using namespace daemon_internal;

namespace {
// The most flows a table of a growth's own holds (Datapath::open_spill) beyond those it takes
// from a table of before: a hash map's bucket array (16 bytes a possible entry) is made whole and
// stays with the programs until the next growth. 131072 are the new flows of 1.3 s at 10^5/s; a
// load takes about one.
constexpr uint32_t kSpillFlows = 131072;
} // namespace

size_t Daemon::reclaim_idle_flows() {
    return flow_pass(true);
}

void Daemon::count_flows() {
    flow_pass(false);
}

Datapath::MoveResult Daemon::move_flows_of_before(bool at_start) {
    if (!dp_->moving_flows_of_before())
        return {};
    auto r = dp_->move_flows_of_before();
    moved_total_ += r.moved;
    if (at_start)
        startup_notes.push_back(
            fmt::format("the flow table holds {} flows now, not as many as its table of before: "
                        "{} flows moved into it with their tokens and counters{}",
                        dp_->flow_capacity(), r.moved,
                        r.dropped ? ", the table of before dropped"
                                  : fmt::format(", {} left for the next passes", r.left)));
    return r;
}

// The lock is held only to begin and end the pass and for each chunk of deletions, not for the
// walk (0.5 s at 2^20 flows): requests, flows --top among them, and scrapes go on meanwhile.
// walk_mu_ is, for the whole pass: the table is not grown under it.
size_t Daemon::flow_pass(bool reclaim) {
    std::lock_guard walking(walk_mu_);
    FlowPass pass;
    {
        std::lock_guard lock(mu_);
        move_flows_of_before(false);
        // Under pressure (90% full, and as big as it may grow) the idle timeout does not hold
        // a full flow back.
        const uint32_t capacity = dp_->flow_capacity();
        pass = dp_->begin_flow_pass(
            reclaim, static_cast<uint64_t>(options_.flow_idle_timeout * 1e9),
            capacity >= options_.max_flows ? static_cast<size_t>(capacity) / 10 * 9 : 0);
    }
    dp_->walk_flow_pass(pass); // reads the flow table only
    for (bool more = true; more;) {
        std::lock_guard lock(mu_);
        more = dp_->reclaim_some(pass, 4096);
    }
    {
        std::lock_guard lock(mu_);
        dp_->end_flow_pass(pass);
        reclaimed_total_ += pass.reclaimed;
        // The quotas' UTC follows a step of the wall clock within a pass.
        dp_->sync_wall_clock();
    }
    // Walks of the warm-up and quota states (up to a state a flow, and a period's quiet
    // sources), outside the lock as the flow table's walk: the state of flows gone goes with
    // them unless it holds a use of this period; the uses are saved for a reboot.
    if (reclaim)
        dp_->reclaim_ext_states();
    save_quota_uses();
    return pass.reclaimed;
}

bool Daemon::grow_flow_table_if_needed() {
    using namespace std::chrono_literals;
    std::lock_guard walking(walk_mu_);
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    // The table of before of the last growth goes first, once its programs of before are freed
    // (moments after it): tried each second, not at each look, for a try walks that table whole.
    if (dp_->moving_flows_of_before()) {
        if (now - moved_at_ < 1s)
            return false;
        moved_at_ = now;
        const auto r = move_flows_of_before(false);
        // Flows left three tries running while the table needs to grow: new flows filled it
        // before they moved, and no growth starts while they wait for room that only a growth
        // makes. They go into a table of the growth's own, and the growth starts.
        stuck_moves_ = r.left > 0 ? stuck_moves_ + 1 : 0;
        if (dp_->moving_flows_of_before() && stuck_moves_ >= 3 &&
            flow_table_grows(dp_->flow_capacity(), dp_->live_flows())) {
            try {
                const size_t n = dp_->spill_flows_of_before(kSpillFlows);
                std::cerr << "tricolord: " << n
                          << " flows of the table of before found no room in the table: moved "
                             "into a table of the growth's own"
                          << std::endl;
                move_flows_of_before(false);
            } catch (const std::exception &e) {
                std::cerr << "tricolord: " << e.what() << std::endl;
            }
        }
        if (dp_->moving_flows_of_before())
            return false;
        stuck_moves_ = 0;
    }
    const uint32_t capacity = dp_->flow_capacity();
    const uint64_t live = dp_->live_flows();
    // New flows a second: over the last tenth of a second or more, or since its start, for a
    // burst that began after it.
    const double since_mark = std::chrono::duration<double>(now - rate_mark_at_).count();
    const double recent = now - rate_mark_at_ >= 10ms && live > rate_mark_live_
                              ? static_cast<double>(live - rate_mark_live_) / since_mark
                              : 0;
    const double rate = std::max(rate_, recent);
    if (now - rate_mark_at_ >= 100ms) {
        rate_ = recent;
        rate_mark_at_ = now;
        rate_mark_live_ = live;
    }
    if (grow_failed_at_ && now - *grow_failed_at_ < 10s)
        return false;
    const uint32_t least = flow_least_capacity(options_.flow_capacity, options_.max_flows);
    uint32_t next = capacity;
    if (capacity < options_.max_flows && flow_table_grows(capacity, live)) {
        // Sized for what it holds and what will come while the programs load (twice the last
        // load, a second at least, at the rate of late): 70% of its slots then.
        const double coming = rate * std::max(1.0, 2 * resize_seconds_);
        next = flow_capacity_for(capacity, live + static_cast<uint64_t>(coming), least,
                                 options_.max_flows);
    } else if (now - resized_at_ >= 30s && rate == 0) {
        // Flows gone (reclaimed): a table whose slots are under two thirds full gives the rest
        // back, half a minute after any resize and while no flows come.
        next = flow_capacity_shrunk(capacity, live, least);
    }
    if (next == capacity) {
        shrink_policy_tables_if_unused(now);
        return false;
    }
    if (next > capacity) {
        // New flows that come faster than the load takes go into a table of the growth's own,
        // made now, rather than into their policy's bucket (a table of before still moving: not
        // yet). It holds what the grown table has room for beyond this one's, up to
        // kSpillFlows.
        try {
            dp_->open_spill(std::min(next - capacity, kSpillFlows));
        } catch (const std::exception &e) {
            std::cerr << "tricolord: " << e.what() << std::endl;
        }
    }
    grow_flow_table(next);
    if (dp_->flow_capacity() == capacity) {
        grow_failed_at_ = now;
    } else {
        grow_failed_at_.reset();
        resized_at_ = std::chrono::steady_clock::now();
        resize_seconds_ = std::chrono::duration<double>(resized_at_ - now).count();
    }
    return !grow_failed_at_;
}

// As a restart with another capacity does, within this process: the programs loaded again on the
// same pins (the table of before set aside), put on every hook over the ones of before (each an
// atomic replace: no packet passes unmetered), the policies applied to them as they are, the
// programs of before let go and their table's flows moved. The fleet agent writes no lease
// meanwhile. A load that fails changes nothing (logged; tried again 10 s on).
void Daemon::grow_flow_table(uint32_t capacity) {
    auto log = [](const std::string &line) { std::cerr << "tricolord: " << line << std::endl; };
    std::unique_lock<std::mutex> hold;
    if (fleet_)
        hold = fleet_->hold();
    const uint32_t before = dp_->flow_capacity();
    const auto t0 = std::chrono::steady_clock::now();
    auto ms = [&] {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
            .count();
    };
    double loaded_ms = 0;
    try {
        dp_->grow(capacity);
        loaded_ms = ms();
    } catch (const std::exception &e) {
        log(fmt::format("cannot {} the flow table from {} to {} flows: {}",
                        capacity > before ? "grow" : "shrink", before, capacity, e.what()));
        return;
    }
    std::vector<std::string> problems;
    if (auto prep = prepare(specs(), nullptr); !prep)
        problems.push_back(prep.error());
    else if (auto r = dp_->apply(prep->policies); !r)
        problems.push_back(r.error());
    reattach_everything(problems);
    ++(capacity > before ? grown_ : shrunk_);
    moved_at_ = std::chrono::steady_clock::now();
    const auto moved = move_flows_of_before(false);
    log(fmt::format("the flow table {} from {} to {} flows (at most {}; {} live) in {:.0f} ms (the "
                    "programs loaded in {:.0f}): {} flows moved with their tokens and counters{}{}",
                    capacity > before ? "grew" : "shrank", before, capacity, options_.max_flows,
                    dp_->live_flows(), ms(), loaded_ms, moved.moved,
                    moved.dropped ? "" : ", the rest at the next passes",
                    problems.empty() ? "" : fmt::format("; {}", fmt::join(problems, "; "))));
}

void Daemon::reattach_everything(std::vector<std::string> &problems) {
    for (auto &a : attachments_)
        if (interface_index(a.iface))
            if (auto r = do_attach(a); !r)
                problems.push_back(fmt::format("{}: {}", hook_text(a), r.error()));
    swap_root_cgroup_programs(problems);
    dp_->set_shape_ifaces(egress_ifindexes(attachments_));
    dp_->set_drop_malformed(options_.drop_malformed);
    release_previous_programs();
    dp_->retire_previous();
}

Result<void> Daemon::make_room(const TableSizes &need) {
    if (need == dp_->table_sizes())
        return {};
    if (tables_grow_now_)
        return resize_tables(need);
    room_wanted_ = need;
    return std::unexpected(std::string("the policy tables must grow first"));
}

// As a flow table growth, without the policies applied in between: the new programs read the
// tables carried over, and the change that needed the room is made once no packet can read
// the tables of before (their set halves are not written again). A shrink is the same with
// smaller tables, the other set written whole by the set applied again. The fleet agent writes
// no lease meanwhile; walk_mu_ and mu_ are the caller's.
Result<void> Daemon::resize_tables(const TableSizes &sizes) {
    auto log = [](const std::string &line) { std::cerr << "tricolord: " << line << std::endl; };
    std::unique_lock<std::mutex> hold;
    if (fleet_)
        hold = fleet_->hold();
    const TableSizes before = dp_->table_sizes();
    const bool grows = sizes.policy_slots > before.policy_slots ||
                       sizes.rule_slots > before.rule_slots || sizes.ext_states > before.ext_states;
    const auto t0 = std::chrono::steady_clock::now();
    tables_resized_at_ = t0;
    try {
        dp_->resize_tables(sizes);
    } catch (const std::exception &e) {
        return std::unexpected(fmt::format(
            "cannot {} the policy tables to {} policies and {} classifier entries: {}",
            grows ? "grow" : "shrink", sizes.policy_slots, sizes.rule_slots / 2, e.what()));
    }
    std::vector<std::string> problems;
    reattach_everything(problems);
    // The programs of before may still be running on a packet: wait for them (an RCU grace
    // period) before the change writes the set they would read next.
    syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
    // The new data path adopted the tables' contents, not the model of them (its policies are
    // ids and names): the set as it is, applied again, so that a change of one policy (which
    // writes what differs from the model) finds every other one whole. No program of before
    // reads a set any more.
    if (auto prep = prepare(specs(), nullptr); !prep)
        problems.push_back(prep.error());
    else if (auto r = dp_->apply(prep->policies); !r)
        problems.push_back(r.error());
    ++(grows ? tables_grown_ : tables_shrunk_);
    // The model of the policies gone was freed long ago, into malloc's free lists: given back
    // to the kernel with the tables (175 MiB resident after 16384 policies, else).
    if (!grows)
        malloc_trim(0);
    const char *ext = sizes.ext_states == before.ext_states ? ""
                      : sizes.ext_states                    ? ", the warm-up and quota states made"
                                         : ", the warm-up and quota states dropped";
    log(fmt::format(
        "the policy tables {} from {} to {} policies and from {} to {} classifier entries{} in "
        "{:.0f} ms{}",
        grows ? "grew" : "shrank", before.policy_slots, sizes.policy_slots, before.rule_slots / 2,
        sizes.rule_slots / 2, ext,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
        problems.empty() ? "" : fmt::format("; {}", fmt::join(problems, "; "))));
    return {};
}

void Daemon::shrink_policy_tables_if_unused(std::chrono::steady_clock::time_point now) {
    using namespace std::chrono_literals;
    // A look a second: the set's highest id and rules are a walk of its policies.
    if ((tables_resized_at_ && now - *tables_resized_at_ < 30s) || now - tables_looked_at_ < 1s)
        return;
    tables_looked_at_ = now;
    // Not while a resize's aftermath is under way: programs of before on a hook, their counter
    // arrays not yet carried, a flow table of before, a change waiting for room.
    if (room_wanted_ || dp_->holds_previous_programs() || dp_->holds_counters_of_before() ||
        dp_->moving_flows_of_before())
        return;
    const TableSizes want = dp_->tables_for_shrink();
    if (want == dp_->table_sizes())
        return;
    if (auto r = resize_tables(want); !r)
        std::cerr << "tricolord: " << r.error() << " (tried again in 30 s)" << std::endl;
}

} // namespace tricolor
