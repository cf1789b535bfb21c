//! The page shell (head, navigation, the confirmation `<dialog>`, footer)
//! and the small pieces every page shows the same way: times, statuses,
//! entities, revisions, links to executions.

use crate::engine::Status;

use super::escape::{Html, Url};
use super::paths;
use super::time;

/// How often a live page re-fetches itself (`data-refresh-ms`, read by
/// `app.js`): an operator watching a deploy sees a step change within 5 s,
/// and each poll costs one page render (a few D1 reads).
pub const REFRESH_MS: i64 = 5_000;

/// Which navigation entry is the current page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Executions,
    Groups,
    Approvals,
    Previews,
    None,
}

/// The whole document around `main`. `refresh_ms` 0: the page is static
/// (a finished execution, a confirmation), `app.js` does not poll.
pub(crate) fn page(title: &str, nav: Nav, refresh_ms: i64, now_ms: i64, main: &Html) -> String {
    let mut h = Html::new();
    h.raw("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
        .raw("<meta name=\"referrer\" content=\"same-origin\"><title>")
        .text(title)
        .raw(" · Sluice</title><link rel=\"stylesheet\"")
        .href(&Url::path(paths::APP_CSS_PATH))
        .raw("><script defer")
        .attr("src", paths::APP_JS_PATH)
        .raw("></script></head><body")
        .attr("data-refresh-ms", &refresh_ms.max(0).to_string())
        .raw("><header><a class=\"brand\"")
        .href(&paths::executions())
        .raw(">Sluice</a><nav>");
    nav_link(
        &mut h,
        paths::executions(),
        "Executions",
        nav == Nav::Executions,
    );
    nav_link(&mut h, paths::groups(), "Groups", nav == Nav::Groups);
    nav_link(
        &mut h,
        paths::approvals(),
        "Approvals",
        nav == Nav::Approvals,
    );
    nav_link(&mut h, paths::previews(), "Previews", nav == Nav::Previews);
    h.raw("</nav><form method=\"post\" class=\"signout\"")
        .action(&Url::path(paths::LOGOUT_PATH))
        .raw("><button type=\"submit\">Sign out</button></form></header><main>")
        .append(main)
        .raw("</main>")
        .raw("<dialog id=\"confirm-dialog\"><form method=\"dialog\">")
        .raw("<p id=\"confirm-text\"></p><div class=\"buttons\">")
        .raw("<button value=\"cancel\">Cancel</button>")
        .raw("<button value=\"ok\" class=\"danger\">Confirm</button></div></form></dialog>")
        .raw("<footer>Rendered ");
    time_el(&mut h, now_ms, now_ms);
    h.raw(" <span id=\"live-status\" aria-live=\"polite\"></span></footer></body></html>\n");
    h.into_string()
}

fn nav_link(h: &mut Html, url: Url, label: &'static str, current: bool) {
    h.raw("<a").href(&url);
    if current {
        h.raw(" aria-current=\"page\"");
    }
    h.raw(">").raw(label).raw("</a>");
}

/// `<time>` with the relative text and the UTC ISO-8601 beside it.
pub(crate) fn time_el(h: &mut Html, ms: i64, now_ms: i64) {
    match time::iso8601(ms) {
        Some(iso) => {
            h.raw("<time")
                .attr("datetime", &iso)
                .attr("title", &iso)
                .raw("><span class=\"rel\">")
                .text(&time::relative(ms, now_ms))
                .raw("</span> <span class=\"abs\">")
                .text(&iso)
                .raw("</span></time>");
        }
        None => {
            h.raw("<span class=\"bad-time\">").num(ms).raw(" ms</span>");
        }
    }
}

/// A time or a dash.
pub(crate) fn opt_time(h: &mut Html, ms: Option<i64>, now_ms: i64) {
    match ms {
        Some(t) => time_el(h, t, now_ms),
        None => dash(h),
    }
}

pub(crate) fn dash(h: &mut Html) {
    h.raw("<span class=\"none\">—</span>");
}

pub(crate) fn opt_text(h: &mut Html, value: Option<&str>) {
    match value {
        Some(v) if !v.is_empty() => {
            h.text(v);
        }
        _ => dash(h),
    }
}

/// What a finished run came to, from the conclusion its check run was given
/// (`runs::report`: `{"conclusion": ..}` in the output), as a person reads it.
fn outcome_of(output_json: Option<&str>) -> Option<(&'static str, &'static str)> {
    let output: serde_json::Value = serde_json::from_str(output_json?).ok()?;
    Some(match output.get("conclusion")?.as_str()? {
        "success" => ("passed", "passed"),
        "failure" => ("failed", "failed"),
        "timed_out" => ("timed out", "failed"),
        "cancelled" => ("cancelled", "cancelled"),
        "neutral" | "skipped" => ("skipped", "skipped"),
        _ => return None,
    })
}

/// The outcome first: a run that completed shows what it came to (passed,
/// failed, timed out, cancelled, skipped), the engine's `complete` only in
/// its title; anything else shows its status (`status_badge`).
pub(crate) fn outcome_badge(h: &mut Html, status: &str, output_json: Option<&str>) {
    let outcome = (Status::parse(status) == Some(Status::Complete))
        .then(|| outcome_of(output_json))
        .flatten();
    match outcome {
        Some((label, class)) => {
            h.raw("<span class=\"st st-")
                .raw(class)
                .raw("\" title=\"")
                .text(status)
                .raw("\">")
                .text(label)
                .raw("</span>");
        }
        None => status_badge(h, status),
    }
}

/// A status badge; the class comes from the closed set of statuses, an
/// unknown status shows as text with a neutral class.
pub(crate) fn status_badge(h: &mut Html, status: &str) {
    match Status::parse(status) {
        Some(s) => h.raw("<span class=\"st st-").raw(s.as_str()).raw("\">"),
        None => h.raw("<span class=\"st\">"),
    };
    h.text(status).raw("</span>");
}

/// `pr:12` → "pull request #12", `branch:x` → "branch x", `tag:x` →
/// "tag x"; anything else as it is.
pub fn entity_label(entity: Option<&str>) -> String {
    let Some(e) = entity else {
        return "(no entity)".to_owned();
    };
    match e.split_once(':') {
        Some(("pr", n)) => format!("pull request #{n}"),
        Some(("branch", b)) => format!("branch {b}"),
        Some(("tag", t)) => format!("tag {t}"),
        _ => e.to_owned(),
    }
}

/// Characters of a sha shown inline: 12, as the instance names use.
const SHA_SHORT_CHARS: usize = 12;

/// A revision as `<code>` with its first 12 characters, the whole in
/// `title`.
pub(crate) fn revision(h: &mut Html, sha: Option<&str>) {
    let Some(sha) = sha.filter(|s| !s.is_empty()) else {
        return dash(h);
    };
    let short: String = sha.chars().take(SHA_SHORT_CHARS).collect();
    h.raw("<code class=\"sha\"")
        .attr("title", sha)
        .raw(">")
        .text(&short)
        .raw("</code>");
}

/// A link to an execution's page, showing its id.
pub(crate) fn exec_link(h: &mut Html, id: &str) {
    h.raw("<a class=\"exec\"")
        .href(&paths::execution(id))
        .raw("><code>")
        .text(id)
        .raw("</code></a>");
}

/// `<td data-label="…">…</td>`: on a phone each cell shows its column's
/// name beside its value.
pub(crate) fn cell(h: &mut Html, label: &'static str, content: impl FnOnce(&mut Html)) {
    h.raw("<td data-label=\"").raw(label).raw("\">");
    content(h);
    h.raw("</td>");
}

/// A page for a refused or failed dashboard request: what went wrong, in
/// words (never internals: a 5xx names only the request id).
pub fn render_error(status: u16, title: &str, message: &str, now_ms: i64) -> String {
    let mut h = Html::new();
    h.raw("<h1>")
        .text(title)
        .raw("</h1><p class=\"result failed\">")
        .text(message)
        .raw("</p><p class=\"note\">HTTP ")
        .num(i64::from(status))
        .raw("</p><p><a")
        .href(&paths::executions())
        .raw(">Executions</a></p>");
    page(title, Nav::None, 0, now_ms, &h)
}

/// The sign-in page: a form that posts the admin token to `/ui/login`,
/// which answers with a session cookie. `reason` says why the request was
/// refused (shown as text); `next` is where to go once signed in (a path
/// of the dashboard, checked by the caller). `app.js` fills the token from
/// the URL's fragment (`/ui/login#token=...`, which `npm start` prints),
/// so the token never reaches a server log.
pub fn render_login(reason: Option<&str>, next: &str, now_ms: i64) -> String {
    let mut h = Html::new();
    h.raw("<h1>Sign in</h1>");
    if let Some(r) = reason {
        h.raw("<p class=\"result failed\">").text(r).raw("</p>");
    }
    h.raw("<form method=\"post\" class=\"login\" id=\"login\"")
        .action(&Url::path(paths::LOGIN_PATH))
        .raw("><input type=\"hidden\" name=\"next\"")
        .attr("value", next)
        .raw("><label>Admin token <input type=\"password\" name=\"token\" required")
        .raw(" autocomplete=\"current-password\"></label>")
        .raw("<div class=\"buttons\"><button type=\"submit\">Sign in</button></div></form>")
        .raw("<p class=\"note\">Behind Cloudflare Access no sign-in is needed: Access signs ")
        .raw("you in. Locally, <code>npm start</code> prints a sign-in link.</p>");
    page("Sign in", Nav::None, 0, now_ms, &h)
}
