// mma.sync's own ceiling on this GPU (issue 30): how many float16 (and bfloat16) tensor-core
// operations per second mma.sync.m16n8k16 with float32 sums reaches when nothing else runs: no
// memory traffic, operands in registers, CHAINS independent accumulators per warp to cover the
// instruction's latency, WARPS warps per SM. A GEMM kernel on mma.sync cannot beat this number.
// Standalone: nvcc -arch=sm_90 -O3 -o probe_mma scripts/probe_mma_sync.cu && ./probe_mma
#include <cstdio>
#include <cuda_runtime.h>

// The best of 5 timed runs of `run(round)`, in milliseconds, by CUDA events.
template <typename Run>
float best_of_5_ms(Run run)
{
    cudaEvent_t start, stop;
    cudaEventCreate(&start); cudaEventCreate(&stop);
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        cudaEventRecord(start);
        run(r);
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms;
        cudaEventElapsedTime(&ms, start, stop);
        best = ms < best ? ms : best;
    }
    return best;
}

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
void measure(int threads, float* out, int sms, int warps_per_sm = 64)
{
    const int iterations = 4096, blocks = sms * (warps_per_sm * 32 / threads);  // that many warps on each SM
    mma_loop<CHAINS, BF16><<<blocks, threads>>>(out, 16, 3u);  // warm-up
    const float best = best_of_5_ms([&](int r) { mma_loop<CHAINS, BF16><<<blocks, threads>>>(out, iterations, 3u + r); });
    const double flops = 2.0 * 16 * 8 * 16 * CHAINS * (double)iterations * blocks * (threads / 32);
    printf("%s chains %2d, %4d threads per block, %2d warps per SM: %7.1f TFLOP/s (best of 5)\n", BF16 ? "bf16" : "f16 ",
           CHAINS, threads, warps_per_sm, flops / best / 1e9);
}

// The GEMM's inner loop alone (hgemm's 128 x 128 x 32 block, 4 warps of 64 x 64, two blocks per SM):
// each k-step a warp loads its operands with ldmatrix from A and B tiles that stay in shared memory
// (swizzled as hgemm's: conflict-free), into two register sets, and multiplies: no global memory.
// With SYNC, the block's barrier every two k-steps, as hgemm passes it once per 32-wide tile.
template <bool SYNC>
__global__ void __launch_bounds__(128) warp_tile_loop(float* out, int iterations)
{
    __shared__ __align__(128) unsigned short tiles[128 * 32 + 32 * 128];
    for (int i = threadIdx.x; i < 128 * 32 + 32 * 128; i += 128)
        tiles[i] = 0x3c00 ^ (i & 7);  // finite halves near 1
    __syncthreads();
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tiles));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp / 2 * 64, warp_n = warp % 2 * 64;
    auto a_offset = [](int r, int c) { return r * 32 + (((c / 8) ^ (r / 2 % 4)) * 8); };  // chunk c of row r
    auto b_offset = [](int r, int c) { return r * 128 + (((c / 8) ^ (r % 8)) * 8); };
    const unsigned a_lane = base + 2 * a_offset(warp_m + lane % 16, lane / 16 * 8);
    const unsigned b_lane = base + 2 * 128 * 32 + 2 * b_offset(lane % 16, warp_n + lane / 16 * 8);
    float acc[4][8][4] = {};
    unsigned a[2][4][4], b[2][4][4];
    auto load = [&](int set, int step) {
        #pragma unroll
        for (int i = 0; i < 4; ++i)
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(a[set][i][0]), "=r"(a[set][i][1]), "=r"(a[set][i][2]), "=r"(a[set][i][3])
                         : "r"((a_lane ^ (32 * step)) + i * 16 * 64));
        #pragma unroll
        for (int j = 0; j < 4; ++j)
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(b[set][j][0]), "=r"(b[set][j][1]), "=r"(b[set][j][2]), "=r"(b[set][j][3])
                         : "r"((b_lane ^ (32 * j)) + step * 16 * 256));
    };
    auto multiply = [&](int set) {
        #pragma unroll
        for (int i = 0; i < 4; ++i)
            #pragma unroll
            for (int j = 0; j < 8; ++j)
                asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                    : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                    : "r"(a[set][i][0]), "r"(a[set][i][1]), "r"(a[set][i][2]), "r"(a[set][i][3]),
                      "r"(b[set][j / 2][j % 2 * 2]), "r"(b[set][j / 2][j % 2 * 2 + 1]));
    };
    load(0, 0);
    for (int it = 0; it < iterations; ++it) {
        load(1, 1);
        multiply(0);
        if (SYNC)
            __syncthreads();
        load(0, 0);
        multiply(1);
    }
    float sum = 0.f;
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 8; ++j)
            sum += acc[i][j][0] + acc[i][j][1] + acc[i][j][2] + acc[i][j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

template <bool SYNC>
void measure_warp_tiles(float* out, int sms)
{
    const int iterations = 4096, blocks = sms * 2;
    warp_tile_loop<SYNC><<<blocks, 128>>>(out, 16);  // warm-up
    const float best = best_of_5_ms([&](int) { warp_tile_loop<SYNC><<<blocks, 128>>>(out, iterations); });
    const double flops = 2.0 * 64 * 64 * 32 * (double)iterations * blocks * 4;
    printf("f16  ldmatrix + mma, 64 x 64 warp tiles, 8 warps per SM%s: %7.1f TFLOP/s (best of 5)\n",
           SYNC ? ", a barrier per 2 k-steps" : "", flops / best / 1e9);
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
    // as a GEMM's warps run: 32 sums of 16 x 8 per warp (a 64 x 64 warp tile), few warps per SM
    measure<32, false>(128, out, sms, 8);
    measure<32, false>(128, out, sms, 12);
    measure<32, false>(128, out, sms, 16);
    measure<16, false>(128, out, sms, 8);
    measure<16, false>(128, out, sms, 16);
    measure_warp_tiles<false>(out, sms);
    measure_warp_tiles<true>(out, sms);
    cudaError_t e = cudaDeviceSynchronize();
    printf("%s, %d SMs\n", e == cudaSuccess ? "ok" : cudaGetErrorString(e), sms);
    return 0;
}
