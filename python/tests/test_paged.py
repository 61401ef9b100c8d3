"""Paged attention for serving (`guardless.ops`): the op's reference against PyTorch's SDPA, and
a serving step — the new keys and values written into a paged cache, attention over each
sequence's blocks — compiled once by the `torch.compile` backend and run as the batch changes
(prefills, chunked prefills, decodes joining and leaving), the cache updated in place."""

import unittest

import torch

import guardless
import guardless.ops
from guardless.ops import write_kv_cache

HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE, BLOCKS, MAX_BLOCKS = 4, 2, 16, 4, 64, 8


def sdpa_of_batch(q, kc, vc, table, lens, starts):
    """Each sequence through PyTorch's SDPA with an explicit bottom-right causal mask."""
    out = torch.zeros(q.shape[0], q.shape[1], vc.shape[3], dtype=q.dtype)
    for s in range(len(lens)):
        q0, q1, c = int(starts[s]), int(starts[s + 1]), int(lens[s])
        n = q1 - q0
        if n == 0:
            continue
        blocks = table[s].long()
        k = kc[blocks].reshape(-1, kc.shape[2], kc.shape[3])[:c].transpose(0, 1)
        v = vc[blocks].reshape(-1, vc.shape[2], vc.shape[3])[:c].transpose(0, 1)
        mask = torch.ones(n, c, dtype=torch.bool).tril(diagonal=c - n)
        o = torch.nn.functional.scaled_dot_product_attention(
            q[q0:q1].transpose(0, 1), k, v, attn_mask=mask, enable_gqa=True)
        out[q0:q1] = o.transpose(0, 1)
    return out


class Layer(torch.nn.Module):
    """Projections around the cache write and paged attention, as a serving engine's layer."""

    def __init__(self):
        super().__init__()
        hidden = HEADS * HEAD_DIM
        self.q = torch.nn.Linear(hidden, HEADS * HEAD_DIM, bias=False)
        self.kv = torch.nn.Linear(hidden, 2 * KV_HEADS * HEAD_DIM, bias=False)
        self.o = torch.nn.Linear(HEADS * HEAD_DIM, hidden, bias=False)

    def forward(self, x, key_cache, value_cache, slots, block_table, context_lens, query_start):
        t = x.shape[0]
        q = self.q(x).view(t, HEADS, HEAD_DIM)
        k, v = self.kv(x).view(t, 2, KV_HEADS, HEAD_DIM).unbind(1)
        write_kv_cache(key_cache, value_cache, k, v, slots)
        a = torch.ops.guardless.paged_attention(q, key_cache, value_cache, block_table, context_lens, query_start)
        return self.o(a.reshape(t, HEADS * HEAD_DIM))


