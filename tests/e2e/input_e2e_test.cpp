// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hostile and mistaken input to a running tricolord, through tricolorctl and straight into its
// control socket, and who may ask: each is refused with a message naming what is wrong, and
// changes nothing (docs/control.md).
#include "lab.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

class Input : public DaemonLabTest {};

TEST_F(Input, EveryBadInputIsRefusedWithAMessageAndChangesNothing) {
    ok({"policy", "add", "base", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k"});
    std::string before = ok({"-j", "policy", "list"}).out;
    daemon->settle_state();
    std::string config_before = read_file(daemon->state());
    struct Bad {
        std::vector<std::string> args;
        int exit_code;
        const char *message;
    };
    const std::vector<Bad> cases = {
        {{"policy", "add", "p", "--algo", "srtcm", "--cir", "10zbit", "--cbs", "15k"},
         2,
         "invalid rate '10zbit'"},
        {{"policy", "add", "p", "--algo", "srtcm", "--cir", "2tbit", "--cbs", "15k"},
         2,
         "out of range"},
        {{"policy", "add", "p", "--algo", "trtcm", "--cir", "2mbit", "--cbs", "15k", "--pir",
          "1mbit", "--pbs", "15k"},
         2,
         "PIR 1mbit is below CIR 2mbit"},
        {{"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--match",
          "src", "198.18.0.0/33"},
         2,
         "invalid prefix"},
        {{"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--match",
          "src", "198.18.0.1/15"},
         2,
         "198.18.0.1/15"},
        {{"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--match",
          "dport", "70000"},
         2,
         "invalid port '70000'"},
        {{"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--red",
          "explode"},
         2,
         "invalid action 'explode'"},
        {{"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--match",
          "iface", "nosuchif9"},
         2,
         "no interface named 'nosuchif9'"},
        {{"policy", "add", "base", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k"},
         1,
         "exists"},
        {{"policy", "set", "ghost", "--cir", "1mbit"}, 1, "no policy named 'ghost'"},
        {{"policy", "set", "base", "--cbs", "0"}, 2, "CBS 0 bytes"},
        {{"policy", "del", "ghost"}, 1, "no policy named 'ghost'"},
        {{"attach", "nosuchif9"}, 1, "no interface named 'nosuchif9'"},
        {{"attach", lab->host_if, "--hook", "xdp", "--direction", "egress"},
         2,
         "XDP only sees ingress"},
        {{"policy", "add", "p", "--algo", "wfq", "--cir", "1mbit", "--cbs", "1k"}, 2, "wfq not in"},
        {{"policy", "add", "p", "--cir", "1mbit", "--cbs", "1k"}, 2, "--algo is required"},
        {{"stats", "ghost"}, 1, "no policy named 'ghost'"},
        {{"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--warmup",
          "30s", "--parent", "p"},
         1,
         "policy 'p': it cannot be its own parent"},
        {{"policy", "set", "base", "--warmup", "30s", "--cold-factor", "1"},
         2,
         "cold_factor 1 is out of range 2..16"},
    };
    ASSERT_GE(cases.size(), 8u);
    for (const auto &c : cases) {
        SCOPED_TRACE(c.message);
        auto r = daemon->ctl(c.args);
        EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
        EXPECT_THAT(r.err, HasSubstr(c.message));
        EXPECT_EQ(ok({"-j", "policy", "list"}).out, before);
    }
    EXPECT_EQ(read_file(daemon->state()), config_before);
    // Under -j a refusal is a JSON error on stderr.
    auto j = daemon->ctl({"-j", "policy", "del", "ghost"});
    EXPECT_EQ(j.exit_code, 1);
    EXPECT_EQ(json::parse(j.err)["error"], "no policy named 'ghost'");
}

// One line to the control socket as it is written (no client to tidy it), and the reply.
json raw_request(const std::string &socket_path, const std::string &line) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, socket_path.c_str());
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    shutdown(fd, SHUT_WR);
    std::string reply;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;)
        reply.append(buf, static_cast<size_t>(n));
    close(fd);
    return json::parse(reply, nullptr, false);
}

