// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// meter.cpp: parameter rules of docs/spec.md §1 and the translation to the kernel's representation.
#include "tricolor/meter.hpp"
#include "tricolor/text.hpp"

#include "tricolor/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace tricolor {

namespace {

// "trtcm", "srtcm and rfc4115": the algorithms of which `pred` holds.
template <class Pred>
std::string takers(Pred pred) {
    std::string who;
    for (const AlgoInfo &a : algorithms())
        if (pred(a))
            who += fmt::format("{}{}", who.empty() ? "" : " and ", a.name);
    return who;
}

} // namespace

// The table of algorithms. A new one is a row here, its marking in bpf/lib/meter.h and its
// number in tricolor_abi.h (docs/hacking.md).
const std::vector<AlgoInfo> &algorithms() {
    static const std::vector<AlgoInfo> table = {
        {Algo::srtcm, "srtcm", "RFC 2697", SecondBucket::overflow, false},
        {Algo::trtcm, "trtcm", "RFC 2698", SecondBucket::peak, false},
        {Algo::rfc4115, "rfc4115", "RFC 4115", SecondBucket::excess, true},
    };
    return table;
}

const AlgoInfo &info(Algo algo) {
    for (const AlgoInfo &a : algorithms())
        if (a.algo == algo)
            return a;
    throw std::logic_error(fmt::format("algorithm {} is not in the table", static_cast<int>(algo)));
}

std::string algo_names(bool with_standard) {
    std::string out;
    const auto &t = algorithms();
    for (size_t i = 0; i < t.size(); ++i) {
        out += fmt::format("{}{}", i == 0 ? "" : i + 1 == t.size() ? " or " : ", ", t[i].name);
        if (with_standard)
            out += fmt::format(" ({})", t[i].standard);
    }
    return out;
}

std::string_view to_string(Algo algo) {
    return info(algo).name;
}

const std::vector<SecondParam> &second_params() {
    static const std::vector<SecondParam> params = {
        {"pir", "PIR", &MeterParams::pir, true},
        {"pbs", "PBS", &MeterParams::pbs, false},
        {"ebs", "EBS", &MeterParams::ebs, false},
        {"eir", "EIR", &MeterParams::eir, true},
    };
    return params;
}

bool takes(Algo algo, const SecondParam &param) {
    switch (info(algo).second) {
    case SecondBucket::overflow:
        return param.field == &MeterParams::ebs;
    case SecondBucket::excess:
        return param.field == &MeterParams::ebs || param.field == &MeterParams::eir;
    case SecondBucket::peak:
        return param.field == &MeterParams::pbs || param.field == &MeterParams::pir;
    }
    return false;
}

// The one of @algo's parameters that is a rate (@rate) or a size, or nullptr.
static const SecondParam *second_param(Algo algo, bool rate) {
    for (const SecondParam &p : second_params())
        if (p.rate == rate && takes(algo, p))
            return &p;
    return nullptr;
}

std::string_view second_rate_name(Algo algo) {
    const SecondParam *p = second_param(algo, true);
    return p ? p->name : "";
}

std::string_view second_size_name(Algo algo) {
    return second_param(algo, false)->name; // every second bucket has a size
}

uint64_t second_rate(const MeterParams &m) {
    const SecondParam *p = second_param(m.algo, true);
    return p ? (m.*p->field).value_or(0) : 0;
}

uint64_t second_size(const MeterParams &m) {
    return (m.*second_param(m.algo, false)->field).value_or(0);
}

std::string_view to_string(Color color) {
    switch (color) {
    case Color::green:
        return "green";
    case Color::yellow:
        return "yellow";
    case Color::red:
        return "red";
    }
    return "?";
}

std::optional<Algo> parse_algo(std::string_view text) {
    for (const AlgoInfo &a : algorithms())
        if (text == a.name)
            return a.algo;
    return std::nullopt;
}

std::optional<Color> parse_color(std::string_view text) {
    for (Color c : {Color::green, Color::yellow, Color::red})
        if (text == to_string(c))
            return c;
    return std::nullopt;
}

namespace {

// Checks shared by every parameter; messages speak the user's units.
class Checker {
  public:
    Checker(const MeterParams &p, Validation &v) : p_(p), v_(v) {}

    std::string rate(uint64_t r) const {
        return p_.packet_mode ? fmt::format("{} packets/s", r) : format_rate(r);
    }
    std::string size(uint64_t s) const {
        return p_.packet_mode ? fmt::format("{} packets", s) : fmt::format("{} bytes", s);
    }

