//! Parse the tokens of an expression into an [`Expr`]: a Pratt parser
//! (precedence climbing), grammar in `docs/workflow-language.md`.

use std::ops::Range;

use super::ast::{BinaryOp, Call, EachField, Expr, ExprKind, RefTarget, UnaryOp};
use super::lex::{Token, tokens};
use crate::diag::Span;
use flow_providers::suggest::closest;

/// What kind of problem a [`ParseError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// A name that is not `vars`, `steps`, a function or a template name,
    /// or a reference of the wrong shape (`steps.a.out.b`).
    NotAReference,
    /// Anything else: a missing `)`, a stray operator.
    Syntax,
}

/// A malformed expression.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    /// What kind of problem.
    pub kind: ParseErrorKind,
    /// What is wrong.
    pub message: String,
    /// Where.
    pub span: Span,
    /// How to fix it.
    pub help: String,
}

/// How an expression's names are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    /// In a workflow or a module: `vars.…`, `steps.….outputs.…`, `each.…`,
    /// `inputs.…`, `modules.….outputs.…` and functions.
    Workflow,
    /// In a template file: a bare name is one of the names given to
    /// `templatefile`.
    Template,
}

/// The roots a workflow expression can start with.
const ROOTS: &[&str] = &["vars", "steps", "each", "modules", "inputs"];

pub(super) const REF_HELP: &str = "a reference is `${vars.NAME}` or `${steps.STEP.outputs.KEY}`";

/// Parse `text`, mapping ranges of `text` to file spans with `at`.
pub fn parse(
    text: &str,
    at: &dyn Fn(Range<usize>) -> Span,
    names: Names,
) -> Result<Expr, ParseError> {
    let toks = tokens(text).map_err(|e| ParseError {
        kind: ParseErrorKind::Syntax,
        message: e.message,
        span: at(e.range),
        help: "see \"Expressions\" in docs/workflow-language.md".into(),
    })?;
    let mut p = Parser {
        toks,
        pos: 0,
        end: text.len(),
        at,
        names,
        depth: 0,
    };
    if p.toks.is_empty() {
        return Err(p.error(
            0..text.len(),
            "an empty expression",
            "write a value inside `${…}`",
        ));
    }
    let e = p.expr()?;
    if e.depth() > MAX_TREE_DEPTH {
        return Err(p.error(
            0..text.len(),
            &format!("the expression is more than {MAX_TREE_DEPTH} operations deep"),
            "split it into smaller expressions (a long chain of `+` counts one per operator)",
        ));
    }
    if let Some((t, r)) = p.toks.get(p.pos) {
        return Err(p.error(
            r.clone(),
            &format!("unexpected {} after the expression", t.describe()),
            "an expression ends here; join values with an operator or a function",
        ));
    }
    Ok(e)
}

/// The state of one parse (its reference forms are in `parse_refs`).
pub(super) struct Parser<'a> {
    pub(super) toks: Vec<(Token, Range<usize>)>,
    pub(super) pos: usize,
    pub(super) end: usize,
    pub(super) at: &'a dyn Fn(Range<usize>) -> Span,
    pub(super) names: Names,
    /// How deep `expr` is nested, to refuse what would exhaust the stack.
    pub(super) depth: usize,
}

/// The deepest nesting of parentheses, lists, calls and conditions while
/// parsing.
const MAX_DEPTH: usize = 100;

/// The deepest expression tree: the checks and the evaluation walk it
/// recursively, on the small stacks of the apply's tasks.
const MAX_TREE_DEPTH: usize = 64;

