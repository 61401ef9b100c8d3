//! Fusion: computed buffers join kernels whose iteration space they fit — the same row
//! dimensions (and, for reductions, the same row contents), as Inductor groups by (numel, reduction
//! numel). A buffer joins a producer's kernel (vertical: the value stays on chip) or a sibling's
//! that reads the same data (horizontal), whichever saves the most memory traffic at the
//! optimization hints; a read across members is allowed only at the element (or row) the reader is
//! computing, so each row is self-contained. Library kernels and externs are never fused into.

use guardless_ir::loop_ir::{BufferId, BufferKind, Layout, Loops, Program};
use guardless_ir::sym::{Expr, ShapeEnv};
use rustc_hash::FxHashMap;

use super::deps::{loads, Deps};
use super::{Kernel, Member, Role};

/// How a buffer's loop variables map onto its kernel's variables (positions in outer ++ inner;
/// `None`: a dimension of size 1, read as 0).
#[derive(Clone, Debug)]
struct Fit {
    role: Role,
    vars: Vec<Option<usize>>,
    rvars: Vec<Option<usize>>,
}

#[derive(Clone, Debug)]
pub struct Group {
    pub members: Vec<BufferId>,
    fits: Vec<Fit>,
    pub outer: Vec<Expr>,
    pub inner: Vec<Expr>,
    /// The kernel's variables, outer then inner.
    vars: Vec<Expr>,
}

/// A step before configuration: a fused group, or a buffer that is not a generated kernel.
pub enum Planned {
    Group(usize),
    Buffer(BufferId),
}

fn same_sizes(env: &mut ShapeEnv, a: &[Expr], b: &[Expr]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(&x, &y)| {
            let c = env.pool_mut().eq(x, y);
            x == y || env.statically_known_true(c)
        })
}

/// The positions of the dimensions not provably of size 1.
fn non_unit(env: &mut ShapeEnv, sizes: &[Expr]) -> Vec<usize> {
    (0..sizes.len())
        .filter(|&k| {
            let one = env.pool_mut().one();
            let c = env.pool_mut().eq(sizes[k], one);
            !env.statically_known_true(c)
        })
        .collect()
}

fn positions(kept: &[usize], len: usize, base: usize) -> Vec<Option<usize>> {
    let mut out = vec![None; len];
    for (j, &k) in kept.iter().enumerate() {
        out[k] = Some(base + j);
    }
    out
}

fn computed(p: &Program, b: BufferId) -> Option<&Loops> {
    match &p.buffers[b.index()].kind {
        BufferKind::Computed { loops, .. } => Some(loops),
        _ => None,
    }
}

/// The reduced dimensions a reduction's kernel loops over: those not provably of size 1, but at
/// least one. A reduction whose reduced sizes are all known to be 1 (a backed size guarded equal
/// to 1, or an unbacked one asserted so after lowering) keeps one unit dimension: without any its
/// kernel would be pointwise, and the emitters would reduce across the row's elements.
fn reduced_dims(env: &mut ShapeEnv, rranges: &[Expr]) -> Vec<usize> {
    let rk = non_unit(env, rranges);
    if rk.is_empty() && !rranges.is_empty() {
        vec![0]
    } else {
        rk
    }
}

/// A new group seeded by `b`: a reduction's rows, or a pointwise buffer's elements.
fn seed(env: &mut ShapeEnv, b: BufferId, loops: &Loops) -> Group {
    let kept = non_unit(env, &loops.ranges);
    let outer: Vec<Expr> = kept.iter().map(|&k| loops.ranges[k]).collect();
    let mut vars: Vec<Expr> = kept.iter().map(|&k| loops.vars[k]).collect();
    let (inner, fit) = match &loops.reduction {
        Some((_, rranges, rvars)) => {
            let rk = reduced_dims(env, rranges);
            vars.extend(rk.iter().map(|&k| rvars[k]));
            let inner: Vec<Expr> = rk.iter().map(|&k| rranges[k]).collect();
            let fit = Fit {
                role: Role::Reduction,
                vars: positions(&kept, loops.ranges.len(), 0),
                rvars: positions(&rk, rranges.len(), kept.len()),
            };
            (inner, fit)
        }
        None => (
            Vec::new(),
            Fit {
                role: Role::Elementwise,
                vars: positions(&kept, loops.ranges.len(), 0),
                rvars: Vec::new(),
            },
        ),
    };
    Group {
        members: vec![b],
        fits: vec![fit],
        outer,
        inner,
        vars,
    }
}