    void rate_in_range(std::string_view name, uint64_t r, uint64_t min) {
        if (r < min || r > TCM_METER_MAX_RATE)
            v_.errors.push_back(fmt::format("{} {} is out of range {}..{}", name, rate(r),
                                            rate(min), rate(TCM_METER_MAX_RATE)));
    }
    void size_in_range(std::string_view name, uint64_t s, uint64_t min) {
        if (s < min || s > TCM_METER_MAX_SIZE)
            v_.errors.push_back(fmt::format("{} {} is out of range {}..{} {}", name, size(s), min,
                                            TCM_METER_MAX_SIZE,
                                            p_.packet_mode ? "packets" : "bytes (1 GiB)"));
    }
    void required(std::string_view name, const std::optional<uint64_t> &v) {
        if (!v)
            v_.errors.push_back(fmt::format("{} needs {}", to_string(p_.algo), name));
    }
    void absent(std::string_view name, const std::optional<uint64_t> &v, std::string_view who) {
        if (v)
            v_.errors.push_back(
                fmt::format("{} does not apply to {} ({} only)", name, to_string(p_.algo), who));
    }
    // Packets larger than every bucket that could pass them are always red (byte mode only).
    void warn_small(std::string_view what, uint64_t largest) {
        if (!p_.packet_mode && largest < 1500)
            v_.warnings.push_back(
                fmt::format("{} is {} bytes, below a 1500-byte packet: larger "
                            "packets will be {}",
                            what, largest,
                            info(p_.algo).second == SecondBucket::peak ? "red" : "red or yellow"));
    }

  private:
    const MeterParams &p_;
    Validation &v_;
};

} // namespace

Validation validate(const MeterParams &p) {
    Validation v;
    Checker c(p, v);
    const AlgoInfo &algo = info(p.algo);
    c.rate_in_range("CIR", p.cir, 1);
    c.size_in_range("CBS", p.cbs, 1);

    // A parameter of another algorithm's second bucket is refused, naming those that take it.
    for (const SecondParam &sp : second_params())
        if (!takes(p.algo, sp))
            c.absent(sp.name, p.*sp.field,
                     takers([&](const AlgoInfo &a) { return takes(a.algo, sp); }));

    const std::string_view rate = second_rate_name(p.algo), size = second_size_name(p.algo);
    switch (algo.second) {
    case SecondBucket::peak:
        c.required(rate, p.pir);
        c.required(size, p.pbs);
        if (p.pir) {
            c.rate_in_range(rate, *p.pir, 1);
            if (*p.pir < p.cir)
                v.errors.push_back(fmt::format("{} {} is below CIR {}: {} needs {} >= CIR", rate,
                                               c.rate(*p.pir), c.rate(p.cir), algo.name, rate));
        }
        if (p.pbs) {
            c.size_in_range(size, *p.pbs, 1);
            c.warn_small(size, *p.pbs);
        }
        break;
    case SecondBucket::excess:
        c.rate_in_range(rate, p.eir.value_or(0), 0);
        if (!p.eir)
            v.warnings.push_back(fmt::format(
                "{0} without --{1}: {2} is 0, so E never refills and yellow only spends the {3} it "
                "starts with (give --{1}, or use srtcm)",
                algo.name, "eir", rate, size));
        else if (*p.eir > 0 && p.ebs.value_or(0) == 0)
            v.warnings.push_back(fmt::format("{} has no effect while {} is 0", rate, size));
        [[fallthrough]];
    case SecondBucket::overflow:
        c.size_in_range(size, p.ebs.value_or(0), 0);
        c.warn_small(fmt::format("the larger of CBS and {}", size),
                     std::max(p.cbs, p.ebs.value_or(0)));
        break;
    }
    if (p.warmup_ns && (p.warmup_ns < kMinWarmupNs || p.warmup_ns > TCM_WARM_MAX_NS))
        v.errors.push_back(fmt::format("warmup {} is out of range {}..{}",
                                       format_duration(p.warmup_ns), format_duration(kMinWarmupNs),
                                       format_duration(TCM_WARM_MAX_NS)));
    if (p.cold_factor && !p.warmup_ns)
        v.errors.push_back(
            "cold_factor without warmup: give the warm-up's duration (--warmup 30s)");
    if (p.warmup_ns && (p.cold_factor < TCM_WARM_MIN_K || p.cold_factor > TCM_WARM_MAX_K))
        v.errors.push_back(fmt::format("cold_factor {} is out of range {}..{}", p.cold_factor,
                                       TCM_WARM_MIN_K, TCM_WARM_MAX_K));
    if (p.coupling && !algo.coupling)
        v.errors.push_back(
            fmt::format("coupling applies to {} only, not {} ({}'s buckets are {} coupled)",
                        takers([](const AlgoInfo &a) { return a.coupling; }), algo.name, algo.name,
                        algo.second == SecondBucket::overflow ? "always" : "never"));
    return v;
}

