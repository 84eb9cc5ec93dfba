/* check.cpp - wtypes.cuh's device functions run on the host (stubs.h) against the CPU
 * reference of every type the upload repacks: rows quantized by quant/'s from_f32, each
 * file block through repack_block, then every element through elem (must equal to_f32),
 * every chunk through chunk_scale + chunk_dot (vs the dot in doubles), for the types of
 * cuda_wtype_int8_dot through chunk_isum (Q8_0, Q4_0) or chunk_qsum (the K types) with x
 * quantized per block of 32 (vs the dot of the quantized x in doubles), for the types of
 * cuda_wtype_int8_mma the int8 mma's lanes (mma_word, mmq.cu's layout of k), and every
 * 16 elements through gemm_load + gemm_half (vs to_f32 rounded to F16). A check of the
 * device layouts and their repack without a GPU; the kernels themselves are tested on
 * the GPU by tests/unit/test_cuda.c. Built and run by run.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <vector>
extern "C" {
#include "quant/types.h"
}
#include "wtypes_host.h" /* made by run.sh */

static uint64_t st = 88172645463325252ull;
static float rndf() { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return (float)((st >> 11) & 0xffffff) / 8388608.0f - 1.0f; }

template <int WT> static int check(int n_out, int n_in) {
    const er_type_traits *tr = er_type_get(0);
    for (uint32_t t = 0; t < 40; t++) if (cuda_wtype_from_er(t) == WT) tr = er_type_get(t);
    const size_t row = er_type_row_size(tr, n_in);
    std::vector<float> f((size_t)n_out * n_in), ref((size_t)n_out * n_in), x(n_in);
    for (auto &v : f) v = rndf() * (1.0f + 3 * (rndf() > 0.9f));
    for (auto &v : x) v = rndf();
    std::vector<uint8_t> raw(row * n_out);
    for (int r = 0; r < n_out; r++) { tr->from_f32(&f[(size_t)r * n_in], &raw[r * row], n_in); tr->to_f32(&raw[r * row], &ref[(size_t)r * n_in], n_in); }
    const size_t rb = cuda_row_bytes(WT, n_in), sb = cuda_scale_row_bytes(WT, n_in);
    std::vector<uint8_t> qs(rb * n_out + 16, 0xAA); std::vector<uint16_t> d((sb * n_out) / 2 + 8, 0xAAAA);
    const int64_t nb = (int64_t)n_out * n_in / cuda_wtype_block(WT);
    for (int64_t b = 0; b < nb; b++) repack_block<WT>(&raw[b * cuda_wtype_repack_bytes(WT)], b, qs.data(), d.data());
    double e_elem = 0, e_dot = 0, e_i8 = 0, e_mma = 0, e_gemm = 0, vmax = 0;
    constexpr int CE = CHUNK_ELEMS(WT);
    /* x quantized per block of 32 as matvec.cu's quantize_input (quant8_f32) */
    std::vector<int8_t> xq(n_in); std::vector<float> xd(n_in / 32); std::vector<int> xsum(n_in / 32);
    for (int b = 0; b < n_in / 32; b++) {
        float amax = 0; for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        const float id = amax > 0 ? 127.0f / amax : 0.0f; xd[b] = amax / 127.0f; xsum[b] = 0;
        for (int j = 0; j < 32; j++) { xq[32 * b + j] = (int8_t)fminf(127.0f, fmaxf(-127.0f, rintf(x[32 * b + j] * id))); xsum[b] += xq[32 * b + j]; }
    }
    for (int r = 0; r < n_out; r++) {
        const uint8_t *w_row = qs.data() + r * rb; const __half *d_row = (const __half *)(d.data()) + r * (sb / 2);
        double dref = 0, dsum = 0, mag = 0, dref8 = 0, dsum8 = 0, mag8 = 0;
        for (int i = 0; i < n_in; i++) {
            const double v = ref[(size_t)r * n_in + i]; vmax = fmax(vmax, fabs(v));
            e_elem = fmax(e_elem, fabs(elem<WT>(w_row, d_row, i) - v));
            dref += v * x[i]; mag += fabs(v * x[i]);
            dref8 += v * xq[i] * xd[i / 32]; mag8 += fabs(v * xq[i] * xd[i / 32]);
        }
        for (int c = 0; c < n_in / CE; c++) {
            uint4 v; memcpy(&v, w_row + 16 * c, 16);
            float4 xv[CE / 4]; memcpy(xv, &x[c * CE], sizeof xv);
            dsum += chunk_dot<WT>(v, chunk_scale<WT>(d_row, c), xv);
            if constexpr (cuda_wtype_int8_one_scale(WT)) {
                int4 q[2]; memcpy(q, &xq[c * CE], CE); /* the chunk's 16 or 32 quants */
                const int b = c * CE / 32;
                dsum8 += (float)chunk_isum<WT>(v, q, xsum[b]) * (chunk_scale<WT>(d_row, c).d[0] * xd[b]);
            } else if constexpr (cuda_wtype_int8_dot(WT)) { /* the K types: a chunk is a block */
                int4 q[2]; memcpy(q, &xq[c * CE], CE);
                dsum8 += chunk_qsum<WT>(v, chunk_scale<WT>(d_row, c), q, xsum[c]) * xd[c];
            }
        }
        if constexpr (cuda_wtype_int8_mma(WT)) {
            /* mmq.cu's integer products of this row with one token, lane by lane: lane c's A
             * words (mma_word, from its 8 bytes of the block) at k 4c.. and 16 + 4c.., X's
             * bytes 8c..8c+3 and 8c+4..8c+7 at the same k (its staging); Q6_K one sum per
             * group (lanes c < 2, c >= 2), Q4_K and Q5_K the quants' sum for their offset */
            constexpr int BB = (int)cuda_row_bytes(WT, 32);
            double dm = 0;
            for (int b = 0; b < n_in / 32; b++) {
                const chunk_sc s = chunk_scale<WT>(d_row, WT == CUDA_W_Q8_0 ? 2 * b : b);
                int isum[2] = {0, 0}, xs = 0;
                for (int c = 0; c < 4; c++) {
                    uint32_t u[2];
                    memcpy(u, w_row + (size_t)b * BB + (WT == CUDA_W_Q8_0 ? 8 * c : 8 * (c & 1)), 8);
                    for (int h = 0; h < 2; h++) {
                        const uint32_t a = mma_word<WT>(u[h], s, c, 2 * (c & 1) + h);
                        for (int k = 0; k < 4; k++) {
                            const int8_t xv = xq[32 * b + 8 * c + 4 * h + k];
                            isum[WT == CUDA_W_Q6_K && c >= 2] += (int8_t)(a >> (8 * k)) * xv;
                            xs += xv;
                        }
                    }
                }
                const double v = cuda_wtype_int8_one_scale(WT) ? (double)isum[0] * s.d[0]
                                 : WT == CUDA_W_Q6_K          ? (double)isum[0] * s.d[0] + (double)isum[1] * s.d[1]
                                                              : (double)isum[0] * s.d[0] + (double)xs * s.m[0];
                dm += v * xd[b];
            }
            e_mma = fmax(e_mma, fabs(dm - dref8) / mag8);
        }
        e_dot = fmax(e_dot, fabs(dsum - dref) / mag);
        if (cuda_wtype_int8_dot(WT)) e_i8 = fmax(e_i8, fabs(dsum8 - dref8) / mag8);
        for (int k0 = 0; k0 < n_in; k0 += 32) for (int part = 0; part < 2; part++) {
            w_regs rg; gemm_load<WT>(w_row, (const __half *)d.data(), r, n_in, k0, part, rg);
            uint32_t h[8]; gemm_half<WT>(rg, part, h);
            for (int e = 0; e < 16; e++) {
                const float got = er_f16_to_f32((uint16_t)(h[e / 2] >> (16 * (e & 1))));
                const float want = er_f16_to_f32(er_f32_to_f16(ref[(size_t)r * n_in + k0 + 16 * part + e]));
                e_gemm = fmax(e_gemm, fabs(got - want) / fmax(fabs(want), 1e-3));
            }
        }
    }
    const int ok = e_elem <= 1e-6 * vmax && e_dot < 1e-6 && e_i8 < 1e-6 && e_mma < 1e-6 && e_gemm <= 1e-3;
    printf("%-5s %d x %d: elem %.3g (of max %.3g), chunk_dot %.3g of sum|wx|, int8 dot %.3g, int8 mma %.3g, gemm f16 rel %.3g  %s\n", cuda_wtype_name(WT), n_out, n_in, e_elem, vmax, e_dot, e_i8, e_mma, e_gemm, ok ? "ok" : "FAIL");
    return ok;
}

int main() {
    int ok = 1;
    /* every type with a repack (RAW > 0), at 3 and 1 super-blocks per row */
#define RUN(A, NAME, ...)                                                    \
    if (cuda_wtype_repack_bytes(CUDA_W_##NAME)) {                            \
        ok &= check<CUDA_W_##NAME>(3, 768);                                  \
        ok &= check<CUDA_W_##NAME>(2, 256);                                  \
    }
    CUDA_WTYPES(RUN, _)
#undef RUN
    return ok ? 0 : 1;
}
