//! Fused attention on the device (`codegen::cuda::attention`, `templates/attention.cu`), run on
//! the CPU emulation of CUDA and compared with the reference: each tile form (16 rows × 32 keys
//! for head dims up to 128, 8 × 16 up to 256 and for f64) across tile boundaries of rows and keys,
//! grouped-query heads sharing a block, causal blocks that stop early, boolean and additive masks
//! (rows with every key hidden are 0), operands read transposed, lengths of 0 — each on the
//! device, no host step.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::attention::{graph, projected, Form, BASE};
use differential::{bindings_of, random_inputs};
use emulated::Emu;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_runtime::launch::Executable;

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
    // 8 × 16 tiles, bf16, a boolean mask hiding whole rows of some shares.
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
    // 8 × 16 tiles: head dims over 128 (and an odd value head dim), and f64.
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
