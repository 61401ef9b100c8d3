"""Hugging Face's continuous batching (`model.generate_batch`) with guardless as its compiler:
the whole step — paged-cache write, attention over the cache, sampling — one compiled graph for
a run whose batches change (prefills split across steps, decodes joining), the cache pool
written in place, the tokens equal to eager's."""

import unittest
import warnings

import torch

import guardless
import guardless.hf

try:
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.generation.configuration_utils import CompileConfig, ContinuousBatchingConfig
except ImportError as e:  # transformers is part of ci/setup's torch venv
    raise unittest.SkipTest(f"transformers' continuous batching is not installed: {e}")

PROMPTS = [list(range(3, 3 + n)) for n in (5, 12, 20, 33)]


def tiny_llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=512, max_position_embeddings=256)
    model = LlamaForCausalLM(cfg).eval()
    model.config._attn_implementation = "sdpa"
    return model


def generate(model, backend, new_tokens=6):
    kw = {}
    if backend is not None:
        kw["varlen_compile_config"] = CompileConfig(backend=backend, dynamic=True, fullgraph=False)
    # 24 tokens per step: the prompts' prefills are split across steps and mixed with decodes.
    cb = ContinuousBatchingConfig(num_blocks=32, page_size=16, max_batch_tokens=24, **kw)
    gen = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        out = model.generate_batch(PROMPTS, generation_config=gen, continuous_batching_config=cb, warmup=False)
    return {k: v.generated_tokens for k, v in out.items()}, cb


class ContinuousBatchingTest(unittest.TestCase):
    def test_one_graph_for_a_whole_run_with_the_cache_in_place(self):
        model = tiny_llama()
        eager, _ = generate(model, None)
        torch._dynamo.reset()
        guardless.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a fallback warns
            with guardless.hf.paged_cache_in_graph():
                got, cb = generate(model, guardless.backend)
        self.assertEqual(got, eager)
        s = guardless.stats()
        self.assertEqual(guardless.fallbacks(), [])
        self.assertEqual(s.graphs, 1, s)
        self.assertGreaterEqual(s.calls, 8, s)  # prefill steps, mixed steps, decodes
        self.assertEqual(s.copied_input_bytes, 0, s)
        # What is still written back whole is the step's output ids (a few hundred bytes a call),
        # not the cache pool (2 layers × keys and values × 32 pages × 16 tokens × 2 heads × 16 × 4
        # bytes = 256 KiB).
        self.assertLess(s.written_back_bytes, 4096 * s.calls, s)
        # transformers' own update is back.
        from transformers.generation.continuous_batching.cache import PagedAttentionCache
        self.assertTrue(hasattr(PagedAttentionCache.update, "_torchdynamo_orig_callable"))

    def test_torch_compile_modes_and_options_reach_the_backend(self):
        # Hugging Face's CompileConfig passes mode="reduce-overhead": accepted; an unknown mode or
        # any option is an error naming it.
        f = torch.compile(lambda x: x * 2, backend=guardless.backend, mode="reduce-overhead")
        self.assertTrue(torch.equal(f(torch.ones(3)), torch.full((3,), 2.0)))
        torch._dynamo.reset()
        with self.assertRaisesRegex(Exception, "mode 'fastest'"):
            torch.compile(lambda x: x + 1, backend=guardless.backend, mode="fastest")(torch.ones(2))
        torch._dynamo.reset()
        with self.assertRaisesRegex(Exception, r"options \['freezing'\]"):
            torch.compile(lambda x: x + 1, backend=guardless.backend, options={"freezing": True})(torch.ones(2))


if __name__ == "__main__":
    unittest.main()
