#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# tests/mutate.sh: the mutation check. Plants small, realistic bugs in bpf/ and userspace/, one
# at a time, in a scratch copy of the tree, rebuilds what the tests need, runs the tests that
# should notice, and prints a table: every mutant must be CAUGHT (its tests fail). Exits non-zero
# if any mutant survived, did not apply, or did not build, or if the unmutated tree fails the
# tests (then nothing below would mean anything).
#
#   tests/mutate.sh [-l|-n] [-k] [-w] [ID...]   (root: the BPF and e2e suites load programs)
#     -l        list the mutants and exit
#     -n        check only that every mutant still applies to the tree (no build, no root):
#               a pattern that matches nothing is NOT APPLIED and the exit status is non-zero
#     -k        keep going after a baseline failure (debugging only)
#     -w        write the table into docs/testing.md (between its mutate markers), with the
#               date, kernel and commit of the run
#     ID...     run only these mutants (default: all)
#   MUTATE_DIR  scratch directory (default /tmp/tricolor-mutate): the tree is copied to
#               $MUTATE_DIR/src (again on each run, keeping mtimes: only what changed rebuilds),
#               built in $MUTATE_DIR/build incrementally: one rebuild per mutant.
#   MUTATE_TIMEOUT  seconds per e2e test run (default 600; a quarter of it for the other
#               suites); a timeout counts as caught (a planted bug can make a loop endless).
#
# Not part of ./tricolor.sh test: it takes a rebuild per mutant (2-3 minutes on two cores for
# one in bpf/; some hours for the whole list). The table it prints is in docs/testing.md. When
# a feature is added, add its mutants here, and a test that catches each.
set -uo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=${MUTATE_DIR:-/tmp/tricolor-mutate}
TIMEOUT=${MUTATE_TIMEOUT:-600}

# ---- the mutants -------------------------------------------------------------------------
# mutant ID FILE PERL-SUBSTITUTION DESCRIPTION TESTS
#   PERL-SUBSTITUTION is applied with perl -0pe (the whole file is one string) and must change
#   the file. TESTS is a space-separated list of SUITE:GTEST_FILTER, SUITE one of unit, bpf,
#   cli, e2e (build/tests/SUITE_tests), or script:PATH (a test script of the tree, run as root
#   with BUILD_DIR set: tests/web/page_test.sh).
IDS=()
declare -A FILE EXPR DESC TESTS
mutant() {
    IDS+=("$1")
    FILE[$1]=$2
    EXPR[$1]=$3
    DESC[$1]=$4
    TESTS[$1]=$5
}

METER_UNIT='unit:MeterVectors.*:*MeterProperties*:MeterExact.*:MeterExtremes.*'
METER_BPF='bpf:BpfReplay.*:*ColoursEqualTheExpectedFilesOnTheVectors*'

mutant refill-rounding bpf/lib/meter.h \
    's/dt \* cfg->c_rate\)\);/dt * cfg->c_rate \/ TCM_TOKENS_PER_BYTE * TCM_TOKENS_PER_BYTE));/' \
    "srtcm refill rounded down to whole bytes at every refill" \
    "$METER_UNIT $METER_BPF"
WARM_TESTS='unit:Warmup.* bpf:BpfReplay.*'
mutant warm-cold-strict bpf/lib/meter.h \
    's/now_ns - st->last_ns >= w->d_ns/now_ns - st->last_ns > w->d_ns/' \
    "warm-up: a gap of exactly D does not make the meter cold" \
    "$WARM_TESTS"
mutant warm-step-edge bpf/lib/meter.h \
    's/meter_warm_earned\(d, x1 \* w->k\)/meter_warm_earned(d, x1 * w->k + 1)/' \
    "warm-up: a packet's place in the steps read 1/K ns late (a step edge off by one)" \
    "$WARM_TESTS"
mutant warm-part-tokens-lost bpf/lib/meter.h \
    's/\*rem = \(__u32\)\(f - q \* w->k2\);/*rem = 0;/' \
    "warm-up: the part-tokens a step earns beyond whole ones are dropped" \
    "$WARM_TESTS"
mutant warm-full-keeps-part bpf/lib/meter.h \
    's/over_rem = ws->c_rem;\n        ws->c_rem = 0;/over_rem = ws->c_rem;/' \
    "warm-up: a full C keeps its part-token (more than CBS)" \
    "$WARM_TESTS"
QUOTA_TESTS='unit:Quota.*:MeterVectors.* bpf:BpfReplay.MatchesEveryVectorExactly'
mutant quota-off-by-one bpf/lib/quota.h \
    's/return qs->used >= q->bytes;/return qs->used > q->bytes;/' \
    "quota: a meter whose used bytes equal the quota still decides (off by one at the quota)" \
    "$QUOTA_TESTS"
mutant quota-reset-late bpf/lib/quota.h \
    's/now >= qs->period_end/now > qs->period_end/' \
    "quota: a packet at the reset's nanosecond is the old period's" \
    "$QUOTA_TESTS"
mutant quota-red-counted bpf/lib/quota.h \
    's/if \(color != TCM_RED\)\n        qs->used \+= len;/qs->used += len;/' \
    "quota: red packets count against the quota" \
    "$QUOTA_TESTS"
mutant quota-wall-ignored bpf/lib/chain.h \
    's/\(wall \? wall->offset_ns : 0\)/(wall ? 0 : 0)/' \
    "quota: the data path reads its periods on its own clock, not UTC (tcm_wall ignored)" \
    "e2e:E2E.AQuotaKeepsItsUseThroughARestartAndAChange"
mutant quota-use-lost-on-reclaim userspace/src/datapath_ext.cpp \
    's/if \(quota && st.quota.used && st.quota.period_end > wall\)/if (false)/' \
    "quota: a flow reclaimed idle loses its use of the period (made again, its quota is whole)" \
    "bpf:DatapathTest.APerSourceQuotaIsEachSourcesAndOutlivesItsFlow"
mutant quota-epoch-ignored bpf/lib/quota.h \
    's/if \(xs->quota_epoch != x->quota.epoch\) \{/if (0) {/' \
    "quota: a quota taken away and given again keeps the use of before" \
    "bpf:DatapathTest.AQuotaChangedKeepsItsUseAndOneGivenAnewStartsFromNothing"
mutant quota-gen-kept userspace/src/datapath_commit.cpp \
    's/x.quota.gen = a.gen \+/x.quota.gen = a.gen + 0 *\(/; s/a.month_day != b.month_day\);/a.month_day != b.month_day));/' \
    "quota: a change of the periods leaves the period of before running" \
    "bpf:DatapathTest.AQuotaChangedKeepsItsUseAndOneGivenAnewStartsFromNothing"
mutant quota-over-reclaimed userspace/src/datapath_flows.cpp \
    's/may_go = may_go &&\n(\s*)!\(x/may_go = may_go ||\n$1!(x/' \
    "quota: a flow over its quota is reclaimed as idle (its meter rests while the over meter works)" \
    "bpf:DatapathTest.AFlowOverItsQuotaIsNotReclaimedAsIdle"
mutant ext-chain-red-unseen bpf/lib/chain.h \
    's/        mode \|= TCM_LEVEL_AWARE \| TCM_RED;/        return TCM_RED;/' \
    "hierarchy with a warm-up or quota: a packet that ends red is not seen by the levels (no refill, no start, no cold gap ended)" \
    "bpf:HierDatapathTest.BpfEngineMatchesEveryHierVector"
mutant ext-chain-quota-uncommitted bpf/lib/chain.h \
    's/            \*xs = \*xc;/            (void)xc;/' \
    "hierarchy with a warm-up or quota: a passed packet takes the level's tokens but not its quota's bytes or warm-up" \
    "bpf:HierDatapathTest.BpfEngineMatchesEveryHierVector bpf:HierDatapathTest.AQuotaGivenToTheTopReachesEveryChainBelowItAndGoesWithIt"
mutant ext-chain-flag-one-level userspace/src/policy_sets.cpp \
    's/            relink_below\(items.at\(id\).policy.name, depth \+ 1\);/            (void)depth;/' \
    "hierarchy: a quota given to a grandparent leaves the chains two levels below it on the plain path" \
    "bpf:HierDatapathTest.AQuotaGivenToTheTopReachesEveryChainBelowItAndGoesWithIt"
mutant meter-slow-4pct bpf/lib/meter.h \
    's/meter_bucket_add\(tokens, size, dt \* rate\)/meter_bucket_add(tokens, size, dt * rate \/ 100 * 96)/' \
    "trtcm/rfc4115 buckets refill at 96% of their rate (under-credit)" \
    "unit:*MeterProperties* $METER_BPF"
