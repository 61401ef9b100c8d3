//! Reading the JSON graph format (version 1, `docs/graph-format.md`): symbols into a `ShapeEnv`,
//! inputs with symbolic shapes, nodes with their argument values and references resolved, outputs
//! and asserts. Validation that needs no op schema happens here; the rest belongs to lowering.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Deserialize;
use serde_json::{Map, Value as Json};

use super::dtype::DType;
use super::error::GraphError;
use super::schema::{self, Returns};
use super::value::{Producer, TensorRef, Value};
use super::{Graph, GraphNode, Input, InputKind, Output};
use crate::sym::{Expr, ShapeEnv, SymbolKind};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGraph {
    format: String,
    version: u64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    symbols: Vec<RawSymbol>,
    inputs: Vec<RawInput>,
    #[serde(default)]
    nodes: Vec<RawNode>,
    outputs: Vec<RawOutput>,
    #[serde(default)]
    asserts: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSymbol {
    name: String,
    kind: String,
    #[serde(default)]
    hint: Option<i64>,
    #[serde(default)]
    min: Option<i64>,
    #[serde(default)]
    max: Option<i64>,
    #[serde(default)]
    optimization_hint: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInput {
    name: String,
    dtype: String,
    shape: Vec<Json>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    strides: Option<Vec<Json>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: String,
    op: String,
    #[serde(default, deserialize_with = "unique_keys")]
    args: Map<String, Json>,
    #[serde(default)]
    shape: Option<Vec<Json>>,
    #[serde(default)]
    dtype: Option<String>,
    #[serde(default)]
    symbol: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutput {
    tensor: String,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    mutates: Option<String>,
}

/// A node's arguments: an object whose keys, and those of every object inside, are unique (JSON
/// leaves duplicates to the reader; taking the last one silently would hide a mistake).
fn unique_keys<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Map<String, Json>, D::Error> {
    match d.deserialize_any(UniqueValue)? {
        Json::Object(m) => Ok(m),
        _ => Err(serde::de::Error::custom("\"args\" must be an object")),
    }
}

/// Deserializes a JSON value, refusing an object with a key twice.
struct UniqueValue;

impl<'de> serde::de::DeserializeSeed<'de> for UniqueValue {
    type Value = Json;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueValue {
    type Value = Json;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Json::Null, Json::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(UniqueValue)? {
            out.push(v);
        }
        Ok(Json::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(serde::de::Error::custom(format!(
                    "the key \"{}\" appears twice",
                    k.escape_debug()
                )));
            }
            let v = map.next_value_seed(UniqueValue)?;
            out.insert(k, v);
        }
        Ok(Json::Object(out))
    }
}

/// Ops that produce sizes from data: a lone unbacked symbol in their stated shape is bound by them.
const DATA_DEPENDENT: [&str; 5] = [
    "aten.nonzero.default",
    "aten.masked_select.default",
    "aten.repeat_interleave.Tensor",
    "aten.index.Tensor",
    "aten._local_scalar_dense.default",
];

/// Higher-order ops carry subgraphs, which version 1 does not represent.
fn is_higher_order(op: &str) -> bool {
    op.contains("higher_order")
        || ["cond", "while_loop", "auto_functionalized", "map", "scan"]
            .iter()
            .any(|h| op == *h || op.ends_with(&format!(".{h}")))
}

impl Graph {
    /// Reads a graph from its JSON text.
    pub fn from_json(text: &str) -> Result<Graph, GraphError> {
        let raw: RawGraph = serde_json::from_str(text).map_err(|e| GraphError::Json {
            line: e.line(),
            column: e.column(),
            message: strip_position(&e.to_string()),
        })?;
        printable(&raw)?;
        Reader::default().read(raw)
    }
}

/// Every string of the graph — names, ops, dtypes, references, argument keys and values, size
/// expressions, asserts — free of control characters; the error names where (`nodes[3].name`).
fn printable(raw: &RawGraph) -> Result<(), GraphError> {
    fn text(at: &dyn Fn() -> String, s: &str) -> Result<(), GraphError> {
        match s.chars().enumerate().find(|(_, c)| c.is_control()) {
            None => Ok(()),
            Some((offset, c)) => Err(GraphError::ControlCharacter {
                at: at(),
                text: s
                    .chars()
                    .take(80)
                    .collect::<String>()
                    .escape_debug()
                    .to_string(),
                code: format!("U+{:04X}", c as u32),
                offset,
            }),
        }
    }
    fn json(at: &dyn Fn() -> String, v: &Json) -> Result<(), GraphError> {
        match v {
            Json::String(s) => text(at, s),
            Json::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, x)| json(&|| format!("{}[{i}]", at()), x)),
            Json::Object(map) => map.iter().try_for_each(|(k, x)| {
                text(&|| format!("{} (a key)", at()), k)?;
                json(&|| format!("{}.{k}", at()), x)
            }),
            _ => Ok(()),
        }
    }
    let opt = |at: &dyn Fn() -> String, s: &Option<String>| match s {
        Some(s) => text(at, s),
        None => Ok(()),
    };
    text(&|| "name".into(), &raw.name)?;
    text(&|| "format".into(), &raw.format)?;
    for (i, s) in raw.symbols.iter().enumerate() {
        text(&|| format!("symbols[{i}].name"), &s.name)?;
        text(&|| format!("symbols[{i}].kind"), &s.kind)?;
    }
    for (i, r) in raw.inputs.iter().enumerate() {
        text(&|| format!("inputs[{i}].name"), &r.name)?;
        text(&|| format!("inputs[{i}].dtype"), &r.dtype)?;
        opt(&|| format!("inputs[{i}].kind"), &r.kind)?;
        for (d, e) in r.shape.iter().enumerate() {
            json(&|| format!("inputs[{i}].shape[{d}]"), e)?;
        }
        for (d, e) in r.strides.iter().flatten().enumerate() {
            json(&|| format!("inputs[{i}].strides[{d}]"), e)?;
        }
    }
    for (i, n) in raw.nodes.iter().enumerate() {
        text(&|| format!("nodes[{i}].name"), &n.name)?;
        text(&|| format!("nodes[{i}].op"), &n.op)?;
        opt(&|| format!("nodes[{i}].dtype"), &n.dtype)?;
        opt(&|| format!("nodes[{i}].symbol"), &n.symbol)?;
        for (k, v) in &n.args {
            text(&|| format!("nodes[{i}].args (a key)"), k)?;
            json(&|| format!("nodes[{i}].args.{k}"), v)?;
        }
        for (d, e) in n.shape.iter().flatten().enumerate() {
            json(&|| format!("nodes[{i}].shape[{d}]"), e)?;
        }
    }
    for (i, o) in raw.outputs.iter().enumerate() {
        text(&|| format!("outputs[{i}].tensor"), &o.tensor)?;
        opt(&|| format!("outputs[{i}].mutates"), &o.mutates)?;
    }
    for (i, a) in raw.asserts.iter().enumerate() {
        text(&|| format!("asserts[{i}]"), a)?;
    }
    Ok(())
}