impl Parser<'_> {
    pub(super) fn error(&self, range: Range<usize>, message: &str, help: &str) -> ParseError {
        ParseError {
            kind: ParseErrorKind::Syntax,
            message: message.to_string(),
            span: (self.at)(range),
            help: help.to_string(),
        }
    }

    pub(super) fn not_a_reference(&self, range: Range<usize>, help: String) -> ParseError {
        ParseError {
            kind: ParseErrorKind::NotAReference,
            message: "not a reference".into(),
            span: (self.at)(range),
            help,
        }
    }

    pub(super) fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }

    pub(super) fn peek_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Token::Punct(q)) if *q == p)
    }

    /// The range of the next token, or an empty one at the end.
    pub(super) fn here(&self) -> Range<usize> {
        self.toks
            .get(self.pos)
            .map(|(_, r)| r.clone())
            .unwrap_or(self.end..self.end)
    }

    pub(super) fn start(&self) -> usize {
        self.here().start
    }

    pub(super) fn last_end(&self) -> usize {
        self.toks[self.pos - 1].1.end
    }

    pub(super) fn node(&self, start: usize, kind: ExprKind) -> Expr {
        Expr {
            span: (self.at)(start..self.last_end()),
            kind,
        }
    }

    pub(super) fn expect(&mut self, p: &str, what: &str) -> Result<(), ParseError> {
        if self.peek_punct(p) {
            self.pos += 1;
            return Ok(());
        }
        let found = match self.peek() {
            Some(t) => t.describe(),
            None => "the end of the expression".into(),
        };
        Err(self.error(
            self.here(),
            &format!("expected `{p}` {what}, found {found}"),
            &format!("add `{p}`"),
        ))
    }

    pub(super) fn ident(&mut self, what: &str) -> Result<(String, Range<usize>), ParseError> {
        match self.toks.get(self.pos) {
            Some((Token::Ident(s), r)) => {
                let out = (s.clone(), r.clone());
                self.pos += 1;
                Ok(out)
            }
            _ => Err(self.not_a_reference(self.here(), format!("expected {what}; {REF_HELP}"))),
        }
    }

    /// `binary ('?' expr ':' expr)?`
    pub(super) fn expr(&mut self) -> Result<Expr, ParseError> {
        self.nested(Self::expr_inner)
    }

    /// `parse` one level deeper, refusing nesting that would exhaust the
    /// stack.
    fn nested(
        &mut self,
        parse: impl FnOnce(&mut Self) -> Result<Expr, ParseError>,
    ) -> Result<Expr, ParseError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error(
                self.here(),
                &format!("the expression nests more than {MAX_DEPTH} deep"),
                "split it into smaller expressions",
            ));
        }
        self.depth += 1;
        let e = parse(self);
        self.depth -= 1;
        e
    }

    fn expr_inner(&mut self) -> Result<Expr, ParseError> {
        let start = self.start();
        let cond = self.binary(1)?;
        if !self.peek_punct("?") {
            return Ok(cond);
        }
        self.pos += 1;
        let then = self.expr()?;
        self.expect(":", "between the two results of `? :`")?;
        let otherwise = self.expr()?;
        Ok(self.node(
            start,
            ExprKind::Cond(Box::new(cond), Box::new(then), Box::new(otherwise)),
        ))
    }

    fn binary_op(&self) -> Option<BinaryOp> {
        let Some(Token::Punct(p)) = self.peek() else {
            return None;
        };
        Some(match *p {
            "||" => BinaryOp::Or,
            "&&" => BinaryOp::And,
            "==" => BinaryOp::Eq,
            "!=" => BinaryOp::Ne,
            "<" => BinaryOp::Lt,
            "<=" => BinaryOp::Le,
            ">" => BinaryOp::Gt,
            ">=" => BinaryOp::Ge,
            "+" => BinaryOp::Add,
            "-" => BinaryOp::Sub,
            "*" => BinaryOp::Mul,
            "/" => BinaryOp::Div,
            "%" => BinaryOp::Rem,
            _ => return None,
        })
    }

    /// Operators of precedence `min` and above, left-associative.
    fn binary(&mut self, min: u8) -> Result<Expr, ParseError> {
        let start = self.start();
        let mut lhs = self.unary()?;
        while let Some(op) = self.binary_op().filter(|op| op.precedence() >= min) {
            self.pos += 1;
            let rhs = self.binary(op.precedence() + 1)?;
            lhs = self.node(start, ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)));
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        let start = self.start();
        let op = match self.peek() {
            Some(Token::Punct("!")) => UnaryOp::Not,
            Some(Token::Punct("-")) => UnaryOp::Neg,
            _ => return self.postfix(),
        };
        self.pos += 1;
        let operand = self.nested(Self::unary)?;
        Ok(self.node(start, ExprKind::Unary(op, Box::new(operand))))
    }

    fn postfix(&mut self) -> Result<Expr, ParseError> {
        let start = self.start();
        let mut e = self.primary()?;
        loop {
            if self.peek_punct(".") {
                self.pos += 1;
                let (name, _) = self.ident("a key after `.`")?;
                e = self.node(start, ExprKind::Attr(Box::new(e), name));
            } else if self.peek_punct("[") {
                self.pos += 1;
                let index = self.expr()?;
                self.expect("]", "to close the index")?;
                e = self.node(start, ExprKind::Index(Box::new(e), Box::new(index)));
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let start = self.start();
        let Some((token, range)) = self.toks.get(self.pos).cloned() else {
            return Err(self.error(
                self.here(),
                "the expression ends where a value was expected",
                "complete the expression",
            ));
        };
        self.pos += 1;
        let literal = |v: serde_json::Value| ExprKind::Literal(v);
        let kind = match token {
            Token::Int(i) => literal(i.into()),
            Token::Float(f) => literal(
                serde_json::Number::from_f64(f)
                    .map(serde_json::Value::Number)
                    .unwrap_or(serde_json::Value::Null),
            ),
            Token::Str(s) => literal(s.into()),
            Token::Punct("(") => {
                let inner = self.expr()?;
                self.expect(")", "to close `(`")?;
                return Ok(Expr {
                    span: (self.at)(start..self.last_end()),
                    kind: inner.kind,
                });
            }
            Token::Punct("[") => ExprKind::List(self.list()?),
            Token::Punct("{") => ExprKind::Table(self.table()?),
            Token::Punct(p) => {
                return Err(self.error(
                    range,
                    &format!("`{p}` cannot start a value"),
                    "a value is a reference, a function call, a number, a \"string\", a [list] or a { table }",
                ));
            }
            Token::Ident(name) => match name.as_str() {
                "true" => literal(true.into()),
                "false" => literal(false.into()),
                "null" => literal(serde_json::Value::Null),
                _ if self.peek_punct("(") => {
                    self.pos += 1;
                    let args = self.args()?;
                    ExprKind::Call(Call {
                        name,
                        name_span: (self.at)(range),
                        args,
                    })
                }
                "inputs" if self.names != Names::Template => {
                    self.expect_dot("`inputs` is followed by `.NAME`")?;
                    let (input, _) = self.ident("an input's name after `inputs.`")?;
                    self.reference(start, RefTarget::Input(input))
                }
                "modules" if self.names != Names::Template => {
                    self.expect_dot("`modules` is followed by `.NAME.outputs.KEY`")?;
                    let (module, _) = self.ident("a module's name after `modules.`")?;
                    self.expect_dot("a module is followed by `.outputs.KEY`")?;
                    let (word, word_range) = self.ident("`outputs` after the module's name")?;
                    if word != "outputs" {
                        return Err(self.not_a_reference(
                            word_range,
                            format!("a module's values are under `outputs`: modules.{module}.outputs.KEY"),
                        ));
                    }
                    self.expect_dot("`outputs` is followed by `.KEY`")?;
                    let (key, _) = self.ident("an output's name after `outputs.`")?;
                    self.reference(start, RefTarget::ModuleOutput { module, key })
                }
                "vars" if self.names != Names::Template => {
                    self.expect_dot("`vars` is followed by `.NAME`")?;
                    let (var, _) = self.ident("a variable's name after `vars.`")?;
                    self.reference(start, RefTarget::Var(var))
                }
                "steps" if self.names != Names::Template => self.output(start)?,
                "each" if self.names != Names::Template => {
                    self.expect_dot("`each` is followed by `.key` or `.value`")?;
                    let (field, field_range) = self.ident("`key` or `value` after `each.`")?;
                    let field = match field.as_str() {
                        "key" => EachField::Key,
                        "value" => EachField::Value,
                        other => {
                            let help = match closest(other, ["key", "value"]) {
                                Some(s) => format!(
                                    "did you mean `each.{s}`? `each` has `.key` and `.value`"
                                ),
                                None => "`each` has `.key` and `.value`".into(),
                            };
                            return Err(self.not_a_reference(field_range, help));
                        }
                    };
                    self.reference(start, RefTarget::Each(field))
                }
                _ if self.names == Names::Template => self.reference(start, RefTarget::Local(name)),
                _ => {
                    let help = match closest(&name, ROOTS.iter().copied()) {
                        Some(root) => format!("did you mean `{root}`? {REF_HELP}"),
                        None => format!("`{name}` is not a name flow knows; {REF_HELP}"),
                    };
                    return Err(self.not_a_reference(range, help));
                }
            },
        };
        Ok(self.node(start, kind))
    }

    /// Arguments after `(`, through `)`.
    fn args(&mut self) -> Result<Vec<super::ast::Expr>, ParseError> {
        let mut out = Vec::new();
        while !self.peek_punct(")") {
            out.push(self.expr()?);
            if !self.peek_punct(",") {
                break;
            }
            self.pos += 1;
        }
        self.expect(")", "to close the argument list")?;
        Ok(out)
    }

    /// Items after `[`, through `]`.
    fn list(&mut self) -> Result<Vec<Expr>, ParseError> {
        let mut out = Vec::new();
        while !self.peek_punct("]") {
            out.push(self.expr()?);
            if !self.peek_punct(",") {
                break;
            }
            self.pos += 1;
        }
        self.expect("]", "to close the list")?;
        Ok(out)
    }

    /// `key = value` pairs after `{`, through `}`.
    fn table(&mut self) -> Result<Vec<(String, Expr)>, ParseError> {
        let mut out: Vec<(String, Expr)> = Vec::new();
        while !self.peek_punct("}") {
            let key = match self.toks.get(self.pos) {
                Some((Token::Ident(s) | Token::Str(s), _)) => s.clone(),
                _ => {
                    return Err(self.error(
                        self.here(),
                        "expected a key in the table",
                        "write `{ key = value, \"other key\" = value }`",
                    ));
                }
            };
            let key_range = self.here();
            self.pos += 1;
            if self.peek_punct(":") {
                self.pos += 1;
            } else {
                self.expect("=", "after a table key")?;
            }
            if out.iter().any(|(k, _)| *k == key) {
                return Err(self.error(
                    key_range,
                    &format!("the key `{key}` is given twice"),
                    "give each key once",
                ));
            }
            out.push((key, self.expr()?));
            if !self.peek_punct(",") {
                break;
            }
            self.pos += 1;
        }
        self.expect("}", "to close the table")?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::expr::ast::Reference;

    fn p(text: &str) -> Result<Expr, ParseError> {
        parse(text, &|r| r, Names::Workflow)
    }

    fn show(e: &Expr) -> String {
        match &e.kind {
            ExprKind::Literal(v) => v.to_string(),
            ExprKind::Ref(r) => r.target.to_string(),
            ExprKind::List(items) => {
                format!(
                    "[{}]",
                    items.iter().map(show).collect::<Vec<_>>().join(", ")
                )
            }
            ExprKind::Table(entries) => format!(
                "{{{}}}",
                entries
                    .iter()
                    .map(|(k, v)| format!("{k}={}", show(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ExprKind::Attr(e, k) => format!("{}.{k}", show(e)),
            ExprKind::Index(e, i) => format!("{}[{}]", show(e), show(i)),
            ExprKind::Call(c) => format!(
                "{}({})",
                c.name,
                c.args.iter().map(show).collect::<Vec<_>>().join(", ")
            ),
            ExprKind::Unary(UnaryOp::Not, e) => format!("(!{})", show(e)),
            ExprKind::Unary(UnaryOp::Neg, e) => format!("(-{})", show(e)),
            ExprKind::Binary(op, a, b) => format!("({} {} {})", show(a), op.symbol(), show(b)),
            ExprKind::Cond(c, a, b) => format!("({} ? {} : {})", show(c), show(a), show(b)),
        }
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(show(&p("1 + 2 * 3 - 4").unwrap()), "((1 + (2 * 3)) - 4)");
        assert_eq!(
            show(&p("vars.a || vars.b && !vars.c == 1").unwrap()),
            "(vars.a || (vars.b && ((!vars.c) == 1)))"
        );
        assert_eq!(
            show(&p("vars.n > 2 ? vars.a : vars.b ? 1 : 2").unwrap()),
            "((vars.n > 2) ? vars.a : (vars.b ? 1 : 2))"
        );
        assert_eq!(show(&p("-(1 + 2) % 2").unwrap()), "((-(1 + 2)) % 2)");
    }

    #[test]
    fn references_calls_and_postfix() {
        assert_eq!(
            show(&p(r#"split(",", steps.vpc.outputs.PrivateSubnets)[0]"#).unwrap()),
            r#"split(",", steps.vpc.outputs.PrivateSubnets)[0]"#
        );
        assert_eq!(
            show(&p("steps.vpc.outputs.Subnet.Id").unwrap()),
            "steps.vpc.outputs.Subnet.Id"
        );
        assert_eq!(show(&p("vars.cfg.name").unwrap()), "vars.cfg.name");
        assert_eq!(
            show(&p(r#"merge(vars.t, { a = 1, "b c": [1, 2,], })"#).unwrap()),
            r#"merge(vars.t, {a=1, b c=[1, 2]})"#
        );
        assert_eq!(show(&p("length()").unwrap()), "length()");
    }

    #[test]
    fn spans_cover_what_they_name() {
        let e = p(r#"join("-", vars.azs)"#).unwrap();
        assert_eq!(e.span, 0..19);
        let ExprKind::Call(c) = &e.kind else { panic!() };
        assert_eq!(c.name_span, 0..4);
        assert_eq!(c.args[1].span, 10..18);
        assert_eq!(c.args[1].as_ref().unwrap().span, 10..18);
    }

    #[test]
    fn bad_references_name_the_fix() {
        let e = p("var.x").unwrap_err();
        assert_eq!(e.kind, ParseErrorKind::NotAReference);
        assert!(e.help.contains("did you mean `vars`?"), "{e:?}");
        let e = p("steps.a.out.b").unwrap_err();
        assert!(e.help.contains("write `outputs`"), "{e:?}");
        assert_eq!(e.span, 8..11);
        assert_eq!(p("vars.").unwrap_err().kind, ParseErrorKind::NotAReference);
        assert_eq!(
            p("env.HOME").unwrap_err().kind,
            ParseErrorKind::NotAReference
        );
    }

    #[test]
    fn syntax_errors_point_at_the_token() {
        let e = p("length(vars.x").unwrap_err();
        assert!(e.message.contains("expected `)`"), "{e:?}");
        assert_eq!(e.span, 13..13);
        let e = p("vars.a vars.b").unwrap_err();
        assert!(e.message.contains("unexpected `vars`"), "{e:?}");
        assert!(
            p("vars.a ? 1")
                .unwrap_err()
                .message
                .contains("expected `:`")
        );
        assert!(p("1 +").unwrap_err().message.contains("ends where a value"));
        assert!(p("{ a = 1, a = 2 }").unwrap_err().message.contains("twice"));
        assert!(p("").is_err());
    }

    #[test]
    fn instances_and_each() {
        assert_eq!(
            show(&p(r#"steps.nccl["8"].outputs.busbw"#).unwrap()),
            r#"steps.nccl["8"].outputs.busbw"#
        );
        assert_eq!(
            show(&p("steps.nccl[16].outputs.busbw").unwrap()),
            r#"steps.nccl["16"].outputs.busbw"#
        );
        assert_eq!(
            show(&p("each.value.size * 2").unwrap()),
            "(each.value.size * 2)"
        );
        let e = p("each.kye").unwrap_err();
        assert!(e.help.contains("did you mean `each.key`?"), "{e:?}");
        let e = p("steps.nccl[vars.n].outputs.x").unwrap();
        let r = e.as_ref().unwrap();
        assert_eq!(r.target.to_string(), "steps.nccl.outputs.x");
        assert_eq!(show(r.index.as_deref().unwrap()), "vars.n");
    }

    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        let deep = format!("{}1{}", "(".repeat(5000), ")".repeat(5000));
        assert!(p(&deep).unwrap_err().message.contains("nests more than"));
        assert!(p(&format!("{}true", "!".repeat(5000))).is_err());
        let long = vec!["1"; 5000].join(" + ");
        assert!(p(&long).unwrap_err().message.contains("operations deep"));
        let sum = format!("{} + (1)", vec!["1"; 40].join(" + "));
        assert!(
            p(&sum).is_ok(),
            "a sum of 40 with parentheses after it is fine"
        );
        let fine = format!("{}1{}", "(".repeat(50), ")".repeat(50));
        assert!(p(&fine).is_ok());
    }

    #[test]
    fn template_names_are_bare() {
        let e = parse("name", &|r| r, Names::Template).unwrap();
        assert_eq!(show(&e), "name");
        assert!(matches!(
            e.kind,
            ExprKind::Ref(Reference {
                target: RefTarget::Local(_),
                ..
            })
        ));
    }
}
