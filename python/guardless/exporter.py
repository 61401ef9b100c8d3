"""torch.export → the guardless graph format (docs/graph-format.md).

The model is exported with `torch.export.export`, decomposed to core ATen (keeping
`scaled_dot_product_attention` whole), and its FX graph written as JSON: arguments by their ATen
schema names, SymInt arithmetic (`sym_size`, `operator.mul`, …) folded into symbolic expressions,
`getitem` into element references, `_assert_scalar` into asserts, parameters and buffers into
inputs of their kind, whose values go to a safetensors file.
"""

from __future__ import annotations

import json
import math
import operator
import os
import re
from dataclasses import dataclass, field

import torch
import torch._prims_common
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

SUPPORTED_TORCH = ("2.15",)

_DTYPES = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}

# SymInt arithmetic folded into expressions instead of nodes.
_SYM_OPS = {
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg,
    operator.ge, operator.gt, operator.le, operator.lt, operator.eq, operator.ne,
    torch.sym_max, torch.sym_min, torch.sym_not, torch.sym_sum, torch.sym_ite,
    # SymBool connectives (torch's guard-free checks on unbacked sizes combine conditions).
    operator.or_, operator.and_,
}


class ExportError(Exception):
    """What the exporter could not translate: every such node, with its op. `nodes`: the FX call
    nodes among them (what a graph may run through PyTorch instead, see `segments`)."""

    def __init__(self, message: str, nodes: list | None = None):
        super().__init__(message)
        self.nodes = nodes or []


def supported_ops() -> set[str]:
    """The overloads guardless reads (`ir/src/graph/schemas.txt`, shipped beside the package or
    found in the repository), e.g. `aten.mm.default`."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "schemas.txt"), os.path.join(here, "..", "..", "ir", "src", "graph", "schemas.txt")):
        if os.path.exists(path):
            with open(path) as f:
                lines = [l.split("#")[0].strip() for l in f]
            return {l.split("(")[0] for l in lines if l}
    raise ExportError("schemas.txt not found beside the package nor in the repository")


@dataclass
class Exported:
    graph: dict
    parameters: dict = field(default_factory=dict)
    # How the repeated layers were traced (`export(stack_layers=...)`), or why they were not.
    stacking: str | None = None

    def save(self, graph_path: str, parameters_path: str | None = None) -> None:
        with open(graph_path, "w") as f:
            json.dump(self.graph, f, indent=1)
        if parameters_path is not None:
            from safetensors.torch import save_file

            save_file({k: v.contiguous() for k, v in self.parameters.items()}, parameters_path)


def _decompositions():
    # Attention stays one op (guardless fuses it): `scaled_dot_product_attention` as exported, or
    # the fused form a `torch.compile` trace dispatches it to (on the CPU the flash kernel, which
    # the default table would decompose into matmuls and a softmax).
    table = torch.export.default_decompositions()
    table.pop(torch.ops.aten.scaled_dot_product_attention.default, None)
    table.pop(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, None)
    return table


def _integral(expr):
    """`expr` with each `TruncToInt(c * ToFloat(e))` — a size scaled by a float factor, as an
    interpolation's output size — written `(m * e) // 2^k` for the factor `c = m / 2^k` exactly
    (binary fractions of up to 20 bits; sizes are non-negative, so truncation is the floor)."""
    from fractions import Fraction

    from torch.utils._sympy.functions import FloorDiv, ToFloat, TruncToInt

    def rewrite(t):
        coeff, rest = t.args[0].as_coeff_Mul()
        if not isinstance(rest, ToFloat):
            raise ExportError(f"a float size expression guardless cannot take: {t}")
        f = Fraction(float(coeff))
        if f.denominator > 2**20 or f.numerator > 2**20:
            raise ExportError(f"the scale {float(coeff)} in {t} is not a binary fraction of 20 bits or fewer")
        return FloorDiv(rest.args[0] * f.numerator, f.denominator)

    return expr.replace(lambda e: isinstance(e, TruncToInt), rewrite)


def _expr(v, renames: dict | None = None) -> str:
    """A SymInt/SymBool/int as the graph format's symbolic text, symbols renamed by `renames`."""
    if isinstance(v, torch.SymFloat):
        raise ExportError(f"the float {v.node.expr} (from sizes or read from a tensor): guardless's symbols are integers")
    if isinstance(v, (torch.SymInt, torch.SymBool)):
        e = _integral(v.node.expr)
        if renames:
            e = _renamed(e, renames)
        return str(e)
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(int(v))


