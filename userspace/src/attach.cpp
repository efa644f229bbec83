// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// attach.cpp: see attach.hpp.
#include "tricolor/attach.hpp"
#include "tricolor/bpf_load.hpp"
#include "tricolor/text.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <linux/if_link.h>
#include <net/if.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <vector>
#include <unistd.h>

namespace tricolor {
namespace {

// cls_bpf filter identity: fixed, so a restart replaces rather than adds.
constexpr uint32_t kTcHandle = 0x7c1;
constexpr uint32_t kTcPriority = 0x7c1;

// tcx attach types (kernel 6.6+); Debian 12's uapi headers are from 6.1 and lack them.
constexpr int kBpfTcxIngress = 46;
constexpr int kBpfTcxEgress = 47;

bpf_attach_type tcx_type(Direction d) {
    return static_cast<bpf_attach_type>(d == Direction::ingress ? kBpfTcxIngress : kBpfTcxEgress);
}

std::string tcx_pin(const std::string &link_dir, int ifindex, Direction d) {
    return fmt::format("{}/tcx_{}_{}", link_dir, ifindex, to_string(d));
}

std::string ifname(int ifindex) {
    char buf[IF_NAMESIZE] = {};
    return if_indextoname(ifindex, buf) ? buf : fmt::format("ifindex {}", ifindex);
}

// errno_text, and for a refusal what the kernel checks to attach: a daemon not run as root
// must hold CAP_NET_ADMIN (docs/daemon.md, "Least privilege").
std::string attach_errno(int err) {
    int e = err < 0 ? -err : err;
    return errno_text(err) + (e == EPERM || e == EACCES ? " (attaching needs CAP_NET_ADMIN)" : "");
}

// A program's name as the kernel has it: "" when it will not say (BPF_PROG_GET_FD_BY_ID needs
// CAP_SYS_ADMIN, which a daemon run as a user of its own does not have).
std::string prog_name(uint32_t id) {
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0)
        return "";
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    std::string name = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.name : "";
    close(fd);
    return name;
}

// What runs at a hook, and whether it is the data path's: one of @ours (by id: this pin
// directory's programs, which needs no privilege to know), else by its name (a program of a
// daemon from before programs were pinned; the kernel names it to CAP_SYS_ADMIN alone).
HookState hook_state(uint32_t id, std::string mode, const ProgramIds &ours, const char *our_name) {
    HookState s;
    s.prog_id = id;
    s.mode = std::move(mode);
    if (!id)
        return s;
    s.ours = std::ranges::find(ours, id) != ours.end();
    s.prog_name = s.ours ? our_name : prog_name(id);
    s.ours = s.ours || s.prog_name == our_name;
    return s;
}

// "program 'NAME' (id N)", or "program id N" when the kernel does not name it to us.
std::string program_text(const HookState &s) {
    return s.prog_name.empty() ? fmt::format("program id {}", s.prog_id)
                               : fmt::format("program '{}' (id {})", s.prog_name, s.prog_id);
}

// libbpf prints the kernel's extack for a tc query on an interface without a clsact qdisc
// ("Parent Qdisc doesn't exists"), expected when tcx is in use, and for creating a clsact
// qdisc that is already there ("Exclusivity flag on, cannot modify"), expected on every
// attach without tcx (Linux < 6.6): neither is worth a line.
int quiet_print(enum libbpf_print_level, const char *, va_list) {
    return 0;
}
struct QuietLibbpf {
    libbpf_print_fn_t old = libbpf_set_print(quiet_print);
    ~QuietLibbpf() { libbpf_set_print(old); }
};

int tc_query(bpf_tc_hook *hook, bpf_tc_opts *opts) {
    QuietLibbpf quiet;
    return bpf_tc_query(hook, opts);
}

bpf_tc_hook tc_hook(int ifindex, Direction dir) {
    bpf_tc_hook hook{};
    hook.sz = sizeof(hook);
    hook.ifindex = ifindex;
    hook.attach_point = dir == Direction::ingress ? BPF_TC_INGRESS : BPF_TC_EGRESS;
    return hook;
}

} // namespace

std::string_view to_string(Hook h) {
    return h == Hook::xdp ? "xdp" : "tc";
}
std::string_view to_string(Direction d) {
    return d == Direction::ingress ? "ingress" : "egress";
}
std::string_view to_string(XdpMode m) {
    switch (m) {
    case XdpMode::native:
        return "native";
    case XdpMode::generic:
        return "generic";
    default:
        return "auto";
    }
}

Result<int> interface_index(const std::string &name) {
    unsigned idx = if_nametoindex(name.c_str());
    if (idx == 0)
        return std::unexpected(fmt::format("no interface named '{}'", name));
    return static_cast<int>(idx);
}