TEST_F(Input, MalformedSocketRequestsAreRefusedAndTheDaemonLives) {
    auto raw = [&](const std::string &line) { return raw_request(daemon->socket(), line); };
    for (const auto &[line, message] : std::vector<std::pair<std::string, std::string>>{
             {"this is not json\n", "not valid JSON"},
             {"[1,2,3]\n", "must be a JSON object"},
             {"{}\n", "needs \"cmd\""},
             {"{\"cmd\": 7}\n", "needs \"cmd\""},
             {"{\"cmd\": \"status\"}\n", "needs \"version\" (the control protocol's: 1)"},
             {"{\"cmd\": \"status\", \"version\": 2}\n",
              "version 2 asked; this tricolord speaks version 1"},
             {"{\"cmd\": \"reboot\", \"version\": 1}\n", "unknown command 'reboot'"},
             {"{\"cmd\": \"policy_add\", \"version\": 1}\n", "needs \"policy\""},
             {"{\"cmd\": \"policy_add\", \"version\": 1, \"policy\": {\"name\": \"x\"}}\n",
              "algo: missing"},
             {"{\"cmd\": \"policy_set\", \"version\": 1, \"name\": \"x\"}\n", "needs \"patch\""},
             {"{\"cmd\": \"attach\", \"version\": 1, \"iface\": 5}\n",
              "\"iface\" must be a string"},
             {"{\"cmd\": \"apply\", \"version\": 1, \"policies\": {}}\n",
              "\"policies\" must be an array"},
             {"{\"cmd\": \"status\", \"version\": 1, \"cmd\": \"apply\"}\n", "names \"cmd\" twice"},
             {"", "not valid JSON"},
         }) {
        SCOPED_TRACE(line);
        auto reply = raw(line);
        ASSERT_TRUE(reply.is_object());
        EXPECT_FALSE(reply["ok"].get<bool>());
        EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr(message));
    }
    EXPECT_EQ(daemon->ctl({"status"}).exit_code, 0);
}

// Every command, every field: unknown, named twice, of the wrong type, or (if required)
// missing, and the request is refused naming the field, before anything is done (docs/control.md).
// Once an "apply" whose "dry_run" had a flipped byte was applied for real, deleting policies.
TEST_F(Input, EveryCommandRefusesABadFieldAndChangesNothing) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "keep", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "16k", "--match",
        "proto", "udp"});
    auto snapshot = [&] {
        auto status = parse_json(ok({"-j", "status"}));
        return parse_json(ok({"-j", "policy", "list"})).dump() + status["attachments"].dump();
    };
    const std::string before = snapshot();
    json other = {{"name", "other"}, {"algo", "srtcm"}, {"cir", "1mbit"}, {"cbs", "16k"}};
    const std::vector<std::pair<json, std::vector<std::string>>> commands = {
        {{{"cmd", "attach"},
          {"iface", lab->host_if},
          {"hook", "xdp"},
          {"direction", "ingress"},
          {"xdp_mode", "auto"}},
         {"iface"}},
        {{{"cmd", "detach"}, {"iface", lab->host_if}, {"hook", "xdp"}, {"direction", "ingress"}},
         {"iface"}},
        {{{"cmd", "policy_add"}, {"policy", other}}, {"policy"}},
        {{{"cmd", "policy_set"}, {"name", "keep"}, {"patch", {{"cir", "2mbit"}}}},
         {"name", "patch"}},
        {{{"cmd", "policy_del"}, {"name", "keep"}}, {"name"}},
        {{{"cmd", "policy_list"}}, {}},
        {{{"cmd", "policy_show"}, {"name", "keep"}}, {"name"}},
        {{{"cmd", "apply"}, {"policies", json::array({other})}, {"dry_run", true}}, {"policies"}},
        {{{"cmd", "stats"}, {"name", "keep"}}, {}},
        {{{"cmd", "flows"}, {"policy", "keep"}, {"top", 5}, {"walk", false}}, {}},
        {{{"cmd", "status"}}, {}},
    };
    // A value of another kind than the field's.
    auto wrong = [](const json &v) -> json {
        if (v.is_string())
            return 7;
        if (v.is_boolean() || v.is_number())
            return "yes";
        return 1;
    };
    int refused = 0;
    auto expect_refused = [&](const std::string &line, const std::string &message) {
        SCOPED_TRACE(line);
        auto reply = raw_request(daemon->socket(), line + "\n");
        ASSERT_TRUE(reply.is_object());
        EXPECT_EQ(reply["ok"], false);
        EXPECT_THAT(reply.value("error", ""), HasSubstr(message));
        ++refused;
    };
    for (auto [request, required] : commands) {
        request["version"] = 1;
        const std::string cmd = request["cmd"];
        json unknown = request;
        unknown["drE_run"] = true;
        expect_refused(unknown.dump(), cmd + ": unknown field \"drE_run\"");
        for (const auto &[field, value] : request.items()) {
            if (field == "cmd" || field == "version")
                continue;
            json typed = request;
            typed[field] = wrong(value);
            expect_refused(typed.dump(), fmt::format("{}: \"{}\" must be", cmd, field));
            std::string twice = request.dump();
            twice.insert(twice.size() - 1, fmt::format(",\"{}\":{}", field, value.dump()));
            expect_refused(twice, fmt::format("names \"{}\" twice", field));
        }
        for (const auto &field : required) {
            json missing = request;
            missing.erase(field);
            expect_refused(missing.dump(), fmt::format("{}: the request needs \"{}\"", cmd, field));
        }
    }
    json negative = {{"cmd", "flows"}, {"version", 1}, {"top", -1}};
    expect_refused(negative.dump(), "flows: \"top\" must be a whole number from 0");
    EXPECT_EQ(refused, 56);        // 11 unknown, 18 fields twice each, 8 missing, 1 negative
    EXPECT_EQ(snapshot(), before); // not one refused request changed a policy or an attachment
}

