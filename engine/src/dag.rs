//! The dependency graph of a set of steps.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};
use std::sync::OnceLock;

use petgraph::graph::{DiGraph, NodeIndex};
use rustc_hash::FxHashMap;

/// A DAG of named steps; an edge `a → b` means `b` needs `a` first.
#[derive(Debug, Clone, Default)]
pub struct Dag {
    graph: DiGraph<String, ()>,
    /// Node by name; hashed (lookups only: [`Dag::names`] sorts).
    index: FxHashMap<String, NodeIndex>,
    /// [`Dag::topo_order`], worked out once: plan and apply ask for it
    /// several times, and the graph never changes once made.
    order: OnceLock<Option<Vec<NodeIndex>>>,
}

impl Dag {
    /// A graph of `nodes` with the given `(from, to)` edges. Edges naming
    /// unknown nodes are ignored.
    pub fn new<'a>(
        nodes: impl IntoIterator<Item = &'a str>,
        edges: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        let mut dag = Dag::default();
        for n in nodes {
            if !dag.index.contains_key(n) {
                let i = dag.graph.add_node(n.to_string());
                dag.index.insert(n.to_string(), i);
            }
        }
        for (from, to) in edges {
            if let (Some(&a), Some(&b)) = (dag.index.get(from), dag.index.get(to))
                && a != b
                && dag.graph.find_edge(a, b).is_none()
            {
                dag.graph.add_edge(a, b, ());
            }
        }
        dag
    }

    /// Whether the graph has a node of this name.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// All node names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.index.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Nodes in an order where every node comes after what it needs; ties
    /// broken by name, so the order is stable. `None` if there is a cycle.
    pub fn topo_order(&self) -> Option<Vec<&str>> {
        let order = self.order.get_or_init(|| self.kahn());
        order
            .as_ref()
            .map(|o| o.iter().map(|&i| self.graph[i].as_str()).collect())
    }

    /// Kahn's algorithm over node indices, the ready nodes taken in name
    /// order (each node's rank among the sorted names, in a heap).
    fn kahn(&self) -> Option<Vec<NodeIndex>> {
        let g = &self.graph;
        let mut by_name: Vec<NodeIndex> = g.node_indices().collect();
        by_name.sort_unstable_by(|a, b| g[*a].cmp(&g[*b]));
        let mut rank = vec![0usize; by_name.len()];
        for (r, i) in by_name.iter().enumerate() {
            rank[i.index()] = r;
        }
        let mut indegree: Vec<usize> = g
            .node_indices()
            .map(|i| g.neighbors_directed(i, petgraph::Incoming).count())
            .collect();
        let mut ready: BinaryHeap<Reverse<usize>> = g
            .node_indices()
            .filter(|i| indegree[i.index()] == 0)
            .map(|i| Reverse(rank[i.index()]))
            .collect();
        let mut out = Vec::with_capacity(by_name.len());
        while let Some(Reverse(r)) = ready.pop() {
            let i = by_name[r];
            out.push(i);
            for s in g.neighbors_directed(i, petgraph::Outgoing) {
                let d = &mut indegree[s.index()];
                *d -= 1;
                if *d == 0 {
                    ready.push(Reverse(rank[s.index()]));
                }
            }
        }
        (out.len() == by_name.len()).then_some(out)
    }

    /// What `name` needs directly, sorted.
    pub fn needs(&self, name: &str) -> Vec<&str> {
        self.neighbours(name, petgraph::Incoming)
    }

    /// What needs `name` directly, sorted.
    pub fn needed_by(&self, name: &str) -> Vec<&str> {
        self.neighbours(name, petgraph::Outgoing)
    }

    fn neighbours(&self, name: &str, dir: petgraph::Direction) -> Vec<&str> {
        let Some(&i) = self.index.get(name) else {
            return Vec::new();
        };
        let mut v: Vec<&str> = self
            .graph
            .neighbors_directed(i, dir)
            .map(|n| self.graph[n].as_str())
            .collect();
        v.sort();
        v
    }

    /// `roots` and everything they need, transitively.
    pub fn with_ancestors(&self, roots: &[String]) -> BTreeSet<String> {
        self.closure(roots, petgraph::Incoming)
    }

    /// `roots` and everything that needs them, transitively.
    pub fn with_descendants(&self, roots: &[String]) -> BTreeSet<String> {
        self.closure(roots, petgraph::Outgoing)
    }

    fn closure(&self, roots: &[String], dir: petgraph::Direction) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut queue: VecDeque<&str> = roots.iter().map(String::as_str).collect();
        while let Some(n) = queue.pop_front() {
            if !self.contains(n) || !seen.insert(n.to_string()) {
                continue;
            }
            queue.extend(self.neighbours(n, dir));
        }
        seen
    }

    /// Every edge as `(from, to)`, sorted.
    pub fn edges(&self) -> Vec<(&str, &str)> {
        let mut v: Vec<(&str, &str)> = self
            .graph
            .edge_indices()
            .filter_map(|e| self.graph.edge_endpoints(e))
            .map(|(a, b)| (self.graph[a].as_str(), self.graph[b].as_str()))
            .collect();
        v.sort();
        v
    }

    /// The same graph with every edge reversed (destroy order).
    pub fn reversed(&self) -> Dag {
        let edges = self.edges();
        Dag::new(self.names(), edges.into_iter().map(|(a, b)| (b, a)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diamond() -> Dag {
        Dag::new(
            ["d", "b", "c", "a", "x"],
            [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
        )
    }

    #[test]
    fn topo_order_is_stable_and_valid() {
        assert_eq!(diamond().topo_order().unwrap(), ["a", "b", "c", "d", "x"]);
        let cyclic = Dag::new(["a", "b"], [("a", "b"), ("b", "a")]);
        assert!(cyclic.topo_order().is_none());
    }

    /// The order by name among the ready nodes, worked out plainly: the
    /// smallest name whose needs are all out, again and again.
    fn plain_order(nodes: &[String], edges: &[(String, String)]) -> Vec<String> {
        let mut left: BTreeSet<&str> = nodes.iter().map(String::as_str).collect();
        let mut out: Vec<String> = Vec::new();
        while let Some(&next) = left.iter().find(|n| {
            edges
                .iter()
                .all(|(a, b)| b != *n || !left.contains(a.as_str()))
        }) {
            left.remove(next);
            out.push(next.to_string());
        }
        out
    }

    #[test]
    fn topo_order_takes_ready_nodes_by_name_as_the_plain_walk_does() {
        // A layered graph with names out of order, several ready at once.
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        let nodes: Vec<String> = (0..120).map(|i| format!("s{}", (i * 37) % 120)).collect();
        let mut edges = Vec::new();
        for (i, to) in nodes.iter().enumerate().skip(10) {
            for _ in 0..2 {
                let from = &nodes[next() % i];
                edges.push((from.clone(), to.clone()));
            }
        }
        let dag = Dag::new(
            nodes.iter().map(String::as_str),
            edges.iter().map(|(a, b)| (a.as_str(), b.as_str())),
        );
        let order = dag.topo_order().expect("acyclic");
        assert_eq!(order, plain_order(&nodes, &edges));
        // Asked again, the same (it is kept).
        assert_eq!(dag.topo_order().expect("acyclic"), order);
    }

    #[test]
    fn closures() {
        let g = diamond();
        let anc: Vec<_> = g.with_ancestors(&["d".into()]).into_iter().collect();
        assert_eq!(anc, ["a", "b", "c", "d"]);
        let desc: Vec<_> = g.with_descendants(&["b".into()]).into_iter().collect();
        assert_eq!(desc, ["b", "d"]);
        assert_eq!(g.needs("d"), ["b", "c"]);
        assert_eq!(g.reversed().needs("a"), ["b", "c"]);
    }
}
