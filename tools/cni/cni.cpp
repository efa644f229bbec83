// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// cni.cpp: the `tricolor` CNI plugin's commands (cni.hpp). Everything it makes is made by the
// daemon, through its control socket: two policies and the host-side interface's tc
// attachments, all named or found from the container id, so that DEL needs nothing the plugin
// kept (a CNI plugin keeps no state of its own between invocations).
#include "cni.hpp"

#include "tricolor/container_limits.hpp"
#include "tricolor/control.hpp"
#include "tricolor/netns.hpp"
#include "tricolor/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <net/if.h>
#include <unistd.h>

using nlohmann::json;

namespace tricolor::cni {

const std::vector<std::string> &supported_versions() {
    static const std::vector<std::string> v = {"0.3.0", "0.3.1", "0.4.0", "1.0.0"};
    return v;
}

namespace {

// The spec's error codes (CNI SPEC.md, "Error").
constexpr int kIncompatibleVersion = 1, kUnsupportedField = 2, kBadEnv = 4, kDecodeFailure = 6,
              kInvalidConfig = 7, kTryAgainLater = 11;
constexpr uint64_t kUnsetBurstBits = 0xffffffffull;
// This plugin's own (100 and up).
constexpr int kExists = 100, kDaemonRefused = 101, kDrift = 102;

Error err(int code, std::string msg, std::string details = "") {
    return {code, std::move(msg), std::move(details)};
}

// The keys the runtime or the CNI spec put in a plugin's configuration, and this plugin's own.
const std::vector<std::string> &known_keys() {
    static const std::vector<std::string> k = {
        // the spec's and the runtime's
        "cniVersion", "name", "type", "capabilities", "runtimeConfig", "prevResult", "args",
        "ipMasq", "ipam", "dns",
        // the reference bandwidth plugin's static keys
        "ingressRate", "ingressBurst", "egressRate", "egressBurst",
        // this plugin's
        "socket", "algo", "pir", "pbs", "eir", "ebs", "shape", "aqm", "per", "green", "yellow",
        "red", "template"};
    return k;
}

// A rate or burst: a JSON integer above 0 (the reference plugin's types are uint64).
std::expected<uint64_t, Error> positive(const json &v, const std::string &key) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > 0)
        return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() > 0)
        return static_cast<uint64_t>(v.get<int64_t>());
    return std::unexpected(err(kInvalidConfig,
                               fmt::format("{} must be a positive integer, not {}", key, v.dump()),
                               key + " = " + v.dump()));
}

// One direction's rate and burst from @src (runtimeConfig.bandwidth, or the static keys).
std::expected<std::optional<Limit>, Error> limit_from(const json &src, const std::string &dir) {
    const std::string rk = dir + "Rate", bk = dir + "Burst";
    const bool has_rate = src.contains(rk) && !src[rk].is_null();
    const bool has_burst = src.contains(bk) && !src[bk].is_null();
    // A rate of 0 is refused, not taken as "no limit": the runtime leaves out what is not set
    // (libcni's omitempty), so a 0 is someone's mistake.
    if (!has_rate && !has_burst)
        return std::nullopt;
    if (!has_rate)
        return std::unexpected(err(
            kInvalidConfig, fmt::format("{} is set but {} is not: a burst needs a rate", bk, rk),
            bk + " = " + src[bk].dump()));
    if (!has_burst)
        return std::unexpected(
            err(kInvalidConfig, fmt::format("{} is set but {} is not: say the burst too", rk, bk),
                rk + " = " + src[rk].dump()));
    auto r = positive(src[rk], rk);
    if (!r)
        return std::unexpected(r.error());
    auto b = positive(src[bk], bk);
    if (!b)
        return std::unexpected(b.error());
    if (*b < 8)
        return std::unexpected(
            err(kInvalidConfig, fmt::format("{} is in bits: {} is less than a byte", bk, *b)));
    // A pod annotated with rates alone gets a burst from its runtime: containerd passes 2^32-1
    // bits, CRI-O 2^35-1 (512 MiB, 4 GiB: no limit for as long). Those, and any burst of 512 MiB
    // or more, are "not set": 10 ms of the rate, at least 64 KiB (as a container's label).
    if (*b >= kUnsetBurstBits)
        *b = default_burst_bytes(*r) * 8;
    return Limit{*r, *b};
}

