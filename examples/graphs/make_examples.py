#!/usr/bin/env python3
"""Writes the example graphs (vLLM-style building blocks), each in a backed and an unbacked form:
the same graph with the num_tokens symbol's kind flipped. Run from this directory."""
import json

N = "n"  # the num_tokens symbol


def symbol(kind):
    if kind == "backed":
        return {"name": N, "kind": "backed", "hint": 512, "min": 1, "max": 65536}
    return {"name": N, "kind": "unbacked", "min": 0, "max": 65536, "optimization_hint": 4096}


def t(name, index=None):
    return {"tensor": name} if index is None else {"tensor": name, "index": index}


def node(name, op, **args):
    return {"name": name, "op": op, "args": args}


def graph(name, kind, inputs, nodes, outputs, symbols=()):
    return {
        "format": "guardless-graph", "version": 1, "name": name,
        "symbols": [symbol(kind), *symbols],
        "inputs": inputs, "nodes": nodes, "outputs": outputs,
    }


def inp(name, dtype, shape, kind=None):
    d = {"name": name, "dtype": dtype, "shape": shape}
    if kind:
        d["kind"] = kind
    return d


def rms_norm_nodes(prefix, x, w, eps=1e-06):
    """RMSNorm as torch.export decomposes it: in f32, back to bf16, times the weight."""
    return [
        node(f"{prefix}x32", "aten._to_copy.default", self=t(x), dtype={"dtype": "f32"}),
        node(f"{prefix}sq", "aten.pow.Tensor_Scalar", self=t(f"{prefix}x32"), exponent=2),
        node(f"{prefix}ms", "aten.mean.dim", self=t(f"{prefix}sq"), dim=[-1], keepdim=True),
        node(f"{prefix}eps", "aten.add.Tensor", self=t(f"{prefix}ms"), other=eps),
        node(f"{prefix}inv", "aten.rsqrt.default", self=t(f"{prefix}eps")),
        node(f"{prefix}y", "aten.mul.Tensor", self=t(f"{prefix}x32"), other=t(f"{prefix}inv")),
        node(f"{prefix}yb", "aten._to_copy.default", self=t(f"{prefix}y"), dtype={"dtype": "bf16"}),
        node(f"{prefix}out", "aten.mul.Tensor", self=t(w), other=t(f"{prefix}yb")),
    ]


H = 256  # hidden size
I = 512  # intermediate size


def rms_norm(kind):
    return graph("rms_norm", kind,
                 [inp("x", "bf16", [N, 4096]), inp("w", "bf16", [4096], "parameter")],
                 rms_norm_nodes("", "x", "w"), [t("out")])


def fused_add_rms_norm(kind):
    nodes = [node("res", "aten.add.Tensor", self=t("x"), other=t("residual"))]
    nodes += rms_norm_nodes("n_", "res", "w")
    return graph("fused_add_rms_norm", kind,
                 [inp("x", "bf16", [N, H]), inp("residual", "bf16", [N, H]), inp("w", "bf16", [H], "parameter")],
                 nodes, [t("n_out"), t("res")])


def silu_and_mul(kind):
    return graph("silu_and_mul", kind, [inp("x", "bf16", [N, 2 * I])], [
        node("gate", "aten.slice.Tensor", self=t("x"), dim=1, start=0, end=I),
        node("up", "aten.slice.Tensor", self=t("x"), dim=1, start=I, end=9223372036854775807),
        node("act", "aten.silu.default", self=t("gate")),
        node("out", "aten.mul.Tensor", self=t("act"), other=t("up")),
    ], [t("out")])


def softmax(kind):
    return graph("softmax", kind, [inp("x", "f32", [N, 1000])], [
        node("out", "aten._softmax.default", self=t("x"), dim=-1, half_to_float=False),
    ], [t("out")])


HEADS, HD = 4, 64


