// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// hierarchy.cpp: checks of the parent graph (docs/spec.md §9).
#include "tricolor/hierarchy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace tricolor {

std::vector<std::string> hierarchy_errors(const std::vector<Policy> &policies) {
    std::vector<std::string> errors;
    std::map<std::string, const Policy *> by_name;
    for (const auto &p : policies)
        by_name.emplace(p.name, &p);
    for (const auto &p : policies) {
        if (p.parent.empty())
            continue;
        if (p.parent == p.name)
            errors.push_back(fmt::format("policy '{}': it cannot be its own parent", p.name));
        else if (!by_name.contains(p.parent))
            errors.push_back(fmt::format("policy '{}': its parent '{}' does not exist (a parent "
                                         "cannot be deleted or renamed under its children)",
                                         p.name, p.parent));
        else if (p.shape == TCM_SHAPE_EDT || by_name.at(p.parent)->shape == TCM_SHAPE_EDT)
            // bpf/lib/edt.h meters at departure times; a chain meters every level at one instant.
            errors.push_back(fmt::format(
                "policy '{}': its parent is '{}', and '{}' has shape edt, which meters a packet "
                "when it leaves while a hierarchy meters every level at one instant: a policy "
                "with shape edt has no parent and is no parent (use shape sockets or aqm)",
                p.name, p.parent, p.shape == TCM_SHAPE_EDT ? p.name : p.parent));
        else if (by_name.at(p.parent)->per == TCM_PER_CGROUP)
            // The data path knows the cgroup bucket of the matched policy only (flow.h).
            errors.push_back(fmt::format(
                "policy '{}': its parent '{}' is per cgroup, and a parent's bucket cannot be: "
                "make the parent aggregate (one bucket over its children) or per address",
                p.name, p.parent));
    }
    // Walk up from every policy; a cycle shows as a name seen twice, a deep chain as a long walk.
    std::set<std::string> in_cycle;
    for (const auto &p : policies) {
        std::vector<std::string> path{p.name};
        const Policy *cur = &p;
        while (!cur->parent.empty() && cur->parent != cur->name) {
            auto it = by_name.find(cur->parent);
            if (it == by_name.end())
                break;
            cur = it->second;
            if (std::ranges::find(path, cur->name) != path.end()) {
                // Report each cycle once, from its smallest name.
                std::vector<std::string> cycle(std::ranges::find(path, cur->name), path.end());
                if (cycle.size() > 1 && std::ranges::min(cycle) == p.name &&
                    !in_cycle.contains(p.name)) {
                    for (const auto &c : cycle)
                        in_cycle.insert(c);
                    std::string text;
                    for (const auto &c : cycle)
                        text += fmt::format("'{}' -> ", c);
                    errors.push_back(
                        fmt::format("policies {}'{}' form a cycle of parents", text, cur->name));
                }
                path.clear();
                break;
            }
            path.push_back(cur->name);
        }
        if (path.size() > TCM_MAX_LEVELS) {
            std::string text;
            for (size_t i = 0; i < path.size(); ++i)
                text += fmt::format("{}'{}'", i ? " -> " : "", path[i]);
            errors.push_back(fmt::format("policy '{}': its chain {} has {} levels; at most {}",
                                         p.name, text, path.size(), TCM_MAX_LEVELS));
        }
    }
    return errors;
}

std::vector<const Policy *> chain_of(const std::vector<Policy> &policies, const std::string &name) {
    std::vector<const Policy *> out;
    std::string next = name;
    while (!next.empty() && out.size() < TCM_MAX_LEVELS) {
        auto it = std::ranges::find(policies, next, &Policy::name);
        if (it == policies.end())
            break;
        out.push_back(&*it);
        next = it->parent;
    }
    return out;
}

} // namespace tricolor
