// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// pin_dir.cpp: tricolord's pin directory: on a bpf filesystem (mounted if need be), and the maps
// of an older ABI moved under their new names.
#include "tricolord.hpp"

#include "tricolor/attach.hpp"
#include "tricolor/bpf_load.hpp"
#include "tricolor_abi.h"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include <net/if.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

namespace tricolor::tricolord {

namespace {

constexpr long kBpfFsMagic = 0xcafe4a11;

bool on_bpffs(const std::string &path) {
    struct statfs fs {};
    return statfs(path.c_str(), &fs) == 0 && static_cast<long>(fs.f_type) == kBpfFsMagic;
}

bool in_host_mount_namespace() {
    struct stat self {
    }, init{};
    return stat("/proc/self/ns/mnt", &self) == 0 && stat("/proc/1/ns/mnt", &init) == 0 &&
           self.st_ino == init.st_ino;
}

} // namespace

// ABI 2 renamed the maps (tc_* to tcm_*) and changed no layout: the maps an ABI 1 daemon
// pinned are moved under their new names, so an upgrade keeps every token, counter and link.
// Renames within bpffs are atomic; a map that cannot be moved stays in abi1/ and is named.
std::string migrate_abi1(const std::string &pin_dir, const std::string &abi_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string old_dir = pin_dir + "/abi1";
    if (TCM_ABI_VERSION != 2 || !fs::is_directory(old_dir, ec) || fs::exists(abi_dir, ec))
        return "";
    fs::create_directories(abi_dir, ec);
    std::vector<std::string> failed;
    size_t moved = 0;
    for (const auto &e : fs::directory_iterator(old_dir, ec)) {
        std::string name = e.path().filename();
        std::string to = name.rfind("tc_", 0) == 0 ? "tcm_" + name.substr(3) : name;
        if (rename(e.path().c_str(), (abi_dir + "/" + to).c_str()) == 0)
            ++moved;
        else
            failed.push_back(fmt::format("{} ({})", name, std::strerror(errno)));
    }
    if (failed.empty())
        fs::remove(old_dir, ec);
    std::string note = fmt::format("moved {} pinned objects of tricolor's ABI 1 from {} to {} "
                                   "(same layout, new names): tokens and counters are kept",
                                   moved, old_dir, abi_dir);
    if (!failed.empty())
        note += fmt::format("; left in {}: {}", old_dir, fmt::join(failed, ", "));
    return note;
}

// Where nothing is mounted at /sys/fs/bpf (the case under `ip netns exec`, which remounts
// /sys), one is mounted, as bpftool and Cilium do; anywhere else the start is refused with the
// command that fixes it.
void check_pin_dir(const std::string &pin_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path p = fs::absolute(pin_dir, ec);
    fs::path existing = p;
    while (!fs::exists(existing, ec) && existing.has_parent_path() &&
           existing != existing.parent_path())
        existing = existing.parent_path();
    if (fs::exists(existing, ec) && !fs::is_directory(existing, ec))
        throw std::runtime_error(
            fmt::format("--pin-dir {}: {} is not a directory", pin_dir, existing.string()));
    if (on_bpffs(existing))
        return;
    const fs::path bpf_root = "/sys/fs/bpf";
    auto rel = p.lexically_relative(bpf_root);
    bool under_root = !rel.empty() && *rel.begin() != "..";
    if (under_root && fs::is_directory(bpf_root, ec) && existing == bpf_root) {
        if (mount("bpf", bpf_root.c_str(), "bpf", 0, "mode=0700") == 0) {
            log(fmt::format("mounted a bpf filesystem at {} (nothing was mounted there), as "
                            "bpftool does",
                            bpf_root.string()));
            if (!in_host_mount_namespace())
                log("warning: this is not the host's mount namespace (ip netns exec?): the pins "
                    "last only as long as this namespace; run tricolord in the host's (e.g. "
                    "`nsenter --net=/run/netns/NS tricolord`) to keep them across restarts");
            return;
        }
        throw std::runtime_error(fmt::format(
            "--pin-dir {}: no bpf filesystem is mounted at {} and mounting one failed ({}): "
            "mount -t bpf bpf {}",
            pin_dir, bpf_root.string(), std::strerror(errno), bpf_root.string()));
    }
    throw std::runtime_error(fmt::format(
        "--pin-dir {}: {} is not on a bpf filesystem, so maps cannot be pinned there: choose a "
        "directory under {} (mount one there with `mount -t bpf bpf {}` if it is missing), or "
        "mount one at the pin directory: mkdir -p {} && mount -t bpf bpf {}",
        pin_dir, existing.string(), bpf_root.string(), bpf_root.string(), p.string(), p.string()));
}

namespace {

uint32_t pinned_map_id(const std::string &path) {
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        return 0;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    uint32_t id = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
    close(fd);
    return id;
}

} // namespace

std::string prepare_pin_dir(const std::string &pin_dir, const std::string &user) {
    namespace fs = std::filesystem;
    passwd *pw = getpwnam(user.c_str());
    if (!pw)
        throw std::runtime_error(
            fmt::format("--prepare-pin-dir {}: no such user (getent passwd lists them)", user));
    check_pin_dir(pin_dir);
    std::error_code ec;
    fs::create_directories(pin_dir, ec);
    if (ec)
        throw std::runtime_error(fmt::format("cannot create {}: {}", pin_dir, ec.message()));
    chmod(pin_dir.c_str(), 0700);
    // The programs a daemon of before program pins (run as root) left on hooks: pinned under
    // progs/ by id, found by their name and their maps (this pin directory's, not another's),
    // which only root may read; the daemon that follows, not root, knows them by id.
    const std::string abi_dir = fmt::format("{}/abi{}", pin_dir, TCM_ABI_VERSION);
    size_t pinned = 0;
    if (uint32_t ours = pinned_map_id(abi_dir + "/tcm_runtime")) {
        fs::create_directories(abi_dir + "/progs", ec);
        auto keep = [&](const HookState &s, const char *kind) {
            if (!s.prog_id || !s.ours)
                return;
            int fd = bpf_prog_get_fd_by_id(s.prog_id);
            if (fd < 0)
                return;
            auto maps = prog_map_ids(fd);
            std::string at = fmt::format("{}/progs/{}_{}", abi_dir, kind, s.prog_id);
            if (std::ranges::find(maps, ours) != maps.end() && !fs::exists(at, ec) &&
                bpf_obj_pin(fd, at.c_str()) == 0)
                ++pinned;
            close(fd);
        };
        if (struct if_nameindex *all = if_nameindex()) {
            for (auto *i = all; i->if_index != 0; ++i) {
                int idx = static_cast<int>(i->if_index);
                keep(query_xdp(idx, {}), "xdp");
                for (Direction d : {Direction::ingress, Direction::egress})
                    keep(query_tc(idx, d, {}), "tc");
            }
            if_freenameindex(all);
        }
    }
    // Everything under it the user's: what a daemon run as root pinned, too.
    size_t given = 0;
    auto give = [&](const fs::path &p) {
        if (lchown(p.c_str(), pw->pw_uid, pw->pw_gid) == 0)
            ++given;
    };
    give(pin_dir);
    for (auto it = fs::recursive_directory_iterator(pin_dir, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec))
        give(it->path());
    return fmt::format("{}: {} objects given to {}{}", pin_dir, given, user,
                       pinned ? fmt::format(", {} programs an earlier daemon left on hooks "
                                            "pinned for their ids",
                                            pinned)
                              : "");
}

} // namespace tricolor::tricolord