mutant meter-fast-4pct bpf/lib/meter.h \
    's/dt \* cfg->c_rate\)\);/dt * cfg->c_rate \/ 100 * 104));/' \
    "srtcm refills at 104% of CIR (over-credit)" \
    "unit:*MeterProperties* $METER_BPF"
mutant start-empty bpf/lib/meter.h \
    's/st->c_tokens = empty \|\| \(cfg->flags & TCM_METER_F_FLEET\) \? 0 : cfg->c_size;/st->c_tokens = 0;/' \
    "a new flow's C bucket starts empty instead of full" \
    "$METER_UNIT $METER_BPF"
mutant shrink-zeroes bpf/lib/meter.h \
    's/if \(st->c_tokens > cfg->c_size\)\s*st->c_tokens = cfg->c_size;/if (st->c_tokens > cfg->c_size)\n        st->c_tokens = 0;/' \
    "a policy update that shrinks CBS empties C instead of capping it" \
    "bpf:*PolicyUpdateKeepsTokensCappedAndCounters*"
mutant green-strict bpf/lib/meter.h \
    's/in_color == TCM_GREEN && st->c_tokens >= cost/in_color == TCM_GREEN \&\& st->c_tokens > cost/' \
    "srtcm/rfc4115: green needs more than the cost (> for >=)" \
    "$METER_UNIT $METER_BPF"
mutant trtcm-peak-from-c bpf/lib/meter.h \
    's/in_color == TCM_RED \|\| st->e_tokens < cost/in_color == TCM_RED || st->c_tokens < cost/' \
    "trtcm tests C instead of P for red" \
    "$METER_UNIT $METER_BPF"
mutant srtcm-no-overflow bpf/lib/meter.h \
    's/meter_bucket_add\(&st->e_tokens, cfg->e_size,\s*meter_bucket_add\(&st->c_tokens, cfg->c_size, dt \* cfg->c_rate\)\);/meter_bucket_add(\&st->c_tokens, cfg->c_size, dt * cfg->c_rate);/' \
    "srtcm: what overflows C is lost instead of filling E" \
    "$METER_UNIT $METER_BPF"
mutant lock-removed bpf/lib/flow.h \
    's/if \(__sync_val_compare_and_swap\(&f->lock, 0, 1\) == 0\)\s*return 1;/return 1;/' \
    "the flow lock is never taken" \
    "bpf:*TwoCpusOnOneFlowNeverOverAdmit*"
mutant unlock-store-keeps-lock bpf/lib/flow.h \
    's/\*\(volatile __u32 \*\)&f->lock = 0;/*(volatile __u32 *)\&f->lock = 1;/' \
    "the flow lock's plain-store release (x86) leaves it held: later packets time out red" \
    "bpf:DatapathTest.CountersAndDefaultActionsPerColour"
mutant checksum bpf/lib/act.h \
    's/sum \+= \(__u16\)~old;/sum += old;/' \
    "DSCP rewrite: RFC 1624 update adds the old word instead of its complement" \
    "bpf:*DscpRemark*"
mutant ecn-lost bpf/lib/act.h \
    's/act_set_ipv4_tos\(ip, \(ip->tos & 0x3\)/act_set_ipv4_tos(ip, (ip->tos \& 0x0)/' \
    "DSCP rewrite clears the ECN bits" \
    "bpf:*DscpRemark*"
mutant colour-map-word bpf/lib/act.h \
    's/pol->color_map\[\(dscp >> 5\) & 1\]/pol->color_map[0]/' \
    "colour-aware: DSCPs 32-63 read the colour map of 0-31" \
    "bpf:*ColourAware*"
mutant rank-name-not-prefix userspace/src/policy_sets.cpp \
    's/-static_cast<int>\(specificity\(p\.match\)\)/0/' \
    "rank: ties at equal priority go to the name, not the longer prefix" \
    "bpf:*RankOrder*:*ClassificationPrecedence*:*BetterRankWins*"
mutant rank-no-priority userspace/src/policy_sets.cpp \
    's/return \{p\.priority,/return {0u,/' \
    "rank: priority ignored" \
    "bpf:*RankOrder*:*ClassificationPrecedence*:*BetterRankWins*"
mutant rank-longest-single userspace/src/rules.cpp \
    's/return \(m\.src \? m\.src->len : 0\) \+ \(m\.dst \? m\.dst->len : 0\);/return std::max<unsigned>(m.src ? m.src->len : 0, m.dst ? m.dst->len : 0);/' \
    "rank: the longest single prefix instead of src + dst bits" \
    "bpf:*RankOrder*:*ClassificationPrecedence*:*BetterRankWins*"
mutant rank-name-reversed userspace/src/policy_sets.cpp \
    's/specificity\(p\.match\)\), p\.name\};/specificity(p.match)), std::string(1, static_cast<char>(255 - static_cast<unsigned char>(p.name[0])))};/' \
    "rank: at equal priority and prefix, the later name (by its first letter) wins" \
    "bpf:*RankOrder*:*ClassificationPrecedence*:*BetterRankWins*"
mutant probe-last-match bpf/lib/classify.h \
    's/if \(r && r->rank < ctx->best_rank\)/if (r)/' \
    "classifier keeps the last matching shape, not the best rank" \
    "bpf:*RankOrder*:*ClassificationPrecedence*:*BetterRankWins*"
mutant table-home-only bpf/lib/classify.h \
    's/i < TCM_RULE_PROBES; i\+\+\)/i < 1; i++)/' \
    "classifier table: the data path probes a rule's home slot only, not the slots after it" \
    "bpf:*ShareASlot*"
mutant table-no-shift userspace/src/rule_table.cpp \
    's/if \(dist_hole > dist_now\)\n            continue;/return 0;/' \
    "classifier table: a removal leaves a hole, the rules after it not shifted back" \
    "bpf:RuleTableTest.*:*ShareASlot*"
mutant table-not-carried userspace/src/datapath_load.cpp \
    's/carry_over_rule_hash\(impl_->pin_path \+ "\/tcm_rules", \*impl_->rules\);/(void)0;/' \
    "classifier table: a pinned tcm_rules of before is not carried over on adoption" \
    "bpf:DatapathPinning.AClassifier*"
mutant cache-set-not-version bpf/lib/classify.h \
    's/\(c->version \^ version\)/((c->version ^ version) \& 1)/' \
    "classification cache: an entry serves while its set is active, of whatever version" \
    "bpf:ClassCacheTest.*"
mutant cache-no-door bpf/lib/classify.h \
    's/if \(c && classify_door\(h\)\)/if (c)/' \
    "classification cache: every key that misses is cached, not only one seen twice" \
    "bpf:ClassCacheTest.*"
mutant cache-key-part-compared bpf/lib/classify.h \
    's/k < TCM_CLASS_KEY_WORDS; k\+\+\)/k < TCM_CLASS_KEY_WORDS - 4; k++)/' \
    "classification cache: a slot answers a key whose last words (the destination) differ" \
    "bpf:ClassCacheTest.*"
mutant cache-empty-served bpf/lib/classify.h \
    's/ \| \(~c->answer \& TCM_CLASS_CACHED\)//' \
    "classification cache: a slot never filled (or emptied) answers as a filled one" \
    "bpf:ClassCacheTest.*"
mutant flow6-no-tuple bpf/lib/flow.h \
    's/if \(ret >= 0 && sk->found < 0 && TCM_FLOW_KIND\(sk->id\.head\) == TCM_FLOW_5TUPLE6\)/if (0)/' \
    "flow key: an IPv6 5-tuple flow keeps no tuple, so it lists as its hash" \
    "bpf:DatapathTest.Ipv6FiveTuplesAreFlowsApartAndListedWhole"
mutant flow6-no-port bpf/include/tricolor_abi.h \
    's/\(__u32\)\(t\)->sport \| \(__u32\)\(t\)->dport << 16/(__u32)(t)->sport/' \
    "flow key: the IPv6 5-tuple's hash leaves the destination port out" \
    "bpf:DatapathTest.Ipv6FiveTuplesAreFlowsApartAndListedWhole"
mutant flow-tuple-kept userspace/src/datapath_flows.cpp \
    's/im\.drop_flow_tuple\(f\.id\);//' \
    "flow key: a reclaimed IPv6 5-tuple flow leaves its tuple behind" \
    "bpf:DatapathTest.Ipv6FiveTuplesAreFlowsApartAndListedWhole"
mutant flow-move-skipped userspace/src/datapath_impl.hpp \
    's/ro->tcm_flows_moving = moving;/ro->tcm_flows_moving = 0;/' \
    "flow table: flows of the tables of before start afresh instead of moving" \
    "bpf:DatapathPinning.Flows*MoveAtTheirNextPacket"
