//! Which backups are kept: by count and by age, in the order of the state's
//! serial (which only grows), never of a wall clock (which can jump back).

use std::time::Duration;

/// How many backups are kept at most unless the workflow says otherwise
/// (`keep_backups` under `[workflow.state]`); older ones (by serial) are
/// deleted when a new one is written.
pub const KEEP_BACKUPS: usize = 20;

/// Backups older than this (by the time written in their name) are deleted
/// when a new one is written, unless they are among the newest
/// [`KEEP_NEWEST`]; thirty days unless the workflow says otherwise
/// (`keep_backups_for`).
pub const KEEP_BACKUPS_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// The newest backups by serial are never deleted, however old they look:
/// a clock that jumped forward must not empty the folder.
pub const KEEP_NEWEST: usize = 3;

/// How many backups to keep, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// At most this many (never fewer than [`KEEP_NEWEST`] are kept).
    pub keep: usize,
    /// None older than this, beyond the newest [`KEEP_NEWEST`].
    pub max_age: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep: KEEP_BACKUPS,
            max_age: KEEP_BACKUPS_FOR,
        }
    }
}

/// What retention needs to know of one backup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Aged {
    /// The serial of the state it holds.
    pub serial: u64,
    /// When it was written (seconds since the Unix epoch).
    pub created_at: u64,
}

/// Sorts `items` newest first: by serial, then by time written (two backups
/// at one serial hold the same records; the later one is kept first).
pub(crate) fn sort_newest_first<T>(items: &mut [T], aged: impl Fn(&T) -> Aged) {
    items.sort_by_key(|item| {
        let a = aged(item);
        std::cmp::Reverse((a.serial, a.created_at))
    });
}

/// The positions in `sorted` (newest first, see [`sort_newest_first`]) of
/// the backups to delete at `now` (seconds since the Unix epoch): past the
/// newest `keep`, or older than `max_age` of `rule`; never one of the
/// newest [`KEEP_NEWEST`]. A backup written "in the future" (a clock that
/// was ahead) counts as new.
pub(crate) fn to_prune<T>(
    sorted: &[T],
    aged: impl Fn(&T) -> Aged,
    now: u64,
    rule: &Retention,
) -> Vec<usize> {
    let max_age = rule.max_age.as_secs();
    sorted
        .iter()
        .enumerate()
        .skip(KEEP_NEWEST)
        .filter(|(i, item)| *i >= rule.keep || now.saturating_sub(aged(item).created_at) > max_age)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 24 * 3600;
    const NOW: u64 = 1_800_000_000;

    fn aged(list: &[(u64, u64)]) -> Vec<Aged> {
        let mut v: Vec<Aged> = list
            .iter()
            .map(|&(serial, created_at)| Aged { serial, created_at })
            .collect();
        sort_newest_first(&mut v, |a| *a);
        v
    }

    #[test]
    fn keeps_twenty_by_serial() {
        let list: Vec<(u64, u64)> = (1..=25).map(|s| (s, NOW - 60 * (25 - s))).collect();
        let sorted = aged(&list);
        let gone: Vec<u64> = to_prune(&sorted, |a| *a, NOW, &Retention::default())
            .into_iter()
            .map(|i| sorted[i].serial)
            .collect();
        assert_eq!(gone, [5, 4, 3, 2, 1]);
    }

    #[test]
    fn order_is_by_serial_not_by_clock() {
        // The clock jumped back an hour before serial 9 and 10 were taken.
        let sorted = aged(&[(8, NOW), (9, NOW - 3600), (10, NOW - 3500), (7, NOW - 10)]);
        let serials: Vec<u64> = sorted.iter().map(|a| a.serial).collect();
        assert_eq!(serials, [10, 9, 8, 7]);
    }

    #[test]
    fn old_ones_go_but_never_the_newest_three() {
        let sorted = aged(&[
            (10, NOW - 40 * DAY),
            (9, NOW - 41 * DAY),
            (8, NOW - 42 * DAY),
            (7, NOW - 43 * DAY),
            (6, NOW - DAY),
        ]);
        let gone: Vec<u64> = to_prune(&sorted, |a| *a, NOW, &Retention::default())
            .into_iter()
            .map(|i| sorted[i].serial)
            .collect();
        // 6 is recent; 10, 9, 8 are the newest by serial, however old.
        assert_eq!(gone, [7]);
    }

    #[test]
    fn a_backup_from_the_future_is_new() {
        let sorted = aged(&[(4, NOW + DAY), (3, NOW), (2, NOW), (1, NOW + 365 * DAY)]);
        assert!(to_prune(&sorted, |a| *a, NOW, &Retention::default()).is_empty());
    }

    #[test]
    fn a_workflow_may_keep_more_or_fewer() {
        let list: Vec<(u64, u64)> = (1..=10).map(|s| (s, NOW - s * DAY)).collect();
        let sorted = aged(&list);
        let rule = Retention {
            keep: 4,
            max_age: Duration::from_secs(365 * DAY),
        };
        assert_eq!(to_prune(&sorted, |a| *a, NOW, &rule), [4, 5, 6, 7, 8, 9]);
        // Fewer than three is three.
        let rule = Retention {
            keep: 1,
            max_age: Duration::from_secs(DAY / 2),
        };
        assert_eq!(to_prune(&sorted, |a| *a, NOW, &rule), [3, 4, 5, 6, 7, 8, 9]);
    }

    #[test]
    fn age_limit_is_thirty_days() {
        let sorted = aged(&[
            (4, NOW),
            (3, NOW),
            (2, NOW),
            (1, NOW - 30 * DAY),
            (0, NOW - 30 * DAY - 1),
        ]);
        let gone = to_prune(&sorted, |a| *a, NOW, &Retention::default());
        assert_eq!(gone, [4]);
    }
}
