//! `addmm` (a linear layer with a bias) on the CPU emulation of CUDA: a bias row with unit
//! scales goes to the matmul itself (cuBLASLt's bias epilogue on a GPU), so no kernel runs; an
//! empty inner dimension leaves the bias in every row (device copies); other scales keep the
//! bias as a pointwise epilogue kernel, after a product kept in f32 for bf16 operands so the
//! result rounds once. Compared with the reference executor in f32 and bf16, with the weight
//! transposed as `nn.Linear` stores it, at sizes from 0 up.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::linear;
use emulated::Emu;
use guardless_ir::graph::{DType, Graph};
use guardless_ir::loop_ir::{BufferKind, ExternKernel};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_runtime::launch::Executable;

fn extern_kernels(exe: &Executable) -> Vec<ExternKernel> {
    exe.program
        .buffers
        .iter()
        .filter_map(|b| match b.kind {
            BufferKind::Extern { kernel, .. } => Some(kernel),
            _ => None,
        })
        .collect()
}

/// Runs `g` at `n` rows of `k` and compares with the reference; the emulated device after.
fn run_at(g: &Graph, exe: &Executable, dev: &mut Emu, n: i64, k: i64) {
    let mut b = Bindings::new();
    b.set(g.env.symbol_id("n").unwrap(), n);
    b.set(g.env.symbol_id("k").unwrap(), k);
    let inputs = differential::random_inputs(g, &b, 7 + n as u64, (0, 4));
    let b = reference::bind_inputs(g, &inputs, &b).unwrap();
    let what = format!("{} n = {n} k = {k}", g.name);
    let (_, host_steps) = emulated::compare(&what, dev, exe, g, &inputs, &b);
    assert_eq!(host_steps, 0, "{what}");
}

#[test]
fn a_bias_row_is_added_by_the_matmul_with_no_kernel() {
    for dtype in ["f32", "bf16"] {
        for bias_shape in ["[16]", "[1, 16]"] {
            let g = linear(dtype, bias_shape, "");
            let exe = Executable::new(lower(&g).unwrap()).unwrap();
            assert_eq!(extern_kernels(&exe), [ExternKernel::AddMm], "{dtype}");
            assert!(exe.schedule.kernels.is_empty(), "{dtype}: a bias kernel");
            let mut dev = Emu::new(&format!("linear_{dtype}_{}", bias_shape.len()), &exe);
            for n in [0, 1, 2, 17, 300] {
                let before = (dev.gemms, dev.biased);
                run_at(&g, &exe, &mut dev, n, 8);
                let want = usize::from(n > 0);
                assert_eq!((dev.gemms - before.0, dev.biased - before.1), (want, want));
                assert!(dev.launched.is_empty(), "{:?}", dev.launched);
            }
            // No inner dimension: the bias in every row, by copies.
            let (gemms, copied) = (dev.gemms, dev.copied_bytes);
            run_at(&g, &exe, &mut dev, 5, 0);
            assert_eq!(dev.gemms, gemms, "{dtype}: a gemm with k = 0");
            assert_eq!(
                dev.copied_bytes - copied,
                5 * 16 * DType::from_name(dtype).unwrap().size()
            );
        }
    }
}

#[test]
fn other_scales_keep_the_bias_in_a_kernel() {
    for extra in [r#", "beta": 2, "alpha": 0.5"#, r#", "alpha": 3"#] {
        let g = linear("f32", "[16]", extra);
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        assert_eq!(extern_kernels(&exe), [ExternKernel::Mm], "{extra}");
        let mut dev = Emu::new("linear_scaled", &exe);
        for n in [0, 3, 65] {
            run_at(&g, &exe, &mut dev, n, 8);
        }
        assert_eq!(dev.biased, 0, "{extra}");
        assert!(!dev.launched.is_empty(), "{extra}: no epilogue kernel");
    }
    // A full bias matrix is not a row: an epilogue kernel too.
    let g = linear("f32", r#"["n", 16]"#, "");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    assert_eq!(extern_kernels(&exe), [ExternKernel::Mm]);
}

#[test]
fn a_bf16_addmm_with_an_epilogue_rounds_once() {
    // Other scales, and a bias that is not a row: the product leaves the gemm in f32 and the
    // epilogue rounds once, so with integral inputs (exact sums) the result is the reference's
    // bit for bit. (Rounded to bf16 before the epilogue too, some were one bf16 step off.)
    for (bias, extra) in [
        ("[16]", r#", "beta": 2, "alpha": 0.5"#),
        (r#"["n", 16]"#, ""),
    ] {
        let g = linear("bf16", bias, extra);
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mm: Vec<DType> = exe
            .program
            .buffers
            .iter()
            .filter(|b| matches!(b.kind, BufferKind::Extern { .. }))
            .map(|b| b.dtype)
            .collect();
        assert_eq!(mm, [DType::F32], "{bias}{extra}");
        let mut dev = Emu::new("linear_bf16_epilogue", &exe);
        for (n, k) in [(0, 64), (33, 64), (7, 0)] {
            let what = format!("{bias}{extra} n = {n} k = {k}");
            let mut b = Bindings::new();
            b.set(g.env.symbol_id("n").unwrap(), n);
            b.set(g.env.symbol_id("k").unwrap(), k);
            let inputs = differential::integral(differential::random_inputs(&g, &b, 3, (0, 4)));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let (got, host_steps) = emulated::compare(&what, &mut dev, &exe, &g, &inputs, &b);
            assert_eq!(host_steps, 0, "{what}");
            let want = reference::run(&g, &inputs, &b).unwrap();
            assert_eq!(got[0].data, want[0].data, "{what}");
        }
        assert!(dev.gemms > 0 && dev.biased == 0);
    }
}
