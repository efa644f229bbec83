// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// state_file.cpp: the files the daemon reads and writes: the config and state files (one
// format), and the state file's writing (stage, commit) and journal.
#include "daemon_internal.hpp"

#include "tricolor/control.hpp"
#include "tricolor/yaml.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace tricolor {

using namespace daemon_internal;
namespace fs = std::filesystem;

std::string default_state_path(const std::string &pin_dir) {
    std::string dir = pin_dir;
    while (dir.size() > 1 && dir.back() == '/')
        dir.pop_back();
    if (dir == kDefaultPinDir)
        return "/var/lib/tricolor/state.yaml";
    std::string key;
    for (char c : dir)
        key += c == '/' ? '-' : c;
    while (!key.empty() && key.front() == '-')
        key.erase(key.begin());
    return fmt::format("/var/lib/tricolor/state-{}.yaml", key);
}

namespace {

// FNV-1a: tells one state file's text from another's, nothing more.
uint64_t text_hash(std::string_view text) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : text)
        h = (h ^ c) * 1099511628211ull;
    return h;
}

std::string hash_text(uint64_t hash) {
    return fmt::format("{:016x}", hash);
}

bool write_all(int fd, std::string_view text) {
    for (size_t off = 0; off < text.size();) {
        ssize_t n = write(fd, text.data() + off, text.size() - off);
        if (n < 0)
            return false;
        off += static_cast<size_t>(n);
    }
    return true;
}

// The rename or creation of a file in @path's directory survives a crash.
void fsync_parent(const std::string &path) {
    fs::path parent = fs::path(path).parent_path();
    if (int dir = open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        dir >= 0) {
        fsync(dir);
        close(dir);
    }
}

} // namespace

