"""`torch.compile(model, backend=guardless.backend)`: graphs Dynamo captures, compiled in-process.

Dynamo hands over torch-level FX; AOT autograd lowers it to core ATen with the exporter's
decompositions (inference only), the exporter's writer turns it into the graph format, and the
Rust library (`guardless._native`) compiles it once for every size its symbols take. Calls pass
CPU tensors by data pointer and get outputs whose storage the library wrote — no copies.

Sizes follow Dynamo: `dynamic=True` gives backed symbols (Dynamo guards and recompiles on its own
terms; guardless's compile is valid at every size), `torch._dynamo.mark_unbacked(t, dim,
hint_override=n)` unbacked ones (never a recompile; `hint_override` is the optimization hint).

An op guardless does not lower is called through PyTorch between compiled segments of the graph
(`segments`: per-op fallback, counted by `stats().extern_calls`). A graph guardless cannot take
otherwise runs eagerly instead: a counted fallback with its reason, warned once per graph and
listed by `fallbacks()`.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field

import torch

from . import segments
from .segments import SegmentedFunction
from .exporter import ExportError, _backed_values, _decompositions, _DTYPES, _expr, _Writer

_TORCH_DTYPES = {v: k for k, v in _DTYPES.items()}


@dataclass(frozen=True)
class Fallback:
    graph: str
    reason: str


@dataclass
class Stats:
    """What the backend did in this process (see `stats()`)."""

    graphs: int = 0  # graphs compiled by guardless
    reused: int = 0  # graphs identical to one compiled before (a model's repeated pieces): not compiled again
    calls: int = 0  # calls of compiled graphs
    copied_input_bytes: int = 0  # inputs copied because their layout was not the graph's
    # Outputs copied whole into the inputs they mutate (0 when each is computed in its input's
    # storage, as a KV-cache update is: only the new rows are written).
    written_back_bytes: int = 0
    compile_seconds: float = 0.0
    # Graphs whose native code (CPU) was loaded from the disk cache an earlier process filled:
    # LLVM did not run for them.
    cache_hits: int = 0
    # Calls of ops guardless does not lower, made through PyTorch between compiled segments of a
    # graph (per-op fallback, `segments`): in all, and per graph name.
    extern_calls: int = 0
    extern_calls_by_graph: dict = field(default_factory=dict)


_fallbacks: list[Fallback] = []
_stats = Stats()


def fallbacks() -> list[Fallback]:
    """Every graph that ran eagerly instead, with the reason."""
    return list(_fallbacks)


def stats() -> Stats:
    return Stats(**{**vars(_stats), "extern_calls_by_graph": dict(_stats.extern_calls_by_graph)})


def reset() -> None:
    """Forgets the fallbacks and counts (not the compiled graphs)."""
    _fallbacks.clear()
    global _stats
    _stats = Stats()


try:
    # One error type for the compiler's and the runtime's errors and the backend's own.
    from ._native import GuardlessError
except ImportError:  # the binding is not built: export() still works

    class GuardlessError(Exception):
        """A graph guardless cannot compile, or a call it cannot run."""


def _native():
    try:
        from . import _native as n
    except ImportError as e:
        raise GuardlessError(
            "guardless._native is not built: `maturin develop` in python/ (ci/test does it)") from e
    return n


def _shape_env(gm: torch.fx.GraphModule):
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and getattr(v, "fake_mode", None) is not None:
            return v.fake_mode.shape_env
    return None


def _free_symbols(v, out: set) -> None:
    if isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        out.update(v.node.expr.free_symbols)
    elif isinstance(v, torch.Tensor):
        for d in v.shape:
            _free_symbols(d, out)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _free_symbols(x, out)


def _symbols(gm: torch.fx.GraphModule) -> list[dict]:
    """Every symbol the graph mentions: backed with its hint, unbacked with `hint_override`."""
    env = _shape_env(gm)
    found: set = set()
    for n in gm.graph.nodes:
        _free_symbols(n.meta.get("val"), found)
    out = []
    for sym in sorted(found, key=str):
        entry = {"name": str(sym)}
        vr = env.var_to_range.get(sym) if env is not None else None
        lo = int(vr.lower) if vr is not None and math.isfinite(float(vr.lower)) else None
        hi = int(vr.upper) if vr is not None and math.isfinite(float(vr.upper)) else None
        backed = env is not None and sym in _backed_values(env)
        entry.update(kind="backed" if backed else "unbacked", min=lo, max=hi)
        if backed:
            entry["hint"] = int(_backed_values(env)[sym])
        elif env is not None and sym in getattr(env, "var_to_hint_override", {}):
            entry["optimization_hint"] = int(env.var_to_hint_override[sym])
        out.append(entry)
    return out


def _mutation(n: torch.fx.Node):
    """`(input, value)` when `n` is `aten.copy_(input, value)` into a graph input: how AOT
    autograd keeps an input mutation in an inference graph (a KV-cache update)."""
    if n.target is not torch.ops.aten.copy_.default or len(n.args) != 2:
        return None
    dst, src = n.args
    if not isinstance(dst, torch.fx.Node) or dst.op != "placeholder" or not isinstance(src, torch.fx.Node):
        return None
    d, v = dst.meta.get("val"), src.meta.get("val")
    if not isinstance(d, torch.Tensor) or not isinstance(v, torch.Tensor):
        return None
    if d.dtype != v.dtype or list(d.shape) != list(v.shape):
        return None  # a broadcast or converting copy: lowered as an op (an error if unsupported)
    return dst, src


def _outputs(w: _Writer, values, returns: list) -> list:
    """The graph's outputs for the FX graph's `values`, and into `returns` how each value comes
    back: `("tensor", k)` (graph output k), `("int", k)` (a size, computed as graph output k, a
    0-d int64 tensor made by `scalar_tensor` of its expression) or `("constant", v)` (None, a
    bool, an int or a float the graph does not compute)."""
    outputs: list = []
    taken = {node["name"] for node in w.nodes}
    for i, o in enumerate(values):
        v = o.meta.get("val") if isinstance(o, torch.fx.Node) else o
        if isinstance(v, torch.Tensor):
            returns.append(("tensor", len(outputs)))
            outputs.append(w.value(o) if not w.errors else None)
        elif isinstance(v, torch.SymInt) or (isinstance(o, torch.fx.Node) and isinstance(v, int) and not isinstance(v, bool)):
            name = f"output_size_{i}"
            while name in taken:
                name += "_"
            taken.add(name)
            if not w.errors:
                w.nodes.append({"name": name, "op": "aten.scalar_tensor.default",
                                "args": {"s": w.value(o), "dtype": {"dtype": "i64"}}})
            returns.append(("int", len(outputs)))
            outputs.append({"tensor": name})
        elif not isinstance(o, torch.fx.Node) and (o is None or isinstance(o, (bool, int, float))):
            returns.append(("constant", o))
        else:
            w.errors.append(f"output {o!r}: a {type(v).__name__}, not a tensor or a size")
    return outputs if not w.errors else []


def from_fx(gm: torch.fx.GraphModule, name: str) -> tuple[dict, list, list, list]:
    """An ATen FX graph (AOT autograd's) as the graph format, how each placeholder is passed
    (`("tensor",)`, `("symbol", name)` (a SymInt argument that is one symbol) or `("skip",)`),
    the graph's constant tensors (its `get_attr` nodes: tensors made in forward), passed after
    the placeholders' tensors as the graph's last inputs, and how each of the FX graph's outputs
    comes back (see `_outputs`; the graph's outputs after those write its input mutations back:
    `mutates`)."""
    w = _Writer()
    mutations: list = []
    returns: list = []
    inputs: list[dict] = []
    constant_inputs: list[dict] = []
    constants: list[torch.Tensor] = []
    plan: list = []
    outputs: list = []
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            v = n.meta.get("val")
            if isinstance(v, torch.Tensor):
                if v.dtype not in _DTYPES:
                    w.errors.append(f"input '{n.name}': dtype {v.dtype}")
                    continue
                w.placeholder(n, "user", inputs)
                plan.append(("tensor",))
            elif isinstance(v, torch.SymInt):
                w.refs[n] = _expr(v)
                plan.append(("symbol", str(v.node.expr)) if v.node.expr.is_symbol else ("skip",))
            elif isinstance(v, int) and not isinstance(v, bool):
                w.refs[n] = v
                plan.append(("skip",))
            else:
                w.errors.append(f"input '{n.name}': a {type(v).__name__} argument")
        elif n.op == "get_attr":
            v = getattr(gm, n.target, None)
            if not isinstance(v, torch.Tensor) or v.dtype not in _DTYPES:
                w.errors.append(f"node '{n.name}': attribute '{n.target}' is not a tensor guardless reads")
                continue
            n.meta.setdefault("val", v)
            w.placeholder(n, "user", constant_inputs)
            constants.append(v)
        elif n.op == "call_function" and _mutation(n) is not None:
            mutations.append(_mutation(n))
            # `copy_` returns its input, now holding the value.
            if n.args[1] in w.refs:
                w.refs[n] = w.refs[n.args[1]]
        elif n.op == "call_function":
            w.call(n)
        elif n.op == "output":
            outputs = _outputs(w, n.args[0], returns)
        else:
            w.errors.append(f"node '{n.name}': {n.op} nodes are not supported")
    if not w.errors:
        seen = set()
        for dst, src in mutations:
            if dst.name in seen:
                w.errors.append(f"input '{dst.name}': mutated twice")
            seen.add(dst.name)
            value = w.value(src)
            if "mutates" in value or not isinstance(value, dict):
                w.errors.append(f"input '{dst.name}': its new value is not a tensor node")
                continue
            outputs.append({**value, "mutates": dst.name})
    graph = w.graph(name, _symbols(gm), inputs + constant_inputs, outputs)
    return graph, plan, constants, returns


def _described(a: torch.Tensor) -> tuple:
    """A tensor as the native call takes it: data pointer, bytes readable from it, dtype name,
    shape and strides (elements)."""
    return (a.data_ptr(), a.untyped_storage().nbytes() - a.storage_offset() * a.element_size(),
            _DTYPES[a.dtype], a.shape, a.stride())


class CompiledFunction:
    """A compiled graph, called by AOT autograd with its flat arguments."""

    def __init__(self, compiled, graph: dict, plan: list, name: str, device: str = "cpu",
                 constants: list | None = None, returns: list | None = None):
        self.compiled = compiled
        self.graph = graph
        # How each value returned comes back (see `_outputs`); graph outputs past those mutate
        # inputs, which the call writes in place.
        self.returns = returns if returns is not None else [("tensor", k) for k in range(len(graph["outputs"]))]
        self.user_outputs = sum(r[0] != "constant" for r in self.returns)
        self.plan = plan
        self.name = name
        self.device = device  # "cpu", or "cuda" (GPU 0)
        # The graph's constant tensors, on its device, passed after the arguments' tensors (moved
        # as real tensors: AOT autograd compiles under fake tensors).
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            self.constants = [c.detach().to(device) for c in constants or []]
        # Per call, only what the plan needs: the arguments that are tensors, those that bind
        # symbols, and the constants' descriptions (fixed: made once).
        self._tensor_args = [i for i, p in enumerate(plan) if p[0] == "tensor"]
        self._symbol_args = [(i, p[1]) for i, p in enumerate(plan) if p[0] == "symbol"]
        self._constant_inputs = [_described(c) for c in self.constants]
        self._first_constant = len(self._tensor_args)
        self._plain = all(r[0] == "tensor" for r in self.returns)

    def __call__(self, *args):
        given = [args[i] for i in self._tensor_args]
        cpu = self.device == "cpu"
        tensors = []
        for a in given:
            if not cpu and a.is_cpu and a.dim() == 0:
                a = a.to("cuda:0")  # a CPU scalar: one element copied
            if not (a.is_cpu if cpu else a.is_cuda and a.get_device() == 0):
                raise GuardlessError(f"{self.name}: a tensor on {a.device}; this graph was compiled for {self.device}")
            tensors.append(_described(a))
        tensors += self._constant_inputs
        symbols = {name: int(args[i]) for i, name in self._symbol_args}
        if not cpu:
            return self._returned(self._call_cuda(tensors, symbols))
        outs, copied, written_back = self.compiled.run(tensors, symbols)
        _stats.calls += 1
        _stats.copied_input_bytes += copied
        _stats.written_back_bytes += written_back
        results = []
        for o in outs[:self.user_outputs]:
            if type(o) is not tuple:
                # A NumPy array of the output's dtype and layout viewing storage the call wrote.
                results.append(torch.from_numpy(o))
            elif o[0] == "bf16":
                results.append(torch.from_numpy(o[1]).view(torch.bfloat16))
            else:
                _, k, dtype, shape, strides, offset = o
                dt = _TORCH_DTYPES[dtype]
                if k >= self._first_constant:
                    # A view of a constant: the caller may write to it; the graph keeps its own.
                    src = self.constants[k - self._first_constant].clone()
                else:
                    src = given[k]
                if src.dtype != dt:
                    src = src.view(dt)
                results.append(torch.as_strided(src, shape, strides, src.storage_offset() + offset))
        return self._returned(results)

    def _returned(self, results: list) -> list:
        """The FX graph's outputs from the graph's: sizes as ints, constants as they were."""
        if self._plain:
            return results
        return [results[r[1]] if r[0] == "tensor" else int(results[r[1]]) if r[0] == "int" else r[1]
                for r in self.returns]


    def _call_cuda(self, tensors, symbols):
        """On torch's current stream: inputs read in place, each output's storage copied once into
        a buffer torch allocates."""
        device = torch.device("cuda", 0)
        buffers = []

        def alloc(spans):
            # At least 16 bytes, so that an empty output still views as any dtype.
            buffers.extend(torch.empty(max(n, 16), dtype=torch.uint8, device=device) for n in spans)
            return [b.data_ptr() for b in buffers]

        stream = torch.cuda.current_stream(device).cuda_stream
        outs, copied = self.compiled.run(tensors, symbols, stream, alloc)
        _stats.calls += 1
        _stats.copied_input_bytes += copied
        return [torch.as_strided(b.view(_TORCH_DTYPES[dtype]), shape, strides, offset)
                for b, (dtype, shape, strides, offset) in zip(buffers, outs)][:self.user_outputs]


def _fallback(name: str, reason: str) -> None:
    _fallbacks.append(Fallback(name, reason))
    warnings.warn(f"guardless: {name} runs eagerly: {reason}", stacklevel=3)


# torch.compile's modes (None: not given).
_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def make_backend(fallback: bool = True, extern_ops: bool | None = None):
    """A `torch.compile` backend. With `fallback=False` a graph guardless cannot take is an error
    instead of a counted fallback to eager. With `extern_ops` (by default as `fallback`) a graph
    with ops guardless does not lower is compiled around them, and they are called through
    PyTorch between its compiled segments (`segments`; counted by `stats().extern_calls`);
    without it such a graph is a fallback (or the error). `.compiled` lists the compiled graphs
    (segments included), `.segmented` the graphs cut into segments."""
    if extern_ops is None:
        extern_ops = fallback

    def backend(gm: torch.fx.GraphModule, example_inputs, *, mode: str | None = None,
                options: dict | None = None, name: str | None = None):
        # `torch.compile(..., mode=, options=)` hands its mode and options to the backend (as
        # engines' compile configurations do: Hugging Face's CompileConfig says
        # mode="reduce-overhead"). Every mode compiles the same program here (guardless has no
        # autotuning, and its CUDA path launches without capturing graphs); an unknown mode or
        # option is an error, as it is for Inductor.
        from torch._functorch.aot_autograd import aot_module_simplified

        if mode not in _MODES:
            raise GuardlessError(f"torch.compile mode {mode!r}: guardless knows {sorted(m for m in _MODES if m)}")
        if options:
            raise GuardlessError(f"torch.compile options {sorted(options)}: guardless takes no options")
        name = f"graph_{_stats.graphs + len(_fallbacks)}"
        if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
            raise GuardlessError(
                f"{name}: guardless compiles inference only, and this graph requires gradients; "
                "call the model under torch.no_grad() or torch.inference_mode()")
        # A CPU scalar (a 0-d tensor: a Python float Dynamo passes as a tensor) goes with tensors
        # of any device, as in PyTorch.
        devices = {x.device for x in example_inputs
                   if isinstance(x, torch.Tensor) and not (x.is_cpu and x.dim() == 0)}
        devices = devices or {torch.device("cpu")}
        kinds = {d.type for d in devices}
        device = "cpu"
        if kinds == {"cuda"} and all(d.index in (None, 0) for d in devices) and _native().cuda_available():
            device = "cuda"
        elif kinds - {"cpu"}:
            reason = (f"tensors on {sorted(str(d) for d in devices)}: guardless runs CPU tensors, "
                      "or tensors all on cuda:0 where a CUDA driver is present")
            if not fallback:
                raise GuardlessError(f"{name}: {reason}")
            _fallback(name, reason)
            return gm.forward

        def compile_graph(aten: torch.fx.GraphModule, graph_name: str) -> CompiledFunction:
            graph, plan, constants, returns = from_fx(aten, graph_name)
            # The pieces of a model between its graph breaks (a decoder's layers between
            # attention calls) are often the same graph but for its name: compiled once.
            key = (device, json.dumps({**graph, "name": ""}, sort_keys=True))
            compiled = pieces.get(key)
            if compiled is None:
                text = json.dumps(graph)
                compiled = _native().compile_cuda(text) if device == "cuda" else _native().compile(text)
                pieces[key] = compiled
                _stats.graphs += 1
                _stats.compile_seconds += compiled.compile_seconds
                if device == "cpu" and compiled.cache_use == "hit":
                    _stats.cache_hits += 1
            else:
                _stats.reused += 1
            fn = CompiledFunction(compiled, graph, plan, graph_name, device, constants, returns)
            backend.compiled.append(fn)
            return fn

        def compile_segmented(aten: torch.fx.GraphModule, extern: set) -> SegmentedFunction:
            """The graph's other nodes compiled around `extern`, which run through PyTorch. A
            segment that names further nodes it cannot translate adds them, and the graph is cut
            again."""
            by_name = {n.name: n for n in aten.graph.nodes}
            while True:
                stages = segments.plan(aten, extern)
                functions, compiled = [], len(backend.compiled)
                try:
                    for i, st in enumerate(stages):
                        functions.append(compile_graph(st.module, f"{name}_segment{i}") if st.compiled else st.module)
                except ExportError as e:
                    more = {by_name[n.name] for n in e.nodes if n.name in by_name} - extern
                    if not more:
                        raise
                    del backend.compiled[compiled:]
                    extern |= more
                    continue
                fn = SegmentedFunction(aten, stages, functions, name, lambda: _stats)
                backend.segmented.append(fn)
                return fn

        def compile_forward(aten: torch.fx.GraphModule, _inputs):
            try:
                try:
                    return compile_graph(aten, name)
                except ExportError as e:
                    if not (extern_ops and e.nodes):
                        raise
                    return compile_segmented(aten, set(e.nodes))
            except (ExportError, GuardlessError) as e:
                if not fallback:
                    raise
                _fallback(name, str(e))
                return aten

        # Input mutations stay in the graph (`copy_` into the input, as for Inductor): guardless
        # writes them itself — a KV-cache update in place, only its new rows — instead of AOT
        # autograd copying a returned whole new value into the input after the call.
        return aot_module_simplified(gm, example_inputs, fw_compiler=compile_forward,
                                     decompositions=_decompositions(),
                                     keep_inference_input_mutations=True)

    pieces: dict = {}  # (device, the graph's JSON without its name) → its compiled program
    backend.compiled = []  # every CompiledFunction, for inspection (its .graph is the JSON)
    backend.segmented = []  # every SegmentedFunction
    return backend


backend = make_backend()
