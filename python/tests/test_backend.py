"""`torch.compile(..., backend=guardless.backend)`: in-process compilation through the Rust binding
(guardless._native, built by `maturin develop`), zero-copy calls, counted fallbacks, errors."""

import os
import sys
import unittest
import warnings

import numpy
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import guardless  # noqa: E402

try:
    from guardless import _native  # noqa: F401

    NATIVE = None
except ImportError as e:  # ci/test builds it; say why when it is missing
    NATIVE = f"guardless._native is not built ({e}); run `maturin develop` in python/"


def compiled(fn, dynamic=None, fallback=False, extern_ops=None):
    torch._dynamo.reset()
    guardless.reset()
    b = guardless.make_backend(fallback=fallback, extern_ops=extern_ops)
    return torch.compile(fn, backend=b, dynamic=dynamic), b


class NativeTest(unittest.TestCase):
    """guardless._native on its own: a backed graph's guards are checked at every call."""

    def setUp(self):
        if NATIVE:
            self.skipTest(NATIVE)

    def test_a_call_that_breaks_a_guard_recompiles(self):
        # x: [s0, 4] + y: [s1, 4] with hint s1 = 1: the lowering broadcasts y and guards s1 == 1.
        path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "graphs", "guarded_broadcast.json")
        with open(path) as f:
            c = _native.compile(f.read())

        def run(x, y):
            args = [(t.data_ptr(), t.numel() * t.element_size(), "f32", list(t.shape), list(t.stride()))
                    for t in (x, y)]
            outs, _, _ = c.run(args)
            (out,) = outs
            self.assertEqual(out.dtype, numpy.float32)
            return torch.from_numpy(out)

        for n, m, recompiles in [(6, 1, 0), (3, 3, 1), (5, 5, 1), (2, 1, 1)]:
            x, y = torch.randn(n, 4), torch.randn(m, 4)
            torch.testing.assert_close(run(x, y), x + y)
            self.assertEqual(c.recompiles, recompiles, (n, m))
        # Outside the declared range: an error naming the symbol, never a recompile.
        with self.assertRaisesRegex(_native.GuardlessError, "s0"):
            run(torch.randn(1001, 4), torch.randn(1, 4))


