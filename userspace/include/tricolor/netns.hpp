// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// netns.hpp: a container's side of a veth pair, looked at from the host: what the CNI plugin and
// the container engines' watcher both need to find the host-side interface they attach to.
#pragma once

#include <string>

namespace tricolor {

// The ifindex (in the network namespace the veth's peer is in: for a container's veth, the
// host's) of the peer of @ifname in the network namespace at @netns_path (/var/run/netns/X,
// /proc/PID/ns/net); 0 when there is no such namespace or interface, or it is no veth.
int veth_peer_ifindex(const std::string &netns_path, const std::string &ifname);

// The same, as the interface's name in this namespace ("" when none).
std::string veth_peer_name(const std::string &netns_path, const std::string &ifname);

} // namespace tricolor