mutant flow-move-left-locked bpf/lib/flow.h \
    's/__sync_lock_test_and_set\(&s->flow\.lock, 0\);/__sync_lock_test_and_set(\&s->flow.lock, 1);/' \
    "flow table: a flow moved out of a table of before stays locked" \
    "bpf:DatapathPinning.Flows*MoveAtTheirNextPacket"
mutant resize-moved-taken-again bpf/lib/flow.h \
    's/if \(s->flow\.lock != TCM_FLOW_MOVED\)\s*sk->prev = \(int\)sk->prev_idx;/sk->prev = (int)sk->prev_idx;/' \
    "flow table resize: a slot of before whose flow moved is taken for the flow again" \
    "bpf:DatapathPinning.AFlowMovedThenReclaimedIsANewFlowAtItsNextPacket"
mutant resize-move-unmarked userspace/src/datapath_resize.cpp \
    's/release_before\(ret == 1 \? TCM_FLOW_MOVED : 0\);/release_before(0);/' \
    "flow table resize: a flow user space moved is not marked moved in the table of before" \
    "bpf:DatapathPinning.AnotherCapacityResizesTheTableAndEveryFlowMovesWhole"
mutant resize-move-fresh userspace/src/datapath_resize.cpp \
    's/            s->flow = state;\n/            s->flow = tcm_flow{};\n/' \
    "flow table resize: a flow user space moves starts with full buckets (a fresh burst)" \
    "bpf:DatapathPinning.AnotherCapacityResizesTheTableAndEveryFlowMovesWhole"
mutant cgroup-rules-not-carried userspace/src/datapath_load.cpp \
    's/        copy_cgroup_rules\(impl_->cgroup_rules_of_before, impl_->fd\(maps->tcm_cgroup_rules\)\);/        (void)0;/' \
    "upgrade: a preallocated cgroup rule map of before is replaced without its rules" \
    "bpf:DatapathPinning.APreallocatedCgroupRuleMapOfBeforeIsCarriedOver"
mutant tables-parent-not-moved userspace/src/datapath_load.cpp \
    's/cfg\.parent = static_cast<__u16>\(cfg\.parent - set \* tb\.policy_slots \+ set \* slots\);/(void)0;/' \
    "policy tables growth: a child's parent is looked for at its place in the smaller table" \
    "bpf:DatapathPinning.ThePolicyTablesGrowAndTheSetClassifiesOnWithItsCounters"
mutant tables-not-reattached userspace/daemon/flow_passes.cpp \
    's/    std::vector<std::string> problems;\n    reattach_everything\(problems\);\n    \/\/ The programs of before/    std::vector<std::string> problems;\n    \/\/ The programs of before/' \
    "policy tables growth: the hooks keep the programs of before (and the tables they read)" \
    "e2e:PolicyTables.GrowBeforeTheChangeThatNeedsThemAndEveryPacketIsMetered"
mutant tables-cut-short-kept userspace/src/datapath_load.cpp \
    's/            take_back_pins_of_before\(impl_->pin_path, kPolicyTablePins\);/            (void)0;/' \
    "policy tables growth: a daemon killed while carrying the tables over leaves the next start empty tables" \
    "bpf:DatapathPinning.APolicyTableGrowthCutShortIsUndoneAtTheNextStart"
COUNTERS_BPF='bpf:DatapathPinning.TheCountersOfBeforeAGrowthAreReadUntilCarriedAndCarriedOnce:DatapathPinning.CounterArraysOfTheWholeIdRangeAreSetAsideAndCarried'
mutant counters-before-unread userspace/src/datapath_impl.hpp \
    's/    if \(c.prev_fd >= 0\)\n        detail::for_each_entry/    if (false)\n        detail::for_each_entry/' \
    "counter arrays: a read leaves out the array of before a growth until it is folded" \
    "$COUNTERS_BPF"
mutant counters-fold-unmarked userspace/src/datapath_counters.cpp \
    's/uint32_t mark = kFoldMark \| c.prev_id;/uint32_t mark = kFoldMark;/' \
    "counter arrays: a fold does not mark which array it carried (a kill before its pin goes: carried twice)" \
    "$COUNTERS_BPF"
mutant counters-reused-id-carried userspace/src/datapath_commit.cpp \
    's/        impl_.forget_counters\(ids\);\n//' \
    "counter arrays: a reused id starts with the carried counts of the policy before" \
    "$COUNTERS_BPF"
mutant counters-cut-short-kept userspace/src/datapath_load.cpp \
    's/                take_back_pins_of_before\(impl_->pin_path, kCounterPins\);/                (void)0;/' \
    "counter arrays: a daemon killed during a growth leaves the counts in arrays the next start cannot set aside" \
    "bpf:DatapathPinning.APolicyTableGrowthCutShortIsUndoneAtTheNextStart"
mutant counters-never-folded userspace/daemon/attachments.cpp \
    's/        const size_t n = dp_->fold_counters_of_before\(\);/        const size_t n = 0;/' \
    "counter arrays: the daemon never carries the arrays of before a growth over" \
    "e2e:PolicyTables.*"
SPILL_BPF='bpf:DatapathPinning.FlowsBeyondAFullTableGoIntoTheGrowthsTableAndMoveWhole'
mutant spill-never-opened userspace/daemon/flow_passes.cpp \
    's/        dp_->open_spill\(std::min\(next - capacity, kSpillFlows\)\);/        (void)next, (void)kSpillFlows;/' \
    "flow table growth: no table of the growth's own (new flows beyond a full table meet their policy's bucket)" \
    "e2e:FlowTable.GrowsUnderTrafficAndEveryPacketIsMeteredByItsOwnFlow:FlowTable.FlowsBeyondTheTableAreMeteredInThePolicysBucket"
mutant spill-not-looked-first bpf/lib/flow.h \
    's/const int spilled = sk->found < 0 \? flow_spill_get\(0\) : TCM_SLOT_FULL;/const int spilled = sk->found < 0 ? TCM_SLOT_NEW : TCM_SLOT_FULL;/' \
    "flow table growth: a flow made in the growth's table is made anew in the table once it has room" \
    "$SPILL_BPF"
mutant spill-hash-not-moved userspace/src/datapath_resize.cpp \
    's/        im.move_hash_of_before\(r\);/        (void)r;/' \
    "flow table growth: the daemon leaves the growth's table's flows to their next packet (its pin, and the next growth's, wait)" \
    "$SPILL_BPF"
mutant leftovers-not-handed userspace/src/datapath_resize.cpp \
    's/if \(bpf_map_update_elem\(im\.fd\(im\.skel->maps\.tcm_flow_spill\), &zero, &fd, 0\) != 0\)\s*fail\("cannot hand the table of the flows left to the programs"\);//' \
    "flow table: the flows of before that found no room are put in a table the programs never see" \
    "bpf:DatapathPinning.FlowsOfBeforeWithNoRoomGoIntoTheGrowthsTableWhole"
mutant grow-never userspace/daemon/flow_passes.cpp \
    's/flow_table_grows\(capacity, live\)/false/' \
    "flow table growth: the table never grows" \
    "e2e:FlowTable.GrowsUnderTrafficAndEveryPacketIsMeteredByItsOwnFlow"
mutant shrink-never userspace/daemon/flow_passes.cpp \
    's/next = flow_capacity_shrunk\(capacity, live, least\);/(void)least;/' \
    "flow table: flows gone never give the table's memory back" \
    "e2e:FlowTable.FlowsGoneShrinkTheTableAndTheRestMoveWhole"
mutant tables-shrink-never userspace/daemon/flow_passes.cpp \
    's/const TableSizes want = dp_->tables_for_shrink\(\);/const TableSizes want = dp_->table_sizes();/' \
    "policy tables: policies gone never give the tables' memory back" \
    "e2e:PolicyTables.PoliciesGoneShrinkTheTablesAndEveryPacketIsMeteredOnce"
mutant tables-shrink-other-set userspace/src/datapath_load.cpp \
    's/if \(smaller && set != active\)/if (smaller \&\& set == active)/' \
    "policy tables: a shrink carries the inactive set's configs and rules, not the active one's" \
    "bpf:DatapathPinning.PoliciesGoneShrinkTheTablesAndTheSetClassifiesOnWithItsCounters"
mutant tables-shrink-unchecked userspace/src/datapath_load.cpp \
    's/if \(!active\.empty\(\) && active\.rbegin\(\)->first >= sizes\.policy_slots\)/if (false)/' \
    "policy tables: a shrink below the highest id held is not refused" \
    "bpf:DatapathPinning.PoliciesGoneShrinkTheTablesAndTheSetClassifiesOnWithItsCounters"
