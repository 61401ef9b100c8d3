//! Fused attention (`ExternKernel::Attention`) on the CPU backend against the op-level reference:
//! query and key lengths unbacked (0, 1, 2, 17, 128, 1000, 4097 and pairs of them), head dims
//! 64/80/128/256 and odd ones, grouped-query heads (Hq/Hkv of 1, 4, 8), causal and not, boolean
//! and additive masks of several broadcast shapes (a random boolean mask over few keys hides whole
//! rows: PyTorch's result, 0, is expected), f32/bf16/f16/f64, and q, k, v given transposed (read
//! through their strides). The graph lowers to one attention step: no score buffer, no copy of
//! k or v. Memory: 16384 queries and keys over 8 heads run with no n² scratch.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;

use differential::attention::{
    graph, paged_graph, paged_inputs, projected, Form, Paged, BASE, PAGED,
};
use differential::*;
use guardless_ir::graph::{DType, Graph};
use guardless_ir::loop_ir::{BufferKind, ExternKernel};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::cpu::{CpuProgram, RunOptions};

/// `g` compiled for the CPU, asserting its program is the one library step `step` (nothing
/// computed around it), with the options the comparisons run under (poisoned memory, 2 threads).
fn compiled_alone(g: &Graph, step: &str, what: &str) -> (CpuProgram, RunOptions) {
    let program = lower(g).unwrap_or_else(|e| panic!("{what}: {e}"));
    let steps: Vec<&str> = program
        .buffers
        .iter()
        .filter_map(|b| match &b.kind {
            BufferKind::Computed { .. } => Some("computed"),
            BufferKind::Extern { kernel, .. } => Some(kernel.name()),
            _ => None,
        })
        .collect();
    assert_eq!(steps, [step], "{what}: {}", program.to_text());
    let cpu = CpuProgram::compile(program).unwrap_or_else(|e| panic!("{what}: {e}"));
    let options = RunOptions {
        poison: true,
        threads: 2,
    };
    (cpu, options)
}

/// Compiles `f` once and compares it with the reference at each (query, key) length pair.
fn check(f: Form, lengths: &[(i64, i64)]) {
    let g = graph(f);
    // One attention step over the operands' storage: nothing computed before it.
    let (cpu, options) = compiled_alone(&g, "attention", &format!("{f:?}"));
    for (s, &(u0, u1)) in lengths.iter().enumerate() {
        let values = [("u0", u0), ("u1", u1)];
        let b = bindings_of(&format!("{f:?}"), &g, &values);
        let inputs = random_inputs(&g, &b, s as u64, (-3, 7));
        compare(
            &format!("{f:?} at {values:?}"),
            &g,
            (&cpu, &options),
            &inputs,
            &values,
        );
    }
}

/// The CPU program `cpu` of `g` run on `inputs` (symbols at `values`) against the reference.
fn compare(
    what: &str,
    g: &Graph,
    (cpu, options): (&CpuProgram, &RunOptions),
    inputs: &[HostTensor],
    values: &[(&str, i64)],
) {
    let b = bindings_of(what, g, values);
    let b = reference::bind_inputs(g, inputs, &b).unwrap();
    let want = reference::run(g, inputs, &b);
    let got = cpu.run(inputs, &b, options);
    let ideal = || reference::run_unrounded(g, inputs, &b).unwrap();
    assert!(
        judge_accurate(what, got, want, values, false, Some(&ideal)),
        "{what}: refused"
    );
}

const SQUARE: [(i64, i64); 5] = [(0, 0), (1, 1), (2, 2), (17, 17), (128, 128)];
const RAGGED: [(i64, i64); 6] = [(1, 17), (17, 1), (1, 4097), (3, 1000), (1000, 17), (0, 5)];

#[test]
fn attention_matches_the_reference_at_every_length() {
    check(BASE, &SQUARE);
    check(BASE, &RAGGED);
    check(
        Form {
            causal: true,
            ..BASE
        },
        &[SQUARE.as_slice(), &RAGGED].concat(),
    );
}

