//! Fused attention on the device (`codegen::cuda::attention`, `templates/attention.cu`), run on
//! the CPU emulation of CUDA and compared with the reference: each tile form (16 rows × 32 keys
//! for head dims up to 128, 8 × 16 up to 256 in f32 and for f64, f16/bf16 on the tensor cores at
//! 16 × 32 with head dims padded to whole fragments) across tile boundaries of rows and keys,
//! grouped-query heads sharing a block, causal blocks that stop early, boolean and additive masks
//! (rows with every key hidden are 0), operands read transposed, lengths of 0 — each on the
//! device, no host step.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::attention::{
    graph, paged_graph, paged_inputs, projected, Form, Paged, BASE, PAGED,
};
use differential::{bindings_of, random_inputs};
use emulated::Emu;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_runtime::launch::{Executable, Inputs};

fn check(what: &str, f: Form, lengths: &[(i64, i64)]) -> Vec<String> {
    let g = graph(f);
    let exe = Executable::new(lower(&g).unwrap()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut dev = Emu::new(&format!("attention_{what}"), &exe);
    for (s, &(u0, u1)) in lengths.iter().enumerate() {
        let values = [("u0", u0), ("u1", u1)];
        let at = format!("{what} {f:?} at {values:?}");
        let b = bindings_of(&at, &g, &values);
        let inputs = random_inputs(&g, &b, 40 + s as u64, (-3, 7));
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        let (_, host) = emulated::compare(&at, &mut dev, &exe, &g, &inputs, &b);
        assert_eq!(host, 0, "{at}: host steps");
    }
    assert!(
        dev.launched.iter().any(|f| f.starts_with("attention")),
        "{what}: {:?}",
        dev.launched
    );
    dev.launched
}

#[test]
fn few_rows_over_many_keys_split_the_keys_and_merge() {
    // A decode step: 4 query heads over one key/value head, 1 to 3 positions, hundreds of keys:
    // one block of rows, so the keys are shared among blocks (4, 3 and 3 shares of 256 or more
    // keys), the partials merged. Causal over 2 positions: the later shares see no key.
    let decode = Form {
        heads: 4,
        kv_heads: 1,
        ..BASE
    };
    let launched = check("split_f32", decode, &[(1, 1000), (3, 700), (1, 1)]);
    let causal = Form {
        causal: true,
        ..decode
    };
    let launched_causal = check("split_causal", causal, &[(2, 600)]);
    // bf16 on the tensor cores at head dim 256, a boolean mask hiding whole rows of some shares.
    let wide = Form {
        dtype: "bf16",
        heads: 2,
        kv_heads: 2,
        d: 256,
        dv: 256,
        mask: Some(("bool", r#"B, 1, "u0", "u1""#)),
        ..BASE
    };
    let launched_wide = check("split_bf16", wide, &[(1, 520)]);
    for l in [&launched, &launched_causal, &launched_wide] {
        for part in ["_split", "_merge"] {
            assert!(l.iter().any(|f| f.ends_with(part)), "{part}: {l:?}");
        }
    }
    // One key: a single share, the plain function.
    assert!(
        launched.iter().any(|f| f.ends_with("_tiled")),
        "{launched:?}"
    );
}

#[test]
fn attention_runs_on_the_device_in_each_tile_form() {
    // 16 × 32 tiles: rows across tiles (4 query heads per key/value head × 17 positions = 68
    // rows), keys across three tiles; causal blocks stop at their last row.
    let gqa = Form {
        heads: 4,
        kv_heads: 1,
        ..BASE
    };
    let _ = check("f32", gqa, &[(0, 0), (1, 1), (1, 70), (17, 17), (17, 70)]);
    let _ = check(
        "f32_causal",
        Form {
            causal: true,
            ..gqa
        },
        &[(1, 1), (17, 17), (40, 40), (5, 70)],
    );
    // The tensor cores: bf16 at head dims 256/200 (keys and values staged in 16-byte words),
    // f16 at 36/20 (padded to fragments of 48/24 columns; rows of 72 and 40 bytes, so most words
    // are unaligned or partial and go element by element) with grouped query heads over several
    // tiles.
    let _ = check(
        "f16_d36",
        Form {
            dtype: "f16",
            heads: 4,
            kv_heads: 1,
            d: 36,
            dv: 20,
            causal: true,
            ..BASE
        },
        &[(1, 1), (17, 17), (5, 70)],
    );
    let _ = check(
        "bf16_d256",
        Form {
            dtype: "bf16",
            heads: 2,
            kv_heads: 2,
            d: 256,
            dv: 200,
            causal: true,
            ..BASE
        },
        &[(1, 1), (9, 20), (3, 40)],
    );
    // 8 × 16 tiles: f32 head dims over 128 (an odd value head dim), and f64.
    let _ = check(
        "f32_d136",
        Form {
            heads: 2,
            kv_heads: 1,
            d: 136,
            dv: 129,
            ..BASE
        },
        &[(3, 20), (9, 17)],
    );
    let _ = check(
        "f64",
        Form {
            dtype: "f64",
            heads: 4,
            kv_heads: 2,
            d: 40,
            dv: 24,
            ..BASE
        },
        &[(1, 17), (9, 33)],
    );
}

#[test]
fn masks_and_transposed_operands_on_the_device() {
    for (what, mask) in [
        ("bool", ("bool", r#"B, 1, "u0", "u1""#)),
        ("additive", ("f32", r#""u0", "u1""#)),
    ] {
        let f = Form {
            dtype: "f16",
            heads: 4,
            kv_heads: 2,
            d: 32,
            dv: 32,
            causal: what == "bool",
            mask: Some(mask),
            transposed: true,
            scale: Some(0.25),
        };
        // Over 1 or 2 keys a random boolean mask hides whole rows.
        let _ = check(what, f, &[(1, 1), (5, 2), (17, 40)]);
    }
}

#[test]
fn the_output_is_written_as_the_projection_reads_it_on_the_device() {
    for causal in [false, true] {
        let g = projected(causal);
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new(&format!("projected_{causal}"), &exe);
        for (s, u0) in [1i64, 17, 40].into_iter().enumerate() {
            let values = [("u0", u0)];
            let at = format!("projected causal {causal} at {values:?}");
            let b = bindings_of(&at, &g, &values);
            let inputs = random_inputs(&g, &b, 70 + s as u64, (-3, 7));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let (_, host) = emulated::compare(&at, &mut dev, &exe, &g, &inputs, &b);
            assert_eq!(host, 0, "{at}");
        }
        // The attention and the matmul: no kernel between them.
        assert!(
            dev.launched.iter().all(|f| f.starts_with("attention")),
            "{:?}",
            dev.launched
        );
    }
}

/// Paged attention on the device: `batches` of (query tokens, context length) per sequence,
/// each compared with the reference; returns the functions launched.
fn check_paged(what: &str, f: Paged, batches: &[&[(i64, i64)]]) -> Vec<String> {
    let g = paged_graph(f);
    let exe = Executable::new(lower(&g).unwrap()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut dev = Emu::new(&format!("paged_{what}"), &exe);
    for (s, seqs) in batches.iter().enumerate() {
        let at = format!("{what} {f:?} on {seqs:?}");
        let (inputs, values) = paged_inputs(&g, f, seqs, 60 + s as u64);
        let b = bindings_of(&at, &g, &values);
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        let (_, host) = emulated::compare(&at, &mut dev, &exe, &g, &inputs, &b);
        assert_eq!(host, 0, "{at}: host steps");
    }
    dev.launched
}

#[test]
fn paged_attention_runs_on_the_device_for_mixed_batches() {
    // Prefills over several tiles (4 query heads per key/value head: 4 tokens a tile), chunked
    // prefills, decodes, a sequence without queries, blocks out of order; many tile slots, so
    // one share each.
    let mixed: &[&[(i64, i64)]] = &[
        &[(17, 17), (5, 40), (0, 0), (1, 1), (9, 100)],
        &[(40, 40), (40, 90)],
        &[],
    ];
    let launched = check_paged(
        "mixed",
        Paged {
            kv_heads: 1,
            ..PAGED
        },
        mixed,
    );
    assert!(
        launched.iter().any(|f| f.ends_with("_tiled")),
        "{launched:?}"
    );
    // Decodes over long contexts: few blocks, the keys split into shares (of 256 or more keys
    // of a 640-key table row) per sequence, merged.
    let decode: &[&[(i64, i64)]] = &[&[(1, 600), (1, 3), (2, 300)], &[(1, 640)]];
    let long = Paged {
        blocks: 64,
        width: 40,
        ..PAGED
    };
    let launched = check_paged("decode", long, decode);
    for part in ["_split", "_merge"] {
        assert!(
            launched.iter().any(|f| f.ends_with(part)),
            "{part}: {launched:?}"
        );
    }
    // bf16 on the tensor cores at head dim 256 (a query head per key/value head), and f64.
    let wide = Paged {
        dtype: "bf16",
        heads: 2,
        kv_heads: 2,
        d: 256,
        dv: 256,
        block_size: 8,
        blocks: 30,
        width: 24,
        scale: Some(0.1),
    };
    let _ = check_paged("bf16_d256", wide, &[&[(3, 20), (1, 190)], &[(12, 12)]]);
    let f64_ = Paged {
        dtype: "f64",
        d: 40,
        dv: 24,
        ..PAGED
    };
    let _ = check_paged("f64", f64_, &[&[(2, 30), (7, 7)]]);
    // Blocks of one slot (guardless.hf's tables: each key's slot from the step's read index),
    // a decode over a long context, a chunked prefill and a short prefill.
    let slots = Paged {
        block_size: 1,
        blocks: 700,
        width: 640,
        ..PAGED
    };
    let _ = check_paged("slots", slots, &[&[(1, 600), (5, 40), (2, 2)]]);
}

/// Bad sequence data on the device: the run fails with the rule's message (the kernel reads
/// nothing outside its operands meanwhile: the emulation checks every access).
#[test]
fn paged_attention_on_the_device_refuses_bad_sequence_data() {
    use guardless_ir::loop_ir::PagedCheck;
    use guardless_ir::tensor::Data;
    let g = paged_graph(PAGED);
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("paged_bad", &exe);
    for (input, at, value, check) in [
        (5usize, 1usize, 4i64, PagedCheck::QueryStart),
        (4, 0, 1, PagedCheck::ContextLength),
        (3, 1, 40, PagedCheck::Block),
    ] {
        let (mut inputs, values) = paged_inputs(&g, PAGED, &[(2, 20), (1, 7)], 3);
        let Data::Int(v) = &mut inputs[input].data else {
            unreachable!("int operands")
        };
        v[at] = value;
        let b = bindings_of("bad", &g, &values);
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        let err = emulated::run(&mut dev, &exe, Inputs::Host(&inputs), &b)
            .expect_err("refused")
            .to_string();
        assert!(err.contains(check.message()), "{check:?}: {err}");
    }
}
