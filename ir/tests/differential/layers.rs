//! Models of many identical layers, made from a graph of one: the shape of a served model (24–80
//! decoder layers), for the tests and benchmarks of compiling at depth.
#![allow(dead_code)]

use serde_json::{json, Value};

/// `layers` copies of the one-layer graph `doc` (the graph format's JSON) in sequence: layer `i`
/// takes layer `i − 1`'s first output where the one-layer graph takes the input `carried`; the
/// inputs named in `shared` (position ids, a rotary cache) are one input for all layers; every
/// other input and every node is layer `i`'s own, named with the prefix `l{i}_`. The model's
/// output is the last layer's first output.
pub fn stacked(doc: &Value, layers: usize, carried: &str, shared: &[&str]) -> Value {
    assert!(layers >= 1);
    let inputs = doc["inputs"].as_array().expect("inputs");
    let output = doc["outputs"][0]["tensor"]
        .as_str()
        .expect("a tensor output");
    let own = |name: &str| !shared.contains(&name) && name != carried;
    let mut out_inputs: Vec<Value> = inputs
        .iter()
        .filter(|i| !own(i["name"].as_str().unwrap()))
        .cloned()
        .collect();
    let mut nodes = Vec::new();
    let mut previous = carried.to_string();
    for l in 0..layers {
        let rename = |name: &str| -> String {
            if name == carried {
                previous.clone()
            } else if shared.contains(&name) {
                name.to_string()
            } else {
                format!("l{l}_{name}")
            }
        };
        for i in inputs.iter().filter(|i| own(i["name"].as_str().unwrap())) {
            let mut i = i.clone();
            i["name"] = json!(rename(i["name"].as_str().unwrap()));
            out_inputs.push(i);
        }
        for n in doc["nodes"].as_array().expect("nodes") {
            let mut n = n.clone();
            n["name"] = json!(format!("l{l}_{}", n["name"].as_str().unwrap()));
            renamed_refs(&mut n["args"], &rename);
            nodes.push(n);
        }
        previous = format!("l{l}_{output}");
    }
    let mut g = doc.clone();
    g["name"] = json!(format!(
        "{}_{layers}_layers",
        doc["name"].as_str().unwrap_or("graph")
    ));
    g["inputs"] = Value::Array(out_inputs);
    g["nodes"] = Value::Array(nodes);
    g["outputs"] = json!([{ "tensor": previous }]);
    g
}

/// Every tensor reference (`{"tensor": name}`, with an optional `index`) in `v`, renamed.
fn renamed_refs(v: &mut Value, rename: &dyn Fn(&str) -> String) {
    match v {
        Value::Object(m) => {
            let is_ref = m.len() <= 2
                && m.contains_key("tensor")
                && m.keys().all(|k| k == "tensor" || k == "index");
            if is_ref {
                let name = m["tensor"].as_str().unwrap().to_string();
                m.insert("tensor".into(), json!(rename(&name)));
            } else {
                m.values_mut().for_each(|x| renamed_refs(x, rename));
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| renamed_refs(x, rename)),
        _ => {}
    }
}

/// Scales every 2-D parameter of `graph` in `inputs` by 1/sqrt(fan-in), the scale of a trained
/// model's weights, so that a stack of layers on random inputs stays finite.
pub fn at_trained_scale(
    graph: &guardless_ir::graph::Graph,
    inputs: &mut [guardless_ir::tensor::HostTensor],
) {
    for (t, decl) in inputs.iter_mut().zip(&graph.inputs) {
        if decl.kind == guardless_ir::graph::InputKind::Parameter && t.shape.len() == 2 {
            let s = 1.0 / (t.shape[1] as f64).sqrt();
            let v: Vec<f64> = (0..t.numel()).map(|i| t.get_f64(i) * s).collect();
            *t = guardless_ir::tensor::HostTensor::from_f64(t.dtype, &t.shape, &v);
        }
    }
}

/// Sets input `name` (`n` position ids) in `inputs` to zeros but for its last, `value`.
pub fn with_last_position(
    graph: &guardless_ir::graph::Graph,
    inputs: &mut [guardless_ir::tensor::HostTensor],
    name: &str,
    n: usize,
    value: i64,
) {
    let at = graph
        .inputs
        .iter()
        .position(|i| i.name == name)
        .unwrap_or_else(|| panic!("no input {name}"));
    let mut ids = vec![0i64; n];
    ids[n - 1] = value;
    inputs[at] =
        guardless_ir::tensor::HostTensor::from_i64(guardless_ir::graph::DType::I64, &[n], &ids);
}
