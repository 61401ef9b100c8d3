"""Compile time at model scale, guardless against torch.compile's Inductor, in the same run.

A Llama-architecture model (random weights, hidden 256, 8 heads / 2 KV heads, intermediate 688,
vocabulary 8000) at several depths, the sequence length unbacked. Every contestant runs in a
process of its own, and the contestants are interleaved within each repeat:

- `export`: guardless's front end, `guardless.export` (torch.export) of the model to a graph,
  timed around the call (the process's imports and the model's construction left out, as for
  Inductor), its repeated layers traced once (the default); `export whole`: the same with
  `stack_layers=None`, every layer traced;
- `cuda cold` / `cuda warm`: `guardless compile --emit cuda,ptx` of that graph (lower, schedule,
  CUDA C, NVRTC for sm_90) with an empty disk cache, then with the cache the cold run filled;
- `cpu`: `guardless run --device cpu` at n = 16 (the LLVM JIT of every kernel and one call);
- `inductor cold` / `inductor warm`: `torch.compile(model, dynamic=True)` (Inductor, CPU) and its
  first call at n = 16 with empty Inductor and Triton caches, then with the caches the cold run
  filled; the time is that first call's less an eager call's.

Prints a Markdown table of medians (seconds). Usage, from the repository root after `ci/setup`
and a release build of the CLI (`cargo build --release --features llvm`):

    source .tools/env
    .tools/torch-venv/bin/python benches/compile_vs_inductor.py --layers 2 8 32 --repeats 3
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODEL = """
import torch, transformers as tf
torch.manual_seed(0)
config = tf.LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers={layers},
                        num_attention_heads=8, num_key_value_heads=2, vocab_size=8000,
                        max_position_embeddings=4096, use_cache=False)
model = tf.LlamaForCausalLM(config).eval()
ids = torch.randint(0, 8000, (1, 16))
"""

EXPORT = MODEL + """
import sys
sys.path.insert(0, {python!r})
import time
import guardless
t = time.perf_counter()
e = guardless.export(model, (ids,), unbacked={{"input_ids": {{1: ("n", 2, 4096)}}}}, stack_layers={stack})
print(time.perf_counter() - t)
print(e.stacking, file=sys.stderr)
e.save({graph!r})
"""

INDUCTOR = MODEL + """
import time
torch.set_num_threads(1)
with torch.no_grad():
    t = time.perf_counter(); model(ids); eager = time.perf_counter() - t
    compiled = torch.compile(model, backend="inductor", dynamic=True)
    t = time.perf_counter(); compiled(ids); first = time.perf_counter() - t
print(first - eager)
"""


COLUMNS = ["export", "export whole", "cuda cold", "cuda warm", "cpu", "inductor cold", "inductor warm"]


def timed(cmd, env=None):
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])}… failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return wall, out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--guardless", default=os.path.join(ROOT, "target/release/guardless"))
    ap.add_argument("--skip-inductor-above", type=int, default=1 << 30,
                    help="layers above which Inductor is not run (it takes minutes per compile)")
    a = ap.parse_args()
    py = sys.executable
    work = tempfile.mkdtemp(prefix="guardless-vs-inductor-")
    rows = []
    try:
        for layers in a.layers:
            graph = os.path.join(work, f"llama{layers}.json")
            times = {k: [] for k in COLUMNS}
            for r in range(a.repeats):
                # The stacked export last: its graph is the one compiled below.
                for kind, stack in [("export whole", None), ("export", 4)]:
                    code = EXPORT.format(layers=layers, python=os.path.join(ROOT, "python"), graph=graph, stack=stack)
                    times[kind].append(float(timed([py, "-c", code])[1].split()[-1]))
                cache = os.path.join(work, f"cache{layers}.{r}")
                env = dict(os.environ, GUARDLESS_CACHE_DIR=cache)
                out = os.path.join(work, f"out{layers}")
                compile_cmd = [a.guardless, "compile", graph, "--emit", "cuda,ptx", "--out-dir", out]
                times["cuda cold"].append(timed(compile_cmd, env)[0])
                times["cuda warm"].append(timed(compile_cmd, env)[0])
                run_cmd = [a.guardless, "run", graph, "--device", "cpu", "--random", "--bind", "n=16"]
                times["cpu"].append(timed(run_cmd, dict(os.environ, RAYON_NUM_THREADS="1"))[0])
                if layers <= a.skip_inductor_above:
                    ind = os.path.join(work, f"inductor{layers}.{r}")
                    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=ind, TRITON_CACHE_DIR=ind + "-triton",
                               OMP_NUM_THREADS="1")
                    code = INDUCTOR.format(layers=layers)
                    for kind in ["inductor cold", "inductor warm"]:
                        times[kind].append(float(timed([py, "-c", code], env)[1].split()[-1]))
                print(f"layers {layers}, repeat {r}: " + ", ".join(
                    f"{k} {v[-1]:.2f}" for k, v in times.items() if v), file=sys.stderr, flush=True)
            rows.append((layers, {k: statistics.median(v) if v else None for k, v in times.items()}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cols = COLUMNS
    print("| layers | " + " | ".join(cols) + " | Inductor cold / (export + cuda cold) |")
    print("| ---: | " + " | ".join("---:" for _ in cols) + " | ---: |")
    for layers, m in rows:
        cells = [f"{m[c]:.2f}" if m[c] is not None else "—" for c in cols]
        ratio = "—" if m["inductor cold"] is None else f"{m['inductor cold'] / (m['export'] + m['cuda cold']):.1f}×"
        print(f"| {layers} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()
