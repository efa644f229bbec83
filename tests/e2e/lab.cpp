// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// lab.cpp: see lab.hpp.
#include "lab.hpp"

#include "tricolor/control.hpp"
#include "tricolor/datapath.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tricolor::test {

namespace {

int next_lab = 0;

void must(const std::vector<std::string> &argv) {
    auto r = run_command(argv);
    if (r.exit_code != 0) {
        std::string cmd;
        for (const auto &a : argv)
            cmd += a + " ";
        throw std::runtime_error(fmt::format("lab setup failed: {}: {}", cmd, r.err));
    }
}

} // namespace

uint64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::vector<SendStamp> read_send_stamps(const std::string &path) {
    std::vector<SendStamp> out;
    std::ifstream in(path);
    SendStamp s{};
    while (in >> s.start >> s.end)
        out.push_back(s);
    return out;
}

uint64_t admission_floor(const std::vector<SendStamp> &stamps, uint64_t rate_bps,
                         uint64_t burst_bytes, uint64_t len_bytes) {
    using i128 = __int128;
    const i128 unit = TCM_TOKENS_PER_BYTE; // tokens per byte; rate_bps tokens per ns
    const i128 cap = i128(burst_bytes) * unit, cost = i128(len_bytes) * unit;
    if (stamps.empty() || cost > cap)
        return 0;
    i128 tokens = cap; // full at the first packet, which is therefore chosen
    uint64_t ref = stamps.front().start, count = 0;
    for (const auto &s : stamps) {
        // From several senders (stamps sorted by start), a packet whose send call overlaps the
        // last chosen one's may have been metered before it: not chosen.
        if (count > 0 && s.start < ref)
            continue;
        i128 gap = i128(s.start - std::min(s.start, ref));
        i128 have = std::min(cap, tokens + i128(rate_bps) * gap);
        if (have >= cost) {
            tokens = have - cost;
            ref = s.end; // the latest it can have been metered at
            ++count;
        }
    }
    return count;
}

std::optional<uint64_t> last_metered_ns(const std::string &pin_dir) {
    std::string path = fmt::format("{}/abi{}/tcm_policy_state", pin_dir, TCM_ABI_VERSION);
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        return std::nullopt;
    std::optional<uint64_t> found;
    for (uint32_t id = 0; id < TCM_MAX_POLICIES && !found; ++id) {
        tcm_flow f{};
        if (bpf_map_lookup_elem(fd, &id, &f) == 0 && (f.flags & TCM_FLOW_F_STARTED))
            found = f.meter.last_ns;
    }
    close(fd);
    return found;
}

std::string tricolord_path() {
    return TRICOLORD_PATH;
}
std::string tricolorctl_path() {
    return TRICOLORCTL_PATH;
}
uint64_t mono_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string udp_tool_path() {
    return UDP_TOOL_PATH;
}

Lab::Lab() {
    int n = (getpid() + next_lab++) % 200 + 10; // 198.18.n.0/24 and 2001:db8:n::/64
    ns = fmt::format("tce2e{}", n);
    host_if = fmt::format("tce{}h", n);
    ns_if = fmt::format("tce{}n", n);
    host_v4 = fmt::format("198.18.{}.2", n);
    ns_v4 = fmt::format("198.18.{}.1", n);
    host_v6 = fmt::format("2001:db8:{:x}::2", n);
    ns_v6 = fmt::format("2001:db8:{:x}::1", n);
    run_command({"/sbin/ip", "netns", "del", ns});
    run_command({"/sbin/ip", "link", "del", host_if});
    must({"/sbin/ip", "netns", "add", ns});
    must({"/sbin/ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if});
    must({"/sbin/ip", "link", "set", ns_if, "netns", ns});
    must({"/sbin/ip", "addr", "add", host_v4 + "/24", "dev", host_if});
    must({"/sbin/ip", "-6", "addr", "add", host_v6 + "/64", "dev", host_if, "nodad"});
    must({"/sbin/ip", "link", "set", host_if, "up"});
    must({"/sbin/ip", "-n", ns, "addr", "add", ns_v4 + "/24", "dev", ns_if});
    must({"/sbin/ip", "-n", ns, "-6", "addr", "add", ns_v6 + "/64", "dev", ns_if, "nodad"});
    must({"/sbin/ip", "-n", ns, "link", "set", ns_if, "up"});
    must({"/sbin/ip", "-n", ns, "link", "set", "lo", "up"});
}

Lab::~Lab() {
    run_command({"/sbin/ip", "link", "del", host_if});
    run_command({"/sbin/ip", "netns", "del", ns});
}

RunResult Lab::in_ns(std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"/sbin/ip", "netns", "exec", ns});
    return run_command(argv);
}

Daemon::Daemon(std::string name, std::vector<std::string> extra_flags)
    : extra_(std::move(extra_flags)) {
    dir_ = fmt::format("/tmp/tricolor-e2e-{}-{}", getpid(), name);
    pin_dir_ = fmt::format("/sys/fs/bpf/tricolor-e2e-{}-{}", getpid(), name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Datapath::remove_pins(pin_dir_);
    start();
}

Daemon::~Daemon() {
    if (pid_ > 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }
    Datapath::remove_pins(pin_dir_);
    std::filesystem::remove_all(dir_);
}

pid_t start_daemon_process(std::vector<std::string> argv, const std::string &log,
                           const std::string &socket) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        std::vector<char *> v;
        for (auto &a : argv)
            v.push_back(a.data());
        v.push_back(nullptr);
        execv(v[0], v.data());
        _exit(127);
    }
    const int tries = static_cast<int>(200 * time_scale()); // 25 ms each
    for (int i = 0; i < tries; ++i) {
        if (control_request(socket, {{"cmd", "status"}}))
            return pid;
        if (waitpid(pid, nullptr, WNOHANG) == pid)
            throw std::runtime_error("tricolord exited at start: " + read_file(log));
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    throw std::runtime_error(
        fmt::format("tricolord did not answer within {} s: {}", tries / 40, read_file(log)));
}

void Daemon::start() {
    std::vector<std::string> args = {tricolord_path(), "--socket",  socket(), "--config",
                                     config(),         "--pin-dir", pin_dir_, "--metrics",
                                     "127.0.0.1:0",    "--state",   state()};
    // A table of 65536 flows from the start unless the test says otherwise.
    if (std::ranges::find(extra_, "--flows") == extra_.end())
        args.insert(args.end(), {"--flows", "65536"});
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = -1;
    pid_ = start_daemon_process(std::move(args), dir_ + "/log", socket());
}

void Daemon::kill9() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
}

void Daemon::terminate() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
}

void Daemon::settle_state() const {
    const int tries = static_cast<int>(500 * time_scale()); // TRICOLOR_TIME_SCALE under QEMU
    for (int i = 0; i < tries && std::filesystem::exists(state() + ".journal"); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_FALSE(std::filesystem::exists(state() + ".journal")) << "the journal was not folded";
}

void Daemon::hup() {
    kill(pid_, SIGHUP);
}

RunResult Daemon::ctl(std::vector<std::string> args) const {
    args.insert(args.begin(), {tricolorctl_path(), "--socket", socket()});
    return run_command(args);
}

std::string Daemon::log() const {
    try {
        return read_file(dir_ + "/log");
    } catch (...) {
        return "";
    }
}

std::string scrape_metrics(const std::string &address) {
    int port = std::stoi(address.substr(address.rfind(':') + 1));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    std::string body;
    if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) == 0) {
        std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        (void)!write(fd, req.data(), req.size());
        char buf[8192];
        for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;)
            body.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return body;
}

} // namespace tricolor::test
