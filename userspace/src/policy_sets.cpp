// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_sets.cpp: the model of the policy set and what each of the two sets' maps holds
// (policy_sets.hpp). Over 700 lines on purpose: the ranks the model hands out and the entries
// the set writer derives from them keep one invariant (a packet classifies as the rank order
// says, at every step of a change), and it reads best in one file.
#include "tricolor/policy_sets.hpp"
#include "tricolor/hierarchy.hpp"
#include "tricolor/meter.hpp"
#include "tricolor/text.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>

#include <bpf/bpf.h>
#include <fmt/format.h>

namespace tricolor {

namespace {

// Rank order: priority, then the longer prefix, then the name (a total order: names are unique).
using RankKey = std::tuple<uint32_t, int, std::string>;
RankKey rank_key(const Policy &p) {
    return {p.priority, -static_cast<int>(specificity(p.match)), p.name};
}

// The data path's "nothing found": no policy has this rank.
constexpr int64_t kNoRank = 0xffffffffll;
// The room left after the last policy (or before the first): adding policies in rank order,
// as a script does, then takes 2^16 of them before the ranks are laid out afresh.
constexpr int64_t kRankStep = 1 << 16;

struct RuleId {
    tcm_class_key mask, key;
};
struct RuleIdLess {
    bool operator()(const RuleId &a, const RuleId &b) const {
        if (int c = std::memcmp(&a.mask, &b.mask, sizeof(a.mask)))
            return c < 0;
        return std::memcmp(&a.key, &b.key, sizeof(a.key)) < 0;
    }
};
using RuleSet = std::set<RuleId, RuleIdLess>;

struct Item {
    Policy policy;
    tcm_policy cfg{}; // parent as 1 + the parent's id: the set's offset is added when written
    std::vector<RuleId> rules;
    uint32_t rank = 0;
};

tcm_policy make_cfg(const Policy &p) {
    tcm_policy cfg{};
    cfg.meter = make_meter_config(p.meter);
    if (p.fleet) {
        // C is refilled by grants only (bpf/lib/fleet.h), never by time.
        cfg.meter.flags |= TCM_METER_F_FLEET;
        cfg.meter.c_rate = 0;
        cfg.meter.c_fill_ns = ~0ull;
    }
    for (int d = 0; d < 64; ++d)
        cfg.color_map[d / 32] |= static_cast<uint64_t>(p.color_map[d]) << (2 * (d % 32));
    for (int c = 0; c < TCM_NR_COLORS; ++c)
        cfg.action[c] = {static_cast<uint32_t>(p.actions[c].kind), p.actions[c].value};
    cfg.policy_id = p.id;
    cfg.per = static_cast<uint8_t>(p.per);
    cfg.prefix4 = p.prefix4;
    cfg.prefix6 = p.prefix6;
    cfg.length_mode = static_cast<uint8_t>(p.length);
    cfg.overhead = p.overhead;
    cfg.aqm = static_cast<uint8_t>(p.aqm);
    cfg.shape = static_cast<uint8_t>(p.shape);
    std::snprintf(cfg.name, sizeof(cfg.name), "%s", p.name.c_str());
    return cfg;
}

// @p as the model holds it, unranked.
Item compile(const Policy &p) {
    Item it;
    it.policy = p;
    it.cfg = make_cfg(p);
    for (const auto &e : rule_entries(p, p.id, 0))
        it.rules.push_back({e.mask, e.key});
    return it;
}

bool same(const tcm_policy &a, const tcm_policy &b) {
    return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// What one set's maps hold, as last written.
struct Image {
    bool known = true;                   // false: rewritten whole next time
    std::map<uint32_t, tcm_policy> cfgs; // non-zero slots, parent without the set's offset
    std::map<RuleId, tcm_rule, RuleIdLess> rules;
    std::map<tcm_class_key, uint32_t, ClassKeyLess> mask_id;    // ids of this set's masks
    std::map<tcm_class_key, uint32_t, ClassKeyLess> mask_rules; // rules under each mask
    std::vector<tcm_mask> masks;                                // the probe order written
    tcm_set_info info{};
    // What may differ from the model: changed since this set was last written.
    std::set<uint32_t> dirty_ids;
    RuleSet dirty_rules;
};

} // namespace

struct PolicySets::Impl {
    Maps maps;
    uint32_t slots = TCM_MAX_POLICIES; // configs per set in maps.cfg (its size at load / 2)
    // The model: the set the next write makes.
    std::map<uint32_t, Item> items;
    std::map<RankKey, uint32_t> order;
    std::map<std::string, uint32_t> names;
    std::map<std::string, std::set<uint32_t>> children;                // parent name -> child ids
    std::map<RuleId, std::map<uint32_t, uint32_t>, RuleIdLess> claims; // rule -> rank -> id
    std::map<tcm_class_key, std::multiset<uint32_t>, ClassKeyLess> mask_ranks;
    size_t n_entries = 0;
    size_t n_cgroup = 0; // policies with a cgroup match

