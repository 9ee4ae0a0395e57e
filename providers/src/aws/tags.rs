//! The tag that ties an AWS object to the operation that created it.
//!
//! Every create tags what it makes with `flow:token` = the operation token the
//! engine persisted before the call, so that `read` after a crash can tell
//! the object an interrupted create made (adopt it) from one that was there
//! before (never adopted silently). The token also goes to AWS as the
//! `ClientRequestToken` where the API has one.

use std::collections::BTreeMap;

/// The tag key holding the creating operation's token.
pub(crate) const TOKEN: &str = "flow:token";

/// `tags` plus the token tag for `token`.
pub(crate) fn with_token(tags: &BTreeMap<String, String>, token: &str) -> BTreeMap<String, String> {
    let mut all = tags.clone();
    if !token.is_empty() {
        all.insert(TOKEN.to_string(), token.to_string());
    }
    all
}

/// The tags to add and the keys to remove to go from `before` to `after`;
/// the token tag is never removed.
pub(crate) fn changes(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let add = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let remove = before
        .keys()
        .filter(|k| !after.contains_key(*k) && k.as_str() != TOKEN)
        .cloned()
        .collect();
    (add, remove)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn token_tag_is_added_and_never_removed() {
        let tags = with_token(&map(&[("team", "ml")]), "abc");
        assert_eq!(tags, map(&[("team", "ml"), ("flow:token", "abc")]));
        assert_eq!(with_token(&map(&[]), ""), map(&[]));
        let (add, remove) = changes(&tags, &map(&[("team", "infra"), ("cost", "x")]));
        assert_eq!(add, map(&[("cost", "x"), ("team", "infra")]));
        assert!(remove.is_empty());
        let (_, remove) = changes(&map(&[("old", "1"), ("flow:token", "t")]), &map(&[]));
        assert_eq!(remove, vec!["old".to_string()]);
    }
}