namespace daemon_internal {

Result<std::optional<Doc>> read_doc(const std::string &path) {
    std::error_code ec;
    auto st = fs::status(path, ec);
    if (ec || st.type() == fs::file_type::not_found)
        return std::optional<Doc>{};
    if (st.type() == fs::file_type::directory)
        return std::unexpected(fmt::format("{} is a directory, not a file", path));
    std::ifstream in(path);
    if (!in)
        return std::unexpected(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    std::string text;
    try {
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::exception &) {
        return std::unexpected(fmt::format("cannot read {}", path));
    }
    if (in.bad())
        return std::unexpected(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    auto parsed = yaml_to_json(text);
    if (!parsed)
        return std::unexpected(fmt::format("{}: {}", path, parsed.error()));
    json cfg = *parsed;
    if (cfg.is_null())
        cfg = json::object(); // an empty file
    if (!cfg.is_object())
        return std::unexpected(
            fmt::format("{}: expected sections policies: and attachments:", path));
    for (const auto &[key, value] : cfg.items())
        if (key != "policies" && key != "attachments" && key != "containers" && key != "max_flows")
            return std::unexpected(fmt::format("{}: unknown section '{}'", path, key));
    Doc doc;
    doc.text_hash = text_hash(text);
    if (cfg.contains("policies") && !cfg["policies"].is_null()) {
        if (!cfg["policies"].is_array())
            return std::unexpected(fmt::format("{}: policies must be a list", path));
        doc.specs.assign(cfg["policies"].begin(), cfg["policies"].end());
    }
    if (cfg.contains("containers") && !cfg["containers"].is_null()) {
        if (!cfg["containers"].is_array())
            return std::unexpected(fmt::format("{}: containers must be a list", path));
        for (const auto &c : cfg["containers"]) {
            if (!c.is_string() || !parse_engine(c.get<std::string>()))
                return std::unexpected(fmt::format("{}: containers: {} is not docker, "
                                                   "docker=SOCKET, podman or podman=SOCKET",
                                                   path, c.dump()));
            doc.containers.push_back(c.get<std::string>());
        }
    }
    if (cfg.contains("max_flows") && !cfg["max_flows"].is_null()) {
        const json &m = cfg["max_flows"];
        if (!m.is_number_unsigned() || m.get<uint64_t>() < 1 || m.get<uint64_t>() > (1u << 26))
            return std::unexpected(
                fmt::format("{}: max_flows: {} is not a number of flows from 1 to {}", path,
                            m.dump(), 1u << 26));
        doc.max_flows = m.get<uint32_t>();
    }
    if (cfg.contains("attachments") && !cfg["attachments"].is_null()) {
        if (!cfg["attachments"].is_array())
            return std::unexpected(fmt::format("{}: attachments must be a list", path));
        for (const auto &a : cfg["attachments"]) {
            auto spec = attachment_from(a.is_object() ? a : json::object());
            if (!spec)
                return std::unexpected(
                    fmt::format("{}: attachment {}: {}", path, a.dump(), spec.error()));
            auto &list = spec->match_ifname.empty() ? doc.attachments : doc.patterns;
            for (const auto &b : list)
                if (same_hook(b, *spec))
                    return std::unexpected(
                        fmt::format("{}: attachment {} is listed twice", path, a.dump()));
            list.push_back(*spec);
        }
    }
    return std::optional<Doc>{std::move(doc)};
}

std::vector<json> read_journal(const std::string &path, uint64_t extends) {
    std::vector<json> records;
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line))
        return records;
    auto head = json::parse(line, nullptr, false);
    if (!head.is_object() || head.value("extends", "") != hash_text(extends))
        return records;
    // A torn last line (a crash while appending) was never acknowledged: it ends there.
    while (std::getline(in, line) && !in.eof()) {
        auto rec = json::parse(line, nullptr, false);
        if (!rec.is_object() || rec.is_discarded())
            break;
        records.push_back(std::move(rec));
    }
    return records;
}

void replay_journal(Doc &doc, const std::vector<json> &records) {
    for (const auto &rec : records) {
        if (rec.contains("put") && rec["put"].is_object()) {
            std::string name = rec["put"].value("name", "");
            auto it = std::ranges::find_if(doc.specs, [&](const json &j) {
                return j.is_object() && j.value("name", "") == name;
            });
            if (it != doc.specs.end())
                *it = rec["put"];
            else
                doc.specs.push_back(rec["put"]);
        } else if (rec.contains("del") && rec["del"].is_string()) {
            const auto &del = rec["del"].get_ref<const std::string &>();
            std::erase_if(doc.specs, [&](const json &j) {
                return j.is_object() && j.value("name", "") == del;
            });
        }
    }
}

} // namespace daemon_internal

std::vector<json> Daemon::specs() const {
    std::vector<json> out;
    for (const auto &e : policies_)
        out.push_back(e.spec);
    return out;
}

json Daemon::state_json(const std::vector<json> &specs,
                        const std::vector<AttachmentSpec> &attachments,
                        const std::vector<AttachmentSpec> *patterns) const {
    json cfg = {{"policies", json::array()}, {"attachments", json::array()}};
    for (const auto &s : specs)
        cfg["policies"].push_back(s);
    for (const auto &p : patterns ? *patterns : patterns_)
        cfg["attachments"].push_back(attachment_json(p));
    for (const auto &a : attachments) {
        if (!a.by.empty())
            continue;
        json j = attachment_json(a);
        if (a.ifindex)
            j["ifindex"] = a.ifindex;
        cfg["attachments"].push_back(j);
    }
    return cfg;
}

