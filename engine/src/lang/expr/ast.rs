//! The syntax tree of an expression inside `${…}`: every node keeps the span
//! it was written at, so that each problem points at its own place.

use crate::diag::Span;

/// A reference to a value outside the expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// What it names.
    pub target: RefTarget,
    /// Where it is written.
    pub span: Span,
    /// An instance's key written as an expression (`steps.nccl[vars.n]`):
    /// the step in `target` is then the step's name, and the key is worked
    /// out once the variables are known (`lang::expand`), which puts the
    /// instance's address in `target` and clears this.
    pub index: Option<Box<Expr>>,
    /// `steps.nccl[*].outputs.busbw`: the output of every instance of a
    /// step with `for_each`, as a list in the order of its keys (empty when
    /// it has none).
    pub all: bool,
}

/// What a reference names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefTarget {
    /// A variable: `vars.NAME`.
    Var(String),
    /// An output of a step: `steps.STEP.outputs.KEY` (`KEY` may itself
    /// contain dots, `Subnet.Id`, as providers name nested outputs).
    Output {
        /// The step.
        step: String,
        /// The output key.
        key: String,
    },
    /// A name given to a template file by `templatefile(path, { NAME = … })`.
    Local(String),
    /// `each.key` or `each.value` inside a step with `for_each`.
    Each(EachField),
    /// `inputs.NAME` inside a module: what the call passes for `NAME`.
    Input(String),
    /// `modules.NAME.outputs.KEY`: an output of the module called `NAME`
    /// (its address once expanded: `outer.inner`).
    ModuleOutput {
        /// The module call's address.
        module: String,
        /// The output's name.
        key: String,
    },
}

/// What `each.…` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EachField {
    /// `each.key`: the instance's key.
    Key,
    /// `each.value`: the item or table value the instance was made for.
    Value,
}

impl std::fmt::Display for RefTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefTarget::Var(v) => write!(f, "vars.{v}"),
            RefTarget::Output { step, key } => write!(f, "steps.{step}.outputs.{key}"),
            RefTarget::Local(name) => f.write_str(name),
            RefTarget::Each(EachField::Key) => f.write_str("each.key"),
            RefTarget::Each(EachField::Value) => f.write_str("each.value"),
            RefTarget::Input(name) => write!(f, "inputs.{name}"),
            RefTarget::ModuleOutput { module, key } => write!(f, "modules.{module}.outputs.{key}"),
        }
    }
}

/// The address of the instance of step `base` for `key`: `nccl["8"]`.
pub fn instance_name(base: &str, key: &str) -> String {
    format!("{base}[{}]", serde_json::Value::from(key))
}

/// The step an address belongs to: `nccl` for `nccl["8"]` and for `nccl`.
pub fn base_name(address: &str) -> &str {
    address.split_once('[').map_or(address, |(base, _)| base)
}

/// One expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// Where it is written.
    pub span: Span,
    /// What it is.
    pub kind: ExprKind,
}

/// The kinds of expression.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// A literal number, string, boolean or `null`.
    Literal(serde_json::Value),
    /// A reference to a variable, a step output or a template name.
    Ref(Reference),
    /// `[a, b]`.
    List(Vec<Expr>),
    /// `{ key = value }`.
    Table(Vec<(String, Expr)>),
    /// `value.name`.
    Attr(Box<Expr>, String),
    /// `value[index]`.
    Index(Box<Expr>, Box<Expr>),
    /// `name(args…)`.
    Call(Call),
    /// `!a` or `-a`.
    Unary(UnaryOp, Box<Expr>),
    /// `a OP b`.
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `cond ? then : otherwise`.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
}

/// A function call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The function's name.
    pub name: String,
    /// Where the name is written.
    pub name_span: Span,
    /// The arguments.
    pub args: Vec<Expr>,
}

/// A prefix operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    /// `!`
    Not,
    /// `-`
    Neg,
}

/// An infix operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

impl BinaryOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Or => "||",
            BinaryOp::And => "&&",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
        }
    }

    /// How tightly it binds: higher binds tighter.
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Eq | BinaryOp::Ne => 3,
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => 4,
            BinaryOp::Add | BinaryOp::Sub => 5,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => 6,
        }
    }
}

