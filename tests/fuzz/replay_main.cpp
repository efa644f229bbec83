// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// A harness without libFuzzer: runs LLVMFuzzerTestOneInput once for each file named, or for
// every file of each directory named. It is how the g++ builds (the plain and the sanitizer
// ones) replay the checked-in corpora, and the crash inputs kept as regressions, where clang's
// libFuzzer cannot build this code (Debian 12: clang 14 has no std::expected with libstdc++).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    namespace fs = std::filesystem;
    size_t runs = 0;
    auto run = [&](const fs::path &file) {
        std::ifstream in(file, std::ios::binary);
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
        LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
        ++runs;
    };
    for (int i = 1; i < argc; ++i) {
        std::error_code ec;
        if (fs::is_directory(argv[i], ec)) {
            for (const auto &e : fs::recursive_directory_iterator(argv[i]))
                if (e.is_regular_file())
                    run(e.path());
        } else if (fs::exists(argv[i], ec)) {
            run(argv[i]);
        } else {
            std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
            return 2;
        }
    }
    std::printf("%zu inputs, no property broken\n", runs);
    return runs > 0 ? 0 : 2;
}
