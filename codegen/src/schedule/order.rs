//! The execution order of the fused groups and library steps.
//!
//! A step comes after the steps whose buffers it reads and after the steps that produce the
//! data-dependent symbols it uses (a select's count, an `.item()`): those are read back to the
//! host, so a step sized by one cannot run before it. Among ready steps, the producers of such
//! symbols and the steps they wait for go first, earliest buffer first: the runtime reads
//! every value pending when a step first needs one back in a single download, so the selects of
//! a routing layer (one per expert) run before any of their consumers and their counts come
//! back together, one wait for the device instead of one per select.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use guardless_ir::loop_ir::{BufferId, Program};

use super::deps::Deps;
use super::fusion::{Group, Planned};

/// Units (groups, then buffers outside groups) in dependency order; see the module comment.
pub fn order(p: &Program, deps: &Deps, groups: &[Group]) -> Vec<Planned> {
    let n = p.buffers.len();
    let mut unit_of = vec![usize::MAX; n];
    let mut unit_kind: Vec<Planned> = Vec::new();
    let mut first: Vec<usize> = Vec::new();
    for (g, grp) in groups.iter().enumerate() {
        for m in &grp.members {
            unit_of[m.index()] = unit_kind.len();
        }
        first.push(grp.members[0].index());
        unit_kind.push(Planned::Group(g));
    }
    for (i, u) in unit_of.iter_mut().enumerate() {
        if *u == usize::MAX {
            *u = unit_kind.len();
            first.push(i);
            unit_kind.push(Planned::Buffer(BufferId(i as u32)));
        }
    }
    let units = unit_kind.len();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); units];
    let mut edge = |a: usize, b: usize| {
        if a != b && !preds[b].contains(&a) {
            preds[b].push(a);
        }
    };
    for i in 0..n {
        for r in deps.reads[i].iter().chain(&deps.after[i]) {
            edge(unit_of[r.index()], unit_of[i]);
        }
    }
    // Producers and everything they wait for.
    let mut urgent = vec![false; units];
    let mut stack: Vec<usize> = (0..n)
        .filter(|&i| p.buffers[i].kind.produced_symbol().is_some())
        .map(|i| unit_of[i])
        .collect();
    while let Some(u) = stack.pop() {
        if !std::mem::replace(&mut urgent[u], true) {
            stack.extend(&preds[u]);
        }
    }
    let mut indegree = vec![0usize; units];
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); units];
    for (b, ps) in preds.iter().enumerate() {
        indegree[b] = ps.len();
        for &a in ps {
            succ[a].push(b);
        }
    }
    let key = |u: usize| Reverse((!urgent[u], first[u], u));
    let mut ready: BinaryHeap<_> = (0..units).filter(|&u| indegree[u] == 0).map(key).collect();
    let mut out = Vec::with_capacity(units);
    let mut kinds: Vec<Option<Planned>> = unit_kind.into_iter().map(Some).collect();
    while let Some(Reverse((_, _, u))) = ready.pop() {
        out.push(kinds[u].take().expect("each unit once"));
        for &v in &succ[u] {
            indegree[v] -= 1;
            if indegree[v] == 0 {
                ready.push(key(v));
            }
        }
    }
    // Fusion refuses a group that would wait for itself, so every unit is ordered.
    assert_eq!(out.len(), units, "a dependency cycle among the steps");
    out
}
