// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The CNI install step's edit of a node's conflist, on the files Flannel, Calico and the CNI
// project really ship (tests/unit/data/cni/README.md says where each comes from).
#include "tricolor/cni_conflist.hpp"
#include "test_util.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iterator>
#include <optional>
#include <string>
#include <vector>

using namespace tricolor;
using nlohmann::ordered_json;
using ::testing::HasSubstr;

namespace {

// tests/unit/data/cni, found from the vectors' folder, which the test library already names.
const std::string kDataDir = std::string(TRICOLOR_VECTOR_DIR) + "/../unit/data/cni";

ordered_json load(const std::string &file) {
    return ordered_json::parse(test::read_file(kDataDir + "/" + file));
}

// A conflist without its "plugins": the keys around the chain, in order (dump() keeps it).
std::string around_plugins(ordered_json conflist) {
    conflist.erase("plugins");
    return conflist.dump();
}

size_t count_type(const ordered_json &conflist, std::string_view type) {
    size_t n = 0;
    for (const ordered_json &p : conflist["plugins"])
        n += p["type"].get<std::string>() == type;
    return n;
}

struct RealFile {
    std::string file;
    std::optional<size_t> bandwidth; // where its bandwidth entry is, if it has one
};

// Every conflist of tests/unit/data/cni.
const std::vector<RealFile> kRealFiles = {
    {"flannel.conflist", std::nullopt},             // flannel, portmap
    {"calico.conflist", 2},                         // calico, portmap, bandwidth
    {"calico-no-bandwidth.conflist", std::nullopt}, // calico, portmap
    {"bridge.conflist", std::nullopt},              // bridge, tuning, portmap
    {"bridge-bandwidth.conflist", 1},               // bridge, bandwidth (runtimeConfig)
    {"ptp-bandwidth.conflist", 1},                  // ptp, bandwidth (static rates)
};

TEST(CniConflist, RealFilesAreWhatTheTableSays) {
    // The table is the tests' expectation: a file edited to lose its bandwidth entry (or gain
    // one) must fail here, not make the other tests check the wrong thing.
    for (const RealFile &f : kRealFiles) {
        SCOPED_TRACE(f.file);
        ordered_json in = load(f.file);
        EXPECT_EQ(count_type(in, "bandwidth"), f.bandwidth ? 1u : 0u);
        if (f.bandwidth) {
            EXPECT_EQ(in["plugins"][*f.bandwidth]["type"], "bandwidth");
        }
        EXPECT_EQ(count_type(in, "tricolor"), 0u);
    }
}

TEST(CniConflist, InstallPutsOneEntryInBandwidthsPlaceElseLast) {
    for (const RealFile &f : kRealFiles) {
        SCOPED_TRACE(f.file);
        const ordered_json in = load(f.file);
        auto r = cni::conflist_install(in);
        ASSERT_TRUE(r) << r.error();
        const ordered_json &out = *r;
        const ordered_json &before = in["plugins"], &after = out["plugins"];

        EXPECT_EQ(around_plugins(out), around_plugins(in)); // other keys as they were, in order
        EXPECT_EQ(count_type(out, "tricolor"), 1u);
        EXPECT_EQ(count_type(out, "bandwidth"), 0u);
        size_t at = f.bandwidth.value_or(before.size());
        ASSERT_EQ(after.size(), f.bandwidth ? before.size() : before.size() + 1);
        EXPECT_EQ(after[at]["type"], "tricolor");
        // Every other entry unchanged and in its place: equal as JSON and in its text (key order).
        for (size_t i = 0; i < before.size(); i++) {
            if (i == at)
                continue;
            EXPECT_EQ(after[i], before[i]) << "plugins[" << i << "]";
            EXPECT_EQ(after[i].dump(), before[i].dump()) << "plugins[" << i << "]";
        }

        const ordered_json &ours = after[at];
        if (!f.bandwidth) {
            EXPECT_EQ(ours.dump(), cni::default_entry().dump());
            continue;
        }
        // In bandwidth's place: the default entry first, then bandwidth's static rates, then
        // bandwidth itself, as it was.
        const ordered_json &old = before[at];
        ordered_json expected = cni::default_entry();
        for (const char *key : {"ingressRate", "ingressBurst", "egressRate", "egressBurst"})
            if (old.contains(key))
                expected[key] = old[key];
        expected["tricolor.replaced"] = old;
        EXPECT_EQ(ours.dump(), expected.dump());
    }
}

TEST(CniConflist, StaticRatesOfBandwidthCarryOver) {
    // The bandwidth README's example limits by static keys; tricolor reads the same four.
    auto r = cni::conflist_install(load("ptp-bandwidth.conflist"));
    ASSERT_TRUE(r) << r.error();
    const ordered_json &ours = (*r)["plugins"][1];
    EXPECT_EQ(ours["ingressRate"], 123);
    EXPECT_EQ(ours["ingressBurst"], 456);
    EXPECT_EQ(ours["egressRate"], 123);
    EXPECT_EQ(ours["egressBurst"], 456);
    EXPECT_FALSE(ours.contains("name")); // nothing else of bandwidth's but under its own key
    EXPECT_EQ(ours["tricolor.replaced"]["name"], "slowdown");

    // A rate the caller's entry sets itself is the one it gets.
    ordered_json entry = cni::default_entry();
    entry["egressRate"] = 1000;
    r = cni::conflist_install(load("ptp-bandwidth.conflist"), entry);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ((*r)["plugins"][1]["egressRate"], 1000);
    EXPECT_EQ((*r)["plugins"][1]["ingressRate"], 123);
}

TEST(CniConflist, InstallingTwiceIsInstallingOnce) {
    for (const RealFile &f : kRealFiles) {
        SCOPED_TRACE(f.file);
        auto once = cni::conflist_install(load(f.file));
        ASSERT_TRUE(once) << once.error();
        auto twice = cni::conflist_install(*once);
        ASSERT_TRUE(twice) << twice.error();
        EXPECT_EQ(twice->dump(), once->dump());
    }
}

TEST(CniConflist, UninstallGivesBackTheFileInstallWasGiven) {
    for (const RealFile &f : kRealFiles) {
        SCOPED_TRACE(f.file);
        const ordered_json in = load(f.file);
        auto installed = cni::conflist_install(in);
        ASSERT_TRUE(installed) << installed.error();
        auto back = cni::conflist_uninstall(*installed);
        ASSERT_TRUE(back) << back.error();
        EXPECT_EQ(*back, in);
        EXPECT_EQ(back->dump(), in.dump()); // key order too
    }
}

TEST(CniConflist, KeysAfterThePluginsStayAfterThem) {
    // Every real file above ends with "plugins"; the spec's "disableCheck" may as well follow it.
    for (const char *file : {"calico.conflist", "flannel.conflist"}) {
        SCOPED_TRACE(file);
        ordered_json in = load(file);
        in["disableCheck"] = true;
        auto installed = cni::conflist_install(in);
        ASSERT_TRUE(installed) << installed.error();
        EXPECT_EQ(around_plugins(*installed), around_plugins(in));
        EXPECT_EQ(installed->items().begin().key(), in.items().begin().key());
        EXPECT_EQ(std::prev(installed->end()).key(), "disableCheck");
        auto back = cni::conflist_uninstall(*installed);
        ASSERT_TRUE(back) << back.error();
        EXPECT_EQ(back->dump(), in.dump());
    }
}

TEST(CniConflist, UninstallOfAFileWithoutTricolorChangesNothing) {
    for (const RealFile &f : kRealFiles) {
        SCOPED_TRACE(f.file);
        const ordered_json in = load(f.file);
        auto r = cni::conflist_uninstall(in);
        ASSERT_TRUE(r) << r.error();
        EXPECT_EQ(r->dump(), in.dump());
    }
}

TEST(CniConflist, UninstallRemovesEveryTricolorEntry) {
    // One appended by install, one added by hand in front: both go, the rest stays in order.
    auto installed = cni::conflist_install(load("flannel.conflist"));
    ASSERT_TRUE(installed) << installed.error();
    ordered_json twice = *installed;
    twice["plugins"].insert(twice["plugins"].begin() + 1, cni::default_entry());
    auto r = cni::conflist_uninstall(twice);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->dump(), load("flannel.conflist").dump());
}

