//! Where a path of keys and list indexes sits in a YAML file, so that an
//! error a tool reports by path (`Scheduling.SlurmQueues[0].Name`) can name
//! the file's line and column. Reads `saphyr-parser`'s events; a key is
//! located at the key itself, a list item at the item.

use saphyr_parser::{Event, Parser};

/// One step of a path: a mapping key or a list index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    /// A mapping's key.
    Key(String),
    /// A list's item, from 0.
    Index(usize),
}

impl std::fmt::Display for Seg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seg::Key(k) => f.write_str(k),
            Seg::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// `path` written as a reader would: `Scheduling.SlurmQueues[0].Name`.
pub(crate) fn display(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        if matches!(seg, Seg::Key(_)) && !out.is_empty() {
            out.push('.');
        }
        out.push_str(&seg.to_string());
    }
    out
}

/// An open mapping or list while the events are read.
enum Open {
    /// A mapping; `key` is the key whose value comes next, if one was read.
    Map { key: Option<String> },
    /// A list; `next` is the index of the next item.
    Seq { next: usize },
}

/// The 1-based line and column of `path` in `text`; the deepest part of the
/// path that exists when the whole of it does not (an unknown field is
/// reported where its parent is); `None` when the text is not YAML.
pub(crate) fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let mut stack: Vec<Open> = Vec::new();
    let mut here: Vec<Seg> = Vec::new();
    let mut best: Option<(usize, (usize, usize))> = None;
    let mut consider = |at: &[Seg], pos: (usize, usize)| {
        let depth = at.len();
        if depth <= path.len() && path[..depth] == *at && best.is_none_or(|(d, _)| depth > d) {
            best = Some((depth, pos));
        }
    };
    for item in Parser::new_from_str(text) {
        let (event, span) = item.ok()?;
        let pos = (span.start.line(), span.start.col() + 1);
        // Where a node starting now sits, and whether it is a mapping key.
        let mut is_key = false;
        let at_node = match stack.last_mut() {
            Some(Open::Map { key }) => match key.take() {
                Some(k) => Some(Seg::Key(k)),
                None => {
                    is_key = true;
                    None
                }
            },
            Some(Open::Seq { next }) => {
                *next += 1;
                Some(Seg::Index(*next - 1))
            }
            None => None,
        };
        let starts_node = matches!(
            event,
            Event::Scalar(..)
                | Event::MappingStart(..)
                | Event::SequenceStart(..)
                | Event::Alias(_)
        );
        if !starts_node {
            // An end event consumed nothing: undo the index bump or key take.
            match (stack.last_mut(), &at_node) {
                (Some(Open::Seq { next }), Some(_)) => *next -= 1,
                (Some(Open::Map { key }), Some(Seg::Key(k))) => *key = Some(k.clone()),
                _ => {}
            }
        }
        match event {
            Event::Scalar(value, ..) if is_key => {
                let mut at = here.clone();
                at.push(Seg::Key(value.to_string()));
                consider(&at, pos);
                if let Some(Open::Map { key }) = stack.last_mut() {
                    *key = Some(value.to_string());
                }
            }
            Event::Scalar(..) | Event::Alias(_) => {
                if let Some(seg) = at_node {
                    let mut at = here.clone();
                    at.push(seg);
                    consider(&at, pos);
                }
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                if let Some(seg) = at_node {
                    here.push(seg);
                    consider(&here, pos);
                }
                stack.push(if matches!(event, Event::MappingStart(..)) {
                    Open::Map { key: None }
                } else {
                    Open::Seq { next: 0 }
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
                if !stack.is_empty() {
                    here.pop();
                }
            }
            _ => {}
        }
    }
    best.map(|(_, pos)| pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "\
HeadNode:
  InstanceType: m5.8xlarge
Scheduling:
  Scheduler: slurm
  SlurmQueues:
    - Name: compute-gpu
      ComputeResources:
        - Name: distributed-ml
          InstanceTyp: p5.48xlarge
          MaxCount: two
    - Name: cpu
";

    fn key(k: &str) -> Seg {
        Seg::Key(k.into())
    }

    #[test]
    fn keys_and_items_are_found_where_they_are_written() {
        let path = [
            key("Scheduling"),
            key("SlurmQueues"),
            Seg::Index(0),
            key("ComputeResources"),
            Seg::Index(0),
            key("InstanceTyp"),
        ];
        assert_eq!(locate(CONFIG, &path), Some((9, 11)));
        assert_eq!(
            display(&path),
            "Scheduling.SlurmQueues[0].ComputeResources[0].InstanceTyp"
        );
        let second = [
            key("Scheduling"),
            key("SlurmQueues"),
            Seg::Index(1),
            key("Name"),
        ];
        assert_eq!(locate(CONFIG, &second), Some((11, 7)));
        assert_eq!(
            locate(CONFIG, &[key("HeadNode"), key("InstanceType")]),
            Some((2, 3))
        );
    }

    #[test]
    fn a_missing_tail_falls_back_to_the_deepest_part_that_exists() {
        let path = [
            key("Scheduling"),
            key("SlurmQueues"),
            Seg::Index(1),
            key("Networking"),
        ];
        // The second queue's item starts at its `Name` key's line.
        assert_eq!(locate(CONFIG, &path), Some((11, 7)));
        assert_eq!(locate("a: [", &[key("a")]), None);
    }
}
