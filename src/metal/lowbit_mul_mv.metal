// ggml-lowbit: mat-vec kernels for ggml-metal's low-bit formats, drop-in replacements for the pinned tree's
// kernel_mul_mv_{q1_0,q2_0,iq2_xxs,iq2_xs,iq2_s,iq3_s}_f32 (same names, arguments, function constants and dispatch
// geometry; the kernel_mul_mv_id_* forms instantiate these impls unchanged), plus kernels for PrismML's PQ2_0 and
// PTQ1_0. ggml-patch/metal.patch puts this file's text into kernels/mul_mv.metal in place of the stock
// definitions (and the part after the "after mul_mv.metal's own kernel_mul_mv_id instantiations" line at the end
// of that file); it relies on what mul_mv.metal has declared by then (ggml_metal_kargs_mul_mv, FC_mul_mv_*,
// N_R0_*/N_SG_*, N_SIMDWIDTH, FOR_UNROLL, ggml's IQ grid tables) and on nothing else.
//
// How each rewrite stays exact, and what it costs per weight against stock: docs/METAL.md.

// Block layouts, declared here under our own names (the same bytes as ggml's block_q2_0 / block_q1_0).
struct lowbit_block_q2_0 {
    half    d;      // scale
    uint8_t qs[16]; // 64 codes of 2 bits; code k of byte j is bits 2k..2k+1 (element 4j + k); weight (code-1)*d
};
static_assert(sizeof(lowbit_block_q2_0) == 18, "Q2_0 block is 18 bytes");

struct lowbit_block_q1_0 {
    half    d;      // scale
    uint8_t qs[16]; // 128 bits; bit k of byte j is element 8j + k; weight d if set, else -d
};
static_assert(sizeof(lowbit_block_q1_0) == 18, "Q1_0 block is 18 bytes");

// ---------------------------------------------------------------------------------------------------------------
// Where a simdgroup works, from ggml-metal's dispatch of these kernels: threadgroup (x, y, z) is (group of
// NSG*nr0 rows, src1 column, batch index), NSG = FC_mul_mv_nsg simdgroups of 32 lanes, nr0 rows each; batch z
// splits into (z % ne12, z / ne12), broadcast over src0 by the ratios r2, r3.
struct lowbit_mv_place {
    device const char  * w;    // this simdgroup's first weight row
    device const float * x;    // the activation column
    device       float * out;  // the output column
    int row0;                  // index of the first row
};

template<int nr0, typename args_t>
inline lowbit_mv_place lowbit_mv_locate(args_t args, device const char * src0, device const char * src1,
                                        device char * dst, uint3 tgpig, ushort sgitg) {
    const uint b2 = tgpig.z % FC_mul_mv_ne12;
    const uint b3 = tgpig.z / FC_mul_mv_ne12;
    lowbit_mv_place p;
    p.row0 = int(tgpig.x * FC_mul_mv_nsg + sgitg) * nr0;
    p.w   = src0 + uint64_t(p.row0) * args.nb01 + uint64_t(b2 / FC_mul_mv_r2) * args.nb02
               + uint64_t(b3 / FC_mul_mv_r3) * args.nb03;
    p.x   = (device const float *) (src1 + uint64_t(tgpig.y) * args.nb11 + uint64_t(b2) * args.nb12
               + uint64_t(b3) * args.nb13);
    p.out = (device float *) dst + (uint64_t(tgpig.z) * args.ne1 + tgpig.y) * args.ne0;
    return p;
}

