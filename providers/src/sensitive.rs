//! Values a provider makes or reads that must never be shown: a private key
//! it generates, a password a service hands back. The provider marks them
//! here as soon as it has them; the engine's redactor masks every marked
//! value (and its encoded forms) in everything flow prints or writes, and an
//! output that carries one is kept in state only as a fingerprint.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Every value marked so far, in order.
static MARKED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// How many values [`MARKED`] holds, readable without its lock: every
/// redaction asks, and almost always nothing is new.
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Marks `value` as secret for the rest of the process.
pub fn mark(value: &str) {
    let mut marked = MARKED.lock().unwrap_or_else(|e| e.into_inner());
    if !value.is_empty() && !marked.iter().any(|m| m == value) {
        marked.push(value.to_string());
        COUNT.store(marked.len(), Ordering::SeqCst);
    }
}

/// How many values are marked so far (see [`marked_since`]).
pub fn count() -> usize {
    COUNT.load(Ordering::SeqCst)
}

/// The values marked after the first `seen` (so a reader that has taken
/// `seen` of them takes only the new ones), and how many there are now.
pub fn marked_since(seen: usize) -> (Vec<String>, usize) {
    let marked = MARKED.lock().unwrap_or_else(|e| e.into_inner());
    (marked.iter().skip(seen).cloned().collect(), marked.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_values_are_handed_out_once_per_reader() {
        let (_, start) = marked_since(0);
        mark("provider-made-secret-1");
        mark("provider-made-secret-1");
        mark("");
        let (new, now) = marked_since(start);
        assert!(count() >= now, "the count is never behind the list");
        assert!(new.contains(&"provider-made-secret-1".to_string()));
        assert!(now > start);
        let (none, _) = marked_since(now);
        assert!(none.iter().all(|v| v != "provider-made-secret-1"));
    }
}
