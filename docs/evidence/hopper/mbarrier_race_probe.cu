// Does compute-sanitizer's racecheck treat an mbarrier arrive (release) / try_wait (acquire) pair
// as ordering a generic shared-memory write before a read in another warp? Thread 0 writes x and
// arrives; thread 32 waits for the phase and reads x. Correct under the PTX memory model.
#include <cstdio>
#include <cstdint>
__global__ void handoff(int* out) {
  __shared__ alignas(8) unsigned long long barrier;
  __shared__ int x;
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&barrier));
  if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    x = 42;
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
  }
  if (threadIdx.x == 32) {
    asm volatile("{\n.reg .pred p;\nw: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra w;\n}\n" ::"r"(b) : "memory");
    out[0] = x;
  }
}
int main() {
  int* out; cudaMalloc(&out, 4);
  handoff<<<1, 64>>>(out);
  int h = 0; cudaMemcpy(&h, out, 4, cudaMemcpyDeviceToHost);
  printf("read %d (%s)\n", h, cudaGetErrorString(cudaGetLastError()));
  return h == 42 ? 0 : 1;
}