def _input_ranks(names: list[str], example_inputs) -> str:
    return ", ".join(
        f"{n} (rank {x.dim()})" if isinstance(x, torch.Tensor) else f"{n} (not a tensor)"
        for n, x in zip(names, example_inputs)
    )


def _check_input_dims(what: str, spec: dict, example_inputs, names: list[str]) -> None:
    """Every input name of `spec` (`{input: {dim: …}}`) names an input, every dim is in range."""
    by_name = dict(zip(names, example_inputs))
    for name, dims in spec.items():
        if name not in by_name:
            raise ExportError(
                f"{what} names the input '{name}', which the model does not take; its inputs are: "
                f"{_input_ranks(names, example_inputs)}"
            )
        x = by_name[name]
        if dims is None:
            continue
        if not isinstance(x, torch.Tensor):
            raise ExportError(f"{what}['{name}']: the input '{name}' is not a tensor")
        if not isinstance(dims, dict):
            # torch.export's tuple/list form: one entry per dimension.
            if isinstance(dims, (list, tuple)) and len(dims) != x.dim():
                raise ExportError(
                    f"{what}['{name}'] gives {len(dims)} dimensions; '{name}' has rank {x.dim()}"
                )
            continue
        for d in dims:
            if not isinstance(d, int) or not -x.dim() <= d < x.dim():
                raise ExportError(
                    f"{what}['{name}'] names dimension {d!r}; '{name}' has rank {x.dim()} "
                    f"(shape {list(x.shape)})"
                )


_SYMBOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Words of the symbolic syntax (docs/symbolic-engine.md) a symbol may not be called.
_RESERVED = {"True", "False", "and", "or", "not", "oo", "inf", "nan", "Min", "Max", "Mod", "Eq", "Ne", "Where"}


def unbacked_spec(example_inputs, unbacked: dict, names: list[str]):
    """`dynamic_shapes` making the given dims unbacked: `{input: {dim: (name, min, max)}}`."""
    from torch.fx.experimental.dynamic_spec import ShapesSpec, ShapeVar, TensorSpec

    _check_input_dims("unbacked", unbacked, example_inputs, names)
    seen: dict = {}
    specs = {}
    for name, x in zip(names, example_inputs):
        dims = unbacked.get(name)
        if dims is None:
            continue
        shape = [None] * x.dim()
        for d, spec in dims.items():
            if not (isinstance(spec, (tuple, list)) and len(spec) == 3):
                raise ExportError(f"unbacked['{name}'][{d}] is {spec!r}; expected (symbol, min, max)")
            sym, lo, hi = spec
            if not isinstance(sym, str) or not _SYMBOL_NAME.match(sym) or sym in _RESERVED:
                raise ExportError(
                    f"unbacked['{name}'][{d}]: {sym!r} is not a symbol name (letters, digits and _, "
                    f"not starting with a digit, not one of {sorted(_RESERVED)})"
                )
            if sym in seen and seen[sym] != (lo, hi):
                raise ExportError(f"unbacked: the symbol '{sym}' is given two ranges, {seen[sym]} and {(lo, hi)}")
            seen[sym] = (lo, hi)
            shape[d] = ShapeVar(sym, min=lo, max=hi)
        specs[name] = TensorSpec(shape)
    return ShapesSpec(specs)


def _user_symbols(ep: ExportedProgram, unbacked: dict, names: list[str]) -> dict:
    """torch's symbol (`u0`) → the user's name (`n`) for each dimension named in `unbacked`."""
    user = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    renames: dict = {}
    for pos, pname in enumerate(names):
        for d, (sym, _, _) in (unbacked.get(pname) or {}).items():
            if pos >= len(user):
                continue
            size = placeholders[user[pos]].meta["val"].shape[d]
            if isinstance(size, torch.SymInt) and size.node.expr.is_symbol:
                renames.setdefault(size.node.expr, sym)
    taken = {str(s) for s in ep.range_constraints} - {str(s) for s in renames}
    for torch_sym, sym in renames.items():
        if sym in taken:
            raise ExportError(
                f"unbacked: the name '{sym}' is also the name torch gave another symbol; choose another"
            )
    return renames


