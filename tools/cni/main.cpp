// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The `tricolor` CNI plugin's executable (cni.hpp): the CNI environment and stdin in, a result
// or an error object out. Run with arguments, it is the node's install step instead:
//   tricolor conflist install FILE     put {"type": "tricolor", ...} in FILE's chain, in place
//                                      of "bandwidth" where present (cni_conflist.hpp)
//   tricolor conflist uninstall FILE   take it out again, "bandwidth" back where it was
// FILE is replaced whole (a new file renamed over it): a runtime reading it sees the old file
// or the new one.
#include "cni.hpp"
#include "tricolor/cni_conflist.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include <unistd.h>

namespace {

std::string env(const char *name) {
    const char *v = std::getenv(name);
    return v ? v : "";
}

int conflist_command(const std::string &verb, const std::string &file) {
    std::ifstream in(file);
    if (!in) {
        std::cerr << "tricolor: cannot read " << file << "\n";
        return 1;
    }
    auto doc = nlohmann::ordered_json::parse(in, nullptr, false);
    if (doc.is_discarded()) {
        std::cerr << "tricolor: " << file << " is not JSON\n";
        return 1;
    }
    auto edited = verb == "install" ? tricolor::cni::conflist_install(doc)
                                    : tricolor::cni::conflist_uninstall(doc);
    if (!edited) {
        std::cerr << "tricolor: " << file << ": " << edited.error() << "\n";
        return 1;
    }
    const std::string tmp = file + ".tricolor-new";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << edited->dump(2) << "\n";
        if (!out.flush()) {
            std::cerr << "tricolor: cannot write " << tmp << "\n";
            unlink(tmp.c_str());
            return 1;
        }
    }
    if (std::rename(tmp.c_str(), file.c_str()) != 0) {
        std::cerr << "tricolor: cannot replace " << file << "\n";
        unlink(tmp.c_str());
        return 1;
    }
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc > 1) {
        std::string verb = argc > 2 ? argv[2] : "";
        if (argc != 4 || std::string(argv[1]) != "conflist" ||
            (verb != "install" && verb != "uninstall")) {
            std::cerr << "usage: tricolor conflist install|uninstall FILE\n"
                         "       (with no arguments: the CNI plugin, run by a container runtime)\n";
            return 2;
        }
        return conflist_command(verb, argv[3]);
    }
    tricolor::cni::Invocation inv;
    inv.command = env("CNI_COMMAND");
    inv.container_id = env("CNI_CONTAINERID");
    inv.netns = env("CNI_NETNS");
    inv.ifname = env("CNI_IFNAME");
    inv.args = env("CNI_ARGS");
    inv.path = env("CNI_PATH");
    if (inv.command != "VERSION")
        inv.stdin_text.assign(std::istreambuf_iterator<char>(std::cin), {});
    auto o = tricolor::cni::run(inv);
    std::cout << o.out << std::flush;
    return o.exit_code;
}
