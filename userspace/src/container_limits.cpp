// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// container_limits.cpp: container_limits.hpp.
#include "tricolor/container_limits.hpp"

#include <fmt/format.h>

#include <algorithm>

using nlohmann::json;

namespace tricolor {

uint64_t default_burst_bytes(uint64_t rate_bps) {
    return std::max<uint64_t>(rate_bps / 800, 65536);
}

json template_base(json spec) {
    for (const char *k :
         {"name", "match", "parent", "only_parent", "owner", "priority", "managed_by"})
        spec.erase(k);
    return spec;
}

namespace {
// @base named @name, with CIR @rate_bps and CBS @burst_bytes where @rate_bps is not 0.
json limited(json base, const std::string &name, uint64_t rate_bps, uint64_t burst_bytes,
             const std::string &owner, const std::string &managed_by) {
    base["name"] = name;
    base["managed_by"] = managed_by;
    if (rate_bps) {
        base["cir"] = fmt::format("{}bit", rate_bps);
        base["cbs"] = std::to_string(burst_bytes);
    }
    base["owner"] = owner;
    return base;
}
} // namespace

json container_policy(json base, const std::string &name, bool ingress, const std::string &address,
                      uint64_t rate_bps, uint64_t burst_bytes, const std::string &owner,
                      const std::string &managed_by) {
    json p = limited(std::move(base), name, rate_bps, burst_bytes, owner, managed_by);
    const char *prefix = address.find(':') == std::string::npos ? "/32" : "/128";
    p["match"] = {{ingress ? "dst" : "src", address + prefix}};
    return p;
}

json container_cgroup_policy(json base, const std::string &name, bool ingress,
                             const std::string &cgroup, uint64_t rate_bps, uint64_t burst_bytes,
                             const std::string &owner, const std::string &managed_by) {
    json p = limited(std::move(base), name, rate_bps, burst_bytes, owner, managed_by);
    p["match"] = {{"cgroup", cgroup}};
    p["direction"] = ingress ? "ingress" : "egress";
    // What the cgroup's sockets receive is metered as it reaches them: nothing there to pace.
    if (ingress)
        p.erase("shape");
    return p;
}

namespace {
json tc_request(const char *cmd, const std::string &iface, const char *direction) {
    return {{"cmd", cmd}, {"iface", iface}, {"hook", "tc"}, {"direction", direction}};
}
} // namespace

std::vector<json> container_attach(const std::string &iface, const std::string &managed_by) {
    std::vector<json> out;
    for (const char *d : {"egress", "ingress"}) {
        out.push_back(tc_request("attach", iface, d));
        out.back()["managed_by"] = managed_by;
    }
    return out;
}

std::vector<json> container_detach(const std::string &iface) {
    return {tc_request("detach", iface, "ingress"), tc_request("detach", iface, "egress")};
}

} // namespace tricolor
