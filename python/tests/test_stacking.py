"""Repeated layers traced once (guardless.stacking): the stacked graph computes what the model
does, layers that differ in what their forward reads are traced apart, and what cannot be stacked
falls back to tracing the whole model, saying why."""

import collections
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import guardless  # noqa: E402
from test_export import BIN, assert_runs_like_torch  # noqa: E402

D = 32


class Layer(torch.nn.Module):
    """A pre-norm MLP block with a residual; `scale` is read by forward, `index` is not."""

    def __init__(self, index, scale=1.0):
        super().__init__()
        self.index = index
        self.scale = scale
        self.norm = torch.nn.RMSNorm(D, eps=1e-6)
        self.up = torch.nn.Linear(D, 2 * D, bias=False)
        self.down = torch.nn.Linear(2 * D, D, bias=False)

    def forward(self, x, gate, *, bias=None, mode="silu"):
        y = self.up(self.norm(x))
        y = torch.nn.functional.silu(y) if mode == "silu" else torch.relu(y)
        out = x + self.scale * self.down(y) * gate
        if bias is not None:
            out = out + bias
        return out, out.sum(-1)


class Stack(torch.nn.Module):
    def __init__(self, scales, reuse_first=False):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(i, s) for i, s in enumerate(scales))
        self.gate = torch.nn.Linear(D, 1)
        self.reuse_first = reuse_first

    def forward(self, x):
        gate = torch.sigmoid(self.gate(x))
        total = torch.zeros(x.shape[:-1])
        for layer in self.layers:
            x, s = layer(x, gate, bias=None, mode="silu")
            total = total + s
        if self.reuse_first:  # the first layer's weights used twice
            x, s = self.layers[0](x, gate, bias=None, mode="silu")
            total = total + s
        return x, total


def ops(exported):
    return collections.Counter(n["op"] for n in exported.graph["nodes"])


