//! RFC 3339 timestamps in UTC, without a date library.

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The proleptic Gregorian date (year, month 1-12, day 1-31) of a day
/// counted from 1970-01-01 (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(47_541), (2100, 3, 1)); // 2100 is not a leap year
        assert_eq!(civil_from_days(20_779), (2026, 11, 22));
    }

    fn days_in_month(year: i64, month: u32) -> u32 {
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        match month {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        }
    }

    #[test]
    fn every_day_follows_the_previous_one() {
        let mut prev = civil_from_days(-800_000);
        for d in -799_999..800_000 {
            let cur = civil_from_days(d);
            let next_day = (prev.0, prev.1, prev.2 + 1) == cur;
            let next_month = cur.2 == 1 && (prev.0, prev.1 + 1) == (cur.0, cur.1);
            let next_year = (cur.1, cur.2) == (1, 1) && prev.0 + 1 == cur.0 && prev.1 == 12;
            assert!(next_day || next_month || next_year, "{prev:?} -> {cur:?}");
            assert!(cur.2 <= days_in_month(cur.0, cur.1), "{cur:?}");
            prev = cur;
        }
    }

    #[test]
    fn formats_utc() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_795_324_320), "2026-11-22T05:12:00Z");
        assert_eq!(format_rfc3339(951_868_799), "2000-02-29T23:59:59Z");
    }
}