HookState query_xdp(int ifindex, const ProgramIds &ours) {
    LIBBPF_OPTS(bpf_xdp_query_opts, q);
    if (bpf_xdp_query(ifindex, 0, &q) < 0)
        return {};
    if (q.drv_prog_id)
        return hook_state(q.drv_prog_id, "native", ours, kXdpProgName);
    if (q.skb_prog_id)
        return hook_state(q.skb_prog_id, "generic", ours, kXdpProgName);
    if (q.hw_prog_id)
        return hook_state(q.hw_prog_id, "offload", ours, kXdpProgName);
    return {};
}

Result<AttachResult> attach_xdp(int ifindex, int prog_fd, XdpMode mode, const ProgramIds &ours) {
    HookState now = query_xdp(ifindex, ours);
    if (now.prog_id && !now.ours)
        return std::unexpected(fmt::format("{} already runs XDP {}, not tricolor's; detach it "
                                           "first",
                                           ifname(ifindex), program_text(now)));
    auto try_mode = [&](uint32_t flags) -> int {
        // Replacing our own program in the mode it runs in is one atomic swap in the kernel.
        LIBBPF_OPTS(bpf_xdp_attach_opts, opts);
        return bpf_xdp_attach(ifindex, prog_fd, flags, &opts);
    };
    AttachResult r;
    auto flags_of = [](const std::string &m) {
        return m == "native" ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
    };
    std::string want = mode == XdpMode::native    ? "native"
                       : mode == XdpMode::generic ? "generic"
                                                  : now.mode;
    if (now.prog_id && want == now.mode) { // ours, in the mode asked for: swap the program
        if (int err = try_mode(flags_of(now.mode)); err < 0)
            return std::unexpected(fmt::format("cannot replace the XDP program on {}: {}",
                                               ifname(ifindex), attach_errno(err)));
        r.mode = now.mode;
        return r;
    }
    if (now.prog_id) {
        // Ours in the other mode. The kernel runs one mode at a time: take it off, put it on in
        // the mode asked for, and if that fails put it back as it was.
        if (int err = bpf_xdp_detach(ifindex, flags_of(now.mode), nullptr); err < 0)
            return std::unexpected(fmt::format("cannot take XDP off {} to switch it from {} to "
                                               "{} mode: {}",
                                               ifname(ifindex), now.mode, want, attach_errno(err)));
        if (int err = try_mode(XDP_FLAGS_UPDATE_IF_NOEXIST | flags_of(want)); err < 0) {
            int back = try_mode(XDP_FLAGS_UPDATE_IF_NOEXIST | flags_of(now.mode));
            return std::unexpected(fmt::format(
                "cannot switch XDP on {} from {} to {} mode: {}; {}", ifname(ifindex), now.mode,
                want, attach_errno(err),
                back == 0 ? fmt::format("it stays in {} mode", now.mode)
                          : fmt::format("and putting it back in {} mode failed too ({}): the "
                                        "interface is not policed",
                                        now.mode, attach_errno(back))));
        }
        r.mode = want;
        r.warning =
            fmt::format("{}: switched XDP from {} to {} mode", ifname(ifindex), now.mode, want);
        return r;
    }
    if (mode != XdpMode::generic) {
        int err = try_mode(XDP_FLAGS_UPDATE_IF_NOEXIST | XDP_FLAGS_DRV_MODE);
        if (err == 0) {
            r.mode = "native";
            return r;
        }
        if (mode == XdpMode::native)
            return std::unexpected(fmt::format("cannot attach XDP in native mode on {}: {}",
                                               ifname(ifindex), attach_errno(err)));
        r.warning = fmt::format("{} has no native XDP ({}): using generic mode, which runs "
                                "after the skb is built and costs more",
                                ifname(ifindex), attach_errno(err));
    }
    if (int err = try_mode(XDP_FLAGS_UPDATE_IF_NOEXIST | XDP_FLAGS_SKB_MODE); err < 0)
        return std::unexpected(
            fmt::format("cannot attach XDP on {}: {}", ifname(ifindex), attach_errno(err)));
    r.mode = "generic";
    return r;
}

Result<void> detach_xdp(int ifindex, const ProgramIds &ours) {
    HookState now = query_xdp(ifindex, ours);
    if (!now.prog_id)
        return std::unexpected(fmt::format("{} has no XDP program attached", ifname(ifindex)));
    if (!now.ours)
        return std::unexpected(fmt::format("the XDP {} on {} is not tricolor's: left alone",
                                           program_text(now), ifname(ifindex)));
    uint32_t flags = now.mode == "native" ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
    if (int err = bpf_xdp_detach(ifindex, flags, nullptr); err < 0)
        return std::unexpected(
            fmt::format("cannot detach XDP from {}: {}", ifname(ifindex), attach_errno(err)));
    return {};
}

HookState query_tc(int ifindex, Direction dir, const ProgramIds &ours) {
    uint32_t ids[16], count = 16, flags = 0;
    if (bpf_prog_query(ifindex, tcx_type(dir), 0, &flags, ids, &count) == 0)
        for (uint32_t i = 0; i < count; ++i)
            if (auto s = hook_state(ids[i], "tcx", ours, kTcProgName); s.ours)
                return s;
    auto hook = tc_hook(ifindex, dir);
    LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
    if (tc_query(&hook, &opts) == 0)
        return hook_state(opts.prog_id, "clsact", ours, kTcProgName);
    return {};
}

