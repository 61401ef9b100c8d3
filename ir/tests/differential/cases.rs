//! One-node graphs of every lowered op (over [`super::one_op`]'s inputs), shared by the
//! lowering's and the backends' differential tests.

/// Convolutions over an input of `n` images whose spatial sizes are `h` (and `w`, `d`), all
/// unbacked: `(input shape, weight shape, bias, other arguments)`.
pub const CONV_CASES: &[(&str, &str, bool, &str)] = &[
    // 3×3, padded, with a bias.
    (
        r#"["n", 4, "h", "w"]"#,
        "[6, 4, 3, 3]",
        true,
        r#""stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1"#,
    ),
    // Strided, dilated, asymmetric, two groups.
    (
        r#"["n", 4, "h", "w"]"#,
        "[6, 2, 3, 2]",
        false,
        r#""stride": [2, 1], "padding": [0, 2], "dilation": [1, 2], "groups": 2"#,
    ),
    // Depthwise.
    (
        r#"["n", 4, "h", "w"]"#,
        "[4, 1, 3, 3]",
        true,
        r#""stride": [1], "padding": [1], "dilation": [1], "groups": 4"#,
    ),
    // A vision transformer's patch embedding: kernel = stride, no padding.
    (
        r#"["n", 3, "h", "w"]"#,
        "[8, 3, 4, 4]",
        true,
        r#""stride": [4, 4], "padding": [0, 0], "dilation": [1, 1], "groups": 1"#,
    ),
    // 1-D (Whisper's front end): strided, padded.
    (
        r#"["n", 4, "h"]"#,
        "[8, 4, 3]",
        true,
        r#""stride": [2], "padding": [1], "dilation": [1], "groups": 1"#,
    ),
    // 3-D.
    (
        r#"["n", 2, "d", "h", "w"]"#,
        "[4, 2, 2, 2, 2]",
        false,
        r#""stride": [1, 2, 1], "padding": [1, 0, 0], "dilation": [1, 1, 1], "groups": 1"#,
    ),
    // Transposed (a decoder's upsampling): strided, padded, an output padding, a bias.
    (
        r#"["n", 4, "h", "w"]"#,
        "[4, 3, 3, 3]",
        true,
        r#""stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "groups": 1, "transposed": true, "output_padding": [1, 0]"#,
    ),
    // Transposed 1-D: two groups, dilated, a stride of 3.
    (
        r#"["n", 4, "h"]"#,
        "[4, 2, 4]",
        true,
        r#""stride": [3], "padding": [0], "dilation": [2], "groups": 2, "transposed": true, "output_padding": [1]"#,
    ),
];

/// Scatters at data-dependent positions (indices drawn by the test: in range, or not).
pub const SCATTER_CASES: &[(&str, &str)] = &[
    (
        "aten.scatter.src",
        r#"{"self": {"tensor": "x"}, "dim": 1, "index": {"tensor": "i"}, "src": {"tensor": "h"}}"#,
    ),
    (
        "aten.scatter.value",
        r#"{"self": {"tensor": "x"}, "dim": -1, "index": {"tensor": "i"}, "value": -1.5}"#,
    ),
    (
        "aten.scatter.value",
        r#"{"self": {"tensor": "i"}, "dim": 1, "index": {"tensor": "i"}, "value": 7}"#,
    ),
    // Duplicate positions (indices 0 and 1 down the rows): all added.
    (
        "aten.scatter_add.default",
        r#"{"self": {"tensor": "x"}, "dim": 0, "index": {"tensor": "i"}, "src": {"tensor": "x"}}"#,
    ),
    // Rows of `m` true take the source's elements in order (the source `x` always has enough).
    (
        "aten.masked_scatter.default",
        r#"{"self": {"tensor": "x"}, "mask": {"tensor": "m"}, "source": {"tensor": "x"}}"#,
    ),
    (
        "aten.masked_scatter.default",
        r#"{"self": {"tensor": "y"}, "mask": {"tensor": "m"}, "source": {"tensor": "x"}}"#,
    ),
    // Every reduction, with and without self, floats and integers.
    (
        "aten.scatter_reduce.two",
        r#"{"self": {"tensor": "x"}, "dim": 0, "index": {"tensor": "i"}, "src": {"tensor": "x"}, "reduce": "sum", "include_self": false}"#,
    ),
    (
        "aten.scatter_reduce.two",
        r#"{"self": {"tensor": "x"}, "dim": 0, "index": {"tensor": "i"}, "src": {"tensor": "x"}, "reduce": "prod"}"#,
    ),
    (
        "aten.scatter_reduce.two",
        r#"{"self": {"tensor": "i"}, "dim": 0, "index": {"tensor": "i"}, "src": {"tensor": "i"}, "reduce": "amax", "include_self": false}"#,
    ),
    (
        "aten.scatter_reduce.two",
        r#"{"self": {"tensor": "x"}, "dim": 1, "index": {"tensor": "i"}, "src": {"tensor": "x"}, "reduce": "amin"}"#,
    ),
    (
        "aten.scatter_reduce.two",
        r#"{"self": {"tensor": "h"}, "dim": 0, "index": {"tensor": "i"}, "src": {"tensor": "h"}, "reduce": "mean"}"#,
    ),
    (
        "aten.scatter_reduce.two",
        r#"{"self": {"tensor": "i"}, "dim": 0, "index": {"tensor": "i"}, "src": {"tensor": "i"}, "reduce": "mean", "include_self": false}"#,
    ),
];

