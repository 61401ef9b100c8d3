// {{ name }}: {{ nodes }}
// Fused attention: a block of {{ threads }} threads per {{ br }} rows (a query position of one of
// the query heads of one key/value head, position-major), keys in tiles of {{ tk }} through shared
// memory, an online softmax in {{ acc }}; no score leaves the block.
{%- if mma %}
// Tensor cores: queries, keys and values staged as they are ({{ elem }}, zero-padded to whole
// fragments); the scores by mma.sync, warp w the keys 8w..8w+7 of the tile; the products with the
// values by mma.sync, warp w the output columns 8·(w + {{ warps }}·n)..+7, each probability as
// two {{ elem }} parts (the rounded value and what rounding left), so nothing is lost to the
// narrow type.
{%- endif %}
{%- if paged %}
// Paged: a tile's rows are queries of one sequence of the flattened batch (found from the query
// offsets: sequence s owns the tile slots from start(s)·group/{{ br }} + s on), its keys rows of
// the cache blocks its row of the block table names; causal with bottom-right alignment.
{%- endif %}
{%- if split %}
// Split: each block takes one share of the keys; its rows' partial results (the unnormalized
// output, the running maximum and sum) go to the workspace, merged by the next function.
{%- endif %}
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_kv_heads = {{ kv_heads }};
  const long long gl_group = ({{ heads }}) / gl_kv_heads;
  long long gl_block = blockIdx.x;
{%- if paged %}
{{ paged_sequences }}
  const long long gl_slots = gl_tokens * gl_group / {{ br }} + gl_seqs;
{%- if split %}
  // The shares: as many as {{ splits_doc }}.
  const long long gl_splits = gl_attention_splits(1, {{ br }}, gl_slots * gl_kv_heads, gl_capacity,
                                                  {{ target_blocks }}, {{ min_keys }}, {{ max_splits }});
  const long long gl_split = gl_block % gl_splits;
  gl_block /= gl_splits;
{%- endif %}
  const long long {{ kh }} = gl_block % gl_kv_heads;
  const long long gl_slot = gl_block / gl_kv_heads;
  if (gl_seqs <= 0) return;
  const long long gl_seq = gl_sequence_of_slot(gl_slot);
  const long long gl_first = gl_start(gl_seq), gl_n = gl_start(gl_seq + 1) - gl_first, gl_ctx = gl_len(gl_seq);
  // Data that breaks the rules was reported above; no read goes outside for it.
  if (gl_first < 0 || gl_n < 0 || gl_first + gl_n > gl_tokens || gl_ctx < gl_n || gl_ctx > gl_capacity) return;
  const long long gl_rows = gl_group * gl_n;
  const long long gl_row0 = (gl_slot - (gl_first * gl_group / {{ br }} + gl_seq)) * {{ br }};
  if (gl_row0 >= gl_rows) return;
  // Query position p (a token) sees keys 0..=p + gl_shift.
  const long long gl_shift = gl_ctx - gl_n - gl_first;
  __shared__ long long gl_kblock[{{ tk }}];
{%- else %}
  const long long gl_rows = gl_group * ({{ lq }});
  const long long gl_ctx = {{ lk }};
  const long long gl_tiles = (gl_rows + {{ br_last }}) / {{ br }};
{%- if split %}
  // The shares: as many as {{ splits_doc }}.
  const long long gl_splits = gl_attention_splits(gl_rows, {{ br }}, ({{ batch }}) * gl_kv_heads * gl_tiles, gl_ctx,
                                                  {{ target_blocks }}, {{ min_keys }}, {{ max_splits }});
  const long long gl_split = gl_block % gl_splits;
  gl_block /= gl_splits;
{%- endif %}
  const long long {{ b }} = gl_block / (gl_kv_heads * gl_tiles);
  const long long {{ kh }} = gl_block / gl_tiles % gl_kv_heads;
  const long long gl_row0 = gl_block % gl_tiles * {{ br }};
  const long long gl_first = 0, gl_shift = 0;
{%- endif %}
  const {{ acc }} gl_ninf = {{ ninf }};
  __shared__ __align__(16) {{ stage }} gl_q[{{ br }}][{{ q_pad }}];
  __shared__ __align__(16) {{ stage }} gl_k[{{ tk }}][{{ k_pad }}];
  __shared__ __align__(16) {{ stage }} gl_v[{{ tk }}][{{ v_pad }}];
  __shared__ {{ acc }} gl_p[{{ br }}][{{ tk }}];
  __shared__ {{ acc }} gl_top[{{ br }}], gl_sum[{{ br }}], gl_shrink[{{ br }}];
  // The rows' queries{% if not mma %}, scaled{% endif %} (rows past the last, and columns past the head dim, are 0).
  for (int gl_i = threadIdx.x; gl_i < {{ br }} * {{ d_cols }}; gl_i += {{ threads }}) {
    const long long gl_row = gl_row0 + gl_i / {{ d_cols }};
    const int gl_col = gl_i % {{ d_cols }};
    {{ acc }} gl_x = 0;
    if (gl_row < gl_rows && gl_col < {{ d }}) {
      const long long {{ pos }} = gl_first + gl_row / gl_group;
      const long long {{ h }} = {{ kh }} * gl_group + gl_row % gl_group;
      const long long {{ t }} = gl_col;
      gl_x = ({{ acc }})gl_ld({{ q }}, {{ q_index }}){% if not mma %} * ({{ acc }}){{ scale }}{% endif %};
    }
    gl_q[gl_i / {{ d_cols }}][gl_col] = {{ to_stage }}(gl_x);
  }
  if (threadIdx.x < {{ br }}) {
    gl_top[threadIdx.x] = gl_ninf;
    gl_sum[threadIdx.x] = 0;
  }
  // The keys the rows can see: all of them, or (causal) up to the last row's limit.
  long long gl_keys = gl_ctx;
  long long gl_lo = 0;
{%- if causal %}
  {
    long long gl_last = gl_row0 + {{ br_last }};
    if (gl_last > gl_rows - 1) gl_last = gl_rows - 1;
    if (gl_first + gl_last / gl_group + gl_shift + 1 < gl_keys) gl_keys = gl_first + gl_last / gl_group + gl_shift + 1;
  }
{%- endif %}
{%- if split %}
  {
    // This block's share: tiles of keys from gl_lo, the same shares for every block of a sequence.
    const long long gl_chunk = ((gl_ctx + gl_splits - 1) / gl_splits + {{ tk_last }}) / {{ tk }} * {{ tk }};
    gl_lo = gl_split * gl_chunk;
    if (gl_lo + gl_chunk < gl_keys) gl_keys = gl_lo + gl_chunk;
  }
{%- endif %}
  const int gl_lane = threadIdx.x % 32, gl_warp = threadIdx.x / 32;
{%- if mma %}
  // A fragment's rows and columns for this lane: rows gl_g and gl_g + 8, columns gl_c2, gl_c2 + 1.
  const int gl_g = gl_lane / 4, gl_c2 = gl_lane % 4 * 2;
  // This thread's outputs: fragment n holds columns 8·(gl_warp + {{ warps }}·n) + gl_c2 (+1) of
  // rows gl_g (elements 0, 1) and gl_g + 8 (2, 3).
{%- else %}
  // This thread's outputs: rows gl_warp + {{ warps }}·i, columns gl_lane + 32·m.
{%- endif %}
  {{ acc }} gl_o[{{ o_rows }}][{{ o_cols }}];
