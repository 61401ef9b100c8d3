"""Decode speed of Hugging Face's `generate`, guardless against eager PyTorch and Inductor, in one run.

Random-weight models (hidden 256, 2 layers, vocabulary 8000, 4 heads / 2 KV heads) of several
architectures; `model.forward` compiled with `torch.compile(..., dynamic=True)` by guardless and
by Inductor; a prompt of 16 tokens per sequence, 32 new tokens, greedy. Every (model, cache,
batch) runs in a process of its own with one thread (torch's and guardless's); inside it the
three contestants are separate copies of the model, warmed up (compiled) first, then timed in
turn, interleaved, for `--repeats` rounds. Prints ms per generated token (the generate call's
wall time over the new tokens; medians), the ratios to eager and Inductor, whether the tokens
equal eager's, and guardless's graphs and fallbacks.

    source .tools/env   # and a release build of the binding: maturin develop --release --skip-install
    .tools/torch-venv/bin/python python/bench/decode.py [--models llama qwen3] [--caches dynamic static] [--batches 1 8]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ["llama", "qwen3", "gemma3", "gpt_neox", "opt", "phi3"]


def build(name: str):
    import torch
    import transformers as tf

    common = dict(vocab_size=8000, max_position_embeddings=512)
    llama = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)
    configs = {
        "llama": lambda: (tf.LlamaConfig(**common, **llama), tf.LlamaForCausalLM),
        "qwen3": lambda: (tf.Qwen3Config(**common, **llama, head_dim=64), tf.Qwen3ForCausalLM),
        "gemma3": lambda: (tf.Gemma3TextConfig(**common, **llama, head_dim=64, sliding_window=8),
                           tf.Gemma3ForCausalLM),
        "gpt_neox": lambda: (tf.GPTNeoXConfig(**common, hidden_size=256, intermediate_size=688,
                                              num_hidden_layers=2, num_attention_heads=4),
                             tf.GPTNeoXForCausalLM),
        "opt": lambda: (tf.OPTConfig(vocab_size=8000, max_position_embeddings=512, hidden_size=256,
                                     ffn_dim=688, num_hidden_layers=2, num_attention_heads=4,
                                     word_embed_proj_dim=256), tf.OPTForCausalLM),
        "phi3": lambda: (tf.Phi3Config(**common, **llama, pad_token_id=0), tf.Phi3ForCausalLM),
    }
    config, cls = configs[name]()
    config.attn_implementation = "sdpa"
    torch.manual_seed(0)
    return cls(config).eval()


def one(args) -> dict:
    """The measurements of one (model, cache, batch), in this process."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "python"))
    import guardless

    torch.set_num_threads(1)
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    torch.manual_seed(1)
    ids = torch.randint(3, 8000, (args.batch, 16))
    contestants = {}
    for who in ["eager", "guardless", "inductor"]:
        m = build(args.model)
        if who != "eager":
            backend = guardless.backend if who == "guardless" else "inductor"
            m.forward = torch.compile(m.forward, backend=backend, dynamic=True)
        contestants[who] = m
    kwargs = dict(max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False,
                  pad_token_id=0, cache_implementation=args.cache)
    tokens, times, warm = {}, {who: [] for who in contestants}, {}
    with torch.no_grad():
        for who, m in contestants.items():
            t = time.perf_counter()
            tokens[who] = m.generate(ids, **kwargs)
            warm[who] = time.perf_counter() - t
        for _ in range(args.repeats):
            for who, m in contestants.items():
                t = time.perf_counter()
                m.generate(ids, **kwargs)
                times[who].append(time.perf_counter() - t)
    ms = {who: 1000 * statistics.median(v) / args.tokens for who, v in times.items()}
    s = guardless.stats()
    return {
        "ms": ms,
        "first": warm,
        "same": all(torch.equal(tokens[w], tokens["eager"]) for w in tokens),
        "graphs": s.graphs,
        "calls": s.calls,
        "copied": s.copied_input_bytes,
        "fallbacks": [f.reason for f in guardless.fallbacks()],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    p.add_argument("--caches", nargs="+", default=["dynamic", "static"])
    p.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--one", help=argparse.SUPPRESS)  # model,cache,batch: run in this process
    args = p.parse_args()
    if args.one:
        args.model, args.cache, batch = args.one.split(",")
        args.batch = int(batch)
        print(json.dumps(one(args)))
        return
    print("| model | cache | batch | eager ms/token | guardless | Inductor | guardless / eager | guardless / Inductor "
          "| tokens = eager | graphs | fallbacks |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    for model in args.models:
        for cache in args.caches:
            for batch in args.batches:
                cmd = [sys.executable, __file__, "--one", f"{model},{cache},{batch}", "--tokens", str(args.tokens),
                       "--repeats", str(args.repeats)]
                out = subprocess.run(cmd, capture_output=True, text=True,
                                     env={**os.environ, "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1"})
                if out.returncode != 0:
                    print(f"| {model} | {cache} | {batch} | failed: {out.stderr.strip().splitlines()[-1:]} |",
                          flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                e, g, i = (r["ms"][k] for k in ("eager", "guardless", "inductor"))
                fb = "; ".join(sorted(set(r["fallbacks"])))[:120] or "0"
                print(f"| {model} | {cache} | {batch} | {e:.2f} | {g:.2f} | {i:.2f} | {g / e:.2f} | {g / i:.2f} "
                      f"| {'yes' if r['same'] else 'NO'} | {r['graphs']} | {fb} |", flush=True)


if __name__ == "__main__":
    main()
