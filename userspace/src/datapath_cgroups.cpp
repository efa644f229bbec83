// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_cgroups.cpp: the cgroup rules (--match cgroup, docs/spec.md §11): each set's,
// written whole with the set, and written again when the cgroup tree changes under them.
#include "datapath_impl.hpp"
#include "tricolor/text.hpp"
#include "tricolor/bpf_load.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tricolor {

namespace {

bool same_rules(const CgroupRules &a, const CgroupRules &b) {
    return std::ranges::equal(a, b, [](const auto &x, const auto &y) {
        return x.first == y.first && std::memcmp(&x.second, &y.second, sizeof(x.second)) == 0;
    });
}

} // namespace

Result<CgroupRules> Datapath::Impl::cgroup_rules_of_model() {
    CgroupRules out;
    if (sets->cgroup_policies() == 0) {
        cgroup_tree.clear();
        cgroup_paths.clear();
        return out;
    }
    if (cgroup_mount.empty()) {
        auto m = cgroup2_mount();
        if (!m)
            return std::unexpected(fmt::format("--match cgroup: {}", m.error()));
        cgroup_mount = *m;
    }
    if (!cgroup_tree_fresh) {
        cgroup_tree = scan_cgroups(cgroup_mount);
        cgroup_paths.clear();
        for (const auto &c : cgroup_tree)
            cgroup_paths[c.id] = c.path;
    }
    cgroup_tree_fresh = false;
    auto ranked = sets->ranked();
    // In rank order: a cgroup two patterns cover goes to the better-ranked policy, as a packet
    // two address rules match does.
    for (const auto &[p, rank] : ranked) {
        if (!p->match.cgroup || p->only_parent)
            continue;
        for (const auto &hit : match_cgroups(*p->match.cgroup, cgroup_tree))
            out.try_emplace({p->direction, hit.cgroup}, tcm_cgroup_rule{p->id, rank, hit.bucket});
    }
    if (out.size() > TCM_MAX_CGROUP_RULES / TCM_NR_SETS)
        return std::unexpected(fmt::format("the cgroup matches cover {} cgroups; at most {}",
                                           out.size(), TCM_MAX_CGROUP_RULES / TCM_NR_SETS));
    return out;
}

Result<void> Datapath::Impl::write_cgroup_rules(uint32_t set, const CgroupRules &rules) {
    int rules_fd = fd(skel->maps.tcm_cgroup_rules);
    auto &have = cgroup_rules[set];
    // Entries are deleted and rewritten in place here, unlike the address rules: a set that was
    // active until a moment ago (two changes back to back) may still be read by a packet that
    // began before the switch. The programs run under RCU: wait for them.
    if ((!cgroup_rules_known[set] || !same_rules(have, rules)) &&
        std::chrono::steady_clock::now() - switched_at < std::chrono::milliseconds(10))
        syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
    if (!cgroup_rules_known[set]) {
        // Adopted pins: whatever the set held before.
        tcm_cgroup_rule_key k{}, nk{};
        void *prev = nullptr;
        std::vector<tcm_cgroup_rule_key> gone;
        while (bpf_map_get_next_key(rules_fd, prev, &nk) == 0) {
            if (nk.set == set)
                gone.push_back(nk);
            k = nk;
            prev = &k;
        }
        for (const auto &g : gone) {
            bpf_map_delete_elem(rules_fd, &g);
            if (cgroup_rules_of_before >= 0)
                bpf_map_delete_elem(cgroup_rules_of_before, &g);
        }
        have.clear();
        cgroup_rules_known[set] = true;
    }
    for (auto it = have.begin(); it != have.end();) {
        if (rules.contains(it->first)) {
            ++it;
            continue;
        }
        tcm_cgroup_rule_key k{set, it->first.first, it->first.second};
        bpf_map_delete_elem(rules_fd, &k);
        if (cgroup_rules_of_before >= 0)
            bpf_map_delete_elem(cgroup_rules_of_before, &k);
        it = have.erase(it);
    }
    for (const auto &[at, rule] : rules) {
        auto it = have.find(at);
        if (it != have.end() && std::memcmp(&it->second, &rule, sizeof(rule)) == 0)
            continue;
        tcm_cgroup_rule_key k{set, at.first, at.second};
        // The programs of before read the map of before (the write that counts is to the
        // map this data path's programs read).
        if (cgroup_rules_of_before >= 0)
            bpf_map_update_elem(cgroup_rules_of_before, &k, &rule, 0);
        if (bpf_map_update_elem(rules_fd, &k, &rule, 0) != 0) {
            cgroup_rules_known[set] = false;
            return std::unexpected(
                fmt::format("cannot write a cgroup rule: {}", std::strerror(errno)));
        }
        have[at] = rule;
    }
    for (uint32_t dir = 0; dir < TCM_CGROUP_NR_DIRS; ++dir) {
        uint32_t n = static_cast<uint32_t>(std::ranges::count_if(
                     have, [&](const auto &e) { return e.first.first == dir; })),
                 at = set * TCM_CGROUP_NR_DIRS + dir;
        if (bpf_map_update_elem(fd(skel->maps.tcm_cgroup_sets), &at, &n, 0) != 0) {
            cgroup_rules_known[set] = false;
            return std::unexpected(
                fmt::format("cannot write the cgroup rule count: {}", std::strerror(errno)));
        }
    }
    return {};
}

