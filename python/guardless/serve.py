"""`guardless serve MODEL`: Hugging Face's OpenAI-compatible server (`transformers serve
--continuous-batching`) with guardless as the compiler of its continuous batching engine.

transformers' server takes a `--compile` switch for its sequential path only, and builds its
continuous batching configuration from its `--cb-*` flags with no compiler of choice; this starts
that same server (the same endpoints: `/v1/completions`, `/v1/chat/completions`, streaming and
not, `/v1/models`) with the configuration `guardless.hf.continuous_batching_config` makes (both
paths compiled by guardless, no padding of cache reads) and the step traced as one graph
(`guardless.hf.paged_cache_in_graph`) for the server's lifetime. Needs transformers' serving
extras (`pip install "transformers[serving]"`: fastapi, uvicorn, openai, and accelerate to place
the model on a device).
"""

from __future__ import annotations

import argparse
import contextlib
from unittest import mock


def _tokens_per_request(engine) -> int | None:
    """The most tokens (prompt and new) one request may hold in the engine's KV cache: its
    full-attention layers' pages (sliding-window layers hold a window, whatever the length)."""
    from transformers.generation.continuous_batching.cache_allocators import FullAttentionCacheAllocator

    import time

    # The engine's thread makes its cache when it starts (the first request): wait for it.
    deadline = time.monotonic() + 300
    while engine.batch_processor is None:
        if engine.background_thread_status.fatal_error is not None or time.monotonic() > deadline:
            return None  # the request then fails as the engine says
        time.sleep(0.01)
    cache = engine.batch_processor.cache
    full = [ca for ca in cache.cache_allocators.values() if isinstance(ca, FullAttentionCacheAllocator)]
    return min(ca.tokens_per_page * ca.num_blocks for ca in full) if full else None


def _checked_manager(base):
    """transformers' continuous batching manager for the server, which turns away a request the
    KV cache cannot hold with a 400 naming the sizes. (transformers' engine would take it, find
    that it can never be scheduled, and stop for every request: a 503 for all that follow.)"""

    class CheckedManager(base):
        def _check(self, inputs, gen_config):
            from fastapi import HTTPException

            limit = _tokens_per_request(self._cb)
            prompt, new = len(inputs["input_ids"]), gen_config.max_new_tokens or 0
            if limit is not None and prompt + new > limit:
                raise HTTPException(status_code=400, detail=(
                    f"the prompt ({prompt} tokens) and max_tokens ({new}) exceed the KV cache: "
                    f"at most {limit} tokens per request (the server's --num-blocks and --page-size)"))

        def generate_streaming(self, model, processor, inputs, gen_config, *args, **kwargs):
            self._check(inputs, gen_config)
            return super().generate_streaming(model, processor, inputs, gen_config, *args, **kwargs)

        async def generate_non_streaming(self, model, processor, inputs, gen_config, *args, **kwargs):
            self._check(inputs, gen_config)
            return await super().generate_non_streaming(model, processor, inputs, gen_config, *args, **kwargs)

    return CheckedManager


class Server:
    """A running server (`start(..., block=False)`): `.serve` is transformers' `Serve`, `stop()`
    shuts it down and leaves `paged_cache_in_graph`."""

    def __init__(self, serve, context: contextlib.ExitStack):
        self.serve = serve
        self._context = context

    def engine(self):
        """The continuous batching manager serving requests (None before the first request)."""
        manager = self.serve._generation_state._cb_manager
        return None if manager is None else manager._cb

    def stop(self) -> None:
        try:
            self.serve.kill_server()
        finally:
            self._context.close()


def start(model: str, *, host: str = "localhost", port: int = 8000, device: str = "cpu", dtype: str = "auto",
          page_size: int | None = None, num_blocks: int | None = None, max_batch_tokens: int | None = None,
          log_level: str = "warning", block: bool = True) -> Server | None:
    """Serves `model` (a directory or a Hub id) until interrupted (`block=True`), or starts it in
    a background thread and returns the `Server` (`block=False`)."""
    try:
        from transformers.cli import serve as hf_serve
        from transformers.cli.serving import utils as serving_utils
        from transformers.utils.import_utils import is_serve_available
    except ImportError as e:
        raise ImportError(f"guardless serve needs transformers' server: {e}") from e
    if not is_serve_available():
        raise ImportError('guardless serve needs transformers\' serving extras: pip install "transformers[serving]"')
    from . import hf

    sizes = {"page_size": page_size, "num_blocks": num_blocks, "max_batch_tokens": max_batch_tokens}
    cb_config = hf.continuous_batching_config(**{k: v for k, v in sizes.items() if v is not None})
    own_state = serving_utils.GenerationState

    def generation_state(*args, **kw):
        # The server's state, with guardless's engine configuration instead of the one its
        # --cb-* flags would make.
        kw.pop("cb_config", None)
        return own_state(*args, cb_config=cb_config, **kw)

    context = contextlib.ExitStack()
    context.enter_context(hf.paged_cache_in_graph())
    context.enter_context(mock.patch.object(serving_utils, "CBGenerateManager",
                                            _checked_manager(serving_utils.CBGenerateManager)))
    try:
        with mock.patch.object(serving_utils, "GenerationState", generation_state):
            serve = hf_serve.Serve(model, continuous_batching=True, device=device, dtype=dtype, host=host,
                                   port=port, log_level=log_level, non_blocking=not block)
    except BaseException:
        context.close()
        raise
    if block:  # the server has stopped
        context.close()
        return None
    return Server(serve, context)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="guardless serve",
        description="transformers' OpenAI-compatible server (continuous batching) compiled by guardless")
    p.add_argument("model", help="a model directory (config, weights, tokenizer) or a Hub id")
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", default="cpu", help="cpu, or cuda:0")
    p.add_argument("--dtype", default="auto", help="auto (the weights'), float32, bfloat16, ...")
    p.add_argument("--page-size", type=int, help="KV-cache page (block) size in tokens")
    p.add_argument("--num-blocks", type=int, help="KV-cache blocks")
    p.add_argument("--max-batch-tokens", type=int, help="tokens per step")
    p.add_argument("--log-level", default="warning")
    a = p.parse_args(argv)
    start(a.model, host=a.host, port=a.port, device=a.device, dtype=a.dtype, page_size=a.page_size,
          num_blocks=a.num_blocks, max_batch_tokens=a.max_batch_tokens, log_level=a.log_level)
    return 0
