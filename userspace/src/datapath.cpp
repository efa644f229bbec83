// datapath.cpp: the data path facade. A policy set is compiled into tuple-space rules: every
// policy becomes one or more (mask, masked key) entries, port ranges expanded into prefixes,
// and the masks sorted by the best rank under each so the kernel can stop probing early.
#include "tricolor/datapath.hpp"
#include "tricolor/bpf_load.hpp"
#include "tricolor/hierarchy.hpp"
#include "tricolor/text.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <sys/mman.h>
#include <unistd.h>
#include <set>
#include <stdexcept>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include "tricolor_dp.skel.h"

namespace tricolor {
namespace {

template <typename T>
bool parse_number(std::string_view text, T &out) {
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && ptr == text.data() + text.size() && !text.empty();
}

// Prefix of @len bits as a big-endian 128-bit mask, word by word in network order.
void prefix_mask(uint32_t out[4], unsigned len) {
    for (int i = 0; i < 4; ++i) {
        unsigned bits = len > 32u * i ? std::min(32u, len - 32u * i) : 0;
        out[i] = htonl(bits == 0 ? 0 : (bits == 32 ? ~0u : ~0u << (32 - bits)));
    }
}

void store_prefix(const Prefix &p, uint32_t key[4], uint32_t mask[4]) {
    if (p.ipv6) {
        std::memcpy(key, p.addr.data(), 16);
        prefix_mask(mask, p.len);
    } else {
        key[0] = key[1] = 0;
        key[2] = htonl(0x0000ffff);
        std::memcpy(&key[3], p.addr.data(), 4);
        prefix_mask(mask, 96 + p.len);
    }
}

// Splits [lo, hi] into aligned power-of-two blocks: (value, mask) pairs.
std::vector<std::pair<uint16_t, uint16_t>> port_prefixes(PortRange r) {
    std::vector<std::pair<uint16_t, uint16_t>> out;
    uint32_t lo = r.lo, hi = r.hi;
    while (lo <= hi) {
        uint32_t size = 1;
        while ((lo & (size * 2 - 1)) == 0 && lo + size * 2 - 1 <= hi && size < 65536)
            size *= 2;
        out.emplace_back(static_cast<uint16_t>(lo), static_cast<uint16_t>(~(size - 1) & 0xffff));
        lo += size;
    }
    return out;
}

unsigned specificity(const Match &m) {
    return (m.src ? m.src->len : 0) + (m.dst ? m.dst->len : 0);
}

struct Entry {
    tcm_class_key mask;
    tcm_class_key key;
    uint32_t slot;
    uint32_t rank;
};

struct KeyLess {
    bool operator()(const tcm_class_key &a, const tcm_class_key &b) const {
        return std::memcmp(&a, &b, sizeof(a)) < 0;
    }
};

struct RuleKeyLess {
    bool operator()(const std::pair<uint32_t, tcm_class_key> &a,
                    const std::pair<uint32_t, tcm_class_key> &b) const {
        if (a.first != b.first)
            return a.first < b.first;
        return KeyLess{}(a.second, b.second);
    }
};

// The entries of one policy.
std::vector<Entry> entries_of(const Policy &p, uint32_t slot, uint32_t rank) {
    if (p.only_parent)
        return {}; // reached only through its children
    tcm_class_key key{}, mask{};
    const Match &m = p.match;
    if (m.ifindex) {
        key.ifindex = *m.ifindex;
        mask.ifindex = ~0u;
    }
    if (m.vlan) {
        key.vlan = *m.vlan;
        mask.vlan = 0xffff;
    }
    if (m.dscp) {
        key.dscp = *m.dscp;
        mask.dscp = 0xff;
    }
    if (m.proto) {
        key.proto = *m.proto;
        mask.proto = 0xff;
    }
    if (m.src || m.dst) {
        bool v6 = m.src ? m.src->ipv6 : m.dst->ipv6;
        key.flags |= v6 ? TCM_KEY_F_IPV6 : 0;
        mask.flags |= TCM_KEY_F_IPV6;
    }
    if (m.src)
        store_prefix(*m.src, key.src, mask.src);
    if (m.dst)
        store_prefix(*m.dst, key.dst, mask.dst);
    for (int i = 0; i < 4; ++i) {
        key.src[i] &= mask.src[i];
        key.dst[i] &= mask.dst[i];
    }
    std::vector<std::pair<uint16_t, uint16_t>> any{{0, 0}};
    auto sports = m.sport ? port_prefixes(*m.sport) : any;
    auto dports = m.dport ? port_prefixes(*m.dport) : any;
    if (m.sport || m.dport) {
        key.flags |= TCM_KEY_F_PORTS;
        mask.flags |= TCM_KEY_F_PORTS;
    }
    std::vector<Entry> out;
    for (auto [sv, sm] : sports)
        for (auto [dv, dm] : dports) {
            Entry e{mask, key, slot, rank};
            e.key.sport = sv;
            e.mask.sport = sm;
            e.key.dport = dv;
            e.mask.dport = dm;
            out.push_back(e);
        }
    return out;
}

constexpr size_t kMaxEntriesPerPolicy = 1024;

// Deletes the flows whose policy id @drop says to.
template <typename Pred>
void delete_flows_if(int flows_fd, Pred drop) {
    std::vector<tcm_flow_key> gone;
    tcm_flow_key k{}, nk{};
    void *prev = nullptr;
    while (bpf_map_get_next_key(flows_fd, prev, &nk) == 0) {
        if (drop(nk.policy_id))
            gone.push_back(nk);
        k = nk;
        prev = &k;
    }
    for (const auto &g : gone)
        bpf_map_delete_elem(flows_fd, &g);
}

} // namespace

// ---- parsing of match and action values ------------------------------------------------------

Result<Prefix> parse_prefix(std::string_view text) {
    auto fail = [&](std::string_view why) {
        return std::unexpected(fmt::format("invalid prefix '{}': {}", text, why));
    };
    Prefix p;
    std::string addr(text.substr(0, text.find('/')));
    p.ipv6 = addr.find(':') != std::string::npos;
    if (inet_pton(p.ipv6 ? AF_INET6 : AF_INET, addr.c_str(), p.addr.data()) != 1)
        return fail(p.ipv6 ? "not an IPv6 address" : "not an IPv4 address");
    unsigned max = p.ipv6 ? 128 : 32;
    p.len = static_cast<uint8_t>(max);
    if (auto slash = text.find('/'); slash != std::string_view::npos) {
        unsigned len = 0;
        if (!parse_number(text.substr(slash + 1), len) || len > max)
            return fail(fmt::format("prefix length must be 0 to {}", max));
        p.len = static_cast<uint8_t>(len);
    }
    // Host bits set below the prefix are a typo more often than not: refuse them.
    uint32_t key[4], mask[4];
    store_prefix(p, key, mask);
    for (int i = 0; i < 4; ++i)
        if (key[i] & ~mask[i])
            return fail("host bits are set beyond the prefix length");
    return p;
}

std::string to_string(const Prefix &p) {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(p.ipv6 ? AF_INET6 : AF_INET, p.addr.data(), buf, sizeof(buf));
    return fmt::format("{}/{}", buf, p.len);
}

Result<PortRange> parse_port_range(std::string_view text) {
    auto fail = [&] {
        return std::unexpected(fmt::format(
            "invalid port '{}': use a port 0-65535 or a range LO-HI with LO <= HI", text));
    };
    PortRange r;
    auto dash = text.find('-');
    uint32_t lo = 0, hi = 0;
    if (dash == std::string_view::npos) {
        if (!parse_number(text, lo) || lo > 65535)
            return fail();
        hi = lo;
    } else if (!parse_number(text.substr(0, dash), lo) ||
               !parse_number(text.substr(dash + 1), hi) || lo > 65535 || hi > 65535 || lo > hi) {
        return fail();
    }
    r.lo = static_cast<uint16_t>(lo);
    r.hi = static_cast<uint16_t>(hi);
    return r;
}

namespace {
struct DscpName {
    std::string_view name;
    uint8_t value;
};
constexpr DscpName kDscpNames[] = {
    {"ef", 46},   {"af11", 10}, {"af12", 12}, {"af13", 14}, {"af21", 18}, {"af22", 20},
    {"af23", 22}, {"af31", 26}, {"af32", 28}, {"af33", 30}, {"af41", 34}, {"af42", 36},
    {"af43", 38}, {"cs0", 0},   {"cs1", 8},   {"cs2", 16},  {"cs3", 24},  {"cs4", 32},
    {"cs5", 40},  {"cs6", 48},  {"cs7", 56},
};
} // namespace

Result<Action> parse_action(std::string_view text) {
    auto fail = [&](std::string_view why) {
        return std::unexpected(fmt::format("invalid action '{}': {}", text, why));
    };
    if (text == "pass")
        return Action{TCM_ACT_KIND_PASS, 0};
    if (text == "drop")
        return Action{TCM_ACT_KIND_DROP, 0};
    auto colon = text.find(':');
    if (colon == std::string_view::npos)
        return fail("use pass, drop, dscp:N|NAME, mark:N, priority:N or classid:MAJ:MIN");
    std::string_view kind = text.substr(0, colon), arg = text.substr(colon + 1);
    uint32_t v = 0;
    if (kind == "dscp") {
        for (const auto &d : kDscpNames)
            if (arg == d.name)
                return Action{TCM_ACT_KIND_DSCP, d.value};
        if (!parse_number(arg, v) || v > 63)
            return fail("DSCP must be 0 to 63 or a name (ef, af11..af43, cs0..cs7)");
        return Action{TCM_ACT_KIND_DSCP, v};
    }
    if (kind == "mark") {
        if (!parse_number(arg, v))
            return fail("mark must be a number 0 to 4294967295");
        return Action{TCM_ACT_KIND_MARK, v};
    }
    if (kind == "priority") {
        if (!parse_number(arg, v))
            return fail("priority must be a number 0 to 4294967295");
        return Action{TCM_ACT_KIND_PRIORITY, v};
    }
    if (kind == "classid") {
        // tc writes class ids in hex: 1:10 is 0x0001:0x0010.
        auto c2 = arg.find(':');
        uint32_t maj = 0, min = 0;
        auto hex = [](std::string_view s, uint32_t &out) {
            auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
            return ec == std::errc() && ptr == s.data() + s.size() && !s.empty() && out <= 0xffff;
        };
        if (c2 == std::string_view::npos || !hex(arg.substr(0, c2), maj) ||
            !hex(arg.substr(c2 + 1), min))
            return fail("classid must be MAJ:MIN in hex, each 0 to ffff (e.g. 1:10)");
        return Action{TCM_ACT_KIND_PRIORITY, maj << 16 | min};
    }
    return fail(fmt::format("unknown action '{}'", kind));
}

std::string to_string(const Action &a) {
    switch (a.kind) {
    case TCM_ACT_KIND_PASS:
        return "pass";
    case TCM_ACT_KIND_DROP:
        return "drop";
    case TCM_ACT_KIND_DSCP:
        for (const auto &d : kDscpNames)
            if (d.value == a.value)
                return fmt::format("dscp:{}", d.name);
        return fmt::format("dscp:{}", a.value);
    case TCM_ACT_KIND_MARK:
        return fmt::format("mark:{}", a.value);
    case TCM_ACT_KIND_PRIORITY:
        return fmt::format("priority:{}", a.value);
    }
    return "?";
}

std::array<Color, 64> af_color_map() {
    std::array<Color, 64> map;
    map.fill(Color::green);
    for (int cls = 1; cls <= 4; ++cls) {
        map[cls * 8 + 4] = Color::yellow; // AFx2
        map[cls * 8 + 6] = Color::red;    // AFx3
    }
    return map;
}

// ---- the facade ------------------------------------------------------------------------------

struct Datapath::Impl {
    tricolor_dp *skel = nullptr;
    bool testing = false;
    bool adopted = false;
    std::string pin_path;
    tcm_runtime *runtime = nullptr;    // the mmapped entry of the tcm_runtime map
    tcm_fleet_grant *fleet = nullptr;  // the mmapped tcm_fleet array
    std::map<uint32_t, Policy> active; // id -> policy of the active set
    static size_t fleet_bytes() {
        size_t page = sysconf(_SC_PAGESIZE);
        return (sizeof(tcm_fleet_grant) * TCM_MAX_POLICIES + page - 1) / page * page;
    }
    ~Impl() {
        if (fleet)
            munmap(fleet, fleet_bytes());
        if (runtime)
            munmap(runtime, sysconf(_SC_PAGESIZE));
        tricolor_dp::destroy(skel);
    }

