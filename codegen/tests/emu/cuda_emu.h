// A CPU emulation of the CUDA features the generated kernels use, so that tests can run them
// without a GPU: one fiber (ucontext) per CUDA thread, one block at a time on the calling OS
// thread; __syncthreads is a block barrier, warp shuffles exchange through per-warp slots between
// two warp barriers; f16/bf16 are bit-exact round-to-nearest-even conversions. Fibers, not OS
// threads: a barrier is a switch of context instead of a futex wait among hundreds of threads
// (a block of 1024 threads on two cores made a fuzzing run take minutes).
//
// What it does to catch what a GPU would (see docs/testing.md):
// - a seeded schedule (gl_emu_configure): blocks run in a random order, and the threads of a block
//   resume in a random order after every barrier, so code that relies on an order the GPU does not
//   promise (a missing __syncthreads, one block reading another's results, warp-synchronous
//   programming without shuffles) gives different results under different seeds;
// - shared memory (every __shared__ array) is poisoned (0xFF bytes: NaN, -1) at the start of every
//   block, so a read of shared memory no thread of this block wrote shows in the results;
// - built with -fsanitize=address,undefined (emu::build_sanitized): every buffer its own
//   allocation of its exact size (one element past the end is an error), every access aligned for
//   its type (a 16-byte vector load at an address not 16-byte aligned is an error), no signed
//   overflow in index arithmetic (an int32 index that wraps is an error);
// - a subset of the blocks can run on their own (gl_emu_sample), so a launch of millions of
//   threads is checked on sampled rows.
#pragma once
#define GUARDLESS_EMULATION 1
#include <ucontext.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static __attribute__((section("gl_shared")))
#define __align__(n) __attribute__((aligned(n)))

struct GlDim { unsigned x, y, z; };
inline thread_local GlDim threadIdx, blockIdx;

struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };

// A barrier among `expected` fibers: each arrival but the last waits for the phase to move on.
struct GlBarrier {
  unsigned expected, arrived = 0;
  uint64_t phase = 0;
  void arrive_and_wait();
};

struct GlFiber {
  ucontext_t ctx;
  unsigned t;
  bool done;
  // What it waits for: the barrier, at the phase it arrived in.
  GlBarrier* waiting;
  uint64_t phase;
};

struct GlWarp {
  GlBarrier bar{32};
  uint64_t slots[32];
  // Each lane's fragments of a tensor-core product (a: 4 words, b: 2).
  uint32_t frags[32][6];
};
inline thread_local GlBarrier* gl_block_barrier;
inline thread_local GlWarp* gl_warp;
inline thread_local ucontext_t gl_scheduler;
inline thread_local GlFiber* gl_fiber;

inline void gl_to_scheduler(bool done);
inline void GlBarrier::arrive_and_wait() {
  if (++arrived == expected) {
    arrived = 0;
    ++phase;
    return;
  }
  gl_fiber->waiting = this;
  gl_fiber->phase = phase;
  gl_to_scheduler(false);
}

inline void __syncthreads() { gl_block_barrier->arrive_and_wait(); }

template <class T> T gl_exchange(T v, int src) {
  const int lane = threadIdx.x % 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  gl_warp->slots[lane] = bits;
  gl_warp->bar.arrive_and_wait();
  const uint64_t got = gl_warp->slots[(src >= 0 && src < 32) ? src : lane];
  gl_warp->bar.arrive_and_wait();
  T r;
  std::memcpy(&r, &got, sizeof(T));
  return r;
}
template <class T> T __shfl_down_sync(unsigned, T v, int offset) {
  const int lane = threadIdx.x % 32;
  return gl_exchange(v, lane + offset < 32 ? lane + offset : lane);
}
template <class T> T __shfl_sync(unsigned, T v, int src) { return gl_exchange(v, src); }
// The lanes (of a full warp) whose `v` equals this lane's.
template <class T> unsigned __match_any_sync(unsigned, T v) {
  const int lane = threadIdx.x % 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  gl_warp->slots[lane] = bits;
  gl_warp->bar.arrive_and_wait();
  unsigned peers = 0;
  for (int l = 0; l < 32; ++l) peers |= unsigned(gl_warp->slots[l] == bits) << l;
  gl_warp->bar.arrive_and_wait();
  return peers;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }

