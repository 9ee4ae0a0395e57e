//! The operators on values once computed: arithmetic, comparison operands,
//! indexing, and how values read in messages.

use serde_json::Value;

use super::ast::{BinaryOp, Expr};
use super::error::{EvalError, bad};
use super::functions;

/// Every string inside `v` (numbers too, as text), for masking.
pub fn strings_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(items) => items.iter().for_each(|i| strings_in(i, out)),
        Value::Object(m) => m.values().for_each(|i| strings_in(i, out)),
        Value::Bool(_) | Value::Null => {}
    }
}

/// How a value's kind reads in a message.
pub(super) fn kind(v: &Value) -> &'static str {
    super::ty::Ty::of(v).phrase()
}

pub(super) fn boolean(v: &Value, op: BinaryOp, e: &Expr) -> Result<bool, EvalError> {
    v.as_bool().ok_or_else(|| {
        bad(
            format!(
                "`{}` takes booleans, but the value is {}",
                op.symbol(),
                kind(v)
            ),
            &e.span,
            "compare it first: `vars.n > 0 && …`",
        )
    })
}

pub(super) fn number(v: &Value, op: BinaryOp, e: &Expr) -> Result<f64, EvalError> {
    v.as_f64().ok_or_else(|| {
        bad(
            format!(
                "`{}` takes numbers, but the value is {}",
                op.symbol(),
                kind(v)
            ),
            &e.span,
            "use numbers; to join text write both in one string or use format()",
        )
    })
}

/// `a OP b` on numbers: whole numbers stay whole while the result is exact.
pub(super) fn arith(op: BinaryOp, a: &Value, b: &Value, e: &Expr) -> Result<Value, EvalError> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        let exact = match op {
            BinaryOp::Add => x.checked_add(y),
            BinaryOp::Sub => x.checked_sub(y),
            BinaryOp::Mul => x.checked_mul(y),
            BinaryOp::Div if y != 0 && x % y == 0 => x.checked_div(y),
            BinaryOp::Rem if y != 0 => x.checked_rem(y),
            _ => None,
        };
        if let Some(v) = exact {
            return Ok(Value::from(v));
        }
    }
    let (x, y) = (
        a.as_f64().unwrap_or(f64::NAN),
        b.as_f64().unwrap_or(f64::NAN),
    );
    if matches!(op, BinaryOp::Div | BinaryOp::Rem) && y == 0.0 {
        return Err(bad("division by zero".into(), &e.span, "check the divisor"));
    }
    let r = match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        _ => x % y,
    };
    serde_json::Number::from_f64(r)
        .map(Value::Number)
        .ok_or_else(|| {
            bad(
                format!("`{}` gives no finite number here", op.symbol()),
                &e.span,
                "check the operands",
            )
        })
}

pub(super) fn index_into(
    base: &Value,
    i: &Value,
    expr: &Expr,
    index: &Expr,
) -> Result<Value, EvalError> {
    match base {
        Value::Array(items) => {
            let n = i
                .as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .ok_or_else(|| {
                    bad(
                        format!("a list's index must be a whole number from 0, not {i}"),
                        &index.span,
                        "lists are indexed from 0: `[0]`",
                    )
                })? as usize;
            items.get(n).cloned().ok_or_else(|| {
                bad(
                    format!(
                        "index {n} is past the end of the list, which has {} item{}",
                        items.len(),
                        if items.len() == 1 { "" } else { "s" }
                    ),
                    &index.span,
                    "element(list, i) wraps around instead",
                )
            })
        }
        Value::Object(m) => {
            let key = functions::text(i);
            m.get(&key).cloned().ok_or_else(|| {
                bad(
                    format!("the table has no key `{key}`"),
                    &index.span,
                    "lookup(table, key, default) gives a default instead",
                )
            })
        }
        other => Err(bad(
            format!(
                "`[…]` reads a list or a table, but the value is {}",
                kind(other)
            ),
            &expr.span,
            "index lists and tables only",
        )),
    }
}