    int fd(bpf_map *m) const { return bpf_map__fd(m); }
};

Datapath::Datapath(const DatapathOptions &o) : impl_(std::make_unique<Impl>()) {
    impl_->testing = o.testing;
    impl_->skel = tricolor_dp::open();
    if (!impl_->skel)
        throw std::runtime_error(
            fmt::format("cannot open the BPF data path: {}", errno_text(errno)));
    if (o.flow_capacity == 0)
        throw std::runtime_error("the flow table needs a capacity of at least 1");
    if (int err = bpf_map__set_max_entries(impl_->skel->maps.tcm_flows, o.flow_capacity); err < 0)
        throw std::runtime_error(
            fmt::format("cannot size the flow table to {}: {}", o.flow_capacity, errno_text(err)));
    if (!o.pin_dir.empty()) {
        namespace fs = std::filesystem;
        impl_->pin_path = fmt::format("{}/abi{}", o.pin_dir, TCM_ABI_VERSION);
        std::error_code ec;
        fs::create_directories(impl_->pin_path, ec);
        if (ec)
            throw std::runtime_error(fmt::format("cannot create the pin directory {}: {}",
                                                 impl_->pin_path, ec.message()));
        impl_->adopted = fs::exists(impl_->pin_path + "/tcm_runtime");
        bpf_map *m;
        bpf_object__for_each_map(m, impl_->skel->obj) {
            if (bpf_map__is_internal(m))
                continue;
            std::string path = impl_->pin_path + "/" + bpf_map__name(m);
            if (int err = bpf_map__set_pin_path(m, path.c_str()); err < 0)
                throw std::runtime_error(fmt::format("cannot pin map {} at {}: {}",
                                                     bpf_map__name(m), path, errno_text(err)));
        }
    }
    impl_->skel->rodata->tcm_test_clock = o.testing ? 1 : 0;
    impl_->skel->rodata->tcm_bench_spread_src = o.bench_spread_sources ? 1 : 0;
    if (auto problem = kernel_support_problem(); !problem.empty())
        throw std::runtime_error("cannot load the BPF data path: " + problem);
    if (auto loaded = load_bpf("the BPF data path", [&] { return tricolor_dp::load(impl_->skel); });
        !loaded) {
        std::string hint;
        if (impl_->adopted)
            hint = fmt::format(" (the maps pinned in {} do not match this build: a different "
                               "flow capacity? remove them to start afresh)",
                               impl_->pin_path);
        throw std::runtime_error(loaded.error() + hint);
    }
    void *mem = mmap(nullptr, sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE, MAP_SHARED,
                     impl_->fd(impl_->skel->maps.tcm_runtime), 0);
    if (mem == MAP_FAILED)
        throw std::runtime_error(fmt::format("cannot map tcm_runtime: {}", errno_text(errno)));
    impl_->runtime = static_cast<tcm_runtime *>(mem);
    mem = mmap(nullptr, Impl::fleet_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED,
               impl_->fd(impl_->skel->maps.tcm_fleet), 0);
    if (mem == MAP_FAILED)
        throw std::runtime_error(fmt::format("cannot map tcm_fleet: {}", errno_text(errno)));
    impl_->fleet = static_cast<tcm_fleet_grant *>(mem);
    if (impl_->adopted)
        adopt();
}

void Datapath::adopt() {
    // The active set's ids and names: apply() keeps their buckets and counters.
    uint32_t set = impl_->runtime->active_set & 1;
    tcm_set_info info{};
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_sets), &set, &info) != 0)
        return;
    for (uint32_t slot = 0; slot < info.n_policies && slot < TCM_MAX_POLICIES; ++slot) {
        uint32_t idx = set * TCM_MAX_POLICIES + slot;
        tcm_policy cfg{};
        if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_policy_cfg), &idx, &cfg) != 0)
            continue;
        Policy p;
        p.id = cfg.policy_id;
        p.name.assign(cfg.name, strnlen(cfg.name, sizeof(cfg.name)));
        impl_->active[p.id] = p;
    }
}

