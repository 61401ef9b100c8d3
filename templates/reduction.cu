// {{ name }}: {{ nodes }}
// {{ strategy }} reduction: {{ rows_text }} rows × {{ len_text }}; {{ threads }} threads, {{ tpr }} per row, {{ lanes }} lanes ({{ lpt }} per thread), vector {{ vector }}, {{ index }} indices
// Reduction order: lane l accumulates elements l, l + {{ lanes }}, …; lanes combine in a balanced tree.
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const {{ idx }} gl_rows = {{ rows }};
  const {{ idx }} gl_len = {{ len }};
  const int gl_tid = threadIdx.x % {{ tpr }};
  const {{ idx }} gl_row = ({{ idx }})blockIdx.x * {{ rows_per_block }} + threadIdx.x / {{ tpr }};
  const bool gl_active = gl_row < gl_rows;
  __shared__ char gl_smem_raw[{{ smem_bytes }}];
{{ decompose_row }}
{{ persistent_decls }}
{% for pass in passes %}
  // pass {{ loop.index0 }}
{{ pass.init }}
{%- if pass.persistent %}
  // Persistent: at most {{ pass.steps }} steps per thread; the row stays in registers.
#pragma unroll
  for (int gl_j = 0; gl_j < {{ pass.steps }}; ++gl_j) {
    const {{ idx }} gl_c = ({{ idx }})gl_tid * {{ lpt }} + ({{ idx }})gl_j * {{ lanes }};
    if (gl_c >= gl_len) break;
{%- else %}
  for ({{ idx }} gl_c = ({{ idx }})gl_tid * {{ lpt }}; gl_c < gl_len; gl_c += {{ lanes }}) {
{%- endif %}
{%- if pass.vectorized %}
    // The thread's {{ lpt }} lanes are whole 16-byte words of the row (the variant's predicate).
{{ pass.vector_decls }}
    if (gl_active) {
      const {{ idx }} gl_r = gl_c;
{{ pass.decompose }}
{{ pass.vector_loads }}
    }
{{ pass.unroll }}
    for (int gl_l = 0; gl_l < {{ lpt }}; ++gl_l) {
      const {{ idx }} gl_r = gl_c + gl_l;
      if (gl_active) {
{{ pass.decompose }}
{{ pass.body }}
      }
    }
    if (gl_active) {
      const {{ idx }} gl_r = gl_c;
{{ pass.decompose }}
{{ pass.vector_stores }}
    }
{%- else %}
{{ pass.unroll }}
    for (int gl_l = 0; gl_l < {{ lpt }}; ++gl_l) {
      const {{ idx }} gl_r = gl_c + gl_l;
      if (gl_active && gl_r < gl_len) {
{{ pass.decompose }}
{{ pass.body }}
      }
    }
{%- endif %}
  }
{{ pass.finish }}
{% endfor %}
}
