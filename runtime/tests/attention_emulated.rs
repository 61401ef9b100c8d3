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

use differential::attention::{graph, Form, BASE};
use differential::{bindings_of, random_inputs};
use emulated::Emu;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_runtime::launch::Executable;

fn check(what: &str, f: Form, lengths: &[(i64, i64)]) {
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
    check("f32", gqa, &[(0, 0), (1, 1), (1, 70), (17, 17), (17, 70)]);
    check(
        "f32_causal",
        Form {
            causal: true,
            ..gqa
        },
        &[(1, 1), (17, 17), (40, 40), (5, 70)],
    );
    // 8 × 16 tiles: head dims over 128 (and an odd value head dim), and f64.
    check(
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
    check(
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
        check(what, f, &[(1, 1), (5, 2), (17, 40)]);
    }
}