pub const CASES: &[(&str, &str)] = &[
    (
        "aten.argmin.default",
        r#"{"self": {"tensor": "x"}, "dim": 1}"#,
    ),
    (
        "aten.argmin.default",
        r#"{"self": {"tensor": "i"}, "dim": 0, "keepdim": true}"#,
    ),
    ("aten.expm1.default", r#"{"self": {"tensor": "x"}}"#),
    // NaN on one side (log of negatives) is ignored; on both, kept.
    (
        "aten.fmax.default",
        r#"{"self": {"tensor": "x"}, "other": {"tensor": "y"}}"#,
    ),
    (
        "aten.fmin.default",
        r#"{"self": {"tensor": "i"}, "other": {"tensor": "h"}}"#,
    ),
    (
        "aten.fmax.default",
        r#"{"self": {"tensor": "i"}, "other": {"tensor": "i"}}"#,
    ),
    ("aten.log2.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.log10.default", r#"{"self": {"tensor": "h"}}"#),
    ("aten.exp2.default", r#"{"self": {"tensor": "i"}}"#),
    ("aten.tan.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.atan.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.asin.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.acos.default", r#"{"self": {"tensor": "h"}}"#),
    ("aten.sinh.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.cosh.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.asinh.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.acosh.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.atanh.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.floor.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.ceil.default", r#"{"self": {"tensor": "h"}}"#),
    ("aten.round.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.round.default", r#"{"self": {"tensor": "i"}}"#),
    ("aten.trunc.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.sign.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.sign.default", r#"{"self": {"tensor": "i"}}"#),
    ("aten.sign.default", r#"{"self": {"tensor": "m"}}"#),
    ("aten.sgn.default", r#"{"self": {"tensor": "h"}}"#),
    ("aten.isnan.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.isinf.default", r#"{"self": {"tensor": "h"}}"#),
    ("aten.isnan.default", r#"{"self": {"tensor": "i"}}"#),
    (
        "aten.round.decimals",
        r#"{"self": {"tensor": "x"}, "decimals": 2}"#,
    ),
    (
        "aten.round.decimals",
        r#"{"self": {"tensor": "h"}, "decimals": -1}"#,
    ),
    (
        "aten.atan2.default",
        r#"{"self": {"tensor": "x"}, "other": {"tensor": "y"}}"#,
    ),
    (
        "aten.hypot.default",
        r#"{"self": {"tensor": "x"}, "other": {"tensor": "y"}}"#,
    ),
    (
        "aten.hypot.default",
        r#"{"self": {"tensor": "h"}, "other": {"tensor": "x"}}"#,
    ),
    (
        "aten.copysign.Tensor",
        r#"{"self": {"tensor": "x"}, "other": {"tensor": "y"}}"#,
    ),
    (
        "aten.copysign.Tensor",
        r#"{"self": {"tensor": "i"}, "other": {"tensor": "h"}}"#,
    ),
    (
        "aten.copysign.Scalar",
        r#"{"self": {"tensor": "x"}, "other": -2}"#,
    ),
    (
        "aten.atan2.default",
        r#"{"self": {"tensor": "i"}, "other": {"tensor": "x"}}"#,
    ),
    (
        "aten.logical_xor.default",
        r#"{"self": {"tensor": "m"}, "other": {"tensor": "x"}}"#,
    ),
    (
        "aten.bitwise_xor.Tensor",
        r#"{"self": {"tensor": "m"}, "other": {"tensor": "m"}}"#,
    ),
    (
        "aten.bitwise_xor.Scalar",
        r#"{"self": {"tensor": "i"}, "other": 5}"#,
    ),
    (
        "aten.bitwise_and.Scalar",
        r#"{"self": {"tensor": "i"}, "other": 3}"#,
    ),
    (
        "aten.bitwise_or.Scalar",
        r#"{"self": {"tensor": "m"}, "other": true}"#,
    ),
    (
        "aten.__lshift__.Scalar",
        r#"{"self": {"tensor": "i"}, "other": 61}"#,
    ),
    (
        "aten.__rshift__.Tensor",
        r#"{"self": {"tensor": "i"}, "other": {"tensor": "i"}}"#,
    ),
    (
        "aten.bitwise_left_shift.Tensor",
        r#"{"self": {"tensor": "i"}, "other": {"tensor": "i"}}"#,
    ),
    (
        "aten.bitwise_right_shift.Tensor_Scalar",
        r#"{"self": {"tensor": "i"}, "other": 70}"#,
    ),
    ("aten.hardtanh.default", r#"{"self": {"tensor": "x"}}"#),
    (
        "aten.hardtanh.default",
        r#"{"self": {"tensor": "h"}, "min_val": -0.5, "max_val": 0.25}"#,
    ),
    (
        "aten.leaky_relu.default",
        r#"{"self": {"tensor": "x"}, "negative_slope": 0.2}"#,
    ),
    ("aten.elu.default", r#"{"self": {"tensor": "h"}}"#),
    (
        "aten.elu.default",
        r#"{"self": {"tensor": "x"}, "alpha": 1.6732632423543772, "scale": 1.0507009873554805, "input_scale": 0.5}"#,
    ),
    ("aten.neg.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.neg.default", r#"{"self": {"tensor": "i"}}"#),
    ("aten.abs.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.relu.default", r#"{"self": {"tensor": "h"}}"#),
    ("aten.exp.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.exp.default", r#"{"self": {"tensor": "i"}}"#),
    ("aten.log.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.log1p.default", r#"{"self": {"tensor": "h"}}"#),
    ("aten.sqrt.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.rsqrt.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.sin.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.cos.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.tanh.default", r#"{"self": {"tensor": "h"}}"#),
    ("aten.sigmoid.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.erf.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.reciprocal.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.silu.default", r#"{"self": {"tensor": "h"}}"#),
    ("aten.gelu.default", r#"{"self": {"tensor": "x"}}"#),
    (
        "aten.gelu.default",
        r#"{"self": {"tensor": "x"}, "approximate": "tanh"}"#,
    ),
    ("aten.logical_not.default", r#"{"self": {"tensor": "i"}}"#),
    ("aten.bitwise_not.default", r#"{"self": {"tensor": "i"}}"#),
    ("aten.bitwise_not.default", r#"{"self": {"tensor": "m"}}"#),
    (
        "aten.add.Tensor",
        r#"{"self": {"tensor": "x"}, "other": {"tensor": "y"}, "alpha": 2}"#,
    ),
    (
        "aten.add.Tensor",
        r#"{"self": {"tensor": "x"}, "other": 1e-06}"#,
    ),
    (
        "aten.add.Tensor",
        r#"{"self": {"tensor": "i"}, "other": 3}"#,
    ),
    (
        "aten.add.Tensor",
        r#"{"self": {"tensor": "i"}, "other": 2.5}"#,
    ),
    (
        "aten.add.Tensor",
        r#"{"self": {"tensor": "i"}, "other": "u0"}"#,
    ),
    (
        "aten.add.Tensor",
        r#"{"self": {"tensor": "h"}, "other": {"tensor": "x"}}"#,
    ),
    (
        "aten.sub.Tensor",
        r#"{"self": {"tensor": "x"}, "other": {"tensor": "i"}}"#,
    ),
    (
        "aten.rsub.Scalar",
        r#"{"self": {"tensor": "x"}, "other": 1}"#,
    ),
    (
        "aten.mul.Tensor",
        r#"{"self": {"tensor": "h"}, "other": {"tensor": "h"}}"#,
    ),
    (
        "aten.mul.Scalar",
        r#"{"self": {"tensor": "i"}, "other": -4}"#,
    ),
    (
        "aten.div.Tensor",
        r#"{"self": {"tensor": "i"}, "other": 3}"#,
    ),
    (
        "aten.div.Tensor",
        r#"{"self": {"tensor": "x"}, "other": {"tensor": "y"}}"#,
    ),
    (
        "aten.div.Tensor_mode",
        r#"{"self": {"tensor": "x"}, "other": 0.75, "rounding_mode": "floor"}"#,
    ),
    (
        "aten.div.Tensor_mode",
        r#"{"self": {"tensor": "i"}, "other": -2, "rounding_mode": "floor"}"#,
    ),
    (
        "aten.div.Tensor_mode",
        r#"{"self": {"tensor": "i"}, "other": -2, "rounding_mode": "trunc"}"#,
    ),
    (
        "aten.maximum.default",
        r#"{"self": {"tensor": "x"}, "other": {"tensor": "y"}}"#,
    ),
    (
        "aten.minimum.default",
        r#"{"self": {"tensor": "i"}, "other": {"tensor": "x"}}"#,
    ),
    (
        "aten.pow.Tensor_Scalar",
        r#"{"self": {"tensor": "x"}, "exponent": 2}"#,
    ),
    (
        "aten.pow.Tensor_Scalar",
        r#"{"self": {"tensor": "i"}, "exponent": 3}"#,
    ),
    ("aten.eq.Scalar", r#"{"self": {"tensor": "i"}, "other": 1}"#),
    (
        "aten.lt.Tensor",
        r#"{"self": {"tensor": "x"}, "other": {"tensor": "y"}}"#,
    ),
    (
        "aten.ge.Scalar",
        r#"{"self": {"tensor": "h"}, "other": 0.5}"#,
    ),
    (
        "aten.logical_and.default",
        r#"{"self": {"tensor": "m"}, "other": {"tensor": "i"}}"#,
    ),
    (
        "aten.bitwise_and.Tensor",
        r#"{"self": {"tensor": "i"}, "other": 6}"#,
    ),
    (
        "aten.where.self",
        r#"{"condition": {"tensor": "m"}, "self": {"tensor": "x"}, "other": {"tensor": "y"}}"#,
    ),
    (
        "aten.where.ScalarOther",
        r#"{"condition": {"tensor": "m"}, "self": {"tensor": "i"}, "other": 0.5}"#,
    ),
    (
        "aten.masked_fill.Scalar",
        r#"{"self": {"tensor": "h"}, "mask": {"tensor": "m"}, "value": {"float": "-inf"}}"#,
    ),
    (
        "aten.clamp.default",
        r#"{"self": {"tensor": "x"}, "min": -0.5, "max": 0.5}"#,
    ),
    (
        "aten.clamp_min.default",
        r#"{"self": {"tensor": "i"}, "min": 2}"#,
    ),
    (
        "aten._to_copy.default",
        r#"{"self": {"tensor": "x"}, "dtype": {"dtype": "bf16"}}"#,
    ),
    (
        "aten._to_copy.default",
        r#"{"self": {"tensor": "x"}, "dtype": {"dtype": "i64"}}"#,
    ),
    (
        "aten._to_copy.default",
        r#"{"self": {"tensor": "i"}, "dtype": {"dtype": "bool"}}"#,
    ),
    (
        "aten.sum.dim_IntList",
        r#"{"self": {"tensor": "x"}, "dim": [-1]}"#,
    ),
    (
        "aten.sum.dim_IntList",
        r#"{"self": {"tensor": "i"}, "dim": [0], "keepdim": true}"#,
    ),
    (
        "aten.sum.dim_IntList",
        r#"{"self": {"tensor": "h"}, "dim": null}"#,
    ),
    (
        "aten.mean.dim",
        r#"{"self": {"tensor": "x"}, "dim": [-1], "keepdim": true}"#,
    ),
    ("aten.mean.dim", r#"{"self": {"tensor": "h"}, "dim": [0]}"#),
    ("aten.mean.default", r#"{"self": {"tensor": "x"}}"#),
    (
        "aten.mean.default",
        r#"{"self": {"tensor": "h"}, "dtype": {"dtype": "f64"}}"#,
    ),
    ("aten.sum.default", r#"{"self": {"tensor": "i"}}"#),
    ("aten.prod.default", r#"{"self": {"tensor": "y"}}"#),
    (
        "aten.prod.dim_int",
        r#"{"self": {"tensor": "x"}, "dim": 1}"#,
    ),
    (
        "aten.prod.dim_int",
        r#"{"self": {"tensor": "h"}, "dim": 0, "keepdim": true}"#,
    ),
    (
        "aten.prod.dim_int",
        r#"{"self": {"tensor": "i"}, "dim": -1}"#,
    ),
    (
        "aten.prod.dim_int",
        r#"{"self": {"tensor": "m"}, "dim": 0, "dtype": {"dtype": "f64"}}"#,
    ),
    ("aten.any.default", r#"{"self": {"tensor": "x"}}"#),
    (
        "aten.any.dims",
        r#"{"self": {"tensor": "i"}, "dim": [0, -1], "keepdim": true}"#,
    ),
    (
        "aten.amax.default",
        r#"{"self": {"tensor": "x"}, "dim": [1]}"#,
    ),
    (
        "aten.amax.default",
        r#"{"self": {"tensor": "x"}, "dim": [0]}"#,
    ),
    ("aten.max.default", r#"{"self": {"tensor": "x"}}"#),
    ("aten.min.default", r#"{"self": {"tensor": "i"}}"#),
    (
        "aten.amin.default",
        r#"{"self": {"tensor": "i"}, "dim": [-1], "keepdim": true}"#,
    ),
    ("aten.any.dim", r#"{"self": {"tensor": "m"}, "dim": 1}"#),
    // Softmax over the unbacked dimension: empty when u0 = 0 (no row, no error).
    (
        "aten._softmax.default",
        r#"{"self": {"tensor": "x"}, "dim": 0, "half_to_float": false}"#,
    ),
    // Reductions over a dimension of size 1 (LeViT's last attention: one key) are the element.
    (
        "aten._softmax.default",
        r#"{"self": {"tensor": "o"}, "dim": 1, "half_to_float": false}"#,
    ),
    (
        "aten._log_softmax.default",
        r#"{"self": {"tensor": "o"}, "dim": -2, "half_to_float": false}"#,
    ),
    (
        "aten.sum.dim_IntList",
        r#"{"self": {"tensor": "o"}, "dim": [1]}"#,
    ),
    (
        "aten.argmax.default",
        r#"{"self": {"tensor": "o"}, "dim": 1, "keepdim": true}"#,
    ),
    (
        "aten.prod.dim_int",
        r#"{"self": {"tensor": "o"}, "dim": 1}"#,
    ),
    ("aten.any.dim", r#"{"self": {"tensor": "o"}, "dim": 1}"#),
    (
        "aten.var.correction",
        r#"{"self": {"tensor": "o"}, "dim": [1], "correction": 0, "keepdim": true}"#,
    ),
    (
        "aten.cumsum.default",
        r#"{"self": {"tensor": "x"}, "dim": 0}"#,
    ),
    (
        "aten.cumsum.default",
        r#"{"self": {"tensor": "m"}, "dim": -1}"#,
    ),
    (
        "aten.cumsum.default",
        r#"{"self": {"tensor": "z"}, "dim": 1, "dtype": {"dtype": "f64"}}"#,
    ),
    (
        "aten.cumprod.default",
        r#"{"self": {"tensor": "x"}, "dim": 0}"#,
    ),
    (
        "aten.cumprod.default",
        r#"{"self": {"tensor": "i"}, "dim": -1}"#,
    ),
    (
        "aten.cumprod.default",
        r#"{"self": {"tensor": "h"}, "dim": 1, "dtype": {"dtype": "f32"}}"#,
    ),
    (
        "aten.logcumsumexp.default",
        r#"{"self": {"tensor": "x"}, "dim": 0}"#,
    ),
    // Distances between rows: batch dimensions broadcast, every kind of p (sizes linear in u0:
    // the emulated device runs every case).
    (
        "aten._cdist_forward.default",
        r#"{"x1": {"tensor": "o"}, "x2": {"tensor": "c3"}, "p": 2.0, "compute_mode": null}"#,
    ),
    (
        "aten._cdist_forward.default",
        r#"{"x1": {"tensor": "c3"}, "x2": {"tensor": "o"}, "p": 1.0, "compute_mode": 2}"#,
    ),
    (
        "aten._cdist_forward.default",
        r#"{"x1": {"tensor": "o"}, "x2": {"tensor": "c3"}, "p": {"float": "inf"}, "compute_mode": null}"#,
    ),
    (
        "aten._cdist_forward.default",
        r#"{"x1": {"tensor": "o"}, "x2": {"tensor": "o"}, "p": 0.0, "compute_mode": null}"#,
    ),
    (
        "aten._cdist_forward.default",
        r#"{"x1": {"tensor": "c3"}, "x2": {"tensor": "o"}, "p": 3.0, "compute_mode": null}"#,
    ),
    // Views over a tensor's storage: a transpose, overlapping windows, an offset.
    (
        "aten.as_strided.default",
        r#"{"self": {"tensor": "x"}, "size": [5, "u0"], "stride": [1, 5]}"#,
    ),
    (
        "aten.as_strided.default",
        r#"{"self": {"tensor": "i"}, "size": ["u0", 2, 3], "stride": [5, 1, 1], "storage_offset": 1}"#,
    ),
    (
        "aten.as_strided.default",
        r#"{"self": {"tensor": "y"}, "size": [2, 2], "stride": [0, 3], "storage_offset": 1}"#,
    ),
    // A view of a tensor's storage replaced: two columns at an offset, every other column.
    (
        "aten.as_strided_scatter.default",
        r#"{"self": {"tensor": "x"}, "src": {"tensor": "s2"}, "size": ["u0", 2], "stride": [5, 1], "storage_offset": 2}"#,
    ),
    (
        "aten.as_strided_scatter.default",
        r#"{"self": {"tensor": "x"}, "src": {"tensor": "s2"}, "size": ["u0", 2], "stride": [5, 2]}"#,
    ),
    (
        "aten.empty_strided.default",
        r#"{"size": ["u0", 3], "stride": [3, 1], "dtype": {"dtype": "i32"}}"#,
    ),
    // Binary searches (over unsorted sequences too: both sides search the same way).
    (
        "aten.searchsorted.Tensor",
        r#"{"sorted_sequence": {"tensor": "y"}, "self": {"tensor": "x"}}"#,
    ),
    (
        "aten.searchsorted.Tensor",
        r#"{"sorted_sequence": {"tensor": "s2"}, "self": {"tensor": "x"}, "right": true}"#,
    ),
    (
        "aten.searchsorted.Tensor",
        r#"{"sorted_sequence": {"tensor": "ids"}, "self": {"tensor": "y"}, "side": "right", "out_int32": true}"#,
    ),
    (
        "aten.searchsorted.Scalar",
        r#"{"sorted_sequence": {"tensor": "ids"}, "self": 2}"#,
    ),
    (
        "aten.bucketize.Tensor",
        r#"{"self": {"tensor": "i"}, "boundaries": {"tensor": "y"}, "right": true}"#,
    ),
    // Each value is in its own row of the sequence: the probes meet equal elements.
    (
        "aten.searchsorted.Tensor",
        r#"{"sorted_sequence": {"tensor": "i"}, "self": {"tensor": "i"}}"#,
    ),
    (
        "aten.searchsorted.Tensor",
        r#"{"sorted_sequence": {"tensor": "i"}, "self": {"tensor": "x"}, "right": true}"#,
    ),
    (
        "aten.bucketize.Tensor",
        r#"{"self": {"tensor": "ids"}, "boundaries": {"tensor": "ids"}}"#,
    ),
    (
        "aten.bucketize.Tensor",
        r#"{"self": {"tensor": "ids"}, "boundaries": {"tensor": "ids"}, "right": true}"#,
    ),
    (
        "aten.logcumsumexp.default",
        r#"{"self": {"tensor": "z"}, "dim": 1}"#,
    ),
    (
        "aten._softmax.default",
        r#"{"self": {"tensor": "x"}, "dim": -1, "half_to_float": false}"#,
    ),
    (
        "aten._softmax.default",
        r#"{"self": {"tensor": "h"}, "dim": 0, "half_to_float": false}"#,
    ),
    (
        "aten._log_softmax.default",
        r#"{"self": {"tensor": "x"}, "dim": 1, "half_to_float": false}"#,
    ),
    (
        "aten.view.default",
        r#"{"self": {"tensor": "x"}, "size": [-1]}"#,
    ),
    (
        "aten.view.default",
        r#"{"self": {"tensor": "x"}, "size": [5, "u0"]}"#,
    ),
    (
        "aten.reshape.default",
        r#"{"self": {"tensor": "i"}, "shape": ["u0", 1, 5]}"#,
    ),
    (
        "aten._unsafe_view.default",
        r#"{"self": {"tensor": "x"}, "size": ["5*u0"]}"#,
    ),
    (
        "aten.permute.default",
        r#"{"self": {"tensor": "x"}, "dims": [1, 0]}"#,
    ),
    (
        "aten.permute.default",
        r#"{"self": {"tensor": "z"}, "dims": [2, 0, 1]}"#,
    ),
    (
        "aten.permute.default",
        r#"{"self": {"tensor": "z"}, "dims": [1, 2, 0]}"#,
    ),
    (
        "aten.transpose.int",
        r#"{"self": {"tensor": "z"}, "dim0": 0, "dim1": 2}"#,
    ),
    (
        "aten.sum.dim_IntList",
        r#"{"self": {"tensor": "z"}, "dim": [0, 2]}"#,
    ),
    (
        "aten.amax.default",
        r#"{"self": {"tensor": "z"}, "dim": [0, -1], "keepdim": true}"#,
    ),
    (
        "aten.view.default",
        r#"{"self": {"tensor": "z"}, "size": [6, "u0"]}"#,
    ),
    (
        "aten.view.default",
        r#"{"self": {"tensor": "z"}, "size": ["3*u0", 2]}"#,
    ),
    (
        "aten.unfold.default",
        r#"{"self": {"tensor": "x"}, "dimension": 1, "size": 2, "step": 2}"#,
    ),
    (
        "aten.unfold.default",
        r#"{"self": {"tensor": "x"}, "dimension": 0, "size": 1, "step": 3}"#,
    ),
    (
        "aten.unfold.default",
        r#"{"self": {"tensor": "h"}, "dimension": -1, "size": 3, "step": 1}"#,
    ),
    (
        "aten.unfold.default",
        r#"{"self": {"tensor": "z"}, "dimension": 2, "size": 0, "step": 1}"#,
    ),
    ("aten.diagonal.default", r#"{"self": {"tensor": "x"}}"#),
    (
        "aten.diagonal.default",
        r#"{"self": {"tensor": "x"}, "offset": 2}"#,
    ),
    (
        "aten.diagonal.default",
        r#"{"self": {"tensor": "i"}, "offset": -1, "dim1": 1, "dim2": 0}"#,
    ),
    (
        "aten.diagonal.default",
        r#"{"self": {"tensor": "z"}, "offset": 1, "dim1": 2, "dim2": 0}"#,
    ),
    (
        "aten.diagonal.default",
        r#"{"self": {"tensor": "x"}, "offset": 7}"#,
    ),
    (
        "aten.select.int",
        r#"{"self": {"tensor": "z"}, "dim": 0, "index": 1}"#,
    ),
    (
        "aten._softmax.default",
        r#"{"self": {"tensor": "z"}, "dim": 1, "half_to_float": false}"#,
    ),
    (
        "aten.transpose.int",
        r#"{"self": {"tensor": "h"}, "dim0": 0, "dim1": -1}"#,
    ),
    ("aten.t.default", r#"{"self": {"tensor": "i"}}"#),
    (
        "aten.unsqueeze.default",
        r#"{"self": {"tensor": "x"}, "dim": 1}"#,
    ),
    (
        "aten.squeeze.dims",
        r#"{"self": {"tensor": "x"}, "dim": [0]}"#,
    ),
    (
        "aten.expand.default",
        r#"{"self": {"tensor": "y"}, "size": ["u0", 5]}"#,
    ),
    (
        "aten.expand.default",
        r#"{"self": {"tensor": "x"}, "size": [2, -1, -1]}"#,
    ),
    (
        "aten.slice.Tensor",
        r#"{"self": {"tensor": "x"}, "dim": 1, "start": 1, "end": -1}"#,
    ),
    (
        "aten.slice.Tensor",
        r#"{"self": {"tensor": "x"}, "dim": 0, "start": 1, "end": 9223372036854775807, "step": 2}"#,
    ),
    (
        "aten.slice.Tensor",
        r#"{"self": {"tensor": "i"}, "dim": 0, "start": -3}"#,
    ),
    (
        "aten.select.int",
        r#"{"self": {"tensor": "x"}, "dim": 1, "index": -2}"#,
    ),
    (
        "aten.full.default",
        r#"{"size": ["u0", 2], "fill_value": 1.5}"#,
    ),
    (
        "aten.mm.default",
        r#"{"self": {"tensor": "x"}, "mat2": {"tensor": "w"}}"#,
    ),
    (
        "aten.bmm.default",
        r#"{"self": {"tensor": "z"}, "mat2": {"tensor": "bw"}}"#,
    ),
    (
        "aten.addmm.default",
        r#"{"self": {"tensor": "b4"}, "mat1": {"tensor": "x"}, "mat2": {"tensor": "w"}, "beta": 2, "alpha": 0.5}"#,
    ),
    (
        "aten.addmm.default",
        r#"{"self": {"tensor": "b4"}, "mat1": {"tensor": "x"}, "mat2": {"tensor": "w"}}"#,
    ),
    (
        "aten.full_like.default",
        r#"{"self": {"tensor": "i"}, "fill_value": 7}"#,
    ),
    (
        "aten.scalar_tensor.default",
        r#"{"s": 3, "dtype": {"dtype": "f32"}}"#,
    ),
    (
        "aten.arange.start_step",
        r#"{"start": 0, "end": "u0", "step": 2}"#,
    ),
    (
        "aten.arange.default",
        r#"{"end": "u0 + 3", "dtype": {"dtype": "f32"}}"#,
    ),
    (
        "aten.histc.default",
        r#"{"self": {"tensor": "x"}, "bins": 5, "min": -1, "max": 1.5}"#,
    ),
    // Fractions are true (0.5 → true), as in ATen.
    (
        "aten._to_copy.default",
        r#"{"self": {"tensor": "x"}, "dtype": {"dtype": "bool"}}"#,
    ),
    ("aten.histc.default", r#"{"self": {"tensor": "h"}}"#),
    (
        "aten.empty_permuted.default",
        r#"{"size": [2, "u0"], "physical_layout": [1, 0]}"#,
    ),
    (
        "aten._grouped_mm.default",
        r#"{"self": {"tensor": "z"}, "mat2": {"tensor": "bw"}}"#,
    ),
    (
        "aten.repeat.default",
        r#"{"self": {"tensor": "x"}, "repeats": [2, 1, 3]}"#,
    ),
    // Remainders with the dividend's sign (fmod) and the divisor's (remainder), floats and
    // integers (divisors of either sign; an integer zero divisor is an error both ways).
    (
        "aten.fmod.Tensor",
        r#"{"self": {"tensor": "x"}, "other": {"tensor": "y"}}"#,
    ),
    (
        "aten.fmod.Scalar",
        r#"{"self": {"tensor": "i"}, "other": -3}"#,
    ),
    (
        "aten.remainder.Tensor",
        r#"{"self": {"tensor": "h"}, "other": {"tensor": "x"}}"#,
    ),
    (
        "aten.remainder.Scalar",
        r#"{"self": {"tensor": "i"}, "other": 4}"#,
    ),
    (
        "aten.remainder.Scalar",
        r#"{"self": {"tensor": "x"}, "other": -0.75}"#,
    ),
    (
        "aten.repeat.default",
        r#"{"self": {"tensor": "ids"}, "repeats": ["u0"]}"#,
    ),
    (
        "aten.empty.memory_format",
        r#"{"size": [2, "u0"], "dtype": {"dtype": "i64"}}"#,
    ),
    // In-place assignments as functionalization writes them.
    (
        "aten.slice_scatter.default",
        r#"{"self": {"tensor": "x"}, "src": {"tensor": "s2"}, "dim": 1, "start": 1, "end": 3}"#,
    ),
    (
        "aten.slice_scatter.default",
        r#"{"self": {"tensor": "x"}, "src": {"tensor": "s2"}, "dim": 1, "step": 3}"#,
    ),
    (
        "aten.slice_scatter.default",
        r#"{"self": {"tensor": "x"}, "src": {"tensor": "s2"}, "dim": -1, "start": -2, "end": 9223372036854775807}"#,
    ),
    (
        "aten.slice_scatter.default",
        r#"{"self": {"tensor": "i"}, "src": {"tensor": "x"}, "dim": 0, "start": 0}"#,
    ),
    (
        "aten.select_scatter.default",
        r#"{"self": {"tensor": "z"}, "src": {"tensor": "s2"}, "dim": 0, "index": 1}"#,
    ),
    (
        "aten.select_scatter.default",
        r#"{"self": {"tensor": "x"}, "src": {"tensor": "y"}, "dim": 0, "index": -1}"#,
    ),
    (
        "aten.copy.default",
        r#"{"self": {"tensor": "x"}, "src": {"tensor": "y"}}"#,
    ),
    (
        "aten.copy.default",
        r#"{"self": {"tensor": "i"}, "src": {"tensor": "x"}}"#,
    ),
    (
        "aten.copy.default",
        r#"{"self": {"tensor": "h"}, "src": {"tensor": "x"}}"#,
    ),
];
