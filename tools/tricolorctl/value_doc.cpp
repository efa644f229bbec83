// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// value_doc.cpp: the docs kept beside the options, by the option (CLI11's options carry nothing
// of ours).
#include "value_doc.hpp"

#include <map>

namespace tricolor::cli {

namespace {

std::map<const CLI::Option *, ValueDoc> &docs() {
    static std::map<const CLI::Option *, ValueDoc> d;
    return d;
}

} // namespace

CLI::Option *describe(CLI::Option *opt, ValueDoc doc) {
    docs()[opt] = std::move(doc);
    return opt;
}

CLI::Option *one_of(CLI::Option *opt, std::vector<std::string> choices) {
    opt->check(CLI::IsMember(choices));
    return describe(opt, {.complete = Complete::words, .words = std::move(choices)});
}

const ValueDoc *value_doc(const CLI::Option *opt) {
    auto it = docs().find(opt);
    return it == docs().end() ? nullptr : &it->second;
}

} // namespace tricolor::cli
