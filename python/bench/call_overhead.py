"""Per-call overhead of a compiled graph: `f(x)` from Python to the kernels and back, for a graph
whose kernel work is negligible (one add of 16 elements), with 1 and 32 tensor inputs — guardless
against Inductor and eager in one run (one thread; medians of interleaved rounds, in µs), and
the part spent in guardless's own wrapper (`CompiledFunction.__call__`, native call included).

    source .tools/env   # and a release build of the binding: maturin develop --release --skip-install
    .tools/torch-venv/bin/python python/bench/call_overhead.py
"""

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import guardless  # noqa: E402
from guardless import dynamo  # noqa: E402


def add(*xs):
    return xs[0] + xs[-1]


def timed(f, args, calls=2000):
    t = time.perf_counter()
    for _ in range(calls):
        f(*args)
    return (time.perf_counter() - t) / calls * 1e6


def main():
    torch.set_num_threads(1)
    print("| inputs | eager µs | guardless µs | Inductor µs | guardless's wrapper µs |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in (1, 32):
        xs = [torch.randn(1, 16) for _ in range(n)]
        fs = {"eager": add}
        for who in ("guardless", "inductor"):
            torch._dynamo.reset()
            fs[who] = torch.compile(add, backend=guardless.backend if who == "guardless" else "inductor",
                                    dynamic=True)
            fs[who](*xs)
            fs[who](*xs)
        # guardless's own share: its CompiledFunction timed inside the guardless calls.
        inner = [0.0]
        call = dynamo.CompiledFunction.__call__

        def timed_call(self, *a):
            t = time.perf_counter()
            r = call(self, *a)
            inner[0] += time.perf_counter() - t
            return r

        rounds = {who: [] for who in fs}
        wrapper = []
        with torch.no_grad():
            for _ in range(7):
                for who, f in fs.items():
                    rounds[who].append(timed(f, xs))
                    if who == "guardless":
                        inner[0] = 0.0
                        dynamo.CompiledFunction.__call__ = timed_call
                        timed(f, xs)
                        dynamo.CompiledFunction.__call__ = call
                        wrapper.append(inner[0] / 2000 * 1e6)
        m = {who: statistics.median(v) for who, v in rounds.items()}
        print(f"| {n} | {m['eager']:.1f} | {m['guardless']:.1f} | {m['inductor']:.1f} | "
              f"{statistics.median(wrapper):.1f} |")


if __name__ == "__main__":
    main()
