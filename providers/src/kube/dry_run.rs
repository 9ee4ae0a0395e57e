//! What a plan learns from a cluster that already exists: every object of
//! the step server-side applied as a dry run (schema, admission, webhooks;
//! nothing kept), so what the API server or the CRD's schema would refuse
//! (a misspelt field of a PyTorchJob, a value out of range) is named under
//! the step before anything is applied.

use super::objects::Kinds;
use super::render::Doc;

/// The plan lines for `docs` (namespaced ones placed in `default_ns`): one
/// summary, then each refusal and each note.
pub async fn lines(kinds: &mut Kinds, docs: &[Doc], default_ns: &str) -> Vec<String> {
    let (mut accepted, mut later) = (0, 0);
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for doc in docs {
        if kinds.resolve(doc.api_version(), doc.kind()).await.is_err() {
            // Served once an earlier object (its CRD) is applied.
            later += 1;
            continue;
        }
        let placed = match kinds.place(doc, default_ns).await {
            Ok(p) => p,
            Err(e) => {
                out.push(format!("! {e}"));
                continue;
            }
        };
        match kinds.dry_run(&placed).await {
            Ok(note) => {
                accepted += 1;
                notes.extend(note);
            }
            Err(e) => out.push(format!("! refused: {}", e.message)),
        }
    }
    let refused = docs.len() - accepted - later;
    let mut summary =
        format!("dry run on the cluster: {accepted} object(s) accepted, {refused} refused");
    if later > 0 {
        summary.push_str(&format!(
            ", {later} checked at apply (their kinds are served once their CRDs are applied)"
        ));
    }
    out.insert(0, summary);
    // One note per kind of note is enough (six CRDs of one operator lose
    // their CEL rules on an old server alike).
    if let Some(first) = notes.first() {
        out.push(match notes.len() {
            1 => format!("note: {first}"),
            n => format!("note: {first} (and {} more object(s) alike)", n - 1),
        });
    }
    out
}
