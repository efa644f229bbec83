// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// web.cpp: tricolord --web, the live page (docs/page.md). civetweb (the HTTP server the metrics
// endpoint already runs on) answers GET alone: the page's files from memory (web_assets.hpp),
// /api/v1/samples (RateHistory) and /api/v1/view (Daemon::page_view). A thread reads the
// policies' counters once a second for the history, whether or not anyone looks: a page opened
// later still shows the last 5 minutes.
#include "web.hpp"

#include "rate_history.hpp"
#include "web_assets.hpp"

#include <CivetServer.h>
#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace tricolor {

Result<std::string> page_listen_address(const std::string &arg) {
    auto port_ok = [](std::string_view p) {
        unsigned v = 0;
        auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
        return !p.empty() && ec == std::errc() && end == p.data() + p.size() && v <= 65535;
    };
    std::string bad = fmt::format("--web '{}': expected PORT (on loopback), ADDR:PORT or "
                                  "[V6ADDR]:PORT, PORT from 0 (any free one) to 65535",
                                  arg);
    if (arg.find(':') == std::string::npos)
        return port_ok(arg) ? Result<std::string>("127.0.0.1:" + arg) : std::unexpected(bad);
    auto colon = arg.rfind(':');
    std::string host = arg.substr(0, colon);
    if (host.empty() || !port_ok(std::string_view(arg).substr(colon + 1)))
        return std::unexpected(bad);
    if (host.find(':') != std::string::npos && !(host.front() == '[' && host.back() == ']'))
        return std::unexpected(bad + " (an IPv6 address goes in brackets)");
    if (auto no = http_address_problem(arg, "--web"); !no.empty())
        return std::unexpected(no);
    return arg;
}

std::string http_address_problem(const std::string &address, const char *option) {
    // mg_check_feature(8): civetweb built with IPv6 (Debian's is not: it would fail to bind
    // with "null context" and no more).
    if (address.starts_with('[') && !mg_check_feature(8))
        return fmt::format("{} '{}': this build's HTTP server (civetweb) has no IPv6: give an "
                           "IPv4 address (127.0.0.1 for loopback)",
                           option, address);
    return "";
}

namespace {

using Clock = std::chrono::steady_clock;

void reply(mg_connection *c, int code, std::string_view type, std::string_view body,
           const char *cache = "no-store") {
    mg_printf(c,
              "HTTP/1.1 %d %s\r\nContent-Type: %.*s\r\nContent-Length: %zu\r\n"
              "Cache-Control: %s\r\nX-Content-Type-Options: nosniff\r\n"
              // The page loads only its own files and asks only its own API.
              "Content-Security-Policy: default-src 'self'; style-src 'self' 'unsafe-inline'\r\n"
              "\r\n",
              code, mg_get_response_code_text(c, code), static_cast<int>(type.size()), type.data(),
              body.size(), cache);
    mg_write(c, body.data(), body.size());
}

} // namespace

struct PageServer::Impl : public CivetHandler {
    Daemon &daemon;
    std::string asked; // ADDR:PORT as given
    std::unique_ptr<CivetServer> server;
    mutable std::mutex mu; // history
    RateHistory history;
    std::mutex stop_mu;
    std::condition_variable stop_cv;
    bool stop = false;
    std::thread sampler;

    // flows --top walks the flow table when the heavy hitters cannot answer (13 ms over an
    // empty 2^21 table): the page asks for it at most every kFlowsEvery, not at each poll.
    static constexpr auto kFlowsEvery = std::chrono::seconds(5);
    std::mutex flows_mu;
    nlohmann::json flows;
    size_t flows_top = 0;
    Clock::time_point flows_at;

    explicit Impl(Daemon &d) : daemon(d) {}

    nlohmann::json view(size_t top, bool specs) {
        std::lock_guard lock(flows_mu);
        auto now = Clock::now();
        bool fresh = !flows.is_null() && flows_top == top && now - flows_at < kFlowsEvery;
        nlohmann::json v =
            daemon.page_view(fresh ? std::nullopt : std::optional<size_t>(top), specs);
        if (fresh) {
            v["flows"] = flows;
        } else {
            flows = v["flows"];
            flows_top = top;
            flows_at = now;
        }
        auto as_of = std::chrono::system_clock::now() - (now - flows_at);
        v["flows"]["as_of_ms"] =
            std::chrono::duration_cast<std::chrono::milliseconds>(as_of.time_since_epoch()).count();
        return v;
    }

