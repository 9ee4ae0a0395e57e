//! `flow graph FILE --format dot|svg|mermaid`: the dependency graph, each
//! step coloured by its status in state. The SVG is laid out and drawn here
//! (no Graphviz needed): steps in columns by depth, left to right.

use std::collections::BTreeMap;
use std::fmt::Write;

use flow_state::{Status, StepRecord};

use crate::lang::load::Loaded;

/// Output formats of `flow graph`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    /// Graphviz DOT.
    #[default]
    Dot,
    /// A standalone SVG picture.
    Svg,
    /// A Mermaid flowchart (renders in GitHub and GitLab Markdown).
    Mermaid,
}

/// A step's status as the picture shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shade {
    /// Applied and settled.
    Applied,
    /// Failed last time.
    Failed,
    /// An operation is (or was, when interrupted) in flight.
    Pending,
    /// Not applied yet.
    New,
}

impl Shade {
    fn of(rec: Option<&StepRecord>) -> Shade {
        match rec {
            None => Shade::New,
            // A failure keeps its intent (for the next apply to read), but
            // what the user must know first is that it failed.
            Some(r) if r.status == Status::Failed => Shade::Failed,
            Some(r) if r.in_flight.is_some() || r.status == Status::Pending => Shade::Pending,
            Some(r) if r.applied => Shade::Applied,
            Some(_) => Shade::New,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Shade::Applied => "applied",
            Shade::Failed => "failed",
            Shade::Pending => "pending",
            Shade::New => "not applied",
        }
    }

    /// (fill, stroke) colours.
    fn colours(self) -> (&'static str, &'static str) {
        match self {
            Shade::Applied => ("#e6f4ea", "#2e7d32"),
            Shade::Failed => ("#fdecea", "#c62828"),
            Shade::Pending => ("#fff6d5", "#b7791f"),
            Shade::New => ("#f3f4f6", "#6b7280"),
        }
    }
}

/// Each step's shade from its record in state (a step with none is new).
pub fn shades(loaded: &Loaded, records: &BTreeMap<String, StepRecord>) -> BTreeMap<String, Shade> {
    loaded
        .workflow
        .steps
        .iter()
        .map(|s| (s.name.clone(), Shade::of(records.get(&s.name))))
        .collect()
}

/// Render the graph in `format`.
pub fn render(loaded: &Loaded, shades: &BTreeMap<String, Shade>, format: GraphFormat) -> String {
    match format {
        GraphFormat::Dot => dot(loaded, shades),
        GraphFormat::Mermaid => mermaid(loaded, shades),
        GraphFormat::Svg => svg(loaded, shades, &BTreeMap::new()),
    }
}

/// The SVG picture with a note under each step's provider (`flow report`
/// puts how long the step took in its last run there).
pub fn svg_with_notes(
    loaded: &Loaded,
    shades: &BTreeMap<String, Shade>,
    notes: &BTreeMap<String, String>,
) -> String {
    svg(loaded, shades, notes)
}

fn shade(shades: &BTreeMap<String, Shade>, step: &str) -> Shade {
    shades.get(step).copied().unwrap_or(Shade::New)
}

fn dot(loaded: &Loaded, shades: &BTreeMap<String, Shade>) -> String {
    let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = format!(
        "digraph \"{}\" {{\n  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\"];\n",
        esc(&loaded.workflow.name)
    );
    for step in &loaded.workflow.steps {
        let (fill, stroke) = shade(shades, &step.name).colours();
        let _ = writeln!(
            out,
            "  \"{}\" [label=\"{}\\n({})\", fillcolor=\"{fill}\", color=\"{stroke}\"];",
            esc(&step.name),
            esc(&step.name),
            esc(&step.provider)
        );
    }
    for (from, to) in loaded.dag.edges() {
        let _ = writeln!(out, "  \"{}\" -> \"{}\";", esc(from), esc(to));
    }
    out.push_str("}\n");
    out
}

fn mermaid(loaded: &Loaded, shades: &BTreeMap<String, Shade>) -> String {
    let id = |s: &str| format!("s_{}", s.replace('-', "_"));
    let mut out = String::from("flowchart LR\n");
    for step in &loaded.workflow.steps {
        let _ = writeln!(
            out,
            "  {}[\"{}<br/><small>{}</small>\"]",
            id(&step.name),
            step.name,
            step.provider
        );
    }
    for (from, to) in loaded.dag.edges() {
        let _ = writeln!(out, "  {} --> {}", id(from), id(to));
    }
    for s in [Shade::Applied, Shade::Failed, Shade::Pending, Shade::New] {
        let (fill, stroke) = s.colours();
        let class = s.name().replace(' ', "_");
        let _ = writeln!(out, "  classDef {class} fill:{fill},stroke:{stroke}");
        let members: Vec<String> = loaded
            .workflow
            .steps
            .iter()
            .filter(|st| shade(shades, &st.name) == s)
            .map(|st| id(&st.name))
            .collect();
        if !members.is_empty() {
            let _ = writeln!(out, "  class {} {class}", members.join(","));
        }
    }
    out
}

/// Escape text for XML.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const ROW: f64 = 64.0;
const BOX_H: f64 = 44.0;
const GAP_X: f64 = 70.0;
const MARGIN: f64 = 24.0;
const CHAR_W: f64 = 7.2;