mutant sizing-loose userspace/include/tricolor/flow_sizing.hpp \
    's/\(want \* 8 \+ 6\) \/ 7/(want * 4 + 2) \/ 3/' \
    "flow table: a growth sizes the table for its flows at 3/5 of its slots (memory beyond 1.5 slots a flow)" \
    "unit:FlowSizing.*"
mutant slot-probe-no-wrap bpf/include/tricolor_abi.h \
    's/#define TCM_SLOT_NEXT\(i, n\) \(\(i\) \+ 1 < \(n\) \? \(i\) \+ 1 : 0\)/#define TCM_SLOT_NEXT(i, n) ((i) + 1)/' \
    "flow table: the last slots' probes run off the end of the table instead of going on at the first" \
    "bpf:FlowSlotsOddTest.*"
mutant slot-home-unscaled bpf/include/tricolor_abi.h \
    's/\(__u32\)\(\(\(h_ & \(\(1ull << \(shift\)\) - 1\)\) \* \(__u64\)\(n\)\) >> \(shift\)\)/(__u32)(h_ \& ((1ull << (shift)) - 1))/' \
    "flow table: a home is the hash's low bits, beyond the last slot of a table of any size" \
    "bpf:FlowSlotsOddTest.*"
mutant grow-not-reattached userspace/daemon/flow_passes.cpp \
    's/if \(auto r = do_attach\(a\); !r\)/if (auto r = Result<AttachResult>(); false)/' \
    "flow table growth: the hooks keep the programs of before (and their table)" \
    "e2e:FlowTable.GrowsUnderTrafficAndEveryPacketIsMeteredByItsOwnFlow"
mutant cache-wrap-kept userspace/src/datapath_commit.cpp \
    's/if \(version == 0\)\s*dp_\.clear_class_cache\(\);//' \
    "classification cache: not emptied when the version wraps after 2^32 switches" \
    "bpf:ClassCacheTest.*"
mutant sets-other-not-dirty userspace/src/policy_sets.cpp \
    's/other\.dirty_ids\.insert\(impl_->touched_ids\.begin\(\), impl_->touched_ids\.end\(\)\);//' \
    "policy sets: the set active during a change is not told what it missed" \
    "bpf:PolicySetsTest.*"
mutant sets-masks-unordered userspace/src/policy_sets.cpp \
    's/std::ranges::sort\(out, \[\]\(const auto &a, const auto &b\) \{ return a\.first < b\.first; \}\);//' \
    "policy sets: masks probed in the order of their keys, not of the best rank under each" \
    "bpf:PolicySetsTest.*:bpf:DatapathTest.Classification*"
mutant sets-orphans-unchecked userspace/src/policy_sets.cpp \
    's/for \(const Policy \*child : children_of\(name\)\)\s*add_tree\(child\);//' \
    "policy sets: deleting a parent does not check the children it leaves" \
    "bpf:PolicySetsTest.*"
mutant slot-free-ends-probes bpf/lib/flow.h \
    's/if \(head == TCM_SLOT_EMPTY\)/if (head == TCM_SLOT_EMPTY || head == TCM_SLOT_FREE)/g' \
    "flow table: a freed slot ends the probe sequences through it, hiding the flows beyond" \
    "bpf:FlowSlotsTest.*"
mutant slot-free-not-reused bpf/lib/flow.h \
    's/\(head == TCM_SLOT_EMPTY \|\| head == TCM_SLOT_FREE\) &&/head == TCM_SLOT_EMPTY \&\&/' \
    "flow table: a new flow never takes a freed slot, only an empty one" \
    "bpf:FlowSlotsTest.*"
mutant slot-no-guard bpf/lib/flow.h \
    's/if \(__sync_val_compare_and_swap\(&hs->guard, 0, 1\) != 0\) \{/if (0) {/' \
    "flow table: two CPUs creating one flow do not wait for each other at its home's guard" \
    "bpf:DatapathTest.TwoCpusCreatingTheSameFlowsMakeEachOnce"
mutant slot-capacity-ignored bpf/lib/flow.h \
    's/__sync_fetch_and_add\(&meta->live, 1\) >= tcm_slot_capacity/__sync_fetch_and_add(\&meta->live, 1) >= tcm_slot_capacity * 2/' \
    "flow table: new flows beyond the capacity (--flows) get slots while there are any" \
    "bpf:SmallTableTest.*"
mutant slot-live-kept userspace/src/datapath_flows.cpp \
    's/__atomic_fetch_sub\(&meta->live, 1, __ATOMIC_SEQ_CST\);//' \
    "flow table: a deleted flow still counts against the capacity" \
    "bpf:SmallTableTest.*"
mutant per-key-mask bpf/lib/flow.h \
    's/flow_mask_prefix\(id->w, v6 \? pol->prefix6 : 96 \+ pol->prefix4\);//' \
    "per-source keys ignore the per-key prefix length" \
    "bpf:*PerKeyModes*"
mutant gso-headers bpf/lib/chain.h \
    's/\(in->segs - 1\) \* in->hdr_len/0 * in->hdr_len/' \
    "GSO: segments charged without their own headers" \
    "bpf:*Gso*"
mutant gso-count bpf/lib/chain.h \
    's/c->packets\[color\] \+= segs;/c->packets[color] += 1;/' \
    "GSO: a super-packet counted as one packet" \
    "bpf:*Gso*"
mutant colour-counters bpf/lib/chain.h \
    's/c->bytes\[color\] \+= len;/c->bytes[TCM_GREEN] += len;/' \
    "per-colour byte counters all land in green" \
    "bpf:*CountersAndDefaultActionsPerColour*:*Inconsistent*"
mutant ihl-ignored bpf/lib/parse.h \
    's/ihl = ip->ihl \* 4;/ihl = 20;/' \
    "IPv4 header length taken as 20 (options, bad IHL unseen)" \
    "bpf:*Template*:*Truncation*:*Inconsistent*"
mutant apply-unchecked userspace/src/datapath_commit.cpp \
    's/if \(auto ok = check\(policies\); !ok\)\s*return ok;//' \
    "Datapath::apply writes a set without checking it first" \
    "bpf:*RefusedApplyChangesNothing*"
mutant daemon-partial-apply userspace/daemon/policy_changes.cpp \
    's/if \(!errors\.empty\(\)\)\s*return std::unexpected\(join_lines\(errors\)\);\s*\/\/ Two policies/if (!errors.empty() \&\& out.policies.empty())\n        return std::unexpected(join_lines(errors));\n    \/\/ Two policies/' \
    "daemon applies the good policies of a set with bad ones (not all or nothing)" \
    "e2e:*ApplyReplacesTheWholeSetOrNothing*:*SighupReloadsTheConfigAllOrNothing*:*EveryBadInputIsRefused*"
mutant fresh-id-kept userspace/src/datapath_commit.cpp \
    's/if \(was == impl_\.active\.end\(\)\)(\s*)fresh\.insert/if (false)$1fresh.insert/' \
    "a policy removed and added again keeps its old tokens and counters" \
    "bpf:*PolicyUpdateKeepsTokensCappedAndCounters*"
mutant attach-always-clsact userspace/src/attach.cpp \
    's/int link = bpf_link_create\(prog_fd, ifindex, tcx_type\(dir\), nullptr\);/int link = -EOPNOTSUPP;/' \
    "tc attach falls back to clsact on a kernel that has tcx" \
    "e2e:*TcEgressAndIpv6OnXdpIngress*:*TcxLinkKeepsPolicingThroughKill9AndIsAdopted*"
mutant e2e-srtcm-slow-4pct bpf/lib/meter.h \
    's/dt \* cfg->c_rate\)\);/dt * cfg->c_rate \/ 100 * 96));/' \
    "srtcm refills at 96% of CIR, seen end to end (a tuned tolerance would hide it)" \
    "e2e:*Accuracy*srtcm_ipv4_xdp*:*Accuracy*srtcm_ipv6_tc_egress*"
mutant e2e-no-green bpf/lib/chain.h \
    's/color = meter_color_index\(color\);/color = meter_color_index(color ? color : TCM_YELLOW);/' \
    "the data path never colours green (green turned yellow)" \
    "e2e:*Accuracy*srtcm_ipv4_xdp*"

# This round's features: the TCP signal (docs/spec.md §8), hierarchies (§9), fleet (§10), the
# state file and the pin ABI migration, metrics.
HIER_BPF='bpf:HierDatapathTest.*'
mutant aqm-ce-not-ect bpf/lib/act.h \
    's/if \(!ip \|\| \(ip->tos & 3\) == 0\)/if (!ip)/' \
    "--aqm ecn: CE set on IPv4 packets that are not ECN-capable" \
    "bpf:AqmTest.*"
