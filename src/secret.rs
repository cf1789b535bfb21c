//! A value that must never be printed, serialized or journaled: tokens,
//! keys, configured secrets.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T = String>(T);

impl<T> Secret<T> {
    pub fn new(value: T) -> Secret<T> {
        Secret(value)
    }

    /// The only way to read the value: call sites are easy to audit.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Replaces every occurrence of each secret value in `text` with `***`.
/// The one redaction helper: logs, step results and check run summaries
/// all pass through it.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        // Very short values would redact ordinary words; they are not
        // secrets worth the name, and GitHub tokens are 40 characters.
        if s.len() >= 4 {
            out = out.replace(s, "***");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        assert_eq!(
            format!("{:?}", Secret::new("ghs_abc")),
            "Secret(<redacted>)"
        );
    }

    #[test]
    fn redacts_every_occurrence() {
        assert_eq!(redact("a tok123 b tok123", &["tok123"]), "a *** b ***");
        assert_eq!(redact("abc", &["ab"]), "abc");
    }
}
