//! What the dashboard's GET forms and POST forms send, parsed: the field
//! names are the pages' own, so their parsers live beside them. Total
//! functions: any input gives a value, never an error or a panic.

use crate::store::executions::{Cursor, ListFilter};

use super::escape::{percent_decode, Url};
use super::paths;
use super::time::parse_utc;

/// Pairs read from one query string or form body: a dashboard form sends
/// about ten, so more is not from a page and the rest is ignored.
pub const FORM_PAIRS_MAX: usize = 32;
/// A filter value longer than this is not a repository, run, status or
/// entity (GitHub caps names far below it), so it is ignored.
pub const FILTER_CHARS_MAX: usize = 512;

/// Decodes `a=1&b=x+y` (a URL's query without `?`, or an
/// `application/x-www-form-urlencoded` body), at most `FORM_PAIRS_MAX`.
pub fn form_pairs(encoded: &str) -> Vec<(String, String)> {
    encoded
        .split('&')
        .filter(|p| !p.is_empty())
        .take(FORM_PAIRS_MAX)
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

/// The filters and page of the executions list, as the filter form and the
/// "next page" link send them: `repo`, `run`, `status`, `entity`, `since`
/// and `until` (UTC, `YYYY-MM-DDTHH:MM` as `datetime-local` sends it, or
/// with seconds and `Z`), `cursor`, and `bookkeeping=1` (Sluice's own
/// bookkeeping instances, which the list shows apart).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutionsQuery {
    pub repo: Option<String>,
    pub run: Option<String>,
    pub status: Option<String>,
    /// `pr:12`, `branch:main`, `tag:v1`.
    pub entity: Option<String>,
    /// Created at or after (ms since epoch).
    pub since_ms: Option<i64>,
    /// Created before (ms since epoch).
    pub until_ms: Option<i64>,
    /// The opaque cursor of the page to show; None: the first page.
    pub cursor: Option<String>,
    /// `bookkeeping=1`: list Sluice's own bookkeeping instances (the
    /// `schedules` run), which the default list leaves out.
    pub bookkeeping: bool,
}

impl ExecutionsQuery {
    /// From a URL's query string (without `?`). Unknown keys, empty values,
    /// over-long values and unparsable times are ignored.
    pub fn parse(query: &str) -> ExecutionsQuery {
        let mut q = ExecutionsQuery::default();
        for (k, v) in form_pairs(query) {
            let v = v.trim();
            if v.is_empty() || v.len() > FILTER_CHARS_MAX {
                continue;
            }
            match k.as_str() {
                "repo" => q.repo = Some(v.to_owned()),
                "run" => q.run = Some(v.to_owned()),
                "status" => q.status = Some(v.to_owned()),
                "entity" => q.entity = Some(v.to_owned()),
                "since" => q.since_ms = parse_utc(v),
                "until" => q.until_ms = parse_utc(v),
                "cursor" => q.cursor = Some(v.to_owned()),
                "bookkeeping" => q.bookkeeping = v == "1",
                _ => {}
            }
        }
        q
    }

    /// The store's filter, time range included (the cursor goes to
    /// `store::executions::list_page` beside it: [`Self::after`]).
    pub fn list_filter(&self) -> ListFilter {
        ListFilter {
            run: self.run.clone(),
            repo: self.repo.clone(),
            status: self.status.clone(),
            entity: self.entity.clone(),
            since_ms: self.since_ms,
            until_ms: self.until_ms,
            ..ListFilter::default()
        }
    }

    /// [`Self::list_filter`] with the bookkeeping runs
    /// (`runs::registry::bookkeeping`) apart: left out by default, alone
    /// with `bookkeeping=1`. A `run` filter names its run, so it holds as
    /// it is.
    pub fn list_filter_apart(&self, bookkeeping_runs: &[&str]) -> ListFilter {
        let mut f = self.list_filter();
        if f.run.is_none() {
            let runs: Vec<String> = bookkeeping_runs.iter().map(|r| (*r).to_owned()).collect();
            if self.bookkeeping {
                f.runs_only = Some(runs);
            } else {
                f.runs_excluded = runs;
            }
        }
        f
    }