std::string str_key(const json &j, const char *key, const std::string &def) {
    if (!j.contains(key))
        return def;
    return j[key].is_string() ? j[key].get<std::string>() : std::string();
}

bool is_bridge(const std::string &name) {
    return access(fmt::format("/sys/class/net/{}/bridge", name).c_str(), F_OK) == 0;
}

struct Found {
    std::string host_if;
    std::string address; // the container's first address, without its prefix length
};

// The container's interface in the result, and the host-side one: the interface without a
// sandbox that is the container interface's veth peer (as the reference plugin finds it), else
// the one interface without a sandbox that is not a bridge.
std::expected<Found, Error> find_in_result(const json &prev, const Invocation &inv) {
    if (!prev.is_object() || !prev.contains("interfaces") || !prev["interfaces"].is_array())
        return std::unexpected(err(kInvalidConfig,
                                   "prevResult has no interfaces: chain tricolor after an "
                                   "interface plugin (bridge, ptp, Calico, Flannel)"));
    const json &ifs = prev["interfaces"];
    int container = -1;
    std::vector<std::string> host_side;
    for (size_t i = 0; i < ifs.size(); ++i) {
        const json &e = ifs[i];
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string())
            continue;
        const bool sandboxed = e.contains("sandbox") && e["sandbox"].is_string() &&
                               !e["sandbox"].get<std::string>().empty();
        if (sandboxed && e["name"] == inv.ifname)
            container = static_cast<int>(i);
        else if (!sandboxed)
            host_side.push_back(e["name"]);
    }
    if (container < 0)
        return std::unexpected(
            err(kInvalidConfig,
                fmt::format("prevResult names no interface '{}' in the container (CNI_IFNAME)",
                            inv.ifname)));
    Found f;
    if (auto peer = veth_peer_name(inv.netns, inv.ifname);
        !peer.empty() && std::ranges::find(host_side, peer) != host_side.end())
        f.host_if = peer;
    if (f.host_if.empty()) {
        std::vector<std::string> veths;
        for (const auto &n : host_side)
            if (if_nametoindex(n.c_str()) && !is_bridge(n))
                veths.push_back(n);
        if (veths.size() == 1)
            f.host_if = veths[0];
    }
    if (f.host_if.empty())
        return std::unexpected(err(kInvalidConfig,
                                   "prevResult names no host-side interface of the container's "
                                   "(the peer of its veth, without a sandbox)"));
    // Its address: the first of the container interface's IPs (IPv4 first).
    if (prev.contains("ips") && prev["ips"].is_array()) {
        std::string v4, v6;
        for (const auto &ip : prev["ips"]) {
            if (!ip.is_object() || !ip.contains("address") || !ip["address"].is_string())
                continue;
            if (ip.contains("interface") && ip["interface"].is_number_integer() &&
                ip["interface"].get<int>() != container)
                continue;
            std::string a = ip["address"];
            a = a.substr(0, a.find('/'));
            std::string &slot = a.find(':') == std::string::npos ? v4 : v6;
            if (slot.empty())
                slot = a;
        }
        f.address = !v4.empty() ? v4 : v6;
    }
    if (f.address.empty())
        return std::unexpected(err(kInvalidConfig, "prevResult gives the container no address"));
    return f;
}

// K8S_POD_NAMESPACE and K8S_POD_NAME from CNI_ARGS ("K=V;K=V").
json k8s_of(const std::string &args) {
    json out = json::object();
    size_t at = 0;
    while (at <= args.size()) {
        size_t end = args.find(';', at);
        std::string kv = args.substr(at, end == std::string::npos ? std::string::npos : end - at);
        if (auto eq = kv.find('='); eq != std::string::npos) {
            std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
            if (k == "K8S_POD_NAMESPACE")
                out["namespace"] = v;
            else if (k == "K8S_POD_NAME")
                out["name"] = v;
        }
        if (end == std::string::npos)
            break;
        at = end + 1;
    }
    return out;
}

std::string error_text(const Error &e, const std::string &version) {
    json j = {
        {"cniVersion", version.empty() ? "1.0.0" : version}, {"code", e.code}, {"msg", e.msg}};
    if (!e.details.empty())
        j["details"] = e.details;
    return j.dump() + "\n";
}

