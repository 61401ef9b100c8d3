{%- macro scan_tile(acc, zero, items, threads, input, out, store) %}
    // The tile at gl_t0: each thread combines its run of {{ items }} in order, the runs' totals are
    // scanned across the block (the tile's total is then gl_s[{{ threads }} - 1]){% if store %}, and each
    // element is stored as gl_carry (the earlier tiles), the earlier runs, its run so far{% endif %}.
    {
      const long long gl_j0 = gl_t0 + (long long)threadIdx.x * {{ items }};
      {{ acc }} gl_run[{{ items }}];
      {{ acc }} gl_sum = {{ zero }};
#pragma unroll
      for (int gl_k = 0; gl_k < {{ items }}; ++gl_k) {
        const long long gl_j = gl_j0 + gl_k;
        if (gl_j < gl_len) gl_sum = {{ op }}()(gl_sum, ({{ acc }})gl_ld({{ input }}, gl_base + gl_j * gl_inner));
        gl_run[gl_k] = gl_sum;
      }
      gl_s[threadIdx.x] = gl_sum;
      gl_block_scan(gl_s, {{ threads }}, {{ op }}());
{%- if store %}
      const {{ acc }} gl_before = threadIdx.x == 0 ? gl_carry : {{ op }}()(gl_carry, gl_s[threadIdx.x - 1]);
#pragma unroll
      for (int gl_k = 0; gl_k < {{ items }}; ++gl_k) {
        const long long gl_j = gl_j0 + gl_k;
        if (gl_j < gl_len) gl_st_sum({{ out }}, gl_base + gl_j * gl_inner, {{ op }}()(gl_before, gl_run[gl_k]));
      }
{%- endif %}
    }
{%- endmacro scan_tile -%}
// {{ name }}: {{ nodes }}
{%- if mode == "scan" %}
// scan: running {{ what }} along each line, a thread per line, kept in {{ acc }} and each rounded once to the stored type
{%- elif mode == "scan_block" %}
// scan: running {{ what }} along each line, a block per line: tiles of {{ threads }} runs of {{ items }} in order, each run combined by its thread, the runs' totals scanned across the block; kept in {{ acc }} and each rounded once to the stored type
{%- elif mode == "scan_tiles" %}
// scan: running {{ what }} along each line, a block per tile of {{ threads * items }} of a line, launched 3 times (gl_phase): each tile's total; a block per line, the totals' exclusive scan; each tile scanned (runs of {{ items }} combined by their threads, the runs' totals scanned across the block) after what comes before it; kept in {{ acc }} and each rounded once to the stored type
{%- else %}
// sort: the first {{ keep }} of each line in {% if descending %}descending{% else %}ascending{% endif %} order (stable, NaN above every number), {% if indices %}their positions{% else %}their values{% endif %}; a thread per line
{%- endif %}
{%- if mode == "scan_block" or mode == "scan_tiles" %}
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
{% include "line_block.cu" %}
  const long long gl_base = (gl_line / gl_inner) * gl_len * gl_inner + gl_line % gl_inner;
  __shared__ {{ acc }} gl_s[{{ threads }}];
{%- if mode == "scan_tiles" %}
  // Each tile's total, then what comes before it (the identity before the first: its first element is
  // stored as it is).
  {{ acc }}* gl_before_tile = reinterpret_cast<{{ acc }}*>(gl_work_bytes) + gl_line * gl_tiles;
  if (gl_phase == 0) {
    const long long gl_t0 = gl_tile * {{ threads * items }};
{{ self::scan_tile(acc=acc, zero=zero, items=items, threads=threads, input=input, out=out, store=false) }}
    if (threadIdx.x == 0) gl_before_tile[gl_tile] = gl_s[{{ threads }} - 1];
  } else if (gl_phase == 1) {
    // The line's block (its first tile's): the exclusive scan of the tiles' totals, {{ threads }} at a time.
    if (gl_tile != 0) return;
    {{ acc }} gl_carry = {{ zero }};
    for (long long gl_c0 = 0; gl_c0 < gl_tiles; gl_c0 += {{ threads }}) {
      const long long gl_t = gl_c0 + threadIdx.x;
      gl_s[threadIdx.x] = gl_t < gl_tiles ? gl_before_tile[gl_t] : {{ zero }};
      gl_block_scan(gl_s, {{ threads }}, {{ op }}());
      if (gl_t < gl_tiles) gl_before_tile[gl_t] = threadIdx.x == 0 ? gl_carry : {{ op }}()(gl_carry, gl_s[threadIdx.x - 1]);
      gl_carry = {{ op }}()(gl_carry, gl_s[{{ threads }} - 1]);
      __syncthreads();
    }
  } else {
    const long long gl_t0 = gl_tile * {{ threads * items }};
    const {{ acc }} gl_carry = gl_before_tile[gl_tile];
{{ self::scan_tile(acc=acc, zero=zero, items=items, threads=threads, input=input, out=out, store=true) }}
  }
{%- else %}
  // The identity combined with x is x, bit for bit: the first element is stored as it is.
  {{ acc }} gl_carry = {{ zero }};
  for (long long gl_t0 = 0; gl_t0 < gl_len; gl_t0 += {{ threads * items }}) {
{{ self::scan_tile(acc=acc, zero=zero, items=items, threads=threads, input=input, out=out, store=true) }}
    gl_carry = {{ op }}()(gl_carry, gl_s[{{ threads }} - 1]);
    __syncthreads();
  }
{%- endif %}
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
  // The identity combined with x is x, bit for bit: the first element is stored as it is.
  {{ acc }} gl_acc = {{ zero }};
  for (long long gl_j = 0; gl_j < gl_len; ++gl_j) {
    const long long gl_at = (gl_o * gl_len + gl_j) * gl_inner + gl_i;
    gl_acc = {{ op }}()(gl_acc, ({{ acc }})gl_ld({{ input }}, gl_at));
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
