// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// web.hpp: tricolord --web: the live page (docs/page.md). Read-only: it serves the page's files,
// a rate history it samples each second, and the daemon's view (Daemon::page_view); nothing
// it answers changes the daemon.
#pragma once

#include "daemon.hpp"

#include <memory>
#include <string>

namespace tricolor {

// "PORT", "ADDR:PORT" or "[V6ADDR]:PORT" as --web takes it, as ADDR:PORT to listen on (a port
// alone: loopback), or what is wrong with it.
Result<std::string> page_listen_address(const std::string &arg);
// What keeps the HTTP server (civetweb, for --web and --metrics) from listening on @address as
// @option gave it ("" nothing known).
std::string http_address_problem(const std::string &address, const char *option);

class PageServer {
  public:
    // Listens on @address (ADDR:PORT, port 0: any free one) and starts sampling @d's
    // counters; throws what prevents it.
    PageServer(Daemon &d, const std::string &address);
    ~PageServer();
    PageServer(const PageServer &) = delete;
    PageServer &operator=(const PageServer &) = delete;
    std::string address() const; // ADDR:PORT as bound

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace tricolor
