//! ATen op schemas, as data: `schemas.txt` holds them in PyTorch's own notation, parsed once. Binding
//! a node's JSON arguments to its schema gives typed arguments, with schema defaults filled in.

use std::sync::OnceLock;

use rustc_hash::FxHashMap;

use super::dtype::DType;
use super::value::{TensorRef, Value};
use crate::sym::{Expr, ShapeEnv};

/// The element type of a parameter.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Base {
    Tensor,
    /// `int` and `SymInt`: an integer, possibly symbolic.
    Int,
    Scalar,
    Float,
    Bool,
    Str,
    ScalarType,
    Layout,
    Device,
    MemoryFormat,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct ParamType {
    pub base: Base,
    /// `T[]` (or `T[N]`).
    pub list: bool,
    /// `T?` (or `T[]?`): may be None.
    pub optional: bool,
    /// `Tensor?[]`: elements may be None.
    pub elem_optional: bool,
    /// `SymInt` (`SymInt[]`): may be symbolic. A plain `int` is a constant in an exported graph
    /// (export specializes it), so a symbolic value there is refused.
    pub symbolic: bool,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub ty: ParamType,
    /// The default as the schema spells it (`None`, `1`, `False`, `'none'`, `[]`).
    pub default: Option<String>,
}

/// How many outputs an op has.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Returns {
    Nothing,
    One,
    Fixed(usize),
    /// `Tensor[]`: as many as the arguments say (split, unbind).
    List,
}

#[derive(Clone, Debug)]
pub struct Schema {
    pub op: String,
    pub params: Vec<Param>,
    pub returns: Returns,
}

/// A number standing where a Scalar (or a wrapped-number Tensor) is expected.
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum Scalar {
    Int(Expr),
    Float(f64),
    Bool(bool),
}

/// A bound argument, typed by its schema parameter.
#[derive(Clone, PartialEq, Debug)]
pub enum Arg {
    None,
    Tensor(TensorRef),
    /// A number where a Tensor is expected (a wrapped number, with ATen's promotion rules).
    Number(Scalar),
    /// `Tensor[]` (all present) and `Tensor?[]`.
    Tensors(Vec<Option<TensorRef>>),
    Int(Expr),
    Ints(Vec<Expr>),
    Scalar(Scalar),
    Float(f64),
    /// `float[]` (an upsampling's scale factors).
    Floats(Vec<f64>),
    Bool(bool),
    Str(String),
    DType(DType),
    /// A condition (the `Scalar self` of `_assert_scalar` is a SymBool).
    SymBool(Expr),
}

impl Arg {
    /// The tensors the argument refers to (none, one, or a list's present ones).
    pub fn tensor_refs(&self) -> impl Iterator<Item = &TensorRef> {
        let (one, list) = match self {
            Arg::Tensor(r) => (Some(r), &[][..]),
            Arg::Tensors(rs) => (None, &rs[..]),
            _ => (None, &[][..]),
        };
        one.into_iter().chain(list.iter().flatten())
    }
}

static SCHEMAS: OnceLock<FxHashMap<String, Schema>> = OnceLock::new();

/// The schema of an overload, if guardless reads it.
pub fn lookup(op: &str) -> Option<&'static Schema> {
    SCHEMAS
        .get_or_init(|| {
            include_str!("schemas.txt")
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| {
                    let s = parse_schema(l).unwrap_or_else(|e| panic!("schemas.txt: {e}: {l}"));
                    (s.op.clone(), s)
                })
                .collect()
        })
        .get(op)
}

/// Every overload guardless reads, sorted.
pub fn all_ops() -> Vec<&'static str> {
    lookup("");
    let mut ops: Vec<&str> = SCHEMAS
        .get()
        .expect("initialized")
        .keys()
        .map(String::as_str)
        .collect();
    ops.sort_unstable();
    ops
}

fn parse_schema(line: &str) -> Result<Schema, String> {
    let open = line.find('(').ok_or("no '('")?;
    let arrow = line.rfind(") -> ").ok_or("no ') ->'")?;
    let op = line[..open].to_string();
    let params = split_top(&line[open + 1..arrow])
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty() && *p != "*")
        .map(parse_param)
        .collect::<Result<Vec<_>, _>>()?;
    let ret = line[arrow + 5..].trim();
    let returns = if ret == "()" {
        Returns::Nothing
    } else if ret.ends_with("[]") {
        Returns::List
    } else if ret.starts_with('(') {
        Returns::Fixed(split_top(&ret[1..ret.len() - 1]).len())
    } else {
        Returns::One
    };
    Ok(Schema {
        op,
        params,
        returns,
    })
}

