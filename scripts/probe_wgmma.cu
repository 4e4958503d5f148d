// wgmma probe (issue 34): which shared-memory descriptor encodings multiply right, before a family is
// built on them. Standalone: nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o probe scripts/probe_wgmma.cu && ./probe
// On an H100 (2026-11-25, CUDA 13.0): configurations 0, 1 and 3 right (relative error 3.4e-7), 2 wrong (0.99):
// docs/results/h100-wgmma-probe.md.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_fp16.h>
#define M 128
#define N 256
#define K 256
#define BM 64
#define BN 128
#define BK 64

__device__ __forceinline__ unsigned long long desc(const void *smem, unsigned lbo, unsigned sbo) {
    unsigned addr = (unsigned)__cvta_generic_to_shared(smem);
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16)
         | ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);  // 128-byte swizzle
}
template <int TRANS_B>
__device__ __forceinline__ void mma_n128(float *d, unsigned long long da, unsigned long long db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS_B));
}
template <int TRANS_B>
__device__ __forceinline__ void mma_n64(float *d, unsigned long long da, unsigned long long db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS_B));
}

// A tile BM x BK, K-major, 128-byte swizzle: row m holds 128 bytes, its 16-byte chunk c at c ^ (m % 8)
__device__ int a_offset(int m, int k) { return m * 128 + (((k / 8) ^ (m % 8)) * 16) + (k % 8) * 2; }
// B tile, K-major (rows of n): the same layout with n for m
// B tile, MN-major: blocks of 64 n (8 KiB each), row k holds 128 bytes of n, swizzled by k % 8
__device__ int b_mn_offset(int k, int n) { return (n / 64) * (BK * 128) + k * 128 + ((((n % 64) / 8) ^ (k % 8)) * 16) + (n % 8) * 2; }

// CFG 0: B K-major, trans-b 0, n128; 1: B MN-major, trans-b 1, LBO 8192 SBO 1024, n128;
// 2: MN-major, LBO 1024 SBO 8192, n128; 3: MN-major, two n64 per k-step, LBO 8192 SBO 1024
template <int CFG>
__global__ void __launch_bounds__(128) probe(const __half *A, const __half *B, float *C) {
    __shared__ __align__(1024) unsigned char sa[BM * BK * 2];
    __shared__ __align__(1024) unsigned char sb[BK * BN * 2];
    int t = threadIdx.x, bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    float d[64];
    for (int i = 0; i < 64; i++) d[i] = 0.f;
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = t; i < BM * BK; i += 128) {
            int m = i / BK, k = i % BK;
            *(__half *)(sa + a_offset(m, k)) = A[(bm + m) * K + k0 + k];
        }
        for (int i = t; i < BK * BN; i += 128) {
            int k = i / BN, n = i % BN;
            int off = CFG == 0 ? a_offset(n, k) : b_mn_offset(k, n);
            *(__half *)(sb + off) = B[(k0 + k) * N + bn + n];
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned long long da = desc(sa + kk * 2, 16, 1024);
            if (CFG == 0) {
                mma_n128<0>(d, da, desc(sb + kk * 2, 16, 1024), 1);
            } else if (CFG == 1) {
                mma_n128<1>(d, da, desc(sb + kk * 128, 8192, 1024), 1);
            } else if (CFG == 2) {
                mma_n128<1>(d, da, desc(sb + kk * 128, 1024, 8192), 1);
            } else {
                mma_n64<1>(d, da, desc(sb + kk * 128, 8192, 1024), 1);
                mma_n64<1>(d + 32, da, desc(sb + BK * 128 + kk * 128, 8192, 1024), 1);
            }
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        __syncthreads();
    }
    // D fragment: warp w rows 16w..16w+15; per 8-column group g: (r, c), (r, c+1), (r+8, c), (r+8, c+1)
    int w = t / 32, l = t % 32, r = bm + w * 16 + l / 4;
    int groups = 16;
    for (int g = 0; g < groups; g++) {
        int half = (CFG == 3 && g >= 8) ? 1 : 0;  // n64 pairs: d[32..] are the second 64 columns
        int gi = CFG == 3 ? g % 8 : g;
        float *q = d + half * 32 + gi * 4;
        int c = bn + g * 8 + (l % 4) * 2;
        C[r * N + c] = q[0]; C[r * N + c + 1] = q[1];
        C[(r + 8) * N + c] = q[2]; C[(r + 8) * N + c + 1] = q[3];
    }
}

template <int CFG>
double run(const __half *dA, const __half *dB, float *dC, const double *ref, float *hC) {
    cudaMemset(dC, 0xFF, sizeof(float) * M * N);  // NaN
    probe<CFG><<<dim3(N / BN, M / BM), 128>>>(dA, dB, dC);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("cfg %d: %s\n", CFG, cudaGetErrorString(e)); return -1; }
    cudaMemcpy(hC, dC, sizeof(float) * M * N, cudaMemcpyDeviceToHost);
    double err = 0, norm = 0;
    for (int i = 0; i < M * N; i++) { double x = hC[i] - ref[i]; err += x * x; norm += ref[i] * ref[i]; if (std::isnan(hC[i])) err = INFINITY; }
    return sqrt(err / norm);
}

int main() {
    static __half hA[M * K], hB[K * N];
    static double ref[M * N];
    static float hC[M * N];
    srand(7);
    for (int i = 0; i < M * K; i++) hA[i] = __float2half((rand() % 2001 - 1000) / 1000.f);
    for (int i = 0; i < K * N; i++) hB[i] = __float2half((rand() % 2001 - 1000) / 1000.f);
    for (int m = 0; m < M; m++) for (int n = 0; n < N; n++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)__half2float(hA[m * K + k]) * __half2float(hB[k * N + n]);
        ref[m * N + n] = s;
    }
    __half *dA, *dB; float *dC;
    cudaMalloc(&dA, sizeof(hA)); cudaMalloc(&dB, sizeof(hB)); cudaMalloc(&dC, sizeof(float) * M * N);
    cudaMemcpy(dA, hA, sizeof(hA), cudaMemcpyHostToDevice); cudaMemcpy(dB, hB, sizeof(hB), cudaMemcpyHostToDevice);
    printf("cfg 0 (B K-major, trans 0): relative error %g\n", run<0>(dA, dB, dC, ref, hC));
    printf("cfg 1 (B MN-major, LBO 8192 SBO 1024): relative error %g\n", run<1>(dA, dB, dC, ref, hC));
    printf("cfg 2 (B MN-major, LBO 1024 SBO 8192): relative error %g\n", run<2>(dA, dB, dC, ref, hC));
    printf("cfg 3 (B MN-major, two n64, SBO 1024): relative error %g\n", run<3>(dA, dB, dC, ref, hC));
    return 0;
}
