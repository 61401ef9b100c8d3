  // The flattened batch: {{ seqs_doc }} sequences, {{ tokens_doc }} query tokens in all, keys in
  // cache blocks of {{ block_size }} rows, at most a table row's worth per sequence.
  const long long gl_seqs = {{ seqs }};
  const long long gl_tokens = {{ tokens }};
  const long long gl_capacity = ({{ width }}) * {{ block_size }};
  const long long gl_cache_blocks = {{ cache_blocks }};
  auto gl_start = [&](long long {{ sq }}) -> long long { return (long long)gl_ld({{ starts }}, {{ starts_index }}); };
  auto gl_len = [&](long long {{ sq }}) -> long long { return (long long)gl_ld({{ lens }}, {{ lens_index }}); };
  auto gl_block_of = [&](long long {{ sq }}, long long {{ page }}) -> long long { return (long long)gl_ld({{ table }}, {{ table_index }}); };
  // The last sequence whose first tile slot (start·group/{{ br }} + its index) is at most gl_x.
  auto gl_sequence_of_slot = [&](long long gl_x) -> long long {
    long long gl_a = 0, gl_z = gl_seqs - 1;
    while (gl_a < gl_z) {
      const long long gl_mid = (gl_a + gl_z + 1) / 2;
      if (gl_start(gl_mid) * gl_group / {{ br }} + gl_mid <= gl_x) gl_a = gl_mid; else gl_z = gl_mid - 1;
    }
    return gl_a;
  };
  // The sequence data, checked once by the first block: the offsets start at 0, never decrease
  // and end at the number of tokens; a context holds its sequence's queries and fits its table row.
  if (blockIdx.x == 0) {
    for (long long gl_i = threadIdx.x; gl_i <= gl_seqs; gl_i += {{ threads }}) {
      const long long gl_at = gl_start(gl_i);
      if ((gl_i == 0 && gl_at != 0) || (gl_i == gl_seqs && gl_at != gl_tokens) || (gl_i > 0 && gl_at < gl_start(gl_i - 1)))
        gl_fail(gl_error, {{ start_error }});
      if (gl_i < gl_seqs) {
        const long long gl_c = gl_len(gl_i);
        if (gl_c < gl_start(gl_i + 1) - gl_at || gl_c > gl_capacity) gl_fail(gl_error, {{ context_error }});
      }
    }
  }
