// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// replay.hpp: offline, deterministic metering of a packet trace (docs/spec.md §2) through either
// the model (the C meter compiled into this library) or the real BPF bytecode.
#pragma once

#include "tricolor/bpf_load.hpp" // quiet_libbpf_logging(), for the BPF engine
#include "tricolor/meter.hpp"
#include "tricolor/units.hpp"

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string_view>
#include <vector>

namespace tricolor {

// The largest packet a trace may carry: docs/spec.md §1 promises exact results up to 64 KiB, and
// the BPF engine synthesizes each packet as a real frame of that length.
inline constexpr uint32_t kMaxTracePacket = 65536;

struct TracePacket {
    uint64_t time_ns;
    uint32_t bytes;
    Color color; // incoming colour, green unless the line says otherwise
};

// One line of a trace: nullopt for a blank or '#' line. @line_no appears in the error.
Result<std::optional<TracePacket>> parse_trace_line(std::string_view line, size_t line_no);
// A whole trace; the first malformed line is the error, and nothing is returned with it.
Result<std::vector<TracePacket>> parse_trace(std::istream &in);

class ReplayEngine {
  public:
    virtual ~ReplayEngine() = default;
    virtual Color mark(const TracePacket &packet) = 0;
};

class ModelEngine final : public ReplayEngine {
  public:
    explicit ModelEngine(const tcm_meter_config &config, const tcm_warm_config &warm = {},
                         const tcm_quota_config &quota = {})
        : meter_(config, warm, quota) {}
    Color mark(const TracePacket &p) override { return meter_.mark(p.time_ns, p.bytes, p.color); }

  private:
    Meter meter_;
};

// Loads bpf/replay.bpf.c (embedded as a skeleton) with the test clock switched on and runs it
// once per packet with BPF_PROG_TEST_RUN. Throws std::runtime_error when the program cannot be
// loaded (no privileges, no BPF) or a test run fails.
class BpfEngine final : public ReplayEngine {
  public:
    explicit BpfEngine(const tcm_meter_config &config, const tcm_warm_config &warm = {},
                       const tcm_quota_config &quota = {});
    ~BpfEngine() override;
    BpfEngine(const BpfEngine &) = delete;
    BpfEngine &operator=(const BpfEngine &) = delete;
    Color mark(const TracePacket &packet) override;
    // The kernel program's bucket state, to compare with the model's.
    tcm_meter_state state() const;
    tcm_warm_state warm_state() const;
    tcm_quota_state quota_state() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

struct ColorTotals {
    uint64_t packets[TCM_NR_COLORS] = {};
    uint64_t bytes[TCM_NR_COLORS] = {};
};

// Meters every packet in order, writes "time_ns,bytes,color" lines to @out, returns the totals.
ColorTotals run_replay(ReplayEngine &engine, const std::vector<TracePacket> &trace,
                       std::ostream &out);

} // namespace tricolor
