"""Hugging Face transformers' continuous batching (`model.generate_batch`, the
`ContinuousBatchingManager` behind `transformers serve --continuous-batching`) compiled by
guardless as one graph per path.

    cb = guardless.hf.continuous_batching_config(num_blocks=64, max_batch_tokens=256)
    with guardless.hf.paged_cache_in_graph():
        out = model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cb)

`continuous_batching_config` is transformers' `ContinuousBatchingConfig` with guardless as the
compiler of both paths (backed `dynamic=True`) and **no padding of cache reads, tokens padded to
an even count only**: transformers pads a compiled step's tokens to multiples of 64 and its cache
reads to the whole cache (so that a compiler specializing on sizes sees few of them); guardless
compiles one program for every size, and that padding only adds work (a step of 16 decode tokens
attended over every row of the pool). Tokens are padded to an even count so that a step never
has 1: Dynamo specializes backed sizes of 0 and 1, and a step of one token (one request left
decoding) would compile a second graph.

`paged_cache_in_graph()` makes the whole step one graph:
- transformers wraps its paged cache's update (`PagedAttentionCache.update`: the new keys and
  values written into the cache pool, the sequences' keys and values read back) in
  `torch.compiler.disable`. Dynamo then breaks the forward at every layer's attention, re-traces
  the pieces in between as the batch changes, and hits its recompile limit in transformers'
  decorators. Inside the context the update is traced like the rest of the forward: the whole
  step (cache write, attention, sampling) is one graph, its sizes (tokens, sequences, cache
  reads) symbolic, the cache pool written in place (only the new tokens' rows move; see
  docs/exporter.md, "Continuous batching").
- Dynamo's duck sizing gives sizes that are equal when a graph is first traced one symbol, and
  re-traces when they later differ. A step's sizes (tokens, sequences + 1, keys read) coincide by
  chance; the step is traced without duck sizing (in the engine's own thread: Dynamo's settings
  are per thread).
- A step's tensors are slices of static buffers. A first step at a buffer's full size (a full
  prefill chunk, transformers' warmup) makes Dynamo guard the stride of a dimension of size 1 as
  the product of the sizes after it, which a smaller step breaks: those strides are set to 0
  (any stride addresses the one element there).
Together: one graph for a whole run, transformers' warmup included (`python/tests/test_hf_serving.py`).
"""

from __future__ import annotations

import contextlib
import threading

_lock = threading.Lock()
_depth = 0
# (class, attribute) → transformers' own, while the context is entered; (AttentionInterface,
# "sdpa") → its global mapping's SDPA function.
_replaced = {}


def _cache_class():
    try:
        from transformers.generation.continuous_batching.cache import PagedAttentionCache
    except ImportError as e:
        raise ImportError(
            "guardless.hf needs transformers' continuous batching "
            f"(transformers.generation.continuous_batching): {e}") from e
    return PagedAttentionCache


def continuous_batching_config(**overrides):
    """transformers' `ContinuousBatchingConfig` for guardless: both paths compiled by guardless with
    backed dynamic sizes, no padding of cache reads, tokens padded to an even count (never 1:
    Dynamo's 0/1 specialization), no CUDA-graph capture (which needs the padding); `overrides` are
    passed on (e.g. `num_blocks`, `max_batch_tokens`)."""
    import guardless

    try:
        from transformers.generation.configuration_utils import CompileConfig, ContinuousBatchingConfig
    except ImportError as e:
        raise ImportError(f"guardless.hf needs transformers' continuous batching: {e}") from e
    compiled = CompileConfig(backend=guardless.backend, dynamic=True, fullgraph=False)
    kw = dict(varlen_compile_config=compiled, decode_compile_config=compiled,
              q_padding_interval_size=2, kv_padding_interval_size=1, use_cuda_graph=False)
    kw.update(overrides)
    return ContinuousBatchingConfig(**kw)


def _model_runner_class():
    from transformers.generation.continuous_batching.model_runner import ModelRunner

    return ModelRunner


def _unit_dims_unstrided(t):
    """`t`, a slice of a static buffer, with a stride of 0 on the dimensions where the buffer
    itself has size 1 (any stride addresses the one element there). Dimensions of size 1 only in
    this step (one token) keep theirs: Dynamo guards them too."""
    import torch

    base = t._base if isinstance(t, torch.Tensor) else None
    if base is None or base.dim() != t.dim():
        return t
    unit = [n == 1 and m == 1 and st != 0 for n, m, st in zip(t.shape, base.shape, t.stride())]
    if not any(unit):
        return t
    return t.as_strided(t.shape, [0 if u else st for u, st in zip(unit, t.stride())], t.storage_offset())


def _traced_step(compute_batch):
    """transformers' `ModelRunner.compute_batch` with what makes its step trace once:
    - without duck sizing (in the engine's thread: Dynamo's settings are per thread);
    - its inputs' dimensions that are 1 in their buffers given a stride of 0: the step's tensors
      are slices of static buffers (the attention mask `[1, 1, tokens, keys]` of one of `[1, 1, max tokens,
      max keys]`), and a first step at the buffer's full size makes Dynamo guard the batch
      dimension's stride as the product of the sizes (contiguity), which the next, smaller step
      breaks."""
    import torch.fx.experimental._config as shapes_config

    def step(self, model, batch_data, *args, **kwargs):
        batch_data = {k: _unit_dims_unstrided(v) for k, v in batch_data.items()}
        with shapes_config.patch(use_duck_shape=False):
            return compute_batch(self, model, batch_data, *args, **kwargs)

    step.__wrapped__ = compute_batch
    return step