def rotary_embedding(kind):
    """Neox-style rotary embedding of the query, positions looked up in a cos/sin cache."""
    half = HD // 2
    return graph("rotary_embedding", kind, [
        inp("q", "bf16", [N, HEADS * HD]),
        inp("positions", "i64", [N]),
        inp("cos_sin_cache", "f32", [2048, HD], "buffer"),
    ], [
        node("cs", "aten.index_select.default", self=t("cos_sin_cache"), dim=0, index=t("positions")),
        node("cos", "aten.slice.Tensor", self=t("cs"), dim=1, start=0, end=half),
        node("sin", "aten.slice.Tensor", self=t("cs"), dim=1, start=half, end=HD),
        node("cos3", "aten.unsqueeze.default", self=t("cos"), dim=1),
        node("sin3", "aten.unsqueeze.default", self=t("sin"), dim=1),
        node("q3", "aten.view.default", self=t("q"), size=[N, HEADS, HD]),
        node("x1", "aten.slice.Tensor", self=t("q3"), dim=2, start=0, end=half),
        node("x2", "aten.slice.Tensor", self=t("q3"), dim=2, start=half, end=HD),
        node("a", "aten.mul.Tensor", self=t("x1"), other=t("cos3")),
        node("b", "aten.mul.Tensor", self=t("x2"), other=t("sin3")),
        node("o1", "aten.sub.Tensor", self=t("a"), other=t("b")),
        node("c", "aten.mul.Tensor", self=t("x2"), other=t("cos3")),
        node("d", "aten.mul.Tensor", self=t("x1"), other=t("sin3")),
        node("o2", "aten.add.Tensor", self=t("c"), other=t("d")),
        node("rot", "aten.cat.default", tensors=[t("o1"), t("o2")], dim=-1),
        node("rotb", "aten._to_copy.default", self=t("rot"), dtype={"dtype": "bf16"}),
        node("out", "aten.view.default", self=t("rotb"), size=[N, HEADS * HD]),
    ], [t("out")])


def layer_norm(kind):
    return graph("layer_norm", kind, [
        inp("x", "bf16", [N, H]), inp("w", "bf16", [H], "parameter"), inp("b", "bf16", [H], "parameter"),
    ], [
        node("ln", "aten.native_layer_norm.default", input=t("x"), normalized_shape=[H], weight=t("w"), bias=t("b"), eps=1e-05),
    ], [t("ln", 0)])


def rotary_nodes(prefix, x, heads, positions="positions", cache="cos_sin_cache"):
    """Neox rotary embedding of x [N, heads*HD]; the result is f"{prefix}out"."""
    half = HD // 2
    p = prefix
    return [
        node(f"{p}cs", "aten.index_select.default", self=t(cache), dim=0, index=t(positions)),
        node(f"{p}cos", "aten.slice.Tensor", self=t(f"{p}cs"), dim=1, start=0, end=half),
        node(f"{p}sin", "aten.slice.Tensor", self=t(f"{p}cs"), dim=1, start=half, end=HD),
        node(f"{p}cos3", "aten.unsqueeze.default", self=t(f"{p}cos"), dim=1),
        node(f"{p}sin3", "aten.unsqueeze.default", self=t(f"{p}sin"), dim=1),
        node(f"{p}x3", "aten.view.default", self=t(x), size=[N, heads, HD]),
        node(f"{p}x1", "aten.slice.Tensor", self=t(f"{p}x3"), dim=2, start=0, end=half),
        node(f"{p}x2", "aten.slice.Tensor", self=t(f"{p}x3"), dim=2, start=half, end=HD),
        node(f"{p}a", "aten.mul.Tensor", self=t(f"{p}x1"), other=t(f"{p}cos3")),
        node(f"{p}b", "aten.mul.Tensor", self=t(f"{p}x2"), other=t(f"{p}sin3")),
        node(f"{p}o1", "aten.sub.Tensor", self=t(f"{p}a"), other=t(f"{p}b")),
        node(f"{p}c", "aten.mul.Tensor", self=t(f"{p}x2"), other=t(f"{p}cos3")),
        node(f"{p}d", "aten.mul.Tensor", self=t(f"{p}x1"), other=t(f"{p}sin3")),
        node(f"{p}o2", "aten.add.Tensor", self=t(f"{p}c"), other=t(f"{p}d")),
        node(f"{p}rot", "aten.cat.default", tensors=[t(f"{p}o1"), t(f"{p}o2")], dim=-1),
        node(f"{p}rotb", "aten._to_copy.default", self=t(f"{p}rot"), dtype={"dtype": "bf16"}),
        node(f"{p}out", "aten.view.default", self=t(f"{p}rotb"), size=[N, heads * HD]),
    ]