// One control request; the daemon's refusal is an Error with its text.
std::expected<json, Error> ask(const std::string &socket, const json &req) {
    auto r = control_request(socket, req);
    if (!r)
        return std::unexpected(
            err(kTryAgainLater, fmt::format("tricolord does not answer at {}", socket), r.error()));
    if (!r->value("ok", false))
        return std::unexpected(
            err(kDaemonRefused, r->value("error", std::string("refused")), req.dump()));
    return *r;
}

bool has_policy(const std::string &socket, const std::string &name) {
    auto r = control_request(socket, {{"cmd", "policy_show"}, {"name", name}});
    return r && r->value("ok", false);
}

// The container's policies and its interface's attachments, undone in reverse; missing ones are
// not an error (DEL must succeed when there is nothing to remove).
void remove_all(const std::string &socket, const std::string &id, const std::string &host_if) {
    for (bool in : {true, false})
        control_request(socket, {{"cmd", "policy_del"}, {"name", policy_name(id, in)}});
    if (!host_if.empty())
        for (const auto &r : container_detach(host_if))
            control_request(socket, r);
}

} // namespace

std::string policy_name(const std::string &container_id, bool ingress) {
    // 63 at most: "cni-" + 52 of the id + "-out".
    return fmt::format("cni-{}-{}", container_id.substr(0, 52), ingress ? "in" : "out");
}

std::expected<Config, Error> parse_config(const std::string &text, bool need_prev_result) {
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        return std::unexpected(
            err(kDecodeFailure, "the network configuration is not a JSON object"));
    Config c;
    c.cni_version = str_key(j, "cniVersion", "");
    c.name = str_key(j, "name", "");
    if (std::ranges::find(supported_versions(), c.cni_version) == supported_versions().end())
        return std::unexpected(
            err(kIncompatibleVersion,
                fmt::format("cniVersion '{}' is not one this plugin speaks", c.cni_version),
                "supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0"));
    for (const auto &[k, v] : j.items())
        if (std::ranges::find(known_keys(), k) == known_keys().end())
            return std::unexpected(err(kUnsupportedField, fmt::format("unknown key '{}'", k),
                                       fmt::format("{} = {}", k, v.dump())));
    c.socket = str_key(j, "socket", kDefaultSocket);
    if (c.socket.empty())
        return std::unexpected(err(kInvalidConfig, "socket must be a path"));
    // Own keys: strings, checked by the daemon when it adds the policy (it names the field).
    for (auto [key, dst] : {std::pair{"algo", &c.algo},
                            {"pir", &c.pir},
                            {"pbs", &c.pbs},
                            {"eir", &c.eir},
                            {"ebs", &c.ebs},
                            {"shape", &c.shape},
                            {"aqm", &c.aqm},
                            {"per", &c.per},
                            {"green", &c.green},
                            {"yellow", &c.yellow},
                            {"red", &c.red},
                            {"template", &c.template_name}}) {
        if (j.contains(key) && !j[key].is_string())
            return std::unexpected(err(kInvalidConfig, fmt::format("{} must be a string", key)));
        *dst = str_key(j, key, *dst);
        if (j.contains(key) && std::string(key) != "template" && j.contains("template"))
            return std::unexpected(
                err(kInvalidConfig, fmt::format("{} and template: the template gives the "
                                                "meter and the actions",
                                                key)));
    }
    if (j.contains("template") && c.template_name.empty())
        return std::unexpected(err(kInvalidConfig, "template must name a policy"));
    // runtimeConfig.bandwidth wins over the static keys, as in the reference plugin.
    json bw = json::object();
    for (const char *k : {"ingressRate", "ingressBurst", "egressRate", "egressBurst"})
        if (j.contains(k))
            bw[k] = j[k];
    if (j.contains("runtimeConfig") && j["runtimeConfig"].is_object() &&
        j["runtimeConfig"].contains("bandwidth")) {
        const json &rb = j["runtimeConfig"]["bandwidth"];
        if (!rb.is_object())
            return std::unexpected(
                err(kInvalidConfig, "runtimeConfig.bandwidth must be an object"));
        for (const auto &[k, v] : rb.items()) {
            if (k != "ingressRate" && k != "ingressBurst" && k != "egressRate" &&
                k != "egressBurst")
                return std::unexpected(err(
                    kUnsupportedField, fmt::format("unknown key 'runtimeConfig.bandwidth.{}'", k),
                    fmt::format("{} = {}", k, v.dump())));
            bw[k] = v;
        }
    }
    auto in = limit_from(bw, "ingress");
    if (!in)
        return std::unexpected(in.error());
    auto out = limit_from(bw, "egress");
    if (!out)
        return std::unexpected(out.error());
    c.ingress = *in;
    c.egress = *out;
    if (j.contains("prevResult"))
        c.prev_result = j["prevResult"];
    else if (need_prev_result)
        return std::unexpected(err(kInvalidConfig,
                                   "no prevResult: tricolor is a chained plugin, after an "
                                   "interface plugin"));
    return c;
}