Result<void> Daemon::stage(const json &state) const {
    fs::path path(options_.state);
    std::error_code ec;
    if (path.has_parent_path())
        fs::create_directories(path.parent_path(), ec);
    std::string tmp = options_.state + ".tmp";
    std::string text = "# tricolord's state: what runs now, written by the daemon on every change\n"
                       "# made through tricolorctl. Edit " +
                       options_.config +
                       " instead; see tricolord --help for which of the two a start applies.\n";
    // One line a policy, each a JSON object (which YAML reads as a flow mapping): written in
    // a few ms for 16k policies, where a block-style YAML emitter takes half a second.
    for (const char *section : {"policies", "attachments"}) {
        const json &list = state.at(section);
        text += fmt::format("{}:{}\n", section, list.empty() ? " []" : "");
        for (const auto &item : list)
            text += "  - " + item.dump() + "\n";
    }
    staged_hash_ = text_hash(text);
    auto fail = [&](const std::string &what) -> Result<void> {
        int err = errno;
        unlink(tmp.c_str());
        return std::unexpected(
            fmt::format("cannot write the state file {}: {}: {}; nothing changed", options_.state,
                        what, std::strerror(err)));
    };
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail("open " + tmp);
    if (!write_all(fd, text)) {
        int err = errno;
        close(fd);
        errno = err;
        return fail("write");
    }
    if (fsync(fd) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return fail("fsync");
    }
    close(fd);
    return {};
}

Result<void> Daemon::commit() const {
    std::string tmp = options_.state + ".tmp";
    if (rename(tmp.c_str(), options_.state.c_str()) < 0)
        return std::unexpected(fmt::format("applied, but cannot replace {}: {}", options_.state,
                                           std::strerror(errno)));
    state_hash_ = staged_hash_;
    // The state file holds every change now: the journal goes (one left by a crash right here
    // names the state before, and is ignored).
    if (journal_fd_ >= 0)
        close(journal_fd_);
    journal_fd_ = -1;
    journal_records_ = 0;
    unlink(journal_path().c_str());
    fsync_parent(options_.state); // the rename itself survives a crash
    return {};
}

void Daemon::unstage() const {
    unlink((options_.state + ".tmp").c_str());
}

Result<void> Daemon::write_state_whole() {
    auto s = stage(state_json(specs(), attachments_));
    if (s)
        s = commit();
    return s;
}

std::string Daemon::journal_path() const {
    return options_.state + ".journal";
}

Result<bool> Daemon::journal_append(const json &record) {
    if (!state_hash_)
        return false; // no state file this daemon wrote or read: nothing to extend
    std::string path = journal_path();
    auto fail = [&](const std::string &what) -> Result<bool> {
        return std::unexpected(fmt::format("cannot write the state journal {}: {}: {}; nothing "
                                           "changed",
                                           path, what, std::strerror(errno)));
    };
    if (journal_fd_ < 0) {
        int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            return fail("open");
        std::string head = json{{"extends", hash_text(*state_hash_)}}.dump() + "\n";
        if (!write_all(fd, head) || fsync(fd) < 0) {
            int err = errno;
            close(fd);
            unlink(path.c_str());
            errno = err;
            return fail("write");
        }
        fsync_parent(path);
        journal_fd_ = fd;
        journal_records_ = 0;
    }
    journal_before_ = lseek(journal_fd_, 0, SEEK_END);
    std::string line = record.dump() + "\n";
    if (!write_all(journal_fd_, line) || fdatasync(journal_fd_) < 0) {
        int err = errno;
        if (ftruncate(journal_fd_, journal_before_) == 0)
            fdatasync(journal_fd_);
        errno = err;
        return fail("write");
    }
    ++journal_records_;
    last_change_ = std::chrono::steady_clock::now();
    return true;
}

void Daemon::journal_undo() {
    if (journal_fd_ < 0 || journal_records_ == 0)
        return;
    if (ftruncate(journal_fd_, journal_before_) == 0)
        fdatasync(journal_fd_);
    --journal_records_;
}

void Daemon::compact_state(bool now) {
    std::lock_guard lock(mu_);
    if (journal_records_ == 0)
        return;
    if (!now && std::chrono::steady_clock::now() - last_change_ < std::chrono::milliseconds(500))
        return; // changes are still coming: one write when they pause
    if (!write_state_whole())
        unstage(); // the journal stays, and is tried again
}