bool Datapath::adopted() const {
    return impl_->adopted;
}
std::string Datapath::pin_path() const {
    return impl_->pin_path;
}

void Datapath::remove_pins(const std::string &pin_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::remove_all(fmt::format("{}/abi{}", pin_dir, TCM_ABI_VERSION), ec);
    fs::remove(pin_dir, ec); // only if empty
}

Datapath::~Datapath() = default;

Result<void> Datapath::check(const std::vector<Policy> &policies) const {
    std::vector<std::string> errors;
    std::set<uint32_t> ids;
    std::set<std::string> names;
    if (policies.size() > TCM_MAX_POLICIES)
        errors.push_back(fmt::format("{} policies: at most {}", policies.size(), TCM_MAX_POLICIES));
    size_t rules = 0;
    std::set<tcm_class_key, KeyLess> masks;
    for (const auto &p : policies) {
        auto fail = [&](const std::string &why) {
            errors.push_back(fmt::format("policy '{}': {}", p.name, why));
        };
        if (p.id >= TCM_MAX_POLICIES)
            fail(fmt::format("id {} is not below {}", p.id, TCM_MAX_POLICIES));
        if (!ids.insert(p.id).second)
            fail(fmt::format("id {} is used twice", p.id));
        if (!names.insert(p.name).second)
            fail("the name is used twice");
        auto v = validate(p.meter);
        for (const auto &e : v.errors)
            fail(e);
        const Match &m = p.match;
        if (m.src && m.dst && m.src->ipv6 != m.dst->ipv6)
            fail("src and dst prefixes are of different families");
        if (m.dscp && *m.dscp > 63)
            fail(fmt::format("dscp {} is not 0 to 63", *m.dscp));
        if (m.vlan && *m.vlan > 4095)
            fail(fmt::format("vlan {} is not 0 to 4095", *m.vlan));
        if (p.prefix4 > 32 || p.prefix6 > 128)
            fail("per-key prefix lengths must be at most /32 (IPv4) and /128 (IPv6)");
        if (p.fleet && p.per != TCM_PER_AGGREGATE)
            fail("a fleet policy shares one aggregate bucket: it cannot be per src/dst/5tuple");
        for (const auto &a : p.actions)
            if (a.kind == TCM_ACT_KIND_DSCP && a.value > 63)
                fail(fmt::format("dscp:{} is not 0 to 63", a.value));
        auto es = entries_of(p, 0, 0);
        if (es.size() > kMaxEntriesPerPolicy)
            fail(fmt::format("its port ranges expand to {} classifier entries (at most {}): "
                             "split the policy or widen the ranges",
                             es.size(), kMaxEntriesPerPolicy));
        rules += es.size();
        for (const auto &e : es)
            masks.insert(e.mask);
    }
    for (auto &e : hierarchy_errors(policies))
        errors.push_back(std::move(e));
    if (masks.size() > TCM_MAX_MASKS)
        errors.push_back(fmt::format(
            "the policies use {} distinct match shapes (prefix lengths, port ranges, fields); "
            "the data path probes at most {}",
            masks.size(), TCM_MAX_MASKS));
    if (rules > TCM_MAX_RULES / TCM_NR_SETS)
        errors.push_back(fmt::format("the policies expand to {} classifier entries; at most {}",
                                     rules, TCM_MAX_RULES / TCM_NR_SETS));
    if (!errors.empty()) {
        return std::unexpected(join_lines(errors));
    }
    return {};
}