def mlp_nodes(p, x):
    return [
        node(f"{p}wgu_t", "aten.t.default", self=t("w_gate_up")),
        node(f"{p}gate_up", "aten.mm.default", self=t(x), mat2=t(f"{p}wgu_t")),
        node(f"{p}gate", "aten.slice.Tensor", self=t(f"{p}gate_up"), dim=1, start=0, end=I),
        node(f"{p}up", "aten.slice.Tensor", self=t(f"{p}gate_up"), dim=1, start=I, end=2 * I),
        node(f"{p}act", "aten.silu.default", self=t(f"{p}gate")),
        node(f"{p}h", "aten.mul.Tensor", self=t(f"{p}act"), other=t(f"{p}up")),
        node(f"{p}wd_t", "aten.t.default", self=t("w_down")),
        node(f"{p}out", "aten.mm.default", self=t(f"{p}h"), mat2=t(f"{p}wd_t")),
    ]


KV = 2  # key/value heads (grouped-query attention: 2 query heads per key/value head)


def llama_decoder_layer(kind):
    qd, kd = HEADS * HD, KV * HD
    nodes = rms_norm_nodes("in_", "x", "w_in")
    nodes += [
        node("wqkv_t", "aten.t.default", self=t("w_qkv")),
        node("qkv", "aten.mm.default", self=t("in_out"), mat2=t("wqkv_t")),
        node("q", "aten.slice.Tensor", self=t("qkv"), dim=1, start=0, end=qd),
        node("k", "aten.slice.Tensor", self=t("qkv"), dim=1, start=qd, end=qd + kd),
        node("v", "aten.slice.Tensor", self=t("qkv"), dim=1, start=qd + kd, end=qd + 2 * kd),
    ]
    nodes += rotary_nodes("qr_", "q", HEADS)
    nodes += rotary_nodes("kr_", "k", KV)
    nodes += [
        node("q4", "aten.view.default", self=t("qr_out"), size=[1, N, HEADS, HD]),
        node("k4", "aten.view.default", self=t("kr_out"), size=[1, N, KV, HD]),
        node("v4", "aten.view.default", self=t("v"), size=[1, N, KV, HD]),
        node("qh", "aten.permute.default", self=t("q4"), dims=[0, 2, 1, 3]),
        node("kh", "aten.permute.default", self=t("k4"), dims=[0, 2, 1, 3]),
        node("vh", "aten.permute.default", self=t("v4"), dims=[0, 2, 1, 3]),
        node("attn", "aten.scaled_dot_product_attention.default", query=t("qh"), key=t("kh"), value=t("vh"),
             is_causal=True, enable_gqa=True),
        node("attn_t", "aten.permute.default", self=t("attn"), dims=[0, 2, 1, 3]),
        node("attn_c", "aten.clone.default", self=t("attn_t"), memory_format="contiguous_format"),
        node("attn2", "aten.view.default", self=t("attn_c"), size=[N, qd]),
        node("wo_t", "aten.t.default", self=t("w_o")),
        node("o", "aten.mm.default", self=t("attn2"), mat2=t("wo_t")),
        node("res", "aten.add.Tensor", self=t("x"), other=t("o")),
    ]
    nodes += rms_norm_nodes("post_", "res", "w_post")
    nodes += mlp_nodes("mlp_", "post_out")
    nodes += [node("out", "aten.add.Tensor", self=t("res"), other=t("mlp_out"))]
    return graph("llama_decoder_layer", kind, [
        inp("x", "bf16", [N, H]),
        inp("positions", "i64", [N]),
        inp("cos_sin_cache", "f32", [2048, HD], "buffer"),
        inp("w_in", "bf16", [H], "parameter"),
        inp("w_qkv", "bf16", [qd + 2 * kd, H], "parameter"),
        inp("w_o", "bf16", [H, qd], "parameter"),
        inp("w_post", "bf16", [H], "parameter"),
        inp("w_gate_up", "bf16", [2 * I, H], "parameter"),
        inp("w_down", "bf16", [H, I], "parameter"),
    ], nodes, [t("out")])


