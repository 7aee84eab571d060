// The emulator's entry points: one mul_mv.metal (the pinned tree's or the patched one, given as
// LOWBIT_MUL_MV_SOURCE) compiled as C++ with the stand-in <metal_stdlib>, and a C interface that dispatches one
// of its kernels over a grid the way ggml-metal's host code does.
#include LOWBIT_MUL_MV_SOURCE

#include <cstdio>
#include <string>

namespace {

using namespace metal;

// Every kernel the tests drive, by the name ggml-metal looks up (its [[host_name]]), as a call with one shape.
using MvCall = void (*)(const void *args, const char *src0, const char *src1, char *dst, const char *ids,
                        char *shmem, uint3 tgpig, ushort tiitg, ushort tiisg, ushort sgitg);

template <auto K> void mv_call(const void *args, const char *src0, const char *src1, char *dst, const char *,
                               char *, uint3 tgpig, ushort, ushort tiisg, ushort sgitg) {
    K(*static_cast<ggml_metal_kargs_mul_mv *>(const_cast<void *>(args)), src0, src1, dst, tgpig, tiisg, sgitg);
}

template <auto K> void mv_id_call(const void *args, const char *src0, const char *src1, char *dst,
                                  const char *ids, char *shmem, uint3 tgpig, ushort tiitg, ushort tiisg,
                                  ushort sgitg) {
    K(*static_cast<ggml_metal_kargs_mul_mv_id *>(const_cast<void *>(args)), src0, src1, dst, ids, shmem, tgpig, tiitg, tiisg,
      sgitg);
}

template <auto K> void mv_shmem_call(const void *args, const char *src0, const char *src1, char *dst, const char *,
                                     char *shmem, uint3 tgpig, ushort, ushort tiisg, ushort sgitg) {
    K(*static_cast<ggml_metal_kargs_mul_mv *>(const_cast<void *>(args)), src0, src1, dst, shmem, tgpig, tiisg, sgitg);
}

struct KernelEntry {
    const char *name;
    MvCall call;
    // What ggml-metal's host code (ggml-metal-device.cpp) picks for the kernel: simdgroups per threadgroup, rows
    // per simdgroup, rows per simdgroup in split mode (0: the kernel has none), threadgroup memory bytes.
    int nsg;
    int nr0;
    int nr0_split;
    int smem;
};

#define MV_ID(impl) mv_id_call<kernel_mul_mv_id<mmv_fn<impl>>>

// The _id kernels are the instantiations the [[host_name]] lines of mul_mv.metal name.
const KernelEntry kKernels[] = {
    {"kernel_mul_mv_q1_0_f32", mv_call<kernel_mul_mv_q1_0_f32>, N_SG_Q1_0, N_R0_Q1_0, 0, 0},
    {"kernel_mul_mv_q2_0_f32", mv_call<kernel_mul_mv_q2_0_f32>, N_SG_Q2_0, N_R0_Q2_0, 0, 0},
    {"kernel_mul_mv_iq2_xxs_f32", mv_shmem_call<kernel_mul_mv_iq2_xxs_f32>, N_SG_IQ2_XXS, N_R0_IQ2_XXS,
     N_R0_IQ2_XXS_SPLIT, 256 * 8 + 128},
    {"kernel_mul_mv_iq2_xs_f32", mv_shmem_call<kernel_mul_mv_iq2_xs_f32>, N_SG_IQ2_XS, N_R0_IQ2_XS,
     N_R0_IQ2_XS_SPLIT, 512 * 8 + 128},
    {"kernel_mul_mv_iq2_s_f32", mv_shmem_call<kernel_mul_mv_iq2_s_f32>, N_SG_IQ2_S, N_R0_IQ2_S, N_R0_IQ2_S_SPLIT,
     0},
    {"kernel_mul_mv_iq3_s_f32", mv_shmem_call<kernel_mul_mv_iq3_s_f32>, N_SG_IQ3_S, N_R0_IQ3_S, N_R0_IQ3_S_SPLIT,
     512 * 4},
    {"kernel_mul_mv_id_q1_0_f32", MV_ID(kernel_mul_mv_q1_0_f32_impl<N_R0_Q1_0>), N_SG_Q1_0, N_R0_Q1_0, 0, 0},
    {"kernel_mul_mv_id_q2_0_f32", MV_ID(kernel_mul_mv_q2_0_f32_impl<N_R0_Q2_0>), N_SG_Q2_0, N_R0_Q2_0, 0, 0},
    {"kernel_mul_mv_id_iq2_xxs_f32", MV_ID(kernel_mul_mv_iq2_xxs_f32_disp<ggml_metal_kargs_mul_mv>), N_SG_IQ2_XXS,
     N_R0_IQ2_XXS, N_R0_IQ2_XXS_SPLIT, 256 * 8 + 128},
    {"kernel_mul_mv_id_iq2_xs_f32", MV_ID(kernel_mul_mv_iq2_xs_f32_disp<ggml_metal_kargs_mul_mv>), N_SG_IQ2_XS,
     N_R0_IQ2_XS, N_R0_IQ2_XS_SPLIT, 512 * 8 + 128},
    {"kernel_mul_mv_id_iq2_s_f32", MV_ID(kernel_mul_mv_iq2_s_f32_disp<ggml_metal_kargs_mul_mv>), N_SG_IQ2_S,
     N_R0_IQ2_S, N_R0_IQ2_S_SPLIT, 0},
    {"kernel_mul_mv_id_iq3_s_f32", MV_ID(kernel_mul_mv_iq3_s_f32_disp<ggml_metal_kargs_mul_mv>), N_SG_IQ3_S,
     N_R0_IQ3_S, N_R0_IQ3_S_SPLIT, 512 * 4},
#ifdef LOWBIT_VARIANT_PATCHED
    // PrismML's formats: only ours exist (the pinned tree has neither kernels nor host code for them).
    {"kernel_mul_mv_pq2_0_f32", mv_call<kernel_mul_mv_pq2_0_f32>, N_SG_PQ2_0, N_R0_PQ2_0, 0, 0},
    {"kernel_mul_mv_ptq1_0_f32", mv_call<kernel_mul_mv_ptq1_0_f32>, N_SG_PTQ1_0, N_R0_PTQ1_0, 0, 0},
    {"kernel_mul_mv_id_pq2_0_f32", MV_ID(kernel_mul_mv_pq2_0_f32_impl<N_R0_PQ2_0>), N_SG_PQ2_0, N_R0_PQ2_0, 0, 0},
    {"kernel_mul_mv_id_ptq1_0_f32", MV_ID(kernel_mul_mv_ptq1_0_f32_impl<N_R0_PTQ1_0>), N_SG_PTQ1_0, N_R0_PTQ1_0, 0,
     0},
#endif
};

const KernelEntry *find_kernel(const char *name) {
    for (const auto &k : kKernels)
        if (std::strcmp(k.name, name) == 0) return &k;
    return nullptr;
}

lowbit_emu::Threadgroup g_tg;

} // namespace