TEST(CniConflist, AConfBecomesTheConflistOfItsPlugin) {
    // The bridge plugin's own example is a single-plugin .conf.
    const ordered_json conf = load("bridge.conf");
    auto r = cni::conflist_install(conf);
    ASSERT_TRUE(r) << r.error();
    ordered_json plugin = conf;
    plugin.erase("cniVersion");
    plugin.erase("name");
    ordered_json expected = ordered_json::object();
    expected["cniVersion"] = conf["cniVersion"];
    expected["name"] = conf["name"];
    expected["plugins"] = ordered_json::array();
    expected["plugins"].push_back(plugin);
    expected["plugins"].push_back(cni::default_entry());
    EXPECT_EQ(r->dump(), expected.dump());

    // Uninstall leaves the conflist of the one plugin (the file is a .conflist now).
    auto back = cni::conflist_uninstall(*r);
    ASSERT_TRUE(back) << back.error();
    expected["plugins"].erase(1);
    EXPECT_EQ(back->dump(), expected.dump());
    // And a .conf without tricolor comes out of uninstall as it went in.
    auto same = cni::conflist_uninstall(conf);
    ASSERT_TRUE(same) << same.error();
    EXPECT_EQ(same->dump(), conf.dump());
}

TEST(CniConflist, AnExistingTricolorEntryIsLeftAsItIs) {
    // Added by hand next to a bandwidth entry: install does not second-guess it.
    ordered_json in = load("calico.conflist");
    ordered_json hand = {{"type", "tricolor"}, {"egressRate", 5}};
    in["plugins"].push_back(hand);
    auto r = cni::conflist_install(in);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->dump(), in.dump());
}

