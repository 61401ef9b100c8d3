//! Every lowered op of the differential cases (`cases::CASES`: pointwise math in every dtype,
//! reductions, views, indexing, …) in one graph, run through the generated CUDA on the CPU
//! emulation of CUDA and compared with the reference executor at unbacked sizes far from the hint.
//! Catches CUDA spellings the interpreter and the CPU backend never see.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::cases::CASES;
use differential::{cases_graph, random_inputs};
use emulated::Emu;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_runtime::launch::Executable;

#[test]
fn every_lowered_op_runs_on_the_device() {
    let g = cases_graph("every_op", CASES);
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("every_op", &exe);
    // Not 0 (a reduction without an identity fails there) nor 1 (a squeeze case asserts
    // `u0 != 1`): either fails the whole graph.
    for (s, u0) in [2, 13, 257].into_iter().enumerate() {
        let what = format!("every op at u0 = {u0}");
        let b = differential::bindings_of(&what, &g, &[("u0", u0)]);
        let inputs = random_inputs(&g, &b, 60 + s as u64, (-3, 7));
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        emulated::compare(&what, &mut dev, &exe, &g, &inputs, &b);
    }
}