class StackingTest(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(BIN):
            self.skipTest(f"no guardless CLI at {BIN} (build it, or set GUARDLESS_BIN)")
        torch.manual_seed(0)

    def export(self, model, **kw):
        return guardless.export(model, (torch.randn(2, 8, D),), unbacked={"x": {1: ("n", 1, 4096)}}, **kw)

    def runs_like_torch(self, e, model):
        for b, n in [(2, 1), (2, 5), (2, 300)]:  # the batch is static (2)
            assert_runs_like_torch(self, e, model, [torch.randn(b, n, D)], rtol=1e-4, atol=1e-4)

    def test_identical_layers_are_traced_once_and_repeated(self):
        model = Stack([1.0] * 6).eval()
        e = self.export(model)
        self.assertEqual(e.stacking, "6 calls of repeated layers, traced as 1 layer graph")
        whole = self.export(model, stack_layers=None)
        self.assertIsNone(whole.stacking)
        # The same graph as tracing every layer, each layer's nodes named after its module.
        self.assertEqual(ops(e), ops(whole))
        self.assertEqual(e.graph["symbols"], whole.graph["symbols"])
        self.assertEqual(sorted(e.graph["asserts"]), sorted(whole.graph["asserts"]))
        self.assertEqual(e.graph["inputs"], whole.graph["inputs"])
        names = [n["name"] for n in e.graph["nodes"]]
        for i in range(6):
            self.assertTrue(any(name.startswith(f"layers_{i}__") for name in names), names)
        self.runs_like_torch(e, model)

    def test_backed_sizes(self):
        model = Stack([1.0] * 4).eval()
        n = torch.export.Dim("n", min=2, max=512)
        e = guardless.export(model, (torch.randn(2, 8, D),), dynamic_shapes={"x": {1: n}})
        self.assertEqual(e.stacking, "4 calls of repeated layers, traced as 1 layer graph")
        self.assertEqual([s["kind"] for s in e.graph["symbols"]], ["backed"])
        for b, n in [(2, 2), (2, 77)]:  # the batch is static (2)
            assert_runs_like_torch(self, e, model, [torch.randn(b, n, D)], rtol=1e-4, atol=1e-4)

    def test_a_layer_whose_forward_reads_another_value_is_traced_apart(self):
        # Layer 2's scale differs (forward reads it); every layer's index differs (forward never
        # reads it): two layer graphs.
        model = Stack([1.0, 1.0, 0.5, 1.0, 1.0]).eval()
        e = self.export(model)
        self.assertEqual(e.stacking, "5 calls of repeated layers, traced as 2 layer graphs")
        self.runs_like_torch(e, model)

    def test_layers_that_all_differ_are_traced_whole(self):
        model = Stack([1.0, 0.5, 0.25, 0.125]).eval()
        e = self.export(model)
        self.assertIn("the whole model was traced", e.stacking)
        self.assertIn("the forward reads layers.2.scale, which differ", e.stacking)
        self.runs_like_torch(e, model)

    def test_a_layer_called_twice(self):
        model = Stack([1.0] * 4, reuse_first=True).eval()
        e = self.export(model)
        self.assertEqual(e.stacking, "5 calls of repeated layers, traced as 1 layer graph")
        self.runs_like_torch(e, model)

    def test_below_the_threshold_the_whole_model_is_traced(self):
        model = Stack([1.0] * 3).eval()
        self.assertIsNone(self.export(model).stacking)
        self.assertEqual(self.export(model, stack_layers=3).stacking,
                         "3 calls of repeated layers, traced as 1 layer graph")

    def test_a_tensor_made_in_forward_is_one_input_per_group(self):
        class Scaled(Layer):
            def forward(self, x, gate, **kw):
                x, s = super().forward(x, gate, **kw)
                return x * torch.tensor([0.5]), s  # a constant torch.export lifts

        model = Stack([1.0] * 4).eval()
        model.layers = torch.nn.ModuleList(Scaled(i) for i in range(4))
        e = self.export(model)
        self.assertEqual(e.stacking, "4 calls of repeated layers, traced as 1 layer graph")
        constants = [i["name"] for i in e.graph["inputs"] if i.get("kind") == "constant"]
        self.assertEqual(len(constants), 1, constants)
        torch.testing.assert_close(e.parameters[constants[0]], torch.tensor([0.5]))
        self.runs_like_torch(e, model)

    def test_a_layer_that_mutates_a_buffer_falls_back(self):
        class Counting(Layer):
            def __init__(self, index):
                super().__init__(index)
                self.register_buffer("calls", torch.zeros(1))

            def forward(self, x, gate, **kw):
                self.calls.add_(1)
                return super().forward(x, gate, **kw)

        model = Stack([1.0] * 4).eval()
        model.layers = torch.nn.ModuleList(Counting(i) for i in range(4))
        e = self.export(model)
        self.assertIn("the whole model was traced", e.stacking)
        self.assertIn("mutat", e.stacking)
        whole = self.export(model, stack_layers=None)
        self.assertEqual(ops(e), ops(whole))
        self.assertEqual(len([o for o in e.graph["outputs"] if "mutates" in o]), 4)

    def test_a_layer_with_side_effects_on_its_arguments_falls_back(self):
        # A key/value cache the layers append to: one opaque call per layer would lose it.
        class Appending(Layer):
            def forward(self, x, gate, cache, **kw):
                x, s = super().forward(x, gate, **kw)
                cache.append(s)
                return x, s

        class Cache:
            def __init__(self):
                self.seen = []

        class Logging(Layer):
            def forward(self, x, gate, cache, **kw):
                x, s = super().forward(x, gate, **kw)
                cache.seen.append(s)
                return x, s

        for cls, cache, why in [(Appending, list, "changes the containers it is passed"),
                                (Logging, Cache, "takes a Cache argument")]:
            class Model(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.layers = torch.nn.ModuleList(cls(i) for i in range(4))

                def forward(self, x):
                    c = cache()
                    for layer in self.layers:
                        x, _ = layer(x, 1.0, c)
                    seen = c if isinstance(c, list) else c.seen
                    return x, torch.stack(seen).sum(0)

            with self.subTest(cls.__name__):
                model = Model().eval()
                e = self.export(model)
                self.assertIn("the whole model was traced", e.stacking)
                self.assertIn(why, e.stacking)
                self.runs_like_torch(e, model)

    def test_a_layer_that_makes_a_size_of_its_own_falls_back(self):
        class Selecting(Layer):
            def forward(self, x, gate, **kw):
                x, s = super().forward(x, gate, **kw)
                return x, s + torch.nonzero(s > 0).shape[0]

        model = Stack([1.0] * 4).eval()
        model.layers = torch.nn.ModuleList(Selecting(i) for i in range(4))
        e = self.export(model)
        self.assertIn("the whole model was traced", e.stacking)
        self.assertEqual(len(e.graph["symbols"]), 5)  # n, and one count per layer
        self.runs_like_torch(e, model)


if __name__ == "__main__":
    unittest.main()
