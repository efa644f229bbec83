// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// cni_conflist.hpp: the edit the CNI plugin's install step makes to a node's CNI network
// configuration list (a .conflist, CNI spec 1.0: {"cniVersion", "name", "plugins": [...]}):
// tricolor takes the place of the reference "bandwidth" plugin, or joins the end of the chain,
// and leaves again on uninstall with the file as it found it. Pure functions over JSON: reading
// and writing the file (atomically, beside the runtime that watches the directory) is the
// caller's.
//
// ordered_json throughout, so that the keys of every object keep the file's own order: an
// operator diffing the file before and after sees our entry and nothing else move.
#pragma once

#include "tricolor/result.hpp"

#include <nlohmann/json.hpp>

#include <string_view>

namespace tricolor::cni {

// The "type" of our plugin entry, and the one we take the place of.
inline constexpr std::string_view kType = "tricolor";
inline constexpr std::string_view kBandwidthType = "bandwidth";
// The key of our entry that holds the bandwidth entry it replaced, exactly as it was, so that
// uninstall can put it back.
inline constexpr std::string_view kReplacedKey = "tricolor.replaced";

// {"type": "tricolor", "capabilities": {"bandwidth": true}}: the runtime passes the pod's
// kubernetes.io/{ingress,egress}-bandwidth annotations to plugins that ask for the "bandwidth"
// capability, as it does to the bandwidth plugin.
nlohmann::ordered_json default_entry();

// @conflist with @entry in it:
//  - in place of its "bandwidth" entry, at the same position, if it has one. The entry then
//    also carries that entry's static ingressRate/ingressBurst/egressRate/egressBurst (tricolor
//    reads the same four keys; a key @entry sets itself wins) and, under kReplacedKey, the
//    bandwidth entry itself;
//  - unchanged if it already has a "tricolor" entry: installing twice is installing once;
//  - else last in the chain.
// Every other key and entry stays as it was, in its order. A single-plugin .conf (an object with
// a "type" and no "plugins") comes back as a conflist holding it: write that to a .conflist
// file and remove the .conf, since runtimes read a .conf file as one plugin.
// Errors name what is wrong: not an object, no "plugins" array, an empty one, an entry that is
// not an object or has no string "type", two "bandwidth" entries, an @entry that is not a
// "tricolor" object.
Result<nlohmann::ordered_json>
conflist_install(const nlohmann::ordered_json &conflist,
                 const nlohmann::ordered_json &entry = default_entry());

// @conflist without its "tricolor" entries: each one that carries kReplacedKey has that entry
// put back in its place, so that conflist_uninstall(conflist_install(x)) == x for every conflist
// x without a "tricolor" entry. (A .conf that install turned into a conflist stays one: the file
// was renamed, and a conflist of one plugin runs as that plugin.) A .conf is returned as is
// unless it is tricolor itself. Errors as conflist_install's, and when nothing would be left in
// the chain (the caller should remove the file instead).
Result<nlohmann::ordered_json> conflist_uninstall(const nlohmann::ordered_json &conflist);

} // namespace tricolor::cni
