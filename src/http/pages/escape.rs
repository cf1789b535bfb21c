//! The one escaping module of the dashboard. Every page is built with
//! [`Html`], which lets a dynamic value in only escaped ([`Html::text`],
//! [`Html::attr`]) or as a checked [`Url`] ([`Html::href`]); literal markup
//! goes in through [`Html::raw`], which takes `&'static str` only. A branch
//! name, a commit message or an error message therefore cannot reach the
//! output as markup without a type error.

use std::fmt::Write as _;

/// Markup under construction (see the module comment).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Html(String);

impl Html {
    pub fn new() -> Html {
        Html(String::with_capacity(PAGE_BYTES_INITIAL))
    }

    /// Literal markup written in this crate's source: never a value.
    pub fn raw(&mut self, markup: &'static str) -> &mut Html {
        self.0.push_str(markup);
        self
    }

    /// A value as text: `&`, `<`, `>`, `"` and `'` become entities.
    pub fn text(&mut self, value: &str) -> &mut Html {
        push_escaped(&mut self.0, value);
        self
    }

    /// A number as text.
    pub fn num(&mut self, n: i64) -> &mut Html {
        let _ = write!(self.0, "{n}");
        self
    }

    /// ` name="value"`, the value escaped (attributes are always quoted).
    pub fn attr(&mut self, name: &'static str, value: &str) -> &mut Html {
        self.0.push(' ');
        self.0.push_str(name);
        self.0.push_str("=\"");
        push_escaped(&mut self.0, value);
        self.0.push('"');
        self
    }

    /// ` href="url"`: only a [`Url`], which is relative or http(s).
    pub fn href(&mut self, url: &Url) -> &mut Html {
        self.attr("href", url.as_str())
    }

    /// ` action="url"` of a form: only a [`Url`].
    pub fn action(&mut self, url: &Url) -> &mut Html {
        self.attr("action", url.as_str())
    }

    /// Markup built by another `Html`.
    pub fn append(&mut self, other: &Html) -> &mut Html {
        self.0.push_str(&other.0);
        self
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// A page is a few tens of KiB: start there to avoid regrowing the buffer.
const PAGE_BYTES_INITIAL: usize = 16 * 1024;

/// Escapes a value for HTML text and for a quoted attribute alike.
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    push_escaped(&mut out, value);
    out
}

fn push_escaped(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
}

/// Percent-encodes one path segment or query value: every byte but the
/// unreserved `A-Z a-z 0-9 - . _ ~` becomes `%XX`, so `/`, `?`, `#`, `&`
/// and quotes inside a value never end the segment.
pub fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Decodes `%XX` escapes and, in form encoding, `+` as a space. Bad escapes
/// stay as they are; invalid UTF-8 becomes U+FFFD. Never fails.
pub fn percent_decode(value: &str, plus_is_space: bool) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut rest = value.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        let escaped = match tail {
            [h, l, ..] if b == b'%' => hex_digit(*h).zip(hex_digit(*l)),
            _ => None,
        };
        match escaped {
            Some((h, l)) => {
                out.push(h << 4 | l);
                rest = tail.get(2..).unwrap_or_default();
            }
            None => {
                out.push(if plus_is_space && b == b'+' { b' ' } else { b });
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// A URL that is safe in `href` and `action`: a path on this origin built
/// from a literal prefix and percent-encoded segments, or a caller's URL
/// that [`Url::checked`] found to be a same-origin path or http(s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url(String);

impl Url {
    /// A literal route such as `/ui/executions`.
    pub fn path(route: &'static str) -> Url {
        Url(route.to_owned())
    }

    /// Appends `/` and the percent-encoded segment.
    pub fn seg(mut self, segment: &str) -> Url {
        self.0.push('/');
        self.0.push_str(&percent_encode(segment));
        self
    }

    /// Appends `?key=value` or `&key=value`, the value percent-encoded.
    pub fn query(mut self, key: &'static str, value: &str) -> Url {
        self.0.push(if self.0.contains('?') { '&' } else { '?' });
        self.0.push_str(key);
        self.0.push('=');
        self.0.push_str(&percent_encode(value));
        self
    }

    /// A URL the caller supplies (a log link, an action route): accepted
    /// when it is a path on this origin (`/x`, not `//host` nor `/\host`)
    /// or an `http://`/`https://` URL, with no whitespace, control
    /// characters or backslashes. Anything else (`javascript:`, `data:`,
    /// relative paths) is refused, and the page shows no link.
    pub fn checked(raw: &str) -> Option<Url> {
        let clean = !raw.is_empty()
            && raw.len() <= URL_CHARS_MAX
            && !raw
                .chars()
                .any(|c| c.is_control() || c.is_whitespace() || c == '\\');
        if !clean {
            return None;
        }
        let lower = raw.get(..8).unwrap_or(raw).to_ascii_lowercase();
        let same_origin_path = raw.starts_with('/') && !raw.starts_with("//");
        let web = lower.starts_with("https://") || lower.starts_with("http://");
        (same_origin_path || web).then(|| Url(raw.to_owned()))
    }

    /// A route template with `{id}` or `{group}` replaced by the
    /// percent-encoded value, then [`Url::checked`].
    pub fn from_template(template: &str, placeholder: &str, value: &str) -> Option<Url> {
        Url::checked(&template.replace(placeholder, &percent_encode(value)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Longer URLs are not links Sluice makes (a signed R2 link is ~500
/// characters); refusing them keeps a hostile value from bloating a page.
const URL_CHARS_MAX: usize = 4096;
