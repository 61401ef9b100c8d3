"""Per-op fallback: a graph with ops guardless does not lower compiles everything else, and those
ops are called through PyTorch between its compiled segments — zero-copy, in order, counted."""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import guardless  # noqa: E402

try:
    from guardless import _native
except ImportError as e:  # ci/test builds it
    raise unittest.SkipTest(f"guardless._native is not built ({e}); run `maturin develop` in python/")

# A user's custom ops (what a kernels-hub or another library's op looks like to the compiler).
LIB = torch.library.Library("guardless_test", "DEF")
LIB.define("scaled_gelu(Tensor x, float s) -> Tensor")
LIB.define("split_halves(Tensor x) -> (Tensor, Tensor)")
LIB.define("row_sums(Tensor x) -> Tensor")


@torch.library.impl(LIB, "scaled_gelu", "CompositeExplicitAutograd")
def _scaled_gelu(x, s):
    return torch.nn.functional.gelu(x) * s


@torch.library.register_fake("guardless_test::scaled_gelu", lib=LIB)
def _(x, s):
    return torch.empty_like(x)


@torch.library.impl(LIB, "split_halves", "CompositeExplicitAutograd")
def _split_halves(x):
    a, b = x.chunk(2, dim=-1)
    return a.contiguous() * 3, b.contiguous() - 1


