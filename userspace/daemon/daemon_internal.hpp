// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// daemon_internal.hpp: what the files of tricolord_core share and nothing outside them uses.
#pragma once

#include "daemon.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tricolor::daemon_internal {

using nlohmann::json;

// ---- wire.cpp: the JSON of requests and replies (docs/control.md) ----

json error(const std::string &message);
json ok(json body = json::object());
json warnings_body(const std::vector<std::string> &w); // {"warnings": [...]} when there are any
Result<std::string> need_string(const json &r, const char *field);

// The request's envelope: an object with "cmd" and this protocol's "version". Returns "cmd".
Result<std::string> request_command(const json &r);

// The fields of one command's request: anything else, a wrong type or a missing required field
// is refused before the command runs, naming the field. A mistyped "dry_run" must never become
// a real apply.
enum class Kind { string, boolean, count, object, array };
struct Field {
    std::string_view name;
    Kind kind;
    bool required = false;
};
Result<void> check_fields(std::string_view cmd, const json &r, std::span<const Field> fields);

// An attachment as a request (and the state file) gives it, and as replies show it.
Result<AttachmentSpec> attachment_from(const json &r);
json attachment_json(const AttachmentSpec &a);
std::string check_ifname_pattern(const std::string &glob);

json counters_json(const tcm_counters &c);
json tcp_counters_json(const ShapeCounters &c);
json quota_json(const Datapath::QuotaUse &q);
// A spec's policy meters in one bucket (no per, or per aggregate): its quota is the policy's.
inline bool aggregate(const json &spec) {
    auto per = spec.find("per");
    return per == spec.end() || per->is_null() || *per == "aggregate";
}
// A cgroup policy of the ingress direction (bpf/cgroup_in.bpf.c meters it).
bool is_cgroup_ingress(const Policy &p);

// A flow's key as flows prints it; --per cgroup names the cgroup by its path (@cgroup_path).
std::string flow_key_text(const tcm_flow_key &k, const Policy &p,
                          const std::function<std::string(uint64_t)> &cgroup_path = {});
// The two buckets of @f as of @now_ns: what a packet arriving now would find (the refill since
// the last packet included). In bytes (packets in packet mode) and percent of the size.
json buckets_json(const Policy &p, const tcm_flow &f, uint64_t now_ns);

// ---- state_file.cpp: the config and state files ----

// A config or state file, read and checked for shape (the policies are checked later, whole).
struct Doc {
    std::vector<json> specs;
    std::vector<AttachmentSpec> attachments;
    std::vector<AttachmentSpec> patterns; // attach --match-ifname
    std::vector<std::string> containers;  // engines to follow (config only; docs/containers.md)
    std::optional<uint32_t> max_flows;    // the flow table's most (config only; --max-flows)
    uint64_t text_hash = 0;               // of the file as read: names the state a journal extends
};
// Empty optional: there is no such file.
Result<std::optional<Doc>> read_doc(const std::string &path);
// The records of the journal at @path, if it extends the state file whose text has hash
// @extends; none otherwise. A torn last line (a crash while appending) is left out.
std::vector<json> read_journal(const std::string &path, uint64_t extends);
// @doc with the journal's records applied in order.
void replay_journal(Doc &doc, const std::vector<json> &records);

// ---- attachments.cpp: hooks ----

bool same_hook(const AttachmentSpec &a, const AttachmentSpec &b);
// Whether attachment @a was made by the attach --match-ifname pattern @pattern.
bool made_by(const AttachmentSpec &a, const AttachmentSpec &pattern);
std::string hook_text(const AttachmentSpec &a); // "eth0 xdp", "eth0 tc egress"
HookState query_hook(const AttachmentSpec &a, int ifindex, const ProgramIds &ours);
std::vector<uint32_t> egress_ifindexes(const std::vector<AttachmentSpec> &attachments);

} // namespace tricolor::daemon_internal
