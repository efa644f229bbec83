// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// shape.hpp: --shape sockets and --shape edt outside the data path: attaching the sock_ops
// program (bpf/lib/shape.h) to the root of cgroup v2, and the checks a policy set must pass.
#pragma once

#include "tricolor/units.hpp"

#include <string>

namespace tricolor {

// Attaches @prog_fd as the root cgroup's sock_ops program through a bpf link pinned at
// @link_dir/sockops, so that it outlives the daemon as the tcx links do; a link pinned by an
// earlier daemon gets the new program swapped in. The root cgroup covers the TCP sockets of
// every process, in every network namespace. It is found at /sys/fs/cgroup, else (inside
// `ip netns exec`, which remounts /sys) through /proc/1/root, else mounted for the moment.
// Without @link_dir the link lives as long as this process.
Result<void> attach_sockops(int prog_fd, const std::string &link_dir);
// Whether a sock_ops link is pinned (or held) by us.
bool sockops_attached(const std::string &link_dir);
void detach_sockops(const std::string &link_dir);

// The same for the cgroup ingress program (bpf/cgroup_in.bpf.c, docs/spec.md §11), pinned at
// @link_dir/cgroup_ingress.
Result<void> attach_cgroup_ingress(int prog_fd, const std::string &link_dir);
bool cgroup_ingress_attached(const std::string &link_dir);
void detach_cgroup_ingress(const std::string &link_dir);

// The root qdisc of interface @iface ("fq", "noqueue", "mq", ...), or "" if it cannot be told.
std::string root_qdisc(const std::string &iface);

} // namespace tricolor
