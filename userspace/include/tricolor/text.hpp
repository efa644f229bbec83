// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// text.hpp: small helpers for the messages users read.
#pragma once

#include <cstring>
#include <string>
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

} // namespace tricolor
