//! What the dashboard parses from a request, and the escaping that puts
//! values back into its pages: `sluice::http::pages::query`
//! (`form_pairs`, `ExecutionsQuery`, `ActionForm`, `same_origin_post`),
//! `pages::escape` (`escape`, `percent_encode`/`percent_decode`, `Url`)
//! and `pages::time::parse_utc`.
//!
//! Input: a query string or form body (UTF-8, decoded leniently as the
//! Worker reads text); its first two lines are also tried as the
//! `Sec-Fetch-Site` and `Origin` headers.
//!
//! Asserts, besides "no panic":
//! - `form_pairs` yields at most `FORM_PAIRS_MAX` pairs;
//! - `percent_decode(percent_encode(s))` is `s`, and the encoding is only
//!   unreserved characters and `%XX`;
//! - `escape` leaves no `<`, `>`, `"`, `'` and no `&` that does not start
//!   one of its entities, and unescapes back to its input;
//! - a parsed list query carries only trimmed, non-empty values of at most
//!   `FILTER_CHARS_MAX` bytes, and its own URL (the "next page" link)
//!   parses back to the same query, except times outside what ISO-8601
//!   prints (before 1970 or after 9999), which the link drops;
//! - `Url::checked` accepts only same-origin paths and http(s) URLs
//!   without whitespace, control characters or backslashes; a template
//!   filled with any value is a checked URL whose segment decodes back;
//! - `same_origin_post` is true only for `Sec-Fetch-Site: same-origin`, or
//!   without it for an `Origin` equal to the dashboard's own.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::http::pages::escape::{escape, percent_decode, percent_encode, Url};
use sluice::http::pages::query::{
    form_pairs, same_origin_post, ActionForm, ExecutionsQuery, FILTER_CHARS_MAX, FORM_PAIRS_MAX,
};
use sluice::http::pages::time::{iso8601, parse_utc};
use sluice_fuzz::line;

/// Longest URL `Url::checked` accepts (`pages::escape`).
const URL_CHARS_MAX: usize = 4096;
/// The dashboard's own origin in these checks.
const OWN_ORIGIN: &str = "https://sluice.example.com";

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

fn check_time_kept(parsed: Option<i64>, reparsed: Option<i64>, what: &str) {
    match parsed {
        Some(ms) if iso8601(ms).is_some() => assert_eq!(reparsed, Some(ms), "{what}"),
        _ => assert_eq!(reparsed, None, "{what}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();

    assert!(form_pairs(text).len() <= FORM_PAIRS_MAX);

    let encoded = percent_encode(text);
    assert!(encoded
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)));
    assert_eq!(percent_decode(&encoded, false), text);
    assert_eq!(percent_decode(&encoded, true), text);
    let _ = percent_decode(text, true);

    let escaped = escape(text);
    assert!(!escaped.contains(['<', '>', '"', '\'']), "{escaped}");
    for (i, _) in escaped.match_indices('&') {
        let rest = &escaped[i..];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                .iter()
                .any(|e| rest.starts_with(e)),
            "a bare & in {escaped}"
        );
    }
    assert_eq!(unescape(&escaped), text);

    // The list's filters, and the link to their next page.
    let q = ExecutionsQuery::parse(text);
    for v in [&q.repo, &q.run, &q.status, &q.entity, &q.cursor]
        .into_iter()
        .flatten()
    {
        assert!(
            !v.is_empty() && v.len() <= FILTER_CHARS_MAX && v.trim() == v,
            "{v:?}"
        );
    }
    let link = q.url(q.cursor.as_deref());
    let link_query = link.as_str().split_once('?').map_or("", |(_, q)| q);
    let back = ExecutionsQuery::parse(link_query);
    assert_eq!(
        (
            &back.repo,
            &back.run,
            &back.status,
            &back.entity,
            &back.cursor
        ),
        (&q.repo, &q.run, &q.status, &q.entity, &q.cursor),
        "the next page link changed the filters: {}",
        link.as_str()
    );
    check_time_kept(q.since_ms, back.since_ms, "since");
    check_time_kept(q.until_ms, back.until_ms, "until");
    let _ = q.list_filter();
    let _ = q.is_filtered();

    let form = ActionForm::parse(text);
    if let Some(t) = &form.event_type {
        assert!(!t.is_empty() && t.trim() == t);
    }
    let _ = parse_utc(text);

    if let Some(url) = Url::checked(text) {
        assert_eq!(url.as_str(), text);
        assert!(text.len() <= URL_CHARS_MAX);
        assert!(!text
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || c == '\\'));
        let lower = text.to_ascii_lowercase();
        let path = text.starts_with('/') && !text.starts_with("//");
        assert!(
            path || lower.starts_with("https://") || lower.starts_with("http://"),
            "{text:?}"
        );
    }
    let filled = Url::from_template("/ui/executions/{id}", "{id}", text);
    let prefix = "/ui/executions/";
    let expected_len = prefix.len() + encoded.len();
    assert_eq!(filled.is_some(), expected_len <= URL_CHARS_MAX);
    if let Some(url) = filled {
        let seg = url
            .as_str()
            .strip_prefix(prefix)
            .expect("the template's prefix");
        assert_eq!(percent_decode(seg, false), text);
    }
    let built = Url::path("/ui/groups").seg(text).query("repo", text);
    let (path, query) = built.as_str().split_once('?').expect("a query was added");
    assert_eq!(
        percent_decode(path.trim_start_matches("/ui/groups/"), false),
        text
    );
    assert_eq!(
        form_pairs(query).first().map(|(_, v)| v.as_str()),
        Some(text)
    );

    let (site, rest) = line(data);
    let (origin, _) = line(rest);
    let site = String::from_utf8_lossy(site);
    let origin = String::from_utf8_lossy(origin);
    for (s, o) in [
        (Some(site.as_ref()), Some(origin.as_ref())),
        (None, Some(origin.as_ref())),
        (None, None),
    ] {
        if same_origin_post(s, o, OWN_ORIGIN) {
            match s {
                Some(s) => assert!(s.eq_ignore_ascii_case("same-origin")),
                None => assert_eq!(o, Some(OWN_ORIGIN)),
            }
        }
    }
});