void Daemon::save_quota_uses() const {
    std::map<uint32_t, Policy> by_id;
    {
        std::lock_guard lock(mu_);
        for (const auto &p : dp_->policies())
            if (p.meter.quota_bytes)
                by_id[p.id] = p;
    }
    const std::string path = quota_path(), tmp = path + ".tmp";
    std::error_code ec;
    if (by_id.empty() && !fs::exists(path, ec))
        return;
    json uses = json::array();
    for (const auto &u : dp_->quota_uses()) {
        auto it = by_id.find(TCM_FLOW_POLICY(u.key.head));
        // An IPv6 5-tuple's key is a hash under a secret drawn afresh with the maps, a cgroup's
        // an id a reboot gives to another: not kept.
        const uint32_t kind = TCM_FLOW_KIND(u.key.head);
        if (it == by_id.end() || kind == TCM_FLOW_5TUPLE6 || kind == TCM_FLOW_CGROUP)
            continue;
        const MeterParams &m = it->second.meter;
        uses.push_back({{"policy", it->second.name},
                        {"period_ns", m.quota_period_ns},
                        {"anchor_ns", m.quota_anchor_ns},
                        {"month_day", m.quota_month_day},
                        {"kind", TCM_FLOW_KIND(u.key.head)},
                        {"w", {u.key.w[0], u.key.w[1], u.key.w[2], u.key.w[3]}},
                        {"used", u.used},
                        {"period_end", u.period_end}});
    }
    const std::string text = json{{"uses", uses}}.dump() + "\n";
    if (text == saved_quota_text_)
        return; // nothing moved since the last save
    saved_quota_text_ = text;
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    bool written = write_all(fd, text) && fsync(fd) == 0;
    close(fd);
    if (!written || rename(tmp.c_str(), path.c_str()) != 0) {
        unlink(tmp.c_str());
        return;
    }
    fsync_parent(path);
}

size_t Daemon::restore_quota_uses() {
    std::ifstream in(quota_path());
    if (!in)
        return 0;
    json doc = json::parse(in, nullptr, false);
    if (!doc.is_object() || !doc.contains("uses") || !doc["uses"].is_array())
        return 0;
    std::map<std::string, Policy> by_name;
    for (const auto &p : dp_->policies())
        by_name[p.name] = p;
    size_t n = 0;
    for (const auto &u : doc["uses"]) {
        try {
            auto it = by_name.find(u.at("policy").get<std::string>());
            if (it == by_name.end())
                continue;
            const MeterParams &m = it->second.meter;
            // The same periods, or the use belongs to none of the new ones.
            if (!m.quota_bytes || u.at("period_ns").get<uint64_t>() != m.quota_period_ns ||
                u.at("anchor_ns").get<uint64_t>() != m.quota_anchor_ns ||
                u.at("month_day").get<uint32_t>() != m.quota_month_day)
                continue;
            Datapath::QuotaSaved s;
            const uint32_t kind = u.at("kind").get<uint32_t>();
            if (kind == TCM_FLOW_5TUPLE6 || kind >= TCM_FLOW_CGROUP)
                continue;
            s.key.head = TCM_FLOW_HEAD(it->second.id, kind);
            for (int i = 0; i < 4; ++i)
                s.key.w[i] = u.at("w").at(i).get<uint32_t>();
            s.used = u.at("used").get<uint64_t>();
            s.period_end = u.at("period_end").get<uint64_t>();
            const auto now = std::chrono::system_clock::now().time_since_epoch();
            if (s.period_end <=
                static_cast<uint64_t>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()))
                continue; // its period ended while the host was down
            n += dp_->restore_quota_use(s);
        } catch (const json::exception &) {
            continue; // a record of another layout: skipped, the rest restored
        }
    }
    return n;
}

} // namespace tricolor
