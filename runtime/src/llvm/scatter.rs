//! A `write` scatter's updates (`index_put`, `index_copy`: a KV-cache update) as an LLVM function
//! of the kernels' signature over points `[begin, end)` of its loops: per point, the body's value
//! stored at its target (a row-major index into the base's shape, bounds-checked) through the
//! result's layout. The base is copied (or the result computed in place) by the caller; the
//! points run in order, so a later update of the same target wins, as in the interpreter.

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::values::FunctionValue;
use inkwell::IntPredicate;
use rustc_hash::FxHashMap;

use guardless_ir::loop_ir::{BufferId, BufferKind, Program, ScatterCombine};

use super::emit::{Emitter, Source};
use super::{llvm, LlvmError};

/// The function of write scatter `id` (`None` for another buffer) and its pointer table.
#[allow(clippy::too_many_arguments)]
pub fn emit_scatter<'c>(
    cx: &'c Context,
    module: &Module<'c>,
    helpers: &FxHashMap<&'static str, FunctionValue<'c>>,
    p: &Program,
    id: BufferId,
    name: &str,
    attributes: &[(&str, &str)],
    errors: &mut Vec<(String, String, String)>,
) -> Result<Option<(FunctionValue<'c>, Vec<BufferId>)>, LlvmError> {
    let buf = &p.buffers[id.index()];
    let BufferKind::Scatter {
        loops,
        body,
        target,
        combine: ScatterCombine::Write,
        ..
    } = &buf.kind
    else {
        return Ok(None);
    };
    let ptr = cx.ptr_type(inkwell::AddressSpace::default());
    let i64t = cx.i64_type();
    let fty = cx.void_type().fn_type(
        &[
            ptr.into(),
            ptr.into(),
            i64t.into(),
            i64t.into(),
            ptr.into(),
            ptr.into(),
        ],
        false,
    );
    let function = module.add_function(name, fty, None);
    for (k, v) in attributes {
        function.add_attribute(AttributeLoc::Function, cx.create_string_attribute(k, v));
    }
    let nounwind = Attribute::get_named_enum_kind_id("nounwind");
    function.add_attribute(
        AttributeLoc::Function,
        cx.create_enum_attribute(nounwind, 0),
    );
    let entry_bb = cx.append_basic_block(function, "entry");
    let start_bb = cx.append_basic_block(function, "start");
    let b = cx.create_builder();
    let entry = cx.create_builder();
    entry.position_at_end(entry_bb);
    b.position_at_end(start_bb);
    let params = function.get_params();
    let mut e = Emitter {
        cx,
        module,
        b: &b,
        entry: &entry,
        function,
        env: &p.env,
        ptrs: params[0].into_pointer_value(),
        syms: params[1].into_pointer_value(),
        err: params[4].into_pointer_value(),
        locals: FxHashMap::default(),
        sym_cache: FxHashMap::default(),
        ptr_cache: FxHashMap::default(),
        slots: Some(Vec::new()),
        memo: FxHashMap::default(),
        errors,
        current: (buf.name.clone(), buf.origins.join(", ")),
        fail_blocks: FxHashMap::default(),
        helpers,
    };
    let (begin, end) = (params[2].into_int_value(), params[3].into_int_value());
    // for point in [begin, end)
    let pre = b.get_insert_block().expect("positioned");
    let head = cx.append_basic_block(function, "point");
    let body_bb = cx.append_basic_block(function, "body");
    let exit = cx.append_basic_block(function, "exit");
    b.build_unconditional_branch(head).map_err(llvm)?;
    b.position_at_end(head);
    let phi = b.build_phi(i64t, "point").map_err(llvm)?;
    phi.add_incoming(&[(&begin, pre)]);
    let point = phi.as_basic_value().into_int_value();
    let more = b
        .build_int_compare(IntPredicate::SLT, point, end, "")
        .map_err(llvm)?;
    b.build_conditional_branch(more, body_bb, exit)
        .map_err(llvm)?;
    b.position_at_end(body_bb);
    // The loop variables: the point's row-major decomposition over the ranges.
    let mut rest = point;
    for j in (0..loops.vars.len()).rev() {
        let var = p
            .env
            .pool()
            .as_symbol(loops.vars[j])
            .expect("loop vars are symbols");
        if j == 0 {
            e.locals.insert(var, rest);
        } else {
            let n = e.int(loops.ranges[j]).map_err(llvm)?;
            let n = e.safe_divisor(n).map_err(llvm)?;
            let v = b.build_int_signed_rem(rest, n, "").map_err(llvm)?;
            e.locals.insert(var, v);
            rest = b.build_int_signed_div(rest, n, "").map_err(llvm)?;
        }
    }
    let dtype_of = |x: BufferId| p.buffers[x.index()].dtype;
    let mut pointers = FxHashMap::default();
    for (op, _) in &body.ops {
        if let guardless_ir::loop_ir::Op::Load { buffer, .. } = op {
            pointers.insert(*buffer, e.pointer(*buffer).map_err(llvm)?);
        }
    }
    let source = |x: BufferId| Source::Memory(pointers[&x]);
    let value = e.body(body, &source, &dtype_of, None).map_err(llvm)?;
    // The target, in bounds of the base's shape, then through the result's layout.
    let t = e.int(*target).map_err(llvm)?;
    let mut numel = e.const_i64(1);
    for &s in &buf.layout.sizes {
        let s = e.int(s).map_err(llvm)?;
        numel = b.build_int_mul(numel, s, "").map_err(llvm)?;
    }
    let zero = e.const_i64(0);
    let ge = b
        .build_int_compare(IntPredicate::SGE, t, zero, "")
        .map_err(llvm)?;
    let lt = b
        .build_int_compare(IntPredicate::SLT, t, numel, "")
        .map_err(llvm)?;
    let ok = b.build_and(ge, lt, "").map_err(llvm)?;
    e.require_with(ok, "scatter out of bounds at {0}".into(), &[t])
        .map_err(llvm)?;
    let mut at = e.int(buf.layout.offset).map_err(llvm)?;
    let mut rest = t;
    for d in (0..buf.layout.sizes.len()).rev() {
        let n = e.int(buf.layout.sizes[d]).map_err(llvm)?;
        let n = e.safe_divisor(n).map_err(llvm)?;
        let i = b.build_int_signed_rem(rest, n, "").map_err(llvm)?;
        rest = b.build_int_signed_div(rest, n, "").map_err(llvm)?;
        let s = e.int(buf.layout.strides[d]).map_err(llvm)?;
        let step = b.build_int_mul(i, s, "").map_err(llvm)?;
        at = b.build_int_add(at, step, "").map_err(llvm)?;
    }
    let out = e.pointer(id).map_err(llvm)?;
    e.store(out, at, buf.dtype, value).map_err(llvm)?;
    let next = b.build_int_add(point, e.const_i64(1), "").map_err(llvm)?;
    let latch = b.get_insert_block().expect("positioned");
    b.build_unconditional_branch(head).map_err(llvm)?;
    phi.add_incoming(&[(&next, latch)]);
    b.position_at_end(exit);
    b.build_return(None).map_err(llvm)?;
    entry.build_unconditional_branch(start_bb).map_err(llvm)?;
    let table = e.slots.take().unwrap_or_default();
    Ok(Some((function, table)))
}
