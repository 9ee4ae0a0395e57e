//! Kills aimed at an instant or into a call, and the table of where they
//! landed, read from the fault proxy's instants.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::aws::Aws;
use crate::support::fault_proxy::{Call, FaultProxy, Landing};
use crate::support::{finish, signal};

/// Where to kill a run of `flow`.
#[derive(Debug, Clone)]
pub(crate) enum Aim {
    /// This long after its start.
    After(Duration),
    /// Inside the first call of this kind (`CreateStack`), as soon as the
    /// call is at this place: held before moto, or at moto.
    Into(String, Landing),
}

/// Runs `flow ARGS` and kills it with SIGKILL as `aim` says; waits until
/// the proxy is done with every call of the run; returns the mutating
/// calls in flight at the kill, each with where the kill landed in it.
pub(crate) fn kill(
    a: &Aws,
    proxy: &FaultProxy,
    args: &[&str],
    aim: &Aim,
) -> Vec<(String, Landing)> {
    let from = proxy.calls().len();
    let mut child = a.spawn(args);
    let at = match aim {
        Aim::After(wait) => {
            std::thread::sleep(*wait);
            Instant::now()
        }
        Aim::Into(kind, landing) => {
            let start = Instant::now();
            loop {
                let calls = proxy.calls_from(from);
                if calls.iter().any(|c| is_at(c, kind, *landing)) {
                    break Instant::now();
                }
                let ended = child.try_wait().expect("try_wait").is_some();
                assert!(
                    !ended && start.elapsed() < Duration::from_secs(60),
                    "flow {args:?} never held {kind} {}: {:?}",
                    landing.heading(),
                    calls.iter().map(|c| &c.op).collect::<Vec<_>>()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    signal(&child, libc::SIGKILL);
    finish(child);
    assert!(
        proxy.settle(from, at, Duration::from_secs(30)),
        "the proxy still holds calls of the killed run"
    );
    proxy
        .calls_from(from)
        .iter()
        .filter_map(|c| Some((c.name()?, c.landing(at)?)))
        .collect()
}

/// Whether `c` is a call of `kind` now at the place `landing` names.
fn is_at(c: &Call, kind: &str, landing: Landing) -> bool {
    let at = match landing {
        Landing::BeforeMoto => c.sent.is_none() && !c.settled(),
        Landing::AtMoto => c.sent.is_some() && c.replied.is_none(),
        Landing::AfterAnswer => c.replied.is_some() && !c.settled(),
        Landing::SentAfterKill => false,
    };
    at && c.name().as_deref() == Some(kind)
}

/// Where the kills of one command landed: per call kind, how many kills
/// found a call of that kind at each place.
#[derive(Debug, Default)]
pub(crate) struct Table {
    cells: BTreeMap<String, [usize; 4]>,
    kills: usize,
    between: usize,
}

impl Table {
    /// Adds one kill and the calls it landed in.
    pub(crate) fn add(&mut self, landed: &[(String, Landing)]) {
        self.kills += 1;
        if landed.is_empty() {
            self.between += 1;
        }
        for (kind, landing) in landed {
            let i = Landing::ALL.iter().position(|l| l == landing).unwrap_or(0);
            self.cells.entry(kind.clone()).or_default()[i] += 1;
        }
    }

    /// Kills that found a call of `kind` at `landing`.
    pub(crate) fn count(&self, kind: &str, landing: Landing) -> usize {
        let i = Landing::ALL.iter().position(|l| *l == landing).unwrap_or(0);
        self.cells.get(kind).map_or(0, |c| c[i])
    }

    /// The first of `kinds` × {before moto, at moto} no kill landed in.
    pub(crate) fn missing(&self, kinds: &[&str]) -> Option<(String, Landing)> {
        kinds.iter().find_map(|k| {
            [Landing::BeforeMoto, Landing::AtMoto]
                .into_iter()
                .find(|l| self.count(k, *l) == 0)
                .map(|l| (k.to_string(), l))
        })
    }

    /// The table, as Markdown: a row per call kind, a column per place.
    pub(crate) fn render(&self, title: &str) -> String {
        let mut out = format!("{title} ({} kills)\n| call |", self.kills);
        for l in Landing::ALL {
            out.push_str(&format!(" {} |", l.heading()));
        }
        out.push_str("\n|---|");
        out.push_str(&"---:|".repeat(Landing::ALL.len()));
        for (kind, cells) in &self.cells {
            out.push_str(&format!("\n| {kind} |"));
            for n in cells {
                out.push_str(&format!(" {n} |"));
            }
        }
        out.push_str(&format!(
            "\n| (between calls) | {} |{}",
            self.between,
            " |".repeat(Landing::ALL.len() - 1)
        ));
        out
    }
}
