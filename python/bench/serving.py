"""Serving side by side: Hugging Face's continuous batching engine (`ContinuousBatchingManager`)
run eagerly, compiled by Inductor and compiled by guardless, and `generate` with static batches as
the floor, on one seeded workload of a random-weight Llama-architecture model.

    .tools/torch-venv/bin/python python/bench/serving.py [--requests 32] [--rounds 3] [--arrival burst|poisson]

The workload: `--requests` prompts of uniform length in `--prompt` tokens and outputs of uniform
length in `--output` tokens, greedy; all arriving at once (`burst`) or as a Poisson process at
`--rate` requests per second. Every engine is built and warmed up first (its compile is timed
then: `first s`, two short requests, one at the workload's longest prompt), then the rounds interleave the
contestants; medians over rounds of output tokens/s (generated tokens over the round's wall
time), time to first token and inter-token latency (p50 and p99 over the round's requests).
guardless runs with `guardless.hf.continuous_batching_config` inside
`guardless.hf.paged_cache_in_graph()` (one graph per run; its attention is guardless's paged
attention over the pool; `guardless-gather`: transformers' SDPA over keys gathered out of the
pool, `paged_cache_in_graph(attention="transformers")`); Inductor and eager take transformers'
defaults. `graphs`: the graphs Dynamo compiled for the engine over the whole run. The tokens of every engine are compared with eager's.
One thread everywhere (`torch.set_num_threads(1)`, `RAYON_NUM_THREADS=1`) unless `--threads`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def parse():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--requests", type=int, default=32)
    a.add_argument("--prompt", type=int, nargs=2, default=(16, 128), metavar=("MIN", "MAX"))
    a.add_argument("--output", type=int, nargs=2, default=(16, 64), metavar=("MIN", "MAX"))
    a.add_argument("--arrival", choices=("burst", "poisson"), default="burst")
    a.add_argument("--rate", type=float, default=4.0, help="requests per second (poisson)")
    a.add_argument("--hidden", type=int, default=512)
    a.add_argument("--layers", type=int, default=4)
    a.add_argument("--heads", type=int, nargs=2, default=(8, 2), metavar=("Q", "KV"))
    a.add_argument("--vocab", type=int, default=8000)
    a.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    a.add_argument("--max-batch-tokens", type=int, default=256)
    a.add_argument("--page-size", type=int, default=32)
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--contestants", nargs="+", default=("eager", "inductor", "guardless", "static"))
    a.add_argument("--seed", type=int, default=0)
    return a.parse_args()


def workload(args):
    rng = random.Random(args.seed)
    reqs = []
    at = 0.0
    for _ in range(args.requests):
        n = rng.randint(*args.prompt)
        prompt = [rng.randrange(3, args.vocab) for _ in range(n)]
        out = rng.randint(*args.output)
        reqs.append((prompt, out, at))
        if args.arrival == "poisson":
            at += rng.expovariate(args.rate)
    return reqs


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else float("nan")


class Engine:
    """One continuous batching manager, kept across rounds (so it compiles once)."""

    def __init__(self, name, model, args, blocks):
        import torch
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import CompileConfig, ContinuousBatchingConfig

        import guardless
        import guardless.hf

        self.name = name
        kw = {}
        if name == "inductor":
            kw["varlen_compile_config"] = CompileConfig(backend="inductor", dynamic=True, mode="default")
        sizes = dict(num_blocks=blocks, page_size=args.page_size, max_batch_tokens=args.max_batch_tokens)
        if name.startswith("guardless"):
            cb = guardless.hf.continuous_batching_config(**sizes)
        else:
            cb = ContinuousBatchingConfig(**sizes, **kw)
        gen = GenerationConfig(do_sample=False, max_new_tokens=args.output[1], eos_token_id=None, pad_token_id=0)
        if name.startswith("guardless"):
            attention = "transformers" if name == "guardless-gather" else "guardless"
            self.context = functools.partial(guardless.hf.paged_cache_in_graph, attention=attention)
        else:
            self.context = contextlib.nullcontext
        self.manager = model.init_continuous_batching(gen, cb)
        self.manager.start()
        self.torch = torch

    def serve(self, reqs):
        """Runs `reqs` ((prompt, new tokens, arrival s)); returns wall seconds and the outputs."""
        m = self.manager
        with self.context(), self.torch.no_grad():
            start = time.perf_counter()
            ids = []
            for prompt, out, at in reqs:
                delay = start + at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                ids.append(m.add_request(prompt, max_new_tokens=out, record_timestamps=True))
            done = {}
            while len(done) < len(ids):
                r = m.get_result(timeout=60)
                if r is None:
                    raise RuntimeError(f"{self.name}: the engine stopped with {len(ids) - len(done)} requests left")
                if r.is_finished():
                    done[r.request_id] = r
            wall = time.perf_counter() - start
        return wall, [done[i] for i in ids]

    def close(self):
        self.manager.stop(block=True)


def static_floor(model, reqs, torch):
    """`generate` on batches of 8 in arrival order, left-padded; the wall time of all of them."""
    start = time.perf_counter()
    outs = []
    for i in range(0, len(reqs), 8):
        group = reqs[i:i + 8]
        width = max(len(p) for p, _, _ in group)
        ids = torch.tensor([[0] * (width - len(p)) + p for p, _, _ in group])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _, _ in group])
        with torch.no_grad():
            g = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, pad_token_id=0,
                               max_new_tokens=max(n for _, n, _ in group), eos_token_id=None)
        outs += [g[k, width:width + n].tolist() for k, (_, n, _) in enumerate(group)]
    return time.perf_counter() - start, outs


def main():
    args = parse()
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import guardless

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = LlamaConfig(hidden_size=args.hidden, intermediate_size=int(args.hidden * 2.75) // 8 * 8,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads[0],
                      num_key_value_heads=args.heads[1], vocab_size=args.vocab,
                      max_position_embeddings=args.prompt[1] + args.output[1] + 8)
    dtype = getattr(torch, args.dtype)
    model = LlamaForCausalLM(cfg).eval().to(dtype)
    model.config._attn_implementation = "sdpa"
    reqs = workload(args)
    longest = args.prompt[1] + args.output[1]
    # Room for every request at once (no preemption): whole pages per request, and one spare each.
    blocks = args.requests * (-(-longest // args.page_size) + 1)
    print(f"# serving.py: {args.requests} requests, prompts {args.prompt[0]}–{args.prompt[1]}, outputs "
          f"{args.output[0]}–{args.output[1]}, {args.arrival}; Llama hidden {args.hidden}, {args.layers} layers, "
          f"{args.heads[0]}/{args.heads[1]} heads, vocabulary {args.vocab}, {args.dtype}; "
          f"{args.threads} thread(s), torch {torch.__version__}", flush=True)

    from torch._dynamo.utils import counters

    engines, compile_s, graphs = {}, {}, {}

    def traced(name, run):
        """`run()`, counting the graphs Dynamo compiles meanwhile (engines take turns) as `name`'s."""
        before = counters["stats"]["unique_graphs"]
        out = run()
        graphs[name] = graphs.get(name, 0) + counters["stats"]["unique_graphs"] - before
        return out

    warm = [([5 + k for k in range(args.prompt[1])], 4, 0.0), ([7] * args.prompt[0], 4, 0.0)]
    guardless.reset()
    for name in args.contestants:
        if name == "static":
            continue
        t = time.perf_counter()
        engines[name] = Engine(name, model, args, blocks)
        traced(name, lambda: engines[name].serve(warm))
        compile_s[name] = time.perf_counter() - t

    rows = {name: [] for name in args.contestants}
    tokens = {}
    for r in range(args.rounds):
        for name in args.contestants:
            if name == "static":
                wall, outs = static_floor(model, reqs, torch)
                gen = outs
                ttft = itl = []
            else:
                wall, results = traced(name, lambda: engines[name].serve(reqs))
                gen = [x.generated_tokens for x in results]
                ttft = [x.timestamps[0] - x.created_time for x in results if x.timestamps]
                itl = [b - a for x in results if x.timestamps for a, b in zip(x.timestamps, x.timestamps[1:])]
            produced = sum(len(g) for g in gen)
            rows[name].append((produced / wall, percentile(ttft, 50), percentile(ttft, 99),
                               percentile(itl, 50), percentile(itl, 99)))
            tokens.setdefault(name, gen)
            print(f"#   round {r}: {name} {produced / wall:.1f} tokens/s ({wall:.1f} s)", flush=True)
    for e in engines.values():
        e.close()

    eager_tps = statistics.median(x[0] for x in rows["eager"]) if "eager" in rows else None
    print("| engine | output tokens/s | / eager | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms "
          "| first s | graphs | tokens = eager |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, rs in rows.items():
        med = [statistics.median(x[k] for x in rs) for k in range(5)]
        c = compile_s.get(name)
        # Dynamo's graphs over the whole run (warmup and rounds), and for guardless the graphs it
        # handed back to eager (both guardless engines' together).
        fell = len(guardless.fallbacks()) if name.startswith("guardless") else 0
        count = "" if name not in graphs else f"{graphs[name]}" + (f" ({fell} fell back)" if fell else "")
        if "eager" not in tokens:
            same = ""
        elif tokens[name] == tokens["eager"]:
            same = "yes"
        else:  # how many requests match, and the earliest position where one differs
            pairs = list(zip(tokens[name], tokens["eager"]))
            firsts = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                      for a, b in pairs if a != b]
            same = f"no: {len(pairs) - len(firsts)}/{len(pairs)} requests, first difference at token {min(firsts)}"
        ratio = f"{med[0] / eager_tps:.2f}" if eager_tps else ""
        ms = lambda v: "" if v != v else f"{v * 1e3:.1f}"  # noqa: E731  (NaN: not measured)
        print(f"| {name} | {med[0]:.1f} | {ratio} | {ms(med[1])} | {ms(med[2])} | {ms(med[3])} | "
              f"{ms(med[4])} | {'' if c is None else f'{c:.1f}'} | {count} | {same} |")


if __name__ == "__main__":
    main()