#[test]
fn attention_with_grouped_heads_and_other_head_dims_matches_the_reference() {
    for (heads, kv_heads, d, dv) in [
        (4, 1, 64, 64),
        (8, 2, 80, 80),
        (8, 1, 128, 128),
        (4, 4, 256, 256),
        (8, 8, 5, 3),
        (8, 4, 96, 40),
        // Empty head dims: every key weighs the same (PyTorch's result: 1/√0 scales an empty
        // product); no value elements.
        (4, 2, 0, 8),
        (4, 4, 8, 0),
    ] {
        let f = Form {
            heads,
            kv_heads,
            d,
            dv,
            causal: d % 2 == 0,
            ..BASE
        };
        check(f, &[(1, 1), (17, 17), (1, 300), (40, 129)]);
    }
}

#[test]
fn attention_in_every_float_dtype_matches_the_reference() {
    for dtype in ["bf16", "f16", "f64"] {
        for causal in [false, true] {
            let f = Form {
                dtype,
                heads: 4,
                kv_heads: 2,
                causal,
                ..BASE
            };
            check(f, &[(0, 0), (1, 1), (17, 17), (1, 700), (130, 130)]);
        }
    }
}

#[test]
fn attention_masks_broadcast_and_hide_whole_rows() {
    for mask in [
        ("bool", r#""u0", "u1""#),
        ("bool", r#"B, 1, "u0", "u1""#),
        ("bool", r#"1, H, 1, "u1""#),
        ("f32", r#""u0", "u1""#),
        ("f32", r#"B, H, "u0", "u1""#),
        ("f32", r#"1, "u1""#),
    ] {
        for causal in [false, true] {
            let f = Form {
                mask: Some(mask),
                causal,
                heads: 4,
                kv_heads: 2,
                ..BASE
            };
            // Over 1 or 2 keys a random boolean mask hides whole rows.
            check(f, &[(1, 1), (5, 2), (17, 17), (3, 300), (129, 131)]);
        }
    }
}

/// The mask of a packed batch (transformers' continuous batching): sequences `(queries, keys)`
/// one after the other, query `i` of a sequence seeing its own keys up to its position
/// (bottom-right causal), every other key hidden by `hidden` (additive) or false (boolean).
/// `padding` query rows at the end see nothing.
fn packed_mask(dtype: DType, seqs: &[(usize, usize)], padding: usize, hidden: f64) -> HostTensor {
    let lq = seqs.iter().map(|s| s.0).sum::<usize>() + padding;
    let lk: usize = seqs.iter().map(|s| s.1).sum();
    let (visible, hide) = match dtype {
        DType::Bool => (1, 0),
        _ => (0, 1),
    };
    let mut m = vec![hide; lq * lk];
    let (mut row, mut key) = (0, 0);
    for &(q, k) in seqs {
        for i in 0..q {
            for j in 0..k - q + i + 1 {
                m[(row + i) * lk + key + j] = visible;
            }
        }
        (row, key) = (row + q, key + k);
    }
    match dtype {
        DType::Bool => HostTensor::from_i64(dtype, &[1, 1, lq, lk], &m),
        _ => {
            let v: Vec<f64> = m
                .iter()
                .map(|&h| if h == 1 { hidden } else { 0.0 })
                .collect();
            HostTensor::from_f64(dtype, &[1, 1, lq, lk], &v)
        }
    }
}

/// Packed batches as transformers' continuous batching runs them: decode tokens each seeing only
/// its own sequence's keys, prefill chunks beside them, padding rows that see nothing — the
/// keys a row's mask hides (the dtype's lowest value, -inf, false) are skipped, and the results
/// still match the reference, the padding rows' (a softmax over keys all equally hidden)
/// included.
#[test]
fn packed_sequences_under_a_block_diagonal_mask_match_the_reference() {
    let decodes: Vec<(usize, usize)> = (0..24).map(|i| (1, 5 + 7 * i % 50)).collect();
    let mixed: Vec<(usize, usize)> = [(17, 40), (9, 9), (1, 150), (33, 100)]
        .into_iter()
        .chain(decodes.iter().copied().take(6))
        .collect();
    let lowest = |dtype: &str| match dtype {
        "f32" => f64::from(f32::MIN),
        "bf16" => f64::from(half::bf16::MIN),
        _ => f64::MIN,
    };
    let cases = [
        ("f32", "f32", 0, false),
        ("f32", "f32", 3, false),
        ("f32", "f32", 2, true),
        ("bf16", "bf16", 1, false),
        ("f32", "bool", 2, false),
        ("f64", "f64", 1, false),
    ];
    for (dtype, mask, padding, infinite) in cases {
        let f = Form {
            dtype,
            mask: Some((mask, r#"1, 1, "u0", "u1""#)),
            heads: 4,
            kv_heads: 1,
            d: 32,
            dv: 32,
            ..BASE
        };
        let g = graph(f);
        let (cpu, options) = compiled_alone(&g, "attention", &format!("{f:?}"));
        let hidden = if infinite {
            f64::NEG_INFINITY
        } else {
            lowest(mask)
        };
        for seqs in [&decodes, &mixed] {
            let m = packed_mask(g.inputs[3].dtype, seqs, padding, hidden);
            let values = [("u0", m.shape[2] as i64), ("u1", m.shape[3] as i64)];
            let what = format!(
                "{f:?} {} sequences, {padding} padding rows, -inf {infinite}",
                seqs.len()
            );
            let b = bindings_of(&what, &g, &values);
            let mut inputs = random_inputs(&g, &b, values[0].1 as u64, (-3, 7));
            inputs[3] = m;
            compare(&what, &g, (&cpu, &options), &inputs, &values);
        }
    }
}

#[test]
fn transposed_operands_and_an_explicit_scale_match_the_reference() {
    for causal in [false, true] {
        let f = Form {
            transposed: true,
            causal,
            heads: 4,
            kv_heads: 2,
            scale: Some(0.3),
            ..BASE
        };
        let g = graph(f);
        let program = lower(&g).unwrap();
        // q, k and v are views of the inputs: nothing is copied.
        let views = program
            .buffers
            .iter()
            .filter(|b| matches!(b.kind, BufferKind::View { .. }))
            .count();
        assert!(views >= 3, "{}", program.to_text());
        check(f, &[(1, 1), (17, 17), (2, 1000), (130, 129)]);
    }
}

/// 16384 queries over as many keys, 8 heads (of 16 dimensions): the decomposed form stored
/// 2·8·16384² f32 scores twice (17 GB); the fused step needs its output and a few tiles per
/// thread. Checked by the
/// storage the CPU backend plans (its memory plan) and by rows spot-checked against a direct
/// computation in f64.
#[test]
fn long_attention_needs_no_quadratic_memory() {
    if !cfg!(feature = "llvm") {
        // Without the LLVM backend the CPU program runs the loop-IR interpreter: minutes at
        // these lengths. (CI builds with the feature.)
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\ntest-skipped: long attention needs the CPU backend (--features llvm)"
        );
        return;
    }
    // A head dim of 16 keeps the run short; the memory question is about the lengths.
    let f = Form {
        heads: 8,
        kv_heads: 8,
        d: 16,
        dv: 16,
        causal: true,
        ..BASE
    };
    let g = graph(f);
    let program = lower(&g).unwrap();
    let attention = program
        .buffers
        .iter()
        .filter(|b| {
            matches!(
                b.kind,
                BufferKind::Extern {
                    kernel: ExternKernel::Attention(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(attention, 1);
    let cpu = CpuProgram::compile(program).unwrap();
    let n = 16384;
    let values = [("u0", n), ("u1", n)];
    let b = bindings_of("long", &g, &values);
    let inputs = random_inputs(&g, &b, 7, (-3, 7));
    let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
    let before = peak_rss_kib();
    let got = cpu
        .run(
            &inputs,
            &b,
            &RunOptions {
                poison: false,
                threads: 2,
            },
        )
        .unwrap();
    let added = peak_rss_kib().saturating_sub(before) * 1024;
    // The backend's copies of the inputs and its output are 2·8·16384·16 f32 each (17 MB), the
    // output handed back in f64; one head's scores alone would be 16384² f32 (1.07 GB).
    let one_head = n as u64 * n as u64 * 4;
    assert!(added < one_head, "peak memory grew by {added} bytes");
    // Rows spot-checked in f64.
    let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
    let at = |t: &guardless_ir::tensor::HostTensor, i: usize| t.get_f64(i);
    let d = 16;
    for &(bi, h, i) in &[(0usize, 0usize, 0usize), (1, 7, 16383), (0, 3, 9000)] {
        let base = |l: usize| ((bi * 8 + h) * n as usize + l) * d;
        let scores: Vec<f64> = (0..=i)
            .map(|j| {
                (0..d)
                    .map(|t| at(q, base(i) + t) * at(k, base(j) + t))
                    .sum::<f64>()
                    / (d as f64).sqrt()
            })
            .collect();
        let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = scores.iter().map(|s| (s - top).exp()).sum();
        for c in [0, 15] {
            let want: f64 = scores
                .iter()
                .enumerate()
                .map(|(j, s)| (s - top).exp() / total * at(v, base(j) + c))
                .sum();
            let g = got[0].get_f64(base(i) + c);
            assert!(
                (g - want).abs() <= 1e-4 + 1e-4 * want.abs(),
                "row ({bi}, {h}, {i}) column {c}: {g} vs {want}"
            );
        }
    }
}

/// The process's peak resident memory (VmHWM), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

/// The output projection's input, `out.transpose(1, 2).contiguous().view(B·Lq, Hq·Dv)`: the
/// attention stores its output as `[B, Lq, Hq, Dv]`, so the transpose is a view of dense storage
/// the matmul reads in place — no copy kernel between them.
#[test]
fn the_output_is_stored_as_the_output_projection_reads_it() {
    for causal in [false, true] {
        let g = projected(causal);
        let program = lower(&g).unwrap();
        let steps: Vec<&str> = program
            .buffers
            .iter()
            .filter_map(|b| match &b.kind {
                BufferKind::Computed { .. } => Some("computed"),
                BufferKind::Extern { kernel, .. } => Some(kernel.name()),
                _ => None,
            })
            .collect();
        assert_eq!(steps, ["attention", "mm"], "{}", program.to_text());
        let cpu = CpuProgram::compile(program).unwrap();
        for (s, u0) in [0i64, 1, 17, 130].into_iter().enumerate() {
            let values = [("u0", u0)];
            let b = bindings_of("projected", &g, &values);
            let inputs = random_inputs(&g, &b, 90 + s as u64, (-3, 7));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let want = reference::run(&g, &inputs, &b);
            let got = cpu.run(
                &inputs,
                &b,
                &RunOptions {
                    poison: true,
                    threads: 2,
                },
            );
            let ideal = || reference::run_unrounded(&g, &inputs, &b).unwrap();
            assert!(judge_accurate(
                "projected",
                got,
                want,
                &values,
                false,
                Some(&ideal)
            ));
        }
    }
}

/// Batches of (query tokens, context length) per sequence: decodes, prefills, chunked
/// prefills, mixed, a sequence with nothing to do, a full block table, none at all.
const BATCHES: &[&[(i64, i64)]] = &[
    &[(1, 1), (1, 17), (1, 100)],
    &[(17, 17), (5, 5)],
    &[(8, 40)],
    &[(1, 33), (12, 12), (0, 0), (4, 70), (1, 1)],
    &[(3, 192), (1, 191)],
    &[],
];

/// Compiles the paged graph of `f` once and compares it with the reference on each batch.
fn check_paged(f: Paged, batches: &[&[(i64, i64)]]) {
    let g = paged_graph(f);
    let (cpu, options) = compiled_alone(&g, "paged_attention", &format!("{f:?}"));
    for (s, seqs) in batches.iter().enumerate() {
        let what = format!("{f:?} on {seqs:?}");
        let (inputs, values) = paged_inputs(&g, f, seqs, s as u64);
        let b = bindings_of(&what, &g, &values);
        assert_matches_reference(&what, &g, (&cpu, &options), &inputs, &b, &values);
    }
}

/// Runs `g` compiled (`cpu` with `options`) on `inputs` at `b` and judges it against the
/// reference (and the unrounded reference for accuracy).
fn assert_matches_reference(
    what: &str,
    g: &Graph,
    (cpu, options): (&CpuProgram, &RunOptions),
    inputs: &[HostTensor],
    b: &guardless_ir::sym::Bindings,
    values: &[(&str, i64)],
) {
    let b = reference::bind_inputs(g, inputs, b).unwrap();
    let want = reference::run(g, inputs, &b);
    assert!(want.is_ok(), "{what}: {want:?}");
    let got = cpu.run(inputs, &b, options);
    let ideal = || reference::run_unrounded(g, inputs, &b).unwrap();
    assert!(
        judge_accurate(what, got, want, values, true, Some(&ideal)),
        "{what}: refused"
    );
}

#[test]
fn paged_attention_matches_the_reference_on_mixed_batches() {
    check_paged(PAGED, BATCHES);
    for (heads, kv_heads, d, dv, block_size) in [
        (8, 1, 128, 128, 32),
        (4, 4, 80, 80, 16),
        (8, 8, 5, 3, 1),
        (6, 2, 256, 256, 64),
    ] {
        let f = Paged {
            heads,
            kv_heads,
            d,
            dv,
            block_size,
            blocks: 24,
            width: 192 / block_size + 1,
            ..PAGED
        };
        check_paged(f, BATCHES);
    }
}

/// The caches as transformers' continuous batching pool gives them (`guardless.hf`): one pool
/// holding keys and values, each a `select` + `slice` (at an offset) + `unsqueeze` view of it
/// with blocks of one slot. The step reads the pool in place — no copy kernel in front
/// (`compiled_alone`) — and matches the reference.
#[test]
fn paged_attention_reads_caches_that_are_views_of_a_pool() {
    let f = Paged {
        block_size: 1,
        blocks: 300,
        width: 260,
        ..PAGED
    };
    let plain = paged_graph(f);
    let text = format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "pooled_paged_attention",
            "symbols": [{{"name": "u0", "kind": "unbacked", "max": 100000, "optimization_hint": 16}},
                        {{"name": "u1", "kind": "unbacked", "max": 4096, "optimization_hint": 8}}],
            "inputs": [{{"name": "q", "dtype": "f32", "shape": ["u0", {h}, {d}]}},
                       {{"name": "pool", "dtype": "f32", "shape": [2, {rows}, {hk}, {d}]}},
                       {{"name": "table", "dtype": "i32", "shape": ["u1", {w}]}},
                       {{"name": "lens", "dtype": "i32", "shape": ["u1"]}},
                       {{"name": "starts", "dtype": "i32", "shape": ["u1 + 1"]}}],
            "nodes": [
              {{"name": "k0", "op": "aten.select.int", "args": {{"self": {{"tensor": "pool"}}, "dim": 0, "index": 0}}}},
              {{"name": "k1", "op": "aten.slice.Tensor", "args": {{"self": {{"tensor": "k0"}}, "dim": 0, "start": 0, "end": {nb}}}}},
              {{"name": "kc", "op": "aten.unsqueeze.default", "args": {{"self": {{"tensor": "k1"}}, "dim": 1}}}},
              {{"name": "v0", "op": "aten.select.int", "args": {{"self": {{"tensor": "pool"}}, "dim": 0, "index": 1}}}},
              {{"name": "v1", "op": "aten.slice.Tensor", "args": {{"self": {{"tensor": "v0"}}, "dim": 0, "start": 1, "end": {rows}}}}},
              {{"name": "vc", "op": "aten.unsqueeze.default", "args": {{"self": {{"tensor": "v1"}}, "dim": 1}}}},
              {{"name": "out", "op": "guardless.paged_attention.default",
                "args": {{"query": {{"tensor": "q"}}, "key_cache": {{"tensor": "kc"}}, "value_cache": {{"tensor": "vc"}},
                         "block_table": {{"tensor": "table"}}, "context_lens": {{"tensor": "lens"}},
                         "query_start": {{"tensor": "starts"}}}}}}],
            "outputs": [{{"tensor": "out"}}]}}"#,
        h = f.heads,
        hk = f.kv_heads,
        d = f.d,
        nb = f.blocks,
        rows = f.blocks + 1,
        w = f.width
    );
    let g = Graph::from_json(&text).unwrap();
    let (cpu, options) = compiled_alone(&g, "paged_attention", "pooled");
    for (s, seqs) in [&[(1, 250), (5, 40), (2, 2)][..], &[(7, 7), (1, 1)]]
        .into_iter()
        .enumerate()
    {
        let what = format!("pooled caches on {seqs:?}");
        // The sequences' data from the plain form; the pool random.
        let (plain_inputs, values) = paged_inputs(&plain, f, seqs, s as u64);
        let b = bindings_of(&what, &g, &values);
        let mut inputs = random_inputs(&g, &b, 40 + s as u64, (-3, 7));
        inputs[0] = plain_inputs[0].clone();
        inputs[2..].clone_from_slice(&plain_inputs[3..]);
        assert_matches_reference(&what, &g, (&cpu, &options), &inputs, &b, &values);
    }
}

#[test]
fn paged_attention_in_every_float_dtype_matches_the_reference() {
    for dtype in ["bf16", "f16", "f64"] {
        check_paged(
            Paged {
                dtype,
                scale: Some(0.2),
                ..PAGED
            },
            BATCHES,
        );
    }
}

/// Sequence data that breaks the op's rules is an error naming the rule, never a read outside
/// the cache.
#[test]
fn paged_attention_refuses_bad_sequence_data() {
    use guardless_ir::loop_ir::PagedCheck;
    use guardless_ir::tensor::Data;
    let g = paged_graph(PAGED);
    let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
    let seqs = [(2, 20), (1, 7)];
    let edits: [(usize, usize, i64, PagedCheck); 5] = [
        (5, 0, 1, PagedCheck::QueryStart),
        (5, 1, 4, PagedCheck::QueryStart),
        (4, 0, 1, PagedCheck::ContextLength),
        (4, 1, 10_000, PagedCheck::ContextLength),
        (3, 1, 40, PagedCheck::Block),
    ];
    for (input, at, value, check) in edits {
        let (mut inputs, values) = paged_inputs(&g, PAGED, &seqs, 3);
        let Data::Int(v) = &mut inputs[input].data else {
            unreachable!("int operands")
        };
        v[at] = value;
        let b = bindings_of("bad", &g, &values);
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        let want = reference::run(&g, &inputs, &b).expect_err("the reference refuses");
        let got = cpu
            .run(&inputs, &b, &RunOptions::default())
            .expect_err("the backend refuses");
        for e in [want.to_string(), got.to_string()] {
            assert!(e.contains(check.message()), "{check:?}: {e}");
        }
    }
}
