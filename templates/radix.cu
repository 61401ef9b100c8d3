{%- macro keys(rows, threads, key, descending, key_t, pos_t) %}
    // Keys in the host's order (descending: inverted, so a stable ascending sort keeps ties in
    // line order), and each element's position; the keys' bitwise or and and (gl_or, gl_and).
    for (int gl_r = 0; gl_r < {{ rows }}; ++gl_r) {
      const long long gl_j = gl_t0 + gl_r * {{ threads }} + threadIdx.x;
      if (gl_j >= gl_len) break;
      const auto gl_v = gl_ld(gl_in, (gl_o * gl_len + gl_j) * gl_inner + gl_i);
      const unsigned long long gl_kv = {{ key }};
      const {{ key_t }} gl_kk = ({{ key_t }})({% if descending %}~gl_kv{% else %}gl_kv{% endif %});
      gl_keys[0][gl_j] = gl_kk;
      gl_pos[0][gl_j] = ({{ pos_t }})gl_j;
      gl_or |= gl_kk;
      gl_and &= gl_kk;
    }
{%- endmacro keys %}
{%- macro bits(key_t) %}
    // The block's or and and of its keys: gl_bits[0], gl_bits[1].
    __shared__ {{ key_t }} gl_bits[2];
    if (threadIdx.x == 0) { gl_bits[0] = 0; gl_bits[1] = ~({{ key_t }})0; }
    __syncthreads();
    atomicOr(&gl_bits[0], gl_or);
    atomicAnd(&gl_bits[1], gl_and);
    __syncthreads();
{%- endmacro bits %}
{%- macro varying(lo, passes) %}
    // The passes whose digit differs between two keys (bit q: pass q); the others move nothing
    // and are skipped.
    unsigned gl_varying = 0;
    for (int gl_q = 0; gl_q < {{ passes }}; ++gl_q)
      if ((gl_vary >> ({{ lo }} + 8 * gl_q)) & 255) gl_varying |= 1u << gl_q;
{%- endmacro varying %}
{%- macro place(rows, threads, warps, first, key_t) %}
    // The tile at gl_t0 ({{ rows }} rows of {{ threads }}, in line order) placed: an element
    // goes to its digit's first position for the tile, plus the tile's elements of its digit in
    // earlier rows and warps (per-warp counts, prefix-summed per digit), plus those of earlier
    // lanes of its warp (__match_any_sync). gl_tile_count gets the tile's count of each digit.
    {
      const int gl_lane = threadIdx.x % 32, gl_warp = threadIdx.x / 32;
      __shared__ int gl_warp_count[{{ rows }} * {{ warps }} * 256];
      __syncthreads();
      for (int gl_q = threadIdx.x; gl_q < {{ rows }} * {{ warps }} * 256; gl_q += {{ threads }}) gl_warp_count[gl_q] = 0;
      __syncthreads();
      {{ key_t }} gl_k[{{ rows }}];
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
        gl_tile_count[gl_dd] = gl_before;
      }
      __syncthreads();