/// How `loops` fits group `g` (possibly turning a pointwise group into a reduction's rows: the
/// returned sizes are the group's new outer and inner).
fn fit(env: &mut ShapeEnv, g: &Group, loops: &Loops) -> Option<(Fit, Vec<Expr>, Vec<Expr>)> {
    let kept = non_unit(env, &loops.ranges);
    let dims: Vec<Expr> = kept.iter().map(|&k| loops.ranges[k]).collect();
    let all: Vec<Expr> = g.outer.iter().chain(&g.inner).copied().collect();
    match &loops.reduction {
        Some((_, rranges, _)) => {
            let rk = reduced_dims(env, rranges);
            let rdims: Vec<Expr> = rk.iter().map(|&k| rranges[k]).collect();
            let whole: Vec<Expr> = dims.iter().chain(&rdims).copied().collect();
            // Same rows and row contents; or a pointwise group over exactly the reduced elements.
            let ok = if g.inner.is_empty() {
                same_sizes(env, &whole, &all) && !rdims.is_empty()
            } else {
                same_sizes(env, &dims, &g.outer) && same_sizes(env, &rdims, &g.inner)
            };
            ok.then(|| {
                let f = Fit {
                    role: Role::Reduction,
                    vars: positions(&kept, loops.ranges.len(), 0),
                    rvars: positions(&rk, rranges.len(), kept.len()),
                };
                (f, dims.clone(), rdims)
            })
        }
        None => {
            let role = if same_sizes(env, &dims, &all) {
                Role::Elementwise
            } else if !g.inner.is_empty() && same_sizes(env, &dims, &g.outer) {
                Role::RowValue
            } else {
                return None;
            };
            let f = Fit {
                role,
                vars: positions(&kept, loops.ranges.len(), 0),
                rvars: Vec::new(),
            };
            Some((f, g.outer.clone(), g.inner.clone()))
        }
    }
}

/// Replaces a buffer's loop variables by the group's.
fn to_group_vars(env: &mut ShapeEnv, e: Expr, loops: &Loops, f: &Fit, vars: &[Expr]) -> Expr {
    let zero = env.pool_mut().zero();
    let mut map: FxHashMap<_, Expr> = FxHashMap::default();
    let rv: &[Expr] = match &loops.reduction {
        Some((_, _, rvars)) => rvars,
        None => &[],
    };
    for (v, pos) in loops
        .vars
        .iter()
        .zip(&f.vars)
        .chain(rv.iter().zip(&f.rvars))
    {
        let id = env.pool().as_symbol(*v).expect("loop vars are symbols");
        map.insert(id, pos.map_or(zero, |p| vars[p]));
    }
    let s = env.pool_mut().substitute(e, &|id| map.get(&id).copied());
    env.simplify(s)
}

/// Whether every read of a group member by the candidate is of the element (or row value) the
/// candidate computes at that point.
fn aligned(p: &mut Program, g: &Group, x: BufferId, fx: &Fit, vars: &[Expr]) -> bool {
    let (loops, body) = match &p.buffers[x.index()].kind {
        BufferKind::Computed { loops, body } => (loops.clone(), body.clone()),
        _ => return false,
    };
    for (buf, index) in loads(&body) {
        let Some(k) = g.members.iter().position(|&m| m == buf) else {
            continue;
        };
        let fm = &g.fits[k];
        if fm.role == Role::Elementwise && fx.role == Role::RowValue {
            return false;
        }
        let mloops = computed(p, buf).expect("members are computed").clone();
        let layout: Layout = p.buffers[buf.index()].layout.clone();
        let env = &mut p.env;
        let store = layout.index(env, &mloops.vars);
        let want = to_group_vars(env, store, &mloops, fm, vars);
        let got = to_group_vars(env, index, &loops, fx, vars);
        if want != got {
            return false;
        }
    }
    true
}

/// Units of the dependency graph: a fused group, or a buffer of its own (a unit is named by its
/// first buffer). `order` is a topological order of the units — a unit is above every unit it
/// depends on — kept as groups grow (Pearce and Kelly's dynamic topological sort), so a search
/// for a path down to a unit stops at units below it: the cycle check no longer walks every
/// earlier unit of a deep model.
struct Units {
    unit_of: Vec<usize>,
    members: Vec<Vec<BufferId>>,
    /// By unit: its position in the order (distinct; gaps where units merged).
    order: Vec<usize>,
    /// By buffer: the buffers that must come after it (`Deps::after`, reversed).
    later: Vec<Vec<BufferId>>,
    /// Whether every dependency of the program points to an earlier buffer (buffer order is
    /// then the starting order); else no search is bounded.
    ordered: bool,
    /// By unit: units found to depend on it. Units only gain dependencies as groups grow, so
    /// what was found stays true: the next layer's search stops at the previous layer.
    reaching: FxHashMap<usize, rustc_hash::FxHashSet<usize>>,
}

