//! Plans for people (text, coloured on a terminal) and for programs (JSON).

use std::fmt::Write;

use super::model::{Action, DriftFound, Plan, Shown, StepDrift};
use crate::style::Style;

/// The plan as text: what changed outside flow, one block per changed step,
/// then a summary line.
pub fn render_text(plan: &Plan, style: &Style) -> String {
    let mut out = render_drift(&plan.drift, style);
    for m in &plan.moved {
        let _ = writeln!(
            out,
            "{:>3} {}  {}",
            style.warn("→"),
            style.bold(&format!("{} → {}", m.from, m.to)),
            style.dim("moved in state ([[moved]]); the object stays as it is"),
        );
    }
    if !plan.moved.is_empty() {
        out.push('\n');
    }
    let changed: Vec<_> = plan
        .changes
        .iter()
        .filter(|c| c.action != Action::NoOp)
        .collect();
    for w in &plan.warnings {
        let _ = writeln!(out, "{} {w}\n", style.warn("warning:"));
    }
    if changed.is_empty() && plan.moved.is_empty() && plan.deferred.is_empty() {
        let unread = plan.unread();
        if unread > 0 {
            // Not "up to date": nothing was there to compare them with.
            let _ = writeln!(
                out,
                "{} {unread} of {} step{} could not be read; from state alone, nothing would change.",
                style.warn("Not checked:"),
                plan.changes.len(),
                if plan.changes.len() == 1 { "" } else { "s" },
            );
            return out;
        }
        let _ = writeln!(
            out,
            "No changes. {} step{} up to date.",
            plan.changes.len(),
            if plan.changes.len() == 1 {
                " is"
            } else {
                "s are"
            }
        );
        return out;
    }
    let width = changed
        .iter()
        .map(|c| c.step.len())
        .chain(plan.deferred.iter().map(|d| d.step.len() + 3))
        .max()
        .unwrap_or(0);
    let mixed_regions = plan.cost.as_ref().is_some_and(|c| c.mixed_regions());
    for c in &changed {
        let sign = paint_action(style, c.action, c.sign());
        let _ = writeln!(
            out,
            "{sign:>3} {:<width$}  {}  {}{}",
            style.bold(&c.step),
            style.dim(&format!("({})", c.provider)),
            paint_action(style, c.action, c.action.word()),
            if c.reason.is_empty() {
                String::new()
            } else {
                style.dim(&format!(" — {}", c.reason))
            },
        );
        if let Some(token) = &c.resumes {
            let _ = writeln!(
                out,
                "      {}",
                style.dim(&format!("operation token {token}"))
            );
        }
        if let Some(cost) = &c.cost {
            let before = per_hour(cost.before_per_hour, cost.before_least_per_hour);
            let after = per_hour(cost.after_per_hour, cost.after_least_per_hour);
            let money = match c.action {
                Action::Delete => format!("stops {before}"),
                Action::Update if before != after => format!("{before} → {after}"),
                _ => after,
            };
            let mut line = money;
            if !cost.items.is_empty() {
                line.push_str(&format!(" ({})", cost.items.join(", ")));
            }
            if let Some(region) = cost.region.as_ref().filter(|_| mixed_regions) {
                line.push_str(&format!(" in {region}"));
            }
            for u in cost.unpriced.iter().chain(&cost.notes) {
                line.push_str(&format!("; {u}"));
            }
            let _ = writeln!(out, "      {}", style.warn(&line));
        }
        if let Some(r) = &c.create_before_destroy {
            let _ = writeln!(out, "      {}", style.warn(&r.line()));
        }
        for line in &c.details {
            let _ = writeln!(out, "      {}", style.dim(line));
        }
        let key_width = c.inputs.iter().map(|i| i.name.len()).max().unwrap_or(0);
        for input in &c.inputs {
            let after = shown(&input.after);
            let line = match (c.action, &input.before) {
                (Action::Create, _) | (_, Shown::Absent) => after,
                _ => format!("{} → {after}", shown(&input.before)),
            };
            let _ = writeln!(
                out,
                "      {:<key_width$} = {line}{}",
                input.name,
                if input.forces_replacement {
                    style.warn("  # forces replacement")
                } else {
                    String::new()
                }
            );
        }
    }
    for d in &plan.deferred {
        let name = match d.for_each {
            true => format!("{}[*]", d.step),
            false => d.step.clone(),
        };
        let _ = writeln!(
            out,
            "{:>3} {:<width$}  {}",
            style.dim("…"),
            style.bold(&name),
            style.dim(&format!("deferred — {}", d.reason)),
        );
    }
    let s = plan.summary();
    let mut imports = if s.import > 0 {
        format!("{} to import, ", s.import)
    } else {
        String::new()
    };
    if !plan.moved.is_empty() {
        imports.insert_str(0, &format!("{} to move, ", plan.moved.len()));
    }
    let _ = writeln!(
        out,
        "\nPlan: {imports}{} to create, {} to update, {} to replace, {} to delete, {} unchanged.",
        s.create, s.update, s.replace, s.delete, s.unchanged
    );
    let unread = plan.unread();
    if unread > 0 {
        let _ = writeln!(
            out,
            "{} {unread} step{} could not be read (listed above) and {} planned from state alone.",
            style.warn("Not checked:"),
            if unread == 1 { "" } else { "s" },
            if unread == 1 { "is" } else { "are" },
        );
    }
    if !plan.deferred.is_empty() {
        let _ = writeln!(
            out,
            "{} step{} deferred: apply plans {} in a later round, once what {} wait{} on has applied.",
            plan.deferred.len(),
            if plan.deferred.len() == 1 { "" } else { "s" },
            if plan.deferred.len() == 1 {
                "it"
            } else {
                "them"
            },
            if plan.deferred.len() == 1 {
                "it"
            } else {
                "they"
            },
            if plan.deferred.len() == 1 { "s" } else { "" },
        );
    }
    if let Some(cost) = plan
        .cost
        .as_ref()
        .filter(|c| c.starts_per_hour > 0.0 || c.stops_per_hour > 0.0)
    {
        let least = cost.ranges.then_some(cost.starts_least_per_hour);
        let mut line = format!(
            "Cost: this plan starts {}",
            per_hour(cost.starts_per_hour, least)
        );
        if cost.stops_per_hour > 0.0 {
            line.push_str(&format!(" and stops ≈ {}/h", dollars(cost.stops_per_hour)));
        }
        if let Some(note) = cost.prices_note() {
            line.push_str(&format!(" ({note})"));
        }
        let _ = writeln!(out, "{}", style.warn(&line));
    }
    out
}

