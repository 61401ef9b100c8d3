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
_replaced = {}  # (class, attribute) → transformers' own, while the context is entered


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


@contextlib.contextmanager
def paged_cache_in_graph():
    """Within it, `torch.compile` traces transformers' paged-cache update instead of breaking the
    graph around it, and traces a step as `_traced_step` says (nested and concurrent uses share
    one switch; leaving the last restores transformers' own)."""
    global _depth
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
            cls.update = traced
            runner.compute_batch = _traced_step(compute_batch)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for (owner, attr), own in _replaced.items():
                    setattr(owner, attr, own)
                _replaced.clear()
