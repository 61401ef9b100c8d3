// {{ name }}: {{ nodes }}
// Fused attention, split keys: a thread per output element merges the shares' partial results
// (each share's output scaled by e^(its maximum - the largest), over the sum scaled alike).
extern "C" __global__ void __launch_bounds__({{ threads }}) {{ entry }}({{ params }}) {
{{ symbols }}
  const long long gl_kv_heads = {{ kv_heads }};
  const long long gl_group = ({{ heads }}) / gl_kv_heads;
{%- if paged %}
{{ paged_sequences }}
  const long long gl_slots = gl_tokens * gl_group / {{ br }} + gl_seqs;
  // The shares, as the split function counted them.
  const long long gl_splits = gl_attention_splits(1, {{ br }}, gl_slots * gl_kv_heads, gl_capacity,
                                                  {{ target_blocks }}, {{ min_keys }}, {{ max_splits }});
  const long long gl_lin = (long long)blockIdx.x * {{ threads }} + (long long)threadIdx.x;
  if (gl_lin >= gl_tokens * ({{ heads }}) * {{ dv }}) return;
  const long long {{ c }} = gl_lin % {{ dv }};
  const long long {{ pos }} = gl_lin / {{ dv }} / ({{ heads }});
  const long long {{ h }} = gl_lin / {{ dv }} % ({{ heads }});
  const long long {{ kh }} = {{ h }} / gl_group;
  // The token's sequence: the last one starting at or before it.
  long long gl_seq = 0;
  for (long long gl_z = gl_seqs - 1; gl_seq < gl_z;) {
    const long long gl_mid = (gl_seq + gl_z + 1) / 2;
    if (gl_start(gl_mid) <= {{ pos }}) gl_seq = gl_mid; else gl_z = gl_mid - 1;
  }
  const long long gl_row = ({{ pos }} - gl_start(gl_seq)) * gl_group + {{ h }} % gl_group;
  const long long gl_slot = gl_start(gl_seq) * gl_group / {{ br }} + gl_seq + gl_row / {{ br }};
  // Data that breaks the rules was reported; no read goes outside for it.
  if (gl_row < 0 || gl_slot >= gl_slots) return;
  const long long gl_global = (gl_slot * gl_kv_heads + {{ kh }}) * {{ br }} + gl_row % {{ br }};
  const long long gl_stride = gl_slots * gl_kv_heads * {{ br }} * {{ dv_2 }};
{%- else %}
  const long long gl_rows = gl_group * ({{ lq }});
  const long long gl_lk = {{ lk }};
  const long long gl_tiles = (gl_rows + {{ br_last }}) / {{ br }};
  // The shares, as the split function counted them.
  const long long gl_splits = gl_attention_splits(gl_rows, {{ br }}, ({{ batch }}) * gl_kv_heads * gl_tiles, gl_lk,
                                                  {{ target_blocks }}, {{ min_keys }}, {{ max_splits }});
  const long long gl_all = ({{ batch }}) * gl_kv_heads * gl_rows;
  const long long gl_lin = (long long)blockIdx.x * {{ threads }} + (long long)threadIdx.x;
  if (gl_lin >= gl_all * {{ dv }}) return;
  const long long gl_global = gl_lin / {{ dv }};
  const long long {{ c }} = gl_lin % {{ dv }};
  const long long {{ b }} = gl_global / (gl_kv_heads * gl_rows);
  const long long {{ kh }} = gl_global / gl_rows % gl_kv_heads;
  const long long gl_row = gl_global % gl_rows;
  const long long {{ pos }} = gl_row / gl_group;
  const long long {{ h }} = {{ kh }} * gl_group + gl_row % gl_group;
  const long long gl_stride = gl_all * {{ dv_2 }};
{%- endif %}
  const {{ acc }}* gl_parts = reinterpret_cast<const {{ acc }}*>(gl_work_bytes);
  const {{ acc }} gl_ninf = {{ ninf }};
  {{ acc }} gl_top = gl_ninf;
  for (long long gl_s = 0; gl_s < gl_splits; ++gl_s) gl_top = gl_max(gl_top, gl_parts[gl_s * gl_stride + gl_global * {{ dv_2 }} + {{ dv }}]);
  {{ acc }} gl_sum = 0, gl_out = 0;
  if (gl_top != gl_ninf) {
    for (long long gl_s = 0; gl_s < gl_splits; ++gl_s) {
      const {{ acc }}* gl_part = gl_parts + gl_s * gl_stride + gl_global * {{ dv_2 }};
      if (gl_part[{{ dv }}] == gl_ninf) continue;
      const {{ acc }} gl_w = {{ exp }}(gl_part[{{ dv }}] - gl_top);
      gl_sum += gl_part[{{ dv_1 }}] * gl_w;
      gl_out += gl_part[{{ c }}] * gl_w;
    }
  }
  // A row with no visible key is 0, as in PyTorch.
  gl_st({{ out }}, {{ out_index }}, gl_sum != 0 ? gl_out / gl_sum : ({{ acc }})0);
}