/// What refresh found, as the plan's first sections: "changed outside
/// flow" with each attribute's recorded → real value, "deleted outside
/// flow", and the steps that could not be read. Empty when there is none.
pub fn render_drift(drift: &[StepDrift], style: &Style) -> String {
    type Paint = fn(&Style, &str) -> String;
    type Holds = fn(&DriftFound) -> bool;
    let sections: [(&str, &str, Paint, Holds); 3] = [
        (
            "Changed outside flow:",
            "~",
            Style::warn,
            |f| matches!(f, DriftFound::Changed { attributes } if !attributes.is_empty()),
        ),
        ("Deleted outside flow:", "-", Style::err, |f| {
            *f == DriftFound::Deleted
        }),
        (
            "Could not read (planned from state alone):",
            "?",
            Style::warn,
            |f| matches!(f, DriftFound::CouldNotRead { .. }),
        ),
    ];
    let mut out = String::new();
    for (title, sign, paint, holds) in sections {
        let entries: Vec<&StepDrift> = drift.iter().filter(|d| holds(&d.found)).collect();
        if entries.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{}", paint(style, title));
        // Steps that could not be read for the same reason share one line.
        let mut said: Vec<&str> = Vec::new();
        for d in &entries {
            if let DriftFound::CouldNotRead { reason } = &d.found
                && !said.contains(&reason.as_str())
            {
                said.push(reason);
            }
        }
        if !said.is_empty() && said.len() < entries.len() {
            for reason in said {
                let steps: Vec<&str> = entries
                    .iter()
                    .filter(|d| matches!(&d.found, DriftFound::CouldNotRead { reason: r } if r == reason))
                    .map(|d| d.step.as_str())
                    .collect();
                let _ = writeln!(
                    out,
                    "  {} {} step{}: {}",
                    paint(style, sign),
                    steps.len(),
                    if steps.len() == 1 { "" } else { "s" },
                    style.dim(reason)
                );
                let _ = writeln!(out, "      {}", steps.join(", "));
            }
            out.push('\n');
            continue;
        }
        for d in entries {
            let note = match &d.found {
                DriftFound::Deleted => " — planned for create again".to_string(),
                DriftFound::CouldNotRead { reason } => format!(": {reason}"),
                DriftFound::Changed { .. } => String::new(),
            };
            let _ = writeln!(
                out,
                "  {} {}  {}",
                paint(style, sign),
                style.bold(&d.step),
                style.dim(&format!("({}){note}", d.provider))
            );
            if let DriftFound::Changed { attributes } = &d.found {
                let width = attributes.iter().map(|a| a.name.len()).max().unwrap_or(0);
                for a in attributes {
                    let _ = writeln!(
                        out,
                        "      {:<width$} : {} → {}",
                        a.name,
                        shown(&a.recorded),
                        shown(&a.real)
                    );
                }
            }
        }
        out.push('\n');
    }
    out
}

