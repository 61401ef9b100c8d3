// {{ name }}: {{ nodes }}
// {{ what }}: one thread each of {{ threads }} per block
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_lin = (long long)blockIdx.x * {{ threads }} + (long long)threadIdx.x;
  if (gl_lin >= ({{ count }})) return;
{{ decompose }}
{{ body }}
}
