//! Dependency cycles, each link shown where it is written.

use std::collections::HashMap;

use super::Edge;
use crate::diag::Diag;
use crate::lang::ast::Workflow;

/// The first dependency cycle, naming every step on it in order.
pub fn find_cycle(wf: &Workflow, edges: &[Edge]) -> Option<Diag> {
    // Each name a number (the steps' own positions, then any other name an
    // edge has), each node's edges in the order written: the walk's order
    // comes from the steps' order and each step's edges.
    let mut others: HashMap<&str, usize> = HashMap::new();
    let ends: Vec<(usize, usize)> = edges
        .iter()
        .map(|e| (id(wf, &mut others, &e.from), id(wf, &mut others, &e.to)))
        .collect();
    let nodes = wf.steps.len() + others.len();
    let mut first = vec![0usize; nodes + 1];
    for &(from, _) in &ends {
        first[from + 1] += 1;
    }
    for i in 0..nodes {
        first[i + 1] += first[i];
    }
    let mut fill = first.clone();
    let mut succ = vec![0usize; ends.len()];
    for (k, &(from, _)) in ends.iter().enumerate() {
        succ[fill[from]] = k;
        fill[from] += 1;
    }
    // Iterative DFS with colours; the stack of edges gives the cycle's path.
    let mut colour = vec![0u8; nodes];
    for start in 0..wf.steps.len() {
        if colour[start] != 0 {
            continue;
        }
        let mut path: Vec<usize> = Vec::new();
        let mut stack: Vec<(usize, usize)> = vec![(start, first[start])];
        colour[start] = 1;
        while let Some(&(node, at)) = stack.last() {
            stack.last_mut().expect("non-empty").1 += 1;
            if at >= first[node + 1] {
                colour[node] = 2;
                stack.pop();
                path.pop();
                continue;
            }
            let k = succ[at];
            let to = ends[k].1;
            match colour[to] {
                0 => {
                    colour[to] = 1;
                    path.push(k);
                    stack.push((to, first[to]));
                }
                1 => {
                    path.push(k);
                    let begin = path.iter().position(|&e| ends[e].0 == to).unwrap_or(0);
                    let cycle: Vec<&Edge> = path[begin..].iter().map(|&e| &edges[e]).collect();
                    return Some(cycle_diag(wf, &cycle));
                }
                _ => {}
            }
        }
    }
    None
}

/// The number of `name`: its position among the steps, else the next
/// number after them and the other names seen so far.
fn id<'e>(wf: &Workflow, others: &mut HashMap<&'e str, usize>, name: &'e str) -> usize {
    match wf.step_position(name) {
        Some(i) => i,
        None => {
            let next = wf.steps.len() + others.len();
            *others.entry(name).or_insert(next)
        }
    }
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
