"""Small random-weight configurations of real architectures (no downloads), exported and run by
guardless on the CPU backend against eager PyTorch. Used by test_corpus.py and by
`python -m corpus` (from python/tests), which prints the table of docs/models.md."""

import json
import os
import subprocess
import sys
import tempfile
import time

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import guardless  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("GUARDLESS_BIN", os.path.join(ROOT, "target", "debug", "guardless"))
VOCAB = 256
EXAMPLE = (2, 16)  # batch, sequence of the example inputs
# Batch and sequence of the comparisons (not the example's); unbacked batches start at 2.
SIZES = {"backed": [(1, 5), (3, 33), (2, 100)], "unbacked": [(2, 5), (3, 33), (2, 100)]}


def configs():
    import transformers as tf

    common = dict(vocab_size=VOCAB, use_cache=False, attn_implementation="sdpa")
    llama_like = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return {
        "llama": (tf.LlamaConfig(**common, **llama_like), tf.LlamaForCausalLM),
        "qwen2": (tf.Qwen2Config(**common, **llama_like), tf.Qwen2ForCausalLM),
        "qwen3": (tf.Qwen3Config(**common, **llama_like, head_dim=16), tf.Qwen3ForCausalLM),
        # A sliding window shorter than the longest compared sequence.
        "mistral": (tf.MistralConfig(**common, **llama_like, sliding_window=24), tf.MistralForCausalLM),
        "gpt2": (tf.GPT2Config(**common, n_embd=64, n_layer=2, n_head=4, n_positions=256), tf.GPT2LMHeadModel),
        "bert": (tf.BertConfig(**common, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, max_position_embeddings=256), tf.BertModel),
        "mixtral": (tf.MixtralConfig(**common, **llama_like, num_local_experts=4, num_experts_per_tok=2,
                                     experts_implementation="batched_mm"), tf.MixtralForCausalLM),
        # Hugging Face's default experts: f32 weights take its grouped-mm fallback custom op.
        "qwen3_moe": (tf.Qwen3MoeConfig(**common, **llama_like, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                        moe_intermediate_size=32), tf.Qwen3MoeForCausalLM),
    }


class Logits(torch.nn.Module):
    """The model called on token ids, returning its first output (logits or hidden states)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        out = self.m(input_ids=input_ids)
        return out[0]


def build(name):
    cfg, cls = configs()[name]
    torch.manual_seed(0)
    return Logits(cls(cfg).eval()).eval()


# The corpus's models have two layers: their layers are stacked (traced once, repeated) as a
# deep model's are by default (guardless.export stacks four or more).
STACK = 2


def export(model, kind):
    ids = torch.randint(0, VOCAB, EXAMPLE)
    if kind == "backed":
        shapes = {"input_ids": {0: torch.export.Dim("batch", min=1, max=64),
                                1: torch.export.Dim("seq", min=2, max=128)}}
        return guardless.export(model, (ids,), dynamic_shapes=shapes, stack_layers=STACK)
    return guardless.export(model, (ids,), stack_layers=STACK,
                            # Batch from 2: at 1, the models' broadcasting code guards on it.
                            unbacked={"input_ids": {0: ("batch", 2, 64), 1: ("seq", 2, 128)}},
                            optimization_hints={"batch": 8, "seq": 64})


def compare(model, exported, sizes):
    """Max abs error over the sizes, and the slowest compile (ms) the CLI reported."""
    worst, compile_ms = 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        graph = os.path.join(tmp, "graph.json")
        exported.save(graph)
        user = [i["name"] for i in exported.graph["inputs"] if i.get("kind", "user") == "user"]
        for b, s in sizes:
            ids = torch.randint(0, VOCAB, (b, s))
            tensors = dict(exported.parameters)
            tensors[user[0]] = ids
            fin, fout = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
            save_file({k: v.contiguous() for k, v in tensors.items()}, fin)
            r = subprocess.run([BIN, "run", graph, "--device", "cpu", "--inputs", fin,
                                "--save-outputs", fout], capture_output=True, text=True)
            if r.returncode != 0:
                raise AssertionError(f"guardless run at {b}x{s}: {r.stderr}")
            got = list(load_file(fout).values())[0]
            with torch.no_grad():
                want = model(ids)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            worst = max(worst, (got - want).abs().max().item())
            first = r.stdout.splitlines()[0]
            compile_ms = max(compile_ms, float(first.split(" in ")[1].split(" ms")[0]))
    return worst, compile_ms


def compile_compare(model, kind, sizes):
    """`torch.compile(model, backend=guardless.backend)` at the sizes against eager: max abs error,
    graphs guardless compiled, fallbacks, compile seconds. Backed: `dynamic=True`; unbacked:
    batch and sequence marked with `mark_unbacked` (the export's ranges and hints)."""
    import torch._dynamo

    torch._dynamo.reset()
    guardless.reset()
    # Without per-op fallback: an op guardless does not lower shows as a fallback here.
    backend = guardless.make_backend(extern_ops=False)
    f = torch.compile(model, backend=backend, dynamic=True if kind == "backed" else None)
    worst = 0.0
    with torch.no_grad():
        for b, s in sizes:
            ids = torch.randint(0, VOCAB, (b, s))
            if kind == "unbacked":
                torch._dynamo.decorators.mark_unbacked(ids, 0, hint_override=8, min=2, max=64)
                torch._dynamo.decorators.mark_unbacked(ids, 1, hint_override=64, min=2, max=128)
            got, want = f(ids), model(ids)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            worst = max(worst, (got - want).abs().max().item())
    st = guardless.stats()
    return worst, len(backend.compiled), guardless.fallbacks(), st.compile_seconds


def table(names=None):
    rows = ["| model | export | nodes | distinct ops | unsupported ops | max error | compile (ms) "
            "| torch.compile: graphs, fallbacks | max error | compile, all graphs (ms) |",
            "| --- | --- | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: |"]
    for name in names or configs():
        model = build(name)
        for kind in ("backed", "unbacked"):
            try:
                e = export(model, kind)
            except guardless.ExportError as err:
                ops = sorted({l.split(": ")[1].split(" is not")[0] for l in str(err).splitlines()[1:]})
                rows.append(f"| {name} | {kind} | — | — | {', '.join(ops)} | — | — |")
                print(rows[-1], flush=True)
                continue
            ops = {n["op"] for n in e.graph["nodes"]}
            try:
                err, ms = compare(model, e, SIZES[kind])
                row = f"| {name} | {kind} | {len(e.graph['nodes'])} | {len(ops)} | none | {err:.1e} | {ms:.0f} |"
            except AssertionError as x:
                row = f"| {name} | {kind} | {len(e.graph['nodes'])} | {len(ops)} | none | fails: {str(x).splitlines()[0][:120]} | — |"
            try:
                err, graphs, fallbacks, secs = compile_compare(model, kind, SIZES[kind])
                row += f" {graphs}, {len(fallbacks)} | {err:.1e} | {secs * 1e3:.0f} |"
            except Exception as x:  # noqa: BLE001 - reported in the table
                row += f" fails: {str(x).splitlines()[0][:120]} | — | — |"
            rows.append(row)
            print(rows[-1], flush=True)
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(sys.argv[1:] or None))