Result<void> Datapath::apply(const std::vector<Policy> &policies) {
    if (auto ok = check(policies); !ok)
        return ok;
    auto *skel = impl_->skel;
    const uint32_t active = impl_->runtime->active_set & 1, next = active ^ 1;
    auto fail = [&](std::string_view what, int err) {
        return std::unexpected(fmt::format("cannot {}: {} (the active policy set is unchanged)",
                                           what, errno_text(err)));
    };

    // Rank: priority, then the longer prefix, then the name: a total order.
    std::vector<const Policy *> order;
    for (const auto &p : policies)
        order.push_back(&p);
    std::ranges::sort(order, [](const Policy *a, const Policy *b) {
        auto ka = std::tuple(a->priority, -static_cast<int>(specificity(a->match)), a->name);
        auto kb = std::tuple(b->priority, -static_cast<int>(specificity(b->match)), b->name);
        return ka < kb;
    });
    std::vector<Entry> entries;
    for (uint32_t rank = 0; rank < order.size(); ++rank) {
        auto slot = static_cast<uint32_t>(order[rank] - policies.data());
        auto es = entries_of(*order[rank], slot, rank);
        entries.insert(entries.end(), es.begin(), es.end());
    }
    // Masks in order of the best rank they hold.
    std::map<tcm_class_key, uint32_t, KeyLess> min_rank;
    for (const auto &e : entries) {
        auto [it, fresh] = min_rank.emplace(e.mask, e.rank);
        if (!fresh)
            it->second = std::min(it->second, e.rank);
    }
    std::vector<std::pair<uint32_t, tcm_class_key>> masks;
    for (const auto &[m, r] : min_rank)
        masks.emplace_back(r, m);
    std::ranges::sort(masks, [](const auto &a, const auto &b) { return a.first < b.first; });

    // 1. Clear what an earlier apply left in the inactive set.
    int rules_fd = impl_->fd(skel->maps.tcm_rules);
    {
        std::vector<tcm_rule_key> stale;
        tcm_rule_key k{}, next_key{};
        void *prev = nullptr;
        while (bpf_map_get_next_key(rules_fd, prev, &next_key) == 0) {
            if ((next_key.set_mask >> 16) == next)
                stale.push_back(next_key);
            k = next_key;
            prev = &k;
        }
        for (const auto &s : stale)
            bpf_map_delete_elem(rules_fd, &s);
    }
    // 2. Configs, masks and rules of the inactive set; a parent is named by its slot.
    std::map<std::string, uint32_t> slot_of;
    for (uint32_t slot = 0; slot < policies.size(); ++slot)
        slot_of[policies[slot].name] = slot;
    for (uint32_t slot = 0; slot < policies.size(); ++slot) {
        const Policy &p = policies[slot];
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
        if (!p.parent.empty())
            cfg.parent = next * TCM_MAX_POLICIES + slot_of.at(p.parent) + 1;
        std::snprintf(cfg.name, sizeof(cfg.name), "%s", p.name.c_str());
        uint32_t idx = next * TCM_MAX_POLICIES + slot;
        if (int err = bpf_map_update_elem(impl_->fd(skel->maps.tcm_policy_cfg), &idx, &cfg, 0))
            return fail("write a policy config", err);
    }
    std::map<tcm_class_key, uint32_t, KeyLess> mask_index;
    for (uint32_t i = 0; i < masks.size(); ++i) {
        tcm_mask m{};
        m.mask = masks[i].second;
        m.min_rank = masks[i].first;
        mask_index[m.mask] = i;
        uint32_t idx = next * TCM_MAX_MASKS + i;
        if (int err = bpf_map_update_elem(impl_->fd(skel->maps.tcm_masks), &idx, &m, 0))
            return fail("write a classifier mask", err);
    }
    // Two policies with the same match: only the better rank can ever win. Entries come in rank
    // order and the inactive set starts empty, so the first of a key is the one to keep.
    std::set<std::pair<uint32_t, tcm_class_key>, RuleKeyLess> written;
    for (const auto &e : entries) {
        tcm_rule_key rk{};
        rk.set_mask = next << 16 | mask_index[e.mask];
        rk.key = e.key;
        tcm_rule r{e.slot, e.rank};
        if (!written.emplace(rk.set_mask, rk.key).second)
            continue;
        if (int err = bpf_map_update_elem(rules_fd, &rk, &r, 0))
            return fail("write a classifier rule", err);
    }
    // 3. Fresh state, counters and no flows for ids that were not active: an id can be reused.
    int ncpus = libbpf_num_possible_cpus();
    std::vector<tcm_counters> zero_counters(ncpus);
    std::set<uint32_t> fresh, kept;
    for (const auto &p : policies)
        (impl_->active.contains(p.id) ? kept : fresh).insert(p.id);
    for (const auto &p : policies) {
        // A policy that starts (or stops) being a fleet policy holds no tokens from before.
        auto was = impl_->active.find(p.id);
        if (fresh.contains(p.id) || (was != impl_->active.end() && was->second.fleet != p.fleet))
            fleet_revoke(p.id);
    }
    for (uint32_t id : fresh) {
        tcm_flow zero{};
        bpf_map_update_elem(impl_->fd(skel->maps.tcm_policy_state), &id, &zero, 0);
        bpf_map_update_elem(impl_->fd(skel->maps.tcm_policy_stats), &id, zero_counters.data(), 0);
    }
    int flows_fd = impl_->fd(skel->maps.tcm_flows);
    if (!fresh.empty())
        delete_flows_if(flows_fd, [&](uint32_t id) { return fresh.contains(id); });
    tcm_set_info info{static_cast<uint32_t>(masks.size()), static_cast<uint32_t>(policies.size())};
    if (int err = bpf_map_update_elem(impl_->fd(skel->maps.tcm_sets), &next, &info, 0))
        return fail("write the policy set header", err);

    // 4. One store makes the new set active.
    __atomic_store_n(&impl_->runtime->active_set, next, __ATOMIC_RELEASE);

    // 5. The flows of policies that are gone: a scan of the whole flow table, so only when a
    // policy was removed (a plain update keeps every id).
    if (std::ranges::any_of(impl_->active, [&](const auto &a) { return !kept.contains(a.first); }))
        delete_flows_if(flows_fd,
                        [&](uint32_t id) { return !kept.contains(id) && !fresh.contains(id); });

    // 6. --shape sockets: each policy's pacing rate; a change bumps its generation so that its
    // sockets re-read their share, and so does a policy that left (its sockets go unpaced).
    int shape_fd = impl_->fd(skel->maps.tcm_shape_cfg);
    uint32_t shaping = 0;
    auto write_shape = [&](uint32_t id, uint64_t rate, uint32_t per_socket) {
        tcm_shape_cfg old{};
        bpf_map_lookup_elem(shape_fd, &id, &old);
        if (old.rate == rate && old.per_socket == per_socket)
            return;
        tcm_shape_cfg cfg{rate, per_socket, old.gen + 1};
        bpf_map_update_elem(shape_fd, &id, &cfg, 0);
    };
    for (const auto &p : policies) {
        bool on = p.shape == TCM_SHAPE_SOCKETS;
        shaping += on;
        write_shape(p.id, on ? shape_payload_rate(p) : 0, p.per == TCM_PER_5TUPLE);
    }
    for (const auto &[id, p] : impl_->active)
        if (!kept.contains(id) && !fresh.contains(id))
            write_shape(id, 0, 0);
    __atomic_store_n(&skel->bss->tcm_shape_policies, shaping, __ATOMIC_RELEASE);

    impl_->active.clear();
    for (const auto &p : policies)
        impl_->active[p.id] = p;
    return {};
}

