// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// cni.hpp: the `tricolor` CNI plugin (docs/containers.md, spec §13). Chained after an interface
// plugin (bridge, ptp, Calico, Flannel), it reads the `bandwidth` capability as the reference
// `bandwidth` plugin does and asks the running tricolord to meter the container's traffic: a
// committed bucket per direction, matched by the container's address, on its host-side
// interface's tc hooks. One executable; the runtime runs it with the CNI environment and the
// network configuration on stdin, and reads a result or an error object on stdout.
#pragma once

#include "tricolor/result.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tricolor::cni {

// The CNI versions this plugin speaks (the reference plugins' 0.3.x and 0.4.0, and 1.0.0).
const std::vector<std::string> &supported_versions();

// A CNI error: the spec's code (1-99 the spec's own, 100 and up this plugin's), a message and
// details. Printed as {"cniVersion", "code", "msg", "details"} with a non-zero exit.
struct Error {
    int code = 999;
    std::string msg, details;
};

// The environment and stdin of one invocation.
struct Invocation {
    std::string command; // ADD, DEL, CHECK, VERSION, STATUS, GC
    std::string container_id, netns, ifname, args, path;
    std::string stdin_text;
};

// What an invocation prints, and its exit status.
struct Outcome {
    int exit_code = 0;
    std::string out;
};

// Runs one invocation against the daemon named by the configuration's "socket".
Outcome run(const Invocation &inv);

// ---- parts, for the tests ---------------------------------------------------------------------

// One direction's limit from the bandwidth capability (bit/s, and bits of burst).
struct Limit {
    uint64_t rate = 0, burst = 0;
};

struct Config {
    std::string cni_version, name;
    std::string socket;
    std::optional<Limit> ingress, egress; // to the container, from it
    std::string algo = "srtcm";
    std::string shape = "sockets", aqm = "ecn";
    std::string per = "aggregate";
    std::string green, yellow, red = "drop";
    std::string pir, pbs, eir, ebs; // trtcm's peak, rfc4115's excess; EBS (srtcm: 0 unless given)
    // A policy of tricolord's config whose meter and actions the container's policies copy
    // (their rate and burst the capability's): "template"; none of the keys above with it.
    std::string template_name;
    nlohmann::json prev_result;
};

// Parses and checks the network configuration (stdin). Unknown keys, rates that are not
// positive integers, a burst without a rate: an Error naming the key.
std::expected<Config, Error> parse_config(const std::string &text, bool need_prev_result);

// The policy names of a container ("cni-" + id + "-in" / "-out", the id cut to fit 63).
std::string policy_name(const std::string &container_id, bool ingress);

// The policies for one container's limits: to it (dst its address), from it (src its address);
// with @tmpl (the template policy's spec, as tricolord shows it) its fields but the name, match,
// parent, only_parent and owner.
std::vector<nlohmann::json> policies_for(const Config &c, const std::string &container_id,
                                         const std::string &address, const nlohmann::json &k8s,
                                         const nlohmann::json &tmpl = nullptr);

} // namespace tricolor::cni