/// serde_json appends " at line L column C"; the error carries them separately.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

#[derive(Default)]
struct Reader {
    env: ShapeEnv,
    /// Tensor names (inputs and nodes) → their producer.
    names: FxHashMap<String, Producer>,
    /// How many outputs each node has (unknown ops: taken as one).
    returns: Vec<Returns>,
    bound: FxHashSet<String>,
}

impl Reader {
    fn read(mut self, raw: RawGraph) -> Result<Graph, GraphError> {
        if raw.format != "guardless-graph" {
            return Err(GraphError::Format { found: raw.format });
        }
        if raw.version != 1 {
            return Err(GraphError::Version { found: raw.version });
        }
        // A symbol that `.item()` produces is a scalar value (any sign); others are sizes.
        let values: FxHashSet<&str> = raw
            .nodes
            .iter()
            .filter_map(|n| n.symbol.as_deref())
            .collect();
        for s in &raw.symbols {
            self.declare(s, values.contains(s.name.as_str()))?;
        }
        let mut inputs = Vec::with_capacity(raw.inputs.len());
        for (i, r) in raw.inputs.iter().enumerate() {
            inputs.push(self.input(i, r)?);
        }
        let mut nodes = Vec::with_capacity(raw.nodes.len());
        let mut unknown = Vec::new();
        for (i, r) in raw.nodes.iter().enumerate() {
            match self.node(i, r)? {
                Some(n) => nodes.push(n),
                None => unknown.push((r.name.clone(), r.op.clone())),
            }
        }
        // Every unknown op of the graph at once, not just the first.
        if !unknown.is_empty() {
            return Err(GraphError::UnknownOps { ops: unknown });
        }
        let mut outputs = Vec::with_capacity(raw.outputs.len());
        for (i, r) in raw.outputs.iter().enumerate() {
            outputs.push(self.output(i, r, &inputs)?);
        }
        for a in &raw.asserts {
            self.env.check_text(a).map_err(|e| GraphError::Assert {
                assert: a.clone(),
                message: e.to_string(),
            })?;
        }
        for s in &raw.symbols {
            if s.kind == "unbacked" && !self.bound.contains(&s.name) {
                return Err(GraphError::Unbound {
                    name: s.name.clone(),
                });
            }
        }
        Ok(Graph {
            name: raw.name,
            env: self.env,
            inputs,
            nodes,
            outputs,
            asserts: raw.asserts,
        })
    }

