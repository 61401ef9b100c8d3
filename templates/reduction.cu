// {{ name }}: {{ nodes }}
{%- if blocks %}
// split reduction: {{ rows_text }} rows × {{ len_text }}; each row's {{ lanes }} lanes ({{ lpt }} per thread) over {{ blocks }} blocks of {{ threads }} threads, vector {{ vector }}, {{ index }} indices
// Launched {{ phases }} times (gl_phase 0, 1, …): launch p runs pass p over the block's lanes and writes each reduction's partial (a subtree of the lanes' balanced tree) to gl_work; later launches combine the {{ blocks }} partials in tree order, so every variant computes the same bits.
{%- else %}
// {{ strategy }} reduction: {{ rows_text }} rows × {{ len_text }}; {{ threads }} threads, {{ tpr }} per row, {{ lanes }} lanes ({{ lpt }} per thread), vector {{ vector }}, {{ index }} indices
// Reduction order: lane l accumulates elements l, l + {{ lanes }}, …; lanes combine in a balanced tree.
{%- endif %}
extern "C" __global__ void __launch_bounds__({{ bounds }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const {{ idx }} gl_rows = {{ rows }};
  const {{ idx }} gl_len = {{ len }};
{%- if blocks %}
  const int gl_part = blockIdx.x % {{ blocks }};
  const {{ idx }} gl_row = ({{ idx }})(blockIdx.x / {{ blocks }});
  // Within the block (the partial tree); the block's lanes start at its share of the row's threads.
  const int gl_tid = threadIdx.x;
  const {{ idx }} gl_first = (({{ idx }})gl_part * {{ threads }} + threadIdx.x) * {{ lpt }};
{%- else %}
  const int gl_tid = threadIdx.x % {{ tpr }};
  const {{ idx }} gl_row = ({{ idx }})blockIdx.x * {{ rows_per_block }} + threadIdx.x / {{ tpr }};
{%- endif %}
  const bool gl_active = gl_row < gl_rows;
  __shared__ char gl_smem_raw[{{ smem_bytes }}];
{{ decompose_row }}
{{ persistent_decls }}
{% for pass in passes %}
  // pass {{ loop.index0 }}
{{ pass.init }}
{%- if blocks %}
  if (gl_phase > {{ loop.index0 }}) {
{{ pass.combine }}
  } else {
  for ({{ idx }} gl_c = gl_first; gl_c < gl_len; gl_c += {{ lanes }}) {
{%- elif pass.persistent %}
{%- if pass.hoisted_decls %}
  // Every step's 16-byte words first, each step's predicated on the row's end (loads in flight together), then the steps' work.
{{ pass.hoisted_decls }}
#pragma unroll
  for (int gl_j = 0; gl_j < {{ pass.steps }}; ++gl_j) {
    const {{ idx }} gl_c = ({{ idx }})gl_tid * {{ lpt }} + ({{ idx }})gl_j * {{ lanes }};
    if (gl_active && gl_c < gl_len) {
      const {{ idx }} gl_r = gl_c;
{{ pass.decompose }}
{{ pass.vector_loads }}
    }
  }
{%- endif %}
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
{%- if not pass.hoisted_decls %}
    if (gl_active) {
      const {{ idx }} gl_r = gl_c;
{{ pass.decompose }}
{{ pass.vector_loads }}
    }
{%- endif %}
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
{%- if pass.prefetch %}
    // The thread's {{ lpt }} elements of each contiguous input, loaded together (predicated on the row's end) before any is used.
{{ pass.prefetch_decls }}
    if (gl_active) {
      const {{ idx }} gl_r = gl_c;
{{ pass.decompose }}
{{ pass.prefetch }}
    }
{%- endif %}
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
{%- if blocks %}
{{ pass.block_finish }}
  return;
  }
{{ pass.after }}
{%- else %}
{{ pass.finish }}
{%- endif %}
{% endfor %}
}
