"""Per-op fallback: a graph with ops guardless does not lower, cut into compiled segments and the
calls of those ops through PyTorch between them (Inductor's fallback kernels, as segments).

`plan(gm, extern)` puts every node of an ATen FX graph in a *stage*: even stages are compiled by
guardless, odd stages call their ops eagerly. A node goes to the first stage of its kind that
comes after every stage it reads from, so the graph is cut as few times as its dependencies
force — independent work on either side of an extern op stays in one segment. Sizes, getitem and
asserts go with whatever reads them. A mutation of an input (AOT autograd's `copy_` into a
placeholder, a KV-cache update) goes after every other reader of that input, which read its old
value. Each stage becomes its own FX graph; tensors pass between them as they are (views, no
copies): the compiled segments read their inputs in place, the eager ones are PyTorch's.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch

from .exporter import _SYM_OPS, _is_size_op


@dataclass
class Stage:
    """One segment: its FX graph, the outer values it reads (in its placeholders' order) and the
    outer nodes whose values it makes (its outputs, in order)."""

    compiled: bool
    module: torch.fx.GraphModule
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # the extern ops it calls (eager stages)


def _free(n: torch.fx.Node) -> bool:
    """A node that computes no tensor: it runs in whichever segment reads it."""
    t = n.target
    return (t in _SYM_OPS or _is_size_op(t) or t is operator.getitem
            or t is torch.ops.aten._assert_scalar.default)


def _mutated_input(n: torch.fx.Node):
    """The placeholder `n` writes (`copy_` into a graph input), or None."""
    if n.target is torch.ops.aten.copy_.default and n.args and isinstance(n.args[0], torch.fx.Node) \
            and n.args[0].op == "placeholder":
        return n.args[0]
    return None


def _stages(gm: torch.fx.GraphModule, extern: set) -> dict:
    """Each call node's stage (even: compiled, odd: eager)."""
    stage: dict = {}
    written: dict = {}  # placeholder → stage of its mutation: later readers read the new value
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        base = max([stage.get(a, written.get(a, 0)) for a in n.all_input_nodes], default=0)
        dst = _mutated_input(n)
        if dst is not None:
            base = max([base] + [stage[r] for r in dst.users if r is not n and r in stage])
        if n.target is operator.getitem and n.args[0] in stage:
            s = stage[n.args[0]]  # a tuple never crosses segments
        elif _free(n):
            s = base
        elif n in extern:
            s = base | 1
        else:
            s = base + (base & 1)
        stage[n] = s
        if dst is not None:
            written[dst] = s
    # Compiled work goes down to the segment that reads it (an input's update is then computed
    # in its storage by the segment that writes it back), but never past the update of an input
    # it reads (it read the old value).
    for n in reversed(gm.graph.nodes):
        if n not in stage or _free(n) or n in extern or _mutated_input(n) is not None:
            continue
        if not n.users or any(u not in stage for u in n.users):
            continue
        to = min(stage[u] for u in n.users)
        to = min([to] + [written[a] for a in n.all_input_nodes if a in written])
        to -= to & 1
        if to > stage[n]:
            stage[n] = to
    return stage


def _symbol_inputs(gm: torch.fx.GraphModule) -> dict:
    """The graph's SymInt arguments that are one symbol, by symbol."""
    out = {}
    for n in gm.graph.nodes:
        v = n.meta.get("val") if n.op == "placeholder" else None
        if isinstance(v, torch.SymInt) and v.node.expr.is_symbol:
            out[v.node.expr] = n
    return out


def _symbols_of(v, out: set) -> None:
    if isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        out.update(v.node.expr.free_symbols)
    elif isinstance(v, torch.Tensor):
        for d in (*v.shape, *v.stride()):
            _symbols_of(d, out)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _symbols_of(x, out)


def _stage_module(gm: torch.fx.GraphModule, nodes: list, later: set, symbols: dict, compiled: bool) -> Stage:
    """The FX graph of one stage's nodes: placeholders for what it reads from outside (meta
    kept), outputs for what is read after it (`later`: the nodes of later stages and the output)."""
    g = torch.fx.Graph()
    env: dict = {}
    st = Stage(compiled, None)
    inside = set(nodes)

    def arg(a: torch.fx.Node):
        if a not in env:
            if a.op == "get_attr":
                p = g.get_attr(a.target)
            else:
                p = g.placeholder(a.name)
                st.inputs.append(a)
            p.meta = dict(a.meta)
            env[a] = p
        return env[a]

    for n in nodes:
        env[n] = g.node_copy(n, arg)
        if not compiled and not _free(n):
            st.ops.append(str(n.target))
    if compiled:
        # The symbols its sizes mention that only an argument binds (a size no input tensor has).
        found: set = set()
        for n in nodes:
            _symbols_of(n.meta.get("val"), found)
        for sym in sorted(found, key=str):
            p = symbols.get(sym)
            if p is not None and p not in env:
                arg(p)
    st.outputs = [n for n in nodes if any(u not in inside and u in later for u in n.users)]
    g.output(tuple(env[n] for n in st.outputs))
    st.module = torch.fx.GraphModule(gm, g)
    return st


def plan(gm: torch.fx.GraphModule, extern: set) -> list[Stage]:
    """The stages of `gm`, `extern` (call nodes) run eagerly; a stage of sizes only runs eagerly
    too (Python ints, no call of compiled code)."""
    stage = _stages(gm, extern)
    by_stage: dict = {}
    for n in gm.graph.nodes:
        if n in stage:
            by_stage.setdefault(stage[n], []).append(n)
    symbols = _symbol_inputs(gm)
    out = []
    order = sorted(by_stage)
    for i, s in enumerate(order):
        nodes = by_stage[s]
        later = {n for t in order[i + 1:] for n in by_stage[t]}
        later |= {n for n in gm.graph.nodes if n.op == "output"}
        compiled = s % 2 == 0 and not all(_free(n) for n in nodes)
        out.append(_stage_module(gm, nodes, later, symbols, compiled))
    return out


class SegmentedFunction:
    """A graph run as its stages: compiled segments (`CompiledFunction`s) and eager calls of the
    ops guardless does not lower, values passed between them as they are."""

    def __init__(self, gm: torch.fx.GraphModule, stages: list[Stage], functions: list, name: str, stats):
        self.name = name
        self.stages = stages
        self.functions = functions  # per stage: a CompiledFunction, or the stage's GraphModule
        self._stats = stats
        self.extern_ops = [op for st in stages for op in st.ops]
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        slot = {n: i for i, n in enumerate(placeholders)}
        for st in stages:
            for n in st.outputs:
                slot[n] = len(slot)
        self._size = len(slot)
        self._args = len(placeholders)
        self._reads = [[slot[a] for a in st.inputs] for st in stages]
        self._writes = [[slot[n] for n in st.outputs] for st in stages]
        (output,) = [n for n in gm.graph.nodes if n.op == "output"]
        # What the graph returns: a value computed in a stage or passed in (a slot), or a constant
        # (None, a number, or a tensor attribute of the graph returned as it is).
        self._returns = []
        for o in output.args[0]:
            if isinstance(o, torch.fx.Node) and o.op == "get_attr":
                self._returns.append((False, getattr(gm, o.target)))
            elif isinstance(o, torch.fx.Node):
                self._returns.append((True, slot[o]))
            else:
                self._returns.append((False, o))
        self._extern = len(self.extern_ops)

    def __call__(self, *args):
        values = list(args) + [None] * (self._size - self._args)
        for fn, reads, writes in zip(self.functions, self._reads, self._writes):
            outs = fn(*[values[i] for i in reads])
            for i, v in zip(writes, outs):
                values[i] = v
        if self._extern:
            stats = self._stats()
            stats.extern_calls += self._extern
            stats.extern_calls_by_graph[self.name] = stats.extern_calls_by_graph.get(self.name, 0) + self._extern
        return [values[i] if node else i for node, i in self._returns]
