//! Which repositories a checkout may clone: a URL must start with one of the configured
//! prefixes (`--git-url-prefix`, default `https://github.com/`). The Worker derives the URL
//! from the repository it was told about; this is the agent's own check, so a caller that is
//! wrong or compromised still cannot make the agent fetch from an arbitrary host or read a
//! local path (`file://`) nobody allowed.

/// What a checkout clones from when no prefix is configured.
pub const DEFAULT_PREFIX: &str = "https://github.com/";

/// Transports a prefix may name. `file://` serves local mirrors and tests; the rest (ssh,
/// `ext::`) could run arbitrary programs or need keys the agent does not have.
const SCHEMES: &[&str] = &["https://", "http://", "file://"];

#[derive(Debug, Clone)]
pub struct Policy {
    prefixes: Vec<String>,
}

impl Policy {
    /// Checks each prefix: an allowed scheme, and an end that pins the host: either a `/` after
    /// the host (`https://github.com/`, `file:///srv/mirrors/`) or the `:` before a port
    /// (`http://172.17.0.1:`, any port of that host). `https://github.com` alone would also
    /// admit `https://github.com.evil.example/`.
    pub fn new(prefixes: Vec<String>) -> Result<Policy, String> {
        let prefixes = if prefixes.is_empty() {
            vec![DEFAULT_PREFIX.to_owned()]
        } else {
            prefixes
        };
        for prefix in &prefixes {
            let Some(rest) = SCHEMES.iter().find_map(|s| prefix.strip_prefix(s)) else {
                return Err(format!(
                    "git URL prefix {prefix:?} must start with one of {SCHEMES:?}"
                ));
            };
            let pins_host = rest.contains('/') || (!rest.is_empty() && rest.ends_with(':'));
            if !pins_host || rest.contains('@') || has_bad_chars(prefix) {
                return Err(format!(
                    "git URL prefix {prefix:?} must name a whole host: end with '/' after it \
                     (https://github.com/) or with the ':' before a port (http://10.0.0.1:)"
                ));
            }
        }
        Ok(Policy { prefixes })
    }

    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// Ok when `url` may be cloned; Err says why not (for a 400).
    pub fn check(&self, url: &str) -> Result<(), String> {
        if has_bad_chars(url) {
            return Err("repo_url must not contain spaces or control characters".into());
        }
        let Some(rest) = SCHEMES.iter().find_map(|s| url.strip_prefix(s)) else {
            return Err(format!(
                "repo_url must be an http(s):// or file:// URL starting with one of {:?}",
                self.prefixes
            ));
        };
        // user:password@ in the authority would move the host past a prefix that ends in ':'
        // and has no business in a clone URL (the token is sent separately).
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.contains('@') || authority.contains('\\') {
            return Err("repo_url must not carry credentials (user@host)".into());
        }
        // `..` would climb out of a prefix's directory (file:///srv/mirrors/../../etc).
        if path
            .split('/')
            .any(|segment| segment.to_ascii_lowercase().replace("%2e", ".") == "..")
        {
            return Err("repo_url must not contain '..' path segments".into());
        }
        let allowed = self
            .prefixes
            .iter()
            .any(|prefix| match url.strip_prefix(prefix.as_str()) {
                None => false,
                Some(after) if prefix.ends_with(':') => port_then_path(after),
                Some(_) => true,
            });
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "repo_url {url:?} starts with none of the agent's git URL prefixes {:?} \
                 (--git-url-prefix)",
                self.prefixes
            ))
        }
    }
}

fn has_bad_chars(s: &str) -> bool {
    s.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// `8080/owner/repo.git`: a port number, then the path.
fn port_then_path(after: &str) -> bool {
    let digits = after.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && after.as_bytes().get(digits) == Some(&b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(prefixes: &[&str]) -> Policy {
        Policy::new(prefixes.iter().map(|s| s.to_string()).collect()).expect("valid prefixes")
    }

    #[test]
    fn default_is_github_only() {
        let p = policy(&[]);
        assert!(p.check("https://github.com/acme/app.git").is_ok());
        for url in [
            "https://github.com.evil.example/acme/app.git",
            "http://github.com/acme/app.git",
            "file:///etc/",
            "https://gitlab.com/acme/app.git",
            "ext::sh -c touch% /tmp/pwned",
            "https://github.com/acme/app .git",
        ] {
            assert!(p.check(url).is_err(), "{url}");
        }
    }

    #[test]
    fn file_urls_need_a_prefix_that_names_them() {
        let p = policy(&["file:///srv/mirrors/"]);
        assert!(p.check("file:///srv/mirrors/app.git").is_ok());
        assert!(p.check("file:///srv/other/app.git").is_err());
        assert!(p.check("file:///srv/mirrors/../other/app.git").is_err());
        assert!(p.check("file:///srv/mirrors/%2E%2e/other/app.git").is_err());
        assert!(p.check("file:///srv/mirrors/a..b/app.git").is_ok());
        assert!(p.check("https://github.com/acme/app.git").is_err());
    }

    #[test]
    fn a_port_prefix_admits_only_ports_of_that_host() {
        let p = policy(&["http://172.17.0.1:"]);
        assert!(p.check("http://172.17.0.1:8790/acme/app.git").is_ok());
        for url in [
            "http://172.17.0.1:80@evil.example/acme/app.git",
            "http://172.17.0.1:8790.evil.example/x",
            "http://172.17.0.1:/x",
            "http://172.17.0.10:8790/x",
        ] {
            assert!(p.check(url).is_err(), "{url}");
        }
    }

    #[test]
    fn prefixes_must_pin_a_host_and_scheme() {
        for bad in [
            "https://github.com",
            "ssh://github.com/",
            "git@github.com:",
            "https://user@github.com/",
            "https://",
            "http:// x/",
        ] {
            assert!(Policy::new(vec![bad.into()]).is_err(), "{bad}");
        }
    }
}
