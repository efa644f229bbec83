// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// bench_daemon.hpp: what the benchmarks of a real tricolord share (flows_top_bench,
// footprint_bench): starting it on a pin directory of its own, finding its XDP program, and
// making flows by running that program through BPF_PROG_TEST_RUN (no interface: nothing is
// sent anywhere).
#pragma once

#include "tricolor/control.hpp"
#include "tricolor/datapath.hpp"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tricolor::bench {

inline double ms_since(std::chrono::steady_clock::time_point a) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}

inline double median(std::vector<double> v) {
    std::ranges::sort(v);
    return v[v.size() / 2];
}

// A tricolord of the bench's own (socket, config, state and pin directory named after @name and
// this process), with @flags; stopped (SIGTERM) and its pins removed when it goes.
class BenchDaemon {
  public:
    BenchDaemon(const std::string &name, std::vector<std::string> flags)
        : dir(fmt::format("/tmp/tricolor-{}-{}", name, getpid())),
          pin(fmt::format("/sys/fs/bpf/tricolor-{}-{}", name, getpid())), sock(dir + "/sock") {
        std::filesystem::create_directories(dir);
        Datapath::remove_pins(pin);
        std::vector<std::string> args = {
            TRICOLORD_PATH,         "--socket", sock,           "--pin-dir", pin,   "--config",
            dir + "/tricolor.yaml", "--state",  dir + "/state", "--metrics", "none"};
        args.insert(args.end(), flags.begin(), flags.end());
        pid = fork();
        if (pid == 0) {
            int log = open((dir + "/log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
            dup2(log, 1);
            dup2(log, 2);
            std::vector<char *> argv;
            for (auto &a : args)
                argv.push_back(a.data());
            argv.push_back(nullptr);
            execv(TRICOLORD_PATH, argv.data());
            _exit(127);
        }
        for (int i = 0; i < 400 && !control_request(sock, {{"cmd", "status"}}); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ~BenchDaemon() {
        kill(pid, SIGTERM);
        waitpid(pid, nullptr, 0);
        Datapath::remove_pins(pin);
        std::filesystem::remove_all(dir);
    }
    BenchDaemon(const BenchDaemon &) = delete;
    BenchDaemon &operator=(const BenchDaemon &) = delete;

    nlohmann::json ask(const nlohmann::json &r) const {
        auto j = control_request(sock, r);
        if (!j || !(*j).value("ok", false))
            throw std::runtime_error("request failed: " + r.dump() +
                                     (j ? " -> " + j->dump() : " -> " + j.error()));
        return *j;
    }
    // Its XDP program: the one named tricolor_xdp that uses the flow table pinned now (a
    // growth loads another).
    int xdp_prog() const {
        int map = bpf_obj_get(
            (pin + "/abi" + std::to_string(TCM_ABI_VERSION) + "/tcm_flow_slots").c_str());
        if (map < 0)
            throw std::runtime_error("no pinned flow table under " + pin);
        bpf_map_info minfo{};
        uint32_t len = sizeof(minfo);
        bpf_obj_get_info_by_fd(map, &minfo, &len);
        close(map);
        for (uint32_t id = 0; bpf_prog_get_next_id(id, &id) == 0;) {
            int fd = bpf_prog_get_fd_by_id(id);
            if (fd < 0)
                continue;
            uint32_t ids[64];
            bpf_prog_info info{};
            info.nr_map_ids = 64;
            info.map_ids = reinterpret_cast<uint64_t>(ids);
            len = sizeof(info);
            if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
                std::string(info.name) == "tricolor_xdp") {
                const uint32_t *end = ids + std::min(info.nr_map_ids, 64u);
                if (std::find(static_cast<const uint32_t *>(ids), end, minfo.id) != end)
                    return fd;
            }
            close(fd);
        }
        throw std::runtime_error("the daemon's XDP program was not found");
    }

    std::string dir, pin, sock;
    pid_t pid = -1;
};

// Runs the program @fd once on @frame.
inline void run_once(int fd, std::vector<uint8_t> &frame) {
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()), .repeat = 1);
    if (bpf_prog_test_run_opts(fd, &opts) < 0)
        throw std::runtime_error("test run failed");
}

} // namespace tricolor::bench