#pragma unroll
  for (int gl_i = 0; gl_i < {{ o_rows }}; ++gl_i)
#pragma unroll
    for (int gl_m = 0; gl_m < {{ o_cols }}; ++gl_m) gl_o[gl_i][gl_m] = 0;
  for (long long gl_k0 = gl_lo; gl_k0 < gl_keys; gl_k0 += {{ tk }}) {
    // The last tile's readers are done (the first time: the queries and statistics written).
    __syncthreads();
{%- if paged %}
    // The cache block of each key of the tile, from the block table (one read per key).
    if (threadIdx.x < {{ tk }}) {
      const long long {{ key }} = gl_k0 + threadIdx.x;
      long long gl_at = 0;
      if ({{ key }} < gl_keys) {
        gl_at = gl_block_of(gl_seq, {{ key }} / {{ block_size }});
        if (gl_at < 0 || gl_at >= gl_cache_blocks) {
          gl_fail(gl_error, {{ block_error }});
          gl_at = 0;
        }
      }
      gl_kblock[threadIdx.x] = gl_at;
    }
    __syncthreads();
{%- endif %}
{%- for o in staged %}
{%- if o.vector %}
    // {{ o.what }} 16 bytes at a time (8 elements of a key's row, contiguous in memory); a word
    // that is not whole or not aligned goes element by element.
    for (int gl_i = threadIdx.x; gl_i < {{ tk }} * {{ o.cols }} / 8; gl_i += {{ threads }}) {
      const int gl_r = gl_i / ({{ o.cols }} / 8);
      const long long {{ key }} = gl_k0 + gl_r;
      const long long {{ o.col }} = gl_i % ({{ o.cols }} / 8) * 8;
{%- if paged %}
      const long long {{ cache_block }} = gl_kblock[gl_r], {{ cache_row }} = {{ key }} % {{ block_size }};
{%- endif %}
      const long long gl_at = {{ key }} < gl_keys ? {{ o.index }} : 0;
      if ({{ key }} < gl_keys && {{ o.col }} + 8 <= {{ o.dim }} && gl_at % 8 == 0 && reinterpret_cast<unsigned long long>({{ o.ptr }}) % 16 == 0) {
        *reinterpret_cast<uint4*>(&{{ o.shared }}[gl_r][{{ o.col }}]) = *reinterpret_cast<const uint4*>({{ o.ptr }} + gl_at);
      } else {
        for (int gl_e = 0; gl_e < 8; ++gl_e)
          {{ o.shared }}[gl_r][{{ o.col }} + gl_e] = {{ key }} < gl_keys && {{ o.col }} + gl_e < {{ o.dim }} ? {{ o.ptr }}[gl_at + gl_e] : {{ to_stage }}(0.0f);
      }
    }
{%- else %}
    for (int gl_i = threadIdx.x; gl_i < {{ tk }} * {{ o.cols }}; gl_i += {{ threads }}) {
      const long long {{ key }} = gl_k0 + gl_i / {{ o.cols }};
      const long long {{ o.col }} = gl_i % {{ o.cols }};
{%- if paged %}
      const long long {{ cache_block }} = gl_kblock[gl_i / {{ o.cols }}], {{ cache_row }} = {{ key }} % {{ block_size }};
{%- endif %}
      {{ o.shared }}[gl_i / {{ o.cols }}][{{ o.col }}] = {{ to_stage }}({{ key }} < gl_keys && {{ o.col }} < {{ o.dim }} ? ({{ acc }})gl_ld({{ o.ptr }}, {{ o.index }}) : ({{ acc }})0);
    }
{%- endif %}
{%- endfor %}
    __syncthreads();
{%- if mma %}
    // The products of the tile on the tensor cores, warp gl_warp's 8 keys for the 16 rows.
    {
      float gl_s4[4] = {0, 0, 0, 0};
      const int gl_j = 8 * gl_warp + gl_g;
#pragma unroll
      for (int gl_t = 0; gl_t < {{ d_cols }}; gl_t += 16) {
        const unsigned gl_a[4] = {gl_word(&gl_q[gl_g][gl_t + gl_c2]), gl_word(&gl_q[gl_g + 8][gl_t + gl_c2]),
                                  gl_word(&gl_q[gl_g][gl_t + gl_c2 + 8]), gl_word(&gl_q[gl_g + 8][gl_t + gl_c2 + 8])};
        const unsigned gl_b[2] = {gl_word(&gl_k[gl_j][gl_t + gl_c2]), gl_word(&gl_k[gl_j][gl_t + gl_c2 + 8])};
        gl_mma(gl_s4, gl_a, gl_b, {{ elem }}());
      }
      gl_p[gl_g][8 * gl_warp + gl_c2] = gl_s4[0];
      gl_p[gl_g][8 * gl_warp + gl_c2 + 1] = gl_s4[1];
      gl_p[gl_g + 8][8 * gl_warp + gl_c2] = gl_s4[2];
      gl_p[gl_g + 8][8 * gl_warp + gl_c2 + 1] = gl_s4[3];
    }
    __syncthreads();
{%- endif %}
    // Scores: key gl_j of the tile for rows threadIdx.x / {{ tk }} + {{ rows_per_pass }}·i.
    for (int gl_r = threadIdx.x / {{ tk }}; gl_r < {{ br }}; gl_r += {{ rows_per_pass }}) {
      const int gl_j = threadIdx.x % {{ tk }};
      const long long gl_row = gl_row0 + gl_r;
      const long long {{ key }} = gl_k0 + gl_j;
      {{ acc }} gl_s = gl_ninf;
      if (gl_row < gl_rows && {{ key }} < gl_keys) {
        const long long {{ pos }} = gl_first + gl_row / gl_group;
        const long long {{ h }} = {{ kh }} * gl_group + gl_row % gl_group;
{%- if mma %}
        gl_s = gl_p[gl_r][gl_j] * {{ scale }};
{%- else %}
        {{ acc }} gl_dot = 0;
#pragma unroll 8
        for (int gl_t = 0; gl_t < {{ d }}; ++gl_t) gl_dot += gl_q[gl_r][gl_t] * gl_k[gl_j][gl_t];
        gl_s = gl_dot;
{%- endif %}
{%- if mask == "bool" %}
        if (!gl_ld({{ m }}, {{ m_index }})) gl_s = gl_ninf;
{%- elif mask == "add" %}
        gl_s += ({{ acc }})gl_ld({{ m }}, {{ m_index }});
{%- endif %}
{%- if causal %}
        if ({{ key }} > {{ pos }} + gl_shift) gl_s = gl_ninf;
{%- endif %}
        (void){{ h }};
        (void){{ pos }};
      }
      gl_p[gl_r][gl_j] = gl_s;
    }
    __syncthreads();
    // The online softmax: warp gl_warp takes rows gl_warp + {{ warps }}·i; the tile's maximum
    // and sum by shuffles; each row's running sum and output shrink when its maximum grows.
    for (int gl_r = gl_warp; gl_r < {{ br }}; gl_r += {{ warps }}) {
      const {{ acc }} gl_s = gl_lane < {{ tk }} ? gl_p[gl_r][gl_lane] : gl_ninf;
      {{ acc }} gl_m = gl_s;
      for (int gl_off = 16; gl_off > 0; gl_off /= 2) gl_m = {{ fmax }}(gl_m, __shfl_down_sync(0xffffffffu, gl_m, gl_off));
      gl_m = __shfl_sync(0xffffffffu, gl_m, 0);
      const {{ acc }} gl_old = gl_top[gl_r];
      const {{ acc }} gl_new = {{ fmax }}(gl_old, gl_m);
      {{ acc }} gl_e = 0, gl_shrink_r = 1;
      if (gl_new != gl_ninf) {
        gl_e = {{ exp }}(gl_s - gl_new);
        gl_shrink_r = {{ exp }}(gl_old - gl_new);
      }
      {{ acc }} gl_total = gl_e;
      for (int gl_off = 16; gl_off > 0; gl_off /= 2) gl_total += __shfl_down_sync(0xffffffffu, gl_total, gl_off);
      if (gl_lane < {{ tk }}) gl_p[gl_r][gl_lane] = gl_e;
      if (gl_lane == 0) {
        gl_top[gl_r] = gl_new;
        gl_sum[gl_r] = gl_sum[gl_r] * gl_shrink_r + gl_total;
        gl_shrink[gl_r] = gl_shrink_r;
      }
    }
    __syncthreads();
{%- if mma %}
    {
      // The tile's probabilities as A fragments (two parts each), for both halves of the keys.
      unsigned gl_hi[{{ tk }} / 16][4], gl_lo[{{ tk }} / 16][4];
#pragma unroll
      for (int gl_s = 0; gl_s < {{ tk }} / 16; ++gl_s)
#pragma unroll
        for (int gl_w = 0; gl_w < 4; ++gl_w) {
          const int gl_r = gl_g + 8 * (gl_w % 2), gl_j = 16 * gl_s + gl_c2 + 8 * (gl_w / 2);
          gl_split_pair<{{ elem }}>(gl_p[gl_r][gl_j], gl_p[gl_r][gl_j + 1], gl_hi[gl_s][gl_w], gl_lo[gl_s][gl_w]);
        }
      const float gl_shrink_g = gl_shrink[gl_g], gl_shrink_g8 = gl_shrink[gl_g + 8];
#pragma unroll
      for (int gl_n = 0; gl_n < {{ o_rows }}; ++gl_n) {
        const int gl_col = 8 * (gl_warp + {{ warps }} * gl_n) + gl_g;
        // (continue, not break: an early exit from the unrolled loop made ptxas spill)
        if (gl_col - gl_g >= {{ dv_cols }}) continue;
        gl_o[gl_n][0] *= gl_shrink_g;
        gl_o[gl_n][1] *= gl_shrink_g;
        gl_o[gl_n][2] *= gl_shrink_g8;
        gl_o[gl_n][3] *= gl_shrink_g8;
#pragma unroll
        for (int gl_s = 0; gl_s < {{ tk }} / 16; ++gl_s) {
          const int gl_j = 16 * gl_s + gl_c2;
          const unsigned gl_b[2] = {gl_pair(gl_v[gl_j][gl_col], gl_v[gl_j + 1][gl_col]),
                                    gl_pair(gl_v[gl_j + 8][gl_col], gl_v[gl_j + 9][gl_col])};
          gl_mma(gl_o[gl_n], gl_hi[gl_s], gl_b, {{ elem }}());
          gl_mma(gl_o[gl_n], gl_lo[gl_s], gl_b, {{ elem }}());
        }
      }
    }
{%- else %}
#pragma unroll
    for (int gl_i = 0; gl_i < {{ rpt }}; ++gl_i) {
      const int gl_r = gl_warp + {{ warps }} * gl_i;
      const {{ acc }} gl_shrink_r = gl_shrink[gl_r];
#pragma unroll
      for (int gl_m = 0; gl_m < {{ cpt }}; ++gl_m) gl_o[gl_i][gl_m] *= gl_shrink_r;
      for (int gl_j = 0; gl_j < {{ tk }}; ++gl_j) {
        const {{ acc }} gl_e = gl_p[gl_r][gl_j];
#pragma unroll
        for (int gl_m = 0; gl_m < {{ cpt }}; ++gl_m) {
          const int gl_col = gl_lane + 32 * gl_m;
          if (gl_col < {{ dv }}) gl_o[gl_i][gl_m] += gl_e * gl_v[gl_j][gl_col];
        }
      }
    }
{%- endif %}
  }
  // The statistics were last written before a barrier (or before none: wait for them).
  __syncthreads();
{%- if split %}
  // The partials of this block's tile, share gl_split, a row after another: {{ dv }} outputs, the
  // maximum, the sum.
{%- if paged %}
  const long long gl_part_row = ((gl_split * gl_slots + gl_slot) * gl_kv_heads + {{ kh }}) * {{ br }};
{%- else %}
  const long long gl_part_row = (gl_split * ({{ batch }}) + {{ b }}) * gl_kv_heads * gl_rows + {{ kh }} * gl_rows + gl_row0;
{%- endif %}
  {{ acc }}* const gl_part = reinterpret_cast<{{ acc }}*>(gl_work_bytes) + gl_part_row * {{ dv_2 }};
  if (threadIdx.x < {{ br }} && gl_row0 + threadIdx.x < gl_rows) {
    gl_part[threadIdx.x * {{ dv_2 }} + {{ dv }}] = gl_top[threadIdx.x];
    gl_part[threadIdx.x * {{ dv_2 }} + {{ dv_1 }}] = gl_sum[threadIdx.x];
  }
{%- endif %}
#pragma unroll
  for (int gl_i = 0; gl_i < {{ o_rows }}; ++gl_i)
