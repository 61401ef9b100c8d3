// {{ name }}: {{ nodes }}
{%- if part == "count" %}
// select, count: block b's number of kept elements among [b·{{ chunk }}, (b + 1)·{{ chunk }}) into gl_work[b]
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_n = {{ numel }};
  const long long gl_first = (long long)blockIdx.x * {{ chunk }};
  long long gl_kept = 0;
  for (long long gl_lin = gl_first + threadIdx.x; gl_lin < gl_first + {{ chunk }} && gl_lin < gl_n; gl_lin += {{ threads }}) {
{{ decompose }}
    gl_kept += {{ keep }} ? 1 : 0;
  }
  __shared__ long long gl_sum[{{ threads }}];
  gl_sum[threadIdx.x] = gl_kept;
  __syncthreads();
  for (int s = {{ threads }} / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) gl_sum[threadIdx.x] += gl_sum[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) gl_work[blockIdx.x] = gl_sum[0];
}
{%- elif part == "scan" %}
// select, scan (one block): gl_work[b] becomes block b's first output position; the total follows the blocks
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_n = {{ numel }};
  const long long gl_blocks = (gl_n + {{ chunk }} - 1) / {{ chunk }};
  __shared__ long long gl_s[{{ threads }}];
  long long gl_carry = 0;
  for (long long gl_base = 0; gl_base < gl_blocks; gl_base += {{ threads }}) {
    const long long gl_i = gl_base + threadIdx.x;
    const long long gl_v = gl_i < gl_blocks ? gl_work[gl_i] : 0;
    gl_s[threadIdx.x] = gl_v;
    gl_block_scan(gl_s, {{ threads }});
    if (gl_i < gl_blocks) gl_work[gl_i] = gl_carry + gl_s[threadIdx.x] - gl_v;
    gl_carry += gl_s[{{ threads }} - 1];
    __syncthreads();
  }
  if (threadIdx.x == 0) gl_work[gl_blocks] = gl_carry;
}
{%- else %}
// select, write: each tile of {{ threads }} elements scanned in shared memory; kept ones written at their positions
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_n = {{ numel }};
  const long long gl_first = (long long)blockIdx.x * {{ chunk }};
  long long gl_at = gl_work[blockIdx.x];
  __shared__ long long gl_s[{{ threads }}];
  for (long long gl_tile = gl_first; gl_tile < gl_first + {{ chunk }} && gl_tile < gl_n; gl_tile += {{ threads }}) {
    const long long gl_lin = gl_tile + threadIdx.x;
    bool gl_keep = false;
    if (gl_lin < gl_n) {
{{ decompose }}
      gl_keep = {{ keep }};
    }
    gl_s[threadIdx.x] = gl_keep ? 1 : 0;
    gl_block_scan(gl_s, {{ threads }});
    if (gl_keep) {
      const long long gl_pos = gl_at + gl_s[threadIdx.x] - 1;
{%- if store %}
      {
{{ decompose }}
{{ store }}
      }
{%- endif %}
    }
    gl_at += gl_s[{{ threads }} - 1];
    __syncthreads();
  }
}
{%- endif %}
