// Kernels that pin the emulator's semantics (tests/metal.rs runs them): simdgroup reductions and shuffles,
// threadgroup memory across a barrier, and the errors for collectives that not every lane reaches.
#include "metal_stdlib"

#include <string>

using namespace metal;

namespace {

// out[tid*4 + 0..3] = simd_sum(lane), simd_shuffle_down(lane, 3), simd_broadcast(100*sg + lane, 5),
// simd_max(lane ^ 7).
void simd_ops(device float *out, ushort tiitg, ushort tiisg, ushort sgitg) {
    out[tiitg * 4 + 0] = simd_sum(float(tiisg));
    out[tiitg * 4 + 1] = simd_shuffle_down(float(tiisg), 3);
    out[tiitg * 4 + 2] = simd_broadcast(float(100 * sgitg + tiisg), 5);
    out[tiitg * 4 + 3] = simd_max(float(tiisg ^ 7));
}

// Each thread writes its index to threadgroup memory; after the barrier each reads its neighbour's, twice
// around the group: wrong if the emulator let a thread read before every thread wrote.
void barrier_ring(device float *out, threadgroup float *shmem, ushort tiitg, ushort n) {
    shmem[tiitg] = float(tiitg);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float a = shmem[(tiitg + 1) % n];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    shmem[tiitg] = a * 2.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tiitg] = shmem[(tiitg + 1) % n];
}

// simd_sum reached by half the lanes: a hang on a GPU, an error here.
void divergent_sum(device float *out, ushort tiitg, ushort tiisg) {
    if (tiisg < 16) out[tiitg] = simd_sum(1.0f);
}

// Lanes of one simdgroup at different collectives.
void mismatched_ops(device float *out, ushort tiitg, ushort tiisg) {
    out[tiitg] = tiisg < 16 ? simd_sum(1.0f) : simd_max(1.0f);
}

lowbit_emu::Threadgroup g_tg;

} // namespace

// Runs self-test `which` (0..3) on one threadgroup of nsg simdgroups; out holds 4*32*nsg floats. Returns 0, or -1
// with the emulator's message in err.
extern "C" int lowbit_emu_selftest(int which, int nsg, float *out, char *err, size_t err_len) {
    std::vector<float> shmem(32 * nsg, NAN);
    const std::string e = lowbit_emu::run_threadgroup(g_tg, nsg, [&](int tid) {
        const ushort lane = ushort(tid % 32), sg = ushort(tid / 32);
        switch (which) {
        case 0: simd_ops(out, ushort(tid), lane, sg); break;
        case 1: barrier_ring(out, shmem.data(), ushort(tid), ushort(32 * nsg)); break;
        case 2: divergent_sum(out, ushort(tid), lane); break;
        default: mismatched_ops(out, ushort(tid), lane); break;
        }
    });
    if (e.empty()) return 0;
    std::snprintf(err, err_len, "%s", e.c_str());
    return -1;
}
