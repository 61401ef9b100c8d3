// {{ name }}: {{ nodes }}
{%- if mode == "radix" %}
// sort: the first {{ keep }} of each line in {% if descending %}descending{% else %}ascending{% endif %} order (stable, NaN above every number), {% if indices %}their positions{% else %}their values{% endif %}; a block per line: a stable least-significant-digit radix sort of 2-bit digits over key bits [{{ lo }}, {{ hi }}), keys and positions moving between two halves of the line's workspace
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
  __shared__ long long gl_s[{{ threads }}];
  int gl_src = 0;
  for (int gl_bit = {{ lo }}; gl_bit < {{ hi }}; gl_bit += 2, gl_src ^= 1) {
    const unsigned long long* gl_sk = gl_keys[gl_src];
    const long long* gl_sp = gl_pos[gl_src];
    unsigned long long* gl_dk = gl_keys[gl_src ^ 1];
    long long* gl_dp = gl_pos[gl_src ^ 1];
    // Each digit's first position: the counts of the smaller digits.
    long long gl_count[4] = {0, 0, 0, 0};
    __syncthreads();
    for (long long gl_j = threadIdx.x; gl_j < gl_len; gl_j += {{ threads }}) gl_count[(gl_sk[gl_j] >> gl_bit) & 3] += 1;
    long long gl_next[4];
    long long gl_total = 0;
    for (int gl_d = 0; gl_d < 4; ++gl_d) {
      gl_s[threadIdx.x] = gl_count[gl_d];
      gl_block_scan(gl_s, {{ threads }});
      gl_next[gl_d] = gl_total;
      gl_total += gl_s[{{ threads }} - 1];
      __syncthreads();
    }
    // Tiles in order; within one, an element's rank among its digit's from a scan of one
    // 16-bit count per digit packed in 64 bits.
    for (long long gl_t0 = 0; gl_t0 < gl_len; gl_t0 += {{ threads }}) {
      const long long gl_j = gl_t0 + threadIdx.x;
      const bool gl_in = gl_j < gl_len;
      const unsigned long long gl_k = gl_in ? gl_sk[gl_j] : 0;
      const int gl_d = (int)((gl_k >> gl_bit) & 3);
      gl_s[threadIdx.x] = gl_in ? (1ll << (16 * gl_d)) : 0;
      gl_block_scan(gl_s, {{ threads }});
      const long long gl_rank = ((gl_s[threadIdx.x] >> (16 * gl_d)) & 0xFFFF) - 1;
      const long long gl_tile = gl_s[{{ threads }} - 1];
      __syncthreads();
      if (gl_in) {
        const long long gl_at = gl_next[gl_d] + gl_rank;
        gl_dk[gl_at] = gl_k;
        gl_dp[gl_at] = gl_sp[gl_j];
      }
      for (int gl_q = 0; gl_q < 4; ++gl_q) gl_next[gl_q] += (gl_tile >> (16 * gl_q)) & 0xFFFF;
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
