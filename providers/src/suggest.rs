//! "Did you mean …?" suggestions for misspelt names.

/// The Levenshtein distance between `a` and `b`: the fewest single-character
/// insertions, deletions and substitutions that turn one into the other.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    // `row[j]` is the distance between the prefix of `a` seen so far and `b[..j]`.
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// The largest edit distance still worth suggesting.
const MAX_DISTANCE: usize = 2;

/// The candidate `name` most likely meant, compared case-insensitively: the
/// nearest within an edit distance of 2 (ties go to the first candidate), or
/// failing that the first candidate that `name` is a prefix of or that is a
/// prefix of `name` (`cloudformation` → `cloudformation.stack`).
pub fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str> + Clone,
) -> Option<&'a str> {
    let name = name.to_lowercase();
    if name.is_empty() {
        return None;
    }
    let nearest = candidates
        .clone()
        .into_iter()
        .map(|c| (edit_distance(&name, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= MAX_DISTANCE)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c);
    nearest.or_else(|| {
        candidates.into_iter().find(|c| {
            let c = c.to_lowercase();
            c.starts_with(&name) || name.starts_with(&c)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("exec", "exec"), 0);
        assert_eq!(edit_distance("", "null"), 4);
        assert_eq!(edit_distance("null", ""), 4);
        assert_eq!(edit_distance("nul", "null"), 1);
        assert_eq!(edit_distance("exce", "exec"), 2);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("flaw", "lawn"), 2);
        assert_eq!(edit_distance("é", "e"), 1);
    }

    #[test]
    fn closest_prefers_the_nearest_then_a_prefix() {
        let names = ["cloudformation.stack", "exec", "null"];
        assert_eq!(closest("nul", names), Some("null"));
        assert_eq!(closest("Exec", names), Some("exec"));
        assert_eq!(closest("exce", names), Some("exec"));
        assert_eq!(
            closest("cloudformation", names),
            Some("cloudformation.stack")
        );
        assert_eq!(closest("exec.shell", names), Some("exec"));
        assert_eq!(closest("kubernetes", names), None);
        assert_eq!(closest("", names), None);
    }
}