namespace {

// "HH:MM" or "HH:MM:SS" as ns past midnight.
std::optional<uint64_t> parse_time_of_day(std::string_view t) {
    unsigned h = 0, m = 0, s = 0;
    if (t.size() != 5 && t.size() != 8)
        return std::nullopt;
    if (t[2] != ':' || (t.size() == 8 && t[5] != ':') || !parse_whole(t.substr(0, 2), h) ||
        !parse_whole(t.substr(3, 2), m) || (t.size() == 8 && !parse_whole(t.substr(6, 2), s)) ||
        h > 23 || m > 59 || s > 59)
        return std::nullopt;
    return ((h * 60ull + m) * 60 + s) * 1000000000ull;
}

// A UTC time, "2026-11-01" or "2026-11-01T06:00[:00]Z", as ns since the Unix epoch.
std::optional<uint64_t> parse_utc_time(std::string_view t) {
    unsigned y = 0, mo = 0, d = 0;
    if (t.size() < 10 || t[4] != '-' || t[7] != '-' || !parse_whole(t.substr(0, 4), y) ||
        !parse_whole(t.substr(5, 2), mo) || !parse_whole(t.substr(8, 2), d) || y < 1970 ||
        y > 2200 || mo < 1 || mo > 12 || d < 1)
        return std::nullopt;
    static constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d > kDays[mo - 1] + (mo == 2 && leap))
        return std::nullopt;
    uint64_t tod = 0;
    if (t.size() > 10) {
        if (t[10] != 'T' || t.back() != 'Z')
            return std::nullopt;
        auto time = parse_time_of_day(t.substr(11, t.size() - 12));
        if (!time)
            return std::nullopt;
        tod = *time;
    }
    return quota_days(y, mo, d) * TCM_NS_PER_DAY + tod;
}

} // namespace

