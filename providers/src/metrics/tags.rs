//! The labels launchers put in front of each line of a rank's output, taken
//! off before a line is read: mpirun's `--tag-output` (`[1,0]<stdout>:`)
//! and `srun -l`'s task number (`0: `).

/// `line` without its launcher labels.
pub(super) fn strip(line: &str) -> &str {
    let mut rest = line;
    loop {
        if let Some(after) = mpirun_tag(rest) {
            rest = after;
        } else if let Some(after) = srun_label(rest) {
            rest = after;
        } else {
            return rest;
        }
    }
}

/// After `[JOB,RANK]<stdout>:` (or `<stderr>`, or no stream name).
fn mpirun_tag(line: &str) -> Option<&str> {
    let inner = line.strip_prefix('[')?;
    let close = inner.find(']')?;
    let ranks = &inner[..close];
    if ranks.is_empty() || !ranks.chars().all(|c| c.is_ascii_digit() || c == ',') {
        return None;
    }
    let rest = &inner[close + 1..];
    let rest = rest
        .strip_prefix("<stdout>")
        .or_else(|| rest.strip_prefix("<stderr>"))
        .unwrap_or(rest);
    rest.strip_prefix(':')
}

/// After `N: ` at the very start of the line.
fn srun_label(line: &str) -> Option<&str> {
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    line[digits..].strip_prefix(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_labels_come_off_and_nothing_else() {
        assert_eq!(
            strip("[1,0]<stdout>:# Avg bus bandwidth"),
            "# Avg bus bandwidth"
        );
        assert_eq!(strip("[1,12]<stderr>:x"), "x");
        assert_eq!(
            strip("0:            8             2"),
            "           8             2"
        );
        assert_eq!(strip("15: # Out of bounds"), "# Out of bounds");
        // A data row's size is no label; nor is a log line's bracket.
        assert_eq!(
            strip("           8             2"),
            "           8             2"
        );
        assert_eq!(strip("[rank0]:INFO"), "[rank0]:INFO");
        assert_eq!(strip("2025-06-20 14:17:10 I"), "2025-06-20 14:17:10 I");
    }
}
