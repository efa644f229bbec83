// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// replay.cpp: the trace format of docs/spec.md §2 and the engine-independent replay loop.
#include "tricolor/replay.hpp"
#include "tricolor/text.hpp"

#include <charconv>
#include <istream>
#include <ostream>
#include <string>

#include <fmt/format.h>

namespace tricolor {
namespace {} // namespace

Result<std::optional<TracePacket>> parse_trace_line(std::string_view line, size_t line_no) {
    auto fail = [&](const std::string &why) {
        return std::unexpected(fmt::format("line {}: {}", line_no, why));
    };
    auto fields = split_trace_fields(line);
    if (fields.empty() || fields[0].front() == '#')
        return std::optional<TracePacket>{};
    if (fields.size() < 2)
        return fail(fmt::format("expected 'time_ns bytes [green|yellow|red]', got '{}'", line));
    if (fields.size() > 3)
        return fail(fmt::format("unexpected field '{}' after the colour", fields[3]));

    TracePacket p{0, 0, Color::green};
    if (!parse_whole(fields[0], p.time_ns))
        return fail(fmt::format("time '{}' is not a whole number of nanoseconds (0 to {})",
                                fields[0], UINT64_MAX));
    uint64_t bytes = 0;
    if (!parse_whole(fields[1], bytes) || bytes == 0 || bytes > kMaxTracePacket)
        return fail(fmt::format("packet length '{}' is not a number of bytes from 1 to {}",
                                fields[1], kMaxTracePacket));
    p.bytes = static_cast<uint32_t>(bytes);
    if (fields.size() == 3) {
        auto color = parse_color(fields[2]);
        if (!color)
            return fail(fmt::format("colour '{}' is not green, yellow or red", fields[2]));
        p.color = *color;
    }
    return std::optional<TracePacket>{p};
}

Result<std::vector<TracePacket>> parse_trace(std::istream &in) {
    std::vector<TracePacket> trace;
    std::string line;
    for (size_t line_no = 1; std::getline(in, line); ++line_no) {
        auto parsed = parse_trace_line(line, line_no);
        if (!parsed)
            return std::unexpected(parsed.error());
        if (*parsed)
            trace.push_back(**parsed);
    }
    if (in.bad())
        return std::unexpected("read error");
    return trace;
}

ColorTotals run_replay(ReplayEngine &engine, const std::vector<TracePacket> &trace,
                       std::ostream &out) {
    ColorTotals totals;
    std::string buf;
    buf.reserve(1 << 16);
    for (const auto &p : trace) {
        Color c = engine.mark(p);
        auto i = static_cast<size_t>(c);
        totals.packets[i] += 1;
        totals.bytes[i] += p.bytes;
        fmt::format_to(std::back_inserter(buf), "{},{},{}\n", p.time_ns, p.bytes, to_string(c));
        if (buf.size() > (1 << 16) - 64) {
            out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
            buf.clear();
        }
    }
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    return totals;
}

} // namespace tricolor
