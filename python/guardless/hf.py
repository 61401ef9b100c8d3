"""Hugging Face transformers' continuous batching (`model.generate_batch`, the
`ContinuousBatchingManager` behind `transformers serve --continuous-batching`) compiled by
guardless as one graph per path.

transformers wraps its paged cache's update (`PagedAttentionCache.update`: the new keys and
values written into the cache pool, the sequences' keys and values read back) in
`torch.compiler.disable`. Dynamo then breaks the forward at every layer's attention, re-traces
the pieces in between as the batch changes, and hits its recompile limit in transformers'
decorators. Inside `paged_cache_in_graph()` the update is traced like the rest of the forward,
so the whole step (cache write, attention, sampling) is one graph: its sizes (tokens, sequences,
cache reads) symbolic, the cache pool written in place (only the new tokens' rows move; see
docs/exporter.md, "Continuous batching").

    with guardless.hf.paged_cache_in_graph():
        out = model.generate_batch(prompts, generation_config=gen,
                                   continuous_batching_config=cb, warmup=False)

with `cb.varlen_compile_config = CompileConfig(backend=guardless.backend, dynamic=True)`.
`warmup=False` spares one compile: the warmup's attention mask is a whole (contiguous) buffer and
later steps' are slices of it, a stride change on which Dynamo re-traces once.
"""

from __future__ import annotations

import contextlib
import threading

_lock = threading.Lock()
_depth = 0
_disabled = None  # transformers' own (compiler-disabled) update, while it is replaced


def _cache_class():
    try:
        from transformers.generation.continuous_batching.cache import PagedAttentionCache
    except ImportError as e:
        raise ImportError(
            "guardless.hf needs transformers' continuous batching "
            f"(transformers.generation.continuous_batching): {e}") from e
    return PagedAttentionCache


@contextlib.contextmanager
def paged_cache_in_graph():
    """Within it, `torch.compile` traces transformers' paged-cache update instead of breaking the
    graph around it (nested and concurrent uses share one switch; leaving the last restores
    transformers' own)."""
    global _depth, _disabled
    cls = _cache_class()
    with _lock:
        if _depth == 0:
            update = cls.__dict__["update"]
            traced = getattr(update, "_torchdynamo_orig_callable", None)
            if traced is None:
                raise RuntimeError(
                    "transformers' PagedAttentionCache.update is not wrapped in "
                    "torch.compiler.disable in this version: guardless.hf does not know it")
            _disabled = update
            cls.update = traced
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                cls.update = _disabled
                _disabled = None
