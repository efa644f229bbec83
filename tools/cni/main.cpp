// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The `tricolor` CNI plugin's executable (cni.hpp): the CNI environment and stdin in, a result
// or an error object out.
#include "cni.hpp"

#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>

namespace {
std::string env(const char *name) {
    const char *v = std::getenv(name);
    return v ? v : "";
}
} // namespace

int main() {
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