/// Splits on commas outside parentheses and brackets.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_param(p: &str) -> Result<Param, String> {
    let (decl, default) = match p.split_once('=') {
        Some((d, v)) => (d.trim(), Some(v.trim().to_string())),
        None => (p, None),
    };
    let (ty, name) = decl
        .rsplit_once(' ')
        .ok_or_else(|| format!("parameter '{p}' has no name"))?;
    // Alias annotations (`Tensor(a)`, `Tensor(a -> *)`) do not matter here.
    let ty: String = match ty.find('(') {
        Some(i) => format!(
            "{}{}",
            &ty[..i],
            &ty[ty.find(')').ok_or("unclosed alias")? + 1..]
        ),
        None => ty.to_string(),
    };
    let optional = ty.ends_with('?');
    let ty = ty.trim_end_matches('?');
    let list = ty.ends_with(']');
    let ty = match ty.find('[') {
        Some(i) => &ty[..i],
        None => ty,
    };
    let elem_optional = ty.ends_with('?');
    let symbolic = ty.trim_end_matches('?') == "SymInt";
    let base = match ty.trim_end_matches('?') {
        "Tensor" => Base::Tensor,
        "int" | "SymInt" => Base::Int,
        "Scalar" => Base::Scalar,
        "float" => Base::Float,
        "bool" => Base::Bool,
        "str" => Base::Str,
        "ScalarType" => Base::ScalarType,
        "Layout" => Base::Layout,
        "Device" => Base::Device,
        "MemoryFormat" => Base::MemoryFormat,
        other => return Err(format!("unknown type '{other}'")),
    };
    Ok(Param {
        name: name.to_string(),
        ty: ParamType {
            base,
            list,
            optional,
            elem_optional,
            symbolic,
        },
        default,
    })
}

