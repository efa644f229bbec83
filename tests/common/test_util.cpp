// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// test_util.cpp: see test_util.hpp.
#include "test_util.hpp"
#include "tricolor/cgroups.hpp"
#include "tricolor/policy_fields.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <atomic>
#include <thread>

#include <bpf/bpf.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tricolor::test {

std::string read_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error("cannot read " + path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

void write_file(const std::string &path, const std::string &text) {
    std::ofstream(path) << text;
}

std::vector<Vector> load_vectors() {
    namespace fs = std::filesystem;
    std::vector<Vector> out;
    for (const auto &entry : fs::directory_iterator(TRICOLOR_VECTOR_DIR)) {
        if (entry.path().extension() != ".args")
            continue;
        Vector v;
        v.name = entry.path().stem().string();
        std::istringstream args(read_file(entry.path().string()));
        for (std::string word; args >> word;)
            v.args.push_back(word);
        auto base = entry.path().parent_path() / v.name;
        v.trace_path = base.string() + ".trace";
        v.expected = read_file(base.string() + ".expected");
        out.push_back(std::move(v));
    }
    std::ranges::sort(out, {}, &Vector::name);
    return out;
}

MeterParams meter_from_args(const std::vector<std::string> &args) {
    // The flags as `tricolorctl replay` takes them: the policy table's meter rows.
    nlohmann::json spec = nlohmann::json::object();
    for (size_t i = 0; i < args.size(); ++i) {
        auto row = std::ranges::find_if(policy_flags(), [&](const PolicyFlag &r) {
            return r.meter && r.read && policy_flag_option(r) == args[i];
        });
        if (row == policy_flags().end())
            throw std::runtime_error("unknown vector flag: " + args[i]);
        if (row->kind == PolicyFlagKind::On)
            spec[std::string(row->key)] = true;
        else if (i + 1 < args.size())
            spec[std::string(row->key)] = args[++i];
        else
            throw std::runtime_error("vector flag without a value: " + args[i]);
    }
    auto meter = to_meter(spec);
    if (!meter)
        throw std::runtime_error(meter.error());
    return meter->params;
}

std::string
replay_vector(const Vector &v,
              const std::function<std::unique_ptr<ReplayEngine>(const MeterParams &)> &make) {
    MeterParams params = meter_from_args(v.args);
    std::istringstream in(read_file(v.trace_path));
    auto trace = parse_trace(in);
    if (!trace)
        throw std::runtime_error(v.name + ": " + trace.error());
    auto engine = make(params);
    std::ostringstream out;
    run_replay(*engine, *trace, out);
    return out.str();
}

void expect_each_refused(const nlohmann::json &base, const std::vector<Refusal> &cases) {
    ASSERT_GE(cases.size(), 4u);
    for (const Refusal &c : cases) {
        nlohmann::json spec = base;
        spec.update(c.patch);
        auto p = to_policy(spec, 1);
        ASSERT_FALSE(p.has_value()) << c.patch.dump();
        EXPECT_NE(p.error().find(c.says), std::string::npos)
            << c.patch.dump() << ": " << p.error() << "\nshould say: " << c.says;
    }
}

ReferenceRun reference_run(const std::vector<std::string> &how) {
    std::vector<std::string> argv = {"/usr/bin/env", "python3",
                                     std::string(TRICOLOR_VECTOR_DIR) + "/reference.py"};
    argv.insert(argv.end(), how.begin(), how.end());
    auto r = run_command(argv);
    if (r.exit_code != 0)
        throw std::runtime_error("reference.py: " + r.err);
    ReferenceRun run;
    std::istringstream in(r.out);
    std::string line;
    auto fraction = [](const std::string &t, unsigned __int128 &num, unsigned __int128 &den) {
        auto slash = t.find('/');
        num = den = 0;
        for (char c : t.substr(0, slash))
            num = num * 10 + static_cast<unsigned>(c - '0');
        for (char c : t.substr(slash + 1))
            den = den * 10 + static_cast<unsigned>(c - '0');
    };
    if (how.front() == "--case") {
        std::getline(in, line);
        std::istringstream words(line);
        for (std::string w; words >> w;)
            run.args.push_back(w);
    }
    while (std::getline(in, line)) {
        std::istringstream f(line);
        ReferenceRun::Step s{};
        std::string in_c, out_c, c, e;
        f >> s.time_ns >> s.bytes >> in_c >> out_c >> c >> e;
        s.in = parse_color(in_c).value();
        s.out = parse_color(out_c).value();
        fraction(c, s.c_num, s.c_den);
        fraction(e, s.e_num, s.e_den);
        run.steps.push_back(s);
    }
    return run;
}

bool same_tokens(uint64_t tokens, uint32_t rem, uint32_t k2, unsigned __int128 num,
                 unsigned __int128 den) {
    if (k2 == 0)
        k2 = 1;
    // tokens + rem/k2 == num/den  <=>  (tokens*k2 + rem) * den == num * k2
    return (static_cast<unsigned __int128>(tokens) * k2 + rem) * den == num * k2;
}

MeterParams meter_params(Algo algo, uint64_t cir, uint64_t cbs, uint64_t second_rate,
                         uint64_t second_size) {
    MeterParams p;
    p.algo = algo;
    p.cir = cir;
    p.cbs = cbs;
    // Each of the algorithm's second-bucket parameters, as the table of algorithms has them.
    for (const SecondParam &sp : second_params())
        if (takes(algo, sp))
            p.*sp.field = sp.rate ? second_rate : second_size;
    return p;
}

Policy policy(uint32_t id, std::string name, Algo algo, uint64_t cir, uint64_t cbs, uint64_t second,
              std::optional<uint64_t> second_rate) {
    Policy p;
    p.id = id;
    p.name = std::move(name);
    const bool peak = info(algo).second == SecondBucket::peak;
    p.meter = meter_params(algo, cir, cbs, second_rate.value_or(peak ? cir * 2 : cir), second);
    return p;
}

int spawn(const std::vector<std::string> &argv, const std::string &log) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        setsid();
        std::vector<char *> c;
        for (const auto &a : argv)
            c.push_back(const_cast<char *>(a.c_str()));
        c.push_back(nullptr);
        execv(c[0], c.data());
        _exit(127);
    }
    return pid;
}

