//! A value that must never be printed, serialized or journaled: tokens,
//! keys, configured secrets. Scrubbing them from output is sluice-redact's
//! job (crates/redact), shared with the sandbox agent.

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
}
