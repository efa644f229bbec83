// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// bpf_load.cpp: kernel probes and honest load errors (see bpf_load.hpp).
#include "tricolor/bpf_load.hpp"
#include "tricolor/text.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <regex>
#include <sstream>
#include <vector>

#include <sys/utsname.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

namespace tricolor {
namespace {

// While a load runs, libbpf's messages go here instead of to stderr.
thread_local std::string *g_capture = nullptr;

int print_libbpf(enum libbpf_print_level level, const char *format, va_list args) {
    if (g_capture) {
        // libbpf hands over a refused program's whole verifier log in one message, often
        // hundreds of KiB: all of it is kept, since the reason and the place are at its end.
        va_list copy;
        va_copy(copy, args);
        int n = std::vsnprintf(nullptr, 0, format, copy);
        va_end(copy);
        if (n > 0) {
            size_t at = g_capture->size();
            g_capture->resize(at + static_cast<size_t>(n) + 1);
            va_copy(copy, args);
            std::vsnprintf(g_capture->data() + at, static_cast<size_t>(n) + 1, format, copy);
            va_end(copy);
            g_capture->resize(at + static_cast<size_t>(n));
        }
        if (!std::getenv("TRICOLOR_BPF_LOG"))
            return 0;
    } else if (level == LIBBPF_DEBUG || level == LIBBPF_INFO) {
        return 0;
    }
    std::fputs("libbpf: ", stderr);
    return std::vfprintf(stderr, format, args);
}

bool env_set(const char *name) {
    const char *v = std::getenv(name);
    return v && *v && std::string(v) != "0";
}

std::vector<std::string> lines_of(const std::string &text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        out.push_back(line);
    return out;
}

// From libbpf's output of a failed load: the program the verifier refused and, from the end of
// its log, the lines that explain why (the verifier states its reason after the last
// instruction it walked), with the source line it was at.
struct Rejection {
    std::string program;
    std::vector<std::string> reason;
    std::string source;
};

std::optional<Rejection> find_rejection(const std::string &log) {
    auto lines = lines_of(log);
    static const std::regex prog_re(R"(prog '([^']+)': -- BEGIN PROG LOAD LOG --)");
    static const std::regex insn_re(R"(^\s*\d+: (\(|R\d|frame))");
    std::optional<Rejection> r;
    size_t begin = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
        std::smatch m;
        if (std::regex_search(lines[i], m, prog_re)) {
            r = Rejection{m[1], {}, {}};
            begin = i + 1;
        }
    }
    if (!r)
        return r;
    size_t end = begin;
    while (end < lines.size() && lines[end].find("-- END PROG LOAD LOG --") == std::string::npos)
        ++end;
    // Walk back from the end over the summary ("processed N insns ...") to the reason.
    size_t i = end;
    while (i > begin && (lines[i - 1].rfind("processed ", 0) == 0 || lines[i - 1].empty() ||
                         lines[i - 1].rfind("verification time", 0) == 0 ||
                         lines[i - 1].rfind("stack depth", 0) == 0))
        --i;
    std::vector<std::string> reason;
    while (i > begin && !std::regex_search(lines[i - 1], insn_re) &&
           lines[i - 1].rfind("; ", 0) != 0 && reason.size() < 4)
        reason.insert(reason.begin(), lines[--i]);
    r->reason = reason;
    for (size_t j = i; j > begin; --j)
        if (lines[j - 1].rfind("; ", 0) == 0 && lines[j - 1].size() > 2) {
            r->source = lines[j - 1].substr(2);
            break;
        }
    return r;
}

// Without libcap: the effective set, from /proc (all of it for root where /proc is missing).
unsigned long long effective_caps() {
    FILE *f = std::fopen("/proc/self/status", "r");
    if (!f)
        return geteuid() == 0 ? ~0ull : 0;
    char line[256];
    unsigned long long eff = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "CapEff: %llx", &eff) == 1)
            break;
    std::fclose(f);
    return eff;
}

// What the data path's loading needs of the kernel's capabilities, each with the check it
// passes: CAP_BPF for maps and programs, CAP_NET_ADMIN for XDP, tc and sock_ops programs, and
// CAP_PERFMON for the verifier to allow what the parsers do (pointer comparisons). CAP_SYS_ADMIN
// stands in for CAP_BPF and CAP_PERFMON, not for CAP_NET_ADMIN. Empty: none missing.
std::vector<std::string> missing_load_caps() {
    constexpr int kNetAdmin = 12, kSysAdmin = 21, kPerfmon = 38, kBpf = 39;
    unsigned long long eff = effective_caps();
    auto has = [&](int cap) { return (eff >> cap) & 1; };
    std::vector<std::string> missing;
    if (!has(kBpf) && !has(kSysAdmin))
        missing.push_back("CAP_BPF (maps and programs)");
    if (!has(kNetAdmin))
        missing.push_back("CAP_NET_ADMIN (XDP, tc and sock_ops programs)");
    if (!has(kPerfmon) && !has(kSysAdmin))
        missing.push_back("CAP_PERFMON (the verifier allows the parsers' pointer comparisons "
                          "only with it)");
    return missing;
}

} // namespace

