// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The trace reader of `tricolorctl replay`. Properties: no crash or sanitizer finding; a trace
// accepted prints back ("time bytes colour" a line) to a trace read as the same packets; the
// model meter replays it and every packet gets exactly one colour.
#include "fuzz.hpp"

#include "tricolor/replay.hpp"

#include <fmt/format.h>

#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::istringstream in(std::string(reinterpret_cast<const char *>(data), size));
    auto trace = tricolor::parse_trace(in);
    if (!trace)
        return 0;
    std::string text;
    for (const auto &p : *trace)
        text += fmt::format("{} {} {}\n", p.time_ns, p.bytes, tricolor::to_string(p.color));
    std::istringstream again_in(text);
    auto again = tricolor::parse_trace(again_in);
    FUZZ_REQUIRE(again && again->size() == trace->size(), "%zu packets read back",
                 again ? again->size() : 0);
    for (size_t i = 0; i < trace->size(); ++i) {
        const auto &a = (*trace)[i], &b = (*again)[i];
        FUZZ_REQUIRE(a.time_ns == b.time_ns && a.bytes == b.bytes && a.color == b.color,
                     "packet %zu changed on the way back", i);
    }
    tricolor::MeterParams m;
    m.algo = tricolor::Algo::srtcm;
    m.cir = 1'000'000;
    m.cbs = 16384;
    m.ebs = 16384;
    tricolor::ModelEngine engine(tricolor::make_meter_config(m));
    std::ostringstream out;
    auto totals = tricolor::run_replay(engine, *trace, out);
    uint64_t packets = totals.packets[0] + totals.packets[1] + totals.packets[2];
    FUZZ_REQUIRE(packets == trace->size(), "%llu coloured of %zu",
                 static_cast<unsigned long long>(packets), trace->size());
    return 0;
}