// Sums each row's partials over the simdgroup; lane 0 writes the rows that exist.
template<int nr0, typename args_t>
inline void lowbit_mv_store(args_t args, lowbit_mv_place p, thread const float * partial, ushort tiisg) {
    for (short r = 0; r < nr0; ++r) {
        const float total = simd_sum(partial[r]);
        if (tiisg == 0 && p.row0 + r < args.ne01) {
            p.out[p.row0 + r] = total;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Q2_0: the floor chain. For a byte b = c0 + 4c1 + 16c2 + 64c3 (codes c_k in 0..3), g3 = floor(b/4),
// g2 = floor(b/16) and g1 = floor(b/64) are exact in fp32 (b < 256, the scales are powers of two), and
//     c0*y0 + c1*y1 + c2*y2 + c3*y3 = b*y0 + g3*(y1 - 4y0) + g2*(y2 - 4y1) + g1*(y3 - 4y2)
// (expand g3 = c1 + 4c2 + 16c3, g2 = c2 + 4c3, g1 = c3). The bracketed coefficients depend on the activations
// only, so a lane stages them once per block and reuses them for all nr0 rows: per byte one conversion, three
// scalings, three floors and four FMAs, no integer work (stock: per element two ands, two tests, two selects
// and two adds).

// The four staged coefficients of one byte's four activations.
struct lowbit_q2_0_coef {
    float4 c; // (y0, y1 - 4y0, y2 - 4y1, y3 - 4y2)
};

inline lowbit_q2_0_coef lowbit_q2_0_stage(float y0, float y1, float y2, float y3) {
    lowbit_q2_0_coef k;
    k.c = float4(y0, fma(-4.0f, y0, y1), fma(-4.0f, y1, y2), fma(-4.0f, y2, y3));
    return k;
}

// sum over the byte's four codes of code*y, through the floor chain.
inline float lowbit_q2_0_byte_dot(uint8_t b, lowbit_q2_0_coef k, float acc) {
    const float bf = float(b);
    const float g3 = floor(bf * 0.25f);
    const float g2 = floor(bf * 0.0625f);
    const float g1 = floor(bf * 0.015625f);
    acc = fma(bf, k.c[0], acc);
    acc = fma(g3, k.c[1], acc);
    acc = fma(g2, k.c[2], acc);
    acc = fma(g1, k.c[3], acc);
    return acc;
}

// Q2_0 (64 weights a block) and PrismML's PQ2_0 (128): the same codec, so one kernel shape. As stock's Q2_0
// kernel: each lane takes 16 weights (4 code bytes) of a block, QK/16 lanes a block, 32/(QK/16) blocks a step.
template<typename B, int QK, int nr0, typename args_t>
void lowbit_mul_mv_2bit_impl(
        args_t args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        uint3  tgpig,
        ushort tiisg,
        ushort sgitg) {
    const lowbit_mv_place p = lowbit_mv_locate<nr0, args_t>(args, src0, src1, dst, tgpig, sgitg);
    const int nb = args.ne00/QK;

    device const B * rows[nr0];
    for (short r = 0; r < nr0; ++r) {
        rows[r] = (device const B *) (p.w + uint64_t(r) * args.nb01);
    }

    float sumf[nr0] = {0.f};

    constexpr short lanes_per_block = QK/16;
    const short ix = tiisg / lanes_per_block;
    const short iq = tiisg % lanes_per_block;

    device const float * yb = p.x + ix*QK + iq*16;

    for (int ib = ix; ib < nb; ib += N_SIMDWIDTH/lanes_per_block) {
        lowbit_q2_0_coef k[4];
        float sumy = 0.f;
        FOR_UNROLL (short j = 0; j < 4; j++) {
            k[j] = lowbit_q2_0_stage(yb[4*j + 0], yb[4*j + 1], yb[4*j + 2], yb[4*j + 3]);
            sumy += (yb[4*j + 0] + yb[4*j + 1]) + (yb[4*j + 2] + yb[4*j + 3]);
        }

        FOR_UNROLL (short row = 0; row < nr0; row++) {
            device const B & xb = rows[row][ib];
            float acc = 0.f;
            FOR_UNROLL (short j = 0; j < 4; j++) {
                acc = lowbit_q2_0_byte_dot(xb.qs[iq*4 + j], k[j], acc);
            }
            // codes are offset by one: sum (c-1)*y = sum c*y - sum y
            sumf[row] = fma(float(xb.d), acc - sumy, sumf[row]);
        }

        yb += QK * (N_SIMDWIDTH/lanes_per_block);
    }

    lowbit_mv_store<nr0, args_t>(args, p, sumf, tiisg);
}

template<int nr0, typename args_t>
void kernel_mul_mv_q2_0_f32_impl(
        args_t args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        threadgroup  char * shmem,
        uint3  tgpig,
        ushort tiisg,
        ushort sgitg) {
    lowbit_mul_mv_2bit_impl<lowbit_block_q2_0, 64, nr0, args_t>(args, src0, src1, dst, tgpig, tiisg, sgitg);
}

[[host_name("kernel_mul_mv_q2_0_f32")]]
kernel void kernel_mul_mv_q2_0_f32(
        constant ggml_metal_kargs_mul_mv & args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        uint3  tgpig[[threadgroup_position_in_grid]],
        ushort tiisg[[thread_index_in_simdgroup]],
        ushort sgitg[[simdgroup_index_in_threadgroup]]) {
    kernel_mul_mv_q2_0_f32_impl<N_R0_Q2_0, constant ggml_metal_kargs_mul_mv &>(args, src0, src1, dst, nullptr, tgpig, tiisg, sgitg);
}

// ---------------------------------------------------------------------------------------------------------------
// Q1_0: nibble tables. A lane's 16 activations form four groups of four; for each group the 16 subset sums
// (t[m] = sum of y_k over the set bits k of m) take 11 additions, staged once per block and shared by all nr0
// rows. A row then costs, per nibble of weight bits, one extraction, one table read and one addition (stock: per
// element one and, one test, one select and one addition). The subset sums reassociate the additions of the
// set activations (as a GPU reduction does anyway); the result keeps stock's form d * (2*acc - sumy).

struct lowbit_q1_0_table {
    float t[16];
};

inline void lowbit_q1_0_stage(thread lowbit_q1_0_table & tab, float y0, float y1, float y2, float y3) {
    tab.t[0]  = 0.0f;
    tab.t[1]  = y0;
    tab.t[2]  = y1;
    tab.t[3]  = y0 + y1;
    tab.t[4]  = y2;
    tab.t[5]  = y2 + y0;
    tab.t[6]  = y2 + y1;
    tab.t[7]  = y2 + tab.t[3];
    FOR_UNROLL (short m = 0; m < 8; m++) {
        tab.t[8 + m] = y3 + tab.t[m];
    }
}

template<int nr0, typename args_t>
void kernel_mul_mv_q1_0_f32_impl(
        args_t args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        threadgroup  char * shmem,
        uint3  tgpig,
        ushort tiisg,
        ushort sgitg) {
    const lowbit_mv_place p = lowbit_mv_locate<nr0, args_t>(args, src0, src1, dst, tgpig, sgitg);
    const int nb = args.ne00/128;

    device const lowbit_block_q1_0 * rows[nr0];
    for (short r = 0; r < nr0; ++r) {
        rows[r] = (device const lowbit_block_q1_0 *) (p.w + uint64_t(r) * args.nb01);
    }

    float sumf[nr0] = {0.f};

    // As stock: eight lanes share a block, each takes 16 elements (2 bytes); 4 blocks per simdgroup step.
    const short ix = tiisg/8;
    const short iq = tiisg%8;

    device const float * yb = p.x + ix*128 + iq*16;

    for (int ib = ix; ib < nb; ib += N_SIMDWIDTH/8) {
        lowbit_q1_0_table tab[4];
        float sumy = 0.f;
        FOR_UNROLL (short j = 0; j < 4; j++) {
            lowbit_q1_0_stage(tab[j], yb[4*j + 0], yb[4*j + 1], yb[4*j + 2], yb[4*j + 3]);
            sumy += tab[j].t[15];
        }

        FOR_UNROLL (short row = 0; row < nr0; row++) {
            device const lowbit_block_q1_0 & xb = rows[row][ib];
            const uint8_t b0 = xb.qs[iq*2 + 0];
            const uint8_t b1 = xb.qs[iq*2 + 1];
            const float acc = (tab[0].t[b0 & 15] + tab[1].t[b0 >> 4]) + (tab[2].t[b1 & 15] + tab[3].t[b1 >> 4]);
            sumf[row] = fma(float(xb.d), fma(2.0f, acc, -sumy), sumf[row]);
        }

        yb += 128 * (N_SIMDWIDTH/8);
    }

    lowbit_mv_store<nr0, args_t>(args, p, sumf, tiisg);
}

[[host_name("kernel_mul_mv_q1_0_f32")]]
kernel void kernel_mul_mv_q1_0_f32(
        constant ggml_metal_kargs_mul_mv & args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        uint3  tgpig[[threadgroup_position_in_grid]],
        ushort tiisg[[thread_index_in_simdgroup]],
        ushort sgitg[[simdgroup_index_in_threadgroup]]) {
    kernel_mul_mv_q1_0_f32_impl<N_R0_Q1_0, constant ggml_metal_kargs_mul_mv &>(args, src0, src1, dst, nullptr, tgpig, tiisg, sgitg);
}

// ---------------------------------------------------------------------------------------------------------------
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_S: one kernel shape, four decoders. Each 32-weight sub-block is four groups of 8
// weights: 8 grid magnitudes (bytes of one 8-byte grid entry, or of two 4-byte IQ3_S entries) and 8 sign bits.
// Stock multiplies every weight by a float sign, select(1, -1, signs & mask): per weight a conversion, two
// multiplies, a test, a select and an add. Here the signs go into the magnitude bytes, four at a time, in integer
// arithmetic: the four sign bits of a nibble spread to bit 0 of four bytes with one multiply
// (b0 + b1*2^7 + b2*2^14 + b3*2^21 puts bit k at bit 8k, and nothing else lands on a byte's bit 0), each
// marked byte is negated as (g ^ 0xff) + 1 (no carry leaves a byte: grid magnitudes are never 0), and the four
// signed bytes convert to float together: per weight about one and a half integer ops, a conversion and an FMA.
// Exact: every magnitude times ±1 is an exact small integer either way; only the order of the float additions
// differs from stock (as a GPU reduction's does).

struct lowbit_block_iq2_xxs {
    half     d;
    uint16_t qs[32]; // per 32 weights: 4 grid indices (bytes), then 4 x 7-bit sign indices and a 4-bit scale
};
static_assert(sizeof(lowbit_block_iq2_xxs) == 66, "IQ2_XXS block is 66 bytes");

struct lowbit_block_iq2_xs {
    half     d;
    uint16_t qs[32];    // per 8 weights: 9-bit grid index, 7-bit sign index
    uint8_t  scales[8]; // per 16 weights: 4 bits
};
static_assert(sizeof(lowbit_block_iq2_xs) == 74, "IQ2_XS block is 74 bytes");

struct lowbit_block_iq2_s {
    half    d;
    uint8_t qs[64];    // 32 low bytes of the 10-bit grid indices, then 32 sign bytes
    uint8_t qh[8];     // high 2 bits of the indices, per 32 weights
    uint8_t scales[8]; // per 16 weights: 4 bits
};
static_assert(sizeof(lowbit_block_iq2_s) == 82, "IQ2_S block is 82 bytes");

struct lowbit_block_iq3_s {
    half    d;
    uint8_t qs[64];    // low bytes of the 9-bit grid indices (4 weights each)
    uint8_t qh[8];     // their high bits, per 32 weights
    uint8_t signs[32]; // per 8 weights
    uint8_t scales[4]; // per 32 weights: 4 bits
};
static_assert(sizeof(lowbit_block_iq3_s) == 110, "IQ3_S block is 110 bytes");

// One row's 32-weight sub-block, decoded: group l's magnitudes (bytes in weight order), sign bits (bit k =
// weight k), and the scales of groups 0-1 and 2-3.
struct lowbit_iq_sub {
    uint2 g[4];
    uint  s[4];
    float d01;
    float d23;
};

// sum over the group's 8 weights of (sign ? -g : g) * y.
inline float lowbit_iq_group_dot(uint2 g, uint s, thread const float * y) {
    const uint m0 = ((s & 15u) * 0x00204081u) & 0x01010101u;
    const uint m1 = ((s >> 4) * 0x00204081u) & 0x01010101u;
    const float4 w0 = float4(as_type<char4>((g.x ^ (m0 * 255u)) + m0));
    const float4 w1 = float4(as_type<char4>((g.y ^ (m1 * 255u)) + m1));
    float acc = w0[0] * y[0];
    acc = fma(w0[1], y[1], acc);
    acc = fma(w0[2], y[2], acc);
    acc = fma(w0[3], y[3], acc);
    acc = fma(w1[0], y[4], acc);
    acc = fma(w1[1], y[5], acc);
    acc = fma(w1[2], y[6], acc);
    acc = fma(w1[3], y[7], acc);
    return acc;
}

// The grids the decoders read from threadgroup memory (as stock does, in the same layout and size that
// ggml-metal reserves for these kernels), copied by all threads of the threadgroup before a barrier.
template<typename T, typename U>
inline void lowbit_stage_table(threadgroup T * to, constant U * from, int n, ushort tid, short nthreads) {
    for (int i = tid; i < n; i += nthreads) {
        to[i] = from[i];
    }
}

struct lowbit_iq2_xxs_decoder {
    typedef lowbit_block_iq2_xxs block;
    static float out_scale() { return 0.25f; }
    static void stage(threadgroup char * shmem, ushort tid, short nthreads) {
        lowbit_stage_table((threadgroup uint64_t *) shmem, iq2xxs_grid, 256, tid, nthreads);
        lowbit_stage_table((threadgroup uint8_t *) shmem + 256*8, ksigns_iq2xs, 128, tid, nthreads);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    static void decode(device const block & xb, int ib, threadgroup const char * shmem, thread lowbit_iq_sub & o) {
        threadgroup const uint64_t * grid  = (threadgroup const uint64_t *) shmem;
        threadgroup const uint8_t  * signs = (threadgroup const uint8_t  *) shmem + 256*8;
        device const uint16_t * q = xb.qs + 4*ib;
        const uint idx = q[0] | (uint(q[1]) << 16);
        const uint aux = q[2] | (uint(q[3]) << 16);
        FOR_UNROLL (short l = 0; l < 4; ++l) {
            o.g[l] = as_type<uint2>(grid[(idx >> 8*l) & 255]);
            o.s[l] = signs[(aux >> 7*l) & 127];
        }
        o.d01 = float(xb.d) * (0.5f + float(aux >> 28));
        o.d23 = o.d01;
    }
};

struct lowbit_iq2_xs_decoder {
    typedef lowbit_block_iq2_xs block;
    static float out_scale() { return 0.25f; }
    static void stage(threadgroup char * shmem, ushort tid, short nthreads) {
        lowbit_stage_table((threadgroup uint64_t *) shmem, iq2xs_grid, 512, tid, nthreads);
        lowbit_stage_table((threadgroup uint8_t *) shmem + 512*8, ksigns_iq2xs, 128, tid, nthreads);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    static void decode(device const block & xb, int ib, threadgroup const char * shmem, thread lowbit_iq_sub & o) {
        threadgroup const uint64_t * grid  = (threadgroup const uint64_t *) shmem;
        threadgroup const uint8_t  * signs = (threadgroup const uint8_t  *) shmem + 512*8;
        device const uint16_t * q = xb.qs + 4*ib;
        FOR_UNROLL (short l = 0; l < 4; ++l) {
            o.g[l] = as_type<uint2>(grid[q[l] & 511]);
            o.s[l] = signs[q[l] >> 9];
        }
        const float d = xb.d;
        const uint8_t sc = xb.scales[ib];
        o.d01 = d * (0.5f + float(sc & 15));
        o.d23 = d * (0.5f + float(sc >> 4));
    }
};

struct lowbit_iq2_s_decoder {
    typedef lowbit_block_iq2_s block;
    static float out_scale() { return 0.25f; }
    // stock reads this grid (1024 entries) from constant memory and ggml-metal reserves no threadgroup memory
    static void stage(threadgroup char *, ushort, short) {}
    static void decode(device const block & xb, int ib, threadgroup const char *, thread lowbit_iq_sub & o) {
        device const uint8_t * qs = xb.qs + 4*ib;
        const uint qh = xb.qh[ib];
        FOR_UNROLL (short l = 0; l < 4; ++l) {
            o.g[l] = as_type<uint2>(iq2s_grid[qs[l] | ((qh << (8 - 2*l)) & 0x300)]);
            o.s[l] = qs[32 + l];
        }
        const float d = xb.d;
        const uint8_t sc = xb.scales[ib];
        o.d01 = d * (0.5f + float(sc & 15));
        o.d23 = d * (0.5f + float(sc >> 4));
    }
};

struct lowbit_iq3_s_decoder {
    typedef lowbit_block_iq3_s block;
    static float out_scale() { return 1.0f; }
    static void stage(threadgroup char * shmem, ushort tid, short nthreads) {
        lowbit_stage_table((threadgroup uint32_t *) shmem, iq3s_grid, 512, tid, nthreads);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    static void decode(device const block & xb, int ib, threadgroup const char * shmem, thread lowbit_iq_sub & o) {
        threadgroup const uint32_t * grid = (threadgroup const uint32_t *) shmem;
        device const uint8_t * qs = xb.qs + 8*ib;
        const uint qh = xb.qh[ib];
        FOR_UNROLL (short l = 0; l < 4; ++l) {
            o.g[l] = uint2(grid[qs[2*l + 0] | ((qh << (8 - 2*l)) & 256)],
                           grid[qs[2*l + 1] | ((qh << (7 - 2*l)) & 256)]);
            o.s[l] = xb.signs[4*ib + l];
        }
        o.d01 = float(xb.d) * float(1 + 2*((xb.scales[ib/2] >> 4*(ib%2)) & 15));
        o.d23 = o.d01;
    }
};

// The shape stock's IQ kernels share: lanes stride over 32-weight sub-blocks, each doing all nr0 rows; with
// FC_mul_mv_split (ggml-metal sets it for rows of fewer than 32 sub-blocks that divide 32) one row's sub-blocks
// take nsub lanes and the 32/nsub groups of lanes share out the rows.
template<typename D, int nr0, typename args_t>
void lowbit_mul_mv_iq_impl(
        args_t args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        threadgroup  char * shmem,
        uint3  tgpig,
        ushort tiisg,
        ushort sgitg) {
    const lowbit_mv_place p = lowbit_mv_locate<nr0, args_t>(args, src0, src1, dst, tgpig, sgitg);
    D::stage(shmem, 32*sgitg + tiisg, 32*FC_mul_mv_nsg);

    const int   nsub  = args.ne00/32;
    const short lanes = FC_mul_mv_split ? nsub : 32;
    const short ix    = tiisg % lanes;
    const short grp   = tiisg / lanes;
    const short ngrp  = 32 / lanes;
    const short rbeg  = (nr0 * grp) / ngrp;
    const short rend  = (nr0 * (grp + 1)) / ngrp;

    float sumf[nr0] = {0.f};

    for (int is = ix; is < nsub; is += lanes) {
        float yl[32];
        device const float * ys = p.x + 32*is;
        FOR_UNROLL (short i = 0; i < 32; ++i) {
            yl[i] = ys[i];
        }
        const int ibl = is / 8;
        const int ib  = is % 8;
        for (short r = rbeg; r < rend; ++r) {
            device const typename D::block & xb =
                ((device const typename D::block *) (p.w + uint64_t(r) * args.nb01))[ibl];
            lowbit_iq_sub sub;
            D::decode(xb, ib, shmem, sub);
            float s[4];
            FOR_UNROLL (short l = 0; l < 4; ++l) {
                s[l] = lowbit_iq_group_dot(sub.g[l], sub.s[l], yl + 8*l);
            }
            sumf[r] = fma(sub.d01, s[0] + s[1], fma(sub.d23, s[2] + s[3], sumf[r]));
        }
    }

    for (short r = 0; r < nr0 && p.row0 + r < args.ne01; ++r) {
        const float total = simd_sum(sumf[r]);
        if (tiisg == 0) {
            p.out[p.row0 + r] = total * D::out_scale();
        }
    }
}

// ggml-metal's names: <type>_impl<nr0> (our shape over the type's decoder) and <type>_disp choosing nr0 by
// FC_mul_mv_split (the kernel_mul_mv_id_* instantiations use it); the kernels follow.
#define LOWBIT_IQ_KERNEL(NAME, DECODER, NR0, NR0_SPLIT)                                                           \
template<int nr0, typename args_t>                                                                                \
void kernel_mul_mv_##NAME##_f32_impl(args_t args, device const char * src0, device const char * src1,            \
        device char * dst, threadgroup char * shmem, uint3 tgpig, ushort tiisg, ushort sgitg) {                 \
    lowbit_mul_mv_iq_impl<DECODER, nr0, args_t>(args, src0, src1, dst, shmem, tgpig, tiisg, sgitg);              \
}                                                                                                                 \
template<typename args_t>                                                                                         \
void kernel_mul_mv_##NAME##_f32_disp(args_t args, device const char * src0, device const char * src1,            \
        device char * dst, threadgroup char * shmem, uint3 tgpig, ushort tiisg, ushort sgitg) {                 \
    if (FC_mul_mv_split) {                                                                                        \
        kernel_mul_mv_##NAME##_f32_impl<NR0_SPLIT, args_t>(args, src0, src1, dst, shmem, tgpig, tiisg, sgitg);   \
    } else {                                                                                                      \
        kernel_mul_mv_##NAME##_f32_impl<NR0, args_t>(args, src0, src1, dst, shmem, tgpig, tiisg, sgitg);         \
    }                                                                                                             \
}

LOWBIT_IQ_KERNEL(iq2_xxs, lowbit_iq2_xxs_decoder, N_R0_IQ2_XXS, N_R0_IQ2_XXS_SPLIT)
LOWBIT_IQ_KERNEL(iq2_xs,  lowbit_iq2_xs_decoder,  N_R0_IQ2_XS,  N_R0_IQ2_XS_SPLIT)
LOWBIT_IQ_KERNEL(iq2_s,   lowbit_iq2_s_decoder,   N_R0_IQ2_S,   N_R0_IQ2_S_SPLIT)
LOWBIT_IQ_KERNEL(iq3_s,   lowbit_iq3_s_decoder,   N_R0_IQ3_S,   N_R0_IQ3_S_SPLIT)

#undef LOWBIT_IQ_KERNEL

[[host_name("kernel_mul_mv_iq2_xxs_f32")]]
kernel void kernel_mul_mv_iq2_xxs_f32(
        constant ggml_metal_kargs_mul_mv & args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        threadgroup  char * shmem [[threadgroup(0)]],
        uint3  tgpig[[threadgroup_position_in_grid]],
        ushort tiisg[[thread_index_in_simdgroup]],
        ushort sgitg[[simdgroup_index_in_threadgroup]]) {
    kernel_mul_mv_iq2_xxs_f32_disp<constant ggml_metal_kargs_mul_mv &>(args, src0, src1, dst, shmem, tgpig, tiisg, sgitg);
}

[[host_name("kernel_mul_mv_iq2_xs_f32")]]
kernel void kernel_mul_mv_iq2_xs_f32(
        constant ggml_metal_kargs_mul_mv & args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        threadgroup  char * shmem [[threadgroup(0)]],
        uint3  tgpig[[threadgroup_position_in_grid]],
        ushort tiisg[[thread_index_in_simdgroup]],
        ushort sgitg[[simdgroup_index_in_threadgroup]]) {
    kernel_mul_mv_iq2_xs_f32_disp<constant ggml_metal_kargs_mul_mv &>(args, src0, src1, dst, shmem, tgpig, tiisg, sgitg);
}

[[host_name("kernel_mul_mv_iq2_s_f32")]]
kernel void kernel_mul_mv_iq2_s_f32(
        constant ggml_metal_kargs_mul_mv & args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        threadgroup  char * shmem [[threadgroup(0)]],
        uint3  tgpig[[threadgroup_position_in_grid]],
        ushort tiisg[[thread_index_in_simdgroup]],
        ushort sgitg[[simdgroup_index_in_threadgroup]]) {
    kernel_mul_mv_iq2_s_f32_disp<constant ggml_metal_kargs_mul_mv &>(args, src0, src1, dst, shmem, tgpig, tiisg, sgitg);
}

[[host_name("kernel_mul_mv_iq3_s_f32")]]
kernel void kernel_mul_mv_iq3_s_f32(
        constant ggml_metal_kargs_mul_mv & args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        threadgroup  char * shmem [[threadgroup(0)]],
        uint3  tgpig[[threadgroup_position_in_grid]],
        ushort tiisg[[thread_index_in_simdgroup]],
        ushort sgitg[[simdgroup_index_in_threadgroup]]) {
    kernel_mul_mv_iq3_s_f32_disp<constant ggml_metal_kargs_mul_mv &>(args, src0, src1, dst, shmem, tgpig, tiisg, sgitg);
}

// ---------------------------------------------------------------------------------------------------------------
// PrismML's formats (its llama.cpp fork; the pinned tree has no host code for them, so ggml-metal there never
// dispatches these: they are for the fork's ggml-metal, with the geometry of the Q2_0/Q1_0 kernels).

#ifndef N_R0_PQ2_0
#define N_R0_PQ2_0 8
#define N_SG_PQ2_0 2
#endif
#ifndef N_R0_PTQ1_0
#define N_R0_PTQ1_0 8
#define N_SG_PTQ1_0 2
#endif

struct lowbit_block_pq2_0 {
    half    d;      // scale
    uint8_t qs[32]; // 128 codes of 2 bits, as Q2_0
};
static_assert(sizeof(lowbit_block_pq2_0) == 34, "PQ2_0 block is 34 bytes");

template<int nr0, typename args_t>
void kernel_mul_mv_pq2_0_f32_impl(
        args_t args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        threadgroup  char * shmem,
        uint3  tgpig,
        ushort tiisg,
        ushort sgitg) {
    lowbit_mul_mv_2bit_impl<lowbit_block_pq2_0, 128, nr0, args_t>(args, src0, src1, dst, tgpig, tiisg, sgitg);
}

[[host_name("kernel_mul_mv_pq2_0_f32")]]
kernel void kernel_mul_mv_pq2_0_f32(
        constant ggml_metal_kargs_mul_mv & args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        uint3  tgpig[[threadgroup_position_in_grid]],
        ushort tiisg[[thread_index_in_simdgroup]],
        ushort sgitg[[simdgroup_index_in_threadgroup]]) {
    kernel_mul_mv_pq2_0_f32_impl<N_R0_PQ2_0, constant ggml_metal_kargs_mul_mv &>(args, src0, src1, dst, nullptr, tgpig, tiisg, sgitg);
}

// PTQ1_0: 128 trits a block, five to a byte (`reference/formats.md` §3 gives the order): qs[0..16] hold weights
// m + 16n (digit n of byte m), qs[16..24] weights 80 + m + 8n, qh[0..2] weights 120 + 2n + h (digits 0..3).
// Digit n of byte q is t_n = G_{n+1} - 3 G_n with G_k = floor(q 3^k / 256) (G_0 = 0): the fork's
// ((uint8)(q 3^n) * 3) >> 8, since (q 3^n) mod 256 = q 3^n - 256 G_n. So the base-3 floor chain
//     t_0 y_0 + ... + t_4 y_4 = G_1 (y_0 - 3y_1) + G_2 (y_1 - 3y_2) + G_3 (y_2 - 3y_3) + G_4 (y_3 - 3y_4) + G_5 y_4,
// with q 3^k < 2^16 and the scale 3^k/256 exact in fp32, so every G_k is exact: five floors and five FMAs per
// byte, coefficients staged once per block for all rows (a qh byte uses the same chain with y_4 = 0).
struct lowbit_block_ptq1_0 {
    uint8_t qs[24];
    uint8_t qh[2];
    half    d;      // scale, last
};
static_assert(sizeof(lowbit_block_ptq1_0) == 28, "PTQ1_0 block is 28 bytes");

struct lowbit_ptq1_0_coef {
    float c[5]; // (y0 - 3y1, y1 - 3y2, y2 - 3y3, y3 - 3y4, y4)
};

inline lowbit_ptq1_0_coef lowbit_ptq1_0_stage(float y0, float y1, float y2, float y3, float y4) {
    lowbit_ptq1_0_coef k;
    k.c[0] = fma(-3.0f, y1, y0);
    k.c[1] = fma(-3.0f, y2, y1);
    k.c[2] = fma(-3.0f, y3, y2);
    k.c[3] = fma(-3.0f, y4, y3);
    k.c[4] = y4;
    return k;
}

// sum over the byte's five digits of digit*y, through the base-3 floor chain.
inline float lowbit_ptq1_0_byte_dot(uint8_t q, lowbit_ptq1_0_coef k, float acc) {
    const float qf = float(q);
    acc = fma(floor(qf * ( 3.0f/256.0f)), k.c[0], acc);
    acc = fma(floor(qf * ( 9.0f/256.0f)), k.c[1], acc);
    acc = fma(floor(qf * (27.0f/256.0f)), k.c[2], acc);
    acc = fma(floor(qf * (81.0f/256.0f)), k.c[3], acc);
    acc = fma(floor(qf * (243.0f/256.0f)), k.c[4], acc);
    return acc;
}

template<int nr0, typename args_t>
void kernel_mul_mv_ptq1_0_f32_impl(
        args_t args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        threadgroup  char * shmem,
        uint3  tgpig,
        ushort tiisg,
        ushort sgitg) {
    const lowbit_mv_place p = lowbit_mv_locate<nr0, args_t>(args, src0, src1, dst, tgpig, sgitg);
    const int nb = args.ne00/128;

    device const lowbit_block_ptq1_0 * rows[nr0];
    for (short r = 0; r < nr0; ++r) {
        rows[r] = (device const lowbit_block_ptq1_0 *) (p.w + uint64_t(r) * args.nb01);
    }

    float sumf[nr0] = {0.f};

    // Eight lanes a block: lane il takes qs bytes 2il and 2il+1 of the first stage, qs byte 16+il of the second,
    // and (lanes 0 and 1) qh byte il; 4 blocks a step. The other lanes run the qh chain with zero coefficients.
    const short ix = tiisg/8;
    const short il = tiisg%8;
    const bool  qh_lane = il < 2;

    for (int ib = ix; ib < nb; ib += N_SIMDWIDTH/8) {
        device const float * yb = p.x + ib*128;
        lowbit_ptq1_0_coef k[4];
        float sumy = 0.f;
        FOR_UNROLL (short j = 0; j < 2; j++) {
            const short m = 2*il + j;
            k[j] = lowbit_ptq1_0_stage(yb[m], yb[m + 16], yb[m + 32], yb[m + 48], yb[m + 64]);
            sumy += (yb[m] + yb[m + 16]) + (yb[m + 32] + yb[m + 48]) + yb[m + 64];
        }
        {
            device const float * y2 = yb + 80 + il;
            k[2] = lowbit_ptq1_0_stage(y2[0], y2[8], y2[16], y2[24], y2[32]);
            sumy += (y2[0] + y2[8]) + (y2[16] + y2[24]) + y2[32];
        }
        {
            device const float * yh = yb + 120 + (il & 1);
            const float h0 = select(0.0f, yh[0], qh_lane);
            const float h1 = select(0.0f, yh[2], qh_lane);
            const float h2 = select(0.0f, yh[4], qh_lane);
            const float h3 = select(0.0f, yh[6], qh_lane);
            k[3] = lowbit_ptq1_0_stage(h0, h1, h2, h3, 0.0f);
            sumy += (h0 + h1) + (h2 + h3);
        }

        FOR_UNROLL (short row = 0; row < nr0; row++) {
            device const lowbit_block_ptq1_0 & xb = rows[row][ib];
            float acc = 0.f;
            acc = lowbit_ptq1_0_byte_dot(xb.qs[2*il + 0], k[0], acc);
            acc = lowbit_ptq1_0_byte_dot(xb.qs[2*il + 1], k[1], acc);
            acc = lowbit_ptq1_0_byte_dot(xb.qs[16 + il], k[2], acc);
            acc = lowbit_ptq1_0_byte_dot(xb.qh[il & 1], k[3], acc);
            // trits are offset by one: sum (t-1)*y = sum t*y - sum y
            sumf[row] = fma(float(xb.d), acc - sumy, sumf[row]);
        }
    }

    lowbit_mv_store<nr0, args_t>(args, p, sumf, tiisg);
}

[[host_name("kernel_mul_mv_ptq1_0_f32")]]
kernel void kernel_mul_mv_ptq1_0_f32(
        constant ggml_metal_kargs_mul_mv & args,
        device const char * src0,
        device const char * src1,
        device       char * dst,
        uint3  tgpig[[threadgroup_position_in_grid]],
        ushort tiisg[[thread_index_in_simdgroup]],
        ushort sgitg[[simdgroup_index_in_threadgroup]]) {
    kernel_mul_mv_ptq1_0_f32_impl<N_R0_PTQ1_0, constant ggml_metal_kargs_mul_mv &>(args, src0, src1, dst, nullptr, tgpig, tiisg, sgitg);
}

// ---- ggml-lowbit: after mul_mv.metal's own kernel_mul_mv_id instantiations ----
// (The patch puts what follows at the end of mul_mv.metal, where kernel_mul_mv_id and kernel_mul_mv_id_t exist.)
template [[host_name("kernel_mul_mv_id_pq2_0_f32")]]  kernel kernel_mul_mv_id_t kernel_mul_mv_id<mmv_fn<kernel_mul_mv_pq2_0_f32_impl<N_R0_PQ2_0>>>;
template [[host_name("kernel_mul_mv_id_ptq1_0_f32")]] kernel kernel_mul_mv_id_t kernel_mul_mv_id<mmv_fn<kernel_mul_mv_ptq1_0_f32_impl<N_R0_PTQ1_0>>>;