void quiet_libbpf_logging() {
    libbpf_set_print(print_libbpf);
}

KernelRelease running_kernel() {
    KernelRelease k;
    utsname u{};
    if (uname(&u) == 0) {
        k.release = u.release;
        std::sscanf(u.release, "%d.%d", &k.major, &k.minor);
    }
    return k;
}

std::string kernel_support_problem() {
    KernelRelease k = running_kernel();
    struct Feature {
        bpf_prog_type type;
        bpf_func_id helper;
        const char *what;
    };
    // What the data path cannot do without, with the release that brought it.
    static const Feature features[] = {
        {BPF_PROG_TYPE_XDP, BPF_FUNC_loop, "the bpf_loop helper (Linux 5.17)"},
        {BPF_PROG_TYPE_XDP, BPF_FUNC_xdp_get_buff_len,
         "multi-buffer XDP, bpf_xdp_get_buff_len (Linux 5.18)"},
        {BPF_PROG_TYPE_SCHED_CLS, BPF_FUNC_ktime_get_ns, "BPF in tc (cls_bpf)"},
    };
    std::vector<std::string> missing;
    for (const auto &f : features)
        if (libbpf_probe_bpf_helper(f.type, f.helper, nullptr) == 0)
            missing.push_back(f.what);
    bool old =
        k.major < kMinKernelMajor || (k.major == kMinKernelMajor && k.minor < kMinKernelMinor);
    if (!missing.empty())
        return fmt::format("Linux {} lacks {}; tricolor needs Linux {}.{} or later", k.release,
                           fmt::join(missing, " and "), kMinKernelMajor, kMinKernelMinor);
    if (old && !env_set("TRICOLOR_ALLOW_OLD_KERNEL"))
        return fmt::format("Linux {} is older than {}.{}, the oldest kernel tricolor supports "
                           "(its verifier and features are untested here; "
                           "TRICOLOR_ALLOW_OLD_KERNEL=1 tries anyway)",
                           k.release, kMinKernelMajor, kMinKernelMinor);
    return {};
}

Result<void> load_bpf(const std::string &what, const std::function<int()> &load) {
    std::string log;
    g_capture = &log;
    int err = load();
    g_capture = nullptr;
    if (err >= 0)
        return {};
    KernelRelease k = running_kernel();
    // A process without root's capabilities gets EPERM, or a verifier that refuses what it
    // allows privileged programs: either way, what it lacks is the answer.
    if (auto missing = missing_load_caps(); !missing.empty())
        return std::unexpected(fmt::format(
            "cannot load {}: {} (this process lacks {}: run it as root, or give it CAP_BPF, "
            "CAP_NET_ADMIN and CAP_PERFMON)",
            what, find_rejection(log) ? "the kernel's BPF verifier refused it" : errno_text(err),
            fmt::join(missing, ", ")));
    if (auto r = find_rejection(log)) {
        std::string msg = fmt::format(
            "cannot load {}: the kernel's BPF verifier (Linux {}) refused "
            "program {}: {}",
            what, k.release, r->program,
            r->reason.empty() ? "no reason given" : fmt::format("{}", fmt::join(r->reason, "; ")));
        if (!r->source.empty())
            msg += fmt::format(" (at: {})", r->source);
        msg += ". This is a bug in tricolor for this kernel, not a permissions problem: please "
               "report it with the verifier's log (TRICOLOR_BPF_LOG=1 prints it)";
        return std::unexpected(msg);
    }
    if (auto problem = kernel_support_problem(); !problem.empty())
        return std::unexpected(fmt::format("cannot load {}: {}", what, problem));
    // Otherwise libbpf's last words say the most.
    std::string last;
    for (const auto &l : lines_of(log))
        if (!l.empty())
            last = l;
    return std::unexpected(fmt::format("cannot load {}: {}{}", what, errno_text(err),
                                       last.empty() ? "" : " (libbpf: " + last + ")"));
}

std::vector<uint32_t> prog_map_ids(int prog_fd) {
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0 || info.nr_map_ids == 0)
        return {};
    std::vector<uint32_t> ids(info.nr_map_ids);
    bpf_prog_info again{};
    again.nr_map_ids = static_cast<uint32_t>(ids.size());
    again.map_ids = reinterpret_cast<uint64_t>(ids.data());
    len = sizeof(again);
    if (bpf_obj_get_info_by_fd(prog_fd, &again, &len) != 0)
        return {};
    ids.resize(std::min<size_t>(ids.size(), again.nr_map_ids));
    return ids;
}

} // namespace tricolor
