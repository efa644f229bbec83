// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// netns.cpp: netns.hpp. Both lookups ask rtnetlink for the interface in the container's
// namespace and read IFLA_LINK: for a veth, its peer's ifindex in the peer's namespace. By a
// namespace's path, a thread of its own enters it (setns changes only the calling thread's;
// it needs CAP_SYS_ADMIN and, for /proc/PID/ns/net, CAP_SYS_PTRACE). By a process, the host's
// rtnetlink is asked for the namespace's id and then for the interface there
// (IFLA_TARGET_NETNSID): CAP_NET_ADMIN is all it needs.
#include "tricolor/netns.hpp"

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/net_namespace.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace tricolor {

namespace {

// One request on @s, one reply into @buf: its first message, or null.
nlmsghdr *ask(int s, const nlmsghdr &req, char *buf, size_t size) {
    if (send(s, &req, req.nlmsg_len, 0) < 0)
        return nullptr;
    ssize_t len = recv(s, buf, size, 0);
    auto *h = reinterpret_cast<nlmsghdr *>(buf);
    return len > 0 && NLMSG_OK(h, static_cast<unsigned>(len)) ? h : nullptr;
}

// A request: its header, its fixed part, and room for a few attributes.
struct Request {
    alignas(nlmsghdr) char buf[128] = {};
    nlmsghdr &h() { return *reinterpret_cast<nlmsghdr *>(buf); }
    template <typename Fixed>
    Request(uint16_t type, uint16_t flags, const Fixed &fixed) {
        memcpy(buf + NLMSG_HDRLEN, &fixed, sizeof(fixed));
        h().nlmsg_len = NLMSG_LENGTH(sizeof(Fixed));
        h().nlmsg_type = type;
        h().nlmsg_flags = flags;
    }
    void add(unsigned short type, const void *data, size_t n) {
        size_t at = NLMSG_ALIGN(h().nlmsg_len);
        rtattr a{static_cast<unsigned short>(RTA_LENGTH(n)), type};
        memcpy(buf + at, &a, sizeof(a));
        memcpy(buf + at + RTA_LENGTH(0), data, n);
        h().nlmsg_len = static_cast<uint32_t>(at + RTA_ALIGN(a.rta_len));
    }
};

// The host's id for the network namespace of @pid (assigned if it has none yet), or -1.
int nsid_of(int s, pid_t pid) {
    for (int attempt = 0; attempt < 2; ++attempt) {
        Request req(RTM_GETNSID, NLM_F_REQUEST, rtgenmsg{AF_UNSPEC});
        uint32_t p = static_cast<uint32_t>(pid);
        req.add(NETNSA_PID, &p, sizeof(p));
        char buf[1024];
        nlmsghdr *h = ask(s, req.h(), buf, sizeof(buf));
        if (!h || h->nlmsg_type != RTM_NEWNSID)
            return -1;
        int alen = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(rtgenmsg)));
        auto *at = reinterpret_cast<rtattr *>(static_cast<char *>(NLMSG_DATA(h)) +
                                              NLMSG_ALIGN(sizeof(rtgenmsg)));
        for (; RTA_OK(at, alen); at = RTA_NEXT(at, alen))
            if (at->rta_type == NETNSA_NSID) {
                int id = *static_cast<int32_t *>(RTA_DATA(at));
                if (id >= 0)
                    return id;
            }
        if (attempt)
            return -1;
        // No id yet (no interface of it was ever seen from here): one assigned, as ip-netns
        // set does with "auto".
        Request set(RTM_NEWNSID, NLM_F_REQUEST | NLM_F_ACK, rtgenmsg{AF_UNSPEC});
        int32_t any = -1;
        set.add(NETNSA_PID, &p, sizeof(p));
        set.add(NETNSA_NSID, &any, sizeof(any));
        if (!ask(s, set.h(), buf, sizeof(buf)))
            return -1;
    }
    return -1;
}

// RTM_GETLINK of the interface @ifname: in the namespace of the socket it is sent on, or (with
// @nsid >= 0) in the namespace that has that id there.
Request link_request(const std::string &ifname, int32_t nsid = -1) {
    ifinfomsg info{};
    info.ifi_family = AF_UNSPEC;
    Request req(RTM_GETLINK, NLM_F_REQUEST, info);
    char name[IFNAMSIZ] = {};
    memcpy(name, ifname.data(), std::min<size_t>(ifname.size(), IFNAMSIZ - 1));
    req.add(IFLA_IFNAME, name, strlen(name) + 1);
    if (nsid >= 0)
        req.add(IFLA_TARGET_NETNSID, &nsid, sizeof(nsid));
    return req;
}

// IFLA_LINK of the reply to @req (an RTM_GETLINK), 0 when none.
int link_of_reply(int s, Request &req) {
    char buf[8192];
    nlmsghdr *h = ask(s, req.h(), buf, sizeof(buf));
    if (!h || h->nlmsg_type != RTM_NEWLINK)
        return 0;
    auto *info = static_cast<ifinfomsg *>(NLMSG_DATA(h));
    int alen = static_cast<int>(IFLA_PAYLOAD(h));
    for (auto *at = IFLA_RTA(info); RTA_OK(at, alen); at = RTA_NEXT(at, alen))
        if (at->rta_type == IFLA_LINK)
            return *static_cast<int *>(RTA_DATA(at));
    return 0;
}

// The peer's ifindex in its namespace (0: none), asked of this namespace's rtnetlink.
int veth_peer_ifindex_of(pid_t pid, const std::string &ifname) {
    int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (s < 0)
        return 0;
    int peer = 0;
    if (int nsid = nsid_of(s, pid); nsid >= 0) {
        Request req = link_request(ifname, nsid);
        peer = link_of_reply(s, req);
    }
    close(s);
    return peer;
}

// The peer's ifindex in its namespace (0: none), from inside the namespace.
int veth_peer_ifindex(const std::string &netns, const std::string &ifname) {
    int peer = 0;
    std::thread t([&] {
        int fd = open(netns.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return;
        if (setns(fd, CLONE_NEWNET) != 0) {
            close(fd);
            return;
        }
        close(fd);
        int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
        if (s < 0)
            return;
        Request req = link_request(ifname);
        peer = link_of_reply(s, req);
        close(s);
    });
    t.join();
    return peer;
}

std::string name_of(int ifindex) {
    char name[IF_NAMESIZE] = {};
    if (ifindex <= 0 || !if_indextoname(static_cast<unsigned>(ifindex), name))
        return "";
    return name;
}

} // namespace

std::string veth_peer_name(const std::string &netns_path, const std::string &ifname) {
    return name_of(veth_peer_ifindex(netns_path, ifname));
}

std::string veth_peer_name(pid_t pid, const std::string &ifname) {
    if (auto n = name_of(veth_peer_ifindex_of(pid, ifname)); !n.empty())
        return n;
    // Where the host's rtnetlink does not say (it answers RTM_NEWNSID only to CAP_NET_ADMIN):
    // from inside, as root can.
    return veth_peer_name("/proc/" + std::to_string(pid) + "/ns/net", ifname);
}

} // namespace tricolor
