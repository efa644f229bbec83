// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// cgroups.cpp: scanning the cgroup v2 tree and expanding --match cgroup patterns (cgroups.hpp).
#include "tricolor/cgroups.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tricolor {

namespace {

// mountinfo escapes space, tab, newline and backslash as octal.
std::string unescape_mount_field(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        auto octal = [&](size_t j) { return j < s.size() && s[j] >= '0' && s[j] <= '7'; };
        if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
            out +=
                static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
        } else {
            out += s[i];
        }
    }
    return out;
}

// A cgroup's id is the inode number of its directory on cgroup2 (kernfs gives a cgroup's node
// id as its inode number on 64-bit machines, and bpf_skb_cgroup_id() returns that node id).
void walk(int dir_fd, const std::string &path, std::vector<Cgroup> &out, int depth) {
    DIR *d = fdopendir(dir_fd);
    if (!d) {
        close(dir_fd);
        return;
    }
    std::vector<std::string> children;
    while (dirent *e = readdir(d)) {
        if (e->d_type != DT_DIR || std::strcmp(e->d_name, ".") == 0 ||
            std::strcmp(e->d_name, "..") == 0)
            continue;
        children.emplace_back(e->d_name);
    }
    for (const auto &name : children) {
        int fd = openat(dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue; // removed meanwhile
        struct stat st {};
        if (fstat(fd, &st) != 0) {
            close(fd);
            continue;
        }
        std::string child = path.empty() ? name : path + "/" + name;
        out.push_back({child, static_cast<uint64_t>(st.st_ino)});
        if (depth < 64)
            walk(fd, child, out, depth + 1);
        else
            close(fd);
    }
    closedir(d);
}

size_t components(std::string_view p) {
    return p.empty() ? 0 : 1 + static_cast<size_t>(std::count(p.begin(), p.end(), '/'));
}

// The first @n components of @p.
std::string_view leading(std::string_view p, size_t n) {
    size_t at = 0;
    for (size_t i = 0; i < n; ++i) {
        size_t slash = p.find('/', at);
        if (slash == std::string_view::npos)
            return i + 1 == n ? p : std::string_view();
        at = slash + 1;
    }
    return p.substr(0, at == 0 ? 0 : at - 1);
}

} // namespace

Result<std::string> cgroup2_mount() {
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    while (std::getline(in, line)) {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
        std::istringstream f(line);
        std::string id, parent, dev, root, point;
        f >> id >> parent >> dev >> root >> point;
        auto dash = line.find(" - ");
        if (dash == std::string::npos)
            continue;
        std::istringstream tail(line.substr(dash + 3));
        std::string fstype;
        tail >> fstype;
        // A mount of a subtree (ROOT not /: a container's view) would give other paths.
        if (fstype == "cgroup2" && root == "/")
            return unescape_mount_field(point);
    }
    return std::unexpected(
        "no cgroup v2 hierarchy is mounted (cgroup v1 alone cannot tell a socket's cgroup to BPF): "
        "boot with systemd.unified_cgroup_hierarchy=1, or mount one: mount -t cgroup2 none "
        "/sys/fs/cgroup/unified");
}

std::vector<Cgroup> scan_cgroups(const std::string &mount) {
    std::vector<Cgroup> out;
    int fd = open(mount.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return out;
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        close(fd);
        return out;
    }
    out.push_back({"", static_cast<uint64_t>(st.st_ino)});
    walk(fd, "", out, 0);
    return out;
}

std::vector<CgroupHit> match_cgroups(std::string_view pattern, const std::vector<Cgroup> &tree) {
    std::vector<CgroupHit> out;
    size_t depth = components(pattern);
    if (depth == 0)
        return out;
    std::string pat(pattern);
    std::unordered_map<std::string_view, uint64_t> named; // matched cgroups by path
    for (const auto &c : tree) {
        if (components(c.path) < depth)
            continue;
        std::string_view head = leading(c.path, depth);
        auto it = named.find(head);
        if (it == named.end()) {
            if (head.size() != c.path.size())
                continue; // below a cgroup the pattern does not name (parents come first)
            if (fnmatch(pat.c_str(), c.path.c_str(), FNM_PATHNAME) != 0)
                continue;
            it = named.emplace(std::string_view(c.path), c.id).first;
        }
        out.push_back({c.id, it->second});
    }
    return out;
}

} // namespace tricolor
