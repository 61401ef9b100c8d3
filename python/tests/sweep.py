"""A wider sweep than the corpus: small random-weight configurations of more Hugging Face
architectures (text: token ids; vision: pixel values), each exported backed and unbacked and run by
the CLI on the CPU backend against eager PyTorch, and compiled through `torch.compile` with
guardless's backend. Not run by CI (it takes minutes); `python sweep.py [names]` from python/tests
prints the table recorded in docs/models.md."""

import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

import corpus

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import guardless  # noqa: E402


def text_configs():
    import transformers as tf

    common = dict(vocab_size=corpus.VOCAB, use_cache=False, attn_implementation="sdpa")
    ll = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256)
    enc = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               max_position_embeddings=256)
    return {
        "gemma": (tf.GemmaConfig(**common, **ll, head_dim=16), tf.GemmaForCausalLM),
        "gemma2": (tf.Gemma2Config(**common, **ll, head_dim=16), tf.Gemma2ForCausalLM),
        "gemma3": (tf.Gemma3TextConfig(**common, **ll, head_dim=16), tf.Gemma3ForCausalLM),
        "phi": (tf.PhiConfig(**common, **enc), tf.PhiForCausalLM),
        "phi3": (tf.Phi3Config(**common, **ll, pad_token_id=0), tf.Phi3ForCausalLM),
        "falcon": (tf.FalconConfig(**common, hidden_size=64, num_hidden_layers=2, num_attention_heads=4),
                   tf.FalconForCausalLM),
        "gpt_neox": (tf.GPTNeoXConfig(**common, **enc), tf.GPTNeoXForCausalLM),
        "opt": (tf.OPTConfig(**common, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                             max_position_embeddings=256, word_embed_proj_dim=64), tf.OPTForCausalLM),
        "bloom": (tf.BloomConfig(**common, hidden_size=64, n_layer=2, n_head=4), tf.BloomForCausalLM),
        "t5_encoder": (tf.T5Config(**common, d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16),
                       tf.T5EncoderModel),
        "roberta": (tf.RobertaConfig(**common, **enc, pad_token_id=1), tf.RobertaModel),
        "distilbert": (tf.DistilBertConfig(**common, dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                                           max_position_embeddings=256), tf.DistilBertModel),
        "gptj": (tf.GPTJConfig(**common, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=256),
                 tf.GPTJForCausalLM),
        "starcoder2": (tf.Starcoder2Config(**common, **ll), tf.Starcoder2ForCausalLM),
        "olmo2": (tf.Olmo2Config(**common, **ll), tf.Olmo2ForCausalLM),
        "stablelm": (tf.StableLmConfig(**common, **ll), tf.StableLmForCausalLM),
        "cohere": (tf.CohereConfig(**common, **ll), tf.CohereForCausalLM),
        "granite": (tf.GraniteConfig(**common, **ll), tf.GraniteForCausalLM),
        "qwen2_moe": (tf.Qwen2MoeConfig(**common, **ll, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                        shared_expert_intermediate_size=64), tf.Qwen2MoeForCausalLM),
        "olmoe": (tf.OlmoeConfig(**common, **ll, num_experts=4, num_experts_per_tok=2), tf.OlmoeForCausalLM),
        "deberta_v2": (tf.DebertaV2Config(**common, **enc), tf.DebertaV2Model),
        "electra": (tf.ElectraConfig(**common, **enc, embedding_size=64), tf.ElectraModel),
        "albert": (tf.AlbertConfig(**common, **enc, embedding_size=32), tf.AlbertModel),
        "mpt": (tf.MptConfig(**common, d_model=64, n_heads=4, n_layers=2), tf.MptForCausalLM),
        "gpt_bigcode": (tf.GPTBigCodeConfig(**common, n_embd=64, n_layer=2, n_head=4, n_positions=256),
                        tf.GPTBigCodeForCausalLM),
        "biogpt": (tf.BioGptConfig(**common, **enc), tf.BioGptForCausalLM),
        "nemotron": (tf.NemotronConfig(**common, **ll), tf.NemotronForCausalLM),
        "xglm": (tf.XGLMConfig(**common, d_model=64, ffn_dim=128, num_layers=2, attention_heads=4,
                               max_position_embeddings=256), tf.XGLMForCausalLM),
    }