TEST(CniConflist, BadConflistsNameTheProblem) {
    struct Bad {
        const char *text;
        const char *message;
    };
    const Bad bad[] = {
        {R"([{"type": "bridge"}])", "the conflist is a JSON array, not an object"},
        {R"("plugins")", "the conflist is a JSON string, not an object"},
        {R"({"cniVersion": "1.0.0", "name": "x"})", "the conflist has no \"plugins\" array"},
        {R"({"name": "x", "plugins": {"type": "bridge"}})",
         "the conflist has no \"plugins\" array"},
        {R"({"name": "x", "plugins": []})", "the conflist's \"plugins\" array is empty"},
        {R"({"plugins": [{"type": "bridge"}, {"name": "slowdown"}]})",
         "plugins[1] has no \"type\""},
        {R"({"plugins": [{"type": 7}]})", "plugins[0]'s \"type\" is a JSON number, not a string"},
        {R"({"plugins": [{"type": "bridge"}, "portmap"]})",
         "plugins[1] is a JSON string, not an object"},
        {R"({"name": "x", "type": null})", "the .conf's \"type\" is a JSON null, not a string"},
    };
    for (const Bad &b : bad) {
        SCOPED_TRACE(b.text);
        ordered_json in = ordered_json::parse(b.text);
        auto installed = cni::conflist_install(in);
        ASSERT_FALSE(installed);
        EXPECT_THAT(installed.error(), HasSubstr(b.message));
        auto uninstalled = cni::conflist_uninstall(in);
        ASSERT_FALSE(uninstalled);
        EXPECT_THAT(uninstalled.error(), HasSubstr(b.message));
    }
}

TEST(CniConflist, TwoBandwidthEntriesAreTheOperatorsCall) {
    ordered_json in = load("calico.conflist");
    in["plugins"].push_back(in["plugins"][2]);
    auto r = cni::conflist_install(in);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("2 \"bandwidth\" entries (plugins[2] and plugins[3])"));
}

TEST(CniConflist, TheEntryMustBeTricolors) {
    const ordered_json in = load("flannel.conflist");
    auto r = cni::conflist_install(in, {{"type", "bandwidth"}});
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("not an object of \"type\" \"tricolor\""));
    r = cni::conflist_install(in, ordered_json::array());
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("not an object of \"type\" \"tricolor\""));
    r = cni::conflist_install(in, {{"type", "tricolor"}, {"tricolor.replaced", {{"type", "x"}}}});
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("has a \"tricolor.replaced\" key"));
}

TEST(CniConflist, UninstallRefusesToLeaveNothing) {
    auto r = cni::conflist_uninstall(ordered_json::parse(R"({"plugins": [{"type": "tricolor"}]})"));
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("would be empty; remove the file"));
    r = cni::conflist_uninstall(ordered_json::parse(R"({"name": "x", "type": "tricolor"})"));
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("nothing is left; remove the file"));
}

TEST(CniConflist, UninstallNamesABadReplacedEntry) {
    auto r = cni::conflist_uninstall(ordered_json::parse(
        R"({"plugins": [{"type": "calico"}, {"type": "tricolor", "tricolor.replaced": 1}]})"));
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("plugins[1]'s \"tricolor.replaced\" is not a plugin object"));
}

} // namespace
