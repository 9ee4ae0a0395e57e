//! Dependency cycles, each link shown where it is written.

use std::collections::HashMap;

use super::Edge;
use crate::diag::Diag;
use crate::lang::ast::Workflow;

/// The first dependency cycle, naming every step on it in order.
pub fn find_cycle(wf: &Workflow, edges: &[Edge]) -> Option<Diag> {
    // Hashed, not ordered: only lookups; the walk's order comes from the
    // steps' order and each step's edges in the order written.
    let mut succ: HashMap<&str, Vec<&Edge>> = HashMap::with_capacity(wf.steps.len());
    for e in edges {
        succ.entry(e.from.as_str()).or_default().push(e);
    }
    // Iterative DFS with colours; the stack of edges gives the cycle's path.
    let mut colour: HashMap<&str, u8> = HashMap::with_capacity(wf.steps.len());
    for start in wf.steps.iter().map(|s| s.name.as_str()) {
        if colour.get(start).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut path: Vec<&Edge> = Vec::new();
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        colour.insert(start, 1);
        while let Some((node, idx)) = stack.last().cloned() {
            let next = succ.get(node).and_then(|v| v.get(idx)).copied();
            stack.last_mut().expect("non-empty").1 += 1;
            match next {
                None => {
                    colour.insert(node, 2);
                    stack.pop();
                    path.pop();
                }
                Some(edge) => match colour.get(edge.to.as_str()).copied().unwrap_or(0) {
                    0 => {
                        colour.insert(edge.to.as_str(), 1);
                        path.push(edge);
                        stack.push((edge.to.as_str(), 0));
                    }
                    1 => {
                        path.push(edge);
                        let begin = path.iter().position(|e| e.from == edge.to).unwrap_or(0);
                        return Some(cycle_diag(wf, &path[begin..]));
                    }
                    _ => {}
                },
            }
        }
    }
    None
}

fn cycle_diag(wf: &Workflow, cycle: &[&Edge]) -> Diag {
    // Edges run from a dependency to its dependent; people read a cycle as
    // "a needs b needs c needs a", so walk it backwards.
    let mut names: Vec<&str> = cycle.iter().rev().map(|e| e.to.as_str()).collect();
    names.push(names[0]);
    // Each edge's span is in the file of the step that needs: a module's
    // for its steps. The first edge's file carries the diagnostic; edges in
    // other files are shown there too.
    let source_of = |e: &Edge| match wf.step(&e.to) {
        Some(step) => wf.source_of(step),
        None => &wf.source,
    };
    let main = source_of(cycle[cycle.len() - 1]);
    let mut d = Diag::new(
        "flow::cycle",
        format!("dependency cycle: {}", names.join(" → ")),
    )
    .in_source(main);
    for e in cycle.iter().rev() {
        let text = format!("`{}` needs `{}`", e.to, e.from);
        let source = source_of(e);
        d = if source.name == main.name {
            d.label(e.span.clone(), text)
        } else {
            d.see_also(source, e.span.clone(), text)
        };
    }
    d.help("break the cycle by removing one of these references or dependencies")
}