inline int atomicCAS(int* p, int compare, int value) {
  __atomic_compare_exchange_n(p, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}

inline unsigned atomicCAS(unsigned* p, unsigned compare, unsigned value) {
  __atomic_compare_exchange_n(p, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}

inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long compare, unsigned long long value) {
  __atomic_compare_exchange_n(p, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
template <class T> T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
template <class T> T atomicOr(T* p, T v) { return std::atomic_ref<T>(*p).fetch_or(v); }
template <class T> T atomicAnd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_and(v); }

inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
inline int __float_as_int(float f) { int v; std::memcpy(&v, &f, 4); return v; }
inline long long __double_as_longlong(double d) { long long v; std::memcpy(&v, &d, 8); return v; }
// Rounded toward zero: the nearest f32, stepped back toward zero when it is farther out.
inline float __double2float_rz(double v) {
  const float t = float(v);
  return (v == v && std::fabs(double(t)) > std::fabs(v)) ? std::nextafter(t, 0.0f) : t;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

struct __nv_bfloat16 { uint16_t x; };
inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t b = uint32_t(h.x) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return {uint16_t((b >> 16) | 0x40)};
  return {uint16_t((b + 0x7fffu + ((b >> 16) & 1u)) >> 16)};
}
struct __half { uint16_t x; };
inline float __half2float(__half h) { _Float16 f; std::memcpy(&f, &h.x, 2); return float(f); }
inline __half __float2half_rn(float f) { _Float16 h = _Float16(f); __half r; std::memcpy(&r.x, &h, 2); return r; }

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline unsigned short __half_as_ushort(__half h) { return h.x; }

// mma.sync m16n8k16 (templates/common.cuh's gl_mma): the warp's fragments exchanged as the
// hardware distributes them, each lane's four results summed from its accumulators in k order.
template <class T> inline float gl_mma_half(uint32_t word, int k) {
  T h;
  h.x = uint16_t(k % 2 ? word >> 16 : word & 0xffffu);
  if constexpr (std::is_same_v<T, __half>) return __half2float(h);
  else return __bfloat162float(h);
}
template <class T> void gl_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], T) {
  const int lane = threadIdx.x % 32;
  for (int i = 0; i < 4; ++i) gl_warp->frags[lane][i] = a[i];
  gl_warp->frags[lane][4] = b[0];
  gl_warp->frags[lane][5] = b[1];
  gl_warp->bar.arrive_and_wait();
  const auto& f = gl_warp->frags;
  float r[4];
  for (int i = 0; i < 4; ++i) {
    const int row = lane / 4 + 8 * (i / 2), col = lane % 4 * 2 + i % 2;
    float s = d[i];
    for (int k = 0; k < 16; ++k) {
      const float x = gl_mma_half<T>(f[row % 8 * 4 + k % 8 / 2][row / 8 + 2 * (k / 8)], k);
      const float y = gl_mma_half<T>(f[col * 4 + k % 8 / 2][4 + k / 8], k);
      s += x * y;
    }
    r[i] = s;
  }
  gl_warp->bar.arrive_and_wait();
  for (int i = 0; i < 4; ++i) d[i] = r[i];
}

// WMMA: every lane holds the whole fragment, as floats; mma_sync adds in k order; one lane
// stores (all hold the same values).
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment { float x[256]; };
inline float gl_wmma_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float gl_wmma_float(__half v) { return __half2float(v); }
template <class Use, int M, int N, int K, class T, class L, class P>
void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const P* p, unsigned ldm) {
  constexpr bool a = std::is_same_v<Use, matrix_a>;
  constexpr int rows = a ? M : K, cols = a ? K : N;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      f.x[r * cols + c] = gl_wmma_float(std::is_same_v<L, col_major> ? p[c * ldm + r] : p[r * ldm + c]);
}
template <int M, int N, int K> void fill_fragment(fragment<accumulator, M, N, K, float>& f, float v) {
  for (float& e : f.x) e = v;
}
template <int M, int N, int K, class T, class LA, class LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
              const fragment<matrix_b, M, N, K, T, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
  float r[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float s = c.x[i * N + j];
      for (int k = 0; k < K; ++k) s += a.x[i * K + k] * b.x[k * N + j];
      r[i * N + j] = s;
    }
  std::memcpy(d.x, r, sizeof r);
}
template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t l) {
  if (threadIdx.x % 32 != 0) return;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) (l == mem_row_major ? p[i * ldm + j] : p[j * ldm + i]) = f.x[i * N + j];
}
}  // namespace nvcuda::wmma

