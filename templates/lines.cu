// {{ name }}: {{ nodes }}
{%- if mode == "scan" %}
// scan: running sums along each line, a thread per line, rounded to the stored type after each addition
{%- else %}
// sort: the first {{ keep }} of each line in {% if descending %}descending{% else %}ascending{% endif %} order (stable, NaN above every number), {% if indices %}their positions{% else %}their values{% endif %}; a thread per line
{%- endif %}
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_line = (long long)blockIdx.x * {{ threads }} + (long long)threadIdx.x;
  if (gl_line >= ({{ lines }})) return;
  const long long gl_inner = {{ inner }};
  const long long gl_len = {{ len }};
  const long long gl_o = gl_line / gl_inner;
  const long long gl_i = gl_line % gl_inner;
{%- if mode == "scan" %}
  {{ acc }} gl_acc = 0;
  for (long long gl_j = 0; gl_j < gl_len; ++gl_j) {
    const long long gl_at = (gl_o * gl_len + gl_j) * gl_inner + gl_i;
    // The first element as it is (0 + -0.0 would be +0.0).
    const auto gl_v = gl_ld({{ input }}, gl_at);
    if (gl_j == 0) gl_st({{ out }}, gl_at, gl_v); else gl_st({{ out }}, gl_at, gl_acc + gl_v);
    gl_acc = gl_ld({{ out }}, gl_at);
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