mutant aqm-ce-checksum bpf/lib/act.h \
    's/sum \+= \(__u16\)~old;/sum += old;/' \
    "--aqm ecn: the IPv4 checksum update after a TOS rewrite (CE, DSCP) adds the old word, not its complement" \
    "bpf:AqmTest.*"
mutant aqm-no-rearm bpf/lib/aqm.h \
    's/flags &= ~TCM_FLOW_AQM_SIGNALLED;/;/g' \
    "--aqm: the signal never re-arms after the bucket refills" \
    "bpf:AqmTest.*"
mutant aqm-every-packet bpf/lib/aqm.h \
    's/flags \|= TCM_FLOW_AQM_SIGNALLED;/;/' \
    "--aqm: every packet past the level is signalled, not one a drain" \
    "bpf:AqmTest.*"
mutant aqm-drop-refunds bpf/lib/chain.h \
    's/(__u32 signal = pol->aqm && aqm_step\(pol, f0, color\) \? TCM_METER_SIGNAL : 0;)/$1\n    if (signal \&\& pol->aqm == TCM_AQM_DROP)\n        f0->meter.c_tokens += (__u64)in->l3_total * TCM_TOKENS_PER_BYTE;/' \
    "--aqm drop: an early-dropped packet gives its tokens back (colours no longer those of --aqm off)" \
    "bpf:AqmTest.*"
mutant aqm-no-slow-start bpf/lib/aqm.h \
    's/cur >= 2 && prev >= 1 &&/cur >= 9 \&\& prev >= 1 \&\&/' \
    "--aqm: a doubling drain (slow start) gets no early signal, only the late one" \
    "bpf:AqmTest.*"
mutant aqm-slow-start-any-growth bpf/lib/aqm.h \
    's/prev >= 2 \* pp\)/prev >= 0 * pp)/' \
    "--aqm: one deeper drain after steady ones passes for slow start (congestion avoidance cut early)" \
    "bpf:AqmTest.*"
mutant aqm-idle-remembered bpf/lib/aqm.h \
    's/#define TCM_AQM_IDLE_NS 1000000000ull/#define TCM_AQM_IDLE_NS ~0ull/' \
    "--aqm: a bucket back from idle keeps the old sender's drains (a new slow start goes unseen)" \
    "bpf:AqmTest.*"
mutant aqm-idle-time-backwards bpf/lib/aqm.h \
    's/now > f->meter.last_ns && now - f->meter.last_ns/now - f->meter.last_ns/' \
    "--aqm: a packet stamped before the bucket's last time (read before the lock, or after a --shape edt departure) passes for an idle second" \
    "bpf:AqmTest.*"
mutant shape-no-share bpf/lib/shape.h \
    's/share \/= n;/share \/= 1;/' \
    "--shape sockets: each socket gets the whole rate instead of its share" \
    "e2e:Shape.PacesOnlyMatchingSocketsAndResharesAmongActiveOnes"
mutant shape-no-reshare bpf/lib/shape.h \
    's/__sync_fetch_and_add\(&st->sockets, -1\);\s*//' \
    "--shape sockets: a closed socket keeps its share (the others never get the rate back)" \
    "e2e:Shape.PacesOnlyMatchingSocketsAndResharesAmongActiveOnes"
mutant shape-pace-blind bpf/lib/shape.h \
    's/rate = sp->rate_hi;/rate = sp->rate_lo;/' \
    "--shape sockets: the pace never goes over the share when the bucket is full (tokens wasted)" \
    "e2e:Shape.PaceFollowsTheBucketsLevel"
mutant shape-pace-stale-bucket bpf/lib/shape.h \
    's/(__u64 tokens = f \? )\*\(volatile __u64 \*\)&f->meter.c_tokens/${1}sp->c_half/' \
    "--shape sockets: the pace reads a fixed level instead of the bucket's (never slows when it empties)" \
    "e2e:Shape.PaceFollowsTheBucketsLevel"
mutant shape-no-cwnd-clamp bpf/lib/shape.h \
    's/\? cw->want(\s*): 0;/? 0$1: 0;/' \
    "--shape sockets: no window clamp at a short round trip (a TSO chunk can outgrow the bucket)" \
    "e2e:Shape.ShortRoundTripClampsTheWindowToHalfTheBucket"
mutant shape-full-rate-start bpf/lib/shape.h \
    's/rate >>= 2;/rate >>= 0;/' \
    "--shape sockets: the first ten segments' follower is spaced at the full rate (red after them)" \
    "e2e:Shape.PacesOnlyMatchingSocketsAndResharesAmongActiveOnes"
mutant shape-no-ssthresh-reset bpf/lib/shape.h \
    's/if \(tp && tp->delivered_ce == 0\)/if (0 \&\& tp)/' \
    "--shape sockets: a window cut by local refusals alone stays cut (slow start ends early)" \
    "e2e:ShapeLongRtt.LocalRefusalsDoNotEndSlowStart"
mutant shape-start-refused bpf/lib/shape.h \
    's/return bpf_redirect\(0, 0\);/return TC_ACT_SHOT;/' \
    "--shape sockets: a clamped socket's red burst with nothing in flight is refused (stall to the probe timer)" \
    "e2e:Shape.StartsThatMeetRedAreLostNotRefused"
mutant shape-cgroup-unseen bpf/lib/shape.h \
    's/return kn \? kn->id : 0;/return kn ? 0 : 0;/' \
    "--shape sockets: a socket's cgroup is not seen (a cgroup policy's sockets are not paced, only policed)" \
    "e2e:Cgroups.TcpFromACgroupIsPacedToItsRateWithShapeSockets"
mutant aqm-counters-inherited userspace/src/datapath_commit.cpp \
    's/int tcp_fd = fd\(skel_->maps.tcm_tcp_stats\);/int tcp_fd = -1;/' \
    "a new policy on a reused id starts with the old one's --aqm and edt counters" \
    "e2e:Shape.AqmCountersInStatsTableAndMetrics"
EDT_BPF='bpf:EdtTest.*'
mutant edt-no-horizon bpf/lib/edt.h \
    's/if \(dep - now > TCM_EDT_HORIZON_NS\)/if (0)/' \
    "--shape edt: a departure beyond the 100 ms horizon is given, not dropped" \
    "$EDT_BPF"
mutant edt-clobbers-stamp bpf/lib/edt.h \
    's/if \(dep > now && dep > own\) \{/if (dep > now) {/' \
    "--shape edt: a sender's later departure time is overwritten with an earlier one" \
    "$EDT_BPF"
mutant edt-wait-floor bpf/lib/meter.h \
    's/(if \(q \* rate < need\)\s*q\+\+;\s*)if \(q \* rate < need\)\s*q\+\+;/$1/' \
    "--shape edt: the wait is short by a nanosecond at times (one correction of two)" \
    "unit:MeterEdt.* $EDT_BPF"
mutant edt-every-policy bpf/lib/pipeline.h \
    's/fr\.skb && pol->shape == TCM_SHAPE_EDT && !pol->parent/fr.skb \&\& !pol->parent/' \
    "--shape edt: every policy on tc gets departure times, not only those with shape edt" \
    "$EDT_BPF"
mutant edt-on-ingress bpf/lib/edt.h \
    's/if \(skb->ingress_ifindex != skb->ifindex\) \{/if (1) {/' \
    "--shape edt: departure times on tc ingress too, where no qdisc releases them" \
    "$EDT_BPF"
mutant edt-in-hierarchy userspace/src/hierarchy.cpp \
    's/else if \(p\.shape == TCM_SHAPE_EDT \|\|/else if (false \&\&/' \
    "--shape edt: a policy with shape edt accepted in a hierarchy (metered at two instants)" \
    "unit:Hierarchy.*"
mutant chain-red-charges bpf/lib/chain.h \
    's/if \(color != TCM_RED\) \{/if (1) {/' \
    "hierarchy: a packet that ends red still takes the lower levels' tokens" \
    "$HIER_BPF"
mutant chain-parent-blind bpf/lib/chain.h \
    's/\(i > 0 \? TCM_LEVEL_AWARE : 0\)/0/' \
    "hierarchy: parents colour-blind to the colour from below" \
    "$HIER_BPF"
mutant chain-no-start-when-red bpf/lib/chain.h \
    's/(static __always_inline void chain_start\(.*?\{).*?\n\}/$1\n}/s' \
    "hierarchy: a flow whose first packets end red never starts (start: empty stays red)" \
    "$HIER_BPF unit:StartEmpty.*:HierReplay.*"