impl Units {
    fn new(deps: &Deps, n: usize) -> Units {
        let mut later = vec![Vec::new(); n];
        let mut ordered = true;
        for (i, after) in deps.after.iter().enumerate() {
            for r in after {
                later[r.index()].push(BufferId(i as u32));
            }
        }
        for i in 0..n {
            ordered &= deps.reads[i]
                .iter()
                .chain(&deps.after[i])
                .all(|r| r.index() < i);
        }
        Units {
            unit_of: (0..n).collect(),
            members: (0..n).map(|i| vec![BufferId(i as u32)]).collect(),
            order: (0..n).collect(),
            later,
            ordered,
            reaching: FxHashMap::default(),
        }
    }

    /// The units unit `u` depends on directly (`up`: those directly depending on it).
    fn next<'a>(&'a self, deps: &'a Deps, u: usize, up: bool) -> impl Iterator<Item = usize> + 'a {
        self.members[u].iter().flat_map(move |m| {
            let (direct, ordered) = if up {
                (&deps.readers, &self.later)
            } else {
                (&deps.reads, &deps.after)
            };
            direct[m.index()]
                .iter()
                .chain(&ordered[m.index()])
                .map(|r| self.unit_of[r.index()])
        })
    }

    fn below<'a>(&'a self, deps: &'a Deps, u: usize) -> impl Iterator<Item = usize> + 'a {
        self.next(deps, u, false)
    }

    /// Whether unit `from` depends (through any path) on unit `to`. Units marked with `stamp`
    /// in `seen` are known not to.
    fn depends(
        &mut self,
        deps: &Deps,
        from: usize,
        to: usize,
        seen: &mut [u32],
        stamp: u32,
    ) -> bool {
        let floor = if self.ordered { self.order[to] } else { 0 };
        let mut known = self.reaching.remove(&to).unwrap_or_default();
        let mut stack = vec![from];
        let mut found = false;
        while let Some(u) = stack.pop() {
            if u == to || known.contains(&u) {
                known.insert(from);
                found = true;
                break;
            }
            // Below `to` in the order: nothing down from here reaches it.
            if seen[u] == stamp || self.order[u] < floor {
                continue;
            }
            seen[u] = stamp;
            stack.extend(self.below(deps, u).filter(|&v| v != u));
        }
        self.reaching.insert(to, known);
        found
    }

    /// Buffer `x` (a unit of its own) joins unit `g`; the order is repaired for `x`'s
    /// dependencies that were above `g` (none of them depends on `g`: checked before).
    fn merge(&mut self, deps: &Deps, x: usize, g: usize, seen: &mut [u32], stamp: &mut u32) {
        self.unit_of[x] = g;
        self.members[g].push(BufferId(x as u32));
        self.members[x].clear();
        if !self.ordered {
            return;
        }
        let dependencies: Vec<usize> = deps.reads[x]
            .iter()
            .chain(&deps.after[x])
            .map(|r| self.unit_of[r.index()])
            .filter(|&u| u != g)
            .collect();
        for u in dependencies {
            if self.order[u] > self.order[g] {
                self.reorder(deps, u, g, seen, stamp);
            }
        }
    }

    /// Makes room for the new dependency of `g` on `u` (`u` above `g`): `g` and the units above
    /// it that are below `u` move above `u` and the units it depends on that are above `g`.
    fn reorder(&mut self, deps: &Deps, u: usize, g: usize, seen: &mut [u32], stamp: &mut u32) {
        let (low, high) = (self.order[g], self.order[u]);
        let mut rising = self.region(deps, g, true, |at| at < high, seen, stamp);
        let mut sinking = self.region(deps, u, false, |at| at > low, seen, stamp);
        sinking.sort_by_key(|&w| self.order[w]);
        rising.sort_by_key(|&w| self.order[w]);
        let mut positions: Vec<usize> = sinking
            .iter()
            .chain(&rising)
            .map(|&w| self.order[w])
            .collect();
        positions.sort_unstable();
        for (w, at) in sinking.into_iter().chain(rising).zip(positions) {
            self.order[w] = at;
        }
    }

