// {{ name }}: {{ nodes }}
{%- if mma %}
// grouped matmul ({{ grouped }} groups): a block per {{ tm }} × {{ tn }} output tile of one group's rows; k in steps of {{ tk }} through shared memory; tensor cores (WMMA 16 × 16 × 16, f32 accumulators), each warp {{ frags }} fragments of one fragment row
#ifndef GUARDLESS_EMULATION
#include <mma.h>
#endif
{%- else %}
// grouped matmul ({{ grouped }} groups): a block per {{ tm }} × {{ tn }} output tile of one group's rows; k in steps of {{ tk }} through shared memory; each thread accumulates its {{ per }} × {{ per }} outputs in k order, in {{ acc }}
{%- endif %}
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
{%- if mma %}
  // Rows padded by 8 elements (16 bytes): fragment loads stay 32-byte aligned, rows spread
  // over the banks.
  __shared__ __align__(32) {{ elem }} gl_as[{{ tm }}][{{ tk }} + 8];
  __shared__ __align__(32) {{ elem }} gl_bs[{{ tk }}][{{ tn }} + 8];
  __shared__ __align__(32) float gl_cs[{{ tm }}][{{ tn }} + 4];
  // The warp's fragment row, and its first fragment column.
  const int gl_warp = threadIdx.x / 32;
  const int gl_fr = gl_warp / ({{ tn }} / 16 / {{ frags }}), gl_fc = (gl_warp % ({{ tn }} / 16 / {{ frags }})) * {{ frags }};
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> gl_acc[{{ frags }}];
  for (int gl_j = 0; gl_j < {{ frags }}; ++gl_j) nvcuda::wmma::fill_fragment(gl_acc[gl_j], 0.0f);
  for (long long gl_kt = 0; gl_kt < gl_inner && gl_grp >= 0; gl_kt += {{ tk }}) {
    for (int gl_e = threadIdx.x; gl_e < {{ tm }} * {{ tk }}; gl_e += {{ threads }}) {
      const int gl_ar = {% if a_rows_fastest %}gl_e % {{ tm }}{% else %}gl_e / {{ tk }}{% endif %}, gl_ak = {% if a_rows_fastest %}gl_e / {{ tm }}{% else %}gl_e % {{ tk }}{% endif %};
      const long long {{ row }} = gl_r0 + gl_ar, {{ k }} = gl_kt + gl_ak;
      gl_as[gl_ar][gl_ak] = ({{ row }} < gl_r1 && {{ k }} < gl_inner) ? {{ a }}[{{ a_index }}] : {{ elem_zero }};
    }
    for (int gl_e = threadIdx.x; gl_e < {{ tk }} * {{ tn }}; gl_e += {{ threads }}) {
      const int gl_bk = {% if b_k_fastest %}gl_e % {{ tk }}{% else %}gl_e / {{ tn }}{% endif %}, gl_bc = {% if b_k_fastest %}gl_e / {{ tk }}{% else %}gl_e % {{ tn }}{% endif %};
      const long long {{ k }} = gl_kt + gl_bk, {{ col }} = gl_c0 + gl_bc;
      gl_bs[gl_bk][gl_bc] = ({{ col }} < gl_cols && {{ k }} < gl_inner) ? {{ b }}[{{ b_index }}] : {{ elem_zero }};
    }
    __syncthreads();
    for (int gl_kk = 0; gl_kk < {{ tk }}; gl_kk += 16) {
      nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, {{ elem }}, nvcuda::wmma::row_major> gl_fa;
      nvcuda::wmma::load_matrix_sync(gl_fa, &gl_as[gl_fr * 16][gl_kk], {{ tk }} + 8);
      for (int gl_j = 0; gl_j < {{ frags }}; ++gl_j) {
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, {{ elem }}, nvcuda::wmma::row_major> gl_fb;
        nvcuda::wmma::load_matrix_sync(gl_fb, &gl_bs[gl_kk][(gl_fc + gl_j) * 16], {{ tn }} + 8);
        nvcuda::wmma::mma_sync(gl_acc[gl_j], gl_fa, gl_fb, gl_acc[gl_j]);
      }
    }
    __syncthreads();
  }
  // Through shared memory, so that the stores check the tile's bounds and round once.
  for (int gl_j = 0; gl_j < {{ frags }}; ++gl_j)
    nvcuda::wmma::store_matrix_sync(&gl_cs[gl_fr * 16][(gl_fc + gl_j) * 16], gl_acc[gl_j], {{ tn }} + 4, nvcuda::wmma::mem_row_major);
  __syncthreads();
  for (int gl_e = threadIdx.x; gl_e < {{ tm }} * {{ tn }}; gl_e += {{ threads }}) {
    const long long {{ row }} = gl_r0 + gl_e / {{ tn }}, {{ col }} = gl_c0 + gl_e % {{ tn }};
    if ({{ row }} < gl_r1 && {{ col }} < gl_cols) gl_st({{ out }}, {{ store_index }}, gl_cs[gl_e / {{ tn }}][gl_e % {{ tn }}]);
  }
}
{%- else %}
  __shared__ {{ acc }} gl_as[{{ tk }}][{{ tm }}];
  __shared__ {{ acc }} gl_bs[{{ tk }}][{{ tn }}];
  const int gl_tr = threadIdx.x / {{ tn_threads }}, gl_tc = threadIdx.x % {{ tn_threads }};
  {{ acc }} gl_acc[{{ per }}][{{ per }}];
  for (int gl_i = 0; gl_i < {{ per }}; ++gl_i)
    for (int gl_j = 0; gl_j < {{ per }}; ++gl_j) gl_acc[gl_i][gl_j] = 0;
  for (long long gl_kt = 0; gl_kt < gl_inner && gl_grp >= 0; gl_kt += {{ tk }}) {
    for (int gl_e = threadIdx.x; gl_e < {{ tm }} * {{ tk }}; gl_e += {{ threads }}) {
      const int gl_ar = {% if a_rows_fastest %}gl_e % {{ tm }}{% else %}gl_e / {{ tk }}{% endif %}, gl_ak = {% if a_rows_fastest %}gl_e / {{ tm }}{% else %}gl_e % {{ tk }}{% endif %};
      const long long {{ row }} = gl_r0 + gl_ar, {{ k }} = gl_kt + gl_ak;
      gl_as[gl_ak][gl_ar] = ({{ row }} < gl_r1 && {{ k }} < gl_inner) ? ({{ acc }})gl_ld({{ a }}, {{ a_index }}) : ({{ acc }})0;
    }
    for (int gl_e = threadIdx.x; gl_e < {{ tk }} * {{ tn }}; gl_e += {{ threads }}) {
      const int gl_bk = {% if b_k_fastest %}gl_e % {{ tk }}{% else %}gl_e / {{ tn }}{% endif %}, gl_bc = {% if b_k_fastest %}gl_e / {{ tk }}{% else %}gl_e % {{ tn }}{% endif %};
      const long long {{ k }} = gl_kt + gl_bk, {{ col }} = gl_c0 + gl_bc;
      gl_bs[gl_bk][gl_bc] = ({{ col }} < gl_cols && {{ k }} < gl_inner) ? ({{ acc }})gl_ld({{ b }}, {{ b_index }}) : ({{ acc }})0;
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
{%- endif %}
