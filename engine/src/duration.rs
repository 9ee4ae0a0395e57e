//! Durations for people, written one way everywhere flow prints one (step
//! lines, summaries, `flow runs`, the report and its charts): milliseconds
//! under a second (`850ms`), then seconds with one decimal (`12.3s`), then
//! minutes and seconds (`4m05s`). JSON carries milliseconds as numbers.

use std::time::Duration;

/// `d` for people: `850ms`, `12.3s`, `4m05s`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    // Rounded as shown, so 59.96 s reads 1m00s, not 60.0s.
    let tenths = (ms + 50) / 100;
    if tenths < 600 {
        return format!("{}.{}s", tenths / 10, tenths % 10);
    }
    let secs = (ms + 500) / 1000;
    format!("{}m{:02}s", secs / 60, secs % 60)
}

/// [`human`] of a number of milliseconds.
pub fn human_ms(ms: u64) -> String {
    human(Duration::from_millis(ms))
}

/// [`human`] of a number of seconds (negative and non-finite read as 0).
pub fn human_secs(secs: f64) -> String {
    let secs = if secs.is_finite() { secs.max(0.0) } else { 0.0 };
    human(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_range_reads_its_own_way_and_rounds_once() {
        assert_eq!(human_ms(0), "0ms");
        assert_eq!(human_ms(12), "12ms");
        assert_eq!(human_ms(999), "999ms");
        assert_eq!(human_ms(1000), "1.0s");
        assert_eq!(human_ms(12_345), "12.3s");
        assert_eq!(human_ms(59_960), "1m00s");
        assert_eq!(human_ms(245_000), "4m05s");
        assert_eq!(human_secs(0.84), "840ms");
        assert_eq!(human_secs(-1.0), "0ms");
        assert_eq!(human_secs(f64::NAN), "0ms");
    }
}
