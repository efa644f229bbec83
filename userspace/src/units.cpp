// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// units.cpp: exact decimal parsing. The number is kept as an integer mantissa and a count of
// decimal places, multiplied by the unit in 128-bit arithmetic, and accepted only when the
// result is a whole number of the base unit that fits in 64 bits.
#include "tricolor/units.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <fmt/format.h>

namespace tricolor {
namespace {

struct Suffix {
    std::string_view name;
    uint64_t multiplier;
};

constexpr uint64_t kKi = 1024, kMi = kKi * 1024, kGi = kMi * 1024, kTi = kGi * 1024;

constexpr std::array kRateSuffixes{
    Suffix{"", 1},
    Suffix{"bit", 1},
    Suffix{"kbit", 1000},
    Suffix{"mbit", 1000000},
    Suffix{"gbit", 1000000000},
    Suffix{"tbit", 1000000000000},
    Suffix{"kibit", kKi},
    Suffix{"mibit", kMi},
    Suffix{"gibit", kGi},
    Suffix{"tibit", kTi},
    Suffix{"bps", 8},
    Suffix{"kbps", 8000},
    Suffix{"mbps", 8000000},
    Suffix{"gbps", 8000000000},
    Suffix{"tbps", 8000000000000},
    Suffix{"kibps", 8 * kKi},
    Suffix{"mibps", 8 * kMi},
    Suffix{"gibps", 8 * kGi},
    Suffix{"tibps", 8 * kTi},
};
constexpr std::array kPacketRateSuffixes{
    Suffix{"", 1},           Suffix{"pps", 1},           Suffix{"kpps", 1000},
    Suffix{"mpps", 1000000}, Suffix{"gpps", 1000000000},
};
constexpr std::array kSizeSuffixes{
    Suffix{"", 1},    Suffix{"b", 1},    Suffix{"k", kKi}, Suffix{"kb", kKi},
    Suffix{"m", kMi}, Suffix{"mb", kMi}, Suffix{"g", kGi}, Suffix{"gb", kGi},
};
constexpr std::array kPacketSuffixes{Suffix{"", 1}, Suffix{"pkt", 1}};
constexpr uint64_t kSecond = 1000000000;
constexpr std::array kDurationSuffixes{
    Suffix{"ns", 1},
    Suffix{"us", 1000},
    Suffix{"ms", 1000000},
    Suffix{"s", kSecond},
    Suffix{"m", 60 * kSecond},
    Suffix{"h", 3600 * kSecond},
    Suffix{"d", 86400 * kSecond},
    Suffix{"w", 7 * 86400 * kSecond},
};

bool iequals(std::string_view a, std::string_view b) {
    return std::ranges::equal(a, b, [](char x, char y) {
        return std::tolower(static_cast<unsigned char>(x)) ==
               std::tolower(static_cast<unsigned char>(y));
    });
}

template <size_t N>
Result<uint64_t> parse_with(std::string_view text, const std::array<Suffix, N> &suffixes,
                            std::string_view what, std::string_view base_unit,
                            std::string_view known) {
    auto fail = [&](std::string_view why) {
        return std::unexpected(fmt::format("invalid {} '{}': {}", what, text, why));
    };
    if (text.empty())
        return std::unexpected(fmt::format("invalid {} '': empty", what));
    if (text.front() == '-')
        return fail("negative");

    size_t i = 0;
    unsigned __int128 mantissa = 0;
    unsigned decimals = 0;
    size_t digits = 0;
    bool dot = false;
    for (; i < text.size(); ++i) {
        char c = text[i];
        if (c == '.' && !dot) {
            dot = true;
            continue;
        }
        if (c < '0' || c > '9')
            break;
        if (mantissa == 0 && c == '0' && !dot)
            continue; // leading zeros carry no magnitude
        if (++digits > 30)
            return fail("too many digits");
        mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
        if (dot)
            ++decimals;
    }
    bool any_digit = std::ranges::any_of(text.substr(0, i), [](char c) { return c != '.'; });
    if (!any_digit)
        return fail("not a number");
    if (text[i - 1] == '.')
        return fail("a decimal point needs digits after it");

    std::string_view suffix = text.substr(i);
    auto it =
        std::ranges::find_if(suffixes, [&](const Suffix &s) { return iequals(s.name, suffix); });
    if (it == suffixes.end())
        return fail(fmt::format("unknown unit '{}' (use {})", suffix, known));

    unsigned __int128 scaled = mantissa * it->multiplier; // < 10^30 * 2^43: no overflow
    unsigned __int128 divisor = 1;
    for (unsigned d = 0; d < decimals; ++d)
        divisor *= 10;
    if (scaled % divisor != 0)
        return fail(fmt::format("not a whole number of {}", base_unit));
    unsigned __int128 value = scaled / divisor;
    if (value > UINT64_MAX)
        return fail("too large");
    return static_cast<uint64_t>(value);
}

} // namespace

Result<uint64_t> parse_rate(std::string_view text) {
    return parse_with(text, kRateSuffixes, "rate", "bit/s",
                      "bit, kbit, mbit, gbit, tbit, kibit..tibit, or bps, kbps..tbps for bytes/s");
}

Result<uint64_t> parse_packet_rate(std::string_view text) {
    return parse_with(text, kPacketRateSuffixes, "packet rate", "packets/s",
                      "pps, kpps, mpps or gpps");
}

Result<uint64_t> parse_size(std::string_view text) {
    return parse_with(text, kSizeSuffixes, "size", "bytes", "b, k/kb, m/mb or g/gb");
}

Result<uint64_t> parse_duration(std::string_view text) {
    // A bare number would be read as ns by some and as s by others (tc: us): a unit is needed.
    if (!text.empty() && std::isdigit(static_cast<unsigned char>(text.back())))
        return std::unexpected(
            fmt::format("invalid duration '{}': give a unit (ns, us, ms, s, m, h, d or w)", text));
    return parse_with(text, kDurationSuffixes, "duration", "ns", "ns, us, ms, s, m, h, d or w");
}

Result<uint64_t> parse_packet_count(std::string_view text) {
    return parse_with(text, kPacketSuffixes, "packet count", "packets", "a plain number or pkt");
}

std::string format_rate(uint64_t bps) {
    constexpr std::array<Suffix, 4> steps{
        {{"tbit", 1000000000000}, {"gbit", 1000000000}, {"mbit", 1000000}, {"kbit", 1000}}};
    for (const auto &s : steps)
        if (bps != 0 && bps % s.multiplier == 0)
            return fmt::format("{}{}", bps / s.multiplier, s.name);
    return fmt::format("{}bit", bps);
}

std::string format_size(uint64_t bytes) {
    constexpr std::array<Suffix, 3> steps{{{"g", kGi}, {"m", kMi}, {"k", kKi}}};
    for (const auto &s : steps)
        if (bytes != 0 && bytes % s.multiplier == 0)
            return fmt::format("{}{}", bytes / s.multiplier, s.name);
    return fmt::format("{}b", bytes);
}

std::string format_duration(uint64_t ns) {
    for (auto it = kDurationSuffixes.rbegin(); it != kDurationSuffixes.rend(); ++it)
        if (ns != 0 && ns % it->multiplier == 0)
            return fmt::format("{}{}", ns / it->multiplier, it->name);
    return fmt::format("{}ns", ns);
}

} // namespace tricolor
