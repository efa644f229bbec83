// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_resize.cpp: the table of slots of before a resize (another --flows, or the table
// grown), while its flows move into the table: handed to the programs, moved from user space
// once their programs of before are gone, and dropped.
#include "datapath_impl.hpp"
#include "tricolor/bpf_load.hpp"
#include "tricolor/text.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>

namespace tricolor {
namespace {

// Spins for a lock word of the flow table: a packet holds one for a moment (a bounded run of a
// program). False if it stayed taken, or became @never (a flow moved: no one releases it).
bool take(uint32_t *word, uint32_t never = ~0u) {
    for (int spin = 0; spin < 10000; ++spin) {
        uint32_t free = 0;
        if (__atomic_compare_exchange_n(word, &free, 1u, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return true;
        if (free == never)
            return false;
        if (spin % 64 == 63)
            sched_yield();
    }
    return false;
}

// Copies the IPv6 5-tuples of the table of before's flows into tcm_flow_tuples (those a
// packet wrote there already stay).
void copy_tuples(int from, int to) {
    detail::for_each_entry<tcm_flow_id, tcm_flow_key>(
        from, 1, [&](const tcm_flow_id &k, const tcm_flow_key *t) {
            bpf_map_update_elem(to, &k, t, BPF_NOEXIST);
        });
}

} // namespace

void Datapath::Impl::open_table_of_before() {
    const std::string slots_pin = pin_of_before("tcm_flow_slots");
    prev_slots_fd = bpf_obj_get(slots_pin.c_str());
    if (prev_slots_fd < 0)
        throw std::runtime_error(fmt::format("cannot open the flow table of before {}: {}",
                                             slots_pin, errno_text(errno)));
    prev_tuples_fd = bpf_obj_get(pin_of_before("tcm_flow_tuples").c_str()); // none: no tuples
    if (int err = bpf_map__set_inner_map_fd(skel->maps.tcm_flow_slots_prev, prev_slots_fd); err < 0)
        throw std::runtime_error(
            fmt::format("cannot give the programs the flow table of before: {}", errno_text(err)));
}

void Datapath::Impl::hand_over_table_of_before() {
    const uint32_t zero = 0;
    if (bpf_map_update_elem(fd(skel->maps.tcm_flow_slots_prev), &zero, &prev_slots_fd, 0) != 0)
        throw std::runtime_error(fmt::format(
            "cannot give the programs the flow table of before: {}", errno_text(errno)));
    prev_slots =
        map_slots(prev_slots_fd, prev_layout->slots, prev_slots_bytes, "the flow table of before");
    if (prev_tuples_fd >= 0)
        copy_tuples(prev_tuples_fd, fd(skel->maps.tcm_flow_tuples));
}

// Puts the flow @id, moved out of a table of before with @state, into the table, under its home
// slot's guard (the caller's): in the first free slot of its probe sequence, or, if a packet made
// it there too, its counts joined to that one's. 1: done; -1: a lock held, or no room.
int Datapath::Impl::place_moved(const tcm_flow_id &id, const tcm_flow &state, uint32_t home) {
    const uint32_t n = meta->slots;
    int64_t found = -1, claimed = -1;
    uint32_t at = home;
    for (uint32_t i = 0; i < TCM_FLOW_PROBES; ++i, at = TCM_SLOT_NEXT(at, n)) {
        tcm_flow_slot *s = &slots[at];
        uint32_t h = __atomic_load_n(&s->id.head, __ATOMIC_ACQUIRE);
        if (h == id.head && std::memcmp(s->id.w, id.w, sizeof(id.w)) == 0) {
            found = at;
            break;
        }
        if (claimed < 0 && (h == TCM_SLOT_EMPTY || h == TCM_SLOT_FREE)) {
            uint32_t want = h;
            if (__atomic_compare_exchange_n(&s->id.head, &want, TCM_SLOT_CLAIMED, false,
                                            __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
                claimed = at;
        }
        if (h == TCM_SLOT_EMPTY)
            break;
    }
    int ret = -1;
    int64_t release = claimed;
    if (found >= 0) {
        // Made in the table too (a packet of a program of before made the flow again in its
        // table while the programs were swapped): one flow, the table's tokens, both counts.
        tcm_flow *f = &slots[found].flow;
        if (take(&f->lock)) {
            for (int c = 0; c < TCM_NR_COLORS; ++c) {
                f->counters.packets[c] += state.counters.packets[c];
                f->counters.bytes[c] += state.counters.bytes[c];
            }
            __atomic_store_n(&f->lock, 0u, __ATOMIC_SEQ_CST);
            ret = 1;
        }
    } else if (claimed >= 0) {
        // Beyond the capacity if need be (up to 9/10 of the slots): a flow of before is one the
        // table was sized for, and new flows may have filled it meanwhile (a growth sizes it for
        // those it expects). Refused, the move would wait for room that only the next growth
        // makes, and no growth starts while a table of before has flows left; over its capacity,
        // the table grows once they have all moved.
        const uint64_t most = uint64_t{meta->slots} * 9 / 10;
        if (__atomic_fetch_add(&meta->live, 1, __ATOMIC_SEQ_CST) >= most) {
            __atomic_fetch_sub(&meta->live, 1, __ATOMIC_SEQ_CST);
        } else {
            tcm_flow_slot *s = &slots[claimed];
            s->flow = state;
            s->flow.lock = 1; // ours until the slot is published
            std::memcpy(s->id.w, id.w, sizeof(id.w));
            __atomic_store_n(&s->id.head, id.head, __ATOMIC_SEQ_CST);
            __atomic_store_n(&s->flow.lock, 0u, __ATOMIC_SEQ_CST);
            release = -1;
            ret = 1;
        }
    }
    // A slot claimed but not used is freed, never emptied (as flow_slot_create does).
    if (release >= 0)
        __atomic_store_n(&slots[release].id.head, TCM_SLOT_FREE, __ATOMIC_SEQ_CST);
    return ret;
}

// As a packet's flow_slot_create and flow_move_old (bpf/lib/flow.h), by the same protocol, so
// that both may run at once: the flow of before under its lock (then no packet moves or meters
// it), its new home under the guard (then no packet creates it there meanwhile), the first free
// slot of the probe sequence claimed with a cmpxchg, the state copied with its lock held, the
// slot published, the flow of before marked moved.
int Datapath::Impl::move_slot_of_before(uint32_t idx) {
    tcm_flow_slot *ps = &prev_slots[idx];
    const uint32_t head = __atomic_load_n(&ps->id.head, __ATOMIC_ACQUIRE);
    if (!TCM_SLOT_LIVE(head))
        return 0;
    if (!take(&ps->flow.lock, TCM_FLOW_MOVED))
        return __atomic_load_n(&ps->flow.lock, __ATOMIC_ACQUIRE) == TCM_FLOW_MOVED ? 0 : -1;
    auto release_before = [&](uint32_t to) {
        __atomic_store_n(&ps->flow.lock, to, __ATOMIC_SEQ_CST);
    };
    tcm_flow_id id;
    std::memcpy(&id, &ps->id, sizeof(id));
    if (__atomic_load_n(&ps->id.head, __ATOMIC_ACQUIRE) != head || id.head != head) {
        release_before(0); // deleted meanwhile (a reclaim)
        return 0;
    }
    const uint32_t home = detail::slot_home(id, *meta);
    if (!take(&slots[home].guard)) {
        release_before(0);
        return -1;
    }
    const int ret = place_moved(id, ps->flow, home);
    __atomic_store_n(&slots[home].guard, 0u, __ATOMIC_SEQ_CST);
    release_before(ret == 1 ? TCM_FLOW_MOVED : 0);
    if (ret == 1 && TCM_FLOW_KIND(id.head) == TCM_FLOW_5TUPLE6 && prev_tuples_fd >= 0) {
        tcm_flow_key t{};
        if (bpf_map_lookup_elem(prev_tuples_fd, &id, &t) == 0)
            bpf_map_update_elem(fd(skel->maps.tcm_flow_tuples), &id, &t, BPF_NOEXIST);
    }
    return ret;
}

void Datapath::Impl::drop_table_of_before() {
    const uint32_t zero = 0;
    bpf_map_delete_elem(fd(skel->maps.tcm_flow_slots_prev), &zero);
    if (prev_tuples_fd >= 0)
        copy_tuples(prev_tuples_fd, fd(skel->maps.tcm_flow_tuples));
    munmap(prev_slots, prev_slots_bytes);
    prev_slots = nullptr;
    for (int *f : {&prev_slots_fd, &prev_tuples_fd}) {
        if (*f >= 0)
            close(*f);
        *f = -1;
    }
    for (const char *name : kFlowTablePins)
        unlink(pin_of_before(name).c_str());
    prev_layout.reset();
    flows_moving &= ~TCM_MOVING_SLOTS;
}

// The flows of tcm_flows_prev (a growth's table: open_spill) that no packet has moved yet, once
// no program of before runs and an RCU grace period has passed: then only a packet of this data
// path's touches that map, to move a flow under its home slot's guard, which this holds too.
void Datapath::Impl::move_hash_of_before(MoveResult &r) {
    syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
    const int prev = fd(skel->maps.tcm_flows_prev);
    std::vector<tcm_flow_id> keys;
    detail::for_each_entry<tcm_flow_id, tcm_flow>(
        prev, 1, [&](const tcm_flow_id &k, const tcm_flow *) { keys.push_back(k); });
    size_t left = 0;
    for (const auto &id : keys) {
        const uint32_t home = detail::slot_home(id, *meta);
        if (!take(&slots[home].guard)) {
            ++left;
            continue;
        }
        tcm_flow state{};
        int got = 0;
        if (bpf_map_lookup_elem(prev, &id, &state) == 0 && state.lock != TCM_FLOW_MOVED)
            got = state.lock ? -1 : place_moved(id, state, home);
        if (got == 1 || (got == 0 && state.lock == TCM_FLOW_MOVED))
            bpf_map_delete_elem(prev, &id);
        __atomic_store_n(&slots[home].guard, 0u, __ATOMIC_SEQ_CST);
        r.moved += got == 1;
        left += got < 0;
    }
    r.left += left;
    if (left == 0) {
        unlink((pin_path + "/tcm_flows_prev").c_str());
        flows_moving &= ~TCM_MOVING_PREV;
    }
}

Datapath::MoveResult Datapath::move_flows_of_before() {
    auto &im = *impl_;
    MoveResult r;
    if ((im.flows_moving & TCM_MOVING_PREV) && !holds_previous_programs() && im.slots)
        im.move_hash_of_before(r);
    if (!im.prev_slots)
        return r;
    for (uint32_t i = 0; i < im.prev_layout->slots; ++i) {
        int got = im.move_slot_of_before(i);
        r.moved += got > 0;
        r.left += got < 0;
    }
    // Dropped once no flow is left and no program of before can still make one there (a
    // program that names the table itself, not through tcm_flow_slots_prev's entry).
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (r.left == 0 && bpf_obj_get_info_by_fd(im.prev_slots_fd, &info, &len) == 0 &&
        programs_using(info.id) == 0) {
        im.drop_table_of_before();
        r.dropped = true;
    }
    return r;
}

bool Datapath::moving_flows_of_before() const {
    return impl_->prev_slots != nullptr;
}

bool Datapath::open_spill(uint32_t capacity) {
    auto &im = *impl_;
    const std::string pin = im.pin_path + "/" + kSpillPin;
    if (im.pin_path.empty() || im.spill_fd >= 0 || im.flows_moving || im.prev_slots ||
        access(pin.c_str(), F_OK) == 0)
        return false;
    LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_NO_PREALLOC);
    // Named as the map that reuses it next: libbpf renames a map it reuses after the kernel's
    // name, and the cgroup ingress program finds the data path's maps by theirs.
    int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "tcm_flows_prev", sizeof(tcm_flow_id),
                            sizeof(tcm_flow), capacity, &opts);
    if (fd < 0)
        throw std::runtime_error(fmt::format("cannot make a table of {} flows for the growth: {}",
                                             capacity, errno_text(errno)));
    // Pinned first: a daemon killed from here on leaves it where the next start finds it.
    uint32_t zero = 0;
    if (bpf_obj_pin(fd, pin.c_str()) != 0 ||
        bpf_map_update_elem(im.fd(im.skel->maps.tcm_flow_spill), &zero, &fd, 0) != 0) {
        int e = errno;
        unlink(pin.c_str());
        close(fd);
        throw std::runtime_error(
            fmt::format("cannot hand the growth's table to the programs: {}", errno_text(e)));
    }
    im.spill_fd = fd;
    return true;
}

// The flows of the table of before that found no room in the table (new flows filled it before
// they moved: a growth sizes it for the rate it saw; then a flow whose 128 probes are all taken
// waits for a growth, which does not start while the table of before has flows): into a table
// of the growth's own, made now as open_spill makes it, with @room beyond them. Each flow under
// its lock from the copy until it is marked moved (a packet meanwhile meets the lock: its
// policy's bucket, counted), and the table handed to the programs before the marks: a packet
// after it finds its flow there (flow_spill_get), whole. The table of before is then empty of
// flows and goes at the next move; the growth takes this one as its table of before.
size_t Datapath::spill_flows_of_before(uint32_t room) {
    auto &im = *impl_;
    const std::string pin = im.pin_path + "/" + kSpillPin;
    if (im.pin_path.empty() || im.spill_fd >= 0 || !im.prev_slots ||
        (im.flows_moving & ~TCM_MOVING_SLOTS) || access(pin.c_str(), F_OK) == 0)
        return 0;
    std::vector<uint32_t> held;
    auto release = [&](uint32_t to) {
        for (uint32_t i : held)
            __atomic_store_n(&im.prev_slots[i].flow.lock, to, __ATOMIC_SEQ_CST);
    };
    for (uint32_t i = 0; i < im.prev_layout->slots; ++i) {
        tcm_flow_slot *ps = &im.prev_slots[i];
        const uint32_t head = __atomic_load_n(&ps->id.head, __ATOMIC_ACQUIRE);
        if (!TCM_SLOT_LIVE(head) || !take(&ps->flow.lock, TCM_FLOW_MOVED))
            continue;
        if (__atomic_load_n(&ps->id.head, __ATOMIC_ACQUIRE) != head) {
            __atomic_store_n(&ps->flow.lock, 0u, __ATOMIC_SEQ_CST);
            continue;
        }
        held.push_back(i);
    }
    if (held.empty())
        return 0;
    try {
        LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_NO_PREALLOC);
        int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "tcm_flows_prev", sizeof(tcm_flow_id),
                                sizeof(tcm_flow), static_cast<uint32_t>(held.size()) + room, &opts);
        if (fd < 0)
            throw std::runtime_error(fmt::format("cannot make a table for {} flows left: {}",
                                                 held.size(), errno_text(errno)));
        auto fail = [&](const std::string &what) {
            int e = errno;
            unlink(pin.c_str());
            close(fd);
            throw std::runtime_error(fmt::format("{}: {}", what, errno_text(e)));
        };
        for (uint32_t i : held) {
            tcm_flow_id id;
            std::memcpy(&id, &im.prev_slots[i].id, sizeof(id));
            tcm_flow state = im.prev_slots[i].flow;
            state.lock = 0;
            if (bpf_map_update_elem(fd, &id, &state, BPF_NOEXIST) != 0)
                fail("cannot put a flow left into its table");
        }
        const uint32_t zero = 0;
        if (bpf_obj_pin(fd, pin.c_str()) != 0)
            fail("cannot pin the table of the flows left");
        if (bpf_map_update_elem(im.fd(im.skel->maps.tcm_flow_spill), &zero, &fd, 0) != 0)
            fail("cannot hand the table of the flows left to the programs");
        im.spill_fd = fd;
    } catch (...) {
        release(0);
        throw;
    }
    release(TCM_FLOW_MOVED);
    return held.size();
}

size_t Datapath::spilled_flows() const {
    if (impl_->spill_fd < 0)
        return 0;
    size_t n = 0;
    tcm_flow_id k{}, next{};
    const void *at = nullptr;
    while (bpf_map_get_next_key(impl_->spill_fd, at, &next) == 0) {
        ++n;
        k = next;
        at = &k;
    }
    return n;
}

// Entries of tcm_flows_prev the programs moved into the slots stay there, marked, while programs
// of before may still run (flow_move_old in bpf/lib/flow.h); those marked at the last flow pass
// too (seconds ago: no program of before runs) go now, their memory back.
void Datapath::Impl::delete_moved_prev() {
    if (!skel->rodata->tcm_flows_moving || !(skel->rodata->tcm_flows_moving & TCM_MOVING_PREV))
        return;
    const int prev = fd(skel->maps.tcm_flows_prev);
    std::vector<tcm_flow_id> now;
    detail::for_each_entry<tcm_flow_id, tcm_flow>(prev, 1,
                                                  [&](const tcm_flow_id &k, const tcm_flow *v) {
                                                      if (v->lock == TCM_FLOW_MOVED)
                                                          now.push_back(k);
                                                  });
    detail::sort_unique(now);
    std::vector<tcm_flow_id> kept;
    for (const auto &k : now)
        if (std::ranges::binary_search(moved_prev, k, [](const auto &a, const auto &b) {
                return std::memcmp(&a, &b, sizeof(a)) < 0;
            }))
            bpf_map_delete_elem(prev, &k);
        else
            kept.push_back(k);
    moved_prev = std::move(kept);
}

} // namespace tricolor