def export(
    model: torch.nn.Module,
    example_inputs: tuple,
    dynamic_shapes=None,
    unbacked: dict | None = None,
    optimization_hints: dict | None = None,
    name: str | None = None,
    stack_layers: int | None = 4,
) -> Exported:
    """Exports `model` called on `example_inputs`.

    `dynamic_shapes` is torch.export's. `unbacked` (`{input: {dim: (symbol, min, max)}}`) makes those
    dimensions unbacked instead, and the graph calls them by the given symbol names;
    `optimization_hints` maps unbacked symbol names to the size to tune for. An input name, a
    dimension or a symbol that matches nothing is an error naming what there is.

    `stack_layers`: the members of a `ModuleList` holding at least this many layers of one
    structure are traced once per group of interchangeable calls and their graph repeated
    (`guardless.stacking`), so that export time does not grow with depth (tracing a layer apart
    costs about what tracing three in the model does: below 4 it does not pay); `None`: never.
    Where it cannot be done the whole model is traced, and `Exported.stacking` says why.
    """
    if not torch.__version__.startswith(SUPPORTED_TORCH):
        raise ExportError(f"torch {torch.__version__}: the exporter supports {SUPPORTED_TORCH}")
    import inspect

    params = list(inspect.signature(model.forward).parameters)
    if unbacked is not None and dynamic_shapes is not None:
        raise ExportError("give either unbacked or dynamic_shapes, not both")
    if isinstance(dynamic_shapes, dict):
        _check_input_dims("dynamic_shapes", dynamic_shapes, example_inputs, params)
    if unbacked:
        dynamic_shapes = unbacked_spec(example_inputs, unbacked, params)
    hints, title = dict(optimization_hints or {}), name or type(model).__name__
    stacking_note = None
    if stack_layers is not None:
        from . import stacking

        layers = stacking.repeated_layers(model, max(int(stack_layers), 2))
        if layers:
            try:
                ep, stacked = stacking.trace(model, example_inputs, dynamic_shapes, layers, _decompositions())
                renames = _user_symbols(ep, unbacked, params) if unbacked else {}
                out = from_exported(ep, hints, title, renames, stacked)
                out.stacking = (
                    f"{len(stacked.calls)} calls of repeated layers, traced as {len(stacked.groups)} "
                    f"layer graph{'s' if len(stacked.groups) != 1 else ''}"
                )
                return out
            except Exception as e:  # noqa: BLE001 — any failure: trace the whole model instead
                first = " ".join(str(e).split())[:300]
                stacking_note = f"the whole model was traced: stacking its layers failed: {type(e).__name__}: {first}"
    try:
        ep = torch.export.export(model, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
    except Exception as e:
        hint = _data_dependent_advice(e, unbacked or {}, params)
        if hint is None:
            raise
        raise ExportError(hint) from e
    ep = ep.run_decompositions(_decompositions())
    renames = _user_symbols(ep, unbacked, params) if unbacked else {}
    out = from_exported(ep, hints, title, renames)
    out.stacking = stacking_note
    return out


def _data_dependent_advice(e: Exception, unbacked: dict, names: list[str]) -> str | None:
    """What to do when the model's code branches on an unbacked size torch cannot decide.

    Typically `Eq(u0, 1)`: code that treats a size of 1 specially (Hugging Face's attention mask for
    one token, a broadcast) cannot be traced for a range that includes 1."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    if not isinstance(e, GuardOnDataDependentSymNode):
        return None
    text = str(e)
    cond = str(getattr(e, "cond", "")) or text.splitlines()[0]
    named = [
        f"'{sym}' (input '{inp}' dimension {d}, range {lo}..{hi})"
        for inp, dims in unbacked.items()
        for d, (sym, lo, hi) in (dims or {}).items()
    ]
    ones = [
        f"'{sym}'" for dims in unbacked.values() for (sym, lo, _) in (dims or {}).values() if lo is not None and lo <= 1
    ]
    advice = (
        f"the model's code branches on {cond}, which torch cannot decide for an unbacked size "
        f"without a guard (torch.export's data-dependent error)"
    )
    if named:
        advice += "; unbacked here: " + ", ".join(named)
    if ones and ("1" in cond):
        advice += (
            f". A range that includes 1 makes code that treats a size of 1 specially (a broadcast, "
            f"Hugging Face's attention mask for one token) undecidable: start the range of "
            f"{', '.join(ones)} at 2, and export the size-1 path (decode) as its own graph, or "
            f"mark the size backed"
        )
    return advice + f".\ntorch said: {text.splitlines()[0]}"


def _backed_values(shape_env) -> dict:
    # torch 2.15 renamed var_to_val (backed symbols' example values).
    if hasattr(shape_env, "backed_var_to_val"):
        return shape_env.backed_var_to_val
    return shape_env.var_to_val


def _symbols(ep: ExportedProgram, hints: dict, renames: dict | None = None) -> list[dict]:
    renames = renames or {}
    shape_env = None
    for n in ep.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and hasattr(v, "fake_mode") and v.fake_mode is not None:
            shape_env = v.fake_mode.shape_env
            break
    out = []
    unbacked = []
    hints = dict(hints)
    for sym, vr in ep.range_constraints.items():
        name = renames.get(sym, str(sym))
        lo = int(vr.lower) if math.isfinite(float(vr.lower)) else None
        hi = int(vr.upper) if math.isfinite(float(vr.upper)) else None
        backed = shape_env is not None and sym in _backed_values(shape_env)
        entry = {"name": name, "kind": "backed" if backed else "unbacked", "min": lo, "max": hi}
        if backed:
            entry["hint"] = int(_backed_values(shape_env)[sym])
        else:
            if name not in unbacked:
                unbacked.append(name)
            # The hint by the graph's name, or by torch's when the user renamed it.
            for key in (name, str(sym)):
                if key in hints:
                    entry["optimization_hint"] = int(hints.pop(key))
                    break
        same = next((o for o in out if o["name"] == name), None)
        if same is not None:
            # Several dimensions the user called by one name (torch made a symbol for each): one
            # symbol, in the intersection of their ranges.
            lows = [v for v in (same["min"], lo) if v is not None]
            highs = [v for v in (same["max"], hi) if v is not None]
            same["min"] = max(lows) if lows else None
            same["max"] = min(highs) if highs else None
            if "optimization_hint" in entry:
                same["optimization_hint"] = entry["optimization_hint"]
            continue
        out.append(entry)
    if hints:
        raise ExportError(
            f"optimization_hints names {sorted(hints)}, which {'is' if len(hints) == 1 else 'are'} not an "
            f"unbacked symbol of the exported graph; its unbacked symbols are: {sorted(unbacked) or 'none'}"
        )
    out.sort(key=lambda s: s["name"])
    return out


# `sym_` ops that are nodes (they narrow a symbol's range), not size expressions.
_RANGE_OPS = ("aten::sym_constrain_range_for_size", "aten::sym_constrain_range")


def _is_size_op(t) -> bool:
    """`sym_size.int`, `sym_stride.int`, `sym_numel`, `sym_storage_offset`: a size expression."""
    return isinstance(t, torch._ops.OpOverload) and t.name().startswith("aten::sym_") and t.name() not in _RANGE_OPS


# Prims that AOT autograd's tracing leaves where torch.export leaves an ATen op, and library
# custom ops that compute exactly what an ATen op does: written as that op, arguments renamed.
_ALIASES = {
    "prims.convert_element_type.default": ("aten._to_copy.default", {"a": "self"}),
    "aten.true_divide.Tensor": ("aten.div.Tensor", {}),
    "aten.true_divide.Scalar": ("aten.div.Scalar", {}),
    # A tensor made in forward (`torch.tensor(...)`, a constant of the traced graph) is copied
    # before use: a clone, so that nothing returned aliases the constant.
    "aten.lift_fresh_copy.default": ("aten.clone.default", {}),
    # Hugging Face's experts when torch._grouped_mm is not taken (under export, weights other
    # than bf16): zeros, then each group's rows `input[start:end] @ weight[g]` (row groups ending
    # at `offs`), which is `_grouped_mm(input, weight, offs)` with rows past the last offset zero.
    "transformers.grouped_mm_fallback.default": ("aten._grouped_mm.default", {"input": "self", "weight": "mat2"}),
}


class _Writer:
    def __init__(self, renames: dict | None = None, stacked=None):
        self.renames = renames or {}
        self.stacked = stacked  # _StackedCalls: the repeated layers' graphs, inlined at each call
        self.prefix = ""  # before the names of an inlined layer's nodes
        self.refs: dict = {}  # fx node → JSON value standing for it
        self.nodes: list[dict] = []
        self.asserts: list[str] = []
        self.errors: list[str] = []
        # The call nodes it could not translate (each once: the root causes, not their users).
        self.failed: list[torch.fx.Node] = []
        self.supported = supported_ops()

    def graph(self, name: str, symbols: list, inputs: list, outputs: list) -> dict:
        """The graph document, or an ExportError listing every node it could not translate."""
        if self.errors:
            raise ExportError("cannot translate:\n  " + "\n  ".join(self.errors), self.failed)
        graph = {
            "format": "guardless-graph",
            "version": 1,
            "name": name,
            "symbols": symbols,
            "inputs": inputs,
            "nodes": self.nodes,
            "outputs": outputs,
        }
        if self.asserts:
            graph["asserts"] = self.asserts
        return graph

    def name(self, n: torch.fx.Node) -> str:
        return self.prefix + n.name

    def inline(self, n: torch.fx.Node):
        """A stacked layer's call: its group's layer graph, written with this call's inputs,
        weights and sizes, its nodes named after the layer's module path."""
        from . import stacking

        inputs, index = n.args
        call = self.stacked.calls[index]
        layer = self.stacked.graphs[call.group]
        try:
            mapping = stacking.symbol_map(layer, n)
        except stacking.Unstackable as e:
            self.errors.append(f"node '{n.name}' (the layer {call.path}): {e}")
            self.refs[n] = [{"tensor": n.name}] * len(layer.ep.graph_signature.output_specs)
            return
        saved = (self.renames, self.prefix)
        outer = self.renames
        self.renames = {k: _renamed(v, outer) for k, v in mapping.items()}
        # Named after the module; a module called again (shared weights): after the call too.
        base = re.sub(r"[^A-Za-z0-9_]", "_", call.path)
        prefix, k = base + "__", 1
        while prefix in self.stacked.prefixes:
            k += 1
            prefix = f"{base}__call{k}__"
        self.stacked.prefixes.add(prefix)
        self.prefix = prefix
        try:
            for ln in layer.ep.graph.nodes:
                if ln.op == "placeholder":
                    if ln.name in layer.user:
                        self.refs[ln] = self.value(inputs[layer.user[ln.name]])
                    elif ln.name in layer.constants:
                        self.refs[ln] = self.stacked.constant(call.group, ln, layer.constants[ln.name])
                    else:
                        self.refs[ln] = self.refs[self.stacked.weight(f"{call.path}.{layer.weights[ln.name]}")]
                elif ln.op == "call_function":
                    self.call(ln)
                elif ln.op == "output":
                    self.refs[n] = [self.value(o) for o in ln.args[0]]
        finally:
            self.renames, self.prefix = saved

    def expr(self, v) -> str:
        return _expr(v, self.renames)

    def value(self, a, schema_type=None):
        if isinstance(a, torch.fx.Node):
            if a not in self.refs:
                raise ExportError(f"node '{a.name}' is used before it is defined")
            return self.refs[a]
        if isinstance(a, (list, tuple)):
            return [self.value(x) for x in a]
        if isinstance(a, bool) or a is None:
            return a
        if isinstance(a, int):
            return a
        if isinstance(a, float):
            if math.isinf(a):
                return {"float": "inf" if a > 0 else "-inf"}
            if math.isnan(a):
                return {"float": "nan"}
            return a
        if isinstance(a, (torch.SymInt, torch.SymBool)):
            return self.expr(a)
        if isinstance(a, torch.dtype):
            return {"dtype": _DTYPES[a]}
        if isinstance(a, torch.device):
            return str(a)
        if isinstance(a, torch.layout):
            return "strided"
        if isinstance(a, torch.memory_format):
            return str(a).replace("torch.", "")
        if isinstance(a, str):
            return a
        raise ExportError(f"an argument of type {type(a).__name__}: {a!r}")

    def placeholder(self, n: torch.fx.Node, kind: str, inputs: list):
        v = n.meta["val"]
        entry = {"name": n.name, "dtype": _DTYPES[v.dtype], "shape": [self.expr(d) if not isinstance(d, int) else d for d in v.shape]}
        if not torch._prims_common.is_contiguous_or_false(v):
            # A view (a transposed cache, a slice of a wider mask) is read through its strides
            # instead of being copied into a contiguous tensor on every call.
            entry["strides"] = [self.expr(d) if not isinstance(d, int) else d for d in v.stride()]
        if kind != "user":
            entry["kind"] = kind
        inputs.append(entry)
        self.refs[n] = {"tensor": n.name}

    def call(self, n: torch.fx.Node):
        before = len(self.errors)
        try:
            self._call(n)
        except ExportError as e:
            self.errors.append(f"node '{self.name(n)}' ({n.target}): {e}")
        if len(self.errors) > before:
            # Its users refer to it by name, so the error list names each root cause once.
            self.refs.setdefault(n, {"tensor": self.name(n)})
            self.failed.append(n)

    def _call(self, n: torch.fx.Node):
        t = n.target
        if t is operator.getitem:
            src, i = n.args
            if isinstance(self.refs.get(src), list):  # an output of a stacked layer's call
                self.refs[n] = self.refs[src][i]
            else:
                self.refs[n] = {"tensor": self.name(src), "index": i}
            return
        if self.stacked is not None and t is self.stacked.op:
            self.inline(n)
            return
        if t in _SYM_OPS or _is_size_op(t):
            # A size expression: its value is the expression.
            self.refs[n] = self.expr(n.meta["val"])
            return
        if t is torch.ops.aten._assert_scalar.default:
            cond = self.expr(n.meta.get("val", n.args[0]) if not isinstance(n.args[0], torch.fx.Node) else n.args[0].meta["val"])
            # One name for several dimensions: the same assert; a stacked layer's bound on a
            # symbol the model's range already implies: "True".
            if cond not in self.asserts and cond != "True":
                self.asserts.append(cond)
            return
        if not isinstance(t, torch._ops.OpOverload):
            if isinstance(n.meta.get("val"), torch.SymFloat):
                self.errors.append(f"node '{self.name(n)}': {t} makes a float from sizes; guardless's sizes are integers")
            else:
                self.errors.append(f"node '{self.name(n)}': {t} is not an ATen op")
            return
        schema = t._schema
        args = {}
        try:
            for i, arg in enumerate(schema.arguments):
                if i < len(n.args):
                    val = n.args[i]
                elif arg.name in n.kwargs:
                    val = n.kwargs[arg.name]
                else:
                    continue
                args[arg.name] = self.value(val)
        except ExportError as e:
            self.errors.append(f"node '{self.name(n)}' ({t}): {e}")
            return
        op = f"aten.{t._opname}.{t._overloadname}" if t.namespace == "aten" else str(t)
        if op in _ALIASES:
            op, names = _ALIASES[op]
            args = {names.get(k, k): v for k, v in args.items()}
        if op not in self.supported:
            self.errors.append(f"node '{self.name(n)}': {op} is not supported by guardless")
            self.refs[n] = {"tensor": self.name(n)}
            return
        node = {"name": self.name(n), "op": op, "args": args}
        v = n.meta.get("val")
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            try:
                node["symbol"] = self.expr(v)
            except ExportError as e:
                self.errors.append(f"node '{self.name(n)}' ({op}): {e}")
                return
        elif isinstance(v, torch.Tensor) and any(not isinstance(d, int) and str(d.node.expr).startswith("u") and d.node.expr.is_symbol for d in v.shape):
            node["shape"] = [self.expr(d) if not isinstance(d, int) else d for d in v.shape]
        self.nodes.append(node)
        # A scalar read from a tensor is used through its symbol.
        self.refs[n] = node["symbol"] if "symbol" in node else {"tensor": self.name(n)}


def _renamed(e, renames: dict):
    """A sympy expression of torch's symbols with `renames` applied: a name, or (a stacked
    layer's symbols) an expression of the model's symbols."""
    import sympy

    if isinstance(e, int):
        return sympy.Integer(e)
    return e.xreplace({k: sympy.Symbol(r) if isinstance(r, str) else r for k, r in renames.items()})


class _StackedCalls:
    """The writer's view of `stacking.Stacked`: calls, group graphs, the model's weights."""

    def __init__(self, stacked, ep: ExportedProgram, inputs: list, parameters: dict):
        from . import stacking

        self.op = stacking.layer_op()
        self.calls = stacked.calls
        self.graphs = stacked.graphs
        self.prefixes: set = set()  # of the inlined calls' node names
        self.inputs = inputs  # the graph's inputs and parameters, to which layer constants are added
        self.parameters = parameters
        placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        # The model's parameter/buffer name → its placeholder (written before any call).
        self.weights = {
            s.target: placeholders[s.arg.name]
            for s in ep.graph_signature.input_specs
            if s.kind in (InputKind.PARAMETER, InputKind.BUFFER)
        }

    def constant(self, group: int, n: torch.fx.Node, value: torch.Tensor):
        """A tensor the layer makes in forward (a lifted constant): one graph input per group,
        shared by the group's calls."""
        name = f"layer_group{group}__{n.name}"
        if name not in self.parameters:
            if any(not isinstance(d, int) for d in value.shape):
                raise ExportError(f"the stacked layer's constant '{n.name}' has a symbolic shape")
            self.inputs.append({"name": name, "dtype": _DTYPES[value.dtype], "shape": list(value.shape), "kind": "constant"})
            self.parameters[name] = value
        return {"tensor": name}

    def weight(self, target: str):
        if target not in self.weights:
            raise ExportError(f"the stacked layer's weight '{target}' is not an input of the model's graph")
        return self.weights[target]


def _mutations(ep: ExportedProgram, outputs: list, errors: list) -> list:
    """Outputs that torch.export marks as mutating a buffer or a user input carry `mutates`:
    the runtime writes them back into that input after the call (a KV-cache update)."""
    placeholder_of = {
        s.target: s.arg.name
        for s in ep.graph_signature.input_specs
        if s.kind in (InputKind.BUFFER, InputKind.PARAMETER)
    }
    marked = []
    for out, spec in zip(outputs, ep.graph_signature.output_specs):
        if spec.kind == OutputKind.USER_OUTPUT:
            marked.append(out)
            continue
        if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION):
            name = placeholder_of.get(spec.target)
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            name = spec.target
        else:
            name = None
        if name is None or not isinstance(out, dict):
            errors.append(f"output '{spec.arg.name}': {spec.kind} outputs are not supported")
            marked.append(out)
            continue
        marked.append({**out, "mutates": name})
    return marked


