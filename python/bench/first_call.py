"""A process's first call: how long Hugging Face's `generate` takes to its first tokens when
`model.forward` is compiled, in a fresh process — guardless with an empty disk cache (cold), the
same cache filled by an earlier process (warm), and the cache turned off; Inductor cold (an empty
cache directory) and warm. Each run is a process of its own, one thread; the contestants are
interleaved per repeat. The timed call is `generate` with a 16-token prompt and 2 new tokens (the
prefill graph and the decode graph compile), less nothing: Dynamo's capture, AOT autograd and the
backend's compile are all in it, as a user sees them. Prints seconds (medians) and, for
guardless, the graphs compiled and how many came from the disk cache.

    source .tools/env   # and a release build of the binding: maturin develop --release --skip-install
    .tools/torch-venv/bin/python python/bench/first_call.py [--model llama] [--repeats 3]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one(args) -> dict:
    import torch

    sys.path.insert(0, os.path.join(ROOT, "python"))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import guardless
    from decode import build

    torch.set_num_threads(1)
    m = build(args.model)
    backend = guardless.backend if args.who == "guardless" else "inductor"
    m.forward = torch.compile(m.forward, backend=backend, dynamic=True)
    ids = torch.randint(3, 8000, (1, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        t = time.perf_counter()
        m.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)
        seconds = time.perf_counter() - t
    s = guardless.stats()
    return {"seconds": seconds, "graphs": s.graphs, "hits": s.cache_hits, "compile": s.compile_seconds}


def run(args, who: str, env: dict) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", "--who", who, "--model", args.model]
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **env}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        raise SystemExit(f"{who}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--one", action="store_true")
    p.add_argument("--who", default="guardless")
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args)))
        return
    rows = {k: [] for k in ["guardless cold", "guardless warm", "guardless, no cache",
                            "Inductor cold", "Inductor warm"]}
    info = {}
    for _ in range(args.repeats):
        g, i = tempfile.mkdtemp(), tempfile.mkdtemp()
        try:
            for name, who, env in [("guardless cold", "guardless", {"GUARDLESS_CACHE_DIR": g}),
                                   ("Inductor cold", "inductor", {"TORCHINDUCTOR_CACHE_DIR": i}),
                                   ("guardless warm", "guardless", {"GUARDLESS_CACHE_DIR": g}),
                                   ("Inductor warm", "inductor", {"TORCHINDUCTOR_CACHE_DIR": i}),
                                   ("guardless, no cache", "guardless", {"GUARDLESS_CACHE_DIR": ""})]:
                r = run(args, who, env)
                rows[name].append(r["seconds"])
                info[name] = r
        finally:
            shutil.rmtree(g, ignore_errors=True)
            shutil.rmtree(i, ignore_errors=True)
    print(f"{args.model}: the first generate call (16-token prompt, 2 new tokens) in a fresh process, "
          f"seconds, median of {args.repeats}")
    print("| contestant | seconds | graphs compiled | from the disk cache | backend compile s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, v in rows.items():
        r = info[name]
        extra = (f"{r['graphs']} | {r['hits']} | {r['compile']:.2f}" if name.startswith("guardless")
                 else "| |")
        print(f"| {name} | {statistics.median(v):.2f} | {extra} |")


if __name__ == "__main__":
    main()
