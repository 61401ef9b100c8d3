"""Tensor parallelism through PyTorch's distributed engine: graphs with functional collectives
(what `parallelize_module` and `torch.distributed._functional_collectives` trace to) compile, the
collectives run through the process group between compiled segments (gloo on the CPU), and two
ranks match the single-process result."""

import json
import os
import socket
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import torch.distributed as dist

    from guardless import _native  # noqa: F401
except ImportError as e:  # ci/test builds the binding; torch's venv has torch.distributed
    raise unittest.SkipTest(f"needs torch.distributed and guardless._native: {e}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TensorParallelTest(unittest.TestCase):
    def test_two_ranks_with_gloo_match_one_process(self):
        if not dist.is_available() or not dist.is_gloo_available():
            self.skipTest("skipped: torch.distributed with gloo is not available")
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2",
                   PYTHONPATH=os.path.join(HERE, ".."), OMP_NUM_THREADS="1")
        ranks = [subprocess.Popen([sys.executable, os.path.join(HERE, "tp_worker.py")], env=dict(env, RANK=str(r)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
        results = []
        for p in ranks:
            try:
                out, err = p.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                for q in ranks:
                    q.kill()
                raise AssertionError("a rank did not finish in 300 s")
            self.assertEqual(p.returncode, 0, err[-3000:])
            results.append(json.loads(out.strip().splitlines()[-1]))
        for r in results:
            self.assertEqual(r["fallbacks"], [])
            # f32 partial sums reduced across ranks: the same values up to rounding.
            for e in r["block_errors"] + r["sp_errors"]:
                self.assertLess(e, 2e-5)
            self.assertEqual(r["block_graphs"], 1, "one graph for every size")
            # Two all-reduces (after attention's output and the MLP's down projection), each
            # waited on, between compiled segments (the residual adds after them); nothing copied.
            kinds = [compiled for compiled, _ in r["block_stages"]]
            self.assertEqual(kinds, [True, False, True, False, True])
            ops = [op for _, ops in r["block_stages"] for op in ops]
            self.assertEqual(ops.count("_c10d_functional.all_reduce.default"), 2)
            self.assertEqual(r["block_extern_calls"], 3 * 4)
            self.assertEqual(r["block_copied"], 0)
            self.assertIn("_c10d_functional.reduce_scatter_tensor.default", r["sp_ops"])
            self.assertIn("_c10d_functional.all_gather_into_tensor.default", r["sp_ops"])


if __name__ == "__main__":
    unittest.main()