extern "C" {

// Sets the function constants FC_mul_mv_{nsg, nxpsg, ne12, r2, r3} and FC_mul_mv_split (as ggml-metal binds them
// when it builds the pipeline).
void lowbit_emu_set_mul_mv_constants(const int16_t fc[6]) {
    FC_mul_mv_nsg = fc[0];
    FC_mul_mv_nxpsg = fc[1];
    FC_mul_mv_ne12 = fc[2];
    FC_mul_mv_r2 = fc[3];
    FC_mul_mv_r3 = fc[4];
    FC_mul_mv_split = fc[5] != 0;
}

void lowbit_emu_arg_sizes(size_t *mul_mv, size_t *mul_mv_id) {
    *mul_mv = sizeof(ggml_metal_kargs_mul_mv);
    *mul_mv_id = sizeof(ggml_metal_kargs_mul_mv_id);
}

// 1 and the kernel's geometry (nsg, nr0, nr0 in split mode, threadgroup memory) if this build has it, else 0.
int lowbit_emu_geometry(const char *name, int out[4]) {
    const KernelEntry *k = find_kernel(name);
    if (!k) return 0;
    out[0] = k->nsg;
    out[1] = k->nr0;
    out[2] = k->nr0_split;
    out[3] = k->smem;
    return 1;
}

// Dispatches grid[0] x grid[1] x grid[2] threadgroups of (32, nsg, 1) threads with `smem` bytes of threadgroup
// memory (filled with 0xff bytes: a read before a write shows up as NaN). Returns 0, or -1 with a message in err.
int lowbit_emu_dispatch(const char *name, const void *args, const char *src0, const char *src1, char *dst,
                        const char *ids, const uint32_t grid[3], int nsg, size_t smem, char *err, size_t err_len) {
    const KernelEntry *k = find_kernel(name);
    MvCall call = k ? k->call : nullptr;
    auto fail = [&](const std::string &m) {
        std::snprintf(err, err_len, "%s", m.c_str());
        return -1;
    };
    if (!call) return fail(std::string("no kernel named ") + name);
    std::vector<char> shmem(smem ? smem : 1);
    for (uint32_t z = 0; z < grid[2]; ++z)
        for (uint32_t y = 0; y < grid[1]; ++y)
            for (uint32_t x = 0; x < grid[0]; ++x) {
                std::fill(shmem.begin(), shmem.end(), char(0xff));
                const uint3 tgpig(x, y, z);
                const std::string e = lowbit_emu::run_threadgroup(g_tg, nsg, [&](int tid) {
                    call(args, src0, src1, dst, ids, shmem.data(), tgpig, ushort(tid), ushort(tid % 32),
                         ushort(tid / 32));
                });
                if (!e.empty())
                    return fail(std::string(name) + " at threadgroup (" + std::to_string(x) + "," +
                                std::to_string(y) + "," + std::to_string(z) + "): " + e);
            }
    return 0;
}

} // extern "C"