std::vector<json> policies_for(const Config &c, const std::string &container_id,
                               const std::string &address, const json &k8s, const json &tmpl) {
    json base;
    if (tmpl.is_object()) {
        base = template_base(tmpl);
    } else {
        base = {
            {"algo", c.algo}, {"per", c.per}, {"shape", c.shape}, {"aqm", c.aqm}, {"red", c.red}};
        // srTCM's E: none unless asked (the capability is a rate and a burst).
        if (c.algo == "srtcm" && c.ebs.empty())
            base["ebs"] = "0";
        for (auto [k, v] : {std::pair{"pir", &c.pir},
                            {"pbs", &c.pbs},
                            {"eir", &c.eir},
                            {"ebs", &c.ebs},
                            {"green", &c.green},
                            {"yellow", &c.yellow}})
            if (!v->empty())
                base[k] = *v;
    }
    // Shown beside the name in stats and flows: the pod where the runtime says which.
    const std::string owner = k8s.contains("namespace") && k8s.contains("name")
                                  ? fmt::format("pod {}/{}", k8s["namespace"].get<std::string>(),
                                                k8s["name"].get<std::string>())
                                  : fmt::format("container {}", container_id.substr(0, 12));
    std::vector<json> out;
    for (bool in : {true, false})
        if (const std::optional<Limit> &l = in ? c.ingress : c.egress)
            out.push_back(container_policy(base, policy_name(container_id, in), in, address,
                                           l->rate, l->burst / 8, owner, "cni"));
    return out;
}

