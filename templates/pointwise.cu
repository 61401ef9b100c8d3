// {{ name }}: {{ nodes }}
// pointwise over {{ numel_text }} elements; {{ threads }} threads × {{ ept }} elements, vector {{ vector }}, {{ index }} indices
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const {{ idx }} gl_numel = {{ numel }};
  const {{ idx }} gl_first = (({{ idx }})blockIdx.x * {{ threads }} + threadIdx.x) * {{ vector }};
#pragma unroll
  for (int gl_chunk = 0; gl_chunk < {{ chunks }}; ++gl_chunk) {
#pragma unroll
    for (int gl_l = 0; gl_l < {{ vector }}; ++gl_l) {
      const {{ idx }} gl_lin = gl_first + ({{ idx }})gl_chunk * {{ threads }} * {{ vector }} + gl_l;
      if (gl_lin < gl_numel) {
{{ decompose }}
{{ body }}
      }
    }
  }
}