class BackendTest(unittest.TestCase):
    def setUp(self):
        if NATIVE:
            self.skipTest(NATIVE)

    def test_backed_sizes_match_eager_with_no_copies(self):
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4)).eval()
        f, b = compiled(m, dynamic=True)
        with torch.no_grad():
            for n in (3, 7, 33, 257):
                x = torch.randn(n, 8)
                torch.testing.assert_close(f(x), m(x))
        self.assertEqual(guardless.fallbacks(), [])
        self.assertEqual(len(b.compiled), 1, "one dynamic graph for every size from 2")
        kinds = {s["kind"] for s in b.compiled[0].graph["symbols"]}
        self.assertEqual(kinds, {"backed"})
        s = guardless.stats()
        self.assertEqual((s.calls, s.copied_input_bytes), (4, 0))

    def test_identical_pieces_compile_once(self):
        # Three blocks alike but for their weights, a graph break after each: Dynamo hands over
        # three graphs that are the same up to their names; guardless compiles one.
        blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU()) for _ in range(3)).eval()

        def forward(x):
            # (Not a loop: a graph break inside one makes Dynamo run the whole frame eagerly.)
            x = blocks[0](x) + x
            torch._dynamo.graph_break()
            x = blocks[1](x) + x
            torch._dynamo.graph_break()
            x = blocks[2](x) + x
            torch._dynamo.graph_break()
            return x

        f, b = compiled(forward, dynamic=True)
        with torch.no_grad():
            for n in (3, 9, 20):
                x = torch.randn(n, 8)
                torch.testing.assert_close(f(x), forward(x))
        s = guardless.stats()
        self.assertEqual(guardless.fallbacks(), [])
        self.assertEqual(len(b.compiled), 3, "a function per piece")
        self.assertEqual((s.graphs, s.reused), (1, 2))
        self.assertEqual(len({id(c.compiled) for c in b.compiled}), 1, "one compiled program for the three")

    def test_unbacked_one_graph_for_every_size_and_its_hint(self):
        def f(a, w):
            return torch.softmax(a @ w, -1) * 2

        cf, b = compiled(f)
        w = torch.randn(30, 12)
        x = torch.randn(7, 30)
        torch._dynamo.decorators.mark_unbacked(x, 0, hint_override=512)
        with torch.no_grad():
            cf(x, w)
            for n in (0, 1, 2, 17, 1000):
                x = torch.randn(n, 30)
                got = cf(x, w)
                self.assertEqual(got.shape, (n, 12))
                torch.testing.assert_close(got, f(x, w))
        self.assertEqual(len(b.compiled), 1, "unbacked: never a recompile")
        (sym,) = b.compiled[0].graph["symbols"]
        self.assertEqual((sym["kind"], sym["optimization_hint"]), ("unbacked", 512))

    def test_outputs_own_their_storage(self):
        f, _ = compiled(lambda x: (x * 2, x.sum(0)), dynamic=True)
        a = f(torch.ones(5, 3))
        b = f(torch.full((5, 3), 3.0))
        # The second call wrote fresh storage: the first call's outputs are intact.
        torch.testing.assert_close(a[0], torch.full((5, 3), 2.0))
        torch.testing.assert_close(a[1], torch.full((3,), 5.0))
        torch.testing.assert_close(b[0], torch.full((5, 3), 6.0))
        self.assertNotEqual(a[0].data_ptr(), b[0].data_ptr())

    def test_strided_input_is_read_through_its_strides(self):
        # A transposed input (as a transposed KV cache or a slice of a wider mask reaches the
        # backend) is declared with its strides and read in place, not copied.
        f, b = compiled(lambda x: x.exp() + 1)
        x = torch.randn(9, 30).t()
        torch.testing.assert_close(f(x), x.exp() + 1)
        self.assertEqual(guardless.stats().copied_input_bytes, 0)
        (inp,) = b.compiled[0].graph["inputs"]
        self.assertEqual(inp["strides"], [1, 30])

    def test_dtypes_and_symint_arguments(self):
        def f(x, n):
            return (x * n).to(torch.bfloat16), x > 0, torch.arange(n) * 2

        cf, b = compiled(f, dynamic=True)
        for n in (3, 5, 11):
            x = torch.randn(4, n)
            for got, want in zip(cf(x, n), f(x, n)):
                self.assertEqual(got.dtype, want.dtype)
                torch.testing.assert_close(got, want)
        self.assertEqual(guardless.fallbacks(), [])

    def test_input_mutation_and_aliased_outputs(self):
        def f(x):
            x.add_(1)
            return x.view(-1), x * 2

        cf, _ = compiled(f, dynamic=True)
        x, y = torch.randn(4, 6), None
        y = x.clone()
        got, want = cf(x), f(y)
        torch.testing.assert_close(x, y)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        self.assertEqual(got[0].data_ptr(), x.data_ptr(), "the view is of the input")

    def test_a_static_kv_cache_is_updated_in_place(self):
        # A static cache (Hugging Face's StaticCache: index_copy_ at the new positions): the graph
        # writes only the new rows into the caller's cache — nothing copied in, nothing written
        # back whole — and a cache far larger than the update stays where it was.
        class Layer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("k", torch.zeros(1, 2, 4096, 8))
                self.register_buffer("v", torch.zeros(1, 2, 4096, 8))

            def forward(self, x, pos):
                self.k.index_copy_(2, pos, x * 2)
                self.v.index_copy_(2, pos, x + 1)
                return (self.k[:, :, :8].sum(-1) + self.v[:, :, :8].sum(-1)).flatten()

        m, ref = Layer(), Layer()
        f, b = compiled(m, dynamic=True)
        k_ptr = m.k.data_ptr()
        with torch.no_grad():
            for step, n in enumerate([3, 1, 1, 2]):
                pos = torch.arange(step * 3, step * 3 + n)
                x = torch.randn(1, 2, n, 8)
                torch.testing.assert_close(f(x, pos), ref(x, pos))
                torch.testing.assert_close(m.k, ref.k)
                torch.testing.assert_close(m.v, ref.v)
        self.assertEqual(guardless.fallbacks(), [])
        self.assertEqual(m.k.data_ptr(), k_ptr)
        mutated = [o.get("mutates") for c in b.compiled for o in c.graph["outputs"]]
        self.assertEqual(sum(x is not None for x in mutated) % 2, 0, mutated)
        self.assertTrue(any(mutated), "the cache updates are the graph's own outputs")
        s = guardless.stats()
        self.assertEqual((s.copied_input_bytes, s.written_back_bytes), (0, 0))

    def test_a_cache_read_before_its_update_sees_the_old_values(self):
        # The cache is read (old values) and updated in the same graph: computing the update in
        # the cache's storage would change what the read sees if the read ran later; the result
        # must equal eager's whatever order the schedule picks.
        def f(cache, x, pos):
            before = cache * 2
            cache.index_copy_(0, pos, x)
            return before.sum(0), cache.sum(0)

        cf, _ = compiled(f, dynamic=True)
        with torch.no_grad():
            for n in (2, 3, 5):
                cache, x = torch.randn(16, 4), torch.randn(n, 4)
                ref = cache.clone()
                pos = torch.arange(n) * 3
                got, want = cf(cache, x, pos), f(ref, x, pos)
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w)
                torch.testing.assert_close(cache, ref)
        self.assertEqual(guardless.fallbacks(), [])

    def test_graphs_that_return_sizes_compile(self):
        # Sizes and SymInt arithmetic (sym_max, sums of sizes) returned beside tensors, as Gemma 3's
        # graphs do: computed by the graph, returned as ints, never a fallback.
        def f(x, y):
            n = x.shape[0] + y.shape[1]
            return x * 2, n, torch.sym_max(x.shape[0], y.shape[0]) * 3, None

        cf, b = compiled(f, dynamic=True)
        for n in (3, 5, 9):
            x, y = torch.randn(n, 2), torch.randn(n + 1, 4)
            got, want = cf(x, y), f(x, y)
            torch.testing.assert_close(got[0], want[0])
            self.assertEqual(got[1:], want[1:])
            self.assertIsInstance(got[1], int)
        self.assertEqual(guardless.fallbacks(), [])
        self.assertIn(("int", 1), b.compiled[-1].returns)

    def test_data_dependent_sizes(self):
        def f(a):
            k = (a > 0).sum().item()
            return torch.nonzero(a > 0).sum(0), a[a > 0].sum(), torch.arange(k) * 2

        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        torch._dynamo.config.capture_scalar_outputs = True
        cf, _ = compiled(f)
        for n in (1, 7, 100):
            a = torch.randn(n)
            for g, w in zip(cf(a), f(a)):
                torch.testing.assert_close(g, w)
        self.assertEqual(guardless.fallbacks(), [])

    def test_out_of_range_index_is_a_clean_error(self):
        f, _ = compiled(lambda t, i: t[i] + 1, dynamic=True)
        t = torch.randn(5, 3)
        torch.testing.assert_close(f(t, torch.tensor([0, 4])), t[[0, 4]] + 1)
        with self.assertRaisesRegex(guardless.GuardlessError, "out of range"):
            f(t, torch.tensor([1, 9]))

    def test_an_out_of_vocabulary_id_names_the_embedding(self):
        # The error names the op the user wrote (the lookup), not the kernel it was fused into.
        emb = torch.nn.Embedding(10, 8)

        def fn(ids):
            e = emb(ids)
            return e - e.mean(-1, keepdim=True)

        f, _ = compiled(fn, dynamic=True)
        with torch.no_grad():
            ids = torch.tensor([1, 2, 3])
            torch.testing.assert_close(f(ids), fn(ids))
            with self.assertRaises(guardless.GuardlessError) as caught:
                f(torch.tensor([1, 12, 3]))
        message = str(caught.exception)
        self.assertRegex(message, r"node '[^']+' \(aten\.embedding\.default\): index 12 is out of range for size 10")

    def test_tensors_made_in_forward_are_constants_of_the_graph(self):
        # `torch.tensor(...)` in forward (Falcon's alibi slopes, DeBERTa's scale) is a constant
        # the traced graph holds: passed as an input after the arguments, never a fallback; an
        # output of it is the caller's own copy.
        def fn(x):
            scale = torch.tensor([0.5, 2.0, -1.0])
            table = torch.tensor([[1, 2, 3], [4, 5, 6]])
            return x * scale + table[1], torch.tensor(16.0).sqrt() * x, table

        f, b = compiled(fn, dynamic=True)
        for n in [2, 7, 1]:
            x = torch.randn(n, 3)
            got, want = f(x), fn(x)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)
        got[2].add_(100)
        torch.testing.assert_close(f(x)[2], torch.tensor([[1, 2, 3], [4, 5, 6]]))
        self.assertEqual(guardless.fallbacks(), [])
        self.assertGreaterEqual(len(b.compiled), 1)

    def test_unsupported_op_is_a_counted_fallback(self):
        # Without per-op fallback (test_segments: the op called between compiled segments).
        f, _ = compiled(lambda x: torch.special.i0(x) + 1, fallback=True, extern_ops=False)
        x = torch.randn(6)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.testing.assert_close(f(x), torch.special.i0(x) + 1)
        (fb,) = guardless.fallbacks()
        self.assertIn("aten.i0.default is not supported", fb.reason)
        self.assertTrue(any("runs eagerly" in str(w.message) for w in caught))
        self.assertEqual(guardless.stats().graphs, 0)

    def test_float_item_stays_a_tensor(self):
        # AOT autograd keeps a float read with .item() in a tensor; guardless takes it.
        torch._dynamo.config.capture_scalar_outputs = True
        f, b = compiled(lambda a: a * a.max().item() / a.shape[0], dynamic=True)
        for n in (5, 9):
            a = torch.randn(n)
            torch.testing.assert_close(f(a), a * a.max().item() / n)
        self.assertEqual(guardless.fallbacks(), [])
        self.assertEqual(len(b.compiled), 1)

    def test_unsupported_op_without_fallback_names_it(self):
        f, _ = compiled(lambda x: torch.special.i0(x) + 1, fallback=False)
        with self.assertRaisesRegex(Exception, "aten.i0.default"):
            f(torch.randn(6))

    def test_another_device_is_a_counted_fallback(self):
        f, _ = compiled(lambda x: x * 2, fallback=True)
        out = f(torch.empty(4, device="meta"))
        self.assertEqual(out.device.type, "meta")
        (fb,) = guardless.fallbacks()
        self.assertIn("meta", fb.reason)

    def test_gradients_are_an_error(self):
        m = torch.nn.Linear(4, 4)
        f, _ = compiled(m)
        with self.assertRaisesRegex(Exception, "inference only"):
            f(torch.randn(2, 4))

    def test_a_second_process_loads_the_native_code_from_the_disk_cache(self):
        # The same graph compiled here with a fresh cache directory (it compiles and stores its
        # native code), then in a fresh process sharing the directory (it loads it: LLVM does
        # not run, and it computes the same bits); with the cache turned off (an empty
        # GUARDLESS_CACHE_DIR) nothing is stored. One child process: each costs torch's import
        # and Dynamo's first trace (25 s in CI).
        import json
        import subprocess
        import tempfile

        script = (
            "import json, sys, torch\n"
            f"sys.path.insert(0, {os.path.join(os.path.dirname(__file__), '..')!r})\n"
            "import guardless\n"
            "torch.manual_seed(0)\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()\n"
            "f = torch.compile(m, backend=BACKEND, dynamic=True)\n"
            "with torch.no_grad():\n"
            "    y = f(torch.linspace(-2, 2, 40).reshape(5, 8))\n"
            "s = guardless.stats()\n"
            "print(json.dumps({'graphs': s.graphs, 'hits': s.cache_hits, 'out': y.flatten().tolist()}))\n"
        )
        with tempfile.TemporaryDirectory() as d:
            def here(cache_dir):
                # A backend of its own (no graphs compiled before) and Dynamo's caches cleared.
                import contextlib
                import io

                saved = os.environ.get("GUARDLESS_CACHE_DIR")
                os.environ["GUARDLESS_CACHE_DIR"] = cache_dir
                try:
                    torch._dynamo.reset()
                    guardless.reset()
                    out = io.StringIO()
                    with contextlib.redirect_stdout(out):
                        exec(script.replace("BACKEND", "guardless.make_backend()"), {})
                finally:
                    if saved is None:
                        del os.environ["GUARDLESS_CACHE_DIR"]
                    else:
                        os.environ["GUARDLESS_CACHE_DIR"] = saved
                    torch._dynamo.reset()
                return json.loads(out.getvalue().strip().splitlines()[-1])

            def child(cache_dir):
                env = {**os.environ, "GUARDLESS_CACHE_DIR": cache_dir}
                r = subprocess.run([sys.executable, "-c", script.replace("BACKEND", "guardless.backend")], env=env,
                                   capture_output=True, text=True, timeout=600)
                self.assertEqual(r.returncode, 0, r.stderr)
                return json.loads(r.stdout.strip().splitlines()[-1])

            cold = here(d)
            self.assertEqual((cold["graphs"], cold["hits"]), (1, 0))
            entries = [n for n in os.listdir(d) if n.endswith(".cpuso")]
            self.assertEqual(len(entries), 1, os.listdir(d))
            warm = child(d)
            self.assertEqual((warm["graphs"], warm["hits"]), (1, 1))
            self.assertEqual(warm["out"], cold["out"])
            self.assertEqual(sorted(os.listdir(d)), sorted(entries))
            with tempfile.TemporaryDirectory() as home:
                # Off: nothing stored in the directory, nor where the cache would be without
                # the variable.
                saved = {k: os.environ.get(k) for k in ("HOME", "XDG_CACHE_HOME")}
                os.environ["HOME"], os.environ["XDG_CACHE_HOME"] = home, home
                try:
                    off = here("")
                finally:
                    for k, v in saved.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
                self.assertEqual(os.listdir(home), [])
            self.assertEqual((off["graphs"], off["hits"]), (1, 0))
            self.assertEqual(off["out"], cold["out"])
            self.assertEqual(sorted(os.listdir(d)), sorted(entries))