namespace {

Outcome fail(const Error &e, const std::string &version) {
    return {1, error_text(e, version)};
}

Outcome add(const Invocation &inv, const Config &c) {
    auto found = find_in_result(c.prev_result, inv);
    if (!found)
        return fail(found.error(), c.cni_version);
    json result = c.prev_result;
    result["cniVersion"] = c.cni_version;
    if (!c.ingress && !c.egress) // no limit either way: nothing to make
        return {0, result.dump() + "\n"};
    if (auto st = ask(c.socket, {{"cmd", "status"}}); !st)
        return fail(st.error(), c.cni_version);
    json tmpl;
    if (!c.template_name.empty()) {
        auto t = ask(c.socket, {{"cmd", "policy_show"}, {"name", c.template_name}});
        if (!t)
            return fail(
                err(kInvalidConfig,
                    fmt::format("template '{}': tricolord has no such policy", c.template_name),
                    t.error().msg),
                c.cni_version);
        tmpl = (*t)["policy"];
    }
    auto policies = policies_for(c, inv.container_id, found->address, k8s_of(inv.args), tmpl);
    for (const auto &p : policies)
        if (has_policy(c.socket, p["name"]))
            return fail(err(kExists,
                            fmt::format("container {} has its policies already (a second ADD)",
                                        inv.container_id),
                            p["name"].get<std::string>()),
                        c.cni_version);
    // Policies first, then the hooks: a packet metered is metered by a whole policy set. Any
    // failure undoes what this ADD made, and says what failed.
    std::vector<std::string> made;
    auto undo = [&](const Error &e) {
        for (const auto &n : made)
            control_request(c.socket, {{"cmd", "policy_del"}, {"name", n}});
        for (const auto &r : container_detach(found->host_if))
            control_request(c.socket, r);
        return fail(e, c.cni_version);
    };
    for (const auto &p : policies) {
        if (auto r = ask(c.socket, {{"cmd", "policy_add"}, {"policy", p}}); !r)
            return undo(r.error());
        made.push_back(p["name"]);
    }
    // The host side's tc hooks (where --shape sockets finds the local senders' sockets too), in
    // container_attach's order.
    for (const auto &req : container_attach(found->host_if, "cni"))
        if (auto r = ask(c.socket, req); !r)
            return undo(r.error());
    return {0, result.dump() + "\n"};
}

Outcome del(const Invocation &inv, const Config &c) {
    // Whatever is there goes; nothing there, or no daemon, is success (CNI SPEC: DEL).
    std::string host_if;
    if (c.prev_result.is_object())
        if (auto f = find_in_result(c.prev_result, inv))
            host_if = f->host_if;
    if (host_if.empty() && !inv.netns.empty())
        host_if = veth_peer_name(inv.netns, inv.ifname);
    remove_all(c.socket, inv.container_id, host_if);
    return {0, ""};
}

Outcome check(const Invocation &inv, const Config &c) {
    auto found = find_in_result(c.prev_result, inv);
    if (!found)
        return fail(found.error(), c.cni_version);
    if (auto st = ask(c.socket, {{"cmd", "status"}}); !st)
        return fail(st.error(), c.cni_version);
    for (const auto &want : policies_for(c, inv.container_id, found->address, json())) {
        auto r = control_request(c.socket, {{"cmd", "policy_show"}, {"name", want["name"]}});
        if (!r || !r->value("ok", false))
            return fail(err(kDrift, fmt::format("policy {} is missing", want["name"].dump())),
                        c.cni_version);
        const json &have = (*r)["policy"];
        for (const char *k : {"cir", "cbs", "match"}) {
            // The daemon keeps the spec as given: compare rates as numbers.
            auto norm = [&](const json &v) -> std::string {
                if (std::string(k) == "cir" && v.is_string())
                    if (auto n = parse_rate(v.get<std::string>()))
                        return std::to_string(*n);
                if (std::string(k) == "cbs" && v.is_string())
                    if (auto n = parse_size(v.get<std::string>()))
                        return std::to_string(*n);
                return v.dump();
            };
            if (!have.contains(k) || norm(have[k]) != norm(want[k]))
                return fail(
                    err(kDrift,
                        fmt::format("policy {}: {} is {}, the configuration says {}",
                                    want["name"].dump(), k,
                                    have.contains(k) ? have[k].dump() : "unset", want[k].dump())),
                    c.cni_version);
        }
    }
    auto st = ask(c.socket, {{"cmd", "status"}});
    for (const char *d : {"ingress", "egress"}) {
        bool attached = false;
        for (const auto &a : (*st)["attachments"])
            attached |= a.value("iface", "") == found->host_if && a.value("hook", "") == "tc" &&
                        a.value("direction", "") == d;
        if (!attached)
            return fail(err(kDrift, fmt::format("{} is not attached at tc {}", found->host_if, d)),
                        c.cni_version);
    }
    return {0, ""};
}

} // namespace

Outcome run(const Invocation &inv) {
    if (inv.command == "VERSION")
        return {0,
                json{{"cniVersion", "1.0.0"}, {"supportedVersions", supported_versions()}}.dump() +
                    "\n"};
    const bool need_prev = inv.command == "ADD" || inv.command == "CHECK";
    auto c = parse_config(inv.stdin_text, need_prev);
    if (!c) {
        // Whatever the command: the runtime must hear of a configuration it cannot use.
        json j = json::parse(inv.stdin_text, nullptr, false);
        std::string v = j.is_object() && j.contains("cniVersion") && j["cniVersion"].is_string()
                            ? j["cniVersion"].get<std::string>()
                            : "1.0.0";
        return fail(c.error(), v);
    }
    if (inv.command == "STATUS") {
        if (auto st = ask(c->socket, {{"cmd", "status"}}); !st)
            return fail(err(50, "tricolord is not available", st.error().details), c->cni_version);
        return {0, ""};
    }
    if (inv.command != "ADD" && inv.command != "DEL" && inv.command != "CHECK")
        return fail(err(kBadEnv, fmt::format("CNI_COMMAND '{}' is not ADD, DEL, CHECK, STATUS "
                                             "or VERSION",
                                             inv.command)),
                    c->cni_version);
    if (inv.container_id.empty())
        return fail(err(kBadEnv, "CNI_CONTAINERID is not set"), c->cni_version);
    if (inv.command != "DEL" && (inv.netns.empty() || inv.ifname.empty()))
        return fail(err(kBadEnv, "CNI_NETNS and CNI_IFNAME must be set"), c->cni_version);
    if (inv.command == "ADD")
        return add(inv, *c);
    if (inv.command == "DEL")
        return del(inv, *c);
    return check(inv, *c);
}

} // namespace tricolor::cni
