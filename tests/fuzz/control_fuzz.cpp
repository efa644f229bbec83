// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// One control-socket request line, as tricolord reads and answers it, with a real data path
// behind it (root, bpffs). Properties: no crash or sanitizer finding; every answer is an object
// saying ok or not; a request refused changes nothing (the policy set and the attachments the
// same before and after).
//
// The daemon lives in a network namespace of its own, where only lo exists: an "attach" the
// fuzzer writes touches no interface of the machine's. Requests naming "shape" are skipped: a
// --shape sockets policy attaches sock_ops to the root cgroup, which would pace the machine's
// own TCP sockets while the fuzzer runs (the shape paths have their own e2e tests).
#include "fuzz.hpp"

#include "daemon.hpp"
#include "tricolor/control.hpp"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace {

std::string g_dir, g_pins;

void cleanup() {
    tricolor::Datapath::remove_pins(g_pins);
    std::error_code ec;
    std::filesystem::remove_all(g_dir, ec);
}

tricolor::Daemon &the_daemon() {
    static tricolor::Daemon *d = [] {
        if (unshare(CLONE_NEWNET) != 0) {
            std::perror("unshare(CLONE_NEWNET): the control harness needs root");
            std::abort();
        }
        g_dir = fmt::format("/tmp/tricolor-fuzz-{}", getpid());
        g_pins = fmt::format("/sys/fs/bpf/tricolor-fuzz-{}", getpid());
        std::filesystem::create_directories(g_dir);
        std::atexit(cleanup);
        tricolor::DaemonOptions o;
        o.config = g_dir + "/tricolor.yaml";
        o.state = g_dir + "/state.yaml";
        o.socket = g_dir + "/sock";
        o.pin_dir = g_pins;
        o.metrics = "none";
        o.flow_capacity = 1024;
        return new tricolor::Daemon(o);
    }();
    return *d;
}

nlohmann::json ask(std::string_view cmd) {
    return the_daemon().handle({{"version", tricolor::kControlProtocolVersion}, {"cmd", cmd}});
}

std::string snapshot() {
    return ask("policy_list").dump() + ask("status").value("attachments", nlohmann::json()).dump();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::string_view line(reinterpret_cast<const char *>(data), size);
    if (line.find("shape") != std::string_view::npos)
        return 0;
    auto request = tricolor::parse_control_request(line);
    if (!request)
        return 0;
    tricolor::Daemon &d = the_daemon();
    const std::string before = snapshot();
    nlohmann::json reply = d.handle(*request);
    FUZZ_REQUIRE(reply.is_object() && reply.contains("ok") && reply["ok"].is_boolean(), "answer %s",
                 reply.dump().c_str());
    if (!reply["ok"].get<bool>()) {
        FUZZ_REQUIRE(reply.contains("error"), "a refusal without a message: %s",
                     reply.dump().c_str());
        std::string after = snapshot();
        FUZZ_REQUIRE(after == before, "refused (%s) but the state changed:\n%s\n%s",
                     reply.dump().c_str(), before.c_str(), after.c_str());
    }
    // Keep the set small, so that each run costs about the same.
    if (ask("policy_list")["policies"].size() > 32)
        d.handle({{"version", tricolor::kControlProtocolVersion},
                  {"cmd", "apply"},
                  {"policies", nlohmann::json::array()}});
    return 0;
}