S = "s"  # the num_seqs symbol of the paged examples
BLOCKS, BLOCK_SIZE, MAX_BLOCKS = 128, 16, 64  # the paged KV cache: 2048 token slots, 1024 per sequence


def seqs_symbol(kind):
    if kind == "backed":
        return {"name": S, "kind": "backed", "hint": 8, "min": 1, "max": 1024}
    return {"name": S, "kind": "unbacked", "min": 0, "max": 1024, "optimization_hint": 64}


def llama_decode_step(kind):
    """One decoder layer of a serving step over a paged KV cache: num_tokens (n) query tokens of
    num_seqs (s) sequences in one flattened batch (prefills, chunked prefills and decodes mixed);
    the new keys and values written into the caches in place at their slots, then paged
    attention over each sequence's blocks."""
    qd, kd = HEADS * HD, KV * HD
    nodes = rms_norm_nodes("in_", "x", "w_in")
    nodes += [
        node("wqkv_t", "aten.t.default", self=t("w_qkv")),
        node("qkv", "aten.mm.default", self=t("in_out"), mat2=t("wqkv_t")),
        node("q", "aten.slice.Tensor", self=t("qkv"), dim=1, start=0, end=qd),
        node("k", "aten.slice.Tensor", self=t("qkv"), dim=1, start=qd, end=qd + kd),
        node("v", "aten.slice.Tensor", self=t("qkv"), dim=1, start=qd + kd, end=qd + 2 * kd),
    ]
    nodes += rotary_nodes("qr_", "q", HEADS)
    nodes += rotary_nodes("kr_", "k", KV)
    nodes += [
        node("q3", "aten.view.default", self=t("qr_out"), size=[N, HEADS, HD]),
        node("k3", "aten.view.default", self=t("kr_out"), size=[N, KV, HD]),
        node("v3", "aten.view.default", self=t("v"), size=[N, KV, HD]),
        # write_kv_cache: index_copy_ into the caches seen as [slots, KV, HD], functionalized.
        node("kc_rows", "aten.view.default", self=t("key_cache"), size=[-1, KV, HD]),
        node("kc_new", "aten.index_put.default", self=t("kc_rows"), indices=[t("slots")], values=t("k3")),
        node("kc", "aten.view.default", self=t("kc_new"), size=[BLOCKS, BLOCK_SIZE, KV, HD]),
        node("vc_rows", "aten.view.default", self=t("value_cache"), size=[-1, KV, HD]),
        node("vc_new", "aten.index_put.default", self=t("vc_rows"), indices=[t("slots")], values=t("v3")),
        node("vc", "aten.view.default", self=t("vc_new"), size=[BLOCKS, BLOCK_SIZE, KV, HD]),
        node("attn", "guardless.paged_attention.default", query=t("q3"), key_cache=t("kc"), value_cache=t("vc"),
             block_table=t("block_table"), context_lens=t("context_lens"), query_start=t("query_start")),
        node("attn2", "aten.view.default", self=t("attn"), size=[N, qd]),
        node("wo_t", "aten.t.default", self=t("w_o")),
        node("o", "aten.mm.default", self=t("attn2"), mat2=t("wo_t")),
        node("res", "aten.add.Tensor", self=t("x"), other=t("o")),
    ]
    nodes += rms_norm_nodes("post_", "res", "w_post")
    nodes += mlp_nodes("mlp_", "post_out")
    nodes += [node("out", "aten.add.Tensor", self=t("res"), other=t("mlp_out"))]
    cache = [BLOCKS, BLOCK_SIZE, KV, HD]
    return graph("llama_decode_step", kind, [
        inp("x", "bf16", [N, H]),
        inp("positions", "i64", [N]),
        inp("slots", "i64", [N]),
        inp("key_cache", "bf16", cache),
        inp("value_cache", "bf16", cache),
        inp("block_table", "i32", [S, MAX_BLOCKS]),
        inp("context_lens", "i32", [S]),
        inp("query_start", "i32", [f"{S} + 1"]),
        inp("cos_sin_cache", "f32", [2048, HD], "buffer"),
        inp("w_in", "bf16", [H], "parameter"),
        inp("w_qkv", "bf16", [qd + 2 * kd, H], "parameter"),
        inp("w_o", "bf16", [H, qd], "parameter"),
        inp("w_post", "bf16", [H], "parameter"),
        inp("w_gate_up", "bf16", [2 * I, H], "parameter"),
        inp("w_down", "bf16", [H, I], "parameter"),
    ], nodes, [t("out"), {"tensor": "kc", "mutates": "key_cache"}, {"tensor": "vc", "mutates": "value_cache"}],
        symbols=[seqs_symbol(kind)])