RunResult run_command(const std::vector<std::string> &argv, const std::string &input) {
    // Temporary files rather than pipes: no deadlock whatever the command prints.
    char in_path[] = "/tmp/tricolor-test-in-XXXXXX";
    char out_path[] = "/tmp/tricolor-test-out-XXXXXX";
    char err_path[] = "/tmp/tricolor-test-err-XXXXXX";
    int in_fd = mkstemp(in_path), out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    if (in_fd < 0 || out_fd < 0 || err_fd < 0)
        throw std::runtime_error("mkstemp failed");
    if (write(in_fd, input.data(), input.size()) != static_cast<ssize_t>(input.size()))
        throw std::runtime_error("cannot write the command's input");
    lseek(in_fd, 0, SEEK_SET);

    pid_t pid = fork();
    if (pid == 0) {
        dup2(in_fd, 0);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        std::vector<char *> args;
        for (const auto &a : argv)
            args.push_back(const_cast<char *>(a.c_str()));
        args.push_back(nullptr);
        execv(args[0], args.data());
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = read_file(out_path);
    r.err = read_file(err_path);
    for (int fd : {in_fd, out_fd, err_fd})
        close(fd);
    for (const char *p : {in_path, out_path, err_path})
        unlink(p);
    return r;
}

bool is_root() {
    return geteuid() == 0;
}

std::string first_difference(const std::string &actual, const std::string &expected) {
    std::istringstream a(actual), e(expected);
    std::string la, le;
    for (size_t line = 1;; ++line) {
        bool more_a = static_cast<bool>(std::getline(a, la));
        bool more_e = static_cast<bool>(std::getline(e, le));
        if (!more_a && !more_e)
            return "";
        if (more_a != more_e || la != le)
            return "line " + std::to_string(line) + ": got '" + (more_a ? la : "<end>") +
                   "', expected '" + (more_e ? le : "<end>") + "'";
    }
}

void run_on_two_cpus(int prog_fd, const std::vector<uint8_t> &frame, int repeat) {
    std::atomic<bool> go{false};
    auto hammer = [&](int cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
        while (!go)
            ;
        LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                    .data_size_in = static_cast<uint32_t>(frame.size()), .repeat = repeat);
        bpf_prog_test_run_opts(prog_fd, &opts);
    };
    std::thread a(hammer, 0), b(hammer, 1);
    go = true;
    a.join();
    b.join();
}

int map_of_prog(int prog_fd, const std::string &name) {
    bpf_prog_info info{};
    uint32_t ids[64] = {};
    info.nr_map_ids = 64;
    info.map_ids = reinterpret_cast<uint64_t>(ids);
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0)
        return -1;
    for (uint32_t i = 0; i < info.nr_map_ids && i < 64; ++i) {
        int fd = bpf_map_get_fd_by_id(ids[i]);
        bpf_map_info m{};
        uint32_t mlen = sizeof(m);
        if (fd >= 0 && bpf_obj_get_info_by_fd(fd, &m, &mlen) == 0 && name == m.name)
            return fd;
        if (fd >= 0)
            close(fd);
    }
    return -1;
}

double time_scale() {
    const char *v = std::getenv("TRICOLOR_TIME_SCALE");
    double scale = v ? std::atof(v) : 1.0;
    return scale >= 1.0 ? scale : 1.0;
}

std::string cgroup2_mount_or_empty() {
    auto m = cgroup2_mount();
    return m ? *m : std::string();
}

TestCgroup::TestCgroup(std::string p) : path(std::move(p)) {
    auto mount = cgroup2_mount();
    if (!mount)
        throw std::runtime_error(mount.error());
    dir = *mount + "/" + path;
    std::filesystem::create_directories(dir);
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0)
        throw std::runtime_error("cannot make the cgroup " + dir);
    id = st.st_ino;
}

TestCgroup::~TestCgroup() {
    // Deepest first: a cgroup with children cannot go.
    std::vector<std::string> dirs;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
        if (it->is_directory(ec))
            dirs.push_back(it->path());
    std::sort(dirs.begin(), dirs.end(), [](auto &a, auto &b) { return a.size() > b.size(); });
    dirs.push_back(dir);
    for (const auto &d : dirs)
        rmdir(d.c_str());
}

void TestCgroup::add(int pid) const {
    std::string procs = dir + "/cgroup.procs", text = std::to_string(pid);
    int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    bool ok = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    int err = errno;
    if (fd >= 0)
        close(fd);
    if (!ok)
        throw std::runtime_error("cannot move " + text + " into " + dir + ": " +
                                 std::strerror(err));
}

InCgroup::InCgroup(const TestCgroup &c) {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("0::", 0) == 0)
            back_ = cgroup2_mount_or_empty() + line.substr(3);
    c.add(getpid());
}

InCgroup::~InCgroup() {
    if (!back_.empty())
        write_file(back_ + "/cgroup.procs", std::to_string(getpid()));
}

} // namespace tricolor::test