mutant coupling-off bpf/lib/meter.h \
    's/if \(cfg->flags & TCM_METER_F_COUPLED\) \{/if (0) {/' \
    "rfc4115 --coupling: what overflows C is lost instead of filling E" \
    "unit:Coupling.*:HierReplay.* $HIER_BPF"
mutant start-empty-ignored bpf/lib/meter.h \
    's/int empty = \(cfg->flags & TCM_METER_F_START_EMPTY\) != 0;/int empty = 0;/' \
    "--start empty: buckets start full anyway" \
    "unit:StartEmpty.*:HierReplay.* $HIER_BPF"
mutant hier-depth userspace/src/hierarchy.cpp \
    's/if \(path\.size\(\) > TCM_MAX_LEVELS\)/if (path.size() > TCM_MAX_LEVELS + 1)/' \
    "hierarchy: a chain of 5 levels is accepted" \
    "unit:Hierarchy.*"
mutant hier-cycle-unchecked userspace/src/hierarchy.cpp \
    's/if \(cycle\.size\(\) > 1 &&/if (cycle.size() > TCM_MAX_LEVELS * 4 \&\&/' \
    "hierarchy: a cycle of parents is accepted (cycles shorter than 17 go unreported)" \
    "unit:Hierarchy.*"
mutant chain-lock-leak bpf/lib/chain.h \
    's/(if \(n > 1 && \(!lf\[1\] \|\| !flow_lock\(lf\[1\]\)\)\) \{)\s*chain_unlock\(lf\[0\]\);/$1/' \
    "hierarchy: a lock timeout at level 1 leaves level 0 locked (its flow red until reclaimed)" \
    "bpf:HierDatapathTest.ALockTimeoutAtTheParentReleasesTheChildsLock"
mutant fleet-lease-ignored bpf/lib/fleet.h \
    's/if \(until && now > until\)/if (until \&\& now > until + (1ull << 62))/' \
    "fleet: an expired lease does not void the bucket" \
    "bpf:FleetDatapathTest.*"
mutant fleet-no-cap bpf/lib/meter.h \
    's/__u64 over = meter_bucket_add\(&st->c_tokens, c_cap, add\);/st->c_tokens += add; __u64 over = 0;/' \
    "fleet: a lease fills C past its cap" \
    "bpf:FleetDatapathTest.*"
mutant fleet-prev-rate-lost bpf/lib/fleet.h \
    's/fleet_earned\(prate, pfill, fleet_max\(t, pfrom\), fleet_min\(end, from\)/fleet_earned(prate, pfill, fleet_max(t, pfrom), fleet_max(t, pfrom)/' \
    "fleet: a rate change forgets what the old rate earned since the last packet" \
    "bpf:FleetDatapathTest.*"
mutant fleet-lua-over-cir userspace/src/fleet.lua \
    's/local rate = math\.min\(fair, cir - others_rate\)/local rate = fair/' \
    "fleet script: a lease is raised beyond what the others are counted at" \
    "unit:FleetScriptTest.*"
mutant fleet-lua-lowered-at-once userspace/src/fleet.lua \
    's/rates = others_rate \+ math\.max\(rate, run_rate\)/rates = others_rate + rate/' \
    "fleet script: a lowered lease stops counting before its host runs it" \
    "unit:FleetScriptTest.*"
mutant fleet-lua-name-shared userspace/src/fleet.lua \
    's/if seen and seen > now - ttl then/if false then/' \
    "fleet script: a second live instance under a name in use takes the name's lease over" \
    "unit:FleetScriptTest.*"
mutant fleet-held-not-an-answer userspace/src/fleet.cpp \
    's/s\.last_ok_send_ns = sent; \/\/ Redis answers: no fallback for want of it\n//' \
    "fleet: a refusal of the name is not counted as Redis answering (the refused daemon falls back)" \
    "e2e:Fleet.ThreeDaemonsUnderOneName*"
mutant fleet-held-runs-fallback userspace/src/fleet.cpp \
    's/return s\.held_by\.empty\(\) \? o_\.fallback : Fallback::closed;/return o_.fallback;/; s/s\.rate = s\.cap = s\.epoch = s\.until_dp = 0;\n(\s*)dp_\.fleet_set_lease\(s\.policy\.id, s\.lease\(0\)\);/enter_fallback(s, name, "held");/' \
    "fleet: a daemon refused its name runs its fallback's lease" \
    "e2e:Fleet.ThreeDaemonsUnderOneName*"
mutant fleet-restart-not-told userspace/daemon/start_and_reload.cpp \
    's/(return std::unexpected\(fmt::format\("\{\}: \{\}", from, r\.error\(\)\)\);\n(?:.*\n){2})\s*if \(fleet_\)\n\s*fleet_->set_policies\(dp_->policies\(\)\);/$1/' \
    "fleet: a daemon restarted with fleet policies in its state never leases them" \
    "e2e:Fleet.ARestartedHost*"
# The CNI plugin and the container engines' followers (docs/containers.md).
mutant cni-runtime-burst-taken tools/cni/cni.cpp \
    's/if \(\*b >= kUnsetBurstBits\)/if (false)/' \
    "cni: containerd's 'no burst said' (2^32-1 bits) taken as a 512 MiB burst" \
    "e2e:Cni.BadInputIsACniErrorAndMakesNothing"
mutant cni-second-add-unchecked tools/cni/cni.cpp \
    's/if \(has_policy\(c\.socket, p\["name"\]\)\)/if (false)/' \
    "cni: a second ADD for a container is not told apart from a daemon's refusal" \
    "e2e:Cni.BadInputIsACniErrorAndMakesNothing"
mutant managed-dropped-by-reload userspace/daemon/start_and_reload.cpp \
    's/if \(spec\.is_object\(\) && spec\.contains\("managed_by"\) &&/if (false \&\&/' \
    "reload: what the CNI plugin made for pods is dropped by a reload of the config (and a start from a newer one)" \
    "e2e:Cni.TheChainLimitsThePodBothWaysAndDelLeavesNothing"
mutant watcher-gone-ignored userspace/daemon/containers.cpp \
    's/action == "cleanup"\)\n(\s*)container_gone\(id\);/action == "cleanup")\n$1(void)id;/' \
    "--containers: a container that dies or is removed keeps its policies" \
    "e2e:Containers.LabelledContainerIsLimitedBothWaysAndGoesWithinASecond"
mutant watcher-host-net-by-address userspace/daemon/containers.cpp \
    's/            return path\.find\(id\) != std::string::npos \? path : "";/            return "";/' \
    "--containers: a container's own cgroup is never found (host-network containers skipped, several networks on the first)" \
    "e2e:Containers.OnTheHostsNetworkItIsLimitedByItsCgroup"
mutant watcher-first-network-only userspace/daemon/containers.cpp \
    's/if \(host_ifs\.size\(\) > 1 && cgroup\.empty\(\)\) \{/if (host_ifs.size() > 1) {/' \
    "--containers: a container on several networks is limited on its first alone" \
    "e2e:Containers.OnTwoNetworksOneBucketADirectionCoversBoth"
mutant fleet-moved-not-followed userspace/src/fleet_redis.cpp \
    's/const bool moved = why\.starts_with\("MOVED "\)/const bool moved = false/' \
    "fleet on Redis Cluster: MOVED is an error, not followed (a failover fails every exchange)" \
    "unit:FleetClusterTest.*"
mutant fleet-no-wait userspace/src/fleet_redis.cpp \
    's/if \(replicas > 0 \|\| hop > 0\) \{/if (false) {/' \
    "fleet on Redis Cluster: a lease is taken before any replica holds it (no WAIT)" \
    "unit:FleetClusterTest.*"
mutant fleet-redirect-loop userspace/src/fleet_redis.cpp \
    's/for \(int hop = 0; hop <= kHops; \+\+hop\)/for (int hop = 0; hop <= kHops; hop += (hop < 0))/' \
    "fleet on Redis Cluster: redirections followed without end" \
    "unit:FleetClient.ClusterRedirectLoops*"
mutant fleet-old-layout-kept userspace/src/datapath_load.cpp \
    's/drop_pin_of_another_layout\(path, sizeof\(tcm_fleet_lease\)\);/(void)path;/' \
    "pinned state: a tcm_fleet of another layout is not replaced (adoption fails)" \
    "bpf:DatapathPinning.AFleetMapOfAnotherLayout*"
mutant state-not-atomic userspace/daemon/state_file.cpp \
    's/if \(rename\(tmp\.c_str\(\), options_\.state\.c_str\(\)\) < 0\)/if (false)/' \
    "state file: the temp file is never renamed over the state (changes lost at restart)" \
    "e2e:Fault.RestartThreeTimesUnderTraffic"