    Image images[TCM_NR_SETS];
    // Touched by the last write: the other set falls behind by these once it is switched.
    std::set<uint32_t> touched_ids;
    RuleSet touched_rules;
    size_t writes = 0;

    // Adds or takes away an item's part in the model's indexes.
    void link(const Item &it) {
        order[rank_key(it.policy)] = it.policy.id;
        names[it.policy.name] = it.policy.id;
        if (!it.policy.parent.empty())
            children[it.policy.parent].insert(it.policy.id);
        for (const auto &r : it.rules) {
            claims[r][it.rank] = it.policy.id;
            mask_ranks[r.mask].insert(it.rank);
            touched_rules.insert(r);
        }
        n_entries += it.rules.size();
        n_cgroup += it.policy.match.cgroup.has_value();
        touched_ids.insert(it.policy.id);
    }
    void unlink(const Item &it) {
        order.erase(rank_key(it.policy));
        if (auto n = names.find(it.policy.name); n != names.end() && n->second == it.policy.id)
            names.erase(n);
        if (auto c = children.find(it.policy.parent); c != children.end()) {
            c->second.erase(it.policy.id);
            if (c->second.empty())
                children.erase(c);
        }
        for (const auto &r : it.rules) {
            auto c = claims.find(r);
            c->second.erase(it.rank);
            if (c->second.empty())
                claims.erase(c);
            auto m = mask_ranks.find(r.mask);
            m->second.erase(m->second.find(it.rank));
            if (m->second.empty())
                mask_ranks.erase(m);
            touched_rules.insert(r);
        }
        n_entries -= it.rules.size();
        n_cgroup -= it.policy.match.cgroup.has_value();
        touched_ids.insert(it.policy.id);
    }

    std::optional<Policy> erase(uint32_t id) {
        auto it = items.find(id);
        if (it == items.end())
            return std::nullopt;
        unlink(it->second);
        Policy old = std::move(it->second.policy);
        items.erase(it);
        return old;
    }

    // A rank strictly between the neighbours of @key in rank order, if there is room.
    std::optional<uint32_t> free_rank(const RankKey &key) const {
        auto next = order.lower_bound(key);
        int64_t lo =
            next == order.begin() ? int64_t{-1} : int64_t{items.at(std::prev(next)->second).rank};
        int64_t hi = next == order.end() ? kNoRank : int64_t{items.at(next->second).rank};
        int64_t gap = hi - lo;
        if (gap < 2)
            return std::nullopt;
        if (next == order.end())
            return static_cast<uint32_t>(lo + std::min(kRankStep, gap / 2));
        if (next == order.begin())
            return static_cast<uint32_t>(hi - std::min(kRankStep, gap / 2));
        return static_cast<uint32_t>(lo + gap / 2);
    }

    // Lays the ranks out afresh, evenly: every rule is touched.
    void renumber() {
        std::vector<uint32_t> ids;
        for (const auto &[key, id] : order)
            ids.push_back(id);
        const int64_t step = std::min<int64_t>(kRankStep, kNoRank / (ids.size() + 1));
        for (size_t i = 0; i < ids.size(); ++i) {
            Item &it = items.at(ids[i]);
            unlink(it);
            it.rank = static_cast<uint32_t>((i + 1) * step);
            link(it);
        }
    }

    void insert(const Policy &p) {
        Item it = compile(p);
        auto key = rank_key(p);
        auto rank = free_rank(key);
        if (!rank) {
            renumber();
            rank = free_rank(key);
        }
        it.rank = *rank;
        link(items.emplace(p.id, std::move(it)).first->second);
    }