def vision_configs():
    import transformers as tf

    vit = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               image_size=32, patch_size=8)
    stages = dict(hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1])
    return {
        "vit": (tf.ViTConfig(**vit), tf.ViTModel, 32),
        "deit": (tf.DeiTConfig(**vit), tf.DeiTModel, 32),
        "beit": (tf.BeitConfig(**vit, use_relative_position_bias=True), tf.BeitModel, 32),
        "dinov2": (tf.Dinov2Config(**{k: v for k, v in vit.items() if k != "intermediate_size"}), tf.Dinov2Model, 32),
        "clip_vision": (tf.CLIPVisionConfig(**vit), tf.CLIPVisionModel, 32),
        "siglip_vision": (tf.SiglipVisionConfig(**vit), tf.SiglipVisionModel, 32),
        "dpt": (tf.DPTConfig(**vit), tf.DPTModel, 32),
        "convnext": (tf.ConvNextConfig(**stages), tf.ConvNextModel, 64),
        "convnextv2": (tf.ConvNextV2Config(**stages), tf.ConvNextV2Model, 64),
        "resnet": (tf.ResNetConfig(**stages, embedding_size=16), tf.ResNetModel, 64),
        "regnet": (tf.RegNetConfig(**stages, embedding_size=16, groups_width=8), tf.RegNetModel, 64),
        "mobilenet_v2": (tf.MobileNetV2Config(depth_multiplier=0.35, image_size=64), tf.MobileNetV2Model, 64),
        "mobilevit": (tf.MobileViTConfig(image_size=64, hidden_sizes=[32, 48, 64],
                                         neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]), tf.MobileViTModel, 64),
        "swin": (tf.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                               window_size=4), tf.SwinModel, 32),
        "segformer": (tf.SegformerConfig(**stages, num_attention_heads=[1, 1, 2, 2], decoder_hidden_size=32),
                      tf.SegformerModel, 64),
        # Its last stage attends over one key: softmax over a dimension of size 1.
        "levit": (tf.LevitConfig(image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[1, 2, 2],
                                 depths=[1, 1, 1], key_dim=[8, 8, 8]), tf.LevitModel, 64),
        "poolformer": (tf.PoolFormerConfig(**stages), tf.PoolFormerModel, 64),
    }


class Pixels(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        return self.m(pixel_values=pixel_values)[0]


def build(cfg, cls, wrap):
    torch.manual_seed(0)
    try:
        cfg._attn_implementation = "sdpa"
        m = cls(cfg)
    except (ValueError, NotImplementedError):
        cfg._attn_implementation = "eager"  # architectures without an SDPA path
        m = cls(cfg)
    return wrap(m.eval()).eval()


def run_cli(exported, inputs, tmp):
    """The CLI's outputs for `inputs` (the user inputs, in order)."""
    graph = os.path.join(tmp, "graph.json")
    exported.save(graph)
    user = [i["name"] for i in exported.graph["inputs"] if i.get("kind", "user") == "user"]
    tensors = dict(exported.parameters)
    tensors.update(zip(user, inputs))
    fin, fout = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, fin)
    r = subprocess.run([corpus.BIN, "run", graph, "--device", "cpu", "--inputs", fin, "--save-outputs", fout],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(r.stderr.strip().splitlines()[-1])
    return list(load_file(fout).values())[0]


def relative(got, want):
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def sweep_vision(name, cfg, cls, hw):
    model = build(cfg, cls, Pixels)
    row = [name, "vision"]
    batch = torch.export.Dim("batch", min=1, max=64)
    e = guardless.export(model, (torch.randn(2, 3, hw, hw),), dynamic_shapes={"pixel_values": {0: batch}})
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for b in (1, 3):
            x = torch.randn(b, 3, hw, hw)
            with torch.no_grad():
                worst = max(worst, relative(run_cli(e, [x], tmp), model(x)))
    row.append(f"{worst:.1e}")
    return row


def sweep_text(name, cfg, cls):
    model = build(cfg, cls, corpus.Logits)
    row = [name, "text"]
    for kind in ("backed", "unbacked"):
        e = corpus.export(model, kind)
        err, _ = corpus.compare(model, e, corpus.SIZES[kind][:2])
        row.append(f"{err:.1e}")
    for kind in ("backed", "unbacked"):
        err, graphs, fallbacks, _ = corpus.compile_compare(model, kind, corpus.SIZES[kind][:2])
        row.append(f"{graphs}, {len(fallbacks)}")
    return row


def table(names=None):
    text, vision = text_configs(), vision_configs()
    rows = ["| model | inputs | export, backed: max error | unbacked | torch.compile backed: graphs, fallbacks "
            "| unbacked |", "| --- | --- | ---: | ---: | --- | --- |"]
    for name in names or [*text, *vision]:
        try:
            if name in text:
                r = sweep_text(name, *text[name])
            else:
                r = sweep_vision(name, *vision[name]) + ["—", "—", "—"]
        except Exception as x:  # noqa: BLE001 - reported in the table
            r = [name, "", f"fails: {str(x).splitlines()[0][:100]}", "", "", ""]
        rows.append("| " + " | ".join(r) + " |")
        print(rows[-1], flush=True)
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(sys.argv[1:] or None))