mutant abi1-not-migrated userspace/daemon/pin_dir.cpp \
    's/std::string to = name\.rfind\("tc_", 0\) == 0 \? "tcm_" \+ name\.substr\(3\) : name;/std::string to = "old_" + name;/' \
    "pin ABI 1 -> 2: the old maps are moved but not under their new names" \
    "e2e:Fault.UpgradeFromAbi1KeepsCountersAndPolicies"
# Least privilege (docs/daemon.md): the daemon as a user of its own with CAP_BPF, CAP_NET_ADMIN
# and CAP_PERFMON alone.
mutant prog-id-not-known userspace/src/attach.cpp \
    's/s\.ours = std::ranges::find\(ours, id\) != ours\.end\(\);/s.ours = false;/' \
    "least privilege: a hook's program known as ours by its name alone (which only CAP_SYS_ADMIN reads)" \
    "e2e:LeastPrivilege.*"
mutant writers-assumed userspace/src/datapath_flows.cpp \
    's/return impl_->previous_progs\.size\(\);/return impl_->previous_progs.size() + 1;/' \
    "least privilege: writers of the flow table assumed where programs cannot be listed (flows --top always walks)" \
    "e2e:LeastPrivilege.*"
mutant previous-never-released userspace/src/datapath_load.cpp \
    's/n \+= unlink\(p\.second\.c_str\(\)\) == 0;/(void)p;/' \
    "least privilege: an earlier daemon's pinned programs are never let go" \
    "e2e:LeastPrivilege.*"
mutant socket-owner-root userspace/daemon/control_socket.cpp \
    's/chown\(path\.c_str\(\), static_cast<uid_t>\(-1\), gid\)/chown(path.c_str(), 0, gid)/' \
    "least privilege: the socket given to root with its group (a daemon not run as root cannot)" \
    "e2e:LeastPrivilege.*"
# The live page (docs/page.md).
mutant page-bytes-not-bits userspace/daemon/rate_history.cpp \
    's/8\.0 \* static_cast<double>\(diff\)/static_cast<double>(diff)/' \
    "--web: the rate history in bytes/s where the page says bit/s" \
    "script:tests/web/page_test.sh"
mutant page-colours-shifted userspace/daemon/web/tricolor.js \
    's/const COLORS = \["green", "yellow", "red"\];/const COLORS = ["green", "red", "yellow"];/' \
    "--web: the page reads the daemon's colour columns in the wrong order" \
    "script:tests/web/page_test.sh"
mutant page-not-read-only userspace/daemon/web.cpp \
    's/bool handlePost\(CivetServer \*, mg_connection \*c\) override \{ return refuse\(c\); \}/bool handlePost(CivetServer *s, mg_connection *c) override { return handleGet(s, c); }/' \
    "--web: a POST is answered as a GET" \
    "script:tests/web/page_test.sh"
mutant metrics-no-parent userspace/daemon/metrics.cpp \
    's/m\.label = \{\{"color", colors\[i\]\}, \{"parent", parent\}, \{"policy", name\}\};/m.label = {{"color", colors[i]}, {"policy", name}};/' \
    "metrics: per-policy counters lose their parent label" \
    "e2e:E2E.MetricsScrapedOverHttpMatchStats"

# flows --top from the heavy hitters (#12; docs/datapath.md, "flows --top at 2^20").
TOP_BPF='bpf:FlowTopTest.*:SmallHotMapTest.*:FlowTopPinned.*'
mutant hot-not-recorded bpf/lib/hot.h \
    's/if \(total - \*\(volatile __u64 \*\)&tcm_hot_threshold < len\)/if (0)/' \
    "flows --top: the data path never records a flow that crosses the threshold" \
    "$TOP_BPF e2e:Operator.FlowsTopFromTheHeavyHittersIsWhatAWalkLists"
mutant hot-every-packet bpf/lib/hot.h \
    's/if \(total - \*\(volatile __u64 \*\)&tcm_hot_threshold < len\)/if (total >= *(volatile __u64 *)\&tcm_hot_threshold)/' \
    "flows --top: every packet of a flow at or above the threshold inserts it, not the crossing one" \
    "$TOP_BPF"
mutant hot-walk-strict userspace/src/datapath_flows.cpp \
    's/if \(bytes >= pass\.threshold\) \{/if (bytes > pass.threshold) {/' \
    "flows --top: the walk keeps the flows above the threshold, not those exactly at it" \
    "$TOP_BPF"
mutant hot-lowered-kept userspace/src/datapath_flows.cpp \
    's/bool keep = hot\.valid && t >= hot\.threshold;/bool keep = hot.valid;/' \
    "flows --top: a pass that lowers the threshold keeps answering from the heavy hitters" \
    "$TOP_BPF"
mutant hot-overflow-trusted userspace/src/datapath_flows.cpp \
    's/if \(!live \|\| live->size\(\) >= impl_->hot_capacity \|\| foreign_flow_writers\(\)\)/if (!live || foreign_flow_writers())/; s/if \(__atomic_load_n\(&impl_->skel->bss->tcm_hot_overflow, __ATOMIC_SEQ_CST\) != 0 \|\|/if (/' \
    "flows --top: answers from a heavy-hitter map that refused inserts" \
    "$TOP_BPF"
mutant hot-foreign-ignored userspace/src/datapath_flows.cpp \
    's/(size_t Datapath::foreign_flow_writers\(\) const \{)/$1\n    return 0;/' \
    "flows --top: another program on the flow table (an older daemon's) is never looked for" \
    "$TOP_BPF"
mutant hot-instead-of-count bpf/lib/chain.h \
    's/chain_count\(lvl, color, in->segs, len\);\s*hot_check\(lvl, key, total, len\);/if (total - *(volatile __u64 *)\&tcm_hot_threshold < len)\n        hot_note(lvl, key);\n    else\n        chain_count(lvl, color, in->segs, len);/' \
    "flows --top: the packet that records a heavy hitter is not counted in its policy's counters" \
    "$TOP_BPF"
mutant reclaim-no-recheck userspace/src/datapath_flows.cpp \
    's/return now\.meter\.last_ns == then\.meter\.last_ns &&[^;]*;/return true;/' \
    "reclaim: a flow that saw a packet after the walk read it is deleted all the same (a fresh burst)" \
    "bpf:ReclaimPassTest.*"

# ---- machinery ---------------------------------------------------------------------------

usage() { sed -n '3,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
KEEP=0
WRITE=0
CHECK=0
while getopts "lnkwh" opt; do
    case $opt in
    l) for id in "${IDS[@]}"; do printf '%-22s %-28s %s\n' "$id" "${FILE[$id]}" "${DESC[$id]}"; done; exit 0 ;;
    n) CHECK=1 ;;
    k) KEEP=1 ;;
    w) WRITE=1 ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
