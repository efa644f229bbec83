/* tricolor_abi.h: the one header shared by the BPF programs and the C++ library.
 * Everything that crosses the user/kernel boundary (map values, globals, enums, limits) is
 * defined here once, with plain __u32/__u64 fields and explicit padding, so both compilers
 * agree on the layout without a hand-kept copy. */
#ifndef TRICOLOR_ABI_H
#define TRICOLOR_ABI_H

#include <linux/types.h>

/* Colours, in the order of the RFCs; the value indexes per-colour counters. */
enum tc_color {
    TC_GREEN = 0,
    TC_YELLOW = 1,
    TC_RED = 2,
    TC_NR_COLORS = 3,
};

enum tc_algo {
    TC_ALGO_SRTCM = 0,   /* RFC 2697: C at CIR, overflow into E */
    TC_ALGO_TRTCM = 1,   /* RFC 2698: P at PIR, C at CIR */
    TC_ALGO_RFC4115 = 2, /* RFC 4115: C at CIR, E at EIR, uncoupled */
};

/* tc_meter_config.flags */
#define TC_METER_F_COLOR_AWARE 0x1u
#define TC_METER_F_PACKET_MODE 0x2u

/* Tokens are counted in nano-units: 10^-9 bit in byte mode, 10^-9 packet in packet mode.
 * A rate of R bit/s (or packet/s) then adds exactly R tokens every nanosecond, so the
 * fluid model's R*dt/(8*10^9) bytes is the integer R*dt with nothing rounded away. */
#define TC_TOKENS_PER_BYTE 8000000000ull
#define TC_TOKENS_PER_PACKET 1000000000ull

/* Limits within which every result is exact (SPEC §1). With them the largest quantity the
 * meter ever holds, an srtcm C+E pair of 2 GiB, is 2^31 * 8e9 = 1.72e19 < 2^64. */
#define TC_METER_MAX_RATE 1000000000000ull /* 1 Tbit/s, or 10^12 packet/s */
#define TC_METER_MAX_SIZE (1ull << 30)     /* 1 GiB, or 2^30 packets */
/* A metered length above this can never fit any bucket; clamping keeps len * 8e9 < 2^64. */
#define TC_METER_MAX_LEN (1u << 31)

/* A meter's parameters after validation, precomputed for the per-packet path.
 * Bucket "c" is the committed bucket of every algorithm; bucket "e" is the excess bucket
 * (srtcm, rfc4115) or the peak bucket P (trtcm). */
struct tc_meter_config {
    __u64 c_rate;      /* tokens/ns into C: CIR */
    __u64 e_rate;      /* tokens/ns into E/P: EIR or PIR; 0 for srtcm (E fills from C) */
    __u64 c_size;      /* capacity of C in tokens: CBS */
    __u64 e_size;      /* capacity of E/P in tokens: EBS or PBS */
    __u64 c_fill_ns;   /* a gap of at least this fills C (srtcm: C and E) from empty */
    __u64 e_fill_ns;   /* the same for E/P; unused when e_rate is 0 */
    __u64 unit_tokens; /* cost of one metered unit: TC_TOKENS_PER_BYTE or _PER_PACKET */
    __u32 algo;        /* enum tc_algo */
    __u32 flags;       /* TC_METER_F_* */
};

/* A bucket pair's state: 24 bytes, so that a flow fits in a cache line with its key. */
struct tc_meter_state {
    __u64 last_ns;  /* newest arrival seen; tokens are exact as of this instant */
    __u64 c_tokens; /* 0..c_size */
    __u64 e_tokens; /* 0..e_size */
};

/* Globals of the replay program (bpf/replay.bpf.c), set through the skeleton's mmapped .bss
 * before each BPF_PROG_TEST_RUN. */
struct tc_replay_io {
    struct tc_meter_config config;
    struct tc_meter_state state;
    __u32 in_color;  /* incoming colour of the next packet */
    __u32 out_color; /* colour the program gave it */
    __u32 started;   /* 0 until the first packet has filled the buckets */
    __u32 pad;
};

#endif /* TRICOLOR_ABI_H */
