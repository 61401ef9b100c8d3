"""Repeated layers traced once: what keeps `guardless.export` flat in a model's depth.

A decoder is a `ModuleList` of N layers of one structure. Tracing it costs torch.export time per
layer (tracing, then `run_decompositions`), although every layer yields the same graph but for its
weights. Here each layer of such a list is traced as one opaque call (`guardless::layer`, whose
fake kernel runs the layer's forward on fake tensors — once per *group* of interchangeable calls),
one layer per group is exported on its own, and the writer inlines that graph at every call with
the call's inputs, weights and sizes.

Two calls are in one group only when nothing the layer's forward can see differs between them:
the same module structure (classes, parameter and buffer names, shapes, dtypes, training flags),
the same non-tensor arguments, the same input shapes, dtypes and strides (as symbolic
expressions), and the same values of every plain attribute the forward read on the group's first
layer (Gemma's `is_sliding`, a per-layer scale; not `layer_idx` when the forward never reads it).
Anything else — a layer that mutates its inputs or buffers, makes a size of its own (`nonzero`),
takes a size that is no polynomial of the model's symbols, or layers that differ in more than
half the list — makes the export fall back to tracing the whole model (`Exported.stacking` says
why). Tensors a layer makes in forward (lifted constants) become one graph input per group.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from dataclasses import dataclass, field

import sympy
import torch
from torch.utils import _pytree as pytree

_TENSOR = object()  # marks a tensor's place among a call's flattened arguments or outputs
_MISSING = object()  # an attribute a layer does not have
_MODULE_STATE = set(torch.nn.Module().__dict__)  # nn.Module's own bookkeeping, not user attributes
_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device)


def _split(leaves: list) -> tuple[list, list]:
    """Flattened values → (their tensors, the values with _TENSOR where each tensor was)."""
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    return tensors, [_TENSOR if isinstance(x, torch.Tensor) else x for x in leaves]


def _merge(marked: list, tensors) -> list:
    """`_split` undone: the tensors back in their places."""
    it = iter(tensors)
    return [next(it) if x is _TENSOR else x for x in marked]


class Unstackable(Exception):
    """Why the repeated layers could not be traced once (the export traces the whole model)."""


_op = None


def layer_op():
    """`guardless::layer(Tensor[] inputs, int call) -> Tensor[]`, defined on first use."""
    global _op
    if _op is None:

        @torch.library.custom_op("guardless::layer", mutates_args=())
        def layer(inputs: list[torch.Tensor], call: int) -> list[torch.Tensor]:
            raise RuntimeError("guardless::layer stands for a layer while exporting; it never runs")

        @layer.register_fake
        def _(inputs, call):
            return _active.fake(inputs, call)

        _op = torch.ops.guardless.layer.default
    return _op


def _structure(m: torch.nn.Module) -> tuple:
    return tuple(
        (path, type(sub), sub.training,
         tuple((k, tuple(v.shape), v.dtype) for k, v in sub._parameters.items() if v is not None),
         tuple((k, tuple(v.shape), v.dtype) for k, v in sub._buffers.items() if v is not None))
        for path, sub in m.named_modules()
    )


def _meta(t: torch.Tensor) -> tuple:
    return (str(t.dtype), str(t.device), tuple(_canonical(d) for d in t.shape), tuple(_canonical(s) for s in t.stride()))


def _canonical(d) -> str:
    """A size or stride as text, each `Max`/`Min` whose argument always wins (by the symbols'
    ranges) replaced by that argument: torch writes a stride `32*Max(1, u0)` or `32*u0` by the
    path that made it, the same value where u0 >= 1."""
    if not isinstance(d, torch.SymInt):
        return str(d)
    from torch.utils._sympy.value_ranges import bound_sympy

    ranges = d.node.shape_env.var_to_range

    def decided(x):
        winner = x.args[0]
        for a in x.args[1:]:
            diff = a - winner if type(x).__name__ == "Max" else winner - a
            r = bound_sympy(diff, ranges)
            if r.lower >= 0:
                winner = a
            elif bound_sympy(-diff, ranges).lower < 0:
                return x  # undecided: kept
        return winner

    e = d.node.expr.replace(lambda x: type(x).__name__ in ("Max", "Min"), decided)
    return str(e)


def _same_value(a, b) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, _PLAIN):
        return a == b
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, functools.partial):  # an activation each layer made for itself
        return a.func is b.func and _same_value(a.args, b.args) and _same_value(a.keywords, b.keywords)
    return False


def repeated_layers(model: torch.nn.Module, at_least: int = 2) -> dict[str, torch.nn.Module]:
    """The members of every `ModuleList` holding `at_least` modules of one structure (the
    outermost such lists: a layer's own lists are inside its traced graph), by module path."""
    found: dict[str, torch.nn.Module] = {}
    inside: list[str] = []
    for path, m in model.named_modules():
        if any(path.startswith(p + ".") for p in inside) or not isinstance(m, torch.nn.ModuleList):
            continue
        by_structure: dict = {}
        for i, child in enumerate(m):
            by_structure.setdefault(_structure(child), []).append(i)
        for members in by_structure.values():
            if len(members) >= at_least:
                for i in members:
                    # A module in two lists (or twice in one) is wrapped once.
                    if not any(m[i] is f for f in found.values()):
                        found[f"{path}.{i}" if path else str(i)] = m[i]
        if any(len(v) >= at_least for v in by_structure.values()):
            inside.append(path)
    return found


@dataclass
class _Group:
    """Interchangeable calls: `first` was run on fake tensors; the others reuse its output shapes."""

    key: tuple  # structure, argument spec, input shapes
    leaves: list  # the non-tensor arguments
    first: int  # the call run on fake tensors
    reads: dict  # (submodule path, attribute) → the value the forward read
    inputs: list  # (shape, stride) of the first call's inputs
    outputs: list  # (shape, stride, dtype, device) of each output tensor
    out_leaves: list  # the outputs' leaves: _TENSOR, or a constant (a None for no attention weights)
    out_spec: object
    shape_env: object  # of the symbols in `inputs` and `outputs`


@dataclass
class _Call:
    path: str
    module: torch.nn.Module
    spec: object  # the pytree spec of (args, kwargs)
    leaves: list  # non-tensor leaves, _TENSOR where a tensor goes
    group: int | None = None

    def arguments(self, tensors) -> tuple:
        """(args, kwargs) of this call with `tensors` in the tensors' places."""
        return pytree.tree_unflatten(_merge(self.leaves, tensors), self.spec)


@dataclass
class Stacked:
    """What tracing the repeated layers once produced, for the writer."""

    calls: list = field(default_factory=list)  # _Call per guardless::layer call
    groups: list = field(default_factory=list)  # _Group
    graphs: dict = field(default_factory=dict)  # group index → LayerGraph


_active: "_Tracer" = None  # type: ignore[assignment]


class _Tracer:
    def __init__(self, layers: dict[str, torch.nn.Module]):
        self.layers = layers
        self.stacked = Stacked()
        self.originals: dict[str, object] = {}

    # -- the model's layers call the op ------------------------------------------------------
    def __enter__(self):
        global _active
        op = layer_op()
        _active = self
        for path, m in self.layers.items():
            self.originals[path] = m.__dict__.get("forward")
            m.forward = self._wrapped(path, m, op)
        return self

    def __exit__(self, *exc):
        global _active
        _active = None
        for path, m in reversed(list(self.layers.items())):
            if self.originals[path] is None:
                del m.forward
            else:
                m.forward = self.originals[path]

    def _wrapped(self, path, m, op):
        def forward(*args, **kwargs):
            leaves, spec = pytree.tree_flatten((args, kwargs))
            _check_arguments(path, leaves, spec)
            tensors, marked = _split(leaves)
            call = len(self.stacked.calls)
            self.stacked.calls.append(_Call(path, m, spec, marked))
            out = op(tensors, call)
            g = self.stacked.groups[self.stacked.calls[call].group]
            return pytree.tree_unflatten(_merge(g.out_leaves, out), g.out_spec)

        return forward

    # -- the fake kernel ---------------------------------------------------------------------
    def fake(self, inputs, index):
        call = self.stacked.calls[index]
        if call.group is None:
            call.group, fresh = self._group(call, inputs, index)
            if fresh is not None:
                return [t.clone() for t in fresh]
        g = self.stacked.groups[call.group]
        if _shape_env(inputs) is g.shape_env:
            return [torch.empty_strided(s, st, dtype=dt, device=dev) for s, st, dt, dev in g.outputs]
        # Traced again (run_decompositions) under new symbols: the output sizes are expressions
        # of the input sizes; written in the new ones, or (an expression this cannot rewrite)
        # the forward runs again.
        try:
            return _rewritten(g, inputs)
        except Unstackable:
            args, kwargs = call.arguments(inputs)
            out = pytree.tree_leaves(self._forward(call)(*args, **kwargs))
            return [t.clone() for t in out if isinstance(t, torch.Tensor)]

    def _forward(self, call: _Call):
        return self.originals[call.path] or type(call.module).forward.__get__(call.module)

    def _group(self, call: _Call, inputs, index):
        key = (_structure(call.module), call.spec, tuple(_meta(t) for t in inputs))
        for gi, g in enumerate(self.stacked.groups):
            if g.key == key and _same_value(g.leaves, call.leaves):
                if all(_same_value(v, _read(call.module, p, a)) for (p, a), v in g.reads.items()):
                    return gi, None
        if len(self.stacked.groups) >= max(2, len(self.layers) // 2):
            # Tracing a layer apart per group would cost more than tracing the model.
            g = self.stacked.groups[0]
            why = [f"{call.path}.{p}.{a}" if p else f"{call.path}.{a}" for (p, a), v in g.reads.items() if not _same_value(v, _read(call.module, p, a))]
            raise Unstackable(
                f"its layers differ ({len(self.stacked.groups) + 1} groups of {len(self.layers)} layers"
                + (f"; the forward reads {', '.join(why[:3])}, which differ" if why else "") + ")"
            )
        # A new group: run the layer's own forward on the fake inputs, noting what it reads.
        reads: dict = {}
        args, kwargs = call.arguments(inputs)
        before = pytree.tree_leaves((args, kwargs))
        with _reading(call.module, reads):
            out = self._forward(call)(*args, **kwargs)
        after, after_spec = pytree.tree_flatten((args, kwargs))
        if after_spec != call.spec or any(a is not b for a, b in zip(after, before)):
            # An argument list or dict the layer changed (a cache it appends to): the change
            # would stay inside the opaque call.
            raise Unstackable(f"the layer {call.path} changes the containers it is passed")
        leaves, out_spec = pytree.tree_flatten(out)
        if not all(isinstance(x, (torch.Tensor,) + _PLAIN) for x in leaves):
            raise Unstackable(f"the layer {call.path} returns something other than tensors and constants")
        flat, out_leaves = _split(leaves)
        free_in = set().union(*[_free(t) for t in inputs]) if inputs else set()
        if any(_free(t) - free_in for t in flat):
            raise Unstackable(f"the layer {call.path} makes sizes of its own (data-dependent)")
        outputs = [(t.shape, t.stride(), t.dtype, t.device) for t in flat]
        group = _Group(
            key,
            list(call.leaves),
            index,
            reads,
            [(t.shape, t.stride()) for t in inputs],
            outputs,
            out_leaves,
            out_spec,
            _shape_env(inputs),
        )
        self.stacked.groups.append(group)
        return len(self.stacked.groups) - 1, flat


def _rewritten(g: _Group, inputs) -> list:
    """Fake outputs for `inputs` (symbols of another trace) with the group's output sizes, each
    rewritten from the group's first inputs' symbols to the same places in `inputs`."""
    subst: dict = {}
    for (shape, stride), t in zip(g.inputs, inputs):
        for o, n in zip(itertools.chain(shape, stride), itertools.chain(t.shape, t.stride())):
            if isinstance(o, torch.SymInt) and o.node.expr.is_symbol:
                subst.setdefault(o.node.expr, n)

    def symbol(e):
        if e not in subst:
            raise Unstackable(f"{e} is no input size")
        return subst[e]

    def size(d):
        return d if isinstance(d, int) else _evaluate(d.node.expr, symbol, _SIZE_FUNCTIONS)

    return [
        torch.empty_strided([size(d) for d in shape], [size(d) for d in stride], dtype=dt, device=dev)
        for shape, stride, dt, dev in g.outputs
    ]


def _max(*args):
    return functools.reduce(torch.sym_max, args)


def _min(*args):
    return functools.reduce(torch.sym_min, args)


# torch's size functions `_evaluate` rewrites besides sums and products, by class name.
_SIZE_FUNCTIONS = {"FloorDiv": operator.floordiv, "Mod": operator.mod, "Max": _max, "Min": _min}


def _evaluate(e, symbol, functions: dict):
    """The sympy size expression `e` computed with `symbol(s)` for each symbol (SymInts, spec
    variables): sums, products, integers and the `functions` given; Unstackable otherwise."""
    if isinstance(e, sympy.Symbol):
        return symbol(e)
    if isinstance(e, sympy.Integer):
        return int(e)
    args = [_evaluate(a, symbol, functions) for a in e.args]
    if isinstance(e, sympy.Add):
        return functools.reduce(operator.add, args)
    if isinstance(e, sympy.Mul):
        return functools.reduce(operator.mul, args)
    if type(e).__name__ in functions:
        return functions[type(e).__name__](*args)
    raise Unstackable(f"a size {e} this does not rewrite")


def _shape_env(tensors):
    for t in tensors:
        for d in itertools.chain(t.shape, t.stride()):
            if isinstance(d, torch.SymInt):
                return d.node.shape_env
    return None


_CONTAINERS = (tuple, list, dict, type(None))


def _check_arguments(path: str, leaves: list, spec) -> None:
    """A layer's arguments must be tensors and plain values in tuples, lists and dicts: any other
    object (a key/value cache the layer updates, a config it edits) could carry a side effect out
    of the call, which one opaque call per layer would lose."""
    for x in leaves:
        if not isinstance(x, (torch.Tensor,) + _PLAIN):
            raise Unstackable(f"the layer {path} takes a {type(x).__name__} argument")
    stack = [spec]
    while stack:
        s = stack.pop()
        t = getattr(s, "type", None)
        if t is not None and not issubclass(t, _CONTAINERS):
            raise Unstackable(f"the layer {path} takes a {t.__name__} argument")
        stack.extend(s.children() if hasattr(s, "children") else s.children_specs)


def _free(t: torch.Tensor) -> set:
    out = set()
    for d in itertools.chain(t.shape, t.stride()):
        if isinstance(d, torch.SymInt):
            out |= d.node.expr.free_symbols
    return out


def _read(module: torch.nn.Module, path: str, attr: str):
    return getattr(module.get_submodule(path), attr, _MISSING)


class _reading:
    """Notes every plain attribute the layer's submodules read from their instance dictionaries."""

    def __init__(self, layer: torch.nn.Module, reads: dict):
        self.layer, self.reads, self.swapped = layer, reads, []

    def __enter__(self):
        reads = self.reads
        for path, m in self.layer.named_modules():
            cls = type(m)

            def getattribute(obj, name, _path=path, _cls=cls):
                d = object.__getattribute__(obj, "__dict__")
                if name in d and name not in _MODULE_STATE and name != "forward" and (_path, name) not in reads:
                    reads[(_path, name)] = d[name]
                return _cls.__getattribute__(obj, name)

            m.__class__ = type(cls.__name__, (cls,), {"__getattribute__": getattribute, "__module__": cls.__module__})
            self.swapped.append((m, cls))
        return self

    def __exit__(self, *exc):
        for m, cls in self.swapped:
            m.__class__ = cls


@dataclass
class LayerGraph:
    """One group's layer exported on its own (decomposed like the model)."""

    ep: object  # ExportedProgram
    user: dict  # placeholder name → position among the call's tensors
    weights: dict  # placeholder name → parameter or buffer name relative to the layer
    constants: dict = field(default_factory=dict)  # placeholder name → a tensor made in forward


def trace(model, example_inputs: tuple, dynamic_shapes, layers: dict, decompositions) -> tuple:
    """The model exported with each repeated layer as one `guardless::layer` call, decomposed;
    and the `Stacked` record with one exported graph per group of interchangeable calls."""
    with _Tracer(layers) as tracer:
        ep = torch.export.export(model, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
        ep = ep.run_decompositions(decompositions)
    stacked = tracer.stacked
    if not stacked.calls:
        raise Unstackable("the model never called its repeated layers")
    call_nodes = {n.args[1]: n for n in ep.graph.nodes if n.op == "call_function" and n.target is layer_op()}
    if sorted(call_nodes) != list(range(len(stacked.calls))):
        raise Unstackable("the exported graph does not keep every layer call")
    values = _symbol_values(ep, example_inputs)
    ranges = dict(ep.range_constraints)
    for gi, g in enumerate(stacked.groups):
        call, node = stacked.calls[g.first], call_nodes[g.first]
        example = [_example(a.meta["val"], values, call.path) for a in node.args[0]]
        stacked.graphs[gi] = _export_layer(tracer, call, example, node, ranges, decompositions)
    return ep, stacked


def _symbol_values(ep, example_inputs) -> dict:
    """The model's symbols at the example inputs: read off the graph's inputs where a dimension is
    one symbol, and the backed symbols' hints."""
    from torch.export.graph_signature import InputKind

    from .exporter import _backed_values

    values: dict = {}
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    users = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    tensors = [x for x in pytree.tree_leaves(tuple(example_inputs)) if isinstance(x, torch.Tensor)]
    for name, x in zip(users, tensors):
        v = placeholders[name].meta.get("val")
        if not isinstance(v, torch.Tensor):
            continue
        for d, real in zip(v.shape, x.shape):
            if isinstance(d, torch.SymInt) and d.node.expr.is_symbol:
                values[d.node.expr] = int(real)
    env = _shape_env([n.meta["val"] for n in placeholders.values() if isinstance(n.meta.get("val"), torch.Tensor)])
    if env is not None:
        values.update({k: int(val) for k, val in _backed_values(env).items() if k not in values})
    return values


def _example(t: torch.Tensor, values: dict, path: str) -> torch.Tensor:
    """A real tensor of `t`'s dtype, shape and strides at the example sizes (its values do not
    matter to tracing: the layer ran on fake tensors without reading them)."""

    def size(d):
        if isinstance(d, int):
            return d
        e = sympy.sympify(d.node.expr.xreplace(values))
        if not e.is_Integer:
            raise Unstackable(f"the layer {path} takes a size {d.node.expr} whose example value is unknown")
        return int(e)

    shape, stride = [size(d) for d in t.shape], [size(s) for s in t.stride()]
    x = torch.empty_strided(shape, stride, dtype=t.dtype)
    return x.normal_() if t.dtype.is_floating_point else x.zero_()


class _Flat(torch.nn.Module):
    """A layer called on its flattened tensor arguments, returning its flattened outputs."""

    def __init__(self, layer, forward, call: _Call):
        super().__init__()
        self.layer = layer
        self._call_forward = forward
        self._call = call

    def forward(self, inputs):
        args, kwargs = self._call.arguments(inputs)
        return [x for x in pytree.tree_leaves(self._call_forward(*args, **kwargs)) if isinstance(x, torch.Tensor)]


def _export_layer(tracer, call: _Call, example: list, node, ranges: dict, decompositions) -> LayerGraph:
    from torch.export.graph_signature import InputKind, OutputKind
    from torch.fx.experimental.dynamic_spec import SeqSpec, ShapesSpec, ShapeVar, TensorSpec

    outer = [a.meta["val"] for a in node.args[0]]
    variables: dict = {}

    def variable(x):
        if x not in variables:
            vr = ranges.get(x)
            lo = int(vr.lower) if vr is not None and math.isfinite(float(vr.lower)) else 0
            hi = int(vr.upper) if vr is not None and math.isfinite(float(vr.upper)) else None
            variables[x] = ShapeVar(f"gl_{x}", min=max(lo, 0), max=hi)
        return variables[x]

    def spec_of(d):
        if isinstance(d, int):
            return None
        try:
            # Sums and products of the model's symbols: what a spec can declare.
            return _evaluate(d.node.expr, variable, {})
        except Unstackable:
            raise Unstackable(f"the layer {call.path} takes a size {d.node.expr} guardless cannot pass on") from None

    specs = [TensorSpec([spec_of(d) for d in t.shape]) for t in outer]
    flat = _Flat(call.module, tracer._forward(call), call)
    ep = torch.export.export(flat, (example,), dynamic_shapes=ShapesSpec({"inputs": SeqSpec(specs)}))
    ep = ep.run_decompositions(decompositions)
    sig = ep.graph_signature
    if any(s.kind != OutputKind.USER_OUTPUT for s in sig.output_specs):
        raise Unstackable(f"the layer {call.path} mutates its inputs or buffers")
    user, weights, constants = {}, {}, {}
    for spec in sig.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            user[spec.arg.name] = len(user)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and spec.target.startswith("layer."):
            weights[spec.arg.name] = spec.target[len("layer."):]
        elif spec.kind == InputKind.CONSTANT_TENSOR and isinstance(ep.constants.get(spec.target), torch.Tensor):
            constants[spec.arg.name] = ep.constants[spec.target]
        else:
            raise Unstackable(f"the layer {call.path} has an input of kind {spec.kind} ({spec.arg.name})")
    return LayerGraph(ep, user, weights, constants)


def symbol_map(layer: LayerGraph, node) -> dict:
    """The layer graph's symbols → sympy expressions of the outer graph's symbols, for one call
    (`node`, the call in the outer graph); Unstackable where they cannot be matched."""
    placeholders = {n.name: n for n in layer.ep.graph.nodes if n.op == "placeholder"}
    outer = [a.meta["val"] for a in node.args[0]]
    mapping: dict = {}
    for name, pos in layer.user.items():
        inner = placeholders[name].meta["val"]
        for di, (i, o) in enumerate(zip(inner.shape, outer[pos].shape)):
            oe = o.node.expr if isinstance(o, torch.SymInt) else o
            if isinstance(i, torch.SymInt) and i.node.expr.is_symbol:
                if mapping.setdefault(i.node.expr, oe) != oe:
                    raise Unstackable(f"input {pos} dimension {di}: the layer's size is two of the model's")
            elif isinstance(i, int) and i != oe:
                raise Unstackable(f"input {pos} dimension {di}: the layer specialized a size the model keeps")
    missing = {s for s in layer.ep.range_constraints if s not in mapping}
    if missing:
        raise Unstackable(f"the layer's sizes {sorted(map(str, missing))} are none of the model's")
    return mapping
