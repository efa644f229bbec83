// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The config loader: YAML text to a policy set, through the same steps tricolord takes before
// anything reaches the data path (YAML to JSON, every policy spec, the set's checks, the
// hierarchy's graph, the rule compiler). Properties: no crash or sanitizer finding; a document
// read prints back (json_to_yaml) to one read as the same document; a set accepted compiles to
// rules, and compiles the same again.
#include "fuzz.hpp"

#include "tricolor/hierarchy.hpp"
#include "tricolor/policy_fields.hpp"
#include "tricolor/rules.hpp"
#include "tricolor/yaml.hpp"

#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // Bigger inputs only find the parser's depth limits again, slower.
    if (size > 16384)
        return 0;
    auto doc = tricolor::yaml_to_json(std::string(reinterpret_cast<const char *>(data), size));
    if (!doc)
        return 0;
    std::string printed = tricolor::json_to_yaml(*doc);
    auto again = tricolor::yaml_to_json(printed);
    FUZZ_REQUIRE(again && *again == *doc, "printed back as:\n%s", printed.c_str());
    if (!doc->is_object() || !doc->contains("policies") || !(*doc)["policies"].is_array())
        return 0;
    std::vector<tricolor::Policy> policies;
    uint32_t id = 1;
    for (const auto &spec : (*doc)["policies"]) {
        auto p = tricolor::to_policy(spec, id++);
        if (!p)
            return 0;
        policies.push_back(std::move(*p));
    }
    if (!tricolor::policy_set_problems(policies).empty() ||
        !tricolor::hierarchy_errors(policies).empty())
        return 0;
    uint32_t rank = 0;
    for (const auto &p : policies) {
        auto rules = tricolor::rule_entries(p, p.id, rank);
        auto same = tricolor::rule_entries(p, p.id, rank);
        FUZZ_REQUIRE(rules.size() == same.size(), "policy '%s' compiled two ways", p.name.c_str());
        ++rank;
    }
    return 0;
}