// The emulation's settings: the schedule's seed (0: blocks and threads in order), and the blocks
// to run (all when none are given).
struct GlEmu {
  uint64_t seed = 0;
  uint64_t state = 0;
  std::vector<unsigned> sample;
  bool sampled = false;
};
inline GlEmu gl_emu;
extern "C" void gl_emu_configure(uint64_t seed) {
  gl_emu.seed = seed;
  gl_emu.state = seed;
}
// Only these blocks run in the launches that follow (n = 0: every block again).
extern "C" void gl_emu_sample(const unsigned* blocks, unsigned n) {
  gl_emu.sample.assign(blocks, blocks + n);
  gl_emu.sampled = n > 0;
}
// splitmix64
inline uint64_t gl_emu_next() {
  uint64_t z = (gl_emu.state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
template <class T> void gl_emu_shuffle(std::vector<T>& v) {
  if (gl_emu.seed == 0) return;
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[gl_emu_next() % i]);
}

// Every __shared__ array lies in the section gl_shared (see the #define above), whose bounds the
// linker provides: poisoned at the start of every block.
extern "C" char __start_gl_shared[] __attribute__((weak));
extern "C" char __stop_gl_shared[] __attribute__((weak));
inline void gl_poison_shared() {
  if (__start_gl_shared && __stop_gl_shared) std::memset(__start_gl_shared, 0xFF, __stop_gl_shared - __start_gl_shared);
}

// AddressSanitizer follows the switches between stacks when told (it would otherwise take a
// fiber's stack for an overflow of the scheduler's).
#if defined(__SANITIZE_ADDRESS__)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
inline thread_local const void* gl_scheduler_stack;
inline thread_local size_t gl_scheduler_stack_size;
#endif

// The kernel a block's fibers run, and the fiber stacks (allocated once, reused: 1024 threads).
inline thread_local void (*gl_body)(void*);
inline thread_local void* gl_body_arg;
constexpr size_t GL_STACK = 256 * 1024;
inline char* gl_stack(unsigned t) {
  static thread_local std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() <= t) stacks.emplace_back(new char[GL_STACK]);
  return stacks[t].get();
}
// From a fiber back to the scheduler (`done`: the fiber ends).
inline void gl_to_scheduler(bool done) {
#if defined(__SANITIZE_ADDRESS__)
  void* save = nullptr;
  __sanitizer_start_switch_fiber(done ? nullptr : &save, gl_scheduler_stack, gl_scheduler_stack_size);
  swapcontext(&gl_fiber->ctx, &gl_scheduler);
  __sanitizer_finish_switch_fiber(save, nullptr, nullptr);
#else
  (void)done;
  swapcontext(&gl_fiber->ctx, &gl_scheduler);
#endif
}
inline void gl_fiber_main() {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &gl_scheduler_stack, &gl_scheduler_stack_size);
#endif
  gl_body(gl_body_arg);
  gl_fiber->done = true;
  gl_to_scheduler(true);
}
// From the scheduler into fiber `f`.
inline void gl_to_fiber(GlFiber& f) {
#if defined(__SANITIZE_ADDRESS__)
  void* save = nullptr;
  __sanitizer_start_switch_fiber(&save, gl_stack(f.t), GL_STACK);
  swapcontext(&gl_scheduler, &f.ctx);
  __sanitizer_finish_switch_fiber(save, nullptr, nullptr);
#else
  swapcontext(&gl_scheduler, &f.ctx);
#endif
}

// Runs `grid` blocks of `block` threads of `kernel` (or the sampled ones), one block after the
// other, in the schedule's order.
template <class F> void gl_launch(unsigned grid, unsigned block, F kernel) {
  gl_body = [](void* k) { (*static_cast<F*>(k))(); };
  gl_body_arg = &kernel;
  std::vector<GlFiber> fibers(block);
  std::vector<GlWarp> warps((block + 31) / 32);
  std::vector<unsigned> blocks;
  if (gl_emu.sampled) {
    for (unsigned b : gl_emu.sample) if (b < grid) blocks.push_back(b);
  } else {
    for (unsigned b = 0; b < grid; ++b) blocks.push_back(b);
  }
  gl_emu_shuffle(blocks);
  std::vector<unsigned> order(block);
  for (unsigned t = 0; t < block; ++t) order[t] = t;
  for (unsigned b : blocks) {
    gl_poison_shared();
    GlBarrier bar{block};
    for (auto& w : warps) w.bar = GlBarrier{32};
    for (unsigned t = 0; t < block; ++t) {
      GlFiber& f = fibers[t];
      f.t = t;
      f.done = false;
      f.waiting = nullptr;
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = gl_stack(t);
      f.ctx.uc_stack.ss_size = GL_STACK;
      f.ctx.uc_link = nullptr;
      makecontext(&f.ctx, gl_fiber_main, 0);
    }
    // Rounds over the fibers not done and not waiting on a barrier still in its phase, each round
    // in a new order: a fiber runs until it waits on a barrier or ends.
    for (unsigned live = block; live > 0;) {
      bool moved = false;
      gl_emu_shuffle(order);
      for (unsigned t : order) {
        GlFiber& f = fibers[t];
        if (f.done || (f.waiting && f.waiting->phase == f.phase)) continue;
        f.waiting = nullptr;
        threadIdx = {f.t, 0, 0};
        blockIdx = {b, 0, 0};
        gl_block_barrier = &bar;
        gl_warp = &warps[f.t / 32];
        gl_fiber = &f;
        gl_to_fiber(f);
        moved = true;
        if (f.done) --live;
      }
      if (!moved) {
        std::fprintf(stderr, "cuda_emu: block %u of %u: every live thread waits on a barrier\n", b, grid);
        std::abort();
      }
    }
  }
}
