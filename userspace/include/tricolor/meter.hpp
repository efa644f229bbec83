// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// meter.hpp: meter parameters as a user states them, their validation (docs/spec.md §1), and the
// model meter: the C code of bpf/lib/meter.h compiled into the library, so user space and the
// kernel run the same arithmetic.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tricolor/units.hpp"

extern "C" {
#include "meter.h"
#include "quota.h"
}

namespace tricolor {

enum class Algo : uint32_t {
#define TRICOLOR_ALGO_ENUM(upper, lower, value) lower = TCM_ALGO_##upper,
    TCM_ALGOS(TRICOLOR_ALGO_ENUM)
#undef TRICOLOR_ALGO_ENUM
};
enum class Color : uint32_t {
    green = TCM_GREEN,
    yellow = TCM_YELLOW,
    red = TCM_RED,
};

// What an algorithm's second bucket is; the rest of the code asks this, not the algorithm.
enum class SecondBucket {
    overflow, // E of EBS, filled by what overflows C (srtcm)
    excess,   // E of EBS at EIR, a rate beside CIR (rfc4115)
    peak,     // P of PBS at PIR >= CIR: every packet takes from it, so it alone sets red (trtcm)
};

// One row of the table of algorithms (meter.cpp): every choice user space makes by algorithm
// reads it. The marking itself is bpf/lib/meter.h's.
struct AlgoInfo {
    Algo algo;
    std::string_view name;     // as --algo takes it
    std::string_view standard; // where it is defined, for --help and the man page
    SecondBucket second;
    bool coupling; // takes --coupling (MEF 10.3's coupling flag)
};
const std::vector<AlgoInfo> &algorithms();
const AlgoInfo &info(Algo algo);
// "srtcm, trtcm or rfc4115"; with_standard: "srtcm (RFC 2697), ..."
std::string algo_names(bool with_standard = false);

std::string_view to_string(Algo algo);
std::string_view to_string(Color color);
std::optional<Algo> parse_algo(std::string_view text);
std::optional<Color> parse_color(std::string_view text);

// Rates in bit/s and sizes in bytes; in packet mode, packets/s and packets. A parameter the
// user did not give is empty, so validation can tell "0" from "absent".
struct MeterParams {
    Algo algo = Algo::srtcm;
    uint64_t cir = 0;
    uint64_t cbs = 0;
    std::optional<uint64_t> ebs; // srtcm, rfc4115 (default 0)
    std::optional<uint64_t> pir; // trtcm (required)
    std::optional<uint64_t> pbs; // trtcm (required)
    std::optional<uint64_t> eir; // rfc4115 (default 0)
    bool color_aware = false;
    bool packet_mode = false;
    bool coupling = false; // rfc4115 only: MEF 10.3 CF=1, C's overflow goes to E (docs/spec.md §9)
    bool start_empty = false; // a new flow's buckets start empty (docs/spec.md §9 `start: empty`)
    // docs/spec.md §14: cold at the first packet and after a gap of warmup_ns, the buckets fill
    // at rate * j/K in the j-th of K = cold_factor steps of warmup_ns/K. 0: no warm-up.
    uint64_t warmup_ns = 0;
    uint32_t cold_factor = 0;
    // docs/spec.md §14: a quota of quota_bytes green and yellow bytes a period, the over meter
    // (none: every packet red) deciding once it is used. Periods of quota_period_ns from
    // quota_anchor_ns (ns since the Unix epoch), or calendar months (quota_period_ns 0) from
    // quota_month_day at quota_anchor_ns past midnight, UTC. quota_bytes 0: no quota.
    uint64_t quota_bytes = 0;
    uint64_t quota_period_ns = 0;
    uint64_t quota_anchor_ns = 0;
    uint32_t quota_month_day = 0;
    struct Over {
        Algo algo = Algo::srtcm;
        uint64_t cir = 0, cbs = 0;
        std::optional<uint64_t> ebs, pir, pbs, eir;
        bool operator==(const Over &) const = default;
    };
    std::optional<Over> over;

    // A meter over time (docs/spec.md §14): its state beyond the buckets, in tcm_meter_ext.
    bool has_warmup_or_quota() const { return warmup_ns || quota_bytes; }

