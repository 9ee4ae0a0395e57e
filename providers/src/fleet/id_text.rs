//! Text inside a step's id (the attempts and replacements a restarting
//! job records there): the id's separators, and `%`, written `%XX` (the
//! character's code in hex), and read back. One scheme for every job kind
//! that records attempts (`slurm.job`, `kube.job`, `batch.job`).

/// `text` with `%` and each of `separators` written `%XX`.
pub(crate) fn escape(text: &str, separators: &[char]) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '%' || separators.contains(&c) {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// [`escape`] undone: each `%XX` of an ASCII character read back as it; a
/// `%` not followed by one is kept.
pub(crate) fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .filter(u8::is_ascii);
        match code {
            Some(b) => {
                out.push(b as char);
                rest = &rest[at + 3..];
            }
            None => {
                out.push('%');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_and_percent_round_trip_and_nothing_else_changes() {
        let text = "job 812 FAILED: 100% of gpu-3@i-0a, ~hung; é!";
        let escaped = escape(text, &[',', '@', '~', '!', ';']);
        assert_eq!(
            escaped,
            "job 812 FAILED: 100%25 of gpu-3%40i-0a%2C %7Ehung%3B é%21"
        );
        assert_eq!(unescape(&escaped), text);
        // What the kinds wrote before this module reads the same.
        assert_eq!(unescape("a%7Cb%2Cc%25d"), "a|b,c%d");
        assert_eq!(unescape("50% done %zz"), "50% done %zz");
    }
}
