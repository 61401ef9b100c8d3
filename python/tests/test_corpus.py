"""The corpus (corpus.py): eight architectures, each exported with dynamic batch and sequence,
backed and unbacked, run by guardless on the CPU backend at three sizes other than the example's
and compared with eager PyTorch (torch.testing.assert_close). No op may be unsupported. Each is
also compiled with `torch.compile(backend=guardless.backend)` with unbacked batch and sequence
(the serving path), with zero fallbacks and one graph; Llama also with `dynamic=True` (backed:
Dynamo's tracing of the corpus's models at backed sizes, which recompiles at batch 1, took half of
each model's time in CI, and the backed graphs are the exports' — compared above for every model)."""

import os
import unittest

import corpus
import guardless


class CorpusTest(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(corpus.BIN):
            self.skipTest(f"no guardless CLI at {corpus.BIN} (build it, or set GUARDLESS_BIN)")

    def run_model(self, name, compile_backed=False):
        model = corpus.build(name)
        for kind in ("backed", "unbacked"):
            with self.subTest(kind=kind):
                e = corpus.export(model, kind)  # an unsupported op raises, listing them all
                # The decoder's layers are traced once and repeated, not traced whole.
                self.assertRegex(e.stacking or "", r"^\d+ calls of repeated layers, traced as 1 layer graph$")
                syms = {s["kind"] for s in e.graph["symbols"]}
                self.assertEqual(syms, {kind}, e.graph["symbols"])
                err, _ = corpus.compare(model, e, corpus.SIZES[kind])
                self.assertLess(err, 1e-4)
            if kind == "backed" and not compile_backed:
                continue
            with self.subTest(kind=kind, via="torch.compile"):
                err, graphs, fallbacks, _ = corpus.compile_compare(model, kind, corpus.SIZES[kind])
                self.assertEqual(fallbacks, [])
                self.assertLess(err, 1e-4)
                if kind == "unbacked":
                    self.assertEqual(graphs, 1, "unbacked sizes never recompile")

    def test_a_sequence_range_from_1_says_what_to_do(self):
        # Hugging Face's attention treats one token specially (Eq(u0, 1)): torch.export cannot
        # trace a range that includes 1. The exporter says so, and what to change.
        import torch

        model = corpus.build("llama")
        ids = torch.randint(0, corpus.VOCAB, corpus.EXAMPLE)
        with self.assertRaises(guardless.ExportError) as caught:
            guardless.export(model, (ids,), unbacked={"input_ids": {1: ("n", 1, 128)}})
        message = str(caught.exception)
        self.assertIn("Eq(u0, 1)", message)
        self.assertIn("'n' (input 'input_ids' dimension 1, range 1..128)", message)
        self.assertIn("start the range of 'n' at 2", message)

    def test_llama(self):
        self.run_model("llama", compile_backed=True)

    def test_qwen2(self):
        self.run_model("qwen2")

    def test_qwen3(self):
        self.run_model("qwen3")

    def test_mistral_past_its_sliding_window(self):
        self.run_model("mistral")

    def test_gpt2_with_tied_weights_stored_once(self):
        self.run_model("gpt2")
        e = corpus.export(corpus.build("gpt2"), "backed")
        names = [i["name"] for i in e.graph["inputs"]]
        self.assertFalse(any("lm_head" in n for n in names), names)
        self.assertEqual(len(e.parameters), len([i for i in e.graph["inputs"] if "kind" in i]))

    def test_bert(self):
        self.run_model("bert")

    def test_mixtral_batched_mm(self):
        self.run_model("mixtral")

    def test_qwen3_moe_through_the_grouped_mm_fallback(self):
        self.run_model("qwen3_moe")


if __name__ == "__main__":
    unittest.main()
