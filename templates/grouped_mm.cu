// {{ name }}: {{ nodes }}
// grouped matmul ({{ grouped }} groups): a block per {{ tm }} × {{ tn }} output tile of one group's rows; k in steps of {{ tk }} through shared memory; each thread accumulates its {{ per }} × {{ per }} outputs in k order, in {{ acc }}
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_cols = {{ cols }};
  const long long gl_inner = {{ inner }};
  const long long gl_col_tiles = (gl_cols + {{ tn }} - 1) / {{ tn }};
  if (gl_col_tiles == 0) return;
  const long long gl_c0 = ((long long)blockIdx.x % gl_col_tiles) * {{ tn }};
  // The group and the rows [gl_r0, gl_r1) of this block's row tile (tiles never span groups).
  long long gl_tile = (long long)blockIdx.x / gl_col_tiles, gl_grp = -1, gl_r0 = 0, gl_r1 = 0;
{%- if grouped == "row" %}
  const long long gl_groups = {{ groups }};
  const long long gl_limit = {{ limit }};
{{ check }}
  // Each group's rows in tiles, then the rows past the last offset (a zero group).
  {
    long long gl_start = 0;
    for (long long gl_i = 0; gl_i <= gl_groups; ++gl_i) {
      long long gl_end = gl_i < gl_groups ? (long long){{ offs }}[gl_i] : gl_limit;
      gl_end = gl_end < gl_start ? gl_start : (gl_end > gl_limit ? gl_limit : gl_end);
      const long long gl_n = (gl_end - gl_start + {{ tm }} - 1) / {{ tm }};
      if (gl_tile < gl_n) {
        gl_grp = gl_i < gl_groups ? gl_i : -1;
        gl_r0 = gl_start + gl_tile * {{ tm }};
        gl_r1 = gl_r0 + {{ tm }} < gl_end ? gl_r0 + {{ tm }} : gl_end;
        break;
      }
      gl_tile -= gl_n;
      gl_start = gl_end;
    }
  }
{%- else %}
  // Each batch's rows in tiles.
  {
    const long long gl_per = ({{ rows }} + {{ tm }} - 1) / {{ tm }};
    if (gl_per > 0 && gl_tile < ({{ batches }}) * gl_per) {
      gl_grp = gl_tile / gl_per;
      gl_r0 = (gl_tile % gl_per) * {{ tm }};
      gl_r1 = gl_r0 + {{ tm }} < ({{ rows }}) ? gl_r0 + {{ tm }} : ({{ rows }});
    }
  }
{%- endif %}
  const long long {{ group_var }} = gl_grp;
  if (gl_r1 <= gl_r0) return;
  __shared__ {{ acc }} gl_as[{{ tk }}][{{ tm }}];
  __shared__ {{ acc }} gl_bs[{{ tk }}][{{ tn }}];
  const int gl_tr = threadIdx.x / {{ tn_threads }}, gl_tc = threadIdx.x % {{ tn_threads }};
  {{ acc }} gl_acc[{{ per }}][{{ per }}];
  for (int gl_i = 0; gl_i < {{ per }}; ++gl_i)
    for (int gl_j = 0; gl_j < {{ per }}; ++gl_j) gl_acc[gl_i][gl_j] = 0;
  for (long long gl_kt = 0; gl_kt < gl_inner && gl_grp >= 0; gl_kt += {{ tk }}) {
    for (int gl_e = threadIdx.x; gl_e < {{ tm }} * {{ tk }}; gl_e += {{ threads }}) {
      const long long {{ row }} = gl_r0 + gl_e / {{ tk }}, {{ k }} = gl_kt + gl_e % {{ tk }};
      gl_as[gl_e % {{ tk }}][gl_e / {{ tk }}] = ({{ row }} < gl_r1 && {{ k }} < gl_inner) ? ({{ acc }})gl_ld({{ a }}, {{ a_index }}) : ({{ acc }})0;
    }
    for (int gl_e = threadIdx.x; gl_e < {{ tk }} * {{ tn }}; gl_e += {{ threads }}) {
      const long long {{ k }} = gl_kt + gl_e / {{ tn }}, {{ col }} = gl_c0 + gl_e % {{ tn }};
      gl_bs[gl_e / {{ tn }}][gl_e % {{ tn }}] = ({{ col }} < gl_cols && {{ k }} < gl_inner) ? ({{ acc }})gl_ld({{ b }}, {{ b_index }}) : ({{ acc }})0;
    }
    __syncthreads();
    const long long gl_steps = gl_inner - gl_kt < {{ tk }} ? gl_inner - gl_kt : {{ tk }};
    for (int gl_kk = 0; gl_kk < gl_steps; ++gl_kk)
      for (int gl_i = 0; gl_i < {{ per }}; ++gl_i)
        for (int gl_j = 0; gl_j < {{ per }}; ++gl_j)
          gl_acc[gl_i][gl_j] += gl_as[gl_kk][gl_tr * {{ per }} + gl_i] * gl_bs[gl_kk][gl_tc * {{ per }} + gl_j];
    __syncthreads();
  }
  for (int gl_i = 0; gl_i < {{ per }}; ++gl_i) {
    const long long {{ row }} = gl_r0 + gl_tr * {{ per }} + gl_i;
    if ({{ row }} >= gl_r1) break;
    for (int gl_j = 0; gl_j < {{ per }}; ++gl_j) {
      const long long {{ col }} = gl_c0 + gl_tc * {{ per }} + gl_j;
      if ({{ col }} < gl_cols) gl_st({{ out }}, {{ store_index }}, gl_acc[gl_i][gl_j]);
    }
  }
}
