// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// shape.cpp: see shape.hpp.
#include "tricolor/shape.hpp"
#include "tricolor/cgroups.hpp"
#include "tricolor/text.hpp"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace tricolor {
namespace {

// The programs tricolor attaches to the root cgroup, each through a link of its own.
struct RootProgram {
    const char *pin; // its link's name in the link directory
    bpf_attach_type type;
    const char *what;       // for messages
    int unpinned_link = -1; // the link when there is no directory to pin it in
};
RootProgram g_sockops{"sockops", BPF_CGROUP_SOCK_OPS,
                      "--shape sockets needs cgroup v2 to pace "
                      "sockets, and",
                      -1};
RootProgram g_cgroup_in{"cgroup_ingress", BPF_CGROUP_INET_INGRESS,
                        "an ingress cgroup policy needs cgroup v2 to meter what sockets "
                        "receive, and",
                        -1};

std::string root_pin(const RootProgram &r, const std::string &link_dir) {
    return link_dir + "/" + r.pin;
}

bool is_cgroup2(const char *path) {
    struct statfs st {};
    return statfs(path, &st) == 0 && st.f_type == CGROUP2_SUPER_MAGIC;
}

// An open fd of the root of cgroup v2, or a negative errno. Where --match cgroup finds it
// (cgroups.cpp: this mount namespace's cgroup2 mount, wherever it is: /sys/fs/cgroup, or
// /sys/fs/cgroup/unified beside v1); then where `ip netns exec`, which remounts /sys, still
// shows it; else mounted for the moment.
int open_cgroup_root(std::string &where) {
    std::string mounted = cgroup2_mount().value_or("");
    for (const char *path : {mounted.c_str(), "/sys/fs/cgroup", "/proc/1/root/sys/fs/cgroup"})
        if (*path && is_cgroup2(path)) {
            where = path;
            int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            return fd >= 0 ? fd : -errno;
        }
    // Not mounted where we can see it: mount the hierarchy for as long as it takes to open it.
    char tmpl[] = "/tmp/tricolor-cgroup-XXXXXX";
    if (!mkdtemp(tmpl))
        return -errno;
    int fd = -ENOENT;
    if (mount("cgroup2", tmpl, "cgroup2", 0, nullptr) == 0) {
        fd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            fd = -errno;
        umount2(tmpl, MNT_DETACH);
        where = "cgroup2 (mounted for the moment)";
    } else {
        fd = -errno;
    }
    rmdir(tmpl);
    return fd;
}

} // namespace

namespace {

Result<void> attach_root(RootProgram &rp, int prog_fd, const std::string &link_dir) {
    std::string pin;
    if (!link_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(link_dir, ec);
        pin = root_pin(rp, link_dir);
        if (int link = bpf_obj_get(pin.c_str()); link >= 0) {
            int err = bpf_link_update(link, prog_fd, nullptr);
            close(link);
            if (err == 0)
                return {};
            unlink(pin.c_str());
        }
    } else if (rp.unpinned_link >= 0) {
        if (bpf_link_update(rp.unpinned_link, prog_fd, nullptr) == 0)
            return {};
        close(rp.unpinned_link);
        rp.unpinned_link = -1;
    }
    std::string where;
    int cg = open_cgroup_root(where);
    if (cg < 0)
        return std::unexpected(
            fmt::format("{} its root cannot be opened: {}", rp.what, errno_text(cg)));
    int link = bpf_link_create(prog_fd, cg, rp.type, nullptr);
    close(cg);
    if (link < 0)
        return std::unexpected(fmt::format("cannot attach the {} program to the root cgroup ({}): "
                                           "{}",
                                           rp.pin, where, errno_text(link)));
    if (pin.empty()) {
        rp.unpinned_link = link;
        return {};
    }
    int err = bpf_obj_pin(link, pin.c_str());
    close(link);
    if (err < 0)
        return std::unexpected(
            fmt::format("cannot pin the {} link at {}: {}", rp.pin, pin, errno_text(err)));
    return {};
}

bool root_attached(const RootProgram &rp, const std::string &link_dir) {
    if (link_dir.empty())
        return rp.unpinned_link >= 0;
    return access(root_pin(rp, link_dir).c_str(), F_OK) == 0;
}

void detach_root(RootProgram &rp, const std::string &link_dir) {
    if (link_dir.empty()) {
        if (rp.unpinned_link >= 0)
            close(rp.unpinned_link);
        rp.unpinned_link = -1;
        return;
    }
    std::string pin = root_pin(rp, link_dir);
    if (int link = bpf_obj_get(pin.c_str()); link >= 0) {
        bpf_link_detach(link);
        close(link);
    }
    unlink(pin.c_str());
}

} // namespace

Result<void> attach_sockops(int prog_fd, const std::string &link_dir) {
    return attach_root(g_sockops, prog_fd, link_dir);
}
bool sockops_attached(const std::string &link_dir) {
    return root_attached(g_sockops, link_dir);
}
void detach_sockops(const std::string &link_dir) {
    detach_root(g_sockops, link_dir);
}

Result<void> attach_cgroup_ingress(int prog_fd, const std::string &link_dir) {
    return attach_root(g_cgroup_in, prog_fd, link_dir);
}
bool cgroup_ingress_attached(const std::string &link_dir) {
    return root_attached(g_cgroup_in, link_dir);
}
void detach_cgroup_ingress(const std::string &link_dir) {
    detach_root(g_cgroup_in, link_dir);
}

std::string root_qdisc(const std::string &iface) {
    if (iface.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                "_.-@") != std::string::npos)
        return "";
    std::string cmd = fmt::format("tc qdisc show dev {} root 2>/dev/null", iface);
    FILE *p = popen(cmd.c_str(), "r");
    if (!p)
        return "";
    char buf[256] = {};
    std::string first = fgets(buf, sizeof(buf), p) ? buf : "";
    pclose(p);
    // "qdisc fq 8001: root refcnt 2 ..." -> "fq"
    if (!first.starts_with("qdisc "))
        return "";
    auto end = first.find(' ', 6);
    return first.substr(6, end == std::string::npos ? std::string::npos : end - 6);
}

} // namespace tricolor
