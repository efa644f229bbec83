// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// text.hpp: small helpers for the messages users read.
#pragma once

#include <charconv>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace tricolor {

// "Operation not permitted" for -EPERM or EPERM: libbpf returns negative errnos.
inline std::string errno_text(int err) {
    return std::strerror(err < 0 ? -err : err);
}

// Every problem on a line of its own, so a refusal lists them all.
inline std::string join_lines(const std::vector<std::string> &lines,
                              const std::string &prefix = "") {
    std::string all;
    for (const auto &l : lines)
        all += (all.empty() ? "" : "\n") + prefix + l;
    return all;
}

// "a, b or c": what a value may be, as the messages and --help list it.
inline std::string or_list(const std::vector<std::string> &words) {
    std::string out;
    for (size_t i = 0; i < words.size(); ++i)
        out += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
    return out;
}

// @text as a whole unsigned number of type T, nothing before or after it.
template <typename T>
bool parse_whole(std::string_view text, T &out) {
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && ptr == text.data() + text.size() && !text.empty();
}

// The fields of a trace line (docs/spec.md §2): split by spaces, tabs or commas.
inline std::vector<std::string_view> split_trace_fields(std::string_view line) {
    auto sep = [](char c) { return c == ' ' || c == '\t' || c == ',' || c == '\r'; };
    std::vector<std::string_view> fields;
    size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && sep(line[i]))
            ++i;
        size_t start = i;
        while (i < line.size() && !sep(line[i]))
            ++i;
        if (i > start)
            fields.push_back(line.substr(start, i - start));
    }
    return fields;
}

} // namespace tricolor
