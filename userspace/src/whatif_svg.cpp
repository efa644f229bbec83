// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// whatif_svg.cpp: whatif --plot. A plain SVG, written by hand so that nothing is needed to view it
// but a browser, and whose numbers a test can read back: every bar carries its bin's bytes
// (data-bytes), every panel the scale it was drawn at (data-px-per-bps, data-px-per-unit), and
// each level line its values (data-values).
#include "tricolor/whatif.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace tricolor {
namespace {

constexpr double kWidth = 1100, kLeft = 90, kRight = 30, kPlotW = kWidth - kLeft - kRight;
constexpr double kRateH = 200, kLevelH = 90, kGap = 34, kPanelH = 30 + kRateH + kGap + kLevelH + 40;
const char *const kColorFill[] = {"#2e9b45", "#e0b020", "#d23c2c"};

std::string escape(std::string_view s) {
    std::string o;
    for (char c : s) {
        if (c == '<')
            o += "&lt;";
        else if (c == '>')
            o += "&gt;";
        else if (c == '&')
            o += "&amp;";
        else if (c == '"')
            o += "&quot;";
        else
            o += c;
    }
    return o;
}

// A round step for @n ticks over [0, max].
double tick_step(double max, int n) {
    if (max <= 0)
        return 1;
    double raw = max / n, mag = std::pow(10, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
        if (m * mag >= raw)
            return m * mag;
    return 10 * mag;
}

std::string seconds(double s) {
    if (s == 0)
        return "0";
    if (s < 1e-3)
        return fmt::format("{:g} us", s * 1e6);
    if (s < 1)
        return fmt::format("{:g} ms", s * 1e3);
    if (s < 120)
        return fmt::format("{:g} s", s);
    if (s < 7200)
        return fmt::format("{:g} min", s / 60);
    return fmt::format("{:g} h", s / 3600);
}

std::string rate(double bps) {
    if (bps >= 1e9)
        return fmt::format("{:g} Gbit/s", bps / 1e9);
    if (bps >= 1e6)
        return fmt::format("{:g} Mbit/s", bps / 1e6);
    if (bps >= 1e3)
        return fmt::format("{:g} kbit/s", bps / 1e3);
    return fmt::format("{:g} bit/s", bps);
}

std::string size(double units, bool packets) {
    if (packets)
        return fmt::format("{:g} pkt", units);
    if (units >= 1 << 20)
        return fmt::format("{:g} MiB", units / (1 << 20));
    if (units >= 1 << 10)
        return fmt::format("{:g} KiB", units / (1 << 10));
    return fmt::format("{:g} B", units);
}

} // namespace

std::string whatif_svg(const WhatIfResult &r, const std::vector<Policy> &policies) {
    std::string o;
    const size_t nbins = r.policies.empty() ? 0 : r.policies.front().bins.size();
    const double bin_s = static_cast<double>(r.bin_ns) / 1e9;
    const double span_s = std::max(bin_s * static_cast<double>(std::max<size_t>(nbins, 1)), 1e-9);
    const double px_per_s = kPlotW / span_s;
    const double height = 50 + kPanelH * static_cast<double>(r.policies.size());
    fmt::format_to(std::back_inserter(o),
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                   "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"12\" "
                   "data-bin-ns=\"{}\" data-bins=\"{}\">\n"
                   "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
                   "<text x=\"{}\" y=\"24\" font-size=\"15\">tricolorctl whatif: {} packets over "
                   "{}, bins of {} ({})</text>\n",
                   kWidth, height, kWidth, height, r.bin_ns, nbins, kLeft, r.packets,
                   seconds(static_cast<double>(r.duration_ns) / 1e9), seconds(bin_s),
                   escape(r.link_type));
    double top = 50;
    for (const WhatIfPolicy &w : r.policies) {
        const Policy *p = nullptr;
        for (const Policy &q : policies)
            if (q.id == w.id)
                p = &q;
        const MeterParams &m = p->meter;
        const bool packets = m.packet_mode;
        // Offered rate per bin, stacked; the scale takes in the CIR and PIR/CIR+EIR lines.
        double max_bps = 0;
        for (const WhatIfBin &b : w.bins)
            max_bps = std::max(
                max_bps, 8.0 * static_cast<double>(b.bytes[0] + b.bytes[1] + b.bytes[2]) / bin_s);
        std::vector<std::pair<std::string, double>> lines;
        if (!packets) {
            lines.emplace_back("CIR", static_cast<double>(m.cir));
            // What passes short of red: a peak rate is that whole, an excess rate adds to CIR.
            const std::string rate(second_rate_name(m.algo));
            if (const uint64_t r = second_rate(m); r > 0) {
                if (info(m.algo).second == SecondBucket::peak)
                    lines.emplace_back(rate, static_cast<double>(r));
                else
                    lines.emplace_back("CIR+" + rate, static_cast<double>(m.cir + r));
            }
        }
        for (auto &[n, v] : lines)
            max_bps = std::max(max_bps, v);
        const double step = tick_step(max_bps * 1.05, 4);
        const double axis = std::max(step * std::ceil(max_bps * 1.05 / step), step);
        const double px_per_bps = kRateH / axis;
        const double y0 = top + 30 + kRateH;
        const auto &c = w.counts;
        const uint64_t total = c.total_bytes();
        fmt::format_to(
            std::back_inserter(o),
            "<g class=\"policy\" data-name=\"{}\" data-y0=\"{}\" data-px-per-bps=\"{:.9g}\" "
            "data-x0=\"{}\" data-px-per-s=\"{:.9g}\">\n"
            "<text x=\"{}\" y=\"{}\" font-size=\"14\" font-weight=\"bold\">{}</text>"
            "<text x=\"{}\" y=\"{}\">{} CIR {} CBS {}: green {:.1f}%, yellow {:.1f}%, red "
            "{:.1f}% of {}</text>\n",
            escape(w.name), y0, px_per_bps, kLeft, px_per_s, kLeft, top + 14, escape(w.name),
            kLeft + 160, top + 14, to_string(m.algo),
            packets ? fmt::format("{} pkt/s", m.cir) : rate(static_cast<double>(m.cir)),
            size(static_cast<double>(m.cbs), packets),
            total ? 100.0 * static_cast<double>(c.bytes[0]) / static_cast<double>(total) : 0.0,
            total ? 100.0 * static_cast<double>(c.bytes[1]) / static_cast<double>(total) : 0.0,
            total ? 100.0 * static_cast<double>(c.bytes[2]) / static_cast<double>(total) : 0.0,
            size(static_cast<double>(total), false));
        // Axes and ticks.
        for (double v = 0; v <= axis + step / 2; v += step) {
            double y = y0 - v * px_per_bps;
            fmt::format_to(std::back_inserter(o),
                           "<line x1=\"{}\" y1=\"{:.2f}\" x2=\"{}\" y2=\"{:.2f}\" stroke=\"#ddd\"/>"
                           "<text x=\"{}\" y=\"{:.2f}\" text-anchor=\"end\">{}</text>\n",
                           kLeft, y, kLeft + kPlotW, y, kLeft - 6, y + 4, rate(v));
        }
        // Bars: one rect a colour a bin, green at the bottom.
        for (size_t i = 0; i < w.bins.size(); ++i) {
            double x = kLeft + static_cast<double>(i) * bin_s * px_per_s;
            double bw = std::max(bin_s * px_per_s, 0.5);
            double y = y0;
            for (size_t col = 0; col < TCM_NR_COLORS; ++col) {
                uint64_t bytes = w.bins[i].bytes[col];
                if (!bytes)
                    continue;
                double h = 8.0 * static_cast<double>(bytes) / bin_s * px_per_bps;
                y -= h;
                fmt::format_to(std::back_inserter(o),
                               "<rect class=\"bar {}\" data-bin=\"{}\" data-bytes=\"{}\" "
                               "x=\"{:.3f}\" y=\"{:.3f}\" width=\"{:.3f}\" height=\"{:.3f}\" "
                               "fill=\"{}\"/>\n",
                               to_string(static_cast<Color>(col)), i, bytes, x, y, bw, h,
                               kColorFill[col]);
            }
        }
        for (auto &[n, v] : lines) {
            double y = y0 - v * px_per_bps;
            fmt::format_to(std::back_inserter(o),
                           "<line class=\"rate-line\" data-name=\"{}\" data-bps=\"{}\" x1=\"{}\" "
                           "y1=\"{:.3f}\" x2=\"{}\" y2=\"{:.3f}\" stroke=\"black\" "
                           "stroke-dasharray=\"6 4\"/><text x=\"{}\" y=\"{:.3f}\">{} {}</text>\n",
                           n, v, kLeft, y, kLeft + kPlotW, y, kLeft + kPlotW - 150, y - 4, n,
                           rate(v));
        }
        fmt::format_to(std::back_inserter(o),
                       "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", kLeft,
                       y0, kLeft + kPlotW, y0);
        // Bucket levels: the lowest in each bin, against the bucket sizes.
        const double ly0 = y0 + kGap + kLevelH;
        const uint64_t c_size = m.cbs;
        const uint64_t e_size = second_size(m);
        const char *e_name = info(m.algo).second == SecondBucket::peak ? "P" : "E";
        if (!w.levels) {
            fmt::format_to(std::back_inserter(o),
                           "<text x=\"{}\" y=\"{}\">bucket levels: a pair for each flow, not "
                           "drawn</text>\n",
                           kLeft, ly0 - kLevelH / 2);
        } else {
            const double lmax = static_cast<double>(std::max<uint64_t>({c_size, e_size, 1}));
            const double px_per_unit = kLevelH / lmax;
            fmt::format_to(std::back_inserter(o),
                           "<g class=\"levels\" data-y0=\"{}\" data-px-per-unit=\"{:.9g}\">"
                           "<text x=\"{}\" y=\"{}\">lowest bucket level in each bin: C (blue, "
                           "size {}){}</text>\n",
                           ly0, px_per_unit, kLeft, ly0 - kLevelH - 8,
                           size(static_cast<double>(c_size), packets),
                           e_size ? fmt::format(", {} (purple, size {})", e_name,
                                                size(static_cast<double>(e_size), packets))
                                  : "");
            for (int which = 0; which < (e_size ? 2 : 1); ++which) {
                std::string pts, vals;
                for (size_t i = 0; i < w.bins.size(); ++i) {
                    uint64_t v = which ? w.bins[i].e_low : w.bins[i].c_low;
                    if (v == UINT64_MAX) // no packet and no end yet (the open bin): left out
                        continue;
                    double x1 = kLeft + static_cast<double>(i) * bin_s * px_per_s;
                    double y = ly0 - static_cast<double>(v) * px_per_unit;
                    fmt::format_to(std::back_inserter(pts), "{:.2f},{:.2f} {:.2f},{:.2f} ", x1, y,
                                   x1 + bin_s * px_per_s, y);
                    fmt::format_to(std::back_inserter(vals), "{}{}", vals.empty() ? "" : " ", v);
                }
                fmt::format_to(std::back_inserter(o),
                               "<polyline class=\"level {}\" data-values=\"{}\" points=\"{}\" "
                               "fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>\n",
                               which ? "e" : "c", vals, pts, which ? "#8a3ab9" : "#2a6fdb");
            }
            // --warmup's rate (step j of K: j/K of the full rate, K + 1 warm) and --quota's use,
            // each on the panel's height as 0..100%: what the meter fills at, and how much of
            // the period's quota is gone, as each bin ends.
            for (int which = 0; which < 2; ++which) {
                const double whole =
                    which ? static_cast<double>(w.quota) : static_cast<double>(w.cold_factor);
                if (whole == 0)
                    continue;
                std::string pts, vals;
                for (size_t i = 0; i < w.bins.size(); ++i) {
                    if (w.bins[i].c_low == UINT64_MAX)
                        continue;
                    uint64_t v = which ? w.bins[i].quota_used : w.bins[i].warm_step;
                    double f = std::min(1.0, static_cast<double>(v) / whole);
                    double x1 = kLeft + static_cast<double>(i) * bin_s * px_per_s;
                    double y = ly0 - f * kLevelH;
                    fmt::format_to(std::back_inserter(pts), "{:.2f},{:.2f} {:.2f},{:.2f} ", x1, y,
                                   x1 + bin_s * px_per_s, y);
                    fmt::format_to(std::back_inserter(vals), "{}{}", vals.empty() ? "" : " ", v);
                }
                fmt::format_to(
                    std::back_inserter(o),
                    "<polyline class=\"{}\" data-values=\"{}\" data-whole=\"{}\" points=\"{}\" "
                    "fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
                    "stroke-dasharray=\"5 3\"/>\n",
                    which ? "quota-used" : "warm-rate", vals, whole, pts,
                    which ? "#666" : "#e07b00");
                fmt::format_to(
                    std::back_inserter(o), "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n",
                    kLeft + kPlotW - 330, ly0 - kLevelH - 8 + (which ? 0 : -12),
                    which ? "#666" : "#e07b00",
                    which
                        ? fmt::format("dashed grey: quota used, of {}", size(whole, false))
                        : fmt::format("dashed orange: warm-up rate, step j of {}", w.cold_factor));
            }
            fmt::format_to(std::back_inserter(o),
                           "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>"
                           "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>"
                           "<text x=\"{}\" y=\"{:.2f}\" text-anchor=\"end\">{}</text></g>\n",
                           kLeft, ly0, kLeft + kPlotW, ly0, kLeft - 6, ly0 + 4, kLeft - 6,
                           ly0 - lmax * px_per_unit + 4, size(lmax, packets));
        }
        // Time axis under the levels.
        const double tstep = tick_step(span_s, 8);
        for (double s = 0; s <= span_s + tstep / 100; s += tstep) {
            double x = kLeft + s * px_per_s;
            fmt::format_to(std::back_inserter(o),
                           "<text x=\"{:.2f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x,
                           ly0 + 16, seconds(s));
        }
        o += "</g>\n";
        top += kPanelH;
    }
    o += "</svg>\n";
    return o;
}

} // namespace tricolor
