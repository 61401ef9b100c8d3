//! Convolutions on the CPU emulation of CUDA: every case of `CONV_CASES` (padded, strided,
//! dilated, grouped, depthwise, a patch embedding, 1-D and 3-D) in one graph per dtype, its
//! columns gathered by a kernel, the products by the device's gemm, the bias by an epilogue —
//! compared with the reference executor at several unbacked sizes, no step on the host; and
//! inference batch norm with max pooling (values and indices).

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::cases::CONV_CASES;
use differential::{conv_graph, conv_values, pooling_graph, random_inputs, CONV_SIZES};
use emulated::Emu;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_runtime::launch::Executable;

#[test]
fn convolutions_run_on_the_device() {
    for dtype in ["f32", "bf16"] {
        let g = conv_graph(dtype, CONV_CASES);
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new(&format!("conv_{dtype}"), &exe);
        // The sizes every case accepts.
        for (s, &sizes) in CONV_SIZES[..4].iter().enumerate() {
            let values = conv_values(&g, sizes);
            let what = format!("conv {dtype} at {values:?}");
            let b = differential::bindings_of(&what, &g, &values);
            let inputs = random_inputs(&g, &b, 40 + s as u64, (0, 4));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let gemms = dev.gemms;
            let (_, host_steps) = emulated::compare(&what, &mut dev, &exe, &g, &inputs, &b);
            assert_eq!(host_steps, 0, "{what}");
            if sizes.0 > 0 {
                assert_eq!(
                    dev.gemms - gemms,
                    CONV_CASES.len(),
                    "{what}: one gemm a convolution"
                );
            }
        }
    }
}

#[test]
fn batch_norm_and_max_pooling_run_on_the_device() {
    for dtype in ["f32", "bf16"] {
        let g = pooling_graph(dtype);
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new(&format!("pooling_{dtype}"), &exe);
        for (s, (n, h, w)) in [(1, 5, 7), (2, 8, 8), (0, 4, 4), (3, 17, 12)]
            .into_iter()
            .enumerate()
        {
            let values = [("n", n), ("h", h), ("w", w)];
            let what = format!("pooling {dtype} at {values:?}");
            let b = differential::bindings_of(&what, &g, &values);
            let inputs = random_inputs(&g, &b, 50 + s as u64, (0, 4));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let (_, host_steps) = emulated::compare(&what, &mut dev, &exe, &g, &inputs, &b);
            assert_eq!(host_steps, 0, "{what}");
        }
    }
}
