// A CPU emulation of the CUDA features the generated kernels use, so that tests can run them
// without a GPU: one fiber (ucontext) per CUDA thread, one block at a time on the calling OS
// thread; __syncthreads is a block barrier, warp shuffles exchange through per-warp slots between
// two warp barriers; f16/bf16 are bit-exact round-to-nearest-even conversions. Fibers, not OS
// threads: a barrier is a switch of context instead of a futex wait among hundreds of threads
// (a block of 1024 threads on two cores made a fuzzing run take minutes).
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
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct GlDim { unsigned x, y, z; };
inline thread_local GlDim threadIdx, blockIdx;

struct alignas(16) uint4 { unsigned x, y, z, w; };

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
};
inline thread_local GlBarrier* gl_block_barrier;
inline thread_local GlWarp* gl_warp;
inline thread_local ucontext_t gl_scheduler;
inline thread_local GlFiber* gl_fiber;

inline void GlBarrier::arrive_and_wait() {
  if (++arrived == expected) {
    arrived = 0;
    ++phase;
    return;
  }
  gl_fiber->waiting = this;
  gl_fiber->phase = phase;
  swapcontext(&gl_fiber->ctx, &gl_scheduler);
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

// Runs `grid` blocks of `block` threads of `kernel`, one block after the other.
// The kernel a block's fibers run, and the fiber stacks (allocated once, reused: 1024 threads).
inline thread_local void (*gl_body)(void*);
inline thread_local void* gl_body_arg;
inline void gl_fiber_main() {
  gl_body(gl_body_arg);
  gl_fiber->done = true;
  swapcontext(&gl_fiber->ctx, &gl_scheduler);
}
constexpr size_t GL_STACK = 256 * 1024;
inline char* gl_stack(unsigned t) {
  static thread_local std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() <= t) stacks.emplace_back(new char[GL_STACK]);
  return stacks[t].get();
}

template <class F> void gl_launch(unsigned grid, unsigned block, F kernel) {
  gl_body = [](void* k) { (*static_cast<F*>(k))(); };
  gl_body_arg = &kernel;
  std::vector<GlFiber> fibers(block);
  std::vector<GlWarp> warps((block + 31) / 32);
  for (unsigned b = 0; b < grid; ++b) {
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
    // Round robin over the fibers not done and not waiting on a barrier still in its phase.
    for (unsigned live = block; live > 0;) {
      bool moved = false;
      for (auto& f : fibers) {
        if (f.done || (f.waiting && f.waiting->phase == f.phase)) continue;
        f.waiting = nullptr;
        threadIdx = {f.t, 0, 0};
        blockIdx = {b, 0, 0};
        gl_block_barrier = &bar;
        gl_warp = &warps[f.t / 32];
        gl_fiber = &f;
        swapcontext(&gl_scheduler, &f.ctx);
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