    /// The units reached from `start` (itself included) going up (dependents) or down
    /// (dependencies) through units whose position in the order satisfies `within`.
    fn region(
        &self,
        deps: &Deps,
        start: usize,
        up: bool,
        within: impl Fn(usize) -> bool,
        seen: &mut [u32],
        stamp: &mut u32,
    ) -> Vec<usize> {
        *stamp += 1;
        let mut found = Vec::new();
        let mut stack = vec![start];
        while let Some(w) = stack.pop() {
            if seen[w] == *stamp || !within(self.order[w]) {
                continue;
            }
            seen[w] = *stamp;
            found.push(w);
            stack.extend(self.next(deps, w, up).filter(|&v| v != w));
        }
        found
    }
}

fn bytes(p: &mut Program, b: BufferId) -> i64 {
    let buf = &p.buffers[b.index()];
    let (sizes, size) = (buf.layout.sizes.clone(), buf.dtype.size() as i64);
    let numel = sizes.iter().fold(p.env.pool_mut().one(), |acc, &s| {
        p.env.pool_mut().mul(acc, s)
    });
    p.env.optimization_hint(numel).saturating_mul(size)
}

/// Groups the computed buffers of `p` into kernels.
pub fn fuse(p: &mut Program, deps: &Deps) -> Vec<Group> {
    let n = p.buffers.len();
    let mut units = Units::new(deps, n);
    let mut group_of_unit: FxHashMap<usize, usize> = FxHashMap::default();
    let mut groups: Vec<Group> = Vec::new();
    let mut seen = vec![0u32; n];
    let mut stamp = 0u32;
    for i in 0..n {
        let x = BufferId(i as u32);
        let Some(loops) = computed(p, x).cloned() else {
            continue;
        };
        // Candidates: producers' groups (vertical) and groups of buffers reading the same data.
        let mut scores: Vec<(usize, i64)> = Vec::new();
        for &r in &deps.reads[i] {
            let rb = bytes(p, r);
            if let Some(&g) = group_of_unit.get(&units.unit_of[r.index()]) {
                add_score(&mut scores, g, rb);
            }
            for &sib in &deps.readers[r.index()] {
                if sib.index() < i {
                    if let Some(&g) = group_of_unit.get(&units.unit_of[sib.index()]) {
                        add_score(&mut scores, g, rb);
                    }
                }
            }
        }
        // Highest score first; the earliest group on ties.
        scores.sort_by_key(|&(g, s)| (-s, g));
        let mut joined = None;
        for (g, score) in scores {
            if score <= 0 {
                break;
            }
            let Some((f, outer, inner)) = fit(&mut p.env, &groups[g], &loops) else {
                continue;
            };
            let mut trial = groups[g].clone();
            trial.outer = outer;
            trial.inner = inner;
            if !aligned(p, &trial, x, &f, &trial.vars.clone()) {
                continue;
            }
            // No path from the group to x through another unit (it would make a cycle).
            let gu = units.unit_of[groups[g].members[0].index()];
            // One search for all of x's dependencies: a unit seen not to reach the group from
            // one of them does not from another.
            stamp += 1;
            let cyclic = deps.reads[i].iter().chain(&deps.after[i]).any(|r| {
                let u = units.unit_of[r.index()];
                u != gu && units.depends(deps, u, gu, &mut seen, stamp)
            });
            if cyclic {
                continue;
            }
            trial.members.push(x);
            trial.fits.push(f);
            groups[g] = trial;
            units.merge(deps, i, gu, &mut seen, &mut stamp);
            joined = Some(g);
            break;
        }
        if joined.is_none() {
            group_of_unit.insert(i, groups.len());
            groups.push(seed(&mut p.env, x, &loops));
        }
    }
    groups
}

fn add_score(scores: &mut Vec<(usize, i64)>, g: usize, b: i64) {
    match scores.iter_mut().find(|(h, _)| *h == g) {
        Some((_, s)) => *s = s.saturating_add(b),
        None => scores.push((g, b)),
    }
}