#pragma unroll
    for (int gl_m = 0; gl_m < {{ o_cols }}; ++gl_m) {
      // gl_o[gl_i][gl_m] is column gl_col of row gl_r of the tile.
{%- if mma %}
      const int gl_r = gl_g + 8 * (gl_m / 2), gl_col = 8 * (gl_warp + {{ warps }} * gl_i) + gl_c2 + gl_m % 2;
{%- else %}
      const int gl_r = gl_warp + {{ warps }} * gl_i, gl_col = gl_lane + 32 * gl_m;
{%- endif %}
      if (gl_row0 + gl_r >= gl_rows || gl_col >= {{ dv }}) continue;
{%- if split %}
      gl_part[gl_r * {{ dv_2 }} + gl_col] = gl_o[gl_i][gl_m];
{%- else %}
      const long long {{ pos }} = gl_first + (gl_row0 + gl_r) / gl_group;
      const long long {{ h }} = {{ kh }} * gl_group + (gl_row0 + gl_r) % gl_group;
      const long long {{ c }} = gl_col;
      // A row with no visible key is 0, as in PyTorch.
      const {{ acc }} gl_inv = gl_sum[gl_r] != 0 ? ({{ acc }})1 / gl_sum[gl_r] : ({{ acc }})0;
      gl_st({{ out }}, {{ out_index }}, gl_o[gl_i][gl_m] * gl_inv);
{%- endif %}
    }
}
