// The SIMT emulator: runs one threadgroup of a Metal compute kernel as (32 x nsg) fibers, one per thread, so that
// the simdgroup functions and threadgroup_barrier have their real semantics. A fiber runs until it reaches a
// collective operation (or returns); a simdgroup's collective completes when all 32 of its lanes have reached it,
// a barrier when every thread of the threadgroup has. Between collectives, lanes run one after another; for a
// kernel without data races (which Metal requires between barriers) that is the same as running in lockstep.
//
// Checked, not assumed: a collective that only some lanes of a simdgroup reach, lanes of one simdgroup at
// different collectives, or a barrier some threads never reach are reported as errors (a GPU would hang or be
// undefined).
#ifndef GGML_LOWBIT_EMU_RUNTIME
#define GGML_LOWBIT_EMU_RUNTIME

#include <ucontext.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace lowbit_emu {

constexpr int kSimdWidth = 32;
constexpr int kSlotBytes = 64; // the largest value a lane can pass through a simd function (a float4x4)
constexpr int kMaxSimdgroups = 32;
constexpr size_t kStackBytes = 256 * 1024;

enum class State { Runnable, AtSimd, AtBarrier, Done };

struct Lane {
    ucontext_t ctx;
    State state = State::Runnable;
    const char *what = nullptr; // the collective it waits at
    unsigned generation = 0;    // collectives this lane has completed (selects the slot buffer)
};

struct Threadgroup {
    int nsg = 0;
    std::vector<Lane> lanes;
    std::vector<std::vector<char>> stacks;
    ucontext_t scheduler;
    int current = -1;
    // Double-buffered exchange slots: a lane that resumes from collective g may reach collective g+1 (writing
    // the other buffer) before a slower lane of its simdgroup has read collective g's values.
    unsigned char slots[2][kMaxSimdgroups][kSimdWidth][kSlotBytes];
    std::function<void(int)> body;
    std::string error;
};

inline thread_local Threadgroup *g_current = nullptr;

inline int simd_lane() { return g_current->current % kSimdWidth; }

inline void yield_to_scheduler() {
    Threadgroup *tg = g_current;
    Lane &l = tg->lanes[tg->current];
    swapcontext(&l.ctx, &tg->scheduler);
}

// Posts `size` bytes of this lane's value, waits for the whole simdgroup, and returns the 32 lanes' slots
// (stride kSlotBytes).
inline const unsigned char *simd_exchange(const void *value, size_t size, const char *what) {
    Threadgroup *tg = g_current;
    const int id = tg->current;
    Lane &l = tg->lanes[id];
    const unsigned buf = l.generation & 1u;
    if (size > static_cast<size_t>(kSlotBytes)) {
        tg->error = std::string(what) + ": value too large for the emulator";
        size = kSlotBytes;
    }
    if (size) std::memcpy(tg->slots[buf][id / kSimdWidth][id % kSimdWidth], value, size);
    l.state = State::AtSimd;
    l.what = what;
    yield_to_scheduler();
    tg->lanes[id].generation++;
    return &tg->slots[buf][id / kSimdWidth][0][0];
}

inline void threadgroup_barrier() {
    Threadgroup *tg = g_current;
    Lane &l = tg->lanes[tg->current];
    l.state = State::AtBarrier;
    l.what = "threadgroup_barrier";
    yield_to_scheduler();
}

inline void lane_entry() {
    Threadgroup *tg = g_current;
    const int id = tg->current;
    tg->body(id);
    tg->lanes[id].state = State::Done;
    // Returning switches to uc_link (the scheduler).
}

// Runs body(thread index in threadgroup) for nsg*32 threads; returns an empty string or what went wrong.
inline std::string run_threadgroup(Threadgroup &tg, int nsg, const std::function<void(int)> &body) {
    if (nsg < 1 || nsg > kMaxSimdgroups) return "bad simdgroup count " + std::to_string(nsg);
    const int n = nsg * kSimdWidth;
    tg.nsg = nsg;
    tg.lanes.assign(n, Lane{});
    if (static_cast<int>(tg.stacks.size()) < n) tg.stacks.resize(n);
    tg.body = body;
    tg.error.clear();
    Threadgroup *saved = g_current;
    g_current = &tg;
    for (int i = 0; i < n; ++i) {
        tg.stacks[i].resize(kStackBytes);
        getcontext(&tg.lanes[i].ctx);
        tg.lanes[i].ctx.uc_stack.ss_sp = tg.stacks[i].data();
        tg.lanes[i].ctx.uc_stack.ss_size = kStackBytes;
        tg.lanes[i].ctx.uc_link = &tg.scheduler;
        makecontext(&tg.lanes[i].ctx, lane_entry, 0);
    }
    std::string err;
    for (;;) {
        for (int i = 0; i < n; ++i) {
            if (tg.lanes[i].state != State::Runnable) continue;
            tg.current = i;
            swapcontext(&tg.scheduler, &tg.lanes[i].ctx);
        }
        if (!tg.error.empty()) {
            err = tg.error;
            break;
        }
        bool all_done = true, released = false, all_barrier = true;
        for (int s = 0; s < nsg; ++s) {
            Lane *sg = &tg.lanes[s * kSimdWidth];
            int at_simd = 0;
            for (int i = 0; i < kSimdWidth; ++i) at_simd += sg[i].state == State::AtSimd;
            if (at_simd == kSimdWidth) {
                for (int i = 1; i < kSimdWidth; ++i)
                    if (std::strcmp(sg[i].what, sg[0].what) != 0)
                        err = "simdgroup " + std::to_string(s) + ": lane 0 at " + sg[0].what + ", lane " +
                              std::to_string(i) + " at " + sg[i].what;
                for (int i = 0; i < kSimdWidth; ++i) sg[i].state = State::Runnable;
                released = true;
            }
        }
        for (int i = 0; i < n; ++i) {
            all_done = all_done && tg.lanes[i].state == State::Done;
            all_barrier = all_barrier && tg.lanes[i].state == State::AtBarrier;
        }
        if (!err.empty()) break;
        if (all_done) break;
        if (all_barrier) {
            for (int i = 0; i < n; ++i) tg.lanes[i].state = State::Runnable;
            released = true;
        }
        if (!released) {
            for (int i = 0; i < n; ++i)
                if (tg.lanes[i].state == State::AtSimd || tg.lanes[i].state == State::AtBarrier) {
                    err = "deadlock: thread " + std::to_string(i) + " waits at " + tg.lanes[i].what +
                          " which not every thread of its group reaches";
                    break;
                }
            break;
        }
    }
    g_current = saved;
    return err;
}

} // namespace lowbit_emu

#endif
