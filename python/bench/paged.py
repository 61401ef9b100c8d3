"""Paged attention at decode (one query token per sequence over a paged KV cache), on the CPU:
guardless's paged attention step against what PyTorch does for the same step, in one run,
interleaved rounds, medians.

Contestants, on the same operands:
- `guardless`: `torch.ops.guardless.paged_attention` compiled once by the backend
  (`torch.compile(..., backend=guardless.backend)`, the token and sequence counts unbacked).
- `torch gather+sdpa`: what an engine without a paged kernel does each step — gather each
  sequence's blocks into a contiguous `[B, Hkv, L, D]` (`key_cache[block_table]`), then
  `scaled_dot_product_attention` with a mask of each sequence's length.
- `inductor`: the same gather + SDPA compiled by Inductor (`--inductor`; dynamic shapes).
- `torch sdpa (contiguous)`: SDPA over a cache that is already contiguous per sequence (no
  paging, no gather): the floor a paged kernel is measured against.

B sequences of context L each (block tables out of order), Hq = 8, Hkv = 2, D = 64, blocks of
16, f32, 2 threads by default:

    source .tools/env   # and a release build of the binding: maturin develop --release --skip-install
    .tools/torch-venv/bin/python python/bench/paged.py [--batches 1 16] [--contexts 1024 4096]

`--device cuda --dtype bf16` runs the same on a GPU (each round `--calls` calls between two
synchronizations).
"""

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    p.add_argument("--contexts", nargs="+", type=int, default=[1024, 4096])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=10, help="calls per timed round")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--inductor", action="store_true", help="also time the gather + SDPA compiled by Inductor")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    args = p.parse_args()

    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(ROOT, "python"))
    import guardless
    import guardless.ops  # noqa: F401  (registers torch.ops.guardless.paged_attention)

    torch.set_num_threads(args.threads)
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))
    hq, hkv, d, bs = args.heads, args.kv_heads, args.head_dim, args.block_size
    dev = torch.device(args.device)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    scale = d ** -0.5

    def paged(q, kc, vc, table, lens, starts):
        return torch.ops.guardless.paged_attention(q, kc, vc, table, lens, starts, scale=scale)

    def gather_sdpa(q, kc, vc, table, lens, starts):
        b = table.shape[0]
        k = kc[table.long()].reshape(b, -1, hkv, d).transpose(1, 2)
        v = vc[table.long()].reshape(b, -1, hkv, d).transpose(1, 2)
        keys = torch.arange(k.shape[2], device=lens.device)[None, :] < lens[:, None]
        o = F.scaled_dot_product_attention(q[:, :, None, :], k, v, attn_mask=keys[:, None, None, :],
                                           enable_gqa=True, scale=scale)
        return o[:, :, 0, :]

    def contiguous_sdpa(q, k, v):
        return F.scaled_dot_product_attention(q[:, :, None, :], k, v, enable_gqa=True, scale=scale)[:, :, 0, :]

    compiled = torch.compile(paged, backend=guardless.backend, fullgraph=True)
    inductor = torch.compile(gather_sdpa, dynamic=True) if args.inductor else None

    def timed(f, *a):
        sync()
        t = time.perf_counter()
        for _ in range(args.calls):
            f(*a)
        sync()
        return (time.perf_counter() - t) / args.calls * 1e3

    where = f"{args.threads} threads" if args.device == "cpu" else torch.cuda.get_device_name()
    print(f"B sequences × 1 query token over L keys each; Hq={hq}, Hkv={hkv}, D={d}, blocks of {bs}, {args.dtype}, "
          f"{where}; ms per call, median of {args.repeats} interleaved rounds of {args.calls} calls")
    head = "| B | L | guardless | torch gather+sdpa | "
    head += "inductor | " if inductor else ""
    head += "torch sdpa (contiguous) | gather+sdpa / guardless | contiguous / guardless | max abs diff |"
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    torch.manual_seed(0)
    with torch.no_grad():
        for b in args.batches:
            for length in args.contexts:
                per = (length + bs - 1) // bs
                blocks = b * per + 7
                kc = torch.randn(blocks, bs, hkv, d, dtype=dtype, device=dev)
                vc = torch.randn(blocks, bs, hkv, d, dtype=dtype, device=dev)
                # Each sequence's blocks, out of order.
                table = torch.randperm(blocks)[: b * per].reshape(b, per).to(torch.int32).to(dev)
                lens = torch.full((b,), length, dtype=torch.int32, device=dev)
                starts = torch.arange(b + 1, dtype=torch.int32, device=dev)
                q = torch.randn(b, hq, d, dtype=dtype, device=dev)
                k = kc[table.long()].reshape(b, -1, hkv, d)[:, :length].transpose(1, 2).contiguous()
                v = vc[table.long()].reshape(b, -1, hkv, d)[:, :length].transpose(1, 2).contiguous()
                ops = (q, kc, vc, table, lens, starts)
                for t in (q, table, lens, starts):
                    torch._dynamo.decorators.mark_unbacked(t, 0)
                got = compiled(*ops)
                want = contiguous_sdpa(q, k, v)
                err = (got.float() - want.float()).abs().max().item()
                tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
                torch.testing.assert_close(got, want, **tol)
                torch.testing.assert_close(gather_sdpa(*ops), want, **tol)
                contestants = [("guardless", compiled, ops), ("gather", gather_sdpa, ops)]
                if inductor:
                    inductor(*ops)
                    contestants.append(("inductor", inductor, ops))
                contestants.append(("contiguous", contiguous_sdpa, (q, k, v)))
                for _, f, a in contestants:
                    f(*a)
                times = {name: [] for name, _, _ in contestants}
                for _ in range(args.repeats):
                    for name, f, a in contestants:
                        times[name].append(timed(f, *a))
                med = {name: statistics.median(ts) for name, ts in times.items()}
                row = f"| {b} | {length} | {med['guardless']:.3f} | {med['gather']:.3f} | "
                row += f"{med['inductor']:.3f} | " if inductor else ""
                row += (f"{med['contiguous']:.3f} | {med['gather'] / med['guardless']:.2f} | "
                        f"{med['contiguous'] / med['guardless']:.2f} | {err:.1e} |")
                print(row, flush=True)
    if guardless.fallbacks():
        print(f"fallbacks: {guardless.fallbacks()}")
        sys.exit(1)


if __name__ == "__main__":
    main()