    // Whether a level of @it's chain (it or one above) has a warm-up or a quota. Bounded: the
    // graph is checked before a write, but a broken one must not loop here.
    bool chain_over_time(const Item &it) const {
        const Item *cur = &it;
        for (int depth = 0; depth <= TCM_MAX_LEVELS; ++depth) {
            if (cur->policy.meter.has_warmup_or_quota())
                return true;
            auto n = names.find(cur->policy.parent);
            if (cur->policy.parent.empty() || n == names.end())
                return false;
            cur = &items.at(n->second);
        }
        return false;
    }

    // The links of @id's config: its parent field (1 + its parent's id, or 0) and
    // TCM_METER_F_EXT_CHAIN, which sends its packets to the data path's chain with a warm-up
    // or a quota when a level of its chain has one.
    void relink_parent(uint32_t id) {
        auto it = items.find(id);
        if (it == items.end())
            return;
        uint32_t parent = 0;
        if (!it->second.policy.parent.empty())
            if (auto n = names.find(it->second.policy.parent); n != names.end())
                parent = n->second + 1;
        uint32_t flags = it->second.cfg.meter.flags & ~TCM_METER_F_EXT_CHAIN;
        if (parent && chain_over_time(it->second))
            flags |= TCM_METER_F_EXT_CHAIN;
        if (it->second.cfg.parent != parent || it->second.cfg.meter.flags != flags) {
            it->second.cfg.parent = parent;
            it->second.cfg.meter.flags = flags;
            touched_ids.insert(id);
        }
    }

    // relink_parent of every policy under @name, at any depth: a level's warm-up or quota
    // changes the flag of every chain through it.
    void relink_below(const std::string &name, int depth = 0) {
        auto ch = children.find(name);
        if (ch == children.end() || depth > TCM_MAX_LEVELS)
            return;
        for (uint32_t id : ch->second) { // relink_parent changes configs, not the links
            relink_parent(id);
            relink_below(items.at(id).policy.name, depth + 1);
        }
    }

    tcm_policy cfg_in_set(tcm_policy cfg, uint32_t set) const {
        if (cfg.parent)
            cfg.parent += set * slots;
        return cfg;
    }

    int update(int fd, const void *key, const void *value) {
        ++writes;
        return bpf_map_update_elem(fd, key, value, 0);
    }

    static uint32_t alloc_mask_id(Image &im) {
        std::set<uint32_t> used;
        for (const auto &[m, id] : im.mask_id)
            used.insert(id);
        uint32_t id = 0;
        while (used.contains(id))
            ++id;
        return id;
    }

    // The probe order: the model's masks by the best rank under each.
    std::vector<std::pair<uint32_t, tcm_class_key>> desired_masks() const {
        std::vector<std::pair<uint32_t, tcm_class_key>> out;
        for (const auto &[mask, ranks] : mask_ranks)
            out.emplace_back(*ranks.begin(), mask);
        std::ranges::sort(out, [](const auto &a, const auto &b) { return a.first < b.first; });
        return out;
    }

    Result<void> fail(std::string_view what, int err) {
        return std::unexpected(fmt::format("cannot {}: {} (the active policy set is unchanged)",
                                           what, errno_text(err)));
    }

    // Brings set @set up to the model for its dirty ids and rules (everything if unknown).
    Result<void> sync(uint32_t set) {
        Image &im = images[set];
        if (!im.known)
            return rewrite(set);
        for (uint32_t id : im.dirty_ids) {
            auto want = items.find(id);
            auto have = im.cfgs.find(id);
            if (want == items.end() && have == im.cfgs.end())
                continue;
            if (want != items.end() && have != im.cfgs.end() &&
                same(want->second.cfg, have->second))
                continue;
            pending.cfg_keys.push_back(set * slots + id);
            pending.cfgs.push_back(want == items.end() ? tcm_policy{}
                                                       : cfg_in_set(want->second.cfg, set));
            if (want == items.end())
                im.cfgs.erase(have);
            else
                im.cfgs[id] = want->second.cfg;
        }
        for (const auto &r : im.dirty_rules)
            sync_rule(set, r);
        im.dirty_ids.clear();
        im.dirty_rules.clear();
        if (auto res = flush(); !res)
            return res;
        return sync_masks(set);
    }

