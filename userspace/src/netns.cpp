// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// netns.cpp: netns.hpp. The lookup runs on a thread of its own that enters the namespace
// (setns changes only the calling thread's), asks rtnetlink for the interface there, and reads
// IFLA_LINK: for a veth, its peer's ifindex in the peer's namespace.
#include "tricolor/netns.hpp"

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace tricolor {

namespace {

// The peer's ifindex in its namespace (0: none).
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
        struct {
            nlmsghdr h;
            ifinfomsg i;
            char attrs[64];
        } req{};
        req.h.nlmsg_type = RTM_GETLINK;
        req.h.nlmsg_flags = NLM_F_REQUEST;
        req.i.ifi_family = AF_UNSPEC;
        auto *a = reinterpret_cast<rtattr *>(req.attrs);
        const size_t n = std::min<size_t>(ifname.size(), IFNAMSIZ - 1);
        a->rta_type = IFLA_IFNAME;
        a->rta_len = static_cast<unsigned short>(RTA_LENGTH(n + 1));
        memcpy(RTA_DATA(a), ifname.data(), n);
        req.h.nlmsg_len = NLMSG_LENGTH(sizeof(ifinfomsg)) + RTA_ALIGN(a->rta_len);
        if (send(s, &req, req.h.nlmsg_len, 0) < 0) {
            close(s);
            return;
        }
        char buf[8192];
        ssize_t len = recv(s, buf, sizeof(buf), 0);
        close(s);
        auto *h = reinterpret_cast<nlmsghdr *>(buf);
        if (len <= 0 || !NLMSG_OK(h, static_cast<unsigned>(len)) || h->nlmsg_type != RTM_NEWLINK)
            return;
        auto *info = static_cast<ifinfomsg *>(NLMSG_DATA(h));
        int alen = static_cast<int>(IFLA_PAYLOAD(h));
        for (auto *at = IFLA_RTA(info); RTA_OK(at, alen); at = RTA_NEXT(at, alen))
            if (at->rta_type == IFLA_LINK)
                peer = *static_cast<int *>(RTA_DATA(at));
    });
    t.join();
    return peer;
}

} // namespace

std::string veth_peer_name(const std::string &netns_path, const std::string &ifname) {
    int peer = veth_peer_ifindex(netns_path, ifname);
    char name[IF_NAMESIZE] = {};
    if (peer <= 0 || !if_indextoname(static_cast<unsigned>(peer), name))
        return "";
    return name;
}

} // namespace tricolor