def _gpu_reason():
    if NATIVE:
        return NATIVE
    if not torch.cuda.is_available():
        return "no CUDA device for torch"
    if not _native.cuda_available():
        return "no CUDA driver for guardless"
    return None


class CudaBackendTest(unittest.TestCase):
    """On a GPU machine: CUDA tensors run on the GPU runtime, on torch's current stream."""

    def setUp(self):
        reason = _gpu_reason()
        if reason:
            # On the GPU machine (ci/gpu-check) a skip is a failure.
            if os.environ.get("GUARDLESS_REQUIRE_GPU"):
                self.fail(f"GUARDLESS_REQUIRE_GPU is set, but {reason}")
            self.skipTest(f"skipped: {reason}")

    def test_unbacked_tokens_run_on_the_gpu_at_every_size(self):
        def rms(x, w):
            x32 = x.float()
            return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

        f, b = compiled(rms)
        w = torch.randn(256, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            for n in (1, 7, 300, 4097):
                x = torch.randn(n, 256, device="cuda", dtype=torch.bfloat16)
                if n == 1:
                    torch._dynamo.decorators.mark_unbacked(x, 0)
                out = f(x, w)
                self.assertEqual(out.device.type, "cuda")
                torch.testing.assert_close(out, rms(x, w), atol=2e-2, rtol=2e-2)
        self.assertEqual(guardless.fallbacks(), [])
        self.assertEqual([c.device for c in b.compiled], ["cuda"])

    def test_python_floats_go_with_cuda_tensors(self):
        # With dynamic=True Dynamo passes a Python float (here attention's scale) as a 0-d CPU
        # tensor beside the CUDA ones: the graph still runs on the GPU.
        scale = 0.125

        def attend(q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True, scale=scale)

        f, b = compiled(attend, dynamic=True)
        with torch.no_grad():
            for n in (5, 300):
                q = torch.randn(1, 8, n, 64, device="cuda")
                k, v = (torch.randn(1, 2, n, 64, device="cuda") for _ in range(2))
                torch.testing.assert_close(f(q, k, v), attend(q, k, v), atol=1e-4, rtol=1e-4)
        self.assertEqual(guardless.fallbacks(), [])
        self.assertEqual({c.device for c in b.compiled}, {"cuda"})

    def test_a_cuda_tensor_into_a_cpu_compile_is_an_error(self):
        f, b = compiled(lambda x: x * 2)
        f(torch.randn(4))
        fn = b.compiled[0]
        with self.assertRaisesRegex(guardless.GuardlessError, "compiled for cpu"):
            fn(torch.randn(4, device="cuda"))


if __name__ == "__main__":
    unittest.main()