Result<ParsedMeter> parse_meter_spec(const MeterSpec &spec) {
    std::vector<std::string> errors;
    ParsedMeter out;
    MeterParams &p = out.params;
    if (auto algo = parse_algo(spec.algo))
        p.algo = *algo;
    else
        errors.push_back(fmt::format("algo '{}' is not {}", spec.algo, algo_names()));
    p.color_aware = spec.color_aware;
    p.packet_mode = spec.packet_mode;
    p.coupling = spec.coupling;
    if (spec.start && *spec.start != "full" && *spec.start != "empty")
        errors.push_back(fmt::format("start '{}' is not full or empty", *spec.start));
    p.start_empty = spec.start && *spec.start == "empty";

    auto value = [&](std::string_view name, const std::string &text, bool is_rate) -> uint64_t {
        Result<uint64_t> v = is_rate
                                 ? (p.packet_mode ? parse_packet_rate(text) : parse_rate(text))
                                 : (p.packet_mode ? parse_packet_count(text) : parse_size(text));
        if (!v) {
            errors.push_back(fmt::format("{}: {}", name, v.error()));
            return 0;
        }
        return *v;
    };
    auto optional_value = [&](std::string_view name, const std::optional<std::string> &text,
                              bool is_rate) -> std::optional<uint64_t> {
        if (!text)
            return std::nullopt;
        return value(name, *text, is_rate);
    };
    if (spec.warmup) {
        if (auto d = parse_duration(*spec.warmup); !d)
            errors.push_back(fmt::format("warmup: {}", d.error()));
        else if (*d == 0)
            errors.push_back("warmup: 0 is no warm-up: leave it out");
        else
            p.warmup_ns = *d;
    }
    if (spec.cold_factor) {
        if (!parse_whole(*spec.cold_factor, p.cold_factor) || p.cold_factor == 0)
            errors.push_back(fmt::format("cold_factor: '{}' is not a whole number from {} to {}",
                                         *spec.cold_factor, TCM_WARM_MIN_K, TCM_WARM_MAX_K));
    } else if (p.warmup_ns) {
        p.cold_factor = kDefaultColdFactor;
    }
    if (spec.quota) {
        std::string_view q = *spec.quota;
        auto slash = q.find('/');
        if (slash == std::string_view::npos) {
            errors.push_back(fmt::format("quota: '{}' is not BYTES/PERIOD (50g/30d, 2g/1d, "
                                         "100g/month)",
                                         q));
        } else {
            if (auto b = parse_size(q.substr(0, slash)); !b)
                errors.push_back(fmt::format("quota: {}", b.error()));
            else if (*b == 0)
                errors.push_back("quota: 0 bytes is no quota: leave it out");
            else
                p.quota_bytes = *b;
            std::string_view period = q.substr(slash + 1);
            if (period != "month") {
                if (auto d = parse_duration(period); !d)
                    errors.push_back(fmt::format("quota: the period: {}", d.error()));
                else if (*d < 1000000000)
                    errors.push_back(fmt::format("quota: a period of {} is shorter than a "
                                                 "second",
                                                 period));
                else
                    p.quota_period_ns = *d;
            }
        }
    }
    if (spec.quota_reset) {
        std::string_view r = *spec.quota_reset;
        if (!spec.quota) {
            errors.push_back("quota_reset without quota: give --quota BYTES/PERIOD");
        } else if (p.quota_period_ns || !spec.quota->ends_with("/month")) {
            if (auto t = parse_utc_time(r))
                p.quota_anchor_ns = *t;
            else
                errors.push_back(fmt::format("quota_reset: '{}' is not a UTC time "
                                             "(2026-11-01 or 2026-11-01T06:00:00Z)",
                                             r));
        } else {
            // A month's: the day, and a time of day.
            auto t = r.find('T');
            unsigned day = 0;
            if (!parse_whole(r.substr(0, t), day) || day < 1 || day > 31) {
                errors.push_back(fmt::format("quota_reset: '{}' is not a day of the month and "
                                             "a time (1, 15T06:00, 1T00:00:00)",
                                             r));
            } else if (day > 28) {
                errors.push_back(fmt::format("quota_reset: day {} is not in every month (February "
                                             "has 28 or 29 days): give 1 to 28",
                                             day));
            } else {
                p.quota_month_day = day;
                if (t != std::string_view::npos) {
                    if (auto tod = parse_time_of_day(r.substr(t + 1)))
                        p.quota_anchor_ns = *tod;
                    else
                        errors.push_back(fmt::format("quota_reset: '{}' is not HH:MM or "
                                                     "HH:MM:SS",
                                                     r.substr(t + 1)));
                }
            }
        }
    } else if (p.quota_bytes && !p.quota_period_ns) {
        p.quota_month_day = 1; // the first of the month, at midnight UTC
    }
    if (spec.over) {
        std::string_view o = *spec.over;
        if (!spec.quota)
            errors.push_back("over without quota: the over meter applies once a quota is used");
        else if (o != "drop") {
            MeterParams::Over over;
            over.algo = p.algo;
            bool has_cir = false, has_cbs = false;
            for (size_t at = 0; at <= o.size();) {
                size_t end = o.find(',', at);
                if (end == std::string_view::npos)
                    end = o.size();
                std::string_view kv = o.substr(at, end - at);
                at = end + 1;
                auto eq = kv.find('=');
                std::string_view k = kv.substr(0, eq),
                                 v = eq == std::string_view::npos ? "" : kv.substr(eq + 1);
                std::string text(v);
                auto rate = [&](std::string_view name) -> std::optional<uint64_t> {
                    auto r = p.packet_mode ? parse_packet_rate(text) : parse_rate(text);
                    if (!r)
                        errors.push_back(fmt::format("over: {}: {}", name, r.error()));
                    return r ? std::optional<uint64_t>(*r) : std::nullopt;
                };
                auto size = [&](std::string_view name) -> std::optional<uint64_t> {
                    auto r = p.packet_mode ? parse_packet_count(text) : parse_size(text);
                    if (!r)
                        errors.push_back(fmt::format("over: {}: {}", name, r.error()));
                    return r ? std::optional<uint64_t>(*r) : std::nullopt;
                };
                if (eq == std::string_view::npos) {
                    errors.push_back(fmt::format("over: '{}' is not KEY=VALUE (cir=1mbit,cbs=16k; "
                                                 "or drop)",
                                                 kv));
                } else if (k == "algo") {
                    if (auto a = parse_algo(v))
                        over.algo = *a;
                    else
                        errors.push_back(fmt::format("over: algo '{}' is not {}", v, algo_names()));
                } else if (k == "cir") {
                    over.cir = rate("CIR").value_or(0);
                    has_cir = true;
                } else if (k == "cbs") {
                    over.cbs = size("CBS").value_or(0);
                    has_cbs = true;
                } else if (k == "ebs") {
                    over.ebs = size("EBS");
                } else if (k == "pbs") {
                    over.pbs = size("PBS");
                } else if (k == "pir") {
                    over.pir = rate("PIR");
                } else if (k == "eir") {
                    over.eir = rate("EIR");
                } else {
                    errors.push_back(fmt::format("over: unknown key '{}' (algo, cir, cbs, ebs, "
                                                 "pir, pbs, eir)",
                                                 k));
                }
            }
            if (!has_cir || !has_cbs)
                errors.push_back("over: the over meter needs cir and cbs (or: drop)");
            p.over = over;
        }
    }
    p.cir = value("CIR", spec.cir, true);
    p.cbs = value("CBS", spec.cbs, false);
    p.ebs = optional_value("EBS", spec.ebs, false);
    p.pir = optional_value("PIR", spec.pir, true);
    p.pbs = optional_value("PBS", spec.pbs, false);
    p.eir = optional_value("EIR", spec.eir, true);

    // Range rules only make sense on values that parsed.
    if (errors.empty()) {
        Validation v = validate(p);
        errors = std::move(v.errors);
        out.warnings = std::move(v.warnings);
        if (p.over) {
            Validation ov = validate(over_params(p));
            for (auto &e : ov.errors)
                errors.push_back("over: " + e);
            for (auto &w : ov.warnings)
                out.warnings.push_back("over: " + w);
        }
    }
    if (!errors.empty()) {
        return std::unexpected(join_lines(errors));
    }
    return out;
}

