// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolord.hpp: the parts of the tricolord program around tricolord_core, which main.cpp puts
// together: the control socket (control_socket.cpp) and the pin directory (pin_dir.cpp).
#pragma once

#include "daemon.hpp"

#include <condition_variable>
#include <mutex>
#include <string>
#include <sys/types.h>

namespace tricolor::tricolord {

// Every line the daemon logs: "tricolord: MSG" on stderr (the journal under systemd).
void log(const std::string &msg);

// ---- control_socket.cpp ----

// --socket-group's gid, or -1 for none; an unknown group refuses the start.
gid_t socket_group_id(const std::string &name);
// A socket file that a daemon answers belongs to it: refused before anything is created.
void probe_socket(const std::string &path);
// Listens on @path (a stale socket file is replaced). gid: --socket-group's (the socket is
// root:gid 0660 then), or -1 (root's alone, 0600).
int listen_on(const std::string &path, gid_t gid);

// The control socket's clients, each on a thread of its own: a client that connects and sends
// nothing, or sends a megabyte without a newline, holds only its own thread (for the 2 s read
// timeout), never the others. Requests still run one at a time inside Daemon::handle (its
// mutex), so policy changes stay serialized. At most kMaxClients at once; the next is told so.
class ClientPool {
  public:
    static constexpr int kMaxClients = 256;
    void serve(int client, Daemon &d);
    // Waits for the clients being served (each ends within its read and write timeouts).
    void drain();

  private:
    std::mutex mu_;
    std::condition_variable idle_;
    int active_ = 0;
};

// ---- pin_dir.cpp ----

// The pin directory must be on bpffs; where nothing is mounted at /sys/fs/bpf one is mounted
// (see pin_dir.cpp). Throws what refuses the start; nothing is created before this check.
void check_pin_dir(const std::string &pin_dir);
// Moves the maps an ABI 1 daemon pinned to @abi_dir under their new names; says what it did
// ("" when there was nothing to move).
std::string migrate_abi1(const std::string &pin_dir, const std::string &abi_dir);
// tricolord --prepare-pin-dir USER, run as root before a daemon that runs as USER (the unit's
// ExecStartPre=+): @pin_dir made (mode 0700) and, with everything in it, given to USER; the
// programs a daemon of before program pins left on hooks pinned for their ids. Returns what
// it did; throws what it cannot.
std::string prepare_pin_dir(const std::string &pin_dir, const std::string &user);

} // namespace tricolor::tricolord