    fn declare(&mut self, s: &RawSymbol, is_value: bool) -> Result<(), GraphError> {
        let err = |message: String| GraphError::Symbol {
            name: s.name.clone(),
            message,
        };
        let declared = match s.kind.as_str() {
            "backed" => {
                let hint = s.hint.ok_or_else(|| {
                    err("a backed symbol needs a \"hint\" (its example value)".into())
                })?;
                if s.optimization_hint.is_some() {
                    return Err(err(
                        "\"optimization_hint\" is for unbacked symbols; a backed one has \"hint\""
                            .into(),
                    ));
                }
                self.env.backed(&s.name, hint, s.min, s.max)
            }
            "unbacked" => {
                if s.hint.is_some() {
                    return Err(err(
                        "an unbacked symbol has no \"hint\"; use \"optimization_hint\"".into(),
                    ));
                }
                if is_value {
                    self.env
                        .unbacked_value(&s.name, s.min, s.max, s.optimization_hint)
                } else {
                    self.env
                        .unbacked_size(&s.name, s.min, s.max, s.optimization_hint)
                }
            }
            other => {
                return Err(err(format!(
                    "\"kind\" is '{other}', expected 'backed' or 'unbacked'"
                )))
            }
        };
        declared.map(|_| ()).map_err(|e| err(e.to_string()))
    }

    fn define(&mut self, name: &str, producer: Producer) -> Result<(), String> {
        if self.names.insert(name.to_string(), producer).is_some() {
            return Err(format!(
                "the name '{name}' is already used by an input or an earlier node"
            ));
        }
        Ok(())
    }

    /// A dimension or stride: a non-negative integer, or a symbolic expression over declared symbols.
    fn dim(&mut self, j: &Json) -> Result<Expr, String> {
        match j {
            Json::Number(n) => match n.as_i64() {
                Some(v) if v >= 0 => Ok(self.env.pool_mut().constant(v)),
                _ => Err(format!(
                    "dimension {n} is not a non-negative 64-bit integer"
                )),
            },
            Json::String(s) => {
                let e = self.env.parse(s).map_err(|e| e.to_string())?;
                if self.env.pool().info(e).is_bool {
                    return Err(format!("dimension '{s}' is a condition, not an integer"));
                }
                Ok(e)
            }
            other => Err(format!(
                "dimension {other} is neither an integer nor a symbolic expression"
            )),
        }
    }

    fn dims(&mut self, js: &[Json], what: &str) -> Result<Vec<Expr>, String> {
        js.iter()
            .enumerate()
            .map(|(i, j)| self.dim(j).map_err(|m| format!("{what}[{i}]: {m}")))
            .collect()
    }

    /// A symbol standing alone as a dimension is bound by the tensor's real shape at run time.
    fn bind_lone_symbols(&mut self, dims: &[Expr]) {
        for &d in dims {
            if let Some(id) = self.env.pool().as_symbol(d) {
                self.bound.insert(self.env.symbol_name(id).to_string());
            }
        }
    }

    fn input(&mut self, i: usize, r: &RawInput) -> Result<Input, GraphError> {
        let err = |message: String| GraphError::Input {
            input: r.name.clone(),
            message,
        };
        let dtype = DType::from_name(&r.dtype).ok_or_else(|| err(unknown_dtype(&r.dtype)))?;
        let shape = self.dims(&r.shape, "shape").map_err(err)?;
        let strides = match &r.strides {
            Some(s) if s.len() != shape.len() => {
                return Err(err(format!(
                    "{} strides for {} dimensions",
                    s.len(),
                    shape.len()
                )))
            }
            Some(s) => Some(self.dims(s, "strides").map_err(err)?),
            None => None,
        };
        let kind = match r.kind.as_deref() {
            None | Some("user") => InputKind::User,
            Some("parameter") => InputKind::Parameter,
            Some("buffer") => InputKind::Buffer,
            Some("constant") => InputKind::Constant,
            Some(other) => {
                return Err(err(format!(
                    "\"kind\" is '{other}', expected user, parameter, buffer or constant"
                )))
            }
        };
        // Sizes are never negative, and the constant ones multiply to an element count below 2^62
        // (the bytes of any tensor fit in 64 bits).
        let mut constant = 1i128;
        for &d in &shape {
            if let Some(v) = self.env.pool().as_const(d) {
                if v < 0 {
                    return Err(err(format!("a negative size {v}")));
                }
                constant = constant.saturating_mul(v as i128);
            }
        }
        if constant >= 1i128 << 62 {
            return Err(err(format!(
                "{constant} elements: more than any memory holds (2^62)"
            )));
        }
        self.define(&r.name, Producer::Input(i)).map_err(err)?;
        self.bind_lone_symbols(&shape);
        Ok(Input {
            name: r.name.clone(),
            dtype,
            shape,
            strides,
            kind,
        })
    }

