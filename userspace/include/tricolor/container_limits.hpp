// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// container_limits.hpp: what tricolor makes for one container, the same whoever asks: the CNI
// plugin for a pod (tools/cni) and tricolord's engine followers for a Docker or Podman
// container (userspace/daemon/containers.cpp). A committed bucket per direction, matched by
// the container's address (or its cgroup), and its host-side interfaces attached at tc
// (docs/containers.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tricolor {

// The burst where none is given: 10 ms of @rate_bps, at least 64 KiB. In bytes.
uint64_t default_burst_bytes(uint64_t rate_bps);

// A template policy's spec (a policy of tricolord's, as policy_show gives it) as the base of a
// container's: its meter and actions, without what names or places it (name, match, parent,
// only_parent, owner, priority, managed_by).
nlohmann::json template_base(nlohmann::json spec);

// One direction's policy for the container at @address (IPv4 or IPv6; to it: dst, from it:
// src): @base (template_base's, or the caller's defaults) named @name, with CIR @rate_bps and
// CBS @burst_bytes where @rate_bps is not 0 (else the base's own), @owner shown beside its name
// and @managed_by what made it (a reload of the config keeps it).
nlohmann::json container_policy(nlohmann::json base, const std::string &name, bool ingress,
                                const std::string &address, uint64_t rate_bps, uint64_t burst_bytes,
                                const std::string &owner, const std::string &managed_by);

// The same for a container matched by its cgroup v2 cgroup @cgroup (a path below the cgroup2
// mount): on the host's network, or on several networks. Egress is metered where its packets
// still carry their socket (tc ingress of its veths' host ends, tc egress of the host's
// interfaces tricolord is attached to), ingress as they reach its sockets (docs/spec.md §11).
nlohmann::json container_cgroup_policy(nlohmann::json base, const std::string &name, bool ingress,
                                       const std::string &cgroup, uint64_t rate_bps,
                                       uint64_t burst_bytes, const std::string &owner,
                                       const std::string &managed_by);

// The requests that attach the container's host-side interface @iface, in their order: tc egress
// (what the container receives leaves by it), then tc ingress (what it sends arrives by it).
// Egress first, as the detaching requests leave it last: a daemon with a tc ingress and no tc
// egress refuses a shaping policy, and other containers' changes run meanwhile.
std::vector<nlohmann::json> container_attach(const std::string &iface,
                                             const std::string &managed_by);
std::vector<nlohmann::json> container_detach(const std::string &iface);

} // namespace tricolor