uint64_t edt_recip(const tcm_meter_config &c) {
    uint64_t rate =
        info(static_cast<Algo>(c.algo)).second == SecondBucket::peak ? c.e_rate : c.c_rate;
    return meter_recip(rate);
}

tcm_meter_config make_meter_config(const MeterParams &p) {
    uint32_t flags = (p.color_aware ? TCM_METER_F_COLOR_AWARE : 0) |
                     (p.packet_mode ? TCM_METER_F_PACKET_MODE : 0) |
                     (p.coupling ? TCM_METER_F_COUPLED : 0) |
                     (p.start_empty ? TCM_METER_F_START_EMPTY : 0) |
                     (p.warmup_ns ? TCM_METER_F_WARM : 0) | (p.quota_bytes ? TCM_METER_F_QUOTA : 0);
    tcm_meter_config cfg{};
    meter_config_init(&cfg, static_cast<uint32_t>(p.algo), flags, p.cir, p.cbs, second_rate(p),
                      second_size(p));
    return cfg;
}

tcm_warm_config make_warm_config(const MeterParams &p) {
    tcm_warm_config w{};
    meter_warm_config_init(&w, p.warmup_ns, p.cold_factor);
    return w;
}

MeterParams over_params(const MeterParams &p) {
    MeterParams o;
    if (!p.over)
        return o;
    o.algo = p.over->algo;
    o.cir = p.over->cir;
    o.cbs = p.over->cbs;
    o.ebs = p.over->ebs;
    o.pir = p.over->pir;
    o.pbs = p.over->pbs;
    o.eir = p.over->eir;
    o.color_aware = p.color_aware;
    o.packet_mode = p.packet_mode;
    return o;
}

tcm_quota_config make_quota_config(const MeterParams &p) {
    tcm_quota_config q{};
    if (!p.quota_bytes)
        return q;
    quota_config_init(&q, p.quota_bytes, p.quota_period_ns, p.quota_anchor_ns, p.quota_month_day);
    if (p.over)
        q.over = make_meter_config(over_params(p));
    else
        q.flags |= TCM_QUOTA_F_DROP;
    return q;
}

tcm_policy_ext make_policy_ext(const MeterParams &p) {
    return {make_warm_config(p), make_quota_config(p)};
}

} // namespace tricolor