impl ParamType {
    fn describe(&self) -> String {
        let base = match self.base {
            Base::Tensor => "Tensor",
            Base::Int => "int",
            Base::Scalar => "Scalar",
            Base::Float => "float",
            Base::Bool => "bool",
            Base::Str => "str",
            Base::ScalarType => "ScalarType",
            Base::Layout => "Layout",
            Base::Device => "Device",
            Base::MemoryFormat => "MemoryFormat",
        };
        format!(
            "{base}{}{}{}",
            if self.elem_optional { "?" } else { "" },
            if self.list { "[]" } else { "" },
            if self.optional { "?" } else { "" }
        )
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::None => "null",
        Value::Bool(_) => "a bool",
        Value::Int(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Str(_) => "a string",
        Value::SymBool(_) => "a symbool",
        Value::Tensor(_) => "a tensor",
        Value::DType(_) => "a dtype",
        Value::List(_) => "a list",
    }
}

impl Schema {
    /// Binds JSON arguments (by name) to this schema: typed, in schema order, defaults filled in.
    pub fn bind(&self, args: &[(String, Value)], env: &mut ShapeEnv) -> Result<Vec<Arg>, String> {
        for (name, _) in args {
            if !self.params.iter().any(|p| &p.name == name) {
                let known: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
                return Err(format!(
                    "unknown argument '{name}' (the schema has: {})",
                    known.join(", ")
                ));
            }
        }
        self.params
            .iter()
            .map(|p| {
                let arg = match args.iter().find(|a| a.0 == p.name) {
                    Some((_, v)) => {
                        constant_unless_symint(v, &p.ty).and_then(|()| bind_value(v, &p.ty, env))
                    }
                    None => match &p.default {
                        Some(d) => bind_default(d, &p.ty, env),
                        None => Err("missing (it has no default)".to_string()),
                    },
                };
                arg.map_err(|m| format!("argument '{}' ({}): {m}", p.name, p.ty.describe()))
            })
            .collect()
    }
}

/// A plain `int` (or `int[]`) takes constants only: a symbolic value is refused.
fn constant_unless_symint(v: &Value, ty: &ParamType) -> Result<(), String> {
    if ty.base != Base::Int || ty.symbolic {
        return Ok(());
    }
    let symbolic = match v {
        Value::Str(_) => true,
        Value::List(items) => items.iter().any(|x| matches!(x, Value::Str(_))),
        _ => false,
    };
    if symbolic {
        return Err(
            "a symbolic value where the schema takes a constant int (not SymInt)".to_string(),
        );
    }
    Ok(())
}

fn symbolic_int(s: &str, env: &mut ShapeEnv) -> Result<Expr, String> {
    let e = env.parse(s).map_err(|e| e.to_string())?;
    if env.pool().info(e).is_bool {
        return Err(format!("'{s}' is a condition, not an integer"));
    }
    Ok(e)
}

fn int(v: &Value, env: &mut ShapeEnv) -> Result<Expr, String> {
    match v {
        Value::Int(i) => Ok(env.pool_mut().constant(*i)),
        Value::Str(s) => symbolic_int(s, env),
        other => Err(format!(
            "expected an integer or a symbolic integer, found {}",
            describe(other)
        )),
    }
}

fn scalar(v: &Value, env: &mut ShapeEnv) -> Result<Scalar, String> {
    match v {
        Value::Int(_) | Value::Str(_) => Ok(Scalar::Int(int(v, env)?)),
        Value::Float(f) => Ok(Scalar::Float(*f)),
        Value::Bool(b) => Ok(Scalar::Bool(*b)),
        other => Err(format!("expected a number, found {}", describe(other))),
    }
}

fn bind_value(v: &Value, ty: &ParamType, env: &mut ShapeEnv) -> Result<Arg, String> {
    if matches!(v, Value::None) {
        return if ty.optional {
            Ok(Arg::None)
        } else {
            Err("null where a value is required".into())
        };
    }
    if ty.list {
        let items: Vec<Value> = match v {
            Value::List(items) => items.clone(),
            // `int[1] dim` also takes a single integer, as in PyTorch.
            Value::Int(_) | Value::Str(_) if ty.base == Base::Int => vec![v.clone()],
            other => return Err(format!("expected a list, found {}", describe(other))),
        };
        return match ty.base {
            Base::Int => Ok(Arg::Ints(
                items
                    .iter()
                    .map(|x| int(x, env))
                    .collect::<Result<_, _>>()?,
            )),
            Base::Tensor => Ok(Arg::Tensors(
                items
                    .iter()
                    .map(|x| match x {
                        Value::Tensor(r) => Ok(Some(*r)),
                        Value::None if ty.elem_optional => Ok(None),
                        other => Err(format!(
                            "expected a list of tensors, found {} in it",
                            describe(other)
                        )),
                    })
                    .collect::<Result<_, _>>()?,
            )),
            Base::Float => Ok(Arg::Floats(
                items
                    .iter()
                    .map(|x| match x {
                        Value::Float(f) => Ok(*f),
                        Value::Int(i) => Ok(*i as f64),
                        other => Err(format!(
                            "expected a list of floats, found {} in it",
                            describe(other)
                        )),
                    })
                    .collect::<Result<_, _>>()?,
            )),
            _ => Err("unsupported list type".into()),
        };
    }
    match (ty.base, v) {
        (Base::Tensor, Value::Tensor(r)) => Ok(Arg::Tensor(*r)),
        (Base::Tensor, Value::Int(_) | Value::Float(_) | Value::Bool(_) | Value::Str(_)) => {
            Ok(Arg::Number(scalar(v, env)?))
        }
        (Base::Int, _) => Ok(Arg::Int(int(v, env)?)),
        (Base::Scalar, Value::SymBool(e)) => Ok(Arg::SymBool(*e)),
        (Base::Scalar, _) => Ok(Arg::Scalar(scalar(v, env)?)),
        (Base::Float, Value::Float(f)) => Ok(Arg::Float(*f)),
        (Base::Float, Value::Int(i)) => Ok(Arg::Float(*i as f64)),
        (Base::Bool, Value::Bool(b)) => Ok(Arg::Bool(*b)),
        (Base::Str | Base::Layout | Base::Device | Base::MemoryFormat, Value::Str(s)) => {
            Ok(Arg::Str(s.clone()))
        }
        (Base::ScalarType, Value::DType(d)) => Ok(Arg::DType(*d)),
        (_, other) => Err(format!("found {}", describe(other))),
    }
}

fn bind_default(d: &str, ty: &ParamType, env: &mut ShapeEnv) -> Result<Arg, String> {
    let v = match d {
        "None" => Value::None,
        "True" => Value::Bool(true),
        "False" => Value::Bool(false),
        "[]" => Value::List(Vec::new()),
        s if s.starts_with('\'') => Value::Str(s.trim_matches('\'').to_string()),
        s => match s.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Float(s.parse::<f64>().map_err(|_| format!("bad default '{s}'"))?),
        },
    };
    bind_value(&v, ty, env)
}
