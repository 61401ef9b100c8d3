"""guardless's own ops for serving, usable in eager PyTorch, `torch.export` and `torch.compile`
alike; guardless compiles them to fused kernels.

- `torch.ops.guardless.paged_attention(query, key_cache, value_cache, block_table,
  context_lens, query_start, *, scale=None)`: attention of a flattened batch of sequences (any
  mix of prefills, chunked prefills and decodes) over a paged key/value cache. `query [T, Hq, D]`
  holds every sequence's query tokens in order; `key_cache [num_blocks, block_size, Hkv, D]`
  and `value_cache [num_blocks, block_size, Hkv, Dv]`; `block_table [S, max_blocks]` (int32 or
  int64: sequence `s`'s key position `j` is row `j % block_size` of block
  `block_table[s, j // block_size]`); `context_lens [S]` (keys per sequence, its new tokens
  included); `query_start [S + 1]` (sequence `s`'s queries are tokens
  `query_start[s]:query_start[s + 1]`). Causal with bottom-right alignment: query `i` of a
  sequence with `n` queries and `c` keys sees keys `0..c - n + i`. Returns `[T, Hq, Dv]`.
  `Hq` must be a multiple of `Hkv` (grouped-query attention); the scale defaults to
  `1/sqrt(D)`. The eager implementation here is the reference: plain PyTorch, per sequence.
- `write_kv_cache(key_cache, value_cache, key, value, slots)`: writes the new tokens' keys and
  values (`[T, Hkv, D]`, `[T, Hkv, Dv]`) into the caches in place at flat slots
  `block * block_size + row` (`slots [T]`). It is ATen's `index_copy_` on the caches seen as
  `[num_blocks * block_size, Hkv, D]`: exported graphs carry it as a mutation of the caches,
  which guardless performs in place (only the new rows move).

Importing `guardless` does not import torch; the ops are registered when this module is imported
(`import guardless.ops`, or the first use of `guardless.paged_attention`), before a model that
calls them runs, is exported or is compiled.
"""

from typing import Optional

import torch

__all__ = ["paged_attention", "write_kv_cache"]


def _int_list(t: torch.Tensor) -> list:
    return [int(x) for x in t.tolist()]


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(f"paged_attention: {message}")


@torch.library.custom_op("guardless::paged_attention", mutates_args=())
def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    query_start: torch.Tensor,
    *,
    scale: Optional[float] = None,
) -> torch.Tensor:
    tokens, heads, d = query.shape
    _, block_size, kv_heads, dv = value_cache.shape
    _check(heads % kv_heads == 0, f"{heads} query heads are not a multiple of {kv_heads} key/value heads")
    group = heads // kv_heads
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = d ** -0.5 if scale is None else scale
    starts, lens = _int_list(query_start), _int_list(context_lens)
    seqs = len(lens)
    _check(
        len(starts) == seqs + 1 and starts[0] == 0 and starts[-1] == tokens
        and all(a <= b for a, b in zip(starts, starts[1:])),
        "query_start must start at 0, never decrease and end at the number of query tokens",
    )
    out = query.new_zeros(tokens, heads, dv)
    for s in range(seqs):
        q0, q1, c = starts[s], starts[s + 1], lens[s]
        n = q1 - q0
        _check(n <= c <= block_table.shape[1] * block_size,
               "a sequence's context length must be at least its query count and fit its block table")
        if n == 0:
            continue
        blocks = block_table[s, : (c + block_size - 1) // block_size].long()
        _check(bool(((blocks >= 0) & (blocks < key_cache.shape[0])).all()), "a block table entry is outside the cache")
        k = key_cache[blocks].reshape(-1, kv_heads, d)[:c].to(acc).transpose(0, 1)
        v = value_cache[blocks].reshape(-1, kv_heads, dv)[:c].to(acc).transpose(0, 1)
        q = query[q0:q1].to(acc).transpose(0, 1).reshape(kv_heads, group * n, d)
        scores = (q @ k.transpose(1, 2) * scale).reshape(kv_heads, group, n, c)
        i = torch.arange(n, device=query.device)[:, None]
        j = torch.arange(c, device=query.device)[None, :]
        scores = scores.masked_fill(j > c - n + i, float("-inf"))
        p = torch.softmax(scores, dim=-1).reshape(kv_heads, group * n, c)
        o = (p @ v).reshape(heads, n, dv).transpose(0, 1)
        out[q0:q1] = o.to(query.dtype)
    return out


@paged_attention.register_fake
def _(query, key_cache, value_cache, block_table, context_lens, query_start, *, scale=None):
    return query.new_empty(query.shape[0], query.shape[1], value_cache.shape[3])


def write_kv_cache(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    slots: torch.Tensor,
) -> None:
    """Writes `key` and `value` (`[T, Hkv, D|Dv]`) into the caches at flat slots `slots [T]`,
    in place (see the module's documentation)."""
    _, _, kv_heads, d = key_cache.shape
    slots = slots.long()
    key_cache.view(-1, kv_heads, d).index_copy_(0, slots, key)
    value_cache.view(-1, kv_heads, value_cache.shape[3]).index_copy_(0, slots, value)
