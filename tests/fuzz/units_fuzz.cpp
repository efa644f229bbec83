// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The units parser (rates, sizes, packet rates and counts as tc writes them). Properties: no
// crash or sanitizer finding; a text accepted prints back (format_rate/format_size) to a text
// that parses to the same value, exactly.
#include "fuzz.hpp"

#include "tricolor/units.hpp"

#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::string_view text(reinterpret_cast<const char *>(data), size);
    if (auto r = tricolor::parse_rate(text)) {
        std::string back = tricolor::format_rate(*r);
        auto again = tricolor::parse_rate(back);
        FUZZ_REQUIRE(again && *again == *r, "rate %llu printed as '%s'",
                     static_cast<unsigned long long>(*r), back.c_str());
    }
    if (auto s = tricolor::parse_size(text)) {
        std::string back = tricolor::format_size(*s);
        auto again = tricolor::parse_size(back);
        FUZZ_REQUIRE(again && *again == *s, "size %llu printed as '%s'",
                     static_cast<unsigned long long>(*s), back.c_str());
    }
    (void)tricolor::parse_packet_rate(text);
    (void)tricolor::parse_packet_count(text);
    return 0;
}