impl Expr {
    /// Every reference inside, depth first.
    pub fn refs<'a>(&'a self, out: &mut Vec<&'a Reference>) {
        match &self.kind {
            ExprKind::Literal(_) => {}
            ExprKind::Ref(r) => {
                out.push(r);
                if let Some(index) = &r.index {
                    index.refs(out);
                }
            }
            ExprKind::List(items) => items.iter().for_each(|e| e.refs(out)),
            ExprKind::Table(entries) => entries.iter().for_each(|(_, e)| e.refs(out)),
            ExprKind::Attr(e, _) | ExprKind::Unary(_, e) => e.refs(out),
            ExprKind::Index(a, b) | ExprKind::Binary(_, a, b) => {
                a.refs(out);
                b.refs(out);
            }
            ExprKind::Call(c) => c.args.iter().for_each(|e| e.refs(out)),
            ExprKind::Cond(c, a, b) => {
                c.refs(out);
                a.refs(out);
                b.refs(out);
            }
        }
    }

    /// Call `f` on every reference inside, index expressions too.
    pub fn visit_refs_mut(&mut self, f: &mut dyn FnMut(&mut Reference)) {
        match &mut self.kind {
            ExprKind::Literal(_) => {}
            ExprKind::Ref(r) => {
                if let Some(index) = &mut r.index {
                    index.visit_refs_mut(f);
                }
                f(r);
            }
            ExprKind::List(items) => items.iter_mut().for_each(|e| e.visit_refs_mut(f)),
            ExprKind::Table(entries) => entries.iter_mut().for_each(|(_, e)| e.visit_refs_mut(f)),
            ExprKind::Attr(e, _) | ExprKind::Unary(_, e) => e.visit_refs_mut(f),
            ExprKind::Index(a, b) | ExprKind::Binary(_, a, b) => {
                a.visit_refs_mut(f);
                b.visit_refs_mut(f);
            }
            ExprKind::Call(c) => c.args.iter_mut().for_each(|e| e.visit_refs_mut(f)),
            ExprKind::Cond(c, a, b) => {
                c.visit_refs_mut(f);
                a.visit_refs_mut(f);
                b.visit_refs_mut(f);
            }
        }
    }

    /// Every reference inside whose instance key is an expression, to be
    /// resolved in place.
    pub fn indexed_refs_mut<'a>(&'a mut self, out: &mut Vec<&'a mut Reference>) {
        match &mut self.kind {
            ExprKind::Literal(_) => {}
            ExprKind::Ref(r) => {
                if r.index.is_some() {
                    out.push(r);
                }
            }
            ExprKind::List(items) => items.iter_mut().for_each(|e| e.indexed_refs_mut(out)),
            ExprKind::Table(entries) => entries
                .iter_mut()
                .for_each(|(_, e)| e.indexed_refs_mut(out)),
            ExprKind::Attr(e, _) | ExprKind::Unary(_, e) => e.indexed_refs_mut(out),
            ExprKind::Index(a, b) | ExprKind::Binary(_, a, b) => {
                a.indexed_refs_mut(out);
                b.indexed_refs_mut(out);
            }
            ExprKind::Call(c) => c.args.iter_mut().for_each(|e| e.indexed_refs_mut(out)),
            ExprKind::Cond(c, a, b) => {
                c.indexed_refs_mut(out);
                a.indexed_refs_mut(out);
                b.indexed_refs_mut(out);
            }
        }
    }

    /// Every function call inside, depth first.
    pub fn calls<'a>(&'a self, out: &mut Vec<&'a Call>) {
        match &self.kind {
            ExprKind::Literal(_) | ExprKind::Ref(_) => {}
            ExprKind::List(items) => items.iter().for_each(|e| e.calls(out)),
            ExprKind::Table(entries) => entries.iter().for_each(|(_, e)| e.calls(out)),
            ExprKind::Attr(e, _) | ExprKind::Unary(_, e) => e.calls(out),
            ExprKind::Index(a, b) | ExprKind::Binary(_, a, b) => {
                a.calls(out);
                b.calls(out);
            }
            ExprKind::Call(c) => {
                out.push(c);
                c.args.iter().for_each(|e| e.calls(out));
            }
            ExprKind::Cond(c, a, b) => {
                c.calls(out);
                a.calls(out);
                b.calls(out);
            }
        }
    }

    /// How deep the tree is, found without recursion.
    pub fn depth(&self) -> usize {
        let e = self;
        let mut deepest = 0;
        let mut stack: Vec<(&Expr, usize)> = vec![(e, 1)];
        while let Some((e, depth)) = stack.pop() {
            deepest = deepest.max(depth);
            let children: Vec<&Expr> = match &e.kind {
                ExprKind::Literal(_) => Vec::new(),
                ExprKind::Ref(r) => r.index.iter().map(|i| &**i).collect(),
                ExprKind::List(items) => items.iter().collect(),
                ExprKind::Table(entries) => entries.iter().map(|(_, v)| v).collect(),
                ExprKind::Attr(a, _) | ExprKind::Unary(_, a) => vec![&**a],
                ExprKind::Index(a, b) | ExprKind::Binary(_, a, b) => vec![&**a, &**b],
                ExprKind::Call(c) => c.args.iter().collect(),
                ExprKind::Cond(c, a, b) => vec![&**c, &**a, &**b],
            };
            stack.extend(children.into_iter().map(|c| (c, depth + 1)));
        }
        deepest
    }

    /// The reference, when the expression is exactly one.
    pub fn as_ref(&self) -> Option<&Reference> {
        match &self.kind {
            ExprKind::Ref(r) => Some(r),
            _ => None,
        }
    }
}
