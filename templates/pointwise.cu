// {{ name }}: {{ nodes }}
// pointwise over {{ numel_text }} elements; {{ threads }} threads × {{ ept }} elements, vector {{ vector }}, {{ index }} indices
extern "C" __global__ void __launch_bounds__({{ bounds }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const {{ idx }} gl_numel = {{ numel }};
  // A block covers {{ threads }} × {{ ept }} elements; a thread's chunks are {{ threads }} × {{ vector }} apart.
  const {{ idx }} gl_first = ({{ idx }})blockIdx.x * ({{ threads }} * {{ ept }}) + ({{ idx }})threadIdx.x * {{ vector }};
#pragma unroll
  for (int gl_chunk = 0; gl_chunk < {{ chunks }}; ++gl_chunk) {
{%- if vectorized %}
    // A chunk of {{ vector }} elements is all in range or all out, and lies in one row.
    const {{ idx }} gl_lin0 = gl_first + ({{ idx }})gl_chunk * {{ threads }} * {{ vector }};
    if (gl_lin0 < gl_numel) {
{{ vector_decls }}
      {
        const {{ idx }} gl_lin = gl_lin0;
{{ decompose }}
{{ vector_loads }}
      }
#pragma unroll
      for (int gl_l = 0; gl_l < {{ vector }}; ++gl_l) {
        const {{ idx }} gl_lin = gl_lin0 + gl_l;
{{ decompose }}
{{ body }}
      }
      {
        const {{ idx }} gl_lin = gl_lin0;
{{ decompose }}
{{ vector_stores }}
      }
    }
{%- else %}
#pragma unroll
    for (int gl_l = 0; gl_l < {{ vector }}; ++gl_l) {
      const {{ idx }} gl_lin = gl_first + ({{ idx }})gl_chunk * {{ threads }} * {{ vector }} + gl_l;
      if (gl_lin < gl_numel) {
{{ decompose }}
{{ body }}
      }
    }
{%- endif %}
  }
}