    bool operator==(const MeterParams &) const = default;
};

struct Validation {
    std::vector<std::string> errors;   // any error: nothing may be applied
    std::vector<std::string> warnings; // legal but probably not meant
    bool ok() const { return errors.empty(); }
};

// Every parameter a second bucket may have, in the order messages and `policy show` list them;
// an algorithm takes those of its kind of second bucket (takes()).
struct SecondParam {
    std::string_view key;  // "pir", as the spec and the CLI name it
    std::string_view name; // "PIR", as messages name it
    std::optional<uint64_t> MeterParams::*field;
    bool rate; // a rate, or else a size
};
const std::vector<SecondParam> &second_params();
bool takes(Algo algo, const SecondParam &param);

// The second bucket's parameters' names ("PIR", "PBS"; "EIR", "EBS"; srtcm's E has no rate: "")
// and their values (0 when not given).
std::string_view second_rate_name(Algo algo);
std::string_view second_size_name(Algo algo);
uint64_t second_rate(const MeterParams &params);
uint64_t second_size(const MeterParams &params);

// The one validation every entry point (CLI, config file, control socket) goes through.
Validation validate(const MeterParams &params);

// Meter parameters as text, as the CLI, the config file and the control socket receive them
// ("10mbit", "15k"); in packet mode rates are packets/s and sizes packets.
struct MeterSpec {
    std::string algo;
    std::string cir, cbs;
    std::optional<std::string> ebs, pir, pbs, eir;
    bool color_aware = false;
    bool packet_mode = false;
    bool coupling = false;
    std::optional<std::string> start;                    // "full" or "empty"
    std::optional<std::string> warmup, cold_factor;      // "30s", "3"
    std::optional<std::string> quota, quota_reset, over; // "50g/30d", "1T06:00", "cir=1mbit,..."
};

struct ParsedMeter {
    MeterParams params;
    std::vector<std::string> warnings;
};

// Parses every value and validates the whole; the error lists every problem, one a line, each
// naming the parameter and the value.
Result<ParsedMeter> parse_meter_spec(const MeterSpec &spec);

// Precomputes the per-packet configuration. Precondition: validate(params).ok().
tcm_meter_config make_meter_config(const MeterParams &params);
// And the warm-up's (d_ns 0: none), and the quota's (bytes 0: none).
tcm_warm_config make_warm_config(const MeterParams &params);
tcm_quota_config make_quota_config(const MeterParams &params);
// Both, as the data path reads them (tcm_policy_ext; the periods' gen 0).
tcm_policy_ext make_policy_ext(const MeterParams &params);
// The over meter's parameters as a meter of their own (the colour mode and units of @params).
MeterParams over_params(const MeterParams &params);
// The cold factor a warm-up without --cold-factor has (Guava's SmoothWarmingUp's).
inline constexpr uint32_t kDefaultColdFactor = 3;
// The shortest warm-up: shorter ones are over before a second packet could see them.
inline constexpr uint64_t kMinWarmupNs = 1000000;

// --shape edt (bpf/lib/edt.h): floor(2^64 / rate) of the rate that refills the bucket a red
// packet waits for (C at CIR; trtcm P at PIR), in tokens/ns; 2^64 - 1 at 1; 0 if that rate is 0.
uint64_t edt_recip(const tcm_meter_config &config);

// One bucket pair driven by the shared C code.
class Meter {
  public:
    explicit Meter(const tcm_meter_config &config, const tcm_warm_config &warm = {},
                   const tcm_quota_config &quota = {})
        : config_(config), ext_{warm, quota} {}

    // The trace's clock is UTC too: the quota's periods read it.
    Color mark(uint64_t now_ns, uint32_t len, Color in = Color::green) {
        return static_cast<Color>(quota_mark(&config_, &ext_, &state_, &ext_state_, now_ns, now_ns,
                                             len, static_cast<uint32_t>(in), 0));
    }
    const tcm_meter_config &config() const { return config_; }
    const tcm_meter_state &state() const { return state_; }
    const tcm_warm_state &warm_state() const { return ext_state_.warm; }
    const tcm_quota_state &quota_state() const { return ext_state_.quota; }
    bool started() const { return ext_state_.started; }

  private:
    tcm_meter_config config_;
    tcm_policy_ext ext_;
    tcm_meter_state state_{};
    tcm_ext_state ext_state_{};
};

} // namespace tricolor
