"""Hugging Face transformers' continuous batching (`model.generate_batch`, the
`ContinuousBatchingManager` behind `transformers serve --continuous-batching`) compiled by
guardless as one graph per path.

    cb = guardless.hf.continuous_batching_config(num_blocks=64, max_batch_tokens=256)
    with guardless.hf.paged_cache_in_graph():
        out = model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cb)

`continuous_batching_config` is transformers' `ContinuousBatchingConfig` with guardless as the
compiler of both paths (backed `dynamic=True`) and **no input padding**: transformers pads a
compiled step's tokens to multiples of 64 and its cache reads to the whole cache (so that a
compiler specializing on sizes sees few of them); guardless compiles one program for every size,
and padding would only add work (a step of 16 decode tokens attended over every page of the
pool).

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
    backed dynamic sizes, no padding of tokens or cache reads, no CUDA-graph capture (which needs
    the padding); `overrides` are passed on (e.g. `num_blocks`, `max_batch_tokens`)."""
    import guardless

    try:
        from transformers.generation.configuration_utils import CompileConfig, ContinuousBatchingConfig
    except ImportError as e:
        raise ImportError(f"guardless.hf needs transformers' continuous batching: {e}") from e
    compiled = CompileConfig(backend=guardless.backend, dynamic=True, fullgraph=False)
    kw = dict(varlen_compile_config=compiled, decode_compile_config=compiled,
              q_padding_interval_size=1, kv_padding_interval_size=1, use_cuda_graph=False)
    kw.update(overrides)
    return ContinuousBatchingConfig(**kw)


def _model_runner_class():
    from transformers.generation.continuous_batching.model_runner import ModelRunner

    return ModelRunner


def _without_duck_sizing(compute_batch):
    import torch.fx.experimental._config as shapes_config

    def step(self, *args, **kwargs):
        with shapes_config.patch(use_duck_shape=False):
            return compute_batch(self, *args, **kwargs)

    step.__wrapped__ = compute_batch
    return step


@contextlib.contextmanager
def paged_cache_in_graph():
    """Within it, `torch.compile` traces transformers' paged-cache update instead of breaking the
    graph around it, and traces a step without duck sizing (nested and concurrent uses share one
    switch; leaving the last restores transformers' own)."""
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
            runner.compute_batch = _without_duck_sizing(compute_batch)
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