    /// The node, or `None` if its op is unknown (reported with all the others).
    fn node(&mut self, i: usize, r: &RawNode) -> Result<Option<GraphNode>, GraphError> {
        let err = |message: String| GraphError::Node {
            node: r.name.clone(),
            op: r.op.clone(),
            message,
        };
        if is_higher_order(&r.op) {
            return Err(err(
                "higher-order ops (subgraphs) are not supported by graph format version 1".into(),
            ));
        }
        let mut values = Vec::with_capacity(r.args.len());
        for (name, j) in &r.args {
            let v = self
                .value(j)
                .map_err(|m| err(format!("argument '{name}': {m}")))?;
            check_device_and_layout(name, &v).map_err(err)?;
            values.push((name.clone(), v));
        }
        let schema = schema::lookup(&r.op);
        self.returns
            .push(schema.map_or(Returns::One, |s| s.returns));
        let shape = match &r.shape {
            Some(s) => Some(self.dims(s, "shape").map_err(err)?),
            None => None,
        };
        let dtype = match &r.dtype {
            Some(d) => Some(DType::from_name(d).ok_or_else(|| err(unknown_dtype(d)))?),
            None => None,
        };
        let symbol =
            match &r.symbol {
                Some(s) => {
                    let id = self
                        .env
                        .symbol_id(s)
                        .ok_or_else(|| err(format!("\"symbol\": '{s}' is not declared")))?;
                    if self.env.symbol_kind(id) != SymbolKind::Unbacked {
                        return Err(err(format!("\"symbol\": '{s}' must be declared unbacked")));
                    }
                    self.bound.insert(s.clone());
                    Some(id)
                }
                None if r.op == "aten._local_scalar_dense.default" => return Err(err(
                    "needs the \"symbol\" it produces (an unbacked symbol declared for its value)"
                        .into(),
                )),
                None => None,
            };
        // nonzero and masked_select state their count as a symbol (the first dimension).
        if matches!(
            r.op.as_str(),
            "aten.nonzero.default" | "aten.masked_select.default"
        ) && shape
            .as_ref()
            .and_then(|s| s.first())
            .and_then(|&e| self.env.pool().as_symbol(e))
            .is_none()
        {
            return Err(err(
                "must state its \"shape\" with the unbacked count symbol first".into(),
            ));
        }
        if r.op == "aten.repeat_interleave.Tensor"
            && r.args.get("output_size").is_none_or(|v| v.is_null())
            && shape
                .as_ref()
                .and_then(|s| s.first())
                .and_then(|&e| self.env.pool().as_symbol(e))
                .is_none()
        {
            return Err(err(
                "must state its \"shape\" with the unbacked count symbol, or output_size".into(),
            ));
        }
        if let (Some(shape), true) = (&shape, DATA_DEPENDENT.contains(&r.op.as_str())) {
            self.bind_lone_symbols(shape);
        }
        self.define(&r.name, Producer::Node(i)).map_err(err)?;
        let Some(schema) = schema else {
            return Ok(None);
        };
        let args = schema.bind(&values, &mut self.env).map_err(err)?;
        Ok(Some(GraphNode {
            name: r.name.clone(),
            op: r.op.clone(),
            schema,
            args,
            shape,
            dtype,
            symbol,
        }))
    }

