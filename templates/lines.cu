// {{ name }}: {{ nodes }}
{%- if mode == "radix" %}
// sort: the first {{ keep }} of each line in {% if descending %}descending{% else %}ascending{% endif %} order (stable, NaN above every number), {% if indices %}their positions{% else %}their values{% endif %}; a block per line: a stable least-significant-digit radix sort of 8-bit digits over key bits [{{ lo }}, {{ hi }}), keys and positions moving between two halves of the line's workspace
{%- elif mode == "scan" %}
// scan: running sums along each line, a thread per line, kept in {{ acc }} and each rounded once to the stored type
{%- elif mode == "scan_block" %}
// scan: running sums along each line, a block per line: tiles of {{ threads }} runs of {{ items }} in order, each run summed by its thread, the runs' totals scanned across the block; sums kept in {{ acc }} and each rounded once to the stored type
{%- else %}
// sort: the first {{ keep }} of each line in {% if descending %}descending{% else %}ascending{% endif %} order (stable, NaN above every number), {% if indices %}their positions{% else %}their values{% endif %}; a thread per line
{%- endif %}
{%- if mode == "scan_block" %}
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_line = blockIdx.x;
  if (gl_line >= ({{ lines }})) return;
  const long long gl_inner = {{ inner }};
  const long long gl_len = {{ len }};
  const long long gl_base = (gl_line / gl_inner) * gl_len * gl_inner + gl_line % gl_inner;
  __shared__ {{ acc }} gl_s[{{ threads }}];
  // -0.0 + x is x, bit for bit: the first element is stored as it is.
  {{ acc }} gl_carry = {{ zero }};
  for (long long gl_t0 = 0; gl_t0 < gl_len; gl_t0 += {{ threads }} * {{ items }}) {
    const long long gl_j0 = gl_t0 + (long long)threadIdx.x * {{ items }};
    {{ acc }} gl_run[{{ items }}];
    {{ acc }} gl_sum = {{ zero }};
#pragma unroll
    for (int gl_k = 0; gl_k < {{ items }}; ++gl_k) {
      const long long gl_j = gl_j0 + gl_k;
      if (gl_j < gl_len) gl_sum += ({{ acc }})gl_ld({{ input }}, gl_base + gl_j * gl_inner);
      gl_run[gl_k] = gl_sum;
    }
    gl_s[threadIdx.x] = gl_sum;
    gl_block_scan(gl_s, {{ threads }});
    // Before this thread's run: the earlier tiles, then the earlier runs of this one.
    const {{ acc }} gl_before = threadIdx.x == 0 ? gl_carry : gl_carry + gl_s[threadIdx.x - 1];
#pragma unroll
    for (int gl_k = 0; gl_k < {{ items }}; ++gl_k) {
      const long long gl_j = gl_j0 + gl_k;
      if (gl_j < gl_len) gl_st_sum({{ out }}, gl_base + gl_j * gl_inner, gl_before + gl_run[gl_k]);
    }
    gl_carry += gl_s[{{ threads }} - 1];
    __syncthreads();
  }
}
{%- elif mode == "radix" %}
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_line = blockIdx.x;
  if (gl_line >= ({{ lines }})) return;
  const long long gl_inner = {{ inner }};
  const long long gl_len = {{ len }};
  const long long gl_keep = {{ keep }};
  const long long gl_o = gl_line / gl_inner;
  const long long gl_i = gl_line % gl_inner;
  // The line's workspace: keys and positions, twice.
  unsigned long long* gl_keys[2];
  long long* gl_pos[2];
  {
    unsigned long long* gl_w = reinterpret_cast<unsigned long long*>(gl_work_bytes) + gl_line * gl_len * 4;
    gl_keys[0] = gl_w;
    gl_pos[0] = reinterpret_cast<long long*>(gl_w + gl_len);
    gl_keys[1] = gl_w + 2 * gl_len;
    gl_pos[1] = reinterpret_cast<long long*>(gl_w + 3 * gl_len);
  }
  for (long long gl_j = threadIdx.x; gl_j < gl_len; gl_j += {{ threads }}) {
    const auto gl_v = gl_ld({{ input }}, (gl_o * gl_len + gl_j) * gl_inner + gl_i);
    const unsigned long long gl_k = {{ key }};
    // Descending: the inverted keys ascending; a stable sort keeps ties in line order.
    gl_keys[0][gl_j] = {% if descending %}~gl_k{% else %}gl_k{% endif %};
    gl_pos[0][gl_j] = gl_j;
  }
  const int gl_lane = threadIdx.x % 32, gl_warp = threadIdx.x / 32;
  // Per tile: how many elements of each digit each warp holds, for each of a thread's items;
  // then, in place, how many come before them in the tile.
  __shared__ int gl_warp_count[{{ rows }} * {{ warps }} * 256];
  // A digit's first position in the pass (the line's counts of the smaller digits), then its
  // next one as the tiles go by.
  __shared__ unsigned long long gl_next[256];
  // The tile's elements of each digit.
  __shared__ int gl_tile[256];
  __shared__ unsigned long long gl_s[{{ threads }}];
  int gl_src = 0;
  for (int gl_bit = {{ lo }}; gl_bit < {{ hi }}; gl_bit += 8, gl_src ^= 1) {
    const unsigned long long* gl_sk = gl_keys[gl_src];
    const long long* gl_sp = gl_pos[gl_src];
    unsigned long long* gl_dk = gl_keys[gl_src ^ 1];
    long long* gl_dp = gl_pos[gl_src ^ 1];
    __syncthreads();
    for (int gl_d = threadIdx.x; gl_d < 256; gl_d += {{ threads }}) gl_next[gl_d] = 0;
    __syncthreads();
    for (long long gl_j = threadIdx.x; gl_j < gl_len; gl_j += {{ threads }}) atomicAdd(&gl_next[(gl_sk[gl_j] >> gl_bit) & 255], 1ull);
    // Exclusive prefix sums of the 256 counts: a block scan of each thread's run of them (the
    // threads divide 256).
    __syncthreads();
    {
      const int gl_per = 256 / {{ threads }};
      unsigned long long gl_run = 0;
      for (int gl_q = 0; gl_q < gl_per; ++gl_q) gl_run += gl_next[threadIdx.x * gl_per + gl_q];
      gl_s[threadIdx.x] = gl_run;
      gl_block_scan(gl_s, {{ threads }});
      unsigned long long gl_at = gl_s[threadIdx.x] - gl_run;
      __syncthreads();
      for (int gl_q = 0; gl_q < gl_per; ++gl_q) {
        const unsigned long long gl_c = gl_next[threadIdx.x * gl_per + gl_q];
        gl_next[threadIdx.x * gl_per + gl_q] = gl_at;
        gl_at += gl_c;
      }
    }
    // Tiles of {{ rows }} rows of {{ threads }} elements, in line order; an element's place is
    // its digit's next position, plus the tile's elements of its digit before it: those of
    // earlier rows and warps (counted per warp), then of earlier lanes of its warp (from the
    // lanes holding the same digit).
    for (long long gl_t0 = 0; gl_t0 < gl_len; gl_t0 += {{ rows }} * {{ threads }}) {
      __syncthreads();
      for (int gl_q = threadIdx.x; gl_q < {{ rows }} * {{ warps }} * 256; gl_q += {{ threads }}) gl_warp_count[gl_q] = 0;
      __syncthreads();
      unsigned long long gl_k[{{ rows }}];
      int gl_d[{{ rows }}];
      int gl_rank[{{ rows }}];
#pragma unroll
      for (int gl_r = 0; gl_r < {{ rows }}; ++gl_r) {
        const long long gl_j = gl_t0 + gl_r * {{ threads }} + threadIdx.x;
        gl_k[gl_r] = gl_j < gl_len ? gl_sk[gl_j] : 0;
        // Past the line's end: digit 256, which no element has.
        gl_d[gl_r] = gl_j < gl_len ? (int)((gl_k[gl_r] >> gl_bit) & 255) : 256;
        const unsigned gl_peers = __match_any_sync(0xffffffffu, gl_d[gl_r]);
        gl_rank[gl_r] = __popc(gl_peers & ((1u << gl_lane) - 1u));
        if (gl_d[gl_r] < 256 && gl_rank[gl_r] == 0) gl_warp_count[(gl_r * {{ warps }} + gl_warp) * 256 + gl_d[gl_r]] = __popc(gl_peers);
      }
      __syncthreads();
      for (int gl_dd = threadIdx.x; gl_dd < 256; gl_dd += {{ threads }}) {
        int gl_before = 0;
        for (int gl_q = 0; gl_q < {{ rows }} * {{ warps }}; ++gl_q) {
          const int gl_c = gl_warp_count[gl_q * 256 + gl_dd];
          gl_warp_count[gl_q * 256 + gl_dd] = gl_before;
          gl_before += gl_c;
        }
        gl_tile[gl_dd] = gl_before;
      }
      __syncthreads();
#pragma unroll
      for (int gl_r = 0; gl_r < {{ rows }}; ++gl_r) {
        const long long gl_j = gl_t0 + gl_r * {{ threads }} + threadIdx.x;
        if (gl_j < gl_len) {
          const int gl_dg = gl_d[gl_r];
          const unsigned long long gl_at = gl_next[gl_dg] + gl_warp_count[(gl_r * {{ warps }} + gl_warp) * 256 + gl_dg] + gl_rank[gl_r];
          gl_dk[gl_at] = gl_k[gl_r];
          gl_dp[gl_at] = gl_sp[gl_j];
        }
      }
      __syncthreads();
      for (int gl_dd = threadIdx.x; gl_dd < 256; gl_dd += {{ threads }}) gl_next[gl_dd] += gl_tile[gl_dd];
    }
  }
  __syncthreads();
  const long long* gl_order = gl_pos[gl_src];
  for (long long gl_t = threadIdx.x; gl_t < gl_keep; gl_t += {{ threads }}) {
    const long long gl_out = (gl_o * gl_keep + gl_t) * gl_inner + gl_i;
{%- if indices %}
    {{ out }}[gl_out] = gl_order[gl_t];
{%- else %}
    {{ out }}[gl_out] = {{ input }}[(gl_o * gl_len + gl_order[gl_t]) * gl_inner + gl_i];
{%- endif %}
  }
}
{%- else %}
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_line = (long long)blockIdx.x * {{ threads }} + (long long)threadIdx.x;
  if (gl_line >= ({{ lines }})) return;
  const long long gl_inner = {{ inner }};
  const long long gl_len = {{ len }};
  const long long gl_o = gl_line / gl_inner;
  const long long gl_i = gl_line % gl_inner;
{%- if mode == "scan" %}
  // -0.0 + x is x, bit for bit: the first element is stored as it is.
  {{ acc }} gl_acc = {{ zero }};
  for (long long gl_j = 0; gl_j < gl_len; ++gl_j) {
    const long long gl_at = (gl_o * gl_len + gl_j) * gl_inner + gl_i;
    gl_acc += ({{ acc }})gl_ld({{ input }}, gl_at);
    gl_st_sum({{ out }}, gl_at, gl_acc);
  }
{%- else %}
  const long long gl_keep = {{ keep }};
  // Selection: output t is the first element, in the order, after output t - 1.
  long long gl_prev = -1;
  for (long long gl_t = 0; gl_t < gl_keep; ++gl_t) {
    long long gl_best = -1;
    for (long long gl_j = 0; gl_j < gl_len; ++gl_j) {
      const long long gl_at = (gl_o * gl_len + gl_j) * gl_inner + gl_i;
      if (gl_prev >= 0 && !gl_sort_before((gl_o * gl_len + gl_prev) * gl_inner + gl_i, gl_prev, gl_at, gl_j, {{ input }}, {{ descending }})) continue;
      if (gl_best < 0 || gl_sort_before(gl_at, gl_j, (gl_o * gl_len + gl_best) * gl_inner + gl_i, gl_best, {{ input }}, {{ descending }})) gl_best = gl_j;
    }
    const long long gl_out = (gl_o * gl_keep + gl_t) * gl_inner + gl_i;
{%- if indices %}
    {{ out }}[gl_out] = gl_best;
{%- else %}
    {{ out }}[gl_out] = {{ input }}[(gl_o * gl_len + gl_best) * gl_inner + gl_i];
{%- endif %}
    gl_prev = gl_best;
  }
{%- endif %}
}
{%- endif %}