@torch.library.register_fake("guardless_test::split_halves", lib=LIB)
def _(x):
    shape = (*x.shape[:-1], x.shape[-1] // 2)
    return x.new_empty(shape), x.new_empty(shape)


@torch.library.impl(LIB, "row_sums", "CompositeExplicitAutograd")
def _row_sums(x):
    return x.sum(-1)


@torch.library.register_fake("guardless_test::row_sums", lib=LIB)
def _(x):
    return x.new_empty(x.shape[:-1])


ops = torch.ops.guardless_test


def compiled(fn, **backend):
    torch._dynamo.reset()
    guardless.reset()
    b = guardless.make_backend(**backend)
    return torch.compile(fn, backend=b, dynamic=True), b


def layer(x, w, cache, pos):
    """A projection, the custom op, a KV-cache-like update in place, and work after it."""
    h = ops.scaled_gelu(x @ w, 2.0)
    cache.index_copy_(0, pos, h)
    return (h + 1).sum(-1), h.shape[0]


class PerOpFallbackTest(unittest.TestCase):
    def test_a_custom_op_runs_between_compiled_segments(self):
        f, b = compiled(layer)
        w = torch.randn(8, 8)
        cache, want_cache = torch.zeros(16, 8), torch.zeros(16, 8)
        with torch.no_grad():
            for n, at in ((5, 0), (9, 5), (2, 14)):
                x = torch.randn(n, 8)
                pos = torch.arange(at, at + n)
                got = f(x, w, cache, pos)
                want = layer(x, w, want_cache, pos)
                torch.testing.assert_close(got[0], want[0])
                self.assertEqual(got[1], n)
                torch.testing.assert_close(cache, want_cache)
        self.assertEqual(guardless.fallbacks(), [])
        (seg,) = b.segmented
        self.assertEqual([s.compiled for s in seg.stages], [True, False, True])
        self.assertEqual(seg.extern_ops, ["guardless_test.scaled_gelu.default"])
        st = guardless.stats()
        self.assertEqual((st.graphs, st.calls), (2, 6))
        self.assertEqual((st.extern_calls, st.extern_calls_by_graph), (3, {"graph_0": 3}))
        # Nothing copied: the segments read their inputs in place, and the cache update is
        # computed in the cache's storage (only the new rows written).
        self.assertEqual((st.copied_input_bytes, st.written_back_bytes), (0, 0))

    def test_unbacked_sizes_one_graph(self):
        f, b = compiled(layer)
        w = torch.randn(8, 8)
        cache, want_cache = torch.zeros(32, 8), torch.zeros(32, 8)
        with torch.no_grad():
            for n in (3, 7, 1, 20):
                x = torch.randn(n, 8)
                pos = torch.arange(n)
                torch._dynamo.decorators.mark_unbacked(x, 0, hint_override=8)
                torch._dynamo.decorators.mark_unbacked(pos, 0, hint_override=8)
                got = f(x, w, cache, pos)
                want = layer(x, w, want_cache, pos)
                torch.testing.assert_close(got[0], want[0])
                torch.testing.assert_close(cache, want_cache)
        self.assertEqual(len(b.segmented), 1, "unbacked: never a recompile")
        self.assertEqual(guardless.fallbacks(), [])

    def test_independent_extern_calls_share_a_stage_and_tuples_stay_inside(self):
        def f(x, y):
            a, b = ops.split_halves(x)
            c = ops.row_sums(y.sin())
            return a * b + c[:, None], c

        g, bk = compiled(f)
        for n in (4, 11):
            x, y = torch.randn(n, 6), torch.randn(n, 5)
            for got, want in zip(g(x, y), f(x, y)):
                torch.testing.assert_close(got, want)
        (seg,) = bk.segmented
        # sin before both custom ops (one segment), both ops in one eager stage, then the rest.
        self.assertEqual([s.compiled for s in seg.stages], [True, False, True])
        self.assertEqual(sorted(seg.extern_ops), ["guardless_test.row_sums.default", "guardless_test.split_halves.default"])

    def test_a_mutation_waits_for_the_extern_read_of_the_old_value(self):
        def f(cache, x):
            old = ops.row_sums(cache)  # reads the cache before the update below
            cache.add_(x)
            return old * 2

        g, b = compiled(f)
        for n in (3, 6):
            cache, x = torch.randn(n, 4), torch.randn(n, 4)
            want_cache = cache.clone()
            want = f(want_cache, x)
            torch.testing.assert_close(g(cache, x), want)
            torch.testing.assert_close(cache, want_cache)
        self.assertEqual(guardless.fallbacks(), [])
        (seg,) = b.segmented
        self.assertEqual([s.compiled for s in seg.stages], [False, True])

    def test_an_aten_op_guardless_does_not_lower_is_an_extern_call_too(self):
        f, b = compiled(lambda x: torch.special.i0(x.exp()) + 1, fallback=True)
        for n in (5, 8):
            x = torch.randn(n)
            torch.testing.assert_close(f(x), torch.special.i0(x.exp()) + 1)
        self.assertEqual(guardless.fallbacks(), [])
        self.assertEqual(b.segmented[0].extern_ops, ["aten.i0.default"])
        self.assertEqual(guardless.stats().extern_calls, 2)

    def test_without_extern_ops_it_is_a_whole_fallback_or_an_error(self):
        f, _ = compiled(lambda x: ops.scaled_gelu(x, 1.0) + 1, extern_ops=False)
        x = torch.randn(6)
        with self.assertWarns(UserWarning):
            torch.testing.assert_close(f(x), torch.nn.functional.gelu(x) + 1)
        (fb,) = guardless.fallbacks()
        self.assertIn("guardless_test.scaled_gelu.default is not supported", fb.reason)
        f, _ = compiled(lambda x: ops.scaled_gelu(x, 1.0) + 1, fallback=False)
        with self.assertRaisesRegex(Exception, "guardless_test.scaled_gelu.default"):
            f(x)
        # Asked for explicitly, extern ops go with a backend that raises on whole fallbacks.
        f, b = compiled(lambda x: ops.scaled_gelu(x, 1.0) + 1, fallback=False, extern_ops=True)
        torch.testing.assert_close(f(x), torch.nn.functional.gelu(x) + 1)
        self.assertEqual(len(b.segmented), 1)

    def test_a_graph_of_extern_ops_only_compiles_nothing(self):
        f, b = compiled(lambda x: ops.row_sums(ops.scaled_gelu(x, 3.0)))
        x = torch.randn(3, 5)
        torch.testing.assert_close(f(x), (torch.nn.functional.gelu(x) * 3).sum(-1))
        self.assertEqual([s.compiled for s in b.segmented[0].stages], [False])
        self.assertEqual(guardless.stats().graphs, 0)


class CudaPerOpFallbackTest(unittest.TestCase):
    """On a GPU machine: the segments run on the GPU, the custom op through PyTorch on the same
    stream, the cache updated in place."""

    def setUp(self):
        reason = None
        if not torch.cuda.is_available():
            reason = "no CUDA device for torch"
        elif not _native.cuda_available():
            reason = "no CUDA driver for guardless"
        if reason:
            if os.environ.get("GUARDLESS_REQUIRE_GPU"):
                self.fail(f"GUARDLESS_REQUIRE_GPU is set, but {reason}")
            self.skipTest(f"skipped: {reason}")

    def test_a_custom_op_runs_between_cuda_segments(self):
        f, b = compiled(layer)
        w = torch.randn(64, 64, device="cuda")
        cache, want_cache = (torch.zeros(8192, 64, device="cuda") for _ in range(2))
        with torch.no_grad():
            for n, at in ((5, 0), (4100, 5)):
                x = torch.randn(n, 64, device="cuda")
                pos = torch.arange(at, at + n, device="cuda")
                got = f(x, w, cache, pos)
                want = layer(x, w, want_cache, pos)
                torch.testing.assert_close(got[0], want[0], atol=1e-3, rtol=1e-4)
                torch.testing.assert_close(cache, want_cache, atol=1e-4, rtol=1e-4)
        self.assertEqual(guardless.fallbacks(), [])
        self.assertEqual({c.device for c in b.compiled}, {"cuda"})
        self.assertEqual(guardless.stats().extern_calls, 2)


if __name__ == "__main__":
    unittest.main()