    // Queues what rule @r of set @set needs (flush() writes it).
    void sync_rule(uint32_t set, const RuleId &r) {
        Image &im = images[set];
        auto want = claims.find(r);
        auto have = im.rules.find(r);
        if (want == claims.end() && have == im.rules.end())
            return;
        tcm_rule_key rk{};
        rk.key = r.key;
        if (want == claims.end()) {
            rk.set_mask = set << 16 | im.mask_id.at(r.mask);
            pending.rule_dels.push_back(rk);
            im.rules.erase(have);
            --im.mask_rules[r.mask];
            return;
        }
        // Two policies with the same match: only the better rank can ever win.
        const auto &[rank, id] = *want->second.begin();
        tcm_rule rule{id, rank};
        if (have != im.rules.end() && have->second.slot == id && have->second.rank == rank)
            return;
        auto mid = im.mask_id.find(r.mask);
        if (mid == im.mask_id.end())
            mid = im.mask_id.emplace(r.mask, alloc_mask_id(im)).first;
        rk.set_mask = set << 16 | mid->second;
        pending.rule_keys.push_back(rk);
        pending.rules.push_back(rule);
        if (have == im.rules.end()) {
            im.rules.emplace(r, rule);
            ++im.mask_rules[r.mask];
        } else {
            have->second = rule;
        }
    }

    // What sync queued: rule deletions first (a set written whole deletes and rewrites keys),
    // then configs and rules, each in one batch where the kernel has batches (one syscall
    // instead of one per entry: a set of 16k policies is 32k entries).
    struct Pending {
        std::vector<uint32_t> cfg_keys;
        std::vector<tcm_policy> cfgs;
        std::vector<tcm_rule_key> rule_keys;
        std::vector<tcm_rule> rules;
        std::vector<tcm_rule_key> rule_dels;
    } pending;

    template <typename K, typename V>
    int update_all(int fd, const std::vector<K> &keys, const std::vector<V> &values) {
        writes += keys.size();
        if (keys.empty())
            return 0;
        uint32_t count = static_cast<uint32_t>(keys.size());
        int err = bpf_map_update_batch(fd, keys.data(), values.data(), &count, nullptr);
        if (err == 0 || (err != -EINVAL && err != -ENOTSUP && err != -EOPNOTSUPP))
            return err;
        for (size_t i = 0; i < keys.size(); ++i) // no batches for this map on this kernel
            if ((err = bpf_map_update_elem(fd, &keys[i], &values[i], 0)))
                return err;
        return 0;
    }

    Result<void> flush() {
        Pending p = std::move(pending);
        pending = {};
        writes += p.rule_dels.size() + p.rule_keys.size();
        for (const auto &k : p.rule_dels)
            if (int err = maps.rules->remove(k); err && err != -ENOENT)
                return fail("delete a classifier rule", err);
        if (int err = update_all(maps.cfg, p.cfg_keys, p.cfgs))
            return fail("write a policy config", err);
        for (size_t i = 0; i < p.rule_keys.size(); ++i)
            if (int err = maps.rules->put(p.rule_keys[i], p.rules[i]))
                return fail(err == -ENOSPC ? "find room for a classifier rule (too many rules "
                                             "share its slots)"
                                           : "write a classifier rule",
                            err);
        return {};
    }

    Result<void> sync_masks(uint32_t set) {
        Image &im = images[set];
        std::vector<tcm_mask> want;
        for (const auto &[rank, mask] : desired_masks()) {
            tcm_mask m{};
            m.mask = mask;
            m.min_rank = rank;
            auto mid = im.mask_id.find(mask);
            if (mid == im.mask_id.end())
                mid = im.mask_id.emplace(mask, alloc_mask_id(im)).first;
            m.id = mid->second;
            want.push_back(m);
        }
        for (size_t i = 0; i < want.size(); ++i) {
            if (i < im.masks.size() && std::memcmp(&im.masks[i], &want[i], sizeof(want[i])) == 0)
                continue;
            uint32_t idx = set * TCM_MAX_MASKS + static_cast<uint32_t>(i);
            if (int err = update(maps.masks, &idx, &want[i]))
                return fail("write a classifier mask", err);
        }
        im.masks = want;
        tcm_set_info info{static_cast<uint32_t>(want.size()),
                          items.empty() ? 0 : items.rbegin()->first + 1};
        if (std::memcmp(&info, &im.info, sizeof(info)) != 0) {
            if (int err = update(maps.sets, &set, &info))
                return fail("write the policy set header", err);
            im.info = info;
        }
        // A mask with no rules in this set and not probed gives its id back.
        std::erase_if(im.mask_id, [&](const auto &e) {
            auto n = im.mask_rules.find(e.first);
            bool unused = n == im.mask_rules.end() || n->second == 0;
            return unused && !mask_ranks.contains(e.first);
        });
        std::erase_if(im.mask_rules, [](const auto &e) { return e.second == 0; });
        return {};
    }

