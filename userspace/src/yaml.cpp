// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// yaml.cpp: see yaml.hpp.
#include "tricolor/yaml.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <yaml-cpp/yaml.h>

#include <charconv>

namespace tricolor {
namespace {

bool is_int(const std::string &s, int64_t &out) {
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

bool is_uint(const std::string &s, uint64_t &out) {
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

// YAML's aliases make a document a graph: an anchor that contains its own alias
// (`a: &x [*x]`) is a cycle, and aliases of aliases grow a few lines into billions of nodes.
// The JSON made of it is bounded in depth and in size; no policy set comes near either. The
// size's bound grows with the text (a value takes two bytes at least, so a document without
// aliases never meets it): a few hundred bytes of aliases stop at about 10^5 values, a second of
// work, not at 10^6 (10 s and 540 MB for 511 bytes, found by the config harness under ASan).
constexpr int kMaxDepth = 64;
constexpr size_t kMaxNodes = 1'000'000;
size_t max_nodes(size_t text_bytes) {
    return std::min(kMaxNodes, 100'000 + 8 * text_bytes);
}

struct TooBig {
    std::string why;
};

nlohmann::json convert(const YAML::Node &n, int depth, size_t &nodes, size_t limit) {
    if (depth > kMaxDepth)
        throw TooBig{fmt::format("nested deeper than {} levels (an alias inside its own anchor?)",
                                 kMaxDepth)};
    if (++nodes > limit)
        throw TooBig{fmt::format("more than {} values once its aliases are expanded", limit)};
    switch (n.Type()) {
    case YAML::NodeType::Map: {
        nlohmann::json obj = nlohmann::json::object();
        for (const auto &kv : n)
            obj[kv.first.as<std::string>()] = convert(kv.second, depth + 1, nodes, limit);
        return obj;
    }
    case YAML::NodeType::Sequence: {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto &item : n)
            arr.push_back(convert(item, depth + 1, nodes, limit));
        return arr;
    }
    case YAML::NodeType::Scalar: {
        const std::string &s = n.Scalar();
        if (n.Tag() == "!") // quoted: a string whatever it looks like
            return s;
        if (s == "true" || s == "True" || s == "TRUE")
            return true;
        if (s == "false" || s == "False" || s == "FALSE")
            return false;
        if (s == "null" || s == "~" || s == "Null" || s == "NULL")
            return nullptr;
        if (uint64_t u; is_uint(s, u))
            return u;
        if (int64_t i; is_int(s, i))
            return i;
        return s;
    }
    default:
        return nullptr;
    }
}

nlohmann::json convert(const YAML::Node &n, size_t text_bytes) {
    size_t nodes = 0;
    return convert(n, 0, nodes, max_nodes(text_bytes));
}

bool reads_as_other(const std::string &s) {
    if (s.empty())
        return true;
    YAML::Node n = YAML::Load(s);
    return !convert(n, s.size()).is_string() || n.Type() != YAML::NodeType::Scalar;
}

void emit(YAML::Emitter &out, const nlohmann::json &j) {
    if (j.is_object()) {
        out << YAML::BeginMap;
        for (const auto &[k, v] : j.items()) {
            out << YAML::Key << k << YAML::Value;
            emit(out, v);
        }
        out << YAML::EndMap;
    } else if (j.is_array()) {
        out << YAML::BeginSeq;
        for (const auto &v : j)
            emit(out, v);
        out << YAML::EndSeq;
    } else if (j.is_string()) {
        const std::string &s = j.get_ref<const std::string &>();
        bool quote = false;
        // A string that does not read back as itself is quoted: one YAML cannot parse, and one
        // that parses as a graph too big to convert (`&x [*x]`, a string like any other here).
        try {
            quote = reads_as_other(s);
        } catch (const YAML::Exception &) {
            quote = true;
        } catch (const TooBig &) {
            quote = true;
        }
        if (quote)
            out << YAML::DoubleQuoted << s;
        else
            out << s;
    } else if (j.is_boolean()) {
        out << j.get<bool>();
    } else if (j.is_number_unsigned()) {
        out << j.get<uint64_t>();
    } else if (j.is_number_integer()) {
        out << j.get<int64_t>();
    } else if (j.is_number()) {
        out << j.get<double>();
    } else {
        out << YAML::Null;
    }
}

// A config is text: UTF-8 (JSON's strings are, and a name of other bytes could not be printed
// back, nor sent over the socket), without control characters other than tab and line ends
// (YAML forbids them in a stream). Empty when it is; else where the first bad byte is.
std::string text_problem(const std::string &text) {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < text.size();) {
        auto c = static_cast<unsigned char>(text[i]);
        size_t len = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xe  ? 3
                     : (c >> 3) == 0x1e ? 4
                                        : 0;
        bool ok = len != 0 && i + len <= text.size();
        for (size_t k = 1; ok && k < len; ++k)
            ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
        if (ok && len > 1) { // the shortest form, and no surrogates or code points past U+10FFFF
            uint32_t cp = c & (0x7f >> len);
            for (size_t k = 1; k < len; ++k)
                cp = cp << 6 | (static_cast<unsigned char>(text[i + k]) & 0x3f);
            static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
            ok = cp >= kMin[len] && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
        }
        if (!ok)
            return fmt::format("line {}, column {}: byte 0x{:02x} is not UTF-8 text", line, column,
                               c);
        if (len == 1 && (c < 0x20 || c == 0x7f) && c != '\t' && c != '\n' && c != '\r')
            return fmt::format("line {}, column {}: control character 0x{:02x}", line, column, c);
        if (c == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
        i += len;
    }
    return {};
}

} // namespace

Result<nlohmann::json> yaml_to_json(const std::string &text) {
    if (auto why = text_problem(text); !why.empty())
        return std::unexpected(why);
    try {
        return convert(YAML::Load(text), text.size());
    } catch (const TooBig &e) {
        return std::unexpected("the document is " + e.why);
    } catch (const YAML::Exception &e) {
        return std::unexpected(
            fmt::format("line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
    }
}

std::string json_to_yaml(const nlohmann::json &j) {
    YAML::Emitter out;
    emit(out, j);
    return std::string(out.c_str()) + "\n";
}

} // namespace tricolor
