//! The reference forms of the expression parser: `vars.NAME`,
//! `steps.STEP[KEY].outputs.KEY…`, and the helpers they share with
//! `each.…`, `inputs.…` and `modules.….outputs.…` in `parse`.

use super::ast::{Expr, ExprKind, RefTarget, Reference};
use super::lex::Token;
use super::parse::{ParseError, Parser, REF_HELP};
use flow_providers::suggest::closest;

/// How an instance's key is written.
pub(super) enum InstanceKey {
    /// `["8"]` or `[8]`: the instance's address.
    Literal(String),
    /// `[vars.n]`: an expression.
    Expr(Expr),
    /// `[*]`: every instance.
    All,
}

impl Parser<'_> {
    pub(super) fn expect_dot(&mut self, help: &str) -> Result<(), ParseError> {
        if self.peek_punct(".") {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.not_a_reference(self.here(), format!("{help}; {REF_HELP}")))
        }
    }

    pub(super) fn reference(&self, start: usize, target: RefTarget) -> ExprKind {
        ExprKind::Ref(Reference {
            target,
            span: (self.at)(start..self.last_end()),
            index: None,
            all: false,
        })
    }

    /// `steps.STEP.outputs.KEY(.MORE)*`, after `steps`.
    pub(super) fn output(&mut self, start: usize) -> Result<ExprKind, ParseError> {
        self.expect_dot("`steps` is followed by `.STEP.outputs.KEY`")?;
        let (mut step, _) = self.ident("a step's name after `steps.`")?;
        let mut index = None;
        let mut all = false;
        if self.peek_punct("[") {
            match self.instance_key(&step)? {
                InstanceKey::Literal(address) => step = address,
                InstanceKey::Expr(e) => index = Some(Box::new(e)),
                InstanceKey::All => all = true,
            }
        }
        self.expect_dot("a step is followed by `.outputs.KEY`")?;
        let (word, word_range) = self.ident("`outputs` after the step's name")?;
        if word != "outputs" {
            let help = match closest(&word, ["outputs"]) {
                Some(_) => format!("write `outputs`, not `{word}`; {REF_HELP}"),
                None => format!("a step's values are under `outputs`; {REF_HELP}"),
            };
            return Err(self.not_a_reference(word_range, help));
        }
        self.expect_dot("`outputs` is followed by `.KEY`")?;
        let (mut key, _) = self.ident("an output's name after `outputs.`")?;
        while self.peek_punct(".")
            && matches!(self.toks.get(self.pos + 1), Some((Token::Ident(_), _)))
        {
            self.pos += 1;
            let (more, _) = self.ident("a key")?;
            key.push('.');
            key.push_str(&more);
        }
        let ExprKind::Ref(mut r) = self.reference(start, RefTarget::Output { step, key }) else {
            unreachable!("reference() makes a reference")
        };
        r.index = index;
        r.all = all;
        Ok(ExprKind::Ref(r))
    }

    /// `["KEY"]` (or `[8]`) after a step's name: the address of one of its
    /// `for_each` instances; `[EXPR]`, a key worked out once the variables
    /// are known; or `[*]`, every instance.
    pub(super) fn instance_key(&mut self, step: &str) -> Result<InstanceKey, ParseError> {
        self.pos += 1;
        let literal = match (self.toks.get(self.pos), self.toks.get(self.pos + 1)) {
            (Some((Token::Str(s), _)), Some((Token::Punct("]"), _))) => Some(s.clone()),
            (Some((Token::Int(i), _)), Some((Token::Punct("]"), _))) => Some(i.to_string()),
            _ => None,
        };
        if let Some(key) = literal {
            self.pos += 2;
            return Ok(InstanceKey::Literal(super::ast::instance_name(step, &key)));
        }
        if self.peek_punct("*")
            && matches!(self.toks.get(self.pos + 1), Some((Token::Punct("]"), _)))
        {
            self.pos += 2;
            return Ok(InstanceKey::All);
        }
        let e = self.expr()?;
        self.expect("]", "to close the instance's key")?;
        Ok(InstanceKey::Expr(e))
    }
}
