//! `Program::run_plan`: the reduction order of a schedule (lanes, then a balanced tree, rounding
//! at every step) and the first-position rule of arg-reductions under it.

use guardless_ir::graph::{DType, Graph};
use guardless_ir::loop_ir::interp::{ExecPlan, ExecStep};
use guardless_ir::loop_ir::{BufferId, BufferKind};
use guardless_ir::lower::lower;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;

/// `op(x, dim)` over `x: f32[1, 4]`.
fn graph(op: &str, dim: &str) -> Graph {
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "r",
            "inputs": [{{"name": "x", "dtype": "f32", "shape": [1, 4]}}],
            "nodes": [{{"name": "out", "op": "{op}", "args": {{"self": {{"tensor": "x"}}, "dim": {dim}}}}}],
            "outputs": [{{"tensor": "out"}}]}}"#
    ))
    .unwrap()
}

/// The program with its one reduction run as a fused step with `lanes`.
fn run(g: &Graph, x: &[f64], lanes: i64) -> f64 {
    let p = lower(g).unwrap();
    let mut plan = ExecPlan::unscheduled(&p);
    let red = p
        .buffers
        .iter()
        .position(|b| matches!(b.kind, BufferKind::Computed { .. }))
        .unwrap();
    let rows = p
        .env
        .pool()
        .as_const(p.buffers[red].layout.sizes[0])
        .unwrap();
    let mut env = p.env.clone();
    plan.steps[red] = ExecStep::Fused {
        members: vec![BufferId(red as u32)],
        rows: env.pool_mut().constant(rows),
        lanes,
    };
    let input = HostTensor::from_f64(DType::F32, &[1, 4], x);
    p.run_plan(&[input], &Bindings::new(), &plan).unwrap()[0].get_f64(0)
}

#[test]
fn lanes_then_a_tree_rounding_each_step() {
    let g = graph("aten.sum.dim_IntList", "[1]");
    let x = [1e8, 1.0, 1.0, -1e8];
    // In order and exact: 2. Two lanes in f32: (1e8 + 1) + (1 - 1e8) = 1e8 - 1e8 = 0.
    assert_eq!(run(&g, &x, 0), 2.0);
    assert_eq!(run(&g, &x, 2), 0.0);
    // Four lanes: ((1e8 + 1) + (1 - 1e8)) — the pairs (0, 1) and (2, 3) first: 1e8 + -1e8 = 0.
    assert_eq!(run(&g, &x, 4), 0.0);
}

#[test]
fn arg_reductions_keep_the_first_best_position_under_lanes() {
    let g = graph("aten.argmax.default", "1");
    for lanes in [0, 2, 4, 8] {
        assert_eq!(run(&g, &[3.0, 5.0, 1.0, 5.0], lanes), 1.0, "lanes {lanes}");
        assert_eq!(run(&g, &[f64::NAN, 5.0, f64::NAN, 5.0], lanes), 0.0);
        assert_eq!(run(&g, &[2.0, 1.0, f64::NAN, f64::NAN], lanes), 2.0);
    }
}

#[test]
fn a_layouts_extent_at_run_time() {
    use guardless_ir::loop_ir::LayoutValues;
    let v = |sizes: &[i64], offset: i64, strides: &[i64]| LayoutValues {
        sizes: sizes.to_vec(),
        offset,
        strides: strides.to_vec(),
    };
    // One past the last element: 3 + (2-1)·8 + (4-1)·1 + 1.
    assert_eq!(v(&[2, 4], 3, &[8, 1]).extent(), Ok(15));
    // Broadcast (stride 0) and empty layouts.
    assert_eq!(v(&[5, 4], 0, &[0, 1]).extent(), Ok(4));
    assert_eq!(v(&[0, 4], 7, &[4, 1]).extent(), Ok(0));
    assert!(v(&[2], 0, &[-1]).extent().unwrap_err().contains("negative"));
    assert!(v(&[2], -1, &[1]).extent().unwrap_err().contains("negative"));
    assert!(v(&[1 << 40, 1 << 40], 0, &[1 << 40, 1]).extent().is_err());
}
