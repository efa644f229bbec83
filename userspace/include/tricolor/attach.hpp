// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// attach.hpp: putting the data path on an interface, and taking it off. XDP through netlink;
// tc through a tcx link pinned in bpffs where the kernel has tcx (6.6+), else clsact + cls_bpf.
// All of them stay attached when the process that attached them exits, which is what lets the
// daemon restart without a window of unpoliced traffic. Re-attaching replaces our own program
// atomically; another program on the same hook is never clobbered.
#pragma once

#include "tricolor/units.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tricolor {

enum class Hook { xdp, tc };
enum class Direction { ingress, egress };
enum class XdpMode { auto_mode, native, generic };

std::string_view to_string(Hook h);
std::string_view to_string(Direction d);
std::string_view to_string(XdpMode m);

struct AttachResult {
    std::string mode;    // "native", "generic", "tcx" or "clsact"
    std::string warning; // e.g. auto mode fell back to generic
};

// The program attached at a hook: 0 if none.
struct HookState {
    uint32_t prog_id = 0;
    std::string prog_name; // "" when the kernel does not tell (CAP_SYS_ADMIN only)
    std::string mode;      // xdp: native|generic
    bool ours = false;     // the data path's (one of ProgramIds, or by its name)
};

// The ids of the data path's programs (Datapath::program_ids: this process's and those an
// earlier daemon of the same pin directory left attached): how a program at a hook is known
// to be ours without CAP_SYS_ADMIN, which naming another process's program needs.
using ProgramIds = std::vector<uint32_t>;

Result<int> interface_index(const std::string &name);

Result<AttachResult> attach_xdp(int ifindex, int prog_fd, XdpMode mode, const ProgramIds &ours);
Result<void> detach_xdp(int ifindex, const ProgramIds &ours);
HookState query_xdp(int ifindex, const ProgramIds &ours);

// @link_dir: where tcx links are pinned (empty: clsact only).
Result<AttachResult> attach_tc(int ifindex, Direction dir, int prog_fd, const std::string &link_dir,
                               const ProgramIds &ours);
Result<void> detach_tc(int ifindex, Direction dir, const std::string &link_dir);
HookState query_tc(int ifindex, Direction dir, const ProgramIds &ours);
// True when program @prog_id uses one of the maps program @prog_fd uses: the same data path
// (the same pinned maps), not another daemon's.
bool shares_maps(uint32_t prog_id, int prog_fd);

// Unpins the tcx links in @link_dir whose interface no longer exists (deleted, or moved to
// another namespace); returns how many.
int release_defunct_tcx_links(const std::string &link_dir);

// Our programs' names, as the kernel reports them (15 characters at most).
inline constexpr const char *kXdpProgName = "tricolor_xdp";
inline constexpr const char *kTcProgName = "tricolor_tc";

} // namespace tricolor