uint64_t shape_payload_rate(const Policy &p) {
    if (p.meter.packet_mode)
        return 0;
    // A full-sized segment: 1448 bytes of payload under 52 of TCP/IP headers (timestamps), 14
    // more of Ethernet with --length l2, and the policy's overhead.
    const uint64_t payload = 1448;
    uint64_t wire = payload + 52 + (p.length == TCM_LEN_L2 ? 14 : 0) + p.overhead;
    unsigned __int128 r = static_cast<unsigned __int128>(p.meter.cir) * payload * 99;
    uint64_t rate = static_cast<uint64_t>(r / (static_cast<unsigned __int128>(wire) * 8 * 100));
    return std::max<uint64_t>(rate, 1);
}

void Datapath::set_shape_ifaces(const std::vector<uint32_t> &ifindexes) {
    auto *bss = impl_->skel->bss;
    uint32_t n = 0;
    for (uint32_t idx : ifindexes)
        if (n < TCM_SHAPE_MAX_IFACES)
            bss->tcm_shape_ifaces[n++] = idx;
    __atomic_store_n(&bss->tcm_shape_n_ifaces, n, __ATOMIC_RELEASE);
}

int Datapath::sockops_prog_fd() const {
    return bpf_program__fd(impl_->skel->progs.tricolor_sockops);
}

