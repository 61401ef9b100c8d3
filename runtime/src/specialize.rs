//! Compiled specializations of one graph, chosen by guards at every call.
//!
//! A backed compile specializes on its symbols' hints and records guards (`s0 != 1`, `s0 <= 4096`)
//! that must hold for it to be correct. A call whose sizes break a guard of every compiled
//! specialization compiles one more, with the backed hints moved to the call's values, and counts
//! a recompile — what Dynamo does for backed sizes. Unbacked sizes record no guards, so a graph
//! whose sizes are all unbacked is compiled once and never recompiles.

use std::fmt;

use guardless_ir::graph::Graph;
use guardless_ir::sym::{Bindings, ShapeEnv, SymError};

use crate::cpu::CpuProgram;
use crate::cuda::CudaProgram;

/// A compiled artifact: its shape environment holds the guards its lowering recorded.
pub trait Specialized {
    fn env(&self) -> &ShapeEnv;
}

impl Specialized for CpuProgram {
    fn env(&self) -> &ShapeEnv {
        &self.program.env
    }
}

impl Specialized for CudaProgram {
    fn env(&self) -> &ShapeEnv {
        &self.exe.program.env
    }
}

/// Dynamo's default `cache_size_limit`: a graph whose sizes change this often should be compiled
/// with unbacked sizes instead.
pub const DEFAULT_LIMIT: usize = 8;

#[derive(Debug)]
pub enum SpecializeError<E> {
    /// The call's values break a declared range or assert (no specialization can help).
    Values(SymError),
    /// Every specialization's guards failed and `limit` of them exist already.
    Limit { limit: usize, guard: String },
    /// Compiling the new specialization failed.
    Compile(E),
    /// The new specialization records a guard its own values break (a lowering bug).
    Unstable(SymError),
}

impl<E: fmt::Display> fmt::Display for SpecializeError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecializeError::Values(e) => write!(f, "{e}"),
            SpecializeError::Limit { limit, guard } => write!(
                f,
                "guard `{guard}` failed and the recompile limit ({limit} specializations) is \
                 reached: declare the changing sizes unbacked to compile once for all of them"
            ),
            SpecializeError::Compile(e) => write!(f, "recompiling for the new sizes: {e}"),
            SpecializeError::Unstable(e) => write!(
                f,
                "the specialization compiled for these sizes fails its own guard: {e}"
            ),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for SpecializeError<E> {}

/// The specializations of `graph` compiled so far, and how many recompiles made them.
pub struct Specializations<A> {
    graph: Graph,
    compiled: Vec<A>,
    recompiles: usize,
    limit: usize,
}

/// What [`Specializations::select`] found for a call.
pub struct Selected<'a, A> {
    pub artifact: &'a mut A,
    /// The guard that failed for every earlier specialization, when this call compiled a new one.
    pub recompiled: Option<String>,
}

impl<A: Specialized> Specializations<A> {
    /// `first` is `graph` compiled at its own hints.
    pub fn new(graph: Graph, first: A) -> Self {
        Specializations {
            graph,
            compiled: vec![first],
            recompiles: 0,
            limit: DEFAULT_LIMIT,
        }
    }

    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit.max(1);
        self
    }

    /// Recompiles so far (the first compile is not one).
    pub fn recompiles(&self) -> usize {
        self.recompiles
    }

    pub fn len(&self) -> usize {
        self.compiled.len()
    }

    pub fn is_empty(&self) -> bool {
        self.compiled.is_empty()
    }

    /// The first specialization whose guards hold for `bindings` (the call's symbol values,
    /// e.g. from `reference::bind_inputs`); when none does, `compile` builds one for the graph
    /// with its backed hints moved to these values.
    pub fn select<E>(
        &mut self,
        bindings: &Bindings,
        compile: impl FnOnce(Graph) -> Result<A, E>,
    ) -> Result<Selected<'_, A>, SpecializeError<E>> {
        self.graph
            .env
            .check_bindings(bindings)
            .map_err(SpecializeError::Values)?;
        let mut failed = None;
        let mut found = None;
        for (i, a) in self.compiled.iter().enumerate() {
            match a.env().check_bindings(bindings) {
                Ok(()) => {
                    found = Some(i);
                    break;
                }
                Err(SymError::GuardFailed { guard }) => {
                    failed.get_or_insert(guard);
                }
                Err(e) => return Err(SpecializeError::Values(e)),
            }
        }
        if let Some(i) = found {
            return Ok(Selected {
                artifact: &mut self.compiled[i],
                recompiled: None,
            });
        }
        let guard = failed.unwrap_or_default();
        if self.compiled.len() >= self.limit {
            return Err(SpecializeError::Limit {
                limit: self.limit,
                guard,
            });
        }
        let mut g = self.graph.clone();
        g.env
            .rehint_backed(bindings)
            .map_err(SpecializeError::Values)?;
        let a = compile(g).map_err(SpecializeError::Compile)?;
        let check = a.env().check_bindings(bindings);
        if let Err(e @ SymError::GuardFailed { .. }) = check {
            return Err(SpecializeError::Unstable(e));
        }
        // Kept even when the call's values break one of its asserts: it is the specialization
        // for these sizes, and the call is an error on any of them.
        self.compiled.push(a);
        self.recompiles += 1;
        check.map_err(SpecializeError::Values)?;
        Ok(Selected {
            artifact: self.compiled.last_mut().expect("just pushed"),
            recompiled: Some(guard),
        })
    }

    /// [`Specializations::select`] for a `compile` that starts from the graph lowered (the CLI's
    /// and the Python binding's backends); errors as text.
    pub fn select_lowered<E: fmt::Display>(
        &mut self,
        bindings: &Bindings,
        compile: impl FnOnce(guardless_ir::loop_ir::Program) -> Result<A, E>,
    ) -> Result<Selected<'_, A>, String> {
        self.select(bindings, |g| {
            compile(guardless_ir::lower::lower(&g).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())
        })
        .map_err(|e| e.to_string())
    }
}
