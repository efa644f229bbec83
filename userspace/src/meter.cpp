// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// meter.cpp: parameter rules of docs/spec.md §1 and the translation to the kernel's representation.
#include "tricolor/meter.hpp"
#include "tricolor/text.hpp"

#include "tricolor/units.hpp"

#include <fmt/format.h>

namespace tricolor {

std::string_view to_string(Algo algo) {
    switch (algo) {
    case Algo::srtcm:
        return "srtcm";
    case Algo::trtcm:
        return "trtcm";
    case Algo::rfc4115:
        return "rfc4115";
    }
    return "?";
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
    for (Algo a : {Algo::srtcm, Algo::trtcm, Algo::rfc4115})
        if (text == to_string(a))
            return a;
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
            v_.warnings.push_back(fmt::format("{} is {} bytes, below a 1500-byte packet: larger "
                                              "packets will be {}",
                                              what, largest,
                                              p_.algo == Algo::trtcm ? "red" : "red or yellow"));
    }

  private:
    const MeterParams &p_;
    Validation &v_;
};

} // namespace

Validation validate(const MeterParams &p) {
    Validation v;
    Checker c(p, v);
    c.rate_in_range("CIR", p.cir, 1);
    c.size_in_range("CBS", p.cbs, 1);

    switch (p.algo) {
    case Algo::srtcm:
        c.absent("PIR", p.pir, "trtcm");
        c.absent("PBS", p.pbs, "trtcm");
        c.absent("EIR", p.eir, "rfc4115");
        c.size_in_range("EBS", p.ebs.value_or(0), 0);
        c.warn_small("the larger of CBS and EBS", std::max(p.cbs, p.ebs.value_or(0)));
        break;
    case Algo::trtcm:
        c.absent("EBS", p.ebs, "srtcm and rfc4115");
        c.absent("EIR", p.eir, "rfc4115");
        c.required("PIR", p.pir);
        c.required("PBS", p.pbs);
        if (p.pir) {
            c.rate_in_range("PIR", *p.pir, 1);
            if (*p.pir < p.cir)
                v.errors.push_back(fmt::format("PIR {} is below CIR {}: trtcm needs PIR >= CIR",
                                               c.rate(*p.pir), c.rate(p.cir)));
        }
        if (p.pbs) {
            c.size_in_range("PBS", *p.pbs, 1);
            c.warn_small("PBS", *p.pbs);
        }
        break;
    case Algo::rfc4115:
        c.absent("PIR", p.pir, "trtcm");
        c.absent("PBS", p.pbs, "trtcm");
        c.rate_in_range("EIR", p.eir.value_or(0), 0);
        c.size_in_range("EBS", p.ebs.value_or(0), 0);
        if (p.eir.value_or(0) > 0 && p.ebs.value_or(0) == 0)
            v.warnings.push_back("EIR has no effect while EBS is 0");
        c.warn_small("the larger of CBS and EBS", std::max(p.cbs, p.ebs.value_or(0)));
        break;
    }
    if (p.coupling && p.algo != Algo::rfc4115)
        v.errors.push_back(fmt::format("coupling applies to rfc4115 only, not {} (srtcm is always "
                                       "coupled, trtcm never)",
                                       to_string(p.algo)));
    return v;
}

Result<ParsedMeter> parse_meter_spec(const MeterSpec &spec) {
    std::vector<std::string> errors;
    ParsedMeter out;
    MeterParams &p = out.params;
    if (auto algo = parse_algo(spec.algo))
        p.algo = *algo;
    else
        errors.push_back(fmt::format("algo '{}' is not srtcm, trtcm or rfc4115", spec.algo));
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
    }
    if (!errors.empty()) {
        return std::unexpected(join_lines(errors));
    }
    return out;
}

uint64_t edt_recip(const tcm_meter_config &c) {
    uint64_t rate = c.algo == TCM_ALGO_TRTCM ? c.e_rate : c.c_rate;
    if (rate <= 1)
        return rate == 0 ? 0 : ~0ull;
    return static_cast<uint64_t>((static_cast<unsigned __int128>(1) << 64) / rate);
}

tcm_meter_config make_meter_config(const MeterParams &p) {
    uint32_t flags = (p.color_aware ? TCM_METER_F_COLOR_AWARE : 0) |
                     (p.packet_mode ? TCM_METER_F_PACKET_MODE : 0) |
                     (p.coupling ? TCM_METER_F_COUPLED : 0) |
                     (p.start_empty ? TCM_METER_F_START_EMPTY : 0);
    uint64_t second_rate = 0, second_size = p.ebs.value_or(0);
    if (p.algo == Algo::trtcm) {
        second_rate = p.pir.value_or(0);
        second_size = p.pbs.value_or(0);
    } else if (p.algo == Algo::rfc4115) {
        second_rate = p.eir.value_or(0);
    }
    tcm_meter_config cfg{};
    meter_config_init(&cfg, static_cast<uint32_t>(p.algo), flags, p.cir, p.cbs, second_rate,
                      second_size);
    return cfg;
}

} // namespace tricolor
