  const long long gl_lines = {{ lines }};
  const long long gl_inner = {{ inner }};
  const long long gl_len = {{ len }};
{%- if tile %}
  const long long gl_tiles = (gl_len + {{ tile }} - 1) / {{ tile }};
  if (gl_tiles == 0) return;
  const long long gl_line = (long long)blockIdx.x / gl_tiles, gl_tile = (long long)blockIdx.x % gl_tiles;
{%- else %}
  const long long gl_line = blockIdx.x;
{%- endif %}
  if (gl_line >= gl_lines) return;
{#- The block's line (and, with `tile` elements a tile, which tile of it); blocks past the last
    line return. Included by lines.cu and radix.cu. -#}