def llama_mlp(kind):
    return graph("llama_mlp", kind, [
        inp("x", "bf16", [N, H]),
        inp("w_gate_up", "bf16", [2 * I, H], "parameter"),
        inp("w_down", "bf16", [H, I], "parameter"),
    ], [
        node("wgu_t", "aten.t.default", self=t("w_gate_up")),
        node("gate_up", "aten.mm.default", self=t("x"), mat2=t("wgu_t")),
        node("gate", "aten.slice.Tensor", self=t("gate_up"), dim=1, start=0, end=I),
        node("up", "aten.slice.Tensor", self=t("gate_up"), dim=1, start=I, end=2 * I),
        node("act", "aten.silu.default", self=t("gate")),
        node("h", "aten.mul.Tensor", self=t("act"), other=t("up")),
        node("wd_t", "aten.t.default", self=t("w_down")),
        node("out", "aten.mm.default", self=t("h"), mat2=t("wd_t")),
    ], [t("out")])


EXPERTS = 4


def moe_routing(kind):
    """Top-1 routing: each token goes to its highest-scoring expert; per expert, `nonzero` gives the
    (unbacked) number of tokens routed there and their rows are gathered."""
    counts = [{"name": f"c{e}", "kind": "unbacked", "max": 65536} for e in range(EXPERTS)]
    nodes = [
        node("wr_t", "aten.t.default", self=t("w_router")),
        node("logits", "aten.mm.default", self=t("x"), mat2=t("wr_t")),
        node("expert", "aten.argmax.default", self=t("logits"), dim=-1),
    ]
    outputs = []
    for e in range(EXPERTS):
        nodes += [
            node(f"is{e}", "aten.eq.Scalar", self=t("expert"), other=e),
            {**node(f"nz{e}", "aten.nonzero.default", self=t(f"is{e}")), "shape": [f"c{e}", 1]},
            node(f"tok{e}", "aten.view.default", self=t(f"nz{e}"), size=[f"c{e}"]),
            node(f"rows{e}", "aten.index.Tensor", self=t("x"), indices=[t(f"tok{e}")]),
        ]
        outputs += [t(f"tok{e}"), t(f"rows{e}")]
    return graph("moe_routing", kind, [inp("x", "bf16", [N, H]), inp("w_router", "bf16", [EXPERTS, H], "parameter")],
                 nodes, outputs, symbols=counts)


VOCAB = 50257


def sampler(kind):
    """Decode-time sampling over a vocabulary: probabilities and the greedy token per sequence. Few
    long rows (the hint is a decode batch of 8), where a row's reduction spreads over blocks."""
    sym = {**symbol(kind)}
    sym["hint" if kind == "backed" else "optimization_hint"] = 8
    g = graph("sampler", kind, [inp("logits", "f32", [N, VOCAB])], [
        node("probs", "aten._softmax.default", self=t("logits"), dim=-1, half_to_float=False),
        node("token", "aten.argmax.default", self=t("logits"), dim=-1),
    ], [t("probs"), t("token")])
    g["symbols"][0] = sym
    return g


EXAMPLES = [rms_norm, fused_add_rms_norm, silu_and_mul, softmax, layer_norm, rotary_embedding, llama_mlp,
            llama_decoder_layer, llama_decode_step, moe_routing, sampler]

if __name__ == "__main__":
    for make in EXAMPLES:
        for kind in ("backed", "unbacked"):
            g = make(kind)
            with open(f"{g['name']}.{kind}.json", "w") as f:
                json.dump(g, f, indent=1)
                f.write("\n")