fn svg(
    loaded: &Loaded,
    shades: &BTreeMap<String, Shade>,
    notes: &BTreeMap<String, String>,
) -> String {
    let order = loaded.dag.topo_order().unwrap_or_default();
    // Column = longest path from a root.
    let mut column: BTreeMap<&str, usize> = BTreeMap::new();
    for name in &order {
        let c = loaded
            .dag
            .needs(name)
            .iter()
            .map(|d| column.get(d).copied().unwrap_or(0) + 1)
            .max()
            .unwrap_or(0);
        column.insert(name, c);
    }
    let columns = column.values().copied().max().map_or(0, |m| m + 1);
    // Rows: within a column, order by the mean row of what a step needs.
    let mut rows: BTreeMap<&str, f64> = BTreeMap::new();
    let mut by_column: Vec<Vec<&str>> = vec![Vec::new(); columns];
    for (c, slot) in by_column.iter_mut().enumerate() {
        let mut members: Vec<(&str, f64)> = order
            .iter()
            .filter(|n| column[*n] == c)
            .map(|n| {
                let deps = loaded.dag.needs(n);
                let key = if deps.is_empty() {
                    f64::MAX
                } else {
                    deps.iter()
                        .map(|d| rows.get(d).copied().unwrap_or(0.0))
                        .sum::<f64>()
                        / deps.len() as f64
                };
                (*n, key)
            })
            .collect();
        members.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
        for (i, (n, _)) in members.iter().enumerate() {
            rows.insert(n, i as f64);
        }
        *slot = members.into_iter().map(|(n, _)| n).collect();
    }
    let provider_of = |n: &str| loaded.workflow.step(n).map_or("", |s| s.provider.as_str());
    let second_line = |n: &str| match notes.get(n) {
        Some(note) => format!("{} · {note}", provider_of(n)),
        None => provider_of(n).to_string(),
    };
    let width_of = |n: &str| {
        (n.len().max(second_line(n).chars().count() + 2) as f64 * CHAR_W + 28.0).max(90.0)
    };
    let col_w: Vec<f64> = by_column
        .iter()
        .map(|c| c.iter().map(|n| width_of(n)).fold(90.0, f64::max))
        .collect();
    let mut col_x = vec![MARGIN; columns];
    for c in 1..columns {
        col_x[c] = col_x[c - 1] + col_w[c - 1] + GAP_X;
    }
    let max_rows = by_column.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let title_h = 36.0;
    let legend_h = 40.0;
    let width =
        col_x.last().copied().unwrap_or(MARGIN) + col_w.last().copied().unwrap_or(90.0) + MARGIN;
    let height = title_h + max_rows as f64 * ROW + legend_h + MARGIN;
    let pos = |n: &str| -> (f64, f64, f64) {
        let c = column[n];
        (col_x[c], title_h + rows[n] * ROW + MARGIN / 2.0, col_w[c])
    };

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif">"#
    );
    out.push_str(r##"  <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>
"##);
    let _ = writeln!(
        out,
        r##"  <rect width="100%" height="100%" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        out,
        r##"  <text x="{MARGIN}" y="24" font-size="16" font-weight="bold" fill="#111">{}</text>"##,
        xml(&loaded.workflow.name)
    );
    for (from, to) in loaded.dag.edges() {
        let (x1, y1, w1) = pos(from);
        let (x2, y2, _) = pos(to);
        let (sx, sy, ex, ey) = (x1 + w1, y1 + BOX_H / 2.0, x2, y2 + BOX_H / 2.0);
        let mid = (sx + ex) / 2.0;
        let _ = writeln!(
            out,
            r##"  <path d="M {sx:.1} {sy:.1} C {mid:.1} {sy:.1}, {mid:.1} {ey:.1}, {ex:.1} {ey:.1}" fill="none" stroke="#777" stroke-width="1.3" marker-end="url(#arrow)"><title>{} → {}</title></path>"##,
            xml(from),
            xml(to)
        );
    }
    for step in &loaded.workflow.steps {
        let (x, y, w) = pos(&step.name);
        let s = shade(shades, &step.name);
        let (fill, stroke) = s.colours();
        let _ = writeln!(
            out,
            r##"  <g><title>{name} ({provider}): {status}</title><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{BOX_H}" rx="7" fill="{fill}" stroke="{stroke}" stroke-width="1.6"/><text x="{tx:.1}" y="{ty1:.1}" font-size="13" text-anchor="middle" fill="#111">{name}</text><text x="{tx:.1}" y="{ty2:.1}" font-size="10.5" text-anchor="middle" fill="#555">{provider}</text></g>"##,
            name = xml(&step.name),
            provider = xml(&second_line(&step.name)),
            status = s.name(),
            tx = x + w / 2.0,
            ty1 = y + 19.0,
            ty2 = y + 34.0,
        );
    }
    let mut lx = MARGIN;
    let ly = height - MARGIN - 8.0;
    for s in [Shade::Applied, Shade::Pending, Shade::Failed, Shade::New] {
        let (fill, stroke) = s.colours();
        let _ = writeln!(
            out,
            r##"  <rect x="{lx:.1}" y="{:.1}" width="14" height="14" rx="3" fill="{fill}" stroke="{stroke}"/><text x="{:.1}" y="{ly:.1}" font-size="12" fill="#333">{}</text>"##,
            ly - 11.0,
            lx + 20.0,
            s.name()
        );
        lx += 20.0 + s.name().len() as f64 * CHAR_W + 24.0;
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_text_is_escaped() {
        assert_eq!(xml("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }

    #[test]
    fn shades_follow_record_status() {
        let mut rec = StepRecord::new("a", "null", 0);
        assert_eq!(Shade::of(None), Shade::New);
        assert_eq!(Shade::of(Some(&rec)), Shade::Pending);
        rec.status = Status::Applied;
        rec.applied = true;
        assert_eq!(Shade::of(Some(&rec)), Shade::Applied);
        rec.status = Status::Failed;
        assert_eq!(Shade::of(Some(&rec)), Shade::Failed);
    }
}
