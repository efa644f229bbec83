// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// cgroups.hpp: the cgroup v2 tree as --match cgroup sees it (docs/spec.md §11). The data path
// knows a packet's cgroup by its id only, so a pattern is expanded here, against a scan of the
// tree, into the ids it covers; the daemon scans again as cgroups come and go.
#pragma once

#include "tricolor/result.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tricolor {

struct Cgroup {
    std::string path; // below the mount, no leading slash; "" is the root
    uint64_t id = 0;  // what bpf_skb_cgroup_id() returns for a socket of this cgroup
    bool operator==(const Cgroup &) const = default;
};

// Where cgroup v2 is mounted (the first cgroup2 line of /proc/self/mountinfo), or why cgroup
// matches cannot work here.
Result<std::string> cgroup2_mount();

// Every cgroup under @mount, the root first and each parent before its children. Cgroups that
// vanish during the walk are left out.
std::vector<Cgroup> scan_cgroups(const std::string &mount);

// What @pattern (normal form: no leading or trailing slash; globs per component) covers in
// @tree: each cgroup it names, and every cgroup below one, with the one it names (the bucket of
// --per cgroup). In @tree's order.
struct CgroupHit {
    uint64_t cgroup = 0, bucket = 0;
    bool operator==(const CgroupHit &) const = default;
};
std::vector<CgroupHit> match_cgroups(std::string_view pattern, const std::vector<Cgroup> &tree);

} // namespace tricolor