    void sample_each_second() {
        auto next = Clock::now();
        auto last = next;
        std::unique_lock lock(stop_mu);
        while (!stop) {
            auto totals = daemon.policy_totals();
            auto now = Clock::now();
            int64_t t_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
            {
                std::lock_guard h(mu);
                history.add(totals, t_ms, std::chrono::duration<double>(now - last).count());
            }
            last = now;
            // On the second, not a second after the read: a slow read does not make the
            // history drift.
            next += std::chrono::seconds(1);
            if (next < now)
                next = now + std::chrono::seconds(1);
            stop_cv.wait_until(lock, next, [&] { return stop; });
        }
    }

    bool handleGet(CivetServer *, mg_connection *c) override {
        const mg_request_info *ri = mg_get_request_info(c);
        std::string_view uri = ri->local_uri ? ri->local_uri : "/";
        try {
            if (uri == "/api/v1/samples") {
                std::string after;
                uint64_t a = 0;
                if (CivetServer::getParam(c, "after", after) &&
                    (std::from_chars(after.data(), after.data() + after.size(), a).ec !=
                     std::errc())) {
                    reply(c, 400, "text/plain; charset=utf-8",
                          "after: expected a sample number (0 for all)\n");
                    return true;
                }
                std::string body;
                {
                    std::lock_guard h(mu);
                    body = history.json_after(a);
                }
                reply(c, 200, "application/json", body);
                return true;
            }
            if (uri == "/api/v1/view") {
                std::string top, specs;
                size_t n = 20;
                if (CivetServer::getParam(c, "specs", specs) && specs != "0" && specs != "1") {
                    reply(c, 400, "text/plain; charset=utf-8", "specs: expected 0 or 1\n");
                    return true;
                }
                if (CivetServer::getParam(c, "top", top) &&
                    (std::from_chars(top.data(), top.data() + top.size(), n).ec != std::errc() ||
                     n > 1000)) {
                    reply(c, 400, "text/plain; charset=utf-8",
                          "top: expected a number of flows from 0 to 1000\n");
                    return true;
                }
                reply(c, 200, "application/json", view(n, specs == "1").dump());
                return true;
            }
            if (uri == "/")
                uri = "/index.html";
            for (const auto &a : web::assets())
                if (a.path == uri) {
                    reply(c, 200, a.type, a.body, "max-age=60");
                    return true;
                }
            reply(c, 404, "text/plain; charset=utf-8",
                  fmt::format("no such page: {} (the page is at /)\n", uri));
        } catch (const std::exception &e) {
            reply(c, 500, "text/plain; charset=utf-8", fmt::format("{}\n", e.what()));
        }
        return true;
    }
    // Read-only: anything but GET is refused.
    bool refuse(mg_connection *c) {
        mg_printf(c, "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET\r\n"
                     "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 49\r\n\r\n"
                     "the page is read-only: tricolorctl changes state\n");
        return true;
    }
    bool handleHead(CivetServer *, mg_connection *c) override { return refuse(c); }
    bool handlePost(CivetServer *, mg_connection *c) override { return refuse(c); }
    bool handlePut(CivetServer *, mg_connection *c) override { return refuse(c); }
    bool handleDelete(CivetServer *, mg_connection *c) override { return refuse(c); }
    bool handlePatch(CivetServer *, mg_connection *c) override { return refuse(c); }
    bool handleOptions(CivetServer *, mg_connection *c) override { return refuse(c); }
};

PageServer::PageServer(Daemon &d, const std::string &address) : impl_(std::make_unique<Impl>(d)) {
    impl_->asked = address;
    std::vector<std::string> options = {"listening_ports",    address, "num_threads", "2",
                                        "request_timeout_ms", "10000"};
    try {
        impl_->server = std::make_unique<CivetServer>(options);
    } catch (const std::exception &e) {
        throw std::runtime_error(fmt::format("cannot serve the page on {}: {}", address, e.what()));
    }
    impl_->server->addHandler("/", impl_.get());
    impl_->sampler = std::thread([this] { impl_->sample_each_second(); });
}

PageServer::~PageServer() {
    {
        std::lock_guard lock(impl_->stop_mu);
        impl_->stop = true;
    }
    impl_->stop_cv.notify_all();
    if (impl_->sampler.joinable())
        impl_->sampler.join();
    impl_->server.reset(); // its threads may be in handleGet: they end before the daemon goes
}

std::string PageServer::address() const {
    auto ports = impl_->server->getListeningPorts();
    // The address as asked with the port as bound (port 0 asks for any free one).
    return fmt::format("{}:{}", impl_->asked.substr(0, impl_->asked.rfind(':')),
                       ports.empty() ? 0 : ports.front());
}

} // namespace tricolor
