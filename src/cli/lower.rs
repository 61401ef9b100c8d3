//! `guardless lower GRAPH --emit loop-ir`: the loop-level IR of a graph, as text.

use std::path::Path;

use guardless_ir::graph::Graph;

pub fn run(path: &Path, emit: &str) -> Result<String, String> {
    if emit != "loop-ir" {
        return Err(format!("--emit {emit}: expected loop-ir"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let graph = Graph::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let program =
        guardless_ir::lower::lower(&graph).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(program.to_text())
}