SELECTED=("$@")
[ ${#SELECTED[@]} -eq 0 ] && SELECTED=("${IDS[@]}")
for id in "${SELECTED[@]}"; do
    [ -n "${FILE[$id]:-}" ] || { echo "mutate.sh: no mutant '$id' (see -l)" >&2; exit 2; }
done
# -n: a substitution that matches nothing would make a mutant look harmless, so the list is
# checked against the tree in seconds, without the hour a full run takes.
if [ $CHECK -eq 1 ]; then
    bad=0
    for id in "${SELECTED[@]}"; do
        if [ ! -f "$SRC/${FILE[$id]}" ]; then
            printf '%-22s NOT APPLIED (no file %s)\n' "$id" "${FILE[$id]}"
            bad=$((bad + 1))
        elif perl -0pe "${EXPR[$id]}" "$SRC/${FILE[$id]}" | cmp -s - "$SRC/${FILE[$id]}"; then
            printf '%-22s NOT APPLIED (the substitution matches nothing in %s)\n' "$id" "${FILE[$id]}"
            bad=$((bad + 1))
        else
            printf '%-22s applies\n' "$id"
        fi
    done
    printf '%d of %d mutants apply\n' $((${#SELECTED[@]} - bad)) ${#SELECTED[@]}
    [ $bad -eq 0 ]
    exit
fi
[ "$(id -u)" -eq 0 ] || { echo "mutate.sh: run as root (the BPF and e2e suites load programs)" >&2; exit 2; }
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

log() { printf '[mutate] %s\n' "$*" >&2; }

# 1. The scratch copy: the files git knows (tracked, or new and not ignored), as they are now.
mkdir -p "$WORK/src" "$WORK/logs"
# tar keeps each file's mtime, so an unchanged file does not rebuild. A file whose scratch copy
# differs (a mutant left behind by an interrupted run) is touched after the copy: with the
# original's older mtime, make would keep the objects built from the mutant.
STALE=()
while IFS= read -r -d '' f; do
    [ -f "$WORK/src/$f" ] && ! cmp -s "$SRC/$f" "$WORK/src/$f" && STALE+=("$f")
done < <(cd "$SRC" && git ls-files -z --cached --others --exclude-standard)
(cd "$SRC" && git ls-files -z --cached --others --exclude-standard |
    tar --null --ignore-failed-read -T - -cf -) | tar -xf - -C "$WORK/src"
# A file the tree no longer has (deleted, renamed) goes from the copy too: the build takes every
# *_test.cpp of a folder, and an old name's copy would be built beside the new one.
(cd "$SRC" && git ls-files --cached --others --exclude-standard | sort) >"$WORK/tracked"
(cd "$WORK/src" && find . -type f -printf '%P\n' | sort) |
    comm -23 - "$WORK/tracked" | while IFS= read -r gone; do rm -f "$WORK/src/$gone"; done
# The same for a file a run was interrupted in after restoring it but before rebuilding: its
# copy matches, its objects are the mutant's and newer. Each run notes the file it mutates in
# $WORK/in-flight until the tree is rebuilt at the end.
[ -f "$WORK/in-flight" ] && while IFS= read -r f; do STALE+=("$f"); done <"$WORK/in-flight"
for f in "${STALE[@]}"; do [ -f "$WORK/src/$f" ] && touch "$WORK/src/$f"; done
if [ ! -f "$WORK/build/CMakeCache.txt" ]; then
    log "configuring $WORK/build"
    cmake -S "$WORK/src" -B "$WORK/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$WORK/logs/configure.log" 2>&1 ||
        { cat "$WORK/logs/configure.log"; exit 1; }
fi

suites_of() { # the distinct suites a test list needs
    local t
    for t in $1; do echo "${t%%:*}"; done | sort -u
}
build_for() { # $1: test list; builds only those suites' binaries (and what e2e/cli run)
    local targets=() s
    for s in $(suites_of "$1"); do
        if [ "$s" = script ]; then targets+=(all); else targets+=("${s}_tests"); fi
    done
    cmake --build "$WORK/build" -j "$(nproc)" --target "${targets[@]}" >"$2" 2>&1
}
run_tests() { # $1: test list, $2: log. Returns 0 if all passed; lists failed tests in $FAILED
    local t suite filter rc=0 out
    FAILED=""
    : >"$2"
    for t in $1; do
        suite=${t%%:*}
        filter=${t#*:}
        local limit=$TIMEOUT
        [ "$suite" = e2e ] || [ "$suite" = script ] || limit=$((TIMEOUT / 4)) # seconds, these
        if [ "$suite" = script ]; then
            out=$(cd "$WORK/build" && BUILD_DIR=$WORK/build timeout "$limit" "$WORK/src/$filter" 2>&1)
        else
            out=$(cd "$WORK/build" && timeout "$limit" "tests/${suite}_tests" --gtest_filter="$filter" 2>&1)
        fi
        local st=$?
        printf '%s\n' "== $suite $filter (exit $st)" "$out" >>"$2"
        if [ $st -eq 124 ]; then
            FAILED+=" ${suite}:(timeout)"
            rc=1
        elif [ $st -ne 0 ] && [ "$suite" = script ]; then
            FAILED+=" ${filter}"
            rc=1
        elif [ $st -ne 0 ]; then
            # Failed tests, parameterised ones once (AllModes/Suite.Test/param -> Suite.Test).
            FAILED+=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([A-Za-z][^ ,]*\).*/\1/p' |
                sed -E 's#^[A-Za-z]+/##; s#/[^/]*$##' | sort -u | sed "s/^/ ${suite}./" | tr -d '\n')
            [ -n "$FAILED" ] || FAILED=" ${suite}:(exit $st)"
            rc=1
        elif printf '%s\n' "$out" | grep -q '^\[==========\] 0 tests'; then
            FAILED+=" ${suite}:${filter}(matched no test)"
            rc=2
        fi
    done
    return $rc
}

# 2. Baseline: the unmutated tree must build and pass every test the mutants rely on.
ALL_TESTS=$(for id in "${SELECTED[@]}"; do echo "${TESTS[$id]}"; done | tr ' ' '\n' | sort -u | tr '\n' ' ')
log "baseline build"
if ! build_for "$ALL_TESTS" "$WORK/logs/baseline-build.log"; then
    tail -30 "$WORK/logs/baseline-build.log"
    exit 1
fi
log "baseline tests"
if ! run_tests "$ALL_TESTS" "$WORK/logs/baseline-tests.log"; then
    log "the unmutated tree fails:$FAILED (see $WORK/logs/baseline-tests.log)"
    [ $KEEP -eq 1 ] || exit 1
fi

# 3. Each mutant: apply, build, test, restore.
declare -A RESULT BY
survived=0
for id in "${SELECTED[@]}"; do
    f=${FILE[$id]}
    log "$id: ${DESC[$id]}"
    echo "$f" >>"$WORK/in-flight"
    cp "$SRC/$f" "$WORK/src/$f"
    perl -0pi -e "${EXPR[$id]}" "$WORK/src/$f"
    if cmp -s "$SRC/$f" "$WORK/src/$f"; then
        RESULT[$id]="NOT APPLIED"
        BY[$id]="the substitution matched nothing: update it"
        survived=$((survived + 1))
        continue
    fi
    (cd "$WORK/src" && diff -u "$SRC/$f" "$f") >"$WORK/logs/$id.diff"
    if ! build_for "${TESTS[$id]}" "$WORK/logs/$id-build.log"; then
        RESULT[$id]="NO BUILD"
        BY[$id]="see $WORK/logs/$id-build.log"
        survived=$((survived + 1))
    elif run_tests "${TESTS[$id]}" "$WORK/logs/$id-tests.log"; then
        RESULT[$id]="SURVIVED"
        BY[$id]="${TESTS[$id]}"
        survived=$((survived + 1))
    elif [[ "$FAILED" == *"matched no test"* ]]; then
        RESULT[$id]="BAD FILTER"
        BY[$id]="$FAILED"
        survived=$((survived + 1))
    else
        RESULT[$id]="caught"
        BY[$id]="${FAILED# }"
    fi
    log "$id: ${RESULT[$id]} ${BY[$id]}"
    cp "$SRC/$f" "$WORK/src/$f" # restore (a new mtime: the next build recompiles it)
done
# Leave the build matching the tree.
build_for "$ALL_TESTS" "$WORK/logs/final-build.log" && rm -f "$WORK/in-flight"

# 4. The table (Markdown, as in docs/testing.md), with what it was run on: a table without its
# commit cannot be checked against the code it describes.
COMMIT=$(cd "$SRC" && git rev-parse --short HEAD)
[ -z "$(cd "$SRC" && git status --porcelain --untracked-files=no)" ] || COMMIT="$COMMIT+changes"
TABLE=$(
    printf '%d of %d mutants caught (run %s, kernel %s, commit %s%s).\n' \
        $((${#SELECTED[@]} - survived)) ${#SELECTED[@]} "$(date -u +%Y-%m-%d)" "$(uname -r)" "$COMMIT" \
        "$([ ${#SELECTED[@]} -eq ${#IDS[@]} ] || echo ", only ${#SELECTED[@]} of the ${#IDS[@]} listed")"
    printf '\n| mutant | file | planted bug | result | caught by |\n|---|---|---|---|---|\n'
    for id in "${SELECTED[@]}"; do
        printf '| %s | %s | %s | %s | %s |\n' "$id" "${FILE[$id]}" "${DESC[$id]}" "${RESULT[$id]}" \
            "$(echo "${BY[$id]}" | sed 's/ /, /g')"
    done
)
printf '\n%s\n' "$TABLE"
if [ $WRITE -eq 1 ]; then
    # Only the lines between the markers change; the rest of the file is the project's prose.
    DOC="$SRC/docs/testing.md"
    if grep -q '^<!-- mutate:table -->$' "$DOC" && grep -q '^<!-- /mutate -->$' "$DOC"; then
        TABLE="$TABLE" perl -0pi -e 's/(<!-- mutate:table -->\n).*?(<!-- \/mutate -->)/$1\n$ENV{TABLE}\n\n$2/s' "$DOC"
        log "table written into $DOC"
    else
        log "no '<!-- mutate:table -->' ... '<!-- /mutate -->' block in $DOC: table not written"
        survived=$((survived + 1))
    fi
fi
[ $survived -eq 0 ]