#pragma unroll
      for (int gl_r = 0; gl_r < {{ rows }}; ++gl_r) {
        const long long gl_j = gl_t0 + gl_r * {{ threads }} + threadIdx.x;
        if (gl_j < gl_len) {
          const int gl_dg = gl_d[gl_r];
          const unsigned long long gl_at = {{ first }} + gl_warp_count[(gl_r * {{ warps }} + gl_warp) * 256 + gl_dg] + gl_rank[gl_r];
          gl_dk[gl_at] = gl_k[gl_r];
          gl_dp[gl_at] = gl_sp[gl_j];
        }
      }
    }
{%- endmacro place %}
{%- macro exclusive_digits(counts, threads) %}
    // {{ counts }}[d] becomes the sum of the counts of the digits below d: a block scan of each
    // thread's run of them (the threads divide 256).
    __syncthreads();
    {
      const int gl_per = 256 / {{ threads }};
      unsigned long long gl_run = 0;
      for (int gl_q = 0; gl_q < gl_per; ++gl_q) gl_run += {{ counts }}[threadIdx.x * gl_per + gl_q];
      gl_s[threadIdx.x] = gl_run;
      gl_block_scan(gl_s, {{ threads }});
      unsigned long long gl_at = gl_s[threadIdx.x] - gl_run;
      for (int gl_q = 0; gl_q < gl_per; ++gl_q) {
        const unsigned long long gl_c = {{ counts }}[threadIdx.x * gl_per + gl_q];
        {{ counts }}[threadIdx.x * gl_per + gl_q] = gl_at;
        gl_at += gl_c;
      }
    }
    __syncthreads();
{%- endmacro exclusive_digits %}
{%- macro gather(indices, out) %}
    {
      const long long gl_at = (gl_o * gl_keep + gl_t) * gl_inner + gl_i;
{%- if indices %}
      {{ out }}[gl_at] = gl_order[gl_t];
{%- else %}
      {{ out }}[gl_at] = gl_in[(gl_o * gl_len + gl_order[gl_t]) * gl_inner + gl_i];
{%- endif %}
    }
{%- endmacro gather -%}
// {{ name }}: {{ nodes }}
// sort: the first {{ keep }} of each line in {% if descending %}descending{% else %}ascending{% endif %} order (stable, NaN above every number), {% if indices %}their positions{% else %}their values{% endif %}: a stable least-significant-digit radix sort of 8-bit digits over key bits [{{ lo }}, {{ hi }}), {{ passes }} passes (those whose digit is the same in every key skipped), keys and positions moving between two halves of the line's workspace; {% if mode == "tiles" %}a block per tile of {{ rows * threads }} elements of a line, launched {{ passes * 3 + 2 }} times (gl_phase): the keys; per pass, each tile's digit counts, then (a block per line) each tile's first position of each digit, then each tile placed; the first {{ keep }} gathered{% else %}a block per line, its tiles one after another{% endif %}
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const auto* gl_in = {{ input }};
{% include "line_block.cu" %}
  const long long gl_keep = {{ keep }};
  const long long gl_o = gl_line / gl_inner;
  const long long gl_i = gl_line % gl_inner;
  // The line's workspace: keys twice, then positions twice ({{ 2 * (key_bytes + pos_bytes) }} bytes an element,
  // each array aligned); picked by a select, not an index, so the pointers stay in registers.
  {{ key_t }}* gl_keys[2];
  {{ pos_t }}* gl_pos[2];
  {
    char* gl_w = gl_work_bytes + gl_line * gl_len * {{ 2 * (key_bytes + pos_bytes) }};
    gl_keys[0] = reinterpret_cast<{{ key_t }}*>(gl_w);
    gl_keys[1] = gl_keys[0] + gl_len;
    gl_pos[0] = reinterpret_cast<{{ pos_t }}*>(gl_w + 2 * gl_len * {{ key_bytes }});
    gl_pos[1] = gl_pos[0] + gl_len;
  }
  __shared__ int gl_tile_count[256];
{%- if mode == "tiles" %}
  // Past every line's keys, per line: each tile's count (then first position) of each digit;
  // each tile's or and and of its keys; the bits that differ between the line's keys.
  unsigned long long* gl_first = reinterpret_cast<unsigned long long*>(gl_work_bytes + gl_lines * gl_len * {{ 2 * (key_bytes + pos_bytes) }}) + gl_line * (gl_tiles * 258 + 1);
  unsigned long long* gl_tile_bits = gl_first + gl_tiles * 256;
  unsigned long long* gl_line_vary = gl_tile_bits + gl_tiles * 2;
  const long long gl_t0 = gl_tile * {{ rows * threads }};
  if (gl_phase == 0) {
    {{ key_t }} gl_or = 0, gl_and = ~({{ key_t }})0;
{{ self::keys(rows=rows, threads=threads, key=key, descending=descending, key_t=key_t, pos_t=pos_t) }}
{{ self::bits(key_t=key_t) }}
    if (threadIdx.x == 0) { gl_tile_bits[2 * gl_tile] = gl_bits[0]; gl_tile_bits[2 * gl_tile + 1] = gl_bits[1]; }
    return;
  }
  const int gl_pass = (int)((gl_phase - 1) / 3), gl_step = (int)((gl_phase - 1) % 3);
  // The first pass's per-line step finds the bits that vary (from the tiles'); until the next
  // launch, nothing is skipped.
  if (gl_phase == 2 && gl_tile == 0 && threadIdx.x == 0) {
    unsigned long long gl_o_bits = 0, gl_a_bits = ~0ull;
    for (long long gl_t = 0; gl_t < gl_tiles; ++gl_t) { gl_o_bits |= gl_tile_bits[2 * gl_t]; gl_a_bits &= gl_tile_bits[2 * gl_t + 1]; }
    *gl_line_vary = gl_o_bits ^ gl_a_bits;
  }
  const unsigned long long gl_vary = gl_phase <= 2 ? ~0ull : *gl_line_vary;
{{ self::varying(lo=lo, passes=passes) }}
  if (gl_pass < {{ passes }} && !((gl_varying >> gl_pass) & 1)) return;
  // Keys are in the first half until a pass runs, then in the other.
  const int gl_src = __popc(gl_varying & ((1u << gl_pass) - 1u)) & 1;
  if (gl_pass == {{ passes }}) {
    const {{ pos_t }}* gl_order = (gl_src ? gl_pos[1] : gl_pos[0]);
    for (int gl_r = 0; gl_r < {{ rows }}; ++gl_r) {
      const long long gl_t = gl_t0 + gl_r * {{ threads }} + threadIdx.x;
      if (gl_t >= gl_keep) break;
{{ self::gather(indices=indices, out=out) }}
    }
    return;
  }
  const int gl_bit = {{ lo }} + 8 * gl_pass;
  const {{ key_t }}* gl_sk = (gl_src ? gl_keys[1] : gl_keys[0]);
  const {{ pos_t }}* gl_sp = (gl_src ? gl_pos[1] : gl_pos[0]);
  {{ key_t }}* gl_dk = (gl_src ? gl_keys[0] : gl_keys[1]);
  {{ pos_t }}* gl_dp = (gl_src ? gl_pos[0] : gl_pos[1]);
  if (gl_step == 0) {
    for (int gl_d = threadIdx.x; gl_d < 256; gl_d += {{ threads }}) gl_tile_count[gl_d] = 0;
    __syncthreads();
    for (int gl_r = 0; gl_r < {{ rows }}; ++gl_r) {
      const long long gl_j = gl_t0 + gl_r * {{ threads }} + threadIdx.x;
      if (gl_j < gl_len) atomicAdd(&gl_tile_count[(gl_sk[gl_j] >> gl_bit) & 255], 1);
    }
    __syncthreads();
    for (int gl_d = threadIdx.x; gl_d < 256; gl_d += {{ threads }}) gl_first[gl_tile * 256 + gl_d] = gl_tile_count[gl_d];
  } else if (gl_step == 1) {
    // The line's block (its first tile's): a digit's first position in a tile is the line's
    // elements of smaller digits, plus the earlier tiles' elements of that digit.
    if (gl_tile != 0) return;
    __shared__ unsigned long long gl_total[256];
    __shared__ unsigned long long gl_s[{{ threads }}];
    for (int gl_d = threadIdx.x; gl_d < 256; gl_d += {{ threads }}) {
      unsigned long long gl_run = 0;
      for (long long gl_t = 0; gl_t < gl_tiles; ++gl_t) {
        const unsigned long long gl_c = gl_first[gl_t * 256 + gl_d];
        gl_first[gl_t * 256 + gl_d] = gl_run;
        gl_run += gl_c;
      }
      gl_total[gl_d] = gl_run;
    }
{{ self::exclusive_digits(counts="gl_total", threads=threads) }}
    for (int gl_d = threadIdx.x; gl_d < 256; gl_d += {{ threads }})
      for (long long gl_t = 0; gl_t < gl_tiles; ++gl_t) gl_first[gl_t * 256 + gl_d] += gl_total[gl_d];
  } else {
{{ self::place(rows=rows, threads=threads, warps=warps, first="gl_first[gl_tile * 256 + gl_dg]", key_t=key_t) }}
  }
{%- else %}
  {{ key_t }} gl_or = 0, gl_and = ~({{ key_t }})0;
  for (long long gl_t0 = 0; gl_t0 < gl_len; gl_t0 += {{ rows * threads }}) {
{{ self::keys(rows=rows, threads=threads, key=key, descending=descending, key_t=key_t, pos_t=pos_t) }}
  }
{{ self::bits(key_t=key_t) }}
  const {{ key_t }} gl_vary = gl_bits[0] ^ gl_bits[1];
  // A digit's first position in the pass (the line's counts of the smaller digits), then its
  // next one as the tiles go by.
  __shared__ unsigned long long gl_next[256];
  __shared__ unsigned long long gl_s[{{ threads }}];
  int gl_src = 0;
  for (int gl_bit = {{ lo }}; gl_bit < {{ hi }}; gl_bit += 8) {
    // A digit every key shares moves nothing: the pass is skipped.
    if (((gl_vary >> gl_bit) & 255) == 0) continue;
    const {{ key_t }}* gl_sk = (gl_src ? gl_keys[1] : gl_keys[0]);
    const {{ pos_t }}* gl_sp = (gl_src ? gl_pos[1] : gl_pos[0]);
    {{ key_t }}* gl_dk = (gl_src ? gl_keys[0] : gl_keys[1]);
    {{ pos_t }}* gl_dp = (gl_src ? gl_pos[0] : gl_pos[1]);
    __syncthreads();
    for (int gl_d = threadIdx.x; gl_d < 256; gl_d += {{ threads }}) gl_next[gl_d] = 0;
    __syncthreads();
    for (long long gl_j = threadIdx.x; gl_j < gl_len; gl_j += {{ threads }}) atomicAdd(&gl_next[(gl_sk[gl_j] >> gl_bit) & 255], 1ull);
{{ self::exclusive_digits(counts="gl_next", threads=threads) }}
    for (long long gl_t0 = 0; gl_t0 < gl_len; gl_t0 += {{ rows * threads }}) {
{{ self::place(rows=rows, threads=threads, warps=warps, first="gl_next[gl_dg]", key_t=key_t) }}
      __syncthreads();
      for (int gl_dd = threadIdx.x; gl_dd < 256; gl_dd += {{ threads }}) gl_next[gl_dd] += gl_tile_count[gl_dd];
    }
    gl_src ^= 1;
  }
  __syncthreads();
  const {{ pos_t }}* gl_order = (gl_src ? gl_pos[1] : gl_pos[0]);
  for (long long gl_t = threadIdx.x; gl_t < gl_keep; gl_t += {{ threads }}) {
{{ self::gather(indices=indices, out=out) }}
  }
{%- endif %}
}
