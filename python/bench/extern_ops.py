"""Per-op fallback, side by side: a Llama-like decoder stack whose attention is a custom op (a
`torch.library` op, as a kernels-hub or another library's attention is to a compiler), run eagerly,
compiled by Inductor (its fallback kernel for the op), by guardless with per-op fallback (the op
called through PyTorch between compiled segments) and by guardless without it (the whole graph
falls back to eager: what guardless did before).

    .tools/torch-venv/bin/python python/bench/extern_ops.py [--rounds 7] [--sizes 1 16 128]

Each size is a forward of `[1, tokens]` token ids (backed `dynamic=True`: one graph for every
size); every contestant is compiled and warmed up at every size first, then the rounds interleave
the contestants, each timing `--iters` calls; medians over rounds, ratios against eager in the same
run. One thread (`torch.set_num_threads(1)`, `RAYON_NUM_THREADS=1`). The outputs are compared with
eager's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import guardless  # noqa: E402

LIB = torch.library.Library("bench_extern", "DEF")
LIB.define("attention(Tensor q, Tensor k, Tensor v) -> Tensor")


@torch.library.impl(LIB, "attention", "CompositeExplicitAutograd")
def _attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


@torch.library.register_fake("bench_extern::attention", lib=LIB)
def _(q, k, v):
    return torch.empty_like(q)


class Layer(torch.nn.Module):
    def __init__(self, hidden, heads, kv_heads, ffn):
        super().__init__()
        self.hd, self.heads, self.kv = hidden // heads, heads, kv_heads
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.norm1, self.norm2 = torch.nn.RMSNorm(hidden), torch.nn.RMSNorm(hidden)
        self.qkv = lin(hidden, (heads + 2 * kv_heads) * self.hd)
        self.o = lin(heads * self.hd, hidden)
        self.gate_up, self.down = lin(hidden, 2 * ffn), lin(ffn, hidden)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([self.heads * self.hd, self.kv * self.hd, self.kv * self.hd], -1)
        q, k, v = (t.view(b, n, -1, self.hd).transpose(1, 2) for t in (q, k, v))
        a = torch.ops.bench_extern.attention(q, k, v)
        x = x + self.o(a.transpose(1, 2).reshape(b, n, -1))
        g, u = self.gate_up(self.norm2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class Model(torch.nn.Module):
    def __init__(self, vocab, hidden, layers, heads, kv_heads, ffn):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList(Layer(hidden, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = torch.nn.RMSNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--sizes", type=int, nargs="+", default=(1, 16, 128))
    a.add_argument("--hidden", type=int, default=512)
    a.add_argument("--layers", type=int, default=4)
    a.add_argument("--vocab", type=int, default=8000)
    a.add_argument("--rounds", type=int, default=7)
    a.add_argument("--iters", type=int, default=10)
    args = a.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Model(args.vocab, args.hidden, args.layers, 8, 2, 4 * args.hidden).eval()
    inputs = {n: torch.randint(0, args.vocab, (1, n)) for n in args.sizes}

    contestants = {"eager": model}
    compile_s = {}
    for name, backend in (("inductor", "inductor"), ("guardless", guardless.make_backend()),
                          ("guardless, whole fallback", guardless.make_backend(extern_ops=False))):
        torch._dynamo.reset()
        f = torch.compile(model, backend=backend, dynamic=True)
        t = time.perf_counter()
        with torch.no_grad():
            for n, ids in inputs.items():
                torch.testing.assert_close(f(ids), model(ids), rtol=1e-4, atol=1e-4)
        compile_s[name] = time.perf_counter() - t
        contestants[name] = f
    st = guardless.stats()
    times = {(c, n): [] for c in contestants for n in args.sizes}
    with torch.no_grad():
        for _ in range(args.rounds):
            for n, ids in inputs.items():
                for c, f in contestants.items():
                    t = time.perf_counter()
                    for _ in range(args.iters):
                        f(ids)
                    times[c, n].append((time.perf_counter() - t) / args.iters * 1e3)
    print(f"hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}, f32, one thread; "
          f"medians of {args.rounds} interleaved rounds of {args.iters} calls")
    print(f"guardless: {st.graphs} graphs compiled (segments), {st.extern_calls} extern calls, "
          f"fallbacks: {len(guardless.fallbacks())} (the whole-fallback contestant)")
    print("| tokens | " + " | ".join(f"{c} ms" for c in contestants) + " | guardless speed-up vs eager | vs Inductor |")
    print("| ---: |" + " ---: |" * (len(contestants) + 2))
    for n in args.sizes:
        med = {c: statistics.median(times[c, n]) for c in contestants}
        print(f"| {n} | " + " | ".join(f"{med[c]:.2f}" for c in contestants)
              + f" | {med['eager'] / med['guardless']:.2f}x | {med['inductor'] / med['guardless']:.2f}x |")
    print("first calls at every size, s: " + ", ".join(f"{c} {s:.1f}" for c, s in compile_s.items()))


if __name__ == "__main__":
    main()
