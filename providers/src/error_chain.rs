//! An error and its causes on one line, for messages built from SDK and
//! client errors (`dispatch failure: io error: connection refused`).

/// `err` and each of its sources not already in the text, joined by `: `.
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("dispatch failure")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_are_joined_once() {
        let e = Outer(std::io::Error::other("connection refused"));
        assert_eq!(chain(&e), "dispatch failure: connection refused");
    }
}