// Who may ask (docs/control.md): the socket is root's (0600); --socket-group opens it to a group
// (0660) for the read-only commands; every change needs root or CAP_NET_ADMIN, whoever can open
// the socket. "nobody" (uid 65534, group nogroup) plays the unprivileged user.
TEST_F(Input, TheSocketGroupReadsAndOnlyRootOrCapNetAdminChanges) {
    struct stat st {};
    ASSERT_EQ(stat(daemon->socket().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    daemon.reset();
    daemon = std::make_unique<Daemon>("SocketGroup",
                                      std::vector<std::string>{"--socket-group", "nogroup"});
    ASSERT_EQ(stat(daemon->socket().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0660u);
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_gid, 65534u);
    ok({"policy", "add", "keep", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "16k", "--match",
        "proto", "udp"});
    // nobody must reach the socket and the CLI wherever this checkout lives: a copy of
    // tricolorctl in the daemon's directory, opened to all.
    namespace fs = std::filesystem;
    const std::string ctl = daemon->dir() + "/tricolorctl";
    fs::copy_file(tricolorctl_path(), ctl, fs::copy_options::overwrite_existing);
    fs::permissions(ctl, fs::perms(0755));
    fs::permissions(daemon->dir(), fs::perms(0755));
    const std::string file = daemon->dir() + "/set.yaml";
    write_file(file, "policies:\n"
                     "  - {name: other, algo: srtcm, cir: 1mbit, cbs: 16k}\n");
    fs::permissions(file, fs::perms(0644));
    auto as_nobody = [&](std::vector<std::string> creds, const std::vector<std::string> &args) {
        std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=65534", "--clear-groups"};
        argv.insert(argv.end(), creds.begin(), creds.end());
        argv.insert(argv.end(), {ctl, "--socket", daemon->socket()});
        argv.insert(argv.end(), args.begin(), args.end());
        return run_command(argv);
    };
    const std::vector<std::string> in_group = {"--regid=65534"};
    auto snapshot = [&] { return parse_json(ok({"-j", "policy", "list"})).dump(); };
    const std::string before = snapshot();
    // The read-only commands answer the group.
    for (const std::vector<std::string> &args :
         std::vector<std::vector<std::string>>{{"-j", "status"},
                                               {"-j", "stats"},
                                               {"-j", "flows"},
                                               {"-j", "policy", "list"},
                                               {"-j", "policy", "show", "keep"}}) {
        auto r = as_nobody(in_group, args);
        EXPECT_EQ(r.exit_code, 0) << args[1] << ": " << r.err;
    }
    // Every change is refused, saying what it needs and who asked, and changes nothing.
    for (const std::vector<std::string> &args : std::vector<std::vector<std::string>>{
             {"policy", "del", "keep"},
             {"policy", "set", "keep", "--cir", "2mbit"},
             {"policy", "add", "x", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "16k"},
             {"apply", "-f", file},
             {"apply", "-f", file, "--dry-run"},
             {"attach", lab->host_if},
             {"detach", lab->host_if}}) {
        auto r = as_nobody(in_group, args);
        EXPECT_NE(r.exit_code, 0) << args[0] << " " << args[1];
        EXPECT_THAT(r.err, HasSubstr("needs root or CAP_NET_ADMIN")) << args[0];
        EXPECT_THAT(r.err, HasSubstr("is uid 65534")) << args[0];
    }
    EXPECT_EQ(snapshot(), before);
    // CAP_NET_ADMIN is enough, without root.
    auto r = as_nobody({"--regid=65534", "--inh-caps=+net_admin", "--ambient-caps=+net_admin"},
                       {"policy", "del", "keep"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(parse_json(ok({"-j", "policy", "list"}))["policies"].empty()) << snapshot();
    // Outside the group the kernel refuses the connection, and the CLI says why.
    r = as_nobody({"--regid=65533"}, {"status"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("permission denied"));
    EXPECT_THAT(r.err, HasSubstr("--socket-group"));
}

} // namespace
