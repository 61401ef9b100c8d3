"""The GPU check's last phase (ci/gpu-check): the device-to-device copy ceiling, the benchmark blocks
through eager PyTorch and torch.compile (dynamic size backed, and unbacked), all timed with CUDA
events around back-to-back calls, then one table beside guardless's own numbers
(`bench-<graph>.json` from `guardless bench --json`)."""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

CALLS = 100
REPS = 15


def timed(fn, args):
    """Median µs per call: CUDA events around CALLS back-to-back calls, REPS times."""
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    samples = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CALLS):
            fn(*args)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / CALLS)
    return statistics.median(samples)


def rms(x32, w):
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * y.to(w.dtype)


BLOCKS = {
    "rms_norm": lambda x, w: rms(x.float(), w),
    "fused_add_rms_norm": lambda x, r, w: (rms((x + r).float(), w), x + r),
    "silu_and_mul": lambda x: F.silu(x[:, : x.shape[1] // 2]) * x[:, x.shape[1] // 2 :],
    "softmax": lambda x: torch.softmax(x, -1),
    "llama_mlp": lambda x, wgu, wd: (lambda gu: (F.silu(gu[:, : gu.shape[1] // 2]) * gu[:, gu.shape[1] // 2 :]) @ wd.t())(x @ wgu.t()),
}
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def top_p(logits):
    s = torch.softmax(logits, -1).sort(-1, descending=True)
    return s.values.cumsum(-1), s.indices


def moe_experts(x, router, w):
    eid = (x @ router).argmax(1)
    s = eid.sort()
    offs = torch.histc(eid.float(), bins=w.shape[0], min=0, max=w.shape[0] - 1).cumsum(0).to(torch.int32)
    return torch._grouped_mm(x[s.indices], w, offs=offs)


# Library steps (tests/graphs), against eager PyTorch only: the function, and what it is given
# (made once, untimed): torch's grouped matmul wants its weights column-major.
LIBRARY = {
    "top_p": (top_p, lambda *a: a),
    "moe_experts": (moe_experts, lambda x, r, w: (x, r, w.transpose(-2, -1).contiguous().transpose(-2, -1))),
}


def inputs_of(graph, n):
    out = []
    for inp in graph["inputs"]:
        shape = [n if d == "n" else int(d) for d in inp["shape"]]
        out.append(torch.randn(shape, device="cuda").to(DTYPES[inp["dtype"]]))
    return out


def copy_ceiling():
    """GB/s of a 1 GiB device-to-device copy, bytes read plus written."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = timed(lambda: b.copy_(a), ())
    return 2 * a.numel() / us / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile)")
    ap.add_argument("--budget", type=float, default=150.0,
                    help="seconds; past it torch.compile is skipped, so the table always prints")
    a = ap.parse_args()
    started = time.time()
    sizes = [int(s) for s in a.sizes.split(",")]
    ceiling = copy_ceiling()
    print(f"copy ceiling: {ceiling:.0f} GB/s ({torch.cuda.get_device_name()}, torch {torch.__version__})")
    rows = []
    for name, fn in BLOCKS.items():
        graph = json.load(open(os.path.join("examples/graphs", f"{name}.unbacked.json")))
        ours = {}
        try:
            for r in json.load(open(os.path.join(a.out, f"bench-{name}.json")))["rows"]:
                ours[r["size"]] = r
        except (OSError, ValueError, KeyError):
            pass
        compiled = {}
        if not a.no_compile and time.time() - started < a.budget * 0.6:
            torch._dynamo.reset()
            compiled["backed"] = torch.compile(fn, dynamic=True)
            compiled["unbacked"] = torch.compile(fn, dynamic=True)
        for n in sizes:
            args = inputs_of(graph, n)
            row = {"graph": name, "size": n, "eager_us": timed(fn, args)}
            for kind, cf in compiled.items():
                if time.time() - started > a.budget:
                    continue
                t0 = time.time()
                if kind == "unbacked":
                    for t, inp in zip(args, graph["inputs"]):
                        if inp["shape"] and inp["shape"][0] == "n":
                            torch._dynamo.decorators.mark_unbacked(t, 0)
                try:
                    row[f"compile_{kind}_us"] = timed(cf, args)
                except Exception as e:  # a compile failure is a row entry, not a crash
                    row[f"compile_{kind}_us"] = float("nan")
                    print(f"{name} n={n} torch.compile {kind}: {type(e).__name__}: {e}", file=sys.stderr)
                row[f"compile_{kind}_s"] = time.time() - t0
            row.update({k: v for k, v in ours.get(n, {}).items() if k != "size"})
            rows.append(row)
    json.dump({"ceiling_gb_s": ceiling, "rows": rows}, open(os.path.join(a.out, "report.json"), "w"), indent=1)
    head = f"{'graph':<19}{'n':>6}{'unbacked':>10}{'backed':>9}{'static':>9}{'u/s':>6}{'GB/s':>7}{'%copy':>6}{'eager':>9}{'tc back':>9}{'tc unb':>9}"
    print("\nµs per call (median); u/s = unbacked/static; tc = torch.compile")
    print(head)
    for r in rows:
        g = lambda k: r.get(k, float("nan"))
        print(
            f"{r['graph']:<19}{r['size']:>6}{g('unbacked_us'):>10.1f}{g('backed_us'):>9.1f}{g('static_us'):>9.1f}"
            f"{g('unbacked_over_static'):>6.2f}{g('gb_per_s'):>7.0f}{100 * g('gb_per_s') / ceiling:>6.0f}"
            f"{g('eager_us'):>9.1f}{g('compile_backed_us'):>9.1f}{g('compile_unbacked_us'):>9.1f}"
        )
    library(a.out)


def library(out):
    """guardless bench's µs (bench-<graph>.json) beside eager PyTorch's, at the sizes benched."""
    print("\nlibrary steps, µs per call (median); g/e = guardless/eager")
    print(f"{'graph':<13}{'n':>6}{'guardless':>11}{'eager':>9}{'g/e':>6}")
    for name, (fn, prepare) in LIBRARY.items():
        graph = json.load(open(os.path.join("tests/graphs", f"{name}.json")))
        try:
            rows = json.load(open(os.path.join(out, f"bench-{name}.json")))["rows"]
        except (OSError, ValueError, KeyError):
            rows = []
        for r in rows:
            try:
                eager = timed(fn, prepare(*inputs_of(graph, r["size"])))
            except Exception as e:  # an op PyTorch lacks here is a row entry, not a crash
                print(f"{name} n={r['size']} eager: {type(e).__name__}: {e}", file=sys.stderr)
                eager = float("nan")
            ours = r.get("unbacked_us", float("nan"))
            print(f"{name:<13}{r['size']:>6}{ours:>11.1f}{eager:>9.1f}{ours / eager:>6.2f}")


if __name__ == "__main__":
    main()
