// mma.sync's own ceiling on this GPU (issue 30): how many float16 (and bfloat16) tensor-core
// operations per second mma.sync.m16n8k16 with float32 sums reaches when nothing else runs: no
// memory traffic, operands in registers, CHAINS independent accumulators per warp to cover the
// instruction's latency, WARPS warps per SM. A GEMM kernel on mma.sync cannot beat this number.
// Standalone: nvcc -arch=sm_90 -O3 -o probe_mma scripts/probe_mma_sync.cu && ./probe_mma
#include <cstdio>
#include <cuda_runtime.h>

template <int CHAINS, bool BF16>
__global__ void __launch_bounds__(256) mma_loop(float* out, int iterations, unsigned seed)
{
    unsigned a[4], b[2];
    for (int i = 0; i < 4; ++i) a[i] = seed * (threadIdx.x + i) | 0x3c003c00u;  // finite values
    for (int i = 0; i < 2; ++i) b[i] = seed * (threadIdx.x + 7 * i) | 0x3c003c00u;
    float d[CHAINS][4] = {};
    for (int it = 0; it < iterations; ++it) {
        #pragma unroll
        for (int c = 0; c < CHAINS; ++c) {
            if (BF16)
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                             : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
            else
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                             : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
        }
    }
    float sum = 0.f;
    for (int c = 0; c < CHAINS; ++c) sum += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // keeps the products alive
}

template <int CHAINS, bool BF16>
void measure(int threads, float* out, int sms)
{
    const int iterations = 4096, blocks = sms * (2048 / threads);  // a full SM's worth of threads each
    mma_loop<CHAINS, BF16><<<blocks, threads>>>(out, 16, 3u);  // warm-up
    cudaEvent_t start, stop;
    cudaEventCreate(&start); cudaEventCreate(&stop);
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        cudaEventRecord(start);
        mma_loop<CHAINS, BF16><<<blocks, threads>>>(out, iterations, 3u + r);
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms;
        cudaEventElapsedTime(&ms, start, stop);
        best = ms < best ? ms : best;
    }
    const double flops = 2.0 * 16 * 8 * 16 * CHAINS * (double)iterations * blocks * (threads / 32);
    printf("%s chains %d, %4d threads per block: %7.1f TFLOP/s (best of 5)\n", BF16 ? "bf16" : "f16 ", CHAINS,
           threads, flops / best / 1e9);
}

int main()
{
    int sms;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    float* out;
    cudaMalloc(&out, sizeof(float) * sms * 2048);
    measure<4, false>(256, out, sms);
    measure<8, false>(256, out, sms);
    measure<8, false>(128, out, sms);
    measure<16, false>(128, out, sms);
    measure<8, true>(256, out, sms);
    measure<16, true>(128, out, sms);
    cudaError_t e = cudaDeviceSynchronize();
    printf("%s, %d SMs\n", e == cudaSuccess ? "ok" : cudaGetErrorString(e), sms);
    return 0;
}
