// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fuzz.hpp: what the harnesses share. Each harness is a libFuzzer target
// (LLVMFuzzerTestOneInput); a property that fails is a crash, so libFuzzer keeps the input.
#pragma once

#include <cstdio>
#include <cstdlib>

// A broken property: say which and stop (libFuzzer saves the input as crash-<sha1>).
#define FUZZ_REQUIRE(cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "property broken: %s: ", #cond);                                  \
            std::fprintf(stderr, __VA_ARGS__);                                                     \
            std::fputc('\n', stderr);                                                              \
            std::abort();                                                                          \
        }                                                                                          \
    } while (0)