    /// The page start the cursor names; None for the first page and for a
    /// cursor the store did not make (the first page is shown instead).
    pub fn after(&self) -> Option<Cursor> {
        self.cursor.as_deref().and_then(Cursor::decode)
    }

    /// Whether any filter (not the cursor) is set.
    pub fn is_filtered(&self) -> bool {
        self.repo.is_some()
            || self.run.is_some()
            || self.status.is_some()
            || self.entity.is_some()
            || self.since_ms.is_some()
            || self.until_ms.is_some()
    }

    /// The list URL with these filters and the given cursor.
    pub fn url(&self, cursor: Option<&str>) -> Url {
        let mut url = paths::executions();
        let text = [
            ("repo", &self.repo),
            ("run", &self.run),
            ("status", &self.status),
            ("entity", &self.entity),
        ];
        for (key, value) in text {
            if let Some(v) = value {
                url = url.query(key, v);
            }
        }
        let times = [("since", self.since_ms), ("until", self.until_ms)];
        for (key, ms) in times {
            if let Some(t) = ms.and_then(super::time::iso8601) {
                url = url.query(key, &t);
            }
        }
        if self.bookkeeping {
            url = url.query("bookkeeping", "1");
        }
        if let Some(c) = cursor {
            url = url.query("cursor", c);
        }
        url
    }

    /// The first page of the same filters with bookkeeping shown or not.
    pub fn with_bookkeeping(&self, bookkeeping: bool) -> ExecutionsQuery {
        ExecutionsQuery {
            bookkeeping,
            cursor: None,
            ..self.clone()
        }
    }
}

/// An action form as posted (`application/x-www-form-urlencoded`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionForm {
    /// `confirmed=1`: the operator confirmed (in the `<dialog>` or on the
    /// confirmation page). Without it, answer with
    /// [`super::render_confirm`] and do nothing.
    pub confirmed: bool,
    /// The hidden `csrf` field, when the page was given one.
    pub csrf: Option<String>,
    /// Restart: the step to restart from; None: from the start.
    pub from_step: Option<String>,
    /// Send event: the event type, not yet validated (check it with the
    /// router's rule, `[A-Za-z0-9_.-]{1,100}`).
    pub event_type: Option<String>,
    /// Send event: the payload text (JSON), not yet parsed.
    pub payload: Option<String>,
}

impl ActionForm {
    pub fn parse(body: &str) -> ActionForm {
        let mut f = ActionForm::default();
        let some = |v: String| (!v.is_empty()).then_some(v);
        for (k, v) in form_pairs(body) {
            match k.as_str() {
                "confirmed" => f.confirmed = v == "1",
                "csrf" => f.csrf = some(v),
                "from_step" => f.from_step = some(v),
                "type" => f.event_type = some(v.trim().to_owned()),
                "payload" => f.payload = some(v),
                _ => {}
            }
        }
        f
    }
}

/// Whether a form POST comes from the dashboard itself (a CSRF guard for
/// cookie-authenticated requests such as Cloudflare Access): the browser's
/// `Sec-Fetch-Site` must be `same-origin`, or, where a browser sends none,
/// `Origin` must equal `own_origin` (`https://sluice.example.com`, no
/// trailing slash). A request with neither header is refused.
pub fn same_origin_post(
    sec_fetch_site: Option<&str>,
    origin: Option<&str>,
    own_origin: &str,
) -> bool {
    match (sec_fetch_site, origin) {
        (Some(site), _) => site.eq_ignore_ascii_case("same-origin"),
        (None, Some(o)) => !own_origin.is_empty() && o == own_origin.trim_end_matches('/'),
        (None, None) => false,
    }
}