class Scheduler:
    """A continuous-batching scheduler's bookkeeping: blocks handed out as sequences grow, out
    of order (a free list popped from the end)."""

    def __init__(self):
        self.free = list(range(BLOCKS))
        torch.manual_seed(3)
        self.free = [self.free[i] for i in torch.randperm(BLOCKS).tolist()]
        self.blocks, self.length = {}, {}

    def step(self, work):
        """`work`: (sequence, new tokens) pairs; the step's tensors."""
        slots, table, lens, starts = [], [], [], [0]
        for seq, n in work:
            have = self.length.get(seq, 0)
            blocks = self.blocks.setdefault(seq, [])
            for pos in range(have, have + n):
                if pos // BLOCK_SIZE >= len(blocks):
                    blocks.append(self.free.pop())
                slots.append(blocks[pos // BLOCK_SIZE] * BLOCK_SIZE + pos % BLOCK_SIZE)
            self.length[seq] = have + n
            table.append(blocks + [0] * (MAX_BLOCKS - len(blocks)))
            lens.append(have + n)
            starts.append(starts[-1] + n)
        i32 = lambda v: torch.tensor(v, dtype=torch.int32)
        return torch.tensor(slots), i32(table), i32(lens), i32(starts)


# Sequences a, b, c, d: prefills, a chunked prefill (c in 6 + 4), decodes; b leaves, d joins.
STEPS = [
    [("a", 5), ("b", 3)],
    [("a", 1), ("b", 1), ("c", 6)],
    [("a", 1), ("c", 4)],
    [("a", 1), ("c", 1), ("d", 9)],
    [("a", 1), ("c", 1), ("d", 1)],
    [("d", 1)],
]


class PagedAttentionTest(unittest.TestCase):
    def test_the_reference_matches_sdpa_on_a_mixed_batch(self):
        torch.manual_seed(0)
        sched = Scheduler()
        kc = torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
        vc = torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
        for work in STEPS[:4]:
            slots, table, lens, starts = sched.step(work)
            q = torch.randn(int(starts[-1]), HEADS, HEAD_DIM)
            got = torch.ops.guardless.paged_attention(q, kc, vc, table, lens, starts)
            torch.testing.assert_close(got, sdpa_of_batch(q, kc, vc, table, lens, starts))

    def test_bad_sequence_data_is_refused(self):
        kc = torch.zeros(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
        q = torch.zeros(3, HEADS, HEAD_DIM)
        table = torch.zeros(1, MAX_BLOCKS, dtype=torch.int32)
        with self.assertRaisesRegex(ValueError, "at least its query count"):
            torch.ops.guardless.paged_attention(q, kc, kc, table, torch.tensor([2], dtype=torch.int32),
                                                torch.tensor([0, 3], dtype=torch.int32))

    def test_a_serving_loop_compiles_once_and_writes_the_cache_in_place(self):
        torch.manual_seed(1)
        layer = Layer()
        torch._dynamo.reset()
        guardless.reset()
        backend = guardless.make_backend()
        step = torch.compile(layer, backend=backend, fullgraph=True)
        kc = torch.zeros(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
        vc = torch.zeros(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
        kc_ref, vc_ref = kc.clone(), vc.clone()
        pointers = (kc.data_ptr(), vc.data_ptr())
        sched = Scheduler()
        with torch.no_grad():
            for work in STEPS:
                slots, table, lens, starts = sched.step(work)
                x = torch.randn(len(slots), HEADS * HEAD_DIM)
                # num_tokens and num_seqs change every step: unbacked, never specialized on.
                for t in (x, slots, table, lens, starts):
                    torch._dynamo.decorators.mark_unbacked(t, 0)
                got = step(x, kc, vc, slots, table, lens, starts)
                want = layer(x, kc_ref, vc_ref, slots, table, lens, starts)
                torch.testing.assert_close(got, want)
                torch.testing.assert_close(kc, kc_ref)
                torch.testing.assert_close(vc, vc_ref)
        self.assertEqual(guardless.fallbacks(), [])
        s = guardless.stats()
        self.assertEqual(s.graphs, 1, "one compile for the whole run")
        self.assertEqual(s.calls, len(STEPS))
        self.assertEqual((s.copied_input_bytes, s.written_back_bytes), (0, 0))
        self.assertEqual((kc.data_ptr(), vc.data_ptr()), pointers)
        ops = [n["op"] for c in backend.compiled for n in c.graph["nodes"]]
        self.assertIn("guardless.paged_attention.default", ops)

    def test_export_carries_the_op_and_the_cache_updates(self):
        layer = Layer()
        sched = Scheduler()
        slots, table, lens, starts = sched.step(STEPS[0])
        kc = torch.zeros(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
        args = (torch.randn(len(slots), HEADS * HEAD_DIM), kc, kc.clone(), slots, table, lens, starts)
        tokens, seqs = ("num_tokens", 1, 4096), ("num_seqs", 1, 256)
        ex = guardless.export(layer, args, unbacked={
            "x": {0: tokens}, "slots": {0: tokens}, "block_table": {0: seqs}, "context_lens": {0: seqs},
            "query_start": {0: ("num_seqs_1", 2, 257)}})
        g = ex.graph
        self.assertIn("guardless.paged_attention.default", [n["op"] for n in g["nodes"]])
        mutated = sorted(o["mutates"] for o in g["outputs"] if "mutates" in o)
        self.assertEqual(mutated, ["key_cache", "value_cache"])
        self.assertEqual({s["name"] for s in g["symbols"]} >= {"num_tokens", "num_seqs"}, True)


if __name__ == "__main__":
    unittest.main()
