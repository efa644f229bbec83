// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// cni_conflist.cpp: tricolor into a node's CNI network configuration list and out again.
#include "tricolor/cni_conflist.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace tricolor::cni {

using nlohmann::ordered_json;

namespace {

// The bandwidth plugin's static limits (containernetworking/plugins, plugins/meta/bandwidth):
// tricolor reads the same four keys, so a node limited this way stays limited after install.
constexpr const char *kStaticRateKeys[] = {"ingressRate", "ingressBurst", "egressRate",
                                           "egressBurst"};

// @plugin's "type"; only called on entries chain_problem() has passed.
std::string_view type_of(const ordered_json &plugin) {
    return plugin.at("type").get_ref<const std::string &>();
}

// What is wrong with @conflist as a chain ("" if nothing): every later step may then take
// "plugins" as a non-empty array of objects with a string "type".
std::string chain_problem(const ordered_json &conflist) {
    if (!conflist.is_object())
        return fmt::format("the conflist is a JSON {}, not an object", conflist.type_name());
    auto plugins = conflist.find("plugins");
    if (plugins == conflist.end() || !plugins->is_array())
        return "the conflist has no \"plugins\" array";
    // A runtime refuses an empty chain ("no plugins in list"); we would not know what to edit.
    if (plugins->empty())
        return "the conflist's \"plugins\" array is empty";
    for (size_t i = 0; i < plugins->size(); i++) {
        const ordered_json &p = (*plugins)[i];
        if (!p.is_object())
            return fmt::format("plugins[{}] is a JSON {}, not an object", i, p.type_name());
        auto type = p.find("type");
        if (type == p.end())
            return fmt::format("plugins[{}] has no \"type\"", i);
        if (!type->is_string())
            return fmt::format("plugins[{}]'s \"type\" is a JSON {}, not a string", i,
                               type->type_name());
    }
    return {};
}

// A single-plugin .conf: an object with a "type" and no "plugins" (CNI spec 0.x, still read by
// every runtime).
bool is_conf(const ordered_json &conflist) {
    return conflist.is_object() && conflist.contains("type") && !conflist.contains("plugins");
}

std::string conf_problem(const ordered_json &conf) {
    const ordered_json &type = conf.at("type");
    if (!type.is_string())
        return fmt::format("the .conf's \"type\" is a JSON {}, not a string", type.type_name());
    return {};
}

// The conflist that runs @conf: its "cniVersion" and "name" at the top, and the rest of it as the
// only plugin. Like libcni's ConfListFromConf, except that the plugin sheds the two keys: in a
// conflist they belong to the list (CNI spec 1.0 §1), and the runtime hands them to each plugin.
ordered_json conf_to_conflist(const ordered_json &conf) {
    ordered_json list = ordered_json::object();
    ordered_json plugin = conf;
    for (const char *key : {"cniVersion", "name"}) {
        if (auto it = conf.find(key); it != conf.end())
            list[key] = *it;
        plugin.erase(key);
    }
    list["plugins"] = ordered_json::array();
    list["plugins"].push_back(std::move(plugin));
    return list;
}

} // namespace

ordered_json default_entry() {
    ordered_json e = ordered_json::object();
    e["type"] = kType;
    e["capabilities"] = {{"bandwidth", true}};
    return e;
}

Result<ordered_json> conflist_install(const ordered_json &conflist, const ordered_json &entry) {
    // Uninstall finds our entry by its type, and takes kReplacedKey as ours to restore: an entry
    // of another type, or one that brings its own kReplacedKey, would not come out as it went in.
    if (!entry.is_object() || !entry.contains("type") || !entry["type"].is_string() ||
        type_of(entry) != kType)
        return std::unexpected(
            fmt::format("the entry to install is not an object of \"type\" \"{}\"", kType));
    if (entry.contains(kReplacedKey))
        return std::unexpected(fmt::format(
            "the entry to install has a \"{}\" key: install sets it itself", kReplacedKey));

    ordered_json out;
    if (is_conf(conflist)) {
        if (auto problem = conf_problem(conflist); !problem.empty())
            return std::unexpected(problem);
        if (type_of(conflist) == kType)
            return conflist; // already ours: installing again changes nothing
        out = conf_to_conflist(conflist);
    } else {
        if (auto problem = chain_problem(conflist); !problem.empty())
            return std::unexpected(problem);
        out = conflist;
    }

    ordered_json &plugins = out["plugins"];
    std::vector<size_t> bandwidth;
    for (size_t i = 0; i < plugins.size(); i++) {
        if (type_of(plugins[i]) == kType)
            return out; // installed already (by us or by hand): as it is, so twice is once
        if (type_of(plugins[i]) == kBandwidthType)
            bandwidth.push_back(i);
    }
    // Two bandwidth entries shape every pod twice; which one tricolor should stand for (and which
    // limits it should read) is the operator's call, not ours.
    if (bandwidth.size() > 1)
        return std::unexpected(fmt::format("the conflist has {} \"{}\" entries (plugins[{}] and "
                                           "plugins[{}]{}); tricolor replaces one",
                                           bandwidth.size(), kBandwidthType, bandwidth[0],
                                           bandwidth[1], bandwidth.size() > 2 ? ", ..." : ""));

    if (bandwidth.empty()) {
        // Last: like bandwidth, tricolor acts on the interface the first (interface) plugin made
        // and passes its result on unchanged, so where it runs after that plugin does not matter
        // (portmap, tuning, firewall touch neither its maps nor its programs). Last also means its
        // DEL runs first, before the interface goes.
        plugins.push_back(entry);
        return out;
    }
    // In bandwidth's place, so the chain keeps its order for everything else.
    ordered_json &old = plugins[bandwidth[0]];
    ordered_json ours = entry;
    for (const char *key : kStaticRateKeys)
        if (auto it = old.find(key); it != old.end() && !ours.contains(key))
            ours[key] = *it; // the caller's own value, if it gave one, is the newer word
    ours[std::string(kReplacedKey)] = old; // as it was, for uninstall to put back
    old = std::move(ours);
    return out;
}

Result<ordered_json> conflist_uninstall(const ordered_json &conflist) {
    if (is_conf(conflist)) {
        if (auto problem = conf_problem(conflist); !problem.empty())
            return std::unexpected(problem);
        if (type_of(conflist) == kType)
            return std::unexpected(fmt::format(
                "the .conf is a \"{}\" plugin alone: without it nothing is left; remove the file",
                kType));
        return conflist;
    }
    if (auto problem = chain_problem(conflist); !problem.empty())
        return std::unexpected(problem);

    ordered_json out = conflist;
    ordered_json &plugins = out["plugins"];
    ordered_json kept = ordered_json::array();
    for (size_t i = 0; i < plugins.size(); i++) {
        ordered_json &p = plugins[i];
        if (type_of(p) != kType) {
            kept.push_back(std::move(p));
            continue;
        }
        auto replaced = p.find(kReplacedKey);
        if (replaced == p.end())
            continue; // appended by install (or added by hand): nothing to put back
        if (!replaced->is_object() || !replaced->contains("type") ||
            !(*replaced)["type"].is_string())
            return std::unexpected(
                fmt::format("plugins[{}]'s \"{}\" is not a plugin object with a string \"type\"", i,
                            kReplacedKey));
        kept.push_back(std::move(*replaced));
    }
    if (kept.empty())
        return std::unexpected(fmt::format("the conflist's plugins are all \"{}\": without them "
                                           "its \"plugins\" array would be empty; remove the file",
                                           kType));
    plugins = std::move(kept); // in place: "plugins" keeps its position among the keys
    return out;
}

} // namespace tricolor::cni