std::map<uint32_t, ShapeCounters> Datapath::shape_counters() const {
    std::map<uint32_t, ShapeCounters> out;
    int ncpus = libbpf_num_possible_cpus();
    std::vector<tcm_tcp_counters> per_cpu(ncpus);
    for (const auto &[id, p] : impl_->active) {
        ShapeCounters c;
        tcm_shape_state st{};
        uint32_t key = id;
        if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_shape_state), &key, &st) == 0)
            c.sockets = st.sockets > 0x7fffffffu ? 0 : st.sockets;
        if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_tcp_stats), &key, per_cpu.data()) ==
            0) {
            constexpr size_t n = sizeof(tcm_tcp_counters) / sizeof(uint64_t);
            auto *s = reinterpret_cast<uint64_t *>(&c.tcp);
            for (const auto &v : per_cpu) {
                auto *w = reinterpret_cast<const uint64_t *>(&v);
                for (size_t i = 0; i < n; ++i)
                    s[i] += w[i];
            }
        }
        out[id] = c;
    }
    return out;
}

namespace {

// Reads every entry of @fd in batches of keys K and values V (V per CPU: @values_per_key of
// them), calling @each(key, values). Falls back to one lookup a key where batching is missing.
template <typename K, typename V, typename F>
void for_each_entry(int fd, size_t values_per_key, F each) {
    size_t chunk = 4096;
    std::vector<K> keys(chunk);
    std::vector<V> values(chunk * values_per_key);
    uint32_t in_batch = 0, out_batch = 0;
    bool first = true;
    for (;;) {
        uint32_t count = static_cast<uint32_t>(chunk);
        int err = bpf_map_lookup_batch(fd, first ? nullptr : &in_batch, &out_batch, keys.data(),
                                       values.data(), &count, nullptr);
        if (err < 0 && err != -ENOENT && err != -ENOSPC && first) {
            // No batch support for this map: walk it key by key.
            K k{}, nk{};
            void *prev = nullptr;
            std::vector<V> v(values_per_key);
            while (bpf_map_get_next_key(fd, prev, &nk) == 0) {
                if (bpf_map_lookup_elem(fd, &nk, v.data()) == 0)
                    each(nk, v.data());
                k = nk;
                prev = &k;
            }
            return;
        }
        if (err == -ENOSPC && count == 0) { // a hash bucket larger than the chunk
            chunk *= 2;
            keys.resize(chunk);
            values.resize(chunk * values_per_key);
            continue;
        }
        for (uint32_t i = 0; i < count; ++i)
            each(keys[i], &values[i * values_per_key]);
        if (err < 0) // ENOENT: that was the last batch
            return;
        in_batch = out_batch;
        first = false;
    }
}

} // namespace