def from_exported(ep: ExportedProgram, hints: dict, name: str, renames: dict | None = None, stacked=None) -> Exported:
    """The graph of `ep`; `hints` maps unbacked symbols (by their names in the graph, or torch's) to
    optimization hints; `renames` maps torch's symbols to the names the graph gives them;
    `stacked` (`stacking.Stacked`) the graphs of its repeated layers' calls, inlined."""
    kinds = {}
    params = {}
    state = dict(ep.state_dict)
    state.update(getattr(ep, "constants", {}) or {})
    for spec in ep.graph_signature.input_specs:
        kind = {
            InputKind.USER_INPUT: "user",
            InputKind.PARAMETER: "parameter",
            InputKind.BUFFER: "buffer",
            InputKind.CONSTANT_TENSOR: "constant",
        }.get(spec.kind)
        if kind is None:
            raise ExportError(f"input '{spec.arg.name}': {spec.kind} inputs are not supported")
        kinds[spec.arg.name] = kind
        if kind != "user":
            params[spec.arg.name] = state[spec.target]
    inputs: list[dict] = []
    outputs: list = []
    w = _Writer(renames, _StackedCalls(stacked, ep, inputs, params) if stacked is not None else None)
    # Tied weights (GPT-2's lm_head and wte): one input, stored once.
    first_of: dict = {}
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name in params:
            t = params[n.name]
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
            if key in first_of:
                w.refs[n] = {"tensor": first_of[key]}
                del params[n.name]
                continue
            first_of[key] = n.name
        if n.op == "placeholder":
            w.placeholder(n, kinds.get(n.name, "user"), inputs)
        elif n.op == "call_function":
            w.call(n)
        elif n.op == "output":
            try:
                outputs = [w.value(o) for o in n.args[0]]
            except ExportError as e:
                # An output whose node could not be translated: that node's error says why.
                if not w.errors:
                    raise
                outputs = []
        else:
            w.errors.append(f"node '{n.name}': {n.op} nodes are not supported")
    outputs = _mutations(ep, outputs, w.errors)
    return Exported(w.graph(name, _symbols(ep, hints, w.renames), inputs, outputs), params)
