"""Attention on the CPU: guardless's fused attention step against PyTorch's own CPU
`scaled_dot_product_attention` (its flash-attention kernel) and its math backend (the decomposed
form: scores, softmax, product), in one run, f32, interleaved rounds, medians.

B = 1, Hq = 8, Hkv = 2 (grouped-query), D = 64 by default; causal and not; the function
`F.scaled_dot_product_attention(q, k, v, is_causal=…, enable_gqa=True, scale=D ** -0.5)` compiled once by guardless
(`torch.compile(..., backend=guardless.backend, dynamic=True)`: every length served by one
compile) and called at each length. Prints per case the medians (ms), the ratios, and whether
guardless's output matches PyTorch's (torch.testing's f32 tolerance).

    source .tools/env   # and a release build of the binding: maturin develop --release --skip-install
    .tools/torch-venv/bin/python python/bench/attention.py [--lengths 512 4096] [--threads 2]

`--package DIR` imports guardless from DIR (another build of the binding, e.g. one with the
decomposed attention, to compare against).

`--device cuda` runs the same on a GPU (PyTorch's fused kernel there is flash or memory-efficient
attention, by dtype): each round times `--calls` back-to-back calls between two synchronizations;
`--dtype bf16|f16` for 16-bit operands; `--decode` gives the queries one position (a decode step
over a cache of each length). The error columns are each output's largest distance from the math
backend's result in f32 on the same operands.
"""

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", nargs="+", type=int, default=[512, 4096])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--package", default=os.path.join(ROOT, "python"))
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    p.add_argument("--decode", action="store_true", help="one query position over each length")
    p.add_argument("--calls", type=int, default=20, help="calls per timed round on the GPU")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = p.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sys.path.insert(0, args.package)
    import guardless

    torch.set_num_threads(args.threads)
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))

    # The scale stated, as models state it: with `dynamic=True` the head dimension is a symbol,
    # and the default scale would be computed from it in the graph.
    scale = args.head_dim ** -0.5

    def causal_attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, scale=scale)

    def full_attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=True, scale=scale)

    def math(fn):
        def run(q, k, v):
            with sdpa_kernel(SDPBackend.MATH):
                return fn(q, k, v)
        return run

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    cuda = args.device == "cuda"

    def timed(f, q, k, v):
        if not cuda:
            t = time.perf_counter()
            f(q, k, v)
            return time.perf_counter() - t
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(args.calls):
            f(q, k, v)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / args.calls

    def error(got, q, k, v, fn):
        with sdpa_kernel(SDPBackend.MATH):
            exact = fn(q.float(), k.float(), v.float())
        return (got.float() - exact).abs().max().item()

    if not args.json:
        # Each row as it is measured (a run stopped by a time limit keeps what it had).
        where = f"{torch.cuda.get_device_name()}" if cuda else f"{args.threads} threads"
        print(f"B=1 Hq={args.heads} Hkv={args.kv_heads} D={args.head_dim} {args.dtype}"
              f"{' decode (Lq = 1)' if args.decode else ''}, {where}, "
              f"medians of {args.repeats} interleaved rounds (ms)")
        print("| causal | L | torch (fused) | torch (math) | guardless | guardless / torch | math / guardless "
              "| error torch | error guardless | matches |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |", flush=True)
    results = []
    # A decode step's single query is not masked causally (top-left alignment would hide every
    # key but the first).
    for causal in (False,) if args.decode else (False, True):
        fn = causal_attention if causal else full_attention
        compiled = torch.compile(fn, backend=guardless.backend, dynamic=True)
        contestants = {"torch": fn, "torch_math": math(fn), "guardless": compiled}
        for n in args.lengths:
            g = torch.Generator().manual_seed(n)
            lq = 1 if args.decode else n
            q = torch.randn(1, args.heads, lq, args.head_dim, generator=g)
            k = torch.randn(1, args.kv_heads, n, args.head_dim, generator=g)
            v = torch.randn(1, args.kv_heads, n, args.head_dim, generator=g)
            q, k, v = (t.to(device=args.device, dtype=dtype) for t in (q, k, v))
            with torch.no_grad():
                want = fn(q, k, v)
                got = compiled(q, k, v)
                errors = {"torch": error(want, q, k, v, fn), "guardless": error(got, q, k, v, fn)}
                if dtype == torch.float32:
                    try:
                        torch.testing.assert_close(got, want)
                        same = True
                    except AssertionError:
                        same = False
                else:
                    # 16-bit outputs: no further from the f32 result than PyTorch's own, give or
                    # take one rounding of the output.
                    same = errors["guardless"] <= 2 * errors["torch"] + 1e-3
                times = {who: [] for who in contestants}
                for _ in range(args.repeats):
                    for who, f in contestants.items():
                        times[who].append(timed(f, q, k, v))
            ms = {w: 1000 * statistics.median(v) for w, v in times.items()}
            results.append({"causal": causal, "length": n, "ms": ms, "same": same, "errors": errors})
            if not args.json:
                e = errors
                print(f"| {causal} | {n} | {ms['torch']:.3f} | {ms['torch_math']:.3f} | "
                      f"{ms['guardless']:.3f} | {ms['guardless'] / ms['torch']:.2f} | "
                      f"{ms['torch_math'] / ms['guardless']:.1f} | {e['torch']:.1e} | {e['guardless']:.1e} | {same} |",
                      flush=True)
    fallbacks = [f.reason for f in guardless.fallbacks()]
    if args.json:
        print(json.dumps({"results": results, "fallbacks": fallbacks}))
        sys.exit(1 if fallbacks else 0)
    if fallbacks:
        # The guardless column is then PyTorch's own time.
        sys.exit(f"guardless fell back to eager: {fallbacks}")


if __name__ == "__main__":
    main()
