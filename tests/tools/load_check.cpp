// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// load_check: opens each BPF object file given and loads every program in it into the running
// kernel (maps created, programs verified, nothing attached or pinned), through the loader's
// own error reporting. One line per object, with the instructions the verifier processed for
// each program (docs/datapath.md cites them); exit 1 if the kernel refused any. The compiler
// matrix runs it on every kernel (tests/compilers/load_objects.sh).
#include <cstdio>
#include <string>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "tricolor/bpf_load.hpp"

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: load_check OBJECT.bpf.o...\n");
        return 2;
    }
    tricolor::quiet_libbpf_logging();
    int rc = 0;
    for (int i = 1; i < argc; ++i) {
        bpf_object *obj = bpf_object__open_file(argv[i], nullptr);
        if (!obj) {
            std::fprintf(stderr, "%s: cannot open\n", argv[i]);
            rc = 1;
            continue;
        }
        int progs = 0;
        bpf_program *prog;
        bpf_object__for_each_program(prog, obj) {
            ++progs;
        }
        auto loaded = tricolor::load_bpf(argv[i], [&] { return bpf_object__load(obj); });
        std::string verified;
        if (loaded) {
            bpf_object__for_each_program(prog, obj) {
                bpf_prog_info info{};
                uint32_t len = sizeof(info);
                if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) == 0)
                    verified += std::string(verified.empty() ? "" : ", ") +
                                bpf_program__name(prog) + " " + std::to_string(info.verified_insns);
            }
        }
        bpf_object__close(obj);
        if (loaded) {
            std::printf("%s: %d programs loaded (instructions verified: %s)\n", argv[i], progs,
                        verified.c_str());
        } else {
            std::printf("%s: refused: %s\n", argv[i], loaded.error().c_str());
            rc = 1;
        }
    }
    return rc;
}
