"""The exporter end to end: export a small model (backed, then unbacked), run the graph with the
guardless CLI on the CPU backend at sizes other than the example's, compare with eager PyTorch.

Run with the torch venv: `.tools/torch-venv/bin/python -m unittest discover -s python/tests`;
`GUARDLESS_BIN` names the CLI (default: target/debug/guardless).
"""

import copy
import os
import subprocess
import sys
import tempfile
import unittest

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import guardless  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("GUARDLESS_BIN", os.path.join(ROOT, "target", "debug", "guardless"))


class Block(torch.nn.Module):
    """RMSNorm, a gated MLP and a residual: the shape of a decoder's second half."""

    def __init__(self, d=64, h=96):
        super().__init__()
        self.norm = torch.nn.RMSNorm(d, eps=1e-6)
        self.gate = torch.nn.Linear(d, h, bias=False)
        self.up = torch.nn.Linear(d, h, bias=False)
        self.down = torch.nn.Linear(h, d, bias=False)

    def forward(self, x):
        y = self.norm(x)
        return x + self.down(torch.nn.functional.silu(self.gate(y)) * self.up(y))


def run_guardless(exported, inputs, tmp):
    graph = os.path.join(tmp, "graph.json")
    exported.save(graph)
    tensors = dict(exported.parameters)
    user = [i["name"] for i in exported.graph["inputs"] if i.get("kind", "user") == "user"]
    tensors.update(dict(zip(user, inputs)))
    fin, fout = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, fin)
    r = subprocess.run(
        [BIN, "run", graph, "--device", "cpu", "--inputs", fin, "--save-outputs", fout],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise AssertionError(f"guardless run failed: {r.stderr}")
    out = load_file(fout)
    return [out[k] for k in sorted(out)]


def assert_runs_like_torch(test, exported, model, inputs, **tolerances):
    """Runs `exported` on `inputs` with the CLI and compares every output with `model`'s."""
    with torch.no_grad():
        want = model(*inputs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    with tempfile.TemporaryDirectory() as tmp:
        got = run_guardless(exported, inputs, tmp)
    # The CLI saves outputs by name; run_guardless lists them sorted.
    names = [o["tensor"] for o in exported.graph["outputs"]]
    want = [w for _, w in sorted(zip(names, want), key=lambda p: p[0])]
    test.assertEqual(len(got), len(want))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **tolerances)


class ExportTest(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(BIN):
            self.skipTest(f"no guardless CLI at {BIN} (build it, or set GUARDLESS_BIN)")
        torch.manual_seed(0)
        self.model = Block().eval()

    def check(self, exported, sizes):
        for n in sizes:
            x = torch.randn(n, 64)
            with torch.no_grad():
                want = self.model(x)
            with tempfile.TemporaryDirectory() as tmp:
                (got,) = run_guardless(exported, [x], tmp)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    def test_backed_batch(self):
        batch = torch.export.Dim("batch", min=1, max=1024)
        e = guardless.export(self.model, (torch.randn(8, 64),), dynamic_shapes={"x": {0: batch}})
        (sym,) = e.graph["symbols"]
        self.assertEqual((sym["kind"], sym["hint"], sym["max"]), ("backed", 8, 1024))
        kinds = sorted(i.get("kind", "user") for i in e.graph["inputs"])
        self.assertEqual(kinds, ["parameter"] * 4 + ["user"])
        self.assertEqual(set(e.parameters), {i["name"] for i in e.graph["inputs"] if "kind" in i})
        ops = {n["op"] for n in e.graph["nodes"]}
        self.assertIn("aten.mm.default", ops)
        self.check(e, [1, 3, 200])

    def test_unbacked_tokens(self):
        e = guardless.export(
            self.model,
            (torch.randn(8, 64),),
            unbacked={"x": {0: ("n", 1, 4096)}},
            optimization_hints={"n": 512},
        )
        (sym,) = e.graph["symbols"]
        self.assertEqual(sym["kind"], "unbacked")
        self.assertEqual((sym["min"], sym["max"], sym["optimization_hint"]), (1, 4096, 512))
        self.assertNotIn("hint", sym)
        # The range is checked in-graph (torch's _assert_scalar nodes become asserts).
        name = sym["name"]
        self.assertEqual(sorted(e.graph["asserts"]), sorted([f"{name} <= 4096", f"{name} >= 1"]))
        self.check(e, [1, 5, 300])

    def test_names_that_match_nothing_are_errors_naming_the_inputs(self):
        class Ids(torch.nn.Module):
            def forward(self, input_ids, mask):
                return input_ids * mask

        model, args = Ids(), (torch.randn(2, 8), torch.randn(2, 8))
        cases = [
            (dict(unbacked={"x": {0: ("n", 1, 64)}}),
             "unbacked names the input 'x', which the model does not take; its inputs are: "
             "input_ids (rank 2), mask (rank 2)"),
            (dict(unbacked={"input_ids": {2: ("n", 1, 64)}}),
             "unbacked['input_ids'] names dimension 2; 'input_ids' has rank 2"),
            (dict(unbacked={"input_ids": {0: ("2n", 1, 64)}}), "'2n' is not a symbol name"),
            (dict(unbacked={"input_ids": {0: ("n", 1, 64)}, "mask": {0: ("n", 1, 64)}},
                  optimization_hints={"seq": 8}),
             "optimization_hints names ['seq'], which is not an unbacked symbol of the exported "
             "graph; its unbacked symbols are: ['n']"),
            (dict(dynamic_shapes={"x": {0: torch.export.Dim("b")}}),
             "dynamic_shapes names the input 'x'"),
            (dict(dynamic_shapes={"mask": {5: torch.export.Dim("b")}}),
             "dynamic_shapes['mask'] names dimension 5; 'mask' has rank 2"),
        ]
        for kwargs, message in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                with self.assertRaises(guardless.ExportError) as caught:
                    guardless.export(model, args, **kwargs)
                self.assertIn(message, str(caught.exception))

    def test_the_users_symbol_names_are_kept_and_saved_weights_are_inputs(self):
        # As the README does it: export with a symbol named by the user, save the weights, then
        # run the graph with those weights and random user inputs at a size bound by that name.
        e = guardless.export(self.model, (torch.randn(8, 64),), unbacked={"x": {0: ("tokens", 2, 4096)}},
                             optimization_hints={"tokens": 256})
        (sym,) = e.graph["symbols"]
        self.assertEqual((sym["name"], sym["optimization_hint"]), ("tokens", 256))
        self.assertEqual(next(i for i in e.graph["inputs"] if i["name"] == "x")["shape"], ["tokens", 64])
        self.assertTrue(all("u0" not in a for a in e.graph.get("asserts", [])), e.graph.get("asserts"))
        with tempfile.TemporaryDirectory() as tmp:
            graph, weights = os.path.join(tmp, "m.json"), os.path.join(tmp, "m.safetensors")
            e.save(graph, weights)
            r = subprocess.run([BIN, "run", graph, "--device", "cpu", "--inputs", weights, "--random",
                                "--bind", "tokens=7", "--check"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("[7, 64]", r.stdout)
            # The weights alone are not all the inputs: the error says what is missing and how.
            r = subprocess.run([BIN, "run", graph, "--inputs", weights], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("no tensor named 'x'", r.stderr)
            self.assertIn("--random", r.stderr)
        self.check(e, [2, 9])

    def test_one_name_for_several_dimensions_is_one_symbol(self):
        class Two(torch.nn.Module):
            def forward(self, a, b):
                return a * 2, b + 1

        e = guardless.export(Two(), (torch.randn(6, 5), torch.randn(6, 3)),
                             unbacked={"a": {0: ("n", 1, 64)}, "b": {0: ("n", 1, 64)}})
        self.assertEqual([s["name"] for s in e.graph["symbols"]], ["n"])
        self.assertEqual([i["shape"][0] for i in e.graph["inputs"]], ["n", "n"])
        self.assertEqual(len(e.graph["asserts"]), len(set(e.graph["asserts"])))
        with tempfile.TemporaryDirectory() as tmp:
            got = run_guardless(e, [torch.ones(4, 5), torch.ones(4, 3)], tmp)
            self.assertEqual(sorted(tuple(g.shape) for g in got), [(4, 3), (4, 5)])
            with self.assertRaisesRegex(AssertionError, "input 'b': n is 4 elsewhere but 7 here"):
                run_guardless(e, [torch.ones(4, 5), torch.ones(7, 3)], tmp)

    def test_a_buffer_mutation_is_written_back(self):
        class Cache(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("k", torch.arange(64.0).reshape(16, 4))

            def forward(self, pos, new):
                self.k.index_put_((pos,), new, accumulate=True)
                return (self.k * 2).sum(0)

        model = Cache()
        pos, new = torch.tensor([3, 8, 13]), torch.randn(3, 4)
        e = guardless.export(model, (pos, new))
        mutating = [o for o in e.graph["outputs"] if "mutates" in o]
        self.assertEqual(len(mutating), 1)
        buffer = mutating[0]["mutates"]
        self.assertIn(buffer, e.parameters)
        eager = copy.deepcopy(model)
        with torch.no_grad():
            total = eager(pos, new)
        with tempfile.TemporaryDirectory() as tmp:
            graph = os.path.join(tmp, "graph.json")
            e.save(graph)
            r = subprocess.run(
                [BIN, "check", graph], capture_output=True, text=True
            )
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"(written back into {buffer})", r.stdout)
            got = run_guardless(e, [pos, new], tmp)
        # The written cache is torch's buffer after the call; the sum is its output.
        outs = {tuple(t.shape): t for t in got}
        torch.testing.assert_close(outs[(16, 4)], eager.k)
        torch.testing.assert_close(outs[(4,)], total)

    def test_a_user_input_mutation_is_marked(self):
        class Write(torch.nn.Module):
            def forward(self, cache, pos, new):
                cache.index_put_((pos,), new)
                return cache.sum(0)

        cache, pos, new = torch.zeros(8, 4), torch.tensor([1, 6]), torch.randn(2, 4)
        e = guardless.export(Write(), (cache.clone(), pos, new))
        mutating = [o for o in e.graph["outputs"] if "mutates" in o]
        self.assertEqual([o["mutates"] for o in mutating], ["cache"])
        want_cache = cache.clone()
        want_sum = Write()(want_cache, pos, new)
        with tempfile.TemporaryDirectory() as tmp:
            got = run_guardless(e, [cache, pos, new], tmp)
        outs = {tuple(t.shape): t for t in got}
        torch.testing.assert_close(outs[(8, 4)], want_cache)
        torch.testing.assert_close(outs[(4,)], want_sum)

    def test_in_place_assignments_scatters_and_repeats(self):
        # What DeepSeek's attention and router do: a new tensor filled by slices, a scatter of
        # ones into a mask, a copy into a view, and a tile.
        class Assign(torch.nn.Module):
            def forward(self, a, b, idx):
                out = a.new_empty(a.shape[0], a.shape[1] + b.shape[1])
                out[:, : a.shape[1]].copy_(a)
                out[:, a.shape[1]:] = b
                out[0] = 7.0
                mask = torch.zeros_like(a).scatter_(1, idx, 1.0)
                acc = torch.zeros(a.shape[0], 8).scatter_add_(1, idx, a[:, : idx.shape[1]])
                return out * 2, mask, acc, b.repeat(2, 3)

        a, b = torch.randn(6, 5), torch.randn(6, 3)
        idx = torch.randint(0, 5, (6, 2))
        n = ("n", 1, 64)
        e = guardless.export(Assign(), (a, b, idx), unbacked={"a": {0: n}, "b": {0: n}, "idx": {0: n}})
        ops = {n["op"] for n in e.graph["nodes"]}
        for op in ("aten.slice_scatter.default", "aten.scatter.value", "aten.scatter_add.default", "aten.repeat.default"):
            self.assertIn(op, ops)
        for n in (1, 6, 40):
            a, b = torch.randn(n, 5), torch.randn(n, 3)
            idx = torch.randint(0, 5, (n, 2))
            want = Assign()(a, b, idx)
            with tempfile.TemporaryDirectory() as tmp:
                got = run_guardless(e, [a, b, idx], tmp)
            # The CLI saves outputs by name; run_guardless lists them sorted.
            names = [o["tensor"] for o in e.graph["outputs"]]
            want = [w for _, w in sorted(zip(names, want), key=lambda p: p[0])]
            self.assertEqual(len(got), 4)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)

    def test_a_small_convolutional_network(self):
        # Conv2d, BatchNorm2d (eval), ReLU, MaxPool2d, nearest and bilinear upsampling, a grouped strided
        # Conv2d, Conv1d over the flattened rows, a grouped ConvTranspose1d: batch and image sizes
        # dynamic, against eager.
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
                self.bn = torch.nn.BatchNorm2d(8)
                self.pool = torch.nn.MaxPool2d(3, stride=2, padding=1)
                self.grouped = torch.nn.Conv2d(8, 8, 3, stride=2, groups=4, bias=False)
                self.line = torch.nn.Conv1d(8, 4, 3, padding=1)
                self.up = torch.nn.ConvTranspose1d(4, 6, 4, stride=2, padding=1, output_padding=1, groups=2)

            def forward(self, x):
                y = self.pool(torch.relu(self.bn(self.stem(x))))
                y = torch.nn.functional.interpolate(y, scale_factor=2, mode="nearest")
                y = torch.nn.functional.interpolate(y, scale_factor=1.5, mode="bilinear")
                y = self.grouped(y)
                return self.up(self.line(y.flatten(2)))

        torch.manual_seed(0)
        model = Net().eval()
        with torch.no_grad():
            model.bn.running_mean.uniform_(-1, 1)
            model.bn.running_var.uniform_(0.5, 2)
        dims = {0: torch.export.Dim("b", min=1, max=16), 2: torch.export.Dim("h", min=9, max=256),
                3: torch.export.Dim("w", min=9, max=256)}
        e = guardless.export(model, (torch.randn(2, 3, 32, 32),), dynamic_shapes={"x": dims})
        ops = {n["op"] for n in e.graph["nodes"]}
        for op in ("aten.convolution.default", "aten._native_batch_norm_legit_no_training.default",
                   "aten.max_pool2d_with_indices.default", "aten.upsample_nearest2d.vec",
                   "aten.upsample_bilinear2d.vec"):
            self.assertIn(op, ops)
        for shape in [(1, 3, 9, 9), (3, 3, 32, 40), (2, 3, 17, 64)]:
            x = torch.randn(*shape)
            with torch.no_grad():
                want = model(x)
            with tempfile.TemporaryDirectory() as tmp:
                (got,) = run_guardless(e, [x], tmp)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    def test_math_activations_and_normalizations(self):
        # GroupNorm, InstanceNorm, ELU/SELU/LeakyReLU/ReLU6, bilinear upsampling to sizes, rounding,
        # signs, inverse trigonometry, NaN handling, argmin, and int4 unpacking by shifts, masks and
        # xor: the ops core ATen keeps whole that the corpus's language models never use.
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.gn = torch.nn.GroupNorm(2, 4)
                self.inorm = torch.nn.InstanceNorm2d(4, affine=True)
                self.act = torch.nn.ModuleList([torch.nn.ELU(0.7), torch.nn.SELU(), torch.nn.LeakyReLU(0.2),
                                                torch.nn.ReLU6()])

            def forward(self, x, packed):
                y = self.gn(x) + self.inorm(x)
                for a in self.act:
                    y = y + a(x)
                # Sizes, not a scale factor: a float scale becomes a float symbol guardless cannot hold.
                y = torch.nn.functional.interpolate(y, size=(y.shape[2] * 2, y.shape[3] + 3), mode="bilinear",
                                                    align_corners=True)
                z = torch.atan2(y, x.mean() + 1) + torch.round(y * 3) / 3 + torch.sign(y) * torch.floor(y)
                z = z + torch.asinh(y) + torch.expm1(y.clamp(max=2)) + torch.log2(y.abs() + 1)
                z = z + torch.hypot(y, z) + torch.copysign(y, z.neg()) + torch.copysign(z, -1.5)
                z = torch.nan_to_num(torch.log(y), nan=0.5, neginf=-4.0) + z + torch.ceil(torch.acos(y.tanh()))
                idx = torch.argmin(z.flatten(2), dim=-1)
                lo, hi = packed & 0xF, (packed >> 4) & 0xF
                unpacked = (lo ^ hi) | (lo << 8)
                return z, idx, unpacked

        torch.manual_seed(0)
        model = Net().eval()
        dims = {0: torch.export.Dim("b", min=1, max=16), 2: torch.export.Dim("h", min=2, max=64),
                3: torch.export.Dim("w", min=2, max=64)}
        packed = torch.randint(0, 256, (3, 5), dtype=torch.int32)
        e = guardless.export(model, (torch.randn(2, 4, 8, 8), packed),
                             dynamic_shapes={"x": dims, "packed": {0: torch.export.Dim("r", min=1, max=64)}})
        ops = {n["op"] for n in e.graph["nodes"]}
        for op in ("aten.native_group_norm.default", "aten._native_batch_norm_legit.no_stats",
                   "aten.elu.default", "aten.leaky_relu.default", "aten.hardtanh.default",
                   "aten.atan2.default", "aten.round.default", "aten.floor.default", "aten.isnan.default",
                   "aten.argmin.default", "aten.__rshift__.Scalar", "aten.bitwise_xor.Tensor",
                   "aten.hypot.default", "aten.copysign.Tensor"):
            self.assertIn(op, ops)
        for shape, rows in [((1, 4, 2, 3), 1), ((3, 4, 9, 8), 7), ((2, 4, 17, 5), 64)]:
            x = torch.randn(*shape)
            packed = torch.randint(0, 256, (rows, 5), dtype=torch.int32)
            assert_runs_like_torch(self, e, model, [x, packed], rtol=1e-4, atol=1e-4)

    def test_average_pooling(self):
        # Padding counted or not, a divisor override, 1-D pooling (exported as 2-D) and a global
        # average (exported as a mean) at symbolic sizes; ceil mode's clipped last windows (torch.export
        # cannot prove its output sizes for symbolic inputs) and adaptive windows at static ones.
        F = torch.nn.functional

        class Pools(torch.nn.Module):
            def forward(self, x):
                return (F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, (2, 3), (1, 2), 1, count_include_pad=False),
                        F.avg_pool2d(x, 3, divisor_override=4), F.avg_pool1d(x.flatten(2), 4, 3, 2),
                        F.adaptive_avg_pool2d(x, 1))

        class StaticPools(torch.nn.Module):
            def forward(self, x):
                return (F.avg_pool2d(x, (2, 3), (1, 2), 1, ceil_mode=True, count_include_pad=False),
                        F.avg_pool2d(x, 3, ceil_mode=True, divisor_override=4),
                        F.avg_pool2d(x, (3, 2), 2, 1, ceil_mode=True), F.adaptive_avg_pool2d(x, (4, 3)),
                        F.adaptive_avg_pool2d(x, (12, 2)))

        # Sizes whose pooled sizes stay above 1, which torch.export would otherwise specialize on.
        dims = {0: torch.export.Dim("b", min=1, max=8), 2: torch.export.Dim("h", min=6, max=64),
                3: torch.export.Dim("w", min=6, max=64)}
        cases = [(Pools(), {"x": dims}, [(2, 3, 16, 12), (1, 3, 6, 6), (3, 3, 9, 8), (2, 3, 17, 11)],
                  {"aten.avg_pool2d.default", "aten.mean.dim"}),
                 (StaticPools(), None, [(2, 3, 10, 7)], {"aten.avg_pool2d.default", "aten._adaptive_avg_pool2d.default"})]
        for model, dynamic, shapes, ops in cases:
            e = guardless.export(model, (torch.randn(*shapes[0]),), dynamic_shapes=dynamic)
            self.assertLessEqual(ops, {n["op"] for n in e.graph["nodes"]})
            for shape in shapes:
                assert_runs_like_torch(self, e, model, [torch.randn(*shape)], rtol=1e-5, atol=1e-5)

    def test_unfold_and_diagonal(self):
        # Sliding windows (an STFT-style framing), diagonals with offsets and products, at symbolic
        # lengths.
        class Views(torch.nn.Module):
            def forward(self, x):
                frames = x.unfold(-1, 4, 2)
                return (frames * torch.diagonal(x, 1, 0, 1).sum(), torch.diagonal(frames, -1, 1, 2),
                        torch.diagonal(x, -2).unsqueeze(0) + 1, frames.prod(-1), (x > 0).prod(0))

        e = guardless.export(Views(), (torch.randn(6, 9),),
                             dynamic_shapes={"x": {0: torch.export.Dim("r", min=4, max=64),
                                                   1: torch.export.Dim("n", min=8, max=512)}})
        self.assertLessEqual({"aten.unfold.default", "aten.diagonal.default", "aten.prod.dim_int"},
                             {n["op"] for n in e.graph["nodes"]})
        for shape in [(6, 9), (4, 8), (17, 40)]:
            assert_runs_like_torch(self, e, Views(), [torch.randn(*shape)], rtol=1e-5, atol=1e-5)

    def test_scans(self):
        # Running products, log-sum-exps (a sequence model's log-space recurrence) and running
        # extremes with their positions, over a symbolic length; ties from rounding, so that a
        # later equal value takes the position over as in ATen.
        class Scans(torch.nn.Module):
            def forward(self, x):
                values, indices = torch.cummax(x.round(), 1)
                low, where = torch.cummin(x, 0)
                return (torch.cumprod(1 + x / 8, 1), torch.logcumsumexp(x, 1), values, indices,
                        low, where, torch.cumprod(x.round().long(), 0))

        e = guardless.export(Scans(), (torch.randn(3, 40),),
                             dynamic_shapes={"x": {1: torch.export.Dim("n", min=2, max=4096)}})
        self.assertLessEqual({"aten.cumprod.default", "aten.logcumsumexp.default", "aten.cummax.default",
                              "aten.cummin.default"}, {n["op"] for n in e.graph["nodes"]})
        for n in [2, 40, 3000]:
            assert_runs_like_torch(self, e, Scans(), [torch.randn(3, n)], rtol=1e-5, atol=1e-5)

    def test_searchsorted_and_bucketize(self):
        # Insertion points as a sampler or a binning step asks for them: a batch of sorted rows
        # (with ties and a NaN last, as torch.sort leaves it), one shared sequence of symbolic
        # length, a sorter, a Python number, int32 results.
        class Search(torch.nn.Module):
            def forward(self, rows, seq, x):
                sorted_rows = rows.sort(-1).values
                order = seq.argsort()
                return (torch.searchsorted(sorted_rows, x), torch.searchsorted(sorted_rows, x, side="right"),
                        torch.bucketize(x, seq.sort().values, out_int32=True),
                        torch.searchsorted(seq, x.flatten(), sorter=order, right=True),
                        torch.searchsorted(seq.sort().values, 0.5))

        def inputs(b, n, m):
            rows = torch.randint(0, 5, (b, n)).float()
            rows[0, -1] = float("nan")
            x = torch.randint(-1, 6, (b, m)).float()
            x[-1, 0] = float("nan")
            return [rows, torch.randn(n), x]

        b, n = torch.export.Dim("b", min=1, max=64), torch.export.Dim("n", min=1, max=1 << 20)
        e = guardless.export(Search(), tuple(inputs(2, 7, 3)),
                             dynamic_shapes={"rows": {0: b, 1: n}, "seq": {0: n},
                                             "x": {0: b, 1: torch.export.Dim("m", min=1, max=512)}})
        self.assertLessEqual({"aten.searchsorted.Tensor", "aten.searchsorted.Scalar", "aten.bucketize.Tensor"},
                             {n["op"] for n in e.graph["nodes"]})
        for b, n, m in [(2, 7, 3), (1, 1, 1), (5, 1000, 40)]:
            assert_runs_like_torch(self, e, Search(), inputs(b, n, m))

    def test_as_strided_windows(self):
        # Overlapping frames over a signal by as_strided (hop 2, width 4), and a transposed view,
        # at a symbolic length.
        class Frames(torch.nn.Module):
            def forward(self, x):
                y = x * 2
                n = (y.shape[1] - 4) // 2 + 1
                frames = y.as_strided((y.shape[0], n, 4), (y.shape[1], 2, 1))
                return frames.sum(-1), y.as_strided((y.shape[1], y.shape[0]), (1, y.shape[1])) + 1

        # (From 6: at 4 and 5 there is one frame, which torch.export specializes.)
        e = guardless.export(Frames(), (torch.randn(3, 16),),
                             dynamic_shapes={"x": {1: torch.export.Dim("n", min=6, max=4096)}})
        self.assertIn("aten.as_strided.default", {n["op"] for n in e.graph["nodes"]})
        for n in [6, 16, 1001]:
            assert_runs_like_torch(self, e, Frames(), [torch.randn(3, n)], rtol=1e-5, atol=1e-5)

    def test_scatter_reduce(self):
        # A graph network's neighbourhood aggregation: messages reduced into their destination
        # nodes by every reduction, with and without the nodes' own features, over a symbolic
        # number of edges (duplicate destinations, nodes that receive nothing).
        class Aggregate(torch.nn.Module):
            def forward(self, x, dst, msg):
                index = dst.unsqueeze(1).expand(-1, x.shape[1])
                outs = [x.scatter_reduce(0, index, msg, r, include_self=s)
                        for r in ["sum", "prod", "mean", "amax", "amin"] for s in [True, False]]
                ints = x.round().long().scatter_reduce(0, index, msg.round().long(), "mean", include_self=False)
                return (*outs, ints)

        def inputs(nodes, edges):
            return [torch.randn(nodes, 4), torch.randint(0, nodes // 2 + 1, (edges,)), torch.randn(edges, 4)]

        edges = torch.export.Dim("e", min=2, max=100000)
        e = guardless.export(Aggregate(), tuple(inputs(6, 9)),
                             dynamic_shapes={"x": None, "dst": {0: edges}, "msg": {0: edges}})
        self.assertIn("aten.scatter_reduce.two", {n["op"] for n in e.graph["nodes"]})
        for n in [2, 9, 500]:
            assert_runs_like_torch(self, e, Aggregate(), inputs(6, n), rtol=1e-4, atol=1e-5)

    def test_fmax_and_fmin_ignore_one_nan(self):
        # NaN on one side gives the other value; on both, NaN; integers compare plainly.
        class NanAware(torch.nn.Module):
            def forward(self, a, b):
                ints = torch.nan_to_num(a).round().long(), torch.nan_to_num(b).round().long()
                return torch.fmax(a, b), torch.fmin(a, b), torch.fmax(*ints), torch.fmin(*ints)

        def inputs(n):
            a, b = torch.randn(n, 3), torch.randn(n, 3)
            a[::2, 0] = float("nan")
            b[::3, :2] = float("nan")
            return [a, b]

        n = torch.export.Dim("n", min=1, max=1024)
        e = guardless.export(NanAware(), tuple(inputs(4)), dynamic_shapes={"a": {0: n}, "b": {0: n}})
        for rows in [1, 7, 100]:
            assert_runs_like_torch(self, e, NanAware(), inputs(rows), equal_nan=True)

    def test_cdist(self):
        # A codebook lookup (nearest code by Euclidean distance) and other norms, a symbolic
        # number of queries, batch dimensions broadcast.
        class Distances(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.codes = torch.nn.Parameter(torch.randn(16, 8))

            def forward(self, q):
                # (The default mode switches to a matmul past 25 rows: torch.export guards on it.)
                d = torch.cdist(q, self.codes, compute_mode="donot_use_mm_for_euclid_dist")
                return (d.argmin(-1), d, torch.cdist(q, q, p=1.0), torch.cdist(q, self.codes, p=float("inf")),
                        torch.cdist(q[:1], q, p=0.5))

        torch.manual_seed(0)
        model = Distances()
        e = guardless.export(model, (torch.randn(2, 5, 8),),
                             dynamic_shapes={"q": {1: torch.export.Dim("n", min=1, max=4096)}})
        self.assertIn("aten._cdist_forward.default", {n["op"] for n in e.graph["nodes"]})
        for n in [1, 5, 300]:
            assert_runs_like_torch(self, e, model, [torch.randn(2, n, 8)], rtol=1e-4, atol=1e-4)

    def test_masked_scatter_of_image_features(self):
        # A vision-language model's merge: image-token positions of the text embeddings take the
        # image features in order, at a symbolic sequence length.
        class Merge(torch.nn.Module):
            def forward(self, ids, embeds, image):
                mask = (ids == 7).unsqueeze(-1).expand_as(embeds)
                return embeds.masked_scatter(mask, image) * 2

        def inputs(seq, images):
            ids = torch.randint(0, 6, (1, seq))
            ids[0, torch.randperm(seq)[:images]] = 7
            return [ids, torch.randn(1, seq, 8), torch.randn(images, 8)]

        seq, images = torch.export.Dim("seq", min=4, max=4096), torch.export.Dim("images", min=1, max=4096)
        e = guardless.export(Merge(), tuple(inputs(16, 3)),
                             dynamic_shapes={"ids": {1: seq}, "embeds": {1: seq}, "image": {0: images}})
        self.assertIn("aten.masked_scatter.default", {n["op"] for n in e.graph["nodes"]})
        for s_, i_ in [(4, 1), (16, 3), (600, 200)]:
            assert_runs_like_torch(self, e, Merge(), inputs(s_, i_))

    def test_float_size_arithmetic_is_named_once(self):
        # Bicubic upsampling decomposes with size ratios as Python floats: the error names those
        # nodes and why, not every node downstream of them.
        class Bicubic(torch.nn.Module):
            def forward(self, x):
                return torch.nn.functional.interpolate(x, scale_factor=2, mode="bicubic").relu()

        with self.assertRaises(guardless.ExportError) as e:
            guardless.export(Bicubic(), (torch.randn(1, 2, 8, 8),),
                             dynamic_shapes={"x": {2: torch.export.Dim("h", min=2, max=64)}})
        text = str(e.exception)
        self.assertIn("guardless's symbols are integers", text)
        self.assertNotIn("used before it is defined", text)

    def test_untranslatable_ops_are_all_listed(self):
        class Odd(torch.nn.Module):
            def forward(self, x):
                return torch.special.i0(x) + torch.special.i1(x).sin()

        with self.assertRaises(guardless.ExportError) as e:
            guardless.export(Odd(), (torch.randn(4),))
        text = str(e.exception)
        # Every op it cannot take, each with its node, not just the first.
        self.assertIn("aten.i0.default is not supported", text)
        self.assertIn("aten.special_i1.default is not supported", text)


if __name__ == "__main__":
    unittest.main()
