// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// yaml.hpp: config files are YAML (JSON is YAML too); inside, everything is the same JSON
// objects the control socket carries, so one validation serves every entry point.
#pragma once

#include "tricolor/units.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace tricolor {

// Plain scalars become booleans, nulls or whole numbers where they read as such; quoted ones
// stay strings. The error names the line and column.
Result<nlohmann::json> yaml_to_json(const std::string &text);
// Block-style YAML; strings that would read back as something else are quoted.
std::string json_to_yaml(const nlohmann::json &j);

} // namespace tricolor