/// `$65.55`, `$0.48`.
pub fn dollars(x: f64) -> String {
    format!("${x:.2}")
}

/// `≈ $X/h`, or `at most ≈ $X/h, at least ≈ $Y/h` when what runs ranges
/// (a scaled queue from its minimum count, a stopped fleet).
fn per_hour(most: f64, least: Option<f64>) -> String {
    match least {
        Some(least) if least < most => format!(
            "at most ≈ {}/h, at least ≈ {}/h",
            dollars(most),
            dollars(least)
        ),
        _ => format!("≈ {}/h", dollars(most)),
    }
}

/// `text` in the colour of `action`: green creates, yellow updates, red
/// replaces and deletes.
fn paint_action(style: &Style, action: Action, text: &str) -> String {
    match action {
        Action::Create | Action::Import => style.ok(text),
        Action::Update => style.warn(text),
        Action::Replace | Action::Delete => style.err(text),
        Action::NoOp => text.to_string(),
    }
}

fn shown(s: &Shown) -> String {
    match s {
        Shown::Value(v) => {
            let text = v.to_string();
            if text.chars().count() > 200 {
                let cut: String = text.chars().take(197).collect();
                format!("{cut}...")
            } else {
                text
            }
        }
        other => other.to_string(),
    }
}

/// The plan as JSON: `{"workflow":…, "changes":[{"step":…, "action":…}], "summary":{…}}`.
pub fn render_json(plan: &Plan) -> String {
    let value = serde_json::json!({
        "format_version": 1,
        "workflow": plan.workflow,
        "state_serial": plan.state_serial,
        "changes": plan.changes,
        "summary": plan.summary(),
        "cost": plan.cost,
        "drift": plan.drift,
        "unread": plan.unread(),
        "moved": plan.moved,
        "warnings": plan.warnings,
        "deferred": plan.deferred,
    });
    serde_json::to_string_pretty(&value).expect("plan serialises")
}

#[cfg(test)]
mod drift_tests {
    use super::*;
    use crate::plan::model::AttributeDrift;
    use serde_json::json;