namespace {

// Our cls_bpf filter, if any: removed when tcx takes over, so a packet is never metered twice.
void remove_clsact_filter(int ifindex, Direction dir, const ProgramIds &ours) {
    auto hook = tc_hook(ifindex, dir);
    LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
    if (tc_query(&hook, &opts) == 0 && hook_state(opts.prog_id, "", ours, kTcProgName).ours) {
        LIBBPF_OPTS(bpf_tc_opts, del, .handle = kTcHandle, .priority = kTcPriority);
        bpf_tc_detach(&hook, &del);
    }
}

} // namespace

bool shares_maps(uint32_t prog_id, int prog_fd) {
    int fd = bpf_prog_get_fd_by_id(prog_id);
    if (fd < 0)
        return false;
    auto theirs = prog_map_ids(fd);
    close(fd);
    auto ours = prog_map_ids(prog_fd);
    for (uint32_t id : theirs)
        if (std::find(ours.begin(), ours.end(), id) != ours.end())
            return true;
    return false;
}

int release_defunct_tcx_links(const std::string &link_dir) {
    int n = 0;
    std::error_code ec;
    if (link_dir.empty() || !std::filesystem::is_directory(link_dir, ec))
        return 0;
    for (const auto &entry : std::filesystem::directory_iterator(link_dir, ec)) {
        unsigned idx = 0;
        char dir[16] = {};
        std::string name = entry.path().filename().string();
        if (std::sscanf(name.c_str(), "tcx_%u_%15s", &idx, dir) != 2)
            continue;
        char buf[IF_NAMESIZE] = {};
        if (if_indextoname(idx, buf))
            continue; // the interface is still here
        if (unlink(entry.path().c_str()) == 0)
            ++n;
    }
    return n;
}

Result<AttachResult> attach_tc(int ifindex, Direction dir, int prog_fd, const std::string &link_dir,
                               const ProgramIds &ours) {
    if (!link_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(link_dir, ec);
        std::string pin = tcx_pin(link_dir, ifindex, dir);
        // A link pinned by an earlier daemon: swap the program in it, atomically.
        if (int link = bpf_obj_get(pin.c_str()); link >= 0) {
            int err = bpf_link_update(link, prog_fd, nullptr);
            close(link);
            if (err == 0)
                return AttachResult{"tcx", ""};
            unlink(pin.c_str()); // defunct (its interface went away): make a new one
        }
        int link = bpf_link_create(prog_fd, ifindex, tcx_type(dir), nullptr);
        if (link >= 0) {
            int err = bpf_obj_pin(link, pin.c_str());
            close(link);
            if (err < 0)
                return std::unexpected(
                    fmt::format("cannot pin the tcx link at {}: {}", pin, errno_text(err)));
            remove_clsact_filter(ifindex, dir, ours);
            return AttachResult{"tcx", ""};
        }
        if (link != -EINVAL && link != -EOPNOTSUPP)
            return std::unexpected(fmt::format("cannot attach tcx to {} {}: {}", ifname(ifindex),
                                               to_string(dir), attach_errno(link)));
        // No tcx in this kernel: clsact below.
    }
    auto hook = tc_hook(ifindex, dir);
    int created;
    {
        QuietLibbpf quiet;
        created = bpf_tc_hook_create(&hook);
    }
    if (int err = created; err < 0 && err != -EEXIST)
        return std::unexpected(
            fmt::format("cannot add a clsact qdisc to {}: {}", ifname(ifindex), attach_errno(err)));
    // A fixed handle and priority with REPLACE: a restart swaps the program in one step.
    LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE,
                .handle = kTcHandle, .priority = kTcPriority);
    if (int err = bpf_tc_attach(&hook, &opts); err < 0)
        return std::unexpected(fmt::format("cannot attach the tc program to {} {}: {}",
                                           ifname(ifindex), to_string(dir), attach_errno(err)));
    return AttachResult{"clsact", ""};
}

Result<void> detach_tc(int ifindex, Direction dir, const std::string &link_dir) {
    if (!link_dir.empty()) {
        std::string pin = tcx_pin(link_dir, ifindex, dir);
        if (int link = bpf_obj_get(pin.c_str()); link >= 0) {
            bpf_link_detach(link);
            close(link);
            unlink(pin.c_str());
            return {};
        }
    }
    auto hook = tc_hook(ifindex, dir);
    LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
    if (int err = bpf_tc_detach(&hook, &opts); err < 0)
        return std::unexpected(fmt::format("{} has no tricolor tc program on {}: {}",
                                           ifname(ifindex), to_string(dir), attach_errno(err)));
    return {};
}

} // namespace tricolor
