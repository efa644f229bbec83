// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// netns.hpp: a container's side of a veth pair, looked at from the host: what the CNI plugin and
// the container engines' watcher both need to find the host-side interface they attach to.
#pragma once

#include <string>
#include <sys/types.h>

namespace tricolor {

// The name, in this network namespace (for a container's veth: the host's), of the peer of
// @ifname in the network namespace at @netns_path (/var/run/netns/X, /proc/PID/ns/net); "" when
// there is no such namespace or interface, or it is no veth.
std::string veth_peer_name(const std::string &netns_path, const std::string &ifname);
// The same for the network namespace of process @pid, without entering it: what a daemon that
// holds CAP_NET_ADMIN but not CAP_SYS_ADMIN can do (the container engines' follower).
std::string veth_peer_name(pid_t pid, const std::string &ifname);

} // namespace tricolor