    #[test]
    fn drift_sections_show_each_attribute_and_hide_secrets() {
        let drift = vec![
            StepDrift {
                step: "nodes".into(),
                provider: "eks.nodegroup".into(),
                found: DriftFound::Changed {
                    attributes: vec![
                        AttributeDrift {
                            name: "desired_size".into(),
                            recorded: Shown::Value(json!(2)),
                            real: Shown::Value(json!(3)),
                        },
                        AttributeDrift {
                            name: "value".into(),
                            recorded: Shown::Sensitive,
                            real: Shown::Sensitive,
                        },
                    ],
                },
            },
            StepDrift {
                step: "vpc".into(),
                provider: "cloudformation.stack".into(),
                found: DriftFound::Deleted,
            },
            StepDrift {
                step: "fsx".into(),
                provider: "fsx.lustre".into(),
                found: DriftFound::CouldNotRead {
                    reason: "timed out after 1m".into(),
                },
            },
        ];
        let text = render_drift(&drift, &Style::default());
        assert!(text.contains("Changed outside flow:\n  ~ nodes  (eks.nodegroup)\n      desired_size : 2 → 3\n      value        : (sensitive) → (sensitive)\n"), "{text}");
        assert!(
            text.contains(
                "Deleted outside flow:\n  - vpc  (cloudformation.stack) — planned for create again"
            ),
            "{text}"
        );
        assert!(
            text.contains("  ? fsx  (fsx.lustre): timed out after 1m"),
            "{text}"
        );
        assert!(render_drift(&[], &Style::default()).is_empty());
    }
}

#[cfg(test)]
mod cost_tests {
    use super::*;

    /// A plan (as JSON, the way `--out` saves it) creating `west` in
    /// us-west-2 and `north` in eu-north-1, which the table has no prices of.
    const MIXED: &str = r#"{
        "workflow": "costed", "state_serial": 0,
        "changes": [
            {"step": "west", "action": "create", "provider": "eks.nodegroup", "reason": "new step",
             "inputs": [], "known_after_apply": false, "depends_on": [],
             "cost": {"before_per_hour": 0.0, "after_per_hour": 43.92, "items": ["2 × p4d.24xlarge"],
                      "unpriced": [], "region": "us-west-2", "notes": []}},
            {"step": "north", "action": "create", "provider": "eks.nodegroup", "reason": "new step",
             "inputs": [], "known_after_apply": false, "depends_on": [],
             "cost": {"before_per_hour": 0.0, "after_per_hour": 0.68, "items": ["2 × c5.2xlarge"],
                      "unpriced": [], "region": "eu-north-1",
                      "notes": ["priced at us-east-1's: the price table has no eu-north-1 prices"]}}
        ],
        "cost": {"starts_per_hour": 44.6, "stops_per_hour": 0.0,
                 "prices": {"date": "2026-11-01", "currency": "USD", "region": "us-east-1"},
                 "regions": [{"region": "eu-north-1", "has_table": false, "borrowed": []},
                             {"region": "us-west-2", "has_table": true, "borrowed": []}]}
    }"#;

    #[test]
    fn the_total_line_names_each_region_and_each_fallback() {
        let plan: Plan = serde_json::from_str(MIXED).unwrap();
        let text = render_text(&plan, &Style::default());
        assert!(
            text.contains("      ≈ $43.92/h (2 × p4d.24xlarge) in us-west-2\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "      ≈ $0.68/h (2 × c5.2xlarge) in eu-north-1; \
                 priced at us-east-1's: the price table has no eu-north-1 prices\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "Cost: this plan starts ≈ $44.60/h (on-demand, prices of 2026-11-01: \
                 eu-north-1 priced at us-east-1's, no table for it; us-west-2)"
            ),
            "{text}"
        );
    }

    #[test]
    fn one_region_is_named_without_repeating_it_on_each_step() {
        let mut plan: Plan = serde_json::from_str(MIXED).unwrap();
        plan.changes.truncate(1);
        let cost = plan.cost.as_mut().unwrap();
        cost.regions.remove(0);
        cost.starts_per_hour = 43.92;
        let text = render_text(&plan, &Style::default());
        assert!(
            text.contains("      ≈ $43.92/h (2 × p4d.24xlarge)\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "Cost: this plan starts ≈ $43.92/h (on-demand, us-west-2 prices of 2026-11-01)"
            ),
            "{text}"
        );
    }
}
