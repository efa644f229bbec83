// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// web_assets.hpp: the live page's files (web/), built into the daemon by cmake/embed_files.cmake.
#pragma once

#include <string_view>
#include <vector>

namespace tricolor::web {

struct Asset {
    std::string_view path; // "/index.html", "/vendor/uPlot/uPlot.iife.min.js"
    std::string_view type; // its Content-Type
    std::string_view body;
};
const std::vector<Asset> &assets();

} // namespace tricolor::web