    fn tensor_ref(&self, name: &str, index: Option<usize>) -> Result<TensorRef, String> {
        let producer = *self
            .names
            .get(name)
            .ok_or_else(|| format!("'{name}' is neither an input nor an earlier node"))?;
        let returns = match producer {
            Producer::Input(_) => Returns::One,
            Producer::Node(n) => self.returns[n],
        };
        let bad = match (returns, index) {
            (Returns::Nothing, _) => Some(format!("'{name}' has no output")),
            (Returns::One, Some(i)) => {
                Some(format!("'{name}' has one output, but index {i} is given"))
            }
            (Returns::Fixed(n), None) => {
                Some(format!("'{name}' has {n} outputs: give an \"index\""))
            }
            (Returns::List, None) => {
                Some(format!("'{name}' has a list of outputs: give an \"index\""))
            }
            (Returns::Fixed(n), Some(i)) if i >= n => Some(format!(
                "'{name}' has {n} outputs; index {i} is out of range"
            )),
            _ => None,
        };
        match bad {
            Some(m) => Err(m),
            None => Ok(TensorRef { producer, index }),
        }
    }

    fn value(&mut self, j: &Json) -> Result<Value, String> {
        Ok(match j {
            Json::Null => Value::None,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => {
                if let Some(v) = n.as_i64() {
                    Value::Int(v)
                } else if n.is_u64() {
                    return Err(format!("integer {n} does not fit in 64 bits"));
                } else {
                    Value::Float(
                        n.as_f64()
                            .ok_or_else(|| format!("number {n} is not representable"))?,
                    )
                }
            }
            Json::String(s) => Value::Str(s.clone()),
            Json::Array(items) => Value::List(
                items
                    .iter()
                    .map(|x| self.value(x))
                    .collect::<Result<_, _>>()?,
            ),
            Json::Object(m) => self.object_value(m)?,
        })
    }

    fn object_value(&mut self, m: &Map<String, Json>) -> Result<Value, String> {
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        match (keys.as_slice(), m.values().next()) {
            (["float"], Some(Json::String(s))) => match s.as_str() {
                "inf" => Ok(Value::Float(f64::INFINITY)),
                "-inf" => Ok(Value::Float(f64::NEG_INFINITY)),
                "nan" => Ok(Value::Float(f64::NAN)),
                other => Err(format!("{{\"float\": \"{other}\"}}: expected \"inf\", \"-inf\" or \"nan\"")),
            },
            (["dtype"], Some(Json::String(s))) => Ok(Value::DType(DType::from_name(s).ok_or_else(|| unknown_dtype(s))?)),
            (["symbool"], Some(Json::String(s))) => {
                let e = self.env.parse(s).map_err(|e| e.to_string())?;
                if !self.env.pool().info(e).is_bool {
                    return Err(format!("symbool '{s}' is an integer expression, not a condition"));
                }
                Ok(Value::SymBool(e))
            }
            (["tensor"], Some(Json::String(name))) => Ok(Value::Tensor(self.tensor_ref(name, None)?)),
            (_, _) if keys.len() == 2 && keys.contains(&"tensor") && keys.contains(&"index") => {
                let name = m["tensor"].as_str().ok_or("\"tensor\" must be a name")?;
                let index = m["index"].as_u64().ok_or("\"index\" must be a non-negative integer")?;
                Ok(Value::Tensor(self.tensor_ref(name, Some(index as usize))?))
            }
            _ => Err(format!(
                "unrecognized value {}: expected {{\"tensor\"}}, {{\"float\"}}, {{\"symbool\"}} or {{\"dtype\"}}",
                Json::Object(m.clone())
            )),
        }
    }

    fn output(&mut self, i: usize, r: &RawOutput, inputs: &[Input]) -> Result<Output, GraphError> {
        let err = |message: String| GraphError::Output { index: i, message };
        let tensor = self.tensor_ref(&r.tensor, r.index).map_err(err)?;
        let mutates = match &r.mutates {
            Some(name) => Some(
                inputs
                    .iter()
                    .position(|inp| &inp.name == name)
                    .ok_or_else(|| err(format!("\"mutates\": '{name}' is not an input")))?,
            ),
            None => None,
        };
        Ok(Output { tensor, mutates })
    }
}

fn unknown_dtype(name: &str) -> String {
    let known: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
    format!("unknown dtype '{name}' (known: {})", known.join(" "))
}

/// The device is checked and ignored; a non-strided layout is an error.
fn check_device_and_layout(name: &str, v: &Value) -> Result<(), String> {
    let Value::Str(s) = v else { return Ok(()) };
    match name {
        "device" => {
            let ok = s == "cpu"
                || s == "cuda"
                || s.strip_prefix("cuda:")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if ok {
                Ok(())
            } else {
                Err(format!("device '{s}' is neither cpu nor cuda[:N]"))
            }
        }
        "layout" if s != "strided" && s != "torch.strided" => Err(format!(
            "layout '{s}' is not supported: only strided tensors"
        )),
        _ => Ok(()),
    }
}