#ifdef LOWBIT_VARIANT_PATCHED
// Our kernels' decode helpers, called on their own for the exhaustive decode tests.

// The decoder's tables staged as a kernel stages them: by the 32 threads of one simdgroup, then a barrier.
template <typename D> void lowbit_stage_iq_tables(char *shmem) {
    lowbit_emu::Threadgroup tg;
    const std::string e = lowbit_emu::run_threadgroup(tg, 1, [&](int tid) { D::stage(shmem, ushort(tid), 32); });
    if (!e.empty()) std::abort();
}

// Sub-block ib of one IQ block (fmt: 0 IQ2_XXS, 1 IQ2_XS, 2 IQ2_S, 3 IQ3_S) through the kernel's decoder and
// group dot: weight k is the group dot with the unit activation e_k, times the group's scale and the output
// scale, as the kernel applies them.
template <typename D> void iq_dequant_sub(const uint8_t *block, int ib, float out[32]) {
    typename D::block xb;
    std::memcpy(&xb, block, sizeof xb);
    // The decoder's tables, staged once.
    static const std::vector<char> shmem = [] {
        std::vector<char> t(512 * 8 + 128);
        lowbit_stage_iq_tables<D>(t.data());
        return t;
    }();
    lowbit_iq_sub sub;
    D::decode(xb, ib, const_cast<char *>(shmem.data()), sub);
    for (int l = 0; l < 4; ++l)
        for (int k = 0; k < 8; ++k) {
            float e[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            e[k] = 1.0f;
            const float w = lowbit_iq_group_dot(sub.g[l], sub.s[l], e);
            out[8 * l + k] = (l < 2 ? sub.d01 : sub.d23) * w * D::out_scale();
        }
}

extern "C" {

// sum_k code_k(b) * y[k] through the staged coefficients and the floor chain, as the Q2_0 kernel computes it.
float lowbit_emu_q2_0_byte_dot(uint8_t b, const float y[4]) {
    return lowbit_q2_0_byte_dot(b, lowbit_q2_0_stage(y[0], y[1], y[2], y[3]), 0.0f);
}

// The Q1_0 kernel's subset sum for nibble m of activations y[0..4].
float lowbit_emu_q1_0_nibble_sum(uint8_t m, const float y[4]) {
    lowbit_q1_0_table tab;
    lowbit_q1_0_stage(tab, y[0], y[1], y[2], y[3]);
    return tab.t[m & 15];
}

// sum_n digit_n(q) * y[n] through the staged coefficients and the base-3 floor chain of the PTQ1_0 kernel.
float lowbit_emu_ptq1_0_byte_dot(uint8_t q, const float y[5]) {
    return lowbit_ptq1_0_byte_dot(q, lowbit_ptq1_0_stage(y[0], y[1], y[2], y[3], y[4]), 0.0f);
}

// The kernels' decode of sub-block ib of one IQ block (see iq_dequant_sub).
int lowbit_emu_iq_dequant_sub(int fmt, const uint8_t *block, int ib, float out[32]) {
    switch (fmt) {
    case 0: iq_dequant_sub<lowbit_iq2_xxs_decoder>(block, ib, out); return 0;
    case 1: iq_dequant_sub<lowbit_iq2_xs_decoder>(block, ib, out); return 0;
    case 2: iq_dequant_sub<lowbit_iq2_s_decoder>(block, ib, out); return 0;
    case 3: iq_dequant_sub<lowbit_iq3_s_decoder>(block, ib, out); return 0;
    default: return -1;
    }
}

} // extern "C"
#endif
