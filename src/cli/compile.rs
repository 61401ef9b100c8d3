//! `guardless compile GRAPH --emit schedule|manifest`: the scheduler's decisions as text (kernels,
//! fused nodes, variants, reasons, memory plan), or the launch manifest as JSON.

use std::path::Path;

use guardless_codegen::schedule::schedule;
use guardless_ir::graph::Graph;

pub fn run(path: &Path, emit: &str) -> Result<String, String> {
    if emit != "schedule" && emit != "manifest" {
        return Err(format!("--emit {emit}: expected schedule or manifest"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let graph = Graph::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut program =
        guardless_ir::lower::lower(&graph).map_err(|e| format!("{}: {e}", path.display()))?;
    let s = schedule(&mut program);
    if emit == "schedule" {
        return Ok(s.to_text(&program));
    }
    serde_json::to_string_pretty(&s.manifest(&program)).map_err(|e| e.to_string())
}