Result<bool> Datapath::follow_cgroups() {
    bool any = std::ranges::any_of(impl_->active,
                                   [](const auto &e) { return e.second.match.cgroup.has_value(); });
    if (!any)
        return false;
    auto rules = impl_->cgroup_rules_of_model();
    if (!rules)
        return std::unexpected(rules.error());
    uint32_t active = impl_->runtime->active_set & 1;
    if (impl_->in_sync && impl_->cgroup_rules_known[active] &&
        same_rules(*rules, impl_->cgroup_rules[active]))
        return false;
    // The commit's own scan would be this one again. (Out of sync after a refused change: the
    // commit rebuilds from the active policies.)
    impl_->cgroup_tree_fresh = true;
    if (auto r = commit(SetChange{}, nullptr); !r)
        return std::unexpected(r.error());
    return true;
}

// Loaded apart from the data path's object, and only when needed: every load of that object
// verifies each of its programs (bpf/cgroup_in.bpf.c says why).
int Datapath::cgroup_in_prog_fd() {
    auto &im = *impl_;
    if (im.cgin)
        return bpf_program__fd(im.cgin->progs.tricolor_cgroup_in);
    tricolor_cgin *s = tricolor_cgin::open();
    if (!s)
        throw std::runtime_error(
            fmt::format("cannot open the cgroup ingress program: {}", std::strerror(errno)));
    bpf_map *m;
    bpf_object__for_each_map(m, s->obj) {
        if (bpf_map__is_internal(m))
            continue; // its own globals: the test clock below
        // The name kept apart: a reuse that fails may leave the map without one.
        const std::string name = bpf_map__name(m);
        bpf_map *same = bpf_object__find_map_by_name(im.skel->obj, name.c_str());
        int err = same ? bpf_map__reuse_fd(m, bpf_map__fd(same)) : -ENOENT;
        if (err != 0) {
            tricolor_cgin::destroy(s);
            throw std::runtime_error(
                fmt::format("the cgroup ingress program's map {} is not the data path's: {}", name,
                            errno_text(err)));
        }
    }
    s->rodata->tcm_test_clock = im.testing ? 1 : 0;
    detail::set_flow_layout(s->rodata, *im.meta, im.flows_moving, im.prev_layout);
    detail::set_table_sizes(s->rodata, im.tables);
    s->rodata->tcm_class_cache_slots = bpf_map__max_entries(im.skel->maps.tcm_class_cache);
    if (auto loaded =
            load_bpf("the cgroup ingress program", [&] { return tricolor_cgin::load(s); });
        !loaded) {
        tricolor_cgin::destroy(s);
        throw std::runtime_error(loaded.error());
    }
    im.cgin = s;
    if (im.testing)
        im.cgin->bss->tcm_test_clock_ns = im.skel->bss->tcm_test_clock_ns;
    // One of this data path's writers of the flow table: it notes heavy hitters at the same
    // threshold (begin_flow_pass sets both), so flows --top need not walk because of it.
    __atomic_store_n(&im.cgin->data->tcm_hot_threshold,
                     __atomic_load_n(&im.skel->data->tcm_hot_threshold, __ATOMIC_SEQ_CST),
                     __ATOMIC_SEQ_CST);
    int fd = bpf_program__fd(s->progs.tricolor_cgroup_in);
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0)
        im.own_progs.push_back(info.id);
    return fd;
}

std::string Datapath::cgroup_path(uint64_t id) const {
    auto it = impl_->cgroup_paths.find(id);
    return it == impl_->cgroup_paths.end() ? std::string() : it->second;
}

std::vector<Datapath::CgroupBucket> Datapath::cgroup_buckets(uint32_t policy_id) const {
    std::vector<CgroupBucket> out;
    auto it = impl_->active.find(policy_id);
    if (it == impl_->active.end() || !it->second.match.cgroup)
        return out;
    std::set<uint64_t> named;
    for (const auto &hit : match_cgroups(*it->second.match.cgroup, impl_->cgroup_tree))
        named.insert(hit.bucket);
    for (uint64_t id : named) {
        CgroupBucket b{cgroup_path(id), id, {}};
        if (it->second.per == TCM_PER_CGROUP) {
            // The key flow_id_fill makes (bpf/lib/flow.h): the bucket id in w[0..1].
            tcm_flow_id k{};
            k.head = TCM_FLOW_HEAD(policy_id, TCM_FLOW_CGROUP);
            k.w[0] = static_cast<uint32_t>(id);
            k.w[1] = static_cast<uint32_t>(id >> 32);
            tcm_flow f{};
            if (impl_->read_flow(k, f) >= 0) {
                b.counters = f.counters;
            } else if (int64_t at = impl_->find_slot_of_before(k);
                       at >= 0 && impl_->read_slot_of_before(static_cast<uint32_t>(at), k, f)) {
                b.counters = f.counters; // in the table of before a resize, not moved yet
            } else if ((impl_->flows_moving & TCM_MOVING_PREV) &&
                       bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_flows_prev), &k, &f) ==
                           0 &&
                       f.lock != TCM_FLOW_MOVED) {
                b.counters = f.counters; // in the flow table of before, not moved yet
            } else if (impl_->flows_moving & TCM_MOVING_OLD) {
                tcm_flow_key whole{}; // its key in the flow table of before that, not moved yet
                whole.policy_id = policy_id;
                whole.src[0] = k.w[0];
                whole.src[1] = k.w[1];
                if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_flows_old), &whole, &f) ==
                        0 &&
                    f.lock != TCM_FLOW_MOVED)
                    b.counters = f.counters;
            }
        }
        out.push_back(std::move(b));
    }
    return out;
}

} // namespace tricolor