/// The kernel for a group: roles, passes, which members are stored, a name from its nodes.
pub fn kernel_of(p: &mut Program, deps: &Deps, g: &Group, index: usize) -> Kernel {
    let mut members: Vec<Member> = Vec::new();
    for (k, &b) in g.members.iter().enumerate() {
        let mut pass = 0;
        for r in &deps.reads[b.index()] {
            if let Some(j) = g.members.iter().position(|m| m == r) {
                let pm = &members[j];
                pass = pass.max(pm.pass + usize::from(pm.role == Role::Reduction));
            }
        }
        members.push(Member {
            buffer: b,
            role: g.fits[k].role,
            pass,
            stored: None,
        });
    }
    for k in 0..members.len() {
        let b = members[k].buffer;
        let outside = deps.readers[b.index()]
            .iter()
            .any(|r| !g.members.contains(r));
        let later = deps.readers[b.index()].iter().any(|r| {
            g.members
                .iter()
                .position(|m| m == r)
                .is_some_and(|j| members[j].pass > members[k].pass)
        });
        members[k].stored = if deps.is_output[b.index()] {
            Some("graph output")
        } else if outside {
            Some("read by another step")
        } else if later && members[k].role == Role::Elementwise {
            Some("read in a later pass")
        } else {
            None
        };
    }
    let mut origins: Vec<String> = Vec::new();
    for m in &g.members {
        for o in &p.buffers[m.index()].origins {
            if !origins.contains(o) {
                origins.push(o.clone());
            }
        }
    }
    let pool = p.env.pool_mut();
    let rows = g.outer.iter().fold(pool.one(), |a, &s| pool.mul(a, s));
    let row_len = g.inner.iter().fold(pool.one(), |a, &s| pool.mul(a, s));
    let stem: Vec<String> = origins
        .iter()
        .take(4)
        .map(|o| crate::text::identifier(o))
        .collect();
    let kind = if g.inner.is_empty() {
        "pointwise"
    } else {
        "reduction"
    };
    Kernel {
        name: format!("{kind}_{}_{index}", stem.join("_")),
        members,
        outer: g.outer.clone(),
        inner: g.inner.clone(),
        rows,
        row_len,
        origins,
        variants: Vec::new(),
        reasons: Vec::new(),
        vars: Vec::new(),
        scalar_buffers: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether unit `from` depends on unit `to`, by a search without bounds or memory.
    fn reaches(units: &Units, deps: &Deps, from: usize, to: usize) -> bool {
        let mut seen = vec![false; units.members.len()];
        let mut stack = vec![from];
        while let Some(u) = stack.pop() {
            if u == to {
                return true;
            }
            if !std::mem::replace(&mut seen[u], true) {
                stack.extend(units.below(deps, u).filter(|&v| v != u));
            }
        }
        false
    }

    #[test]
    fn the_cycle_check_and_the_kept_order_agree_with_a_plain_search() {
        // Random programs (each buffer reads up to three earlier ones), each buffer offered to a
        // random earlier unit as fusion does: the bounded, remembering check must answer as a
        // plain search, and after every merge each unit must stay above what it depends on.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % m as u64) as usize
        };
        let (mut merges, mut reorders, mut cycles) = (0, 0, 0);
        for _ in 0..80 {
            let n = 80;
            let mut reads = vec![Vec::new(); n];
            for (i, r) in reads.iter_mut().enumerate().skip(1) {
                for _ in 0..1 + next(3) {
                    let b = BufferId(next(i) as u32);
                    if !r.contains(&b) {
                        r.push(b);
                    }
                }
            }
            let mut readers = vec![Vec::new(); n];
            for (i, rs) in reads.iter().enumerate() {
                for r in rs {
                    readers[r.index()].push(BufferId(i as u32));
                }
            }
            let deps = Deps {
                reads,
                readers,
                after: vec![Vec::new(); n],
                is_output: vec![false; n],
            };
            let mut units = Units::new(&deps, n);
            assert!(units.ordered);
            let (mut seen, mut stamp) = (vec![0u32; n], 0u32);
            for x in 1..n {
                // Half the buffers stay units of their own, so that groups stay many and small.
                for _ in 0..next(2) {
                    let gu = units.unit_of[next(x)];
                    stamp += 1;
                    let mut cyclic = false;
                    let mut want = false;
                    for r in deps.reads[x].clone() {
                        let u = units.unit_of[r.index()];
                        if u != gu {
                            want |= reaches(&units, &deps, u, gu);
                            cyclic |= units.depends(&deps, u, gu, &mut seen, stamp);
                        }
                    }
                    assert_eq!(cyclic, want, "buffer {x} into unit {gu}");
                    cycles += usize::from(cyclic);
                    if !cyclic {
                        reorders += usize::from(
                            deps.reads[x]
                                .iter()
                                .any(|r| units.order[units.unit_of[r.index()]] > units.order[gu]),
                        );
                        units.merge(&deps, x, gu, &mut seen, &mut stamp);
                        merges += 1;
                        for u in 0..n {
                            for v in units.below(&deps, u) {
                                assert!(
                                    v == u || units.order[u] > units.order[v],
                                    "unit {u} depends on {v} but is not above it"
                                );
                            }
                        }
                        break;
                    }
                }
            }
        }
        assert!(
            merges > 1000 && reorders > 100 && cycles > 100,
            "{merges} merges, {reorders} reorders, {cycles} cycles refused"
        );
    }
}
