"""One forward of a larger Llama (hidden 1024, 4 layers, 16 heads / 4 KV heads, vocabulary 32000,
no KV cache) at several sequence lengths, guardless against eager PyTorch and Inductor, in one run.

`model.forward` compiled with `torch.compile(..., dynamic=True)` by guardless and by Inductor
(one compile each, every length served by it). One process per dtype, one thread (torch's and
guardless's); per length the contestants are timed in turn, interleaved, for `--repeats`
rounds after a warm-up call. Prints medians (ms), the ratios, and whether the logits match
eager's (torch.testing's tolerance for the dtype, loosened for bf16's accumulated rounding).

    source .tools/env   # and a release build of the binding: maturin develop --release --skip-install
    .tools/torch-venv/bin/python python/bench/forward.py [--dtypes f32 bf16] [--lengths 1 16 128 512]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one(args) -> dict:
    import torch
    import transformers as tf

    sys.path.insert(0, os.path.join(ROOT, "python"))
    import guardless

    torch.set_num_threads(1)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    config = tf.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
                            num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, use_cache=False,
                            attn_implementation="sdpa")
    contestants = {}
    for who in ["eager", "guardless", "inductor"]:
        torch.manual_seed(0)
        m = tf.LlamaForCausalLM(config).eval().to(dtype)
        if who != "eager":
            m.forward = torch.compile(m.forward, backend=guardless.backend if who == "guardless" else "inductor",
                                      dynamic=True)
        contestants[who] = m
    out = {}
    with torch.no_grad():
        for n in args.lengths:
            ids = torch.randint(0, 32000, (1, n), generator=torch.Generator().manual_seed(n))
            logits = {}
            for who, m in contestants.items():
                logits[who] = m(input_ids=ids).logits.float()
            times = {who: [] for who in contestants}
            for _ in range(args.repeats):
                for who, m in contestants.items():
                    t = time.perf_counter()
                    m(input_ids=ids)
                    times[who].append(time.perf_counter() - t)
            tol = dict(rtol=1e-3, atol=1e-3) if args.dtype == "f32" else dict(rtol=0.05, atol=0.05)
            same = {}
            for who in ("guardless", "inductor"):
                try:
                    torch.testing.assert_close(logits[who], logits["eager"], **tol)
                    same[who] = True
                except AssertionError:
                    same[who] = False
            out[n] = {"ms": {w: 1000 * statistics.median(v) for w, v in times.items()}, "same": same}
    out["fallbacks"] = [f.reason for f in guardless.fallbacks()]
    out["graphs"] = guardless.stats().graphs
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtypes", nargs="+", default=["f32", "bf16"])
    p.add_argument("--lengths", nargs="+", type=int, default=[1, 16, 128, 512])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        args.dtype = args.one
        print(json.dumps(one(args)))
        return
    print("| dtype | length | eager ms | guardless | Inductor | guardless / eager | guardless / Inductor "
          "| matches eager (guardless, Inductor) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for dtype in args.dtypes:
        cmd = [sys.executable, __file__, "--one", dtype, "--repeats", str(args.repeats), "--lengths",
               *map(str, args.lengths)]
        out = subprocess.run(cmd, capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1"})
        if out.returncode != 0:
            print(f"| {dtype} | failed: {out.stderr.strip().splitlines()[-1:]} |", flush=True)
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        for n in args.lengths:
            row = r[str(n)]
            e, g, i = (row["ms"][k] for k in ("eager", "guardless", "inductor"))
            s = row["same"]
            print(f"| {dtype} | {n} | {e:.1f} | {g:.1f} | {i:.1f} | {g / e:.2f} | {g / i:.2f} "
                  f"| {'yes' if s['guardless'] else 'NO'}, {'yes' if s['inductor'] else 'NO'} |", flush=True)
        if r["fallbacks"]:
            print(f"\n{dtype}: guardless fell back: {'; '.join(sorted(set(r['fallbacks'])))[:300]}")


if __name__ == "__main__":
    main()