# The key under which the paged cache's update hands a full-attention layer's cache to the
# attention function (in the kwargs transformers passes from one to the other).
_KV = "guardless_paged_kv"
# Attention features the paged op does not have: a call that uses one goes to transformers' SDPA.
_UNSUPPORTED = ("sliding_window", "softcap", "s_aux", "position_bias")


def _paged_update(update):
    """transformers' cache update (`update`, its traced form), which also hands the attention
    function what it needs to read a full-attention layer's keys and values where they lie in
    the pool: the layer's key and value rows (`[slots, Hkv, D]` views of the pool) and the slots
    each sequence's keys are in, in order (the read index; for a step of prefills only, which
    reads nothing back, the write index). The update still gathers the keys for attention
    functions that want them; a graph whose attention does not read them drops the gather."""

    def update_(self, key_states, value_states, layer_idx, kwargs):
        out = update(self, key_states, value_states, layer_idx, kwargs)
        allocator = self.layer_to_allocator[layer_idx]
        views = getattr(allocator, "_kv_token_views", None)
        if kwargs.get("block_table") is None and views is not None and allocator.layer_type == "full_attention":
            read = kwargs["read_index"][allocator.index]
            slots = read if read.numel() > 0 else kwargs["write_index"][allocator.index]
            k, v = views[layer_idx]
            rows = min(k.shape[0], v.shape[0])
            kwargs[_KV] = (k[:rows], v[:rows], slots)
        return out

    update_.__wrapped__ = update
    return update_


def paged_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """An attention function for transformers' `AttentionInterface` (registered as
    `"guardless_paged"`; inside `paged_cache_in_graph()` also what `"sdpa"` runs): in a
    continuous batching step, `torch.ops.guardless.paged_attention` over the cache pool itself —
    keys and values read in place through a block table of one-slot blocks built from the
    step's read index, grouped-query heads read without a copy, causal per sequence — instead of
    gathering every sequence's keys out of the pool, repeating them per query head and masking a
    `[tokens, keys]` matrix. Anything else (no paged cache, a module that is not causal, a sliding
    window, a soft cap, attention sinks, dropout, a cache whose dtype is not the queries') goes to
    transformers' SDPA."""
    import torch

    import guardless.ops  # noqa: F401  (registers torch.ops.guardless)

    kv = kwargs.pop(_KV, None)
    plain = (kv is None or dropout or query.shape[0] != 1 or kv[0].dtype != query.dtype
             or not getattr(module, "is_causal", True) or any(kwargs.get(k) is not None for k in _UNSUPPORTED))
    if plain:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    k_rows, v_rows, slots = kv
    cu_q, cu_k = kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"]
    tokens = query.shape[2]
    # Tokens after the last sequence's (transformers pads a step's tokens) form one more
    # sequence, over as many keys as it has queries (slots it only reads; its rows are unused).
    starts = torch.cat([cu_q, cu_q.new_full((1,), tokens)])
    padding = (tokens - cu_q[-1:]).to(cu_k.dtype)
    lens = torch.cat([cu_k[1:] - cu_k[:-1], padding])
    # Sequence s's key j is in slot slots[cu_k[s] + j]: a block table of one-slot blocks, as wide
    # as the longest sequence or the step's token count (which bounds the padding's), whichever
    # is more.
    width = max(kwargs["max_length_k"], tokens)
    at = cu_k[:, None].to(torch.int64) + torch.arange(width, device=slots.device)[None, :]
    table = slots[at.clamp(max=slots.shape[0] - 1)].to(torch.int32)
    out = torch.ops.guardless.paged_attention(
        query[0].transpose(0, 1), k_rows.unsqueeze(1), v_rows.unsqueeze(1), table, lens, starts, scale=scaling)
    return out.unsqueeze(0), None


def register_attention():
    """Registers `paged_attention_forward` with transformers' `AttentionInterface` as
    `"guardless_paged"` (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register("guardless_paged", paged_attention_forward)


@contextlib.contextmanager
def paged_cache_in_graph(attention="guardless"):
    """Within it, `torch.compile` traces transformers' paged-cache update instead of breaking the
    graph around it, and traces a step as `_traced_step` says; with `attention="guardless"` (the
    default) a step's SDPA attention over the paged cache is `paged_attention_forward` (guardless's
    paged attention, reading the pool in place), with `attention="transformers"` transformers'
    own (keys gathered out of the pool). Nested and concurrent uses share one switch, set by the
    first; leaving the last restores transformers' own."""
    global _depth
    if attention not in ("guardless", "transformers"):
        raise ValueError(f"paged_cache_in_graph: attention must be 'guardless' or 'transformers', not {attention!r}")
    cls = _cache_class()
    runner = _model_runner_class()
    with _lock:
        if _depth == 0:
            update = cls.__dict__["update"]
            traced = getattr(update, "_torchdynamo_orig_callable", None)
            if traced is None:
                raise RuntimeError(
                    "transformers' PagedAttentionCache.update is not wrapped in "
                    "torch.compiler.disable in this version: guardless.hf does not know it")
            compute_batch = runner.__dict__["compute_batch"]
            _replaced[cls, "update"] = update
            _replaced[runner, "compute_batch"] = compute_batch
            runner.compute_batch = _traced_step(compute_batch)
            if attention == "guardless":
                from transformers import AttentionInterface

                register_attention()
                # The global mapping, as transformers' `register` writes it (no setter for one key).
                functions = AttentionInterface._global_mapping
                _replaced[AttentionInterface, "sdpa"] = functions["sdpa"]
                functions["sdpa"] = paged_attention_forward
                cls.update = _paged_update(traced)
            else:
                cls.update = traced
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for (owner, attr), own in _replaced.items():
                    if attr == "sdpa":
                        owner._global_mapping[attr] = own
                    else:
                        setattr(owner, attr, own)
                _replaced.clear()