    // Set @set whole: its rules cleared, every slot written, then the model's rules and masks.
    Result<void> rewrite(uint32_t set) {
        Image &im = images[set];
        im = Image{};
        im.known = false; // until it is all written
        writes += maps.rules->clear(set);
        for (uint32_t slot = 0; slot < slots; ++slot) {
            auto it = items.find(slot);
            pending.cfg_keys.push_back(set * slots + slot);
            pending.cfgs.push_back(it == items.end() ? tcm_policy{}
                                                     : cfg_in_set(it->second.cfg, set));
            if (it != items.end())
                im.cfgs[slot] = it->second.cfg;
        }
        // Ids in probe order, as the pins of before tcm_mask.id keyed their rules by position: a
        // program of that time still attached reads a set written whole correctly.
        auto order_now = desired_masks();
        for (uint32_t i = 0; i < order_now.size(); ++i)
            im.mask_id[order_now[i].second] = i;
        for (const auto &[r, claimants] : claims)
            sync_rule(set, r);
        if (auto res = flush(); !res)
            return res;
        im.info = tcm_set_info{~0u, ~0u}; // written by sync_masks
        if (auto res = sync_masks(set); !res)
            return res;
        im.known = true;
        return {};
    }

    void mark_all_dirty() {
        for (auto &im : images) {
            for (const auto &[id, cfg] : im.cfgs)
                im.dirty_ids.insert(id);
            for (const auto &[id, it] : items)
                im.dirty_ids.insert(id);
            for (const auto &[r, rule] : im.rules)
                im.dirty_rules.insert(r);
            for (const auto &[r, c] : claims)
                im.dirty_rules.insert(r);
        }
    }
};

PolicySets::PolicySets(Maps maps, bool known) : impl_(std::make_unique<Impl>()) {
    impl_->maps = maps;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(maps.cfg, &info, &len) == 0)
        impl_->slots = info.max_entries / TCM_NR_SETS;
    for (auto &im : impl_->images)
        im.known = known;
}

PolicySets::~PolicySets() = default;

std::vector<std::pair<const Policy *, uint32_t>> PolicySets::ranked() const {
    std::vector<std::pair<const Policy *, uint32_t>> out;
    for (const auto &[key, id] : impl_->order) {
        const Item &it = impl_->items.at(id);
        out.emplace_back(&it.policy, it.rank);
    }
    return out;
}

size_t PolicySets::cgroup_policies() const {
    return impl_->n_cgroup;
}

bool PolicySets::contains(uint32_t id) const {
    return impl_->items.contains(id);
}

size_t PolicySets::size() const {
    return impl_->items.size();
}

size_t PolicySets::entries() const {
    return impl_->n_entries;
}

size_t PolicySets::last_map_writes() const {
    return impl_->writes;
}

std::vector<std::string> PolicySets::problems(const SetChange &c) const {
    const Impl &m = *impl_;
    std::vector<std::string> errors;
    std::set<uint32_t> gone(c.removes.begin(), c.removes.end());
    std::map<uint32_t, const Policy *> up;
    std::map<std::string, const Policy *> up_names;
    for (const auto &p : c.upserts) {
        for (auto &e : policy_problems(p))
            errors.push_back(std::move(e));
        if (!up.emplace(p.id, &p).second || gone.contains(p.id))
            errors.push_back(fmt::format("policy '{}': id {} is used twice", p.name, p.id));
        if (!up_names.emplace(p.name, &p).second)
            errors.push_back(fmt::format("policy '{}': the name is used twice", p.name));
    }
    // The set after the change, seen through the model.
    auto live = [&](uint32_t id) -> const Policy * {
        if (auto u = up.find(id); u != up.end())
            return u->second;
        if (gone.contains(id))
            return nullptr;
        auto it = m.items.find(id);
        return it == m.items.end() ? nullptr : &it->second.policy;
    };
    auto by_name = [&](const std::string &name) -> const Policy * {
        if (auto u = up_names.find(name); u != up_names.end())
            return u->second;
        auto it = m.names.find(name);
        const Policy *p = it == m.names.end() ? nullptr : live(it->second);
        return p && p->name == name ? p : nullptr;
    };
    for (const auto &[name, p] : up_names)
        if (auto it = m.names.find(name); it != m.names.end() && it->second != p->id &&
                                          live(it->second) && live(it->second)->name == name)
            errors.push_back(fmt::format("policy '{}': the name is used twice", name));

    // The maps' limits.
    size_t n = m.items.size();
    long entries = static_cast<long>(m.n_entries);
    std::map<tcm_class_key, long, ClassKeyLess> delta;
    auto drop = [&](uint32_t id) {
        auto it = m.items.find(id);
        if (it == m.items.end())
            return;
        --n;
        entries -= static_cast<long>(it->second.rules.size());
        for (const auto &r : it->second.rules)
            --delta[r.mask];
    };
    for (uint32_t id : gone)
        drop(id);
    for (const auto &[id, p] : up) {
        drop(id);
        ++n;
        auto es = rule_entries(*p, id, 0);
        entries += static_cast<long>(es.size());
        for (const auto &e : es)
            ++delta[e.mask];
    }
    size_t masks = m.mask_ranks.size();
    for (const auto &[mask, d] : delta) {
        auto it = m.mask_ranks.find(mask);
        long before = it == m.mask_ranks.end() ? 0 : static_cast<long>(it->second.size());
        if (before == 0 && before + d > 0)
            ++masks;
        else if (before > 0 && before + d == 0)
            --masks;
    }
    if (n > TCM_MAX_POLICIES)
        errors.push_back(too_many_policies(n));
    if (masks > TCM_MAX_MASKS)
        errors.push_back(too_many_shapes(masks));
    if (entries > static_cast<long>(TCM_MAX_RULES / TCM_NR_SETS))
        errors.push_back(too_many_entries(static_cast<size_t>(entries)));
    // The tables as loaded (tricolord grows them before a change that needs more).
    for (const auto &[id, p] : up)
        if (id >= m.slots)
            errors.push_back(fmt::format("policy '{}': id {} is beyond this data path's {} policy "
                                         "slots (its tables are grown first)",
                                         p->name, id, m.slots));
    if (const uint32_t room = m.maps.rules->slots_per_set() / 2;
        entries > static_cast<long>(room) &&
        entries <= static_cast<long>(TCM_MAX_RULES / TCM_NR_SETS))
        errors.push_back(fmt::format("the policies expand to {} classifier entries, beyond this "
                                     "data path's {} (its tables are grown first)",
                                     entries, room));

    // The hierarchies the change touches: each whole, from the top of the chain down.
    auto children_of = [&](const std::string &name) {
        std::vector<const Policy *> out;
        if (auto it = m.children.find(name); it != m.children.end())
            for (uint32_t id : it->second)
                if (const Policy *p = live(id); p && p->parent == name && !up.contains(id))
                    out.push_back(p);
        for (const auto &[id, p] : up)
            if (p->parent == name)
                out.push_back(p);
        return out;
    };
    std::set<std::string> seeds;
    for (const auto &[id, p] : up) {
        seeds.insert(p->name);
        if (auto it = m.items.find(id); it != m.items.end())
            seeds.insert(it->second.policy.name); // a rename leaves its children behind
    }
    for (uint32_t id : gone)
        if (auto it = m.items.find(id); it != m.items.end())
            seeds.insert(it->second.policy.name);
    std::map<std::string, const Policy *> members;
    auto add_tree = [&](const Policy *start) {
        const Policy *top = start;
        std::set<std::string> walked{start->name};
        members.emplace(start->name, start);
        for (size_t steps = 0; steps < 4 * TCM_MAX_LEVELS && !top->parent.empty(); ++steps) {
            const Policy *up_one = by_name(top->parent);
            if (!up_one || !walked.insert(up_one->name).second)
                break;
            members.emplace(up_one->name, up_one);
            top = up_one;
        }
        std::vector<const Policy *> queue{top};
        while (!queue.empty()) {
            const Policy *p = queue.back();
            queue.pop_back();
            for (const Policy *child : children_of(p->name))
                if (members.emplace(child->name, child).second)
                    queue.push_back(child);
        }
    };
    for (const auto &name : seeds) {
        if (const Policy *p = by_name(name))
            add_tree(p);
        for (const Policy *child : children_of(name))
            add_tree(child);
    }
    if (!members.empty()) {
        std::vector<Policy> subset;
        for (const auto &[name, p] : members)
            subset.push_back(*p);
        for (auto &e : hierarchy_errors(subset))
            errors.push_back(std::move(e));
    }
    return errors;
}

Result<void> PolicySets::write(uint32_t set, const SetChange &c) {
    Impl &m = *impl_;
    m.writes = 0;
    m.touched_ids.clear();
    m.touched_rules.clear();
    std::vector<std::pair<uint32_t, std::optional<Policy>>> before;
    std::set<std::string> names;
    for (uint32_t id : c.removes) {
        auto old = m.erase(id);
        if (old)
            names.insert(old->name);
        before.emplace_back(id, std::move(old));
    }
    for (const auto &p : c.upserts) {
        auto old = m.erase(p.id);
        if (old)
            names.insert(old->name);
        before.emplace_back(p.id, std::move(old));
        m.insert(p);
        names.insert(p.name);
    }
    auto relink = [&] {
        for (uint32_t id : std::set<uint32_t>(m.touched_ids))
            m.relink_parent(id);
        for (const auto &name : names)
            m.relink_below(name);
    };
    relink();
    Image &im = m.images[set];
    im.dirty_ids.insert(m.touched_ids.begin(), m.touched_ids.end());
    im.dirty_rules.insert(m.touched_rules.begin(), m.touched_rules.end());
    if (auto r = m.sync(set); !r) {
        // Undo in the model; the set is rewritten whole next time, and the other set may
        // differ from the model wherever this touched.
        for (auto it = before.rbegin(); it != before.rend(); ++it) {
            m.erase(it->first);
            if (it->second)
                m.insert(*it->second);
        }
        relink();
        im.known = false;
        Image &other = m.images[set ^ 1];
        other.dirty_ids.insert(m.touched_ids.begin(), m.touched_ids.end());
        other.dirty_rules.insert(m.touched_rules.begin(), m.touched_rules.end());
        m.touched_ids.clear();
        m.touched_rules.clear();
        return r;
    }
    return {};
}

Result<void> PolicySets::rebuild(uint32_t set, const std::vector<Policy> &policies) {
    Impl &m = *impl_;
    m.writes = 0;
    m.items.clear();
    m.order.clear();
    m.names.clear();
    m.children.clear();
    m.claims.clear();
    m.mask_ranks.clear();
    m.n_entries = 0;
    m.n_cgroup = 0;
    // Ranks evenly spaced, in rank order.
    std::vector<const Policy *> sorted;
    for (const auto &p : policies)
        sorted.push_back(&p);
    std::ranges::sort(sorted,
                      [](const Policy *a, const Policy *b) { return rank_key(*a) < rank_key(*b); });
    const int64_t step = std::min<int64_t>(kRankStep, kNoRank / (sorted.size() + 1));
    for (size_t i = 0; i < sorted.size(); ++i) {
        const Policy &p = *sorted[i];
        Item it = compile(p);
        it.rank = static_cast<uint32_t>((i + 1) * step);
        m.link(m.items.emplace(p.id, std::move(it)).first->second);
    }
    for (const auto &[id, it] : m.items)
        m.relink_parent(id);
    m.mark_all_dirty();
    m.touched_ids.clear();
    m.touched_rules.clear();
    if (auto r = m.sync(set); !r) {
        // The model no longer matches the active set: both sets are rewritten whole next time.
        for (auto &im : m.images)
            im.known = false;
        return r;
    }
    return {};
}

void PolicySets::switched(uint32_t active) {
    Image &other = impl_->images[active ^ 1];
    other.dirty_ids.insert(impl_->touched_ids.begin(), impl_->touched_ids.end());
    other.dirty_rules.insert(impl_->touched_rules.begin(), impl_->touched_rules.end());
    impl_->touched_ids.clear();
    impl_->touched_rules.clear();
}

Result<void> PolicySets::catch_up(uint32_t set) {
    impl_->writes = 0;
    auto r = impl_->sync(set);
    if (!r)
        impl_->images[set].known = false;
    return r;
}

} // namespace tricolor