std::vector<Policy> Datapath::policies() const {
    std::vector<Policy> out;
    for (const auto &[id, p] : impl_->active)
        out.push_back(p);
    return out;
}

Result<void> Datapath::upsert(const Policy &policy) {
    auto set = policies();
    auto it = std::ranges::find(set, policy.id, &Policy::id);
    if (it != set.end())
        *it = policy;
    else
        set.push_back(policy);
    return apply(set);
}

Result<void> Datapath::remove(uint32_t policy_id) {
    auto set = policies();
    auto it = std::ranges::find(set, policy_id, &Policy::id);
    if (it == set.end())
        return std::unexpected(fmt::format("no policy with id {}", policy_id));
    set.erase(it);
    return apply(set);
}

std::map<uint32_t, tcm_counters> Datapath::policy_counters() const {
    std::map<uint32_t, tcm_counters> out;
    size_t ncpus = static_cast<size_t>(libbpf_num_possible_cpus());
    for_each_entry<uint32_t, tcm_counters>(impl_->fd(impl_->skel->maps.tcm_policy_stats), ncpus,
                                           [&](uint32_t id, const tcm_counters *per_cpu) {
                                               if (!impl_->active.contains(id))
                                                   return;
                                               tcm_counters sum{};
                                               for (size_t c = 0; c < ncpus; ++c)
                                                   for (int i = 0; i < TCM_NR_COLORS; ++i) {
                                                       sum.packets[i] += per_cpu[c].packets[i];
                                                       sum.bytes[i] += per_cpu[c].bytes[i];
                                                   }
                                               out[id] = sum;
                                           });
    return out;
}

tcm_counters Datapath::policy_counter(uint32_t id) const {
    size_t ncpus = static_cast<size_t>(libbpf_num_possible_cpus());
    std::vector<tcm_counters> per_cpu(ncpus);
    tcm_counters sum{};
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_policy_stats), &id, per_cpu.data()))
        return sum;
    for (const auto &c : per_cpu)
        for (int i = 0; i < TCM_NR_COLORS; ++i) {
            sum.packets[i] += c.packets[i];
            sum.bytes[i] += c.bytes[i];
        }
    return sum;
}

tcm_global_counters Datapath::global_counters() const {
    int ncpus = libbpf_num_possible_cpus();
    std::vector<tcm_global_counters> per_cpu(ncpus);
    tcm_global_counters sum{};
    uint32_t zero = 0;
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_global_stats), &zero, per_cpu.data()) !=
        0)
        return sum;
    constexpr size_t n = sizeof(tcm_global_counters) / sizeof(uint64_t);
    auto *s = reinterpret_cast<uint64_t *>(&sum);
    for (const auto &c : per_cpu) {
        auto *v = reinterpret_cast<const uint64_t *>(&c);
        for (size_t i = 0; i < n; ++i)
            s[i] += v[i];
    }
    return sum;
}

std::vector<Flow> Datapath::flows() const {
    std::vector<Flow> out;
    for_each_entry<tcm_flow_key, tcm_flow>(impl_->fd(impl_->skel->maps.tcm_flows), 1,
                                           [&](const tcm_flow_key &k, const tcm_flow *v) {
                                               out.push_back(Flow{k, *v});
                                           });
    return out;
}

tcm_flow Datapath::policy_state(uint32_t id) const {
    tcm_flow f{};
    bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_policy_state), &id, &f);
    return f;
}

void Datapath::fleet_grant(uint32_t id, uint64_t tokens) {
    if (id >= TCM_MAX_POLICIES || tokens == 0)
        return;
    tcm_fleet_grant &g = impl_->fleet[id];
    __atomic_store_n(&g.granted, g.granted + tokens, __ATOMIC_RELEASE); // the only writer
}

void Datapath::fleet_revoke(uint32_t id) {
    if (id >= TCM_MAX_POLICIES)
        return;
    tcm_fleet_grant &g = impl_->fleet[id];
    __atomic_store_n(&g.revoke_upto, __atomic_load_n(&g.granted, __ATOMIC_RELAXED),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&g.revoke_seq, g.revoke_seq + 1, __ATOMIC_RELEASE);
}

void Datapath::fleet_lease(uint32_t id, uint64_t until_ns) {
    if (id < TCM_MAX_POLICIES)
        __atomic_store_n(&impl_->fleet[id].lease_until_ns, until_ns, __ATOMIC_RELEASE);
}

FleetLocal Datapath::fleet_local(uint32_t id) const {
    FleetLocal out;
    if (id >= TCM_MAX_POLICIES)
        return out;
    const tcm_fleet_grant &g = impl_->fleet[id];
    // drained before C: a fold between the reads counts its tokens twice, never zero times.
    uint64_t drained = __atomic_load_n(&g.drained, __ATOMIC_ACQUIRE);
    uint64_t seen = __atomic_load_n(&g.revoke_seen, __ATOMIC_ACQUIRE);
    out.granted = __atomic_load_n(&g.granted, __ATOMIC_ACQUIRE);
    out.spilled = __atomic_load_n(&g.spilled, __ATOMIC_ACQUIRE);
    uint64_t pending = out.granted > drained ? out.granted - drained : 0;
    if (seen != __atomic_load_n(&g.revoke_seq, __ATOMIC_ACQUIRE)) {
        uint64_t upto = __atomic_load_n(&g.revoke_upto, __ATOMIC_ACQUIRE);
        pending = out.granted > std::max(upto, drained) ? out.granted - std::max(upto, drained) : 0;
        out.held = pending; // C is emptied at the next packet
        return out;
    }
    out.held = pending + policy_state(id).meter.c_tokens;
    return out;
}

uint64_t Datapath::now_ns() const {
    if (impl_->testing)
        return impl_->skel->bss->tcm_test_clock_ns;
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts); // what bpf_ktime_get_ns() reads
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

size_t Datapath::reclaim_idle_flows() {
    return reclaim_idle_flows(0, 0);
}

size_t Datapath::reclaim_idle_flows(uint64_t min_idle_ns, size_t pressure_at) {
    std::map<uint32_t, tcm_meter_config> configs;
    for (const auto &[id, p] : impl_->active)
        configs[id] = make_meter_config(p.meter);
    const uint64_t now = now_ns();
    int fd = impl_->fd(impl_->skel->maps.tcm_flows);
    size_t reclaimed = 0;
    auto all = flows();
    bool pressure = pressure_at && all.size() > pressure_at;
    for (const auto &f : all) {
        auto cfg = configs.find(f.key.policy_id);
        if (cfg == configs.end() || f.state.lock)
            continue;
        if (!pressure && min_idle_ns && (f.state.flags & TCM_FLOW_F_STARTED) &&
            now - std::min<uint64_t>(now, f.state.meter.last_ns) < min_idle_ns)
            continue; // seen recently: left for an operator to look at
        // Exactly what the next packet would see: the shared refill code on a copy.
        tcm_meter_state s = f.state.meter;
        meter_refill(&cfg->second, &s, now);
        bool full = (f.state.flags & TCM_FLOW_F_STARTED) == 0 ||
                    (s.c_tokens >= cfg->second.c_size && s.e_tokens >= cfg->second.e_size);
        if (full && bpf_map_delete_elem(fd, &f.key) == 0)
            ++reclaimed;
    }
    return reclaimed;
}

void Datapath::set_drop_malformed(bool drop) {
    __atomic_store_n(&impl_->runtime->drop_malformed, drop ? 1u : 0u, __ATOMIC_RELEASE);
}

uint32_t Datapath::active_set() const {
    return impl_->runtime->active_set;
}
int Datapath::xdp_prog_fd() const {
    return bpf_program__fd(impl_->skel->progs.tricolor_xdp);
}
int Datapath::tc_prog_fd() const {
    return bpf_program__fd(impl_->skel->progs.tricolor_tc);
}

void Datapath::set_clock(uint64_t now_ns) {
    if (!impl_->testing)
        throw std::logic_error("set_clock needs a Datapath loaded in testing mode");
    impl_->skel->bss->tcm_test_clock_ns = now_ns;
}

Datapath::Verdict Datapath::last_verdict() const {
    if (!impl_->testing)
        throw std::logic_error("last_verdict needs a Datapath loaded in testing mode");
    Verdict v;
    if (uint32_t id = impl_->skel->bss->tcm_test_last_policy; id != 0) {
        v.policy_id = id - 1;
        v.color = static_cast<Color>(impl_->skel->bss->tcm_test_last_color);
    }
    return v;
}

Datapath::TestRun Datapath::run_xdp(const std::vector<uint8_t> &frame) const {
    TestRun r;
    r.data_out.resize(frame.size() + 256);
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = r.data_out.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()),
                .data_size_out = static_cast<uint32_t>(r.data_out.size()), .repeat = 1);
    if (int err = bpf_prog_test_run_opts(xdp_prog_fd(), &opts); err < 0)
        throw std::runtime_error(fmt::format("XDP test run failed: {}", errno_text(err)));
    r.retval = opts.retval;
    r.data_out.resize(opts.data_size_out);
    return r;
}

Datapath::TestRun Datapath::run_tc(const std::vector<uint8_t> &frame,
                                   const __sk_buff *skb_in) const {
    TestRun r;
    __sk_buff in{};
    if (skb_in)
        in = *skb_in;
    r.data_out.resize(frame.size() + 256);
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = r.data_out.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()),
                .data_size_out = static_cast<uint32_t>(r.data_out.size()), .ctx_in = &in,
                .ctx_out = &r.skb_out, .ctx_size_in = sizeof(in), .ctx_size_out = sizeof(r.skb_out),
                .repeat = 1);
    if (int err = bpf_prog_test_run_opts(tc_prog_fd(), &opts); err < 0)
        throw std::runtime_error(fmt::format("tc test run failed: {}", errno_text(err)));
    r.retval = opts.retval;
    r.data_out.resize(opts.data_size_out);
    return r;
}

} // namespace tricolor
