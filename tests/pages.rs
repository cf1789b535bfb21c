//! The dashboard pages as pure functions: structure (rows, grouping, links,
//! the next-page link only with a cursor, actions by status), escaping of
//! hostile values from GitHub and users in text, attributes and URLs, times,
//! and the static assets and their Content-Security-Policy.
//!
//! Every rendered page goes through `parse`, a small strict tokenizer that
//! fails on a raw `<` in text, on `<`/`>` inside an attribute value, on
//! unbalanced tags, on inline event handlers and style attributes, on inline
//! script, and on any URL attribute that is not a same-origin path or
//! http(s). So a value that escaped its context would fail every test.

use sluice::gates::serial::{
    ExplainedEnd, ExplainedHolder, ExplainedWaiter, GroupSummary, GroupView, RowState, WaitReason,
};
use sluice::gates::SkipReason;
use sluice::http::pages::escape::{escape, percent_decode, percent_encode, Html, Url};
use sluice::http::pages::phases::{percent, Bar, Phase};
use sluice::http::pages::query::form_pairs;
use sluice::http::pages::time::{datetime_local, duration, iso8601, parse_utc, relative};
use sluice::http::pages::{
    self, entity_label, render_confirm, render_execution, render_executions, render_group,
    render_groups, render_result, same_origin_post, Action, ActionForm, ActionResult, Actions,
    ApprovalView, ExecutionPage, ExecutionView, ExecutionsPage, ExecutionsQuery, GroupPage,
    GroupsPage, StepView, APP_CSS, APP_JS, CONTENT_SECURITY_POLICY, REFRESH_MS, SECURITY_HEADERS,
};
use sluice::runs::command::{summary_parts, verdict_of, CommandResult};
use sluice::runs::registry;
use sluice::runs::report::Verdict;
use sluice::store::executions::{ExecutionRow, StepRow};

const NOW: i64 = 1_760_000_000_000; // 2025-10-09T08:53:20Z
const MIN: i64 = 60_000;
const XSS: &str = "<script>alert(1)</script>";
const QUOTES: &str = "a\"b'c&d<e>f";
const BREAKOUT: &str = "x\" onmouseover=\"alert(1)";

// --- a strict little HTML tokenizer for the assertions ---

#[derive(Debug, Clone)]
struct Tag {
    name: String,
    closing: bool,
    attrs: Vec<(String, String)>,
}

impl Tag {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

const VOID: [&str; 6] = ["meta", "link", "input", "br", "hr", "img"];

/// Tokenizes and checks a page; returns its tags (text is dropped).
fn parse(html: &str) -> Vec<Tag> {
    let mut tags = Vec::new();
    let mut stack: Vec<String> = Vec::new();
    let b = html.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'<' {
            assert!(b[i] != b'>', "raw > in text at {i}: {}", around(html, i));
            i += 1;
            continue;
        }
        if html[i..].starts_with("<!doctype html>") {
            i += "<!doctype html>".len();
            continue;
        }
        let (tag, end) = tag_at(html, i);
        check_tag(&tag, html, i);
        if tag.closing {
            let open = stack.pop();
            assert_eq!(
                open.as_deref(),
                Some(tag.name.as_str()),
                "at {}",
                around(html, i)
            );
        } else if !VOID.contains(&tag.name.as_str()) {
            stack.push(tag.name.clone());
        }
        if tag.name == "script" && !tag.closing {
            assert!(html[end..].starts_with("</script>"), "inline script");
        }
        tags.push(tag);
        i = end;
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    tags
}

fn around(html: &str, i: usize) -> String {
    let start = html[..i].char_indices().rev().nth(60).map_or(0, |(p, _)| p);
    html[start..].chars().take(140).collect()
}

/// One tag starting at `<`: its name, attributes (values unescaped
/// minimally) and where it ends.
fn tag_at(html: &str, start: usize) -> (Tag, usize) {
    let b = html.as_bytes();
    let mut i = start + 1;
    let closing = b.get(i) == Some(&b'/');
    if closing {
        i += 1;
    }
    let name_start = i;
    while i < b.len() && b[i].is_ascii_alphanumeric() {
        i += 1;
    }
    let name = html[name_start..i].to_owned();
    assert!(!name.is_empty(), "raw < in text: {}", around(html, start));
    let mut attrs = Vec::new();
    loop {
        while b[i] == b' ' {
            i += 1;
        }
        if b[i] == b'>' {
            return (
                Tag {
                    name,
                    closing,
                    attrs,
                },
                i + 1,
            );
        }
        let k0 = i;
        while b[i] != b'=' && b[i] != b' ' && b[i] != b'>' {
            i += 1;
        }
        let key = html[k0..i].to_owned();
        let mut value = String::new();
        if b[i] == b'=' {
            assert_eq!(b[i + 1], b'"', "unquoted attribute {key}");
            let v0 = i + 2;
            let v1 = v0 + html[v0..].find('"').expect("closing quote");
            value = html[v0..v1].to_owned();
            assert!(
                !value.contains('<') && !value.contains('>'),
                "< or > in attribute {key}: {value}"
            );
            i = v1 + 1;
        }
        attrs.push((key, value));
    }
}

fn check_tag(tag: &Tag, html: &str, at: usize) {
    for (k, v) in &tag.attrs {
        assert!(
            !k.starts_with("on"),
            "inline handler {k} at {}",
            around(html, at)
        );
        assert_ne!(k, "style", "inline style at {}", around(html, at));
        if ["href", "action", "src"].contains(&k.as_str()) {
            let url = v.replace("&amp;", "&");
            let safe = (url.starts_with('/') && !url.starts_with("//"))
                || url.starts_with("https://")
                || url.starts_with("http://");
            assert!(safe, "unsafe {k}={v}");
        }
    }
}

fn count(html: &str, needle: &str) -> usize {
    html.matches(needle).count()
}

fn hrefs(tags: &[Tag]) -> Vec<String> {
    tags.iter()
        .filter_map(|t| t.attr("href"))
        .map(|h| h.replace("&amp;", "&"))
        .collect()
}

/// The action forms of a page (not the header's sign-out form).
fn forms(tags: &[Tag]) -> Vec<Tag> {
    tags.iter()
        .filter(|t| t.name == "form" && !t.closing && t.attr("method") == Some("post"))
        .filter(|t| t.attr("action") != Some("/ui/logout"))
        .cloned()
        .collect()
}

// --- fixtures ---

fn exec(id: &str, repo: Option<&str>, entity: Option<&str>, status: &str) -> ExecutionRow {
    ExecutionRow {
        id: id.to_owned(),
        key: format!("key:{id}"),
        run: "deploy".to_owned(),
        repo: repo.map(str::to_owned),
        entity: entity.map(str::to_owned),
        sha: Some("0123456789abcdef0123456789abcdef01234567".to_owned()),
        status: status.to_owned(),
        reason: None,
        error_tag: None,
        error_message: None,
        wake_at_ms: None,
        input_json: "{}".to_owned(),
        output_json: None,
        step_count: 3,
        journal_writes: 3,
        index_round_trips: 2,
        passes: 1,
        created_ms: NOW - 10 * MIN,
        updated_ms: NOW - MIN,
        finished_ms: Some(NOW - 7 * MIN),
        waiting_for: None,
    }
}

fn step(seq: i64, name: &str, kind: &str, state: &str) -> StepRow {
    StepRow {
        seq,
        name: name.to_owned(),
        kind: kind.to_owned(),
        state: state.to_owned(),
        attempts: 1,
        started_ms: NOW - 9 * MIN,
        finished_ms: Some(NOW - 8 * MIN),
        wake_at_ms: None,
        error_tag: None,
        error_message: None,
        result_bytes: Some(10),
    }
}

fn list_page(items: Vec<ExecutionView>, cursor: Option<&str>) -> ExecutionsPage {
    ExecutionsPage {
        items,
        query: ExecutionsQuery::default(),
        next_cursor: cursor.map(str::to_owned),
        approvals: Vec::new(),
        actions: Actions::v1(Some("tok".into())),
    }
}

fn approval(id: &str) -> ApprovalView {
    ApprovalView {
        execution_id: id.to_owned(),
        repo: Some("octo/hello".into()),
        entity: Some("branch:main".into()),
        revision: Some("abc".repeat(10)),
        event_type: "deploy-confirm".into(),
        decider: Some("@octo/release-managers".into()),
        waiting_since_ms: NOW - 5 * MIN,
        deadline_ms: Some(NOW + 72 * 60 * MIN),
        approve_here: true,
    }
}

// --- the executions list ---

#[test]
fn executions_are_grouped_by_repository_then_entity() {
    let rows = vec![
        exec("e1", Some("octo/hello"), Some("pr:12"), "running"),
        exec("e2", Some("octo/world"), Some("branch:main"), "complete"),
        exec("e3", Some("octo/hello"), Some("branch:main"), "skipped"),
        exec("e4", Some("octo/hello"), Some("pr:12"), "errored"),
        exec("e5", None, None, "queued"),
        exec("e6", Some("octo/hello"), Some("tag:v1.0"), "complete"),
    ];
    let html = render_executions(
        &list_page(rows.into_iter().map(ExecutionView::new).collect(), None),
        NOW,
    );
    parse(&html);
    // Repositories in first-appearance order, each once.
    let repos: Vec<&str> = html
        .split("<section class=\"repo\"><h2>")
        .skip(1)
        .map(|s| s.split("</h2>").next().unwrap_or(""))
        .collect();
    assert_eq!(
        repos,
        ["octo/hello", "octo/world", "<span class=\"none\">—</span>"]
    );
    // Within octo/hello: pr:12 (e1, e4), branch:main (e3), tag (e6).
    let hello = html
        .split("<section class=\"repo\">")
        .nth(1)
        .expect("hello section");
    let entities: Vec<&str> = hello.split("<section class=\"entity\">").skip(1).collect();
    assert_eq!(entities.len(), 3);
    assert!(entities[0].contains(">pull request #12</a></h3>"));
    assert!(entities[0].contains("e1") && entities[0].contains("e4"));
    assert!(!entities[0].contains("e3"));
    assert!(entities[1].contains(">branch main</a>") && entities[1].contains("e3"));
    assert!(entities[2].contains(">tag v1.0</a>") && entities[2].contains("e6"));
    assert!(html.contains("(no entity)"));
    // Each row links to its execution; each entity heading to its filter.
    let tags = parse(&html);
    let links = hrefs(&tags);
    for id in ["e1", "e2", "e3", "e4", "e5", "e6"] {
        assert!(links.contains(&format!("/ui/executions/{id}")), "{id}");
    }
    assert!(links.contains(&"/ui/executions?repo=octo%2Fhello&entity=pr%3A12".to_owned()));
    assert_eq!(count(&html, "<tr><td data-label=\"Execution\">"), 6);
}

/// What a person reads first is what a run came to: a check whose command
/// failed is "failed", not the engine's green "complete"; a run that reports
/// no conclusion (a probe) keeps "complete"; a live one shows its status.
#[test]
fn a_completed_run_leads_with_its_outcome() {
    let ended = |id: &str, conclusion: Option<&str>| {
        let mut row = exec(id, Some("octo/hello"), Some("pr:12"), "complete");
        row.output_json =
            conclusion.map(|c| format!("{{\"check_run_id\":1,\"conclusion\":\"{c}\"}}"));
        ExecutionView::new(row)
    };
    let items = vec![
        ended("pass-1", Some("success")),
        ended("fail-1", Some("failure")),
        ended("slow-1", Some("timed_out")),
        ended("gone-1", Some("cancelled")),
        ended("skip-1", Some("neutral")),
        ended("probe-1", None),
    ];
    let html = render_executions(&list_page(items, None), NOW);
    parse(&html);
    let badge = |id: &str| {
        let row = html
            .split(&format!("/ui/executions/{id}\""))
            .nth(1)
            .expect(id);
        let badge = row.split("<td data-label=\"Outcome\">").nth(1).expect(id);
        badge.split("</td>").next().unwrap().to_owned()
    };
    let shown = |class: &str, label: &str| {
        format!("<span class=\"st st-{class}\" title=\"complete\">{label}</span>")
    };
    assert_eq!(badge("pass-1"), shown("passed", "passed"));
    assert_eq!(badge("fail-1"), shown("failed", "failed"));
    assert_eq!(badge("slow-1"), shown("failed", "timed out"));
    assert_eq!(badge("gone-1"), shown("cancelled", "cancelled"));
    assert_eq!(badge("skip-1"), shown("skipped", "skipped"));
    assert_eq!(
        badge("probe-1"),
        "<span class=\"st st-complete\">complete</span>"
    );
    let mut page = exec_page("complete");
    page.execution.row.output_json = Some("{\"conclusion\":\"failure\"}".into());
    let one = render_execution(&page, NOW);
    assert!(one.contains(&shown("failed", "failed")), "{one}");
}

#[test]
fn rows_show_status_duration_reason_and_the_newer_revision() {
    let mut skipped = exec("dep-1", Some("octo/hello"), Some("branch:main"), "skipped");
    skipped.reason = Some("superseded".into());
    skipped.error_tag = Some("RunSkipped".into());
    skipped.error_message = Some("Not run: superseded by a newer revision.".into());
    let mut waiting = exec("dep-2", Some("octo/hello"), Some("branch:main"), "waiting");
    waiting.finished_ms = None;
    waiting.wake_at_ms = Some(NOW + 3 * MIN);
    let items = vec![
        ExecutionView {
            row: skipped,
            newer_revision: Some("fedcba9876543210fedcba9876543210fedcba98".into()),
        },
        ExecutionView::new(waiting),
    ];
    let html = render_executions(&list_page(items, None), NOW);
    parse(&html);
    assert!(html.contains("<span class=\"st st-skipped\">skipped</span>"));
    assert!(html.contains("<span class=\"st st-waiting\">waiting</span>"));
    assert!(html.contains("<span class=\"reason\">superseded</span>"));
    assert!(html.contains("newer: <code class=\"sha\" title=\"fedcba9876543210fedcba9876543210fedcba98\">fedcba987654</code>"));
    assert!(html.contains("<code class=\"tag\">RunSkipped</code>"));
    assert!(html.contains("3 min")); // the finished one ran 3 minutes
    assert!(html.contains("10 min so far")); // the waiting one, created 10 min ago
    assert!(html.contains("wakes <time datetime=\"2025-10-09T08:56:20Z\""));
    assert!(html.contains("in 3 min"));
    assert!(html.contains("10 min ago"));
}

#[test]
fn the_next_page_link_is_present_only_with_a_cursor_and_keeps_the_filters() {
    let items = vec![ExecutionView::new(exec(
        "e1",
        Some("o/r"),
        None,
        "complete",
    ))];
    let without = render_executions(&list_page(items.clone(), None), NOW);
    assert!(!without.contains("rel=\"next\""));

    let mut page = list_page(items, Some("c/1+2=&x"));
    page.query =
        ExecutionsQuery::parse("repo=octo%2Fhello&status=errored&since=2025-10-01T00%3A00");
    let html = render_executions(&page, NOW);
    let tags = parse(&html);
    let next: Vec<&Tag> = tags
        .iter()
        .filter(|t| t.attr("rel") == Some("next"))
        .collect();
    assert_eq!(next.len(), 1);
    let href = next[0].attr("href").expect("href").replace("&amp;", "&");
    assert_eq!(
        href,
        "/ui/executions?repo=octo%2Fhello&status=errored&since=2025-10-01T00%3A00%3A00Z&cursor=c%2F1%2B2%3D%26x"
    );
    // The link's query parses back to the same filters and cursor.
    let back = ExecutionsQuery::parse(href.split_once('?').map_or("", |(_, q)| q));
    assert_eq!(back.repo.as_deref(), Some("octo/hello"));
    assert_eq!(back.status.as_deref(), Some("errored"));
    assert_eq!(back.since_ms, page.query.since_ms);
    assert_eq!(back.cursor.as_deref(), Some("c/1+2=&x"));
}

#[test]
fn the_filter_form_is_a_get_form_prefilled_with_the_query() {
    let mut page = list_page(Vec::new(), None);
    page.query = ExecutionsQuery::parse(
        "repo=octo/hello&run=deploy&status=waiting&entity=pr%3A3&since=2025-10-01T10:30&until=2025-10-02",
    );
    let html = render_executions(&page, NOW);
    let tags = parse(&html);
    let form = tags
        .iter()
        .find(|t| t.name == "form" && t.attr("class") == Some("filters"))
        .expect("filter form");
    assert_eq!(form.attr("method"), Some("get"));
    assert_eq!(form.attr("action"), Some("/ui/executions"));
    let value = |name: &str| {
        tags.iter()
            .find(|t| t.name == "input" && t.attr("name") == Some(name))
            .and_then(|t| t.attr("value"))
            .map(str::to_owned)
    };
    assert_eq!(value("repo").as_deref(), Some("octo/hello"));
    assert_eq!(value("run").as_deref(), Some("deploy"));
    assert_eq!(value("entity").as_deref(), Some("pr:3"));
    assert_eq!(value("since").as_deref(), Some("2025-10-01T10:30"));
    assert_eq!(value("until").as_deref(), Some("2025-10-02T00:00"));
    assert!(html.contains("<option value=\"waiting\" selected>waiting</option>"));
    assert_eq!(count(&html, " selected"), 1);
    assert!(html.contains("No executions match."));
    assert!(html.contains(">Clear</a>"));
    let f = page.query.list_filter();
    assert_eq!(
        (
            f.repo.as_deref(),
            f.run.as_deref(),
            f.status.as_deref(),
            f.entity.as_deref()
        ),
        (
            Some("octo/hello"),
            Some("deploy"),
            Some("waiting"),
            Some("pr:3")
        )
    );
    assert_eq!(page.query.since_ms, parse_utc("2025-10-01T10:30:00Z"));
}

#[test]
fn waiting_approvals_show_decider_deadline_and_an_approve_form() {
    let mut page = list_page(Vec::new(), None);
    page.approvals = vec![approval("deploy-octo-hello-main-1")];
    let html = render_executions(&page, NOW);
    let tags = parse(&html);
    assert!(html.contains("@octo/release-managers"));
    assert!(html.contains("in 3 d")); // the 72 h deadline
    assert!(html.contains("5 min ago"));
    let f = forms(&tags);
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].attr("action"),
        Some("/v1/executions/deploy-octo-hello-main-1/events")
    );
    assert!(html.contains("<input type=\"hidden\" name=\"type\" value=\"deploy-confirm\">"));
    assert!(html.contains(">Approve</button>"));
    assert_eq!(
        f[0].attr("data-confirm"),
        Some("Approve deploy-octo-hello-main-1: send it deploy-confirm? The event is delivered to the execution.")
    );

    let empty = render_executions(&list_page(Vec::new(), None), NOW);
    assert!(empty.contains("No execution waits for an approval."));
}

// --- one execution ---

fn timeline() -> Vec<StepView> {
    let mut failed = step(1, "checkout", "step", "done");
    failed.attempts = 3;
    failed.error_tag = Some("CheckoutFailed".into());
    failed.error_message = Some("git fetch: connection reset".into());
    let mut wait = step(2, "confirmation", "wait", "waiting");
    wait.finished_ms = None;
    wait.wake_at_ms = Some(NOW + 60 * MIN);
    let mut retry = step(3, "run deploy command", "step", "retrying");
    retry.finished_ms = None;
    retry.wake_at_ms = Some(NOW + MIN / 2);
    vec![
        StepView {
            row: failed,
            log_url: Some("/logs/exec-1/1?sig=a&b=c".into()),
        },
        StepView::new(wait),
        StepView {
            row: retry,
            log_url: Some("https://logs.example.com/x".into()),
        },
    ]
}

fn exec_page(status: &str) -> ExecutionPage {
    let mut row = exec("exec-1", Some("octo/hello"), Some("branch:main"), status);
    row.finished_ms = None;
    ExecutionPage {
        execution: ExecutionView::new(row),
        steps: timeline(),
        steps_truncated: false,
        approvals: Vec::new(),
        group: Some("deploy:octo/hello:main".into()),
        pipeline: None,
        artifacts: Vec::new(),
        actions: Actions::v1(Some("csrf-123".into())),
    }
}

/// A job's caches are listed as its summary says them: hit or miss, sizes
/// and times; an execution without caches has no such section.
#[test]
fn the_execution_page_lists_what_each_cache_did() {
    let mut page = exec_page("complete");
    let summary = "`npm ci` exited with code 0 after 3.0 s.\n\n**Caches**\n\
        - cache `node_modules`: hit `branch:main` (12000 bytes, restored in 0.4 s)\n\
        - cache `~/.cargo`: miss; saved 5 bytes in 0.1 s\n\n**Artifacts**: 1 file";
    page.execution.row.output_json = Some(
        serde_json::json!({"conclusion": "success", "verdict": {"summary": summary}}).to_string(),
    );
    let html = render_execution(&page, NOW);
    assert!(html.contains("<h2>Caches</h2>"), "{html}");
    assert!(
        html.contains(
            "<li>cache `node_modules`: hit `branch:main` (12000 bytes, restored in 0.4 s)</li>"
        ),
        "{html}"
    );
    assert!(
        html.contains("<li>cache `~/.cargo`: miss; saved 5 bytes in 0.1 s</li>"),
        "{html}"
    );
    assert!(!html.contains("<li>**Artifacts**"), "{html}");
    assert!(!render_execution(&exec_page("complete"), NOW).contains("<h2>Caches</h2>"));
}

/// A unit's archives are listed with what they hold and a signed download
/// link; without LOG_LINK_SECRET the page says how to get one.
#[test]
fn the_execution_page_lists_artifacts_with_their_download_link() {
    use sluice::http::pages::execution::ArtifactView;
    let mut page = exec_page("complete");
    page.artifacts = vec![
        ArtifactView {
            label: "sluice/build".into(),
            what: "3 files, 1.2 MB".into(),
            download: Some(sluice::http::pages::paths::artifact("unit-1", 42, "ab12")),
        },
        ArtifactView {
            label: "sluice/docs".into(),
            what: "1 file, 10 bytes".into(),
            download: None,
        },
    ];
    let html = render_execution(&page, NOW);
    assert!(html.contains("<h2>Artifacts</h2>"), "{html}");
    assert!(
        html.contains("<strong>sluice/build</strong>: 3 files, 1.2 MB <a href=\"/artifacts/unit-1?exp=42&amp;sig=ab12\" download>download</a>"),
        "{html}"
    );
    assert!(
        html.contains("<strong>sluice/docs</strong>: 1 file, 10 bytes (set LOG_LINK_SECRET"),
        "{html}"
    );
    assert!(!render_execution(&exec_page("complete"), NOW).contains("Artifacts"));
}

#[test]
fn the_execution_page_shows_its_step_timeline() {
    let html = render_execution(&exec_page("waiting"), NOW);
    let tags = parse(&html);
    assert_eq!(count(&html, "<tr class=\"step-"), 3);
    assert!(html.contains("<td data-label=\"Attempts\">3</td>"));
    assert!(html.contains("<code class=\"tag\">CheckoutFailed</code> <span class=\"msg\">git fetch: connection reset</span>"));
    assert!(html.contains("<td data-label=\"Duration\">1 min</td>"));
    assert!(html.contains("deadline <time datetime=\"2025-10-09T09:53:20Z\""));
    assert!(html.contains("in 1 h"));
    assert!(html.contains("next attempt <time"));
    let links = hrefs(&tags);
    assert!(links.contains(&"/logs/exec-1/1?sig=a&b=c".to_owned()));
    assert!(links.contains(&"https://logs.example.com/x".to_owned()));
    assert_eq!(count(&html, ">log</a>"), 2);
    assert!(links.contains(&"/ui/groups/deploy%3Aocto%2Fhello%3Amain".to_owned()));
    assert!(links.contains(&"/ui/executions?repo=octo%2Fhello&entity=branch%3Amain".to_owned()));
    // A live execution's page polls; a finished one does not.
    assert!(html.contains(&format!("data-refresh-ms=\"{REFRESH_MS}\"")));
    let done = render_execution(&exec_page("complete"), NOW);
    assert!(done.contains("data-refresh-ms=\"0\""));
    // Every region app.js swaps has an id.
    for region in ["facts", "actions", "timeline"] {
        assert!(
            html.contains(&format!("id=\"{region}\" data-live")),
            "{region}"
        );
    }
}

/// A finished check whose command ended as `result` did: its output is
/// what `runs::report` records, with the summary `verdict_of` wrote.
fn ended_check(result: &CommandResult) -> ExecutionPage {
    let verdict = verdict_of("cargo test", result);
    let conclusion = match (result.timed_out, result.exit_code) {
        (true, _) => "timed_out",
        (false, Some(0)) => "success",
        _ => "failure",
    };
    let mut page = exec_page("complete");
    page.execution.row.finished_ms = Some(NOW - 7 * MIN);
    page.execution.row.output_json = Some(
        serde_json::json!({ "check_run_id": 1, "conclusion": conclusion, "verdict": verdict })
            .to_string(),
    );
    page
}

fn command_result(exit_code: Option<i32>, timed_out: bool, tail: &str) -> CommandResult {
    CommandResult {
        exit_code,
        timed_out,
        tail: tail.to_owned(),
        log_key: "logs/exec-1/run check command".into(),
        output_bytes: 4096,
        duration_ms: Some(2_000),
        log_url: None,
        environment_url: None,
        started: None,
        process: None,
    }
}

#[test]
fn a_failed_run_leads_with_its_log_tail() {
    let tail = "running 3 tests\ntest demo::adds ... FAILED\n<script>alert(1)</script> & \"q\"";
    let result = command_result(Some(1), false, tail);
    // The summary's parts are found again exactly as verdict_of wrote them.
    let Verdict::Failed { summary } = verdict_of("cargo test", &result) else {
        panic!("exit 1 fails");
    };
    assert_eq!(
        summary_parts(&summary),
        Some(("`cargo test` exited with code 1 after 2.0 s.", tail))
    );
    let html = render_execution(&ended_check(&result), NOW);
    let tags = parse(&html);
    // It reads failed, and the log's last lines are near the top, escaped.
    assert!(html.contains("<span class=\"st st-failed\" title=\"complete\">failed</span>"));
    let shown = "<pre class=\"tail\"><code>running 3 tests\ntest demo::adds ... FAILED\n\
                 &lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;q&quot;</code></pre>";
    assert!(html.contains(shown), "{html}");
    assert!(html.contains("<p class=\"how\">`cargo test` exited with code 1 after 2.0 s.</p>"));
    let at = |needle: &str| html.find(needle).expect(needle);
    assert!(at("<pre class=\"tail\">") < at("id=\"actions\""));
    assert!(at("<pre class=\"tail\">") < at("id=\"phases\""));
    // The whole log is the command step's own link.
    let full = tags
        .iter()
        .find(|t| t.attr("class") == Some("full-log"))
        .expect("a link to the whole log");
    assert_eq!(full.attr("href"), Some("https://logs.example.com/x"));

    // Timed out: the same, reading timed out.
    let slow = render_execution(
        &ended_check(&command_result(None, true, "still going")),
        NOW,
    );
    parse(&slow);
    assert!(slow.contains("title=\"complete\">timed out</span>"));
    assert!(slow.contains("<pre class=\"tail\"><code>still going</code></pre>"));
    // Passed, or failed by no command (its summary is not a command's): no tail.
    let passed = render_execution(&ended_check(&command_result(Some(0), false, "ok")), NOW);
    assert!(!passed.contains("Why it failed") && !passed.contains("class=\"tail\""));
    let mut config = exec_page("complete");
    config.execution.row.output_json = Some(
        "{\"conclusion\":\"failure\",\"verdict\":{\"verdict\":\"failed\",\"summary\":\"bad config\"}}"
            .into(),
    );
    let config = render_execution(&config, NOW);
    assert!(config.contains("st-failed") && !config.contains("Why it failed"));
}

/// A check's steps from `T0` (the run's creation): (name, kind, start and
/// end in seconds after it).
fn check_steps(t0: i64, end_s: Option<i64>) -> Vec<StepView> {
    let spans: [(&str, &str, i64, Option<i64>); 9] = [
        ("create check run", "step", 0, Some(30)),
        ("read config", "step", 30, Some(60)),
        ("gate: enter", "step", 60, Some(60)),
        ("gate: turn", "wait", 60, Some(240)),
        ("run check command", "step", 240, Some(420)),
        ("run check command#2", "step", 420, Some(480)),
        ("complete check run", "step", 480, Some(570)),
        ("release gates", "step", 570, Some(570)),
        ("tidy the journal", "step", 570, end_s),
    ];
    spans
        .iter()
        .enumerate()
        .map(|(i, (name, kind, from, to))| {
            let mut row = step(i as i64 + 1, name, kind, "done");
            row.started_ms = t0 + from * 1000;
            row.finished_ms = to.map(|s| t0 + s * 1000);
            StepView::new(row)
        })
        .collect()
}

fn phased_page(end_s: Option<i64>) -> ExecutionPage {
    let t0 = NOW - 10 * MIN;
    let mut page = exec_page(if end_s.is_some() {
        "complete"
    } else {
        "running"
    });
    page.execution.row.created_ms = t0;
    page.execution.row.finished_ms = end_s.map(|s| t0 + s * 1000);
    page.steps = check_steps(t0, end_s);
    page
}

/// The phase row of `class` (`ph-command`) in a rendered page.
fn phase_row(html: &str, class: &str) -> String {
    let row = html
        .split(&format!("<tr class=\"phase {class}\">"))
        .nth(1)
        .unwrap_or_else(|| panic!("no {class} row"));
    row.split("</tr>").next().unwrap().to_owned()
}

#[test]
fn phases_are_grouped_with_their_durations() {
    for (name, phase) in [
        ("gate: enter", Phase::Admission),
        ("gate: lease#2", Phase::Admission),
        ("release gates", Phase::Admission),
        ("read pull request head", Phase::Setup),
        ("re-read head", Phase::Setup),
        ("run deploy command#3", Phase::Command),
        ("command still running", Phase::Command),
        ("create deployment", Phase::Report),
        ("deployment: conclude", Phase::Report),
        ("complete check run", Phase::Report),
        ("mystery#x", Phase::Engine),
        ("", Phase::Engine),
    ] {
        assert_eq!(Phase::of(name), phase, "{name}");
    }
    let html = render_execution(&phased_page(Some(600)), NOW);
    parse(&html);
    let rows: Vec<(&str, &str, &str)> = vec![
        (
            "ph-admission",
            "3 min",
            "<code>gate: enter</code>, <code>gate: turn</code>, <code>release gates</code>",
        ),
        ("ph-setup", "30 s", "<code>read config</code>"),
        ("ph-command", "4 min", "<code>run check command</code>"),
        (
            "ph-report",
            "2 min",
            "<code>create check run</code>, <code>complete check run</code>",
        ),
        ("ph-engine", "30 s", "<code>tidy the journal</code>"),
    ];
    let mut last = 0;
    for (class, duration, steps) in rows {
        let row = phase_row(&html, class);
        assert!(
            row.contains(&format!("<td data-label=\"Duration\">{duration}</td>")),
            "{row}"
        );
        assert!(
            row.contains(&format!("<td data-label=\"Steps\">{steps}</td>")),
            "{row}"
        );
        let at = html.find(&format!("phase {class}")).unwrap();
        assert!(at > last, "phases in order");
        last = at;
    }
    assert!(phase_row(&html, "ph-admission").contains("Waiting for the group and admission"));
    assert!(phase_row(&html, "ph-setup").contains("Checkout and config"));
    // The engine's own list is one click away, every step in it.
    let details = html
        .split("<details class=\"engine-steps\">")
        .nth(1)
        .expect("details");
    assert!(details.starts_with("<summary>The engine's steps (9)</summary>"));
    assert_eq!(
        count(
            details.split("</details>").next().unwrap(),
            "<tr class=\"step-"
        ),
        9
    );
    // A run with no steps yet says so.
    let mut empty = phased_page(None);
    empty.steps.clear();
    assert!(render_execution(&empty, NOW).contains("<h2>Phases</h2><p class=\"empty\">"));
}

/// Every `<rect>` of a phase row, as (x, width) in tenths of a percent.
fn rects(row: &str) -> Vec<(i64, i64)> {
    let tenths = |v: &str| {
        let (whole, tenth) = v.trim_end_matches('%').split_once('.').unwrap();
        whole.parse::<i64>().unwrap() * 10 + tenth.parse::<i64>().unwrap()
    };
    row.split("<rect x=\"")
        .skip(1)
        .map(|r| {
            let (x, rest) = r.split_once('"').unwrap();
            let w = rest
                .split("width=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            (tenths(x), tenths(w))
        })
        .collect()
}

#[test]
fn the_timeline_is_drawn_to_scale() {
    let bar = |from, to, start, end| Bar::of(from, to, start, end);
    assert_eq!(
        bar(240, 420, 0, 600),
        Some(Bar {
            x_permille: 400,
            width_permille: 300
        })
    );
    assert_eq!(
        bar(0, 1, 0, 3).map(|b| percent(b.width_permille)),
        Some("33.3%".into())
    );
    assert_eq!(
        bar(-50, 700, 0, 600),
        Some(Bar {
            x_permille: 0,
            width_permille: 1000
        })
    );
    assert_eq!(bar(10, 5, 0, 600).map(|b| b.width_permille), Some(0));
    assert_eq!(bar(0, 10, 5, 5), None, "a run of no length has no scale");
    assert_eq!(percent(375), "37.5%");

    // Finished in 600 s: each bar's offset and width are its share of them.
    let html = render_execution(&phased_page(Some(600)), NOW);
    parse(&html);
    assert_eq!(
        rects(&phase_row(&html, "ph-command")),
        [(400, 300), (700, 100)]
    );
    assert_eq!(
        rects(&phase_row(&html, "ph-admission")),
        [(100, 0), (100, 300), (950, 0)]
    );
    assert_eq!(rects(&phase_row(&html, "ph-report")), [(0, 50), (800, 150)]);
    assert!(phase_row(&html, "ph-command")
        .contains("<rect x=\"40.0%\" width=\"30.0%\" y=\"0\" height=\"100%\">"));
    // The widths of all bars add up to the run, as its steps do.
    let total: i64 = [
        "ph-admission",
        "ph-setup",
        "ph-command",
        "ph-report",
        "ph-engine",
    ]
    .iter()
    .flat_map(|c| rects(&phase_row(&html, c)))
    .map(|(_, w)| w)
    .sum();
    assert_eq!(total, 1000);

    // A live run is drawn up to now (NOW is 600 s after its creation); its
    // running step reaches the end.
    let live = render_execution(&phased_page(None), NOW);
    parse(&live);
    assert_eq!(rects(&phase_row(&live, "ph-engine")), [(950, 50)]);
}

#[test]
fn bookkeeping_is_listed_apart_from_the_runs_users_asked_for() {
    let apart: Vec<&str> = registry::bookkeeping().map(|r| r.as_str()).collect();
    assert_eq!(apart, ["cancel-checks", "schedules", "preview-reconcile"]);
    let apart_owned: Vec<String> = apart.iter().map(|r| r.to_string()).collect();
    // By default the list leaves bookkeeping out; `bookkeeping=1` lists it
    // alone; a run filter holds as it is. Other filters hold in all three.
    let plain = ExecutionsQuery::parse("repo=octo/hello&status=complete");
    let f = plain.list_filter_apart(&apart);
    assert_eq!(
        (f.runs_excluded.clone(), f.runs_only.clone()),
        (apart_owned.clone(), None)
    );
    assert_eq!(
        (f.repo.as_deref(), f.status.as_deref()),
        (Some("octo/hello"), Some("complete"))
    );
    let kept = ExecutionsQuery::parse("repo=octo/hello&status=complete&bookkeeping=1");
    let f = kept.list_filter_apart(&apart);
    assert_eq!(
        (f.runs_excluded.len(), f.runs_only),
        (0, Some(apart_owned.clone()))
    );
    assert_eq!(f.repo.as_deref(), Some("octo/hello"));
    let named = ExecutionsQuery::parse("run=schedules").list_filter_apart(&apart);
    assert_eq!(
        (
            named.run.as_deref(),
            named.runs_excluded.len(),
            named.runs_only
        ),
        (Some("schedules"), 0, None)
    );
    assert_eq!(
        ExecutionsQuery::parse(kept.url(Some("c1")).as_str().split_once('?').unwrap().1),
        ExecutionsQuery {
            cursor: Some("c1".into()),
            ..kept.clone()
        }
    );

    // The default page links to the bookkeeping, keeping its filters.
    let mut page = list_page(Vec::new(), None);
    page.query = plain;
    let html = render_executions(&page, NOW);
    let tags = parse(&html);
    assert!(html.contains("<h1>Executions</h1>"));
    let link = |tags: &[Tag]| {
        tags.iter()
            .find(|t| t.attr("class") == Some("apart-link"))
            .and_then(|t| t.attr("href"))
            .map(|h| h.replace("&amp;", "&"))
    };
    assert_eq!(
        link(&tags).as_deref(),
        Some("/ui/executions?repo=octo%2Fhello&status=complete&bookkeeping=1")
    );
    // The bookkeeping page links back, and its form and next page keep it.
    let mut page = list_page(
        vec![ExecutionView::new(exec(
            "sch-1",
            Some("octo/hello"),
            Some("branch:main"),
            "complete",
        ))],
        Some("c2"),
    );
    page.query = kept;
    let html = render_executions(&page, NOW);
    let tags = parse(&html);
    assert!(html.contains("<h1>Bookkeeping</h1>"));
    assert_eq!(
        link(&tags).as_deref(),
        Some("/ui/executions?repo=octo%2Fhello&status=complete")
    );
    assert!(html.contains("<input type=\"hidden\" name=\"bookkeeping\" value=\"1\">"));
    assert!(html.contains("<a href=\"/ui/executions?bookkeeping=1\">Clear</a>"));
    assert!(hrefs(&tags).iter().any(|h| h
        .replace("&amp;", "&")
        .ends_with("&bookkeeping=1&cursor=c2")));
}

#[test]
fn actions_fit_the_status_and_each_asks_for_confirmation() {
    let actions_of = |status: &str| -> Vec<String> {
        let tags = parse(&render_execution(&exec_page(status), NOW));
        forms(&tags)
            .iter()
            .filter_map(|f| f.attr("action"))
            .map(|a| a.rsplit('/').next().unwrap_or("").to_owned())
            .collect()
    };
    assert_eq!(
        actions_of("running"),
        ["terminate", "pause", "restart", "skip", "events"]
    );
    assert_eq!(
        actions_of("paused"),
        ["terminate", "resume", "restart", "skip", "events"]
    );
    for ended in ["complete", "errored", "terminated", "skipped"] {
        assert_eq!(actions_of(ended), ["restart"], "{ended}");
    }

    let html = render_execution(&exec_page("waiting"), NOW);
    let tags = parse(&html);
    for f in forms(&tags) {
        let confirm = f.attr("data-confirm").expect("data-confirm");
        assert!(confirm.contains("exec-1?"), "{confirm}");
        assert!(f
            .attr("action")
            .is_some_and(|a| a.starts_with("/v1/executions/exec-1/")));
    }
    let n = forms(&tags).len();
    assert_eq!(
        count(
            &html,
            "<input type=\"hidden\" name=\"confirmed\" value=\"\">"
        ),
        n
    );
    assert_eq!(
        count(
            &html,
            "<input type=\"hidden\" name=\"csrf\" value=\"csrf-123\">"
        ),
        n
    );
    // Restart offers the steps to restart from, each once.
    assert!(html.contains("<option value=\"\">the start</option><option value=\"checkout\">checkout</option><option value=\"run deploy command\">run deploy command</option></select>"));
    assert!(html.contains("name=\"payload\""));
    // The page carries the dialog app.js opens.
    assert!(html.contains("<dialog id=\"confirm-dialog\">"));
    // No routes: no forms.
    let mut bare = exec_page("running");
    bare.actions = Actions::default();
    assert!(forms(&parse(&render_execution(&bare, NOW))).is_empty());
}

#[test]
fn action_routes_percent_encode_and_map_a_generation_to_its_instance() {
    let a = Actions::v1(None);
    let url = |action, target| a.url(action, target).map(|u| u.as_str().to_owned());
    assert_eq!(
        url(Action::Skip, "deploy-x.g2").as_deref(),
        Some("/v1/executions/deploy-x/skip")
    );
    assert_eq!(
        url(Action::SkipAll, "deploy:octo/hello:main").as_deref(),
        Some("/v1/groups/deploy%3Aocto%2Fhello%3Amain/skip-all")
    );
    assert_eq!(
        url(Action::Terminate, "a/b?c#d&e").as_deref(),
        Some("/v1/executions/a%2Fb%3Fc%23d%26e/terminate")
    );
    let evil = Actions {
        terminate: Some("javascript:alert('{id}')"),
        ..Actions::default()
    };
    assert_eq!(evil.url(Action::Terminate, "x"), None);
    assert_eq!(
        pages::paths::execution("deploy-x.g3").as_str(),
        "/ui/executions/deploy-x"
    );
}

#[test]
fn the_confirmation_page_carries_the_posted_fields_with_confirmed_1() {
    let actions = Actions::v1(Some("tok".into()));
    let posted = ActionForm::parse("from_step=run+deploy+command&csrf=old");
    let html = render_confirm(Action::Restart, "exec-1", &posted, &actions, NOW);
    let tags = parse(&html);
    let f = forms(&tags);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].attr("action"), Some("/v1/executions/exec-1/restart"));
    assert_eq!(f[0].attr("data-confirm"), None, "the page itself confirms");
    assert!(html.contains("<input type=\"hidden\" name=\"confirmed\" value=\"1\">"));
    assert!(html.contains("<input type=\"hidden\" name=\"csrf\" value=\"tok\">"));
    assert!(
        html.contains("<input type=\"hidden\" name=\"from_step\" value=\"run deploy command\">")
    );
    assert!(hrefs(&tags).contains(&"/ui/executions/exec-1".to_owned()));
    assert!(html.contains("data-refresh-ms=\"0\""));

    let ev = ActionForm::parse("type=deploy-confirm&payload=%7B%22ok%22%3Atrue%7D");
    let html = render_confirm(Action::SendEvent, "exec-1", &ev, &actions, NOW);
    parse(&html);
    assert!(html.contains("value=\"deploy-confirm\""));
    assert!(html.contains("{&quot;ok&quot;:true}</textarea>"));

    let group = render_confirm(
        Action::SkipAll,
        "deploy:o/r:main",
        &ActionForm::default(),
        &actions,
        NOW,
    );
    let tags = parse(&group);
    assert_eq!(
        forms(&tags)[0].attr("action"),
        Some("/v1/groups/deploy%3Ao%2Fr%3Amain/skip-all")
    );
    assert!(hrefs(&tags).contains(&"/ui/groups/deploy%3Ao%2Fr%3Amain".to_owned()));
}

#[test]
fn action_forms_parse_and_same_origin_is_required() {
    let f = ActionForm::parse("confirmed=1&csrf=a%2Bb&from_step=&type=+approve+&payload=x%3D1");
    assert!(f.confirmed);
    assert_eq!(f.csrf.as_deref(), Some("a+b"));
    assert_eq!(f.from_step, None);
    assert_eq!(f.event_type.as_deref(), Some("approve"));
    assert_eq!(f.payload.as_deref(), Some("x=1"));
    assert!(!ActionForm::parse("confirmed=yes").confirmed);
    assert!(!ActionForm::parse("").confirmed);

    let own = "https://sluice.example.com";
    assert!(same_origin_post(Some("same-origin"), None, own));
    assert!(!same_origin_post(Some("cross-site"), Some(own), own));
    assert!(!same_origin_post(Some("same-site"), None, own));
    assert!(same_origin_post(None, Some(own), own));
    assert!(same_origin_post(
        None,
        Some(own),
        "https://sluice.example.com/"
    ));
    assert!(!same_origin_post(None, Some("https://evil.example"), own));
    assert!(!same_origin_post(None, Some("null"), own));
    assert!(!same_origin_post(None, None, own));
}

#[test]
fn the_result_page_says_what_happened() {
    let r = ActionResult {
        action: Action::Skip,
        target: "exec-1".into(),
        ok: false,
        message: "execution exec-1 holds its group; a holder is never skipped".into(),
    };
    let html = render_result(&r, NOW);
    parse(&html);
    assert!(html.contains("Skip: refused"));
    assert!(html.contains("a holder is never skipped"));
    assert!(html.contains("href=\"/ui/executions/exec-1\""));
}

// --- groups ---

fn group_view() -> GroupView {
    GroupView {
        group: "deploy:octo/hello:main".into(),
        holder: Some(ExplainedHolder {
            execution_id: "dep-a".into(),
            revision: "a".repeat(40),
            imperative: false,
            held_ms: 4 * MIN,
            heartbeat_age_ms: 30_000,
            stale: false,
        }),
        waiters: vec![
            ExplainedWaiter {
                execution_id: "dep-b.g1".into(),
                revision: "b".repeat(40),
                imperative: false,
                waited_ms: 2 * MIN,
                why: WaitReason::BehindHolder {
                    execution_id: "dep-a".into(),
                },
                times_out_in_ms: Some(58 * MIN),
            },
            ExplainedWaiter {
                execution_id: "dep-c".into(),
                revision: "c".repeat(40),
                imperative: true,
                waited_ms: MIN,
                why: WaitReason::BehindWaiter {
                    execution_id: "dep-b.g1".into(),
                },
                times_out_in_ms: None,
            },
            ExplainedWaiter {
                execution_id: "dep-d".into(),
                revision: "d".repeat(40),
                imperative: false,
                waited_ms: MIN,
                why: WaitReason::InstanceNotLive,
                times_out_in_ms: Some(0),
            },
        ],
        waiters_truncated: false,
        recent: vec![
            ExplainedEnd {
                execution_id: "dep-0".into(),
                revision: "0".repeat(40),
                state: RowState::Superseded,
                reason: Some(SkipReason::Superseded),
                superseded_by: Some("b".repeat(40)),
                ended_by: Some("dep-b.g1".into()),
                ended_ago_ms: 3 * MIN,
            },
            ExplainedEnd {
                execution_id: "dep-z".into(),
                revision: "9".repeat(40),
                state: RowState::Skipped,
                reason: None,
                superseded_by: None,
                ended_by: None,
                ended_ago_ms: 60 * MIN,
            },
        ],
    }
}

#[test]
fn a_group_page_explains_its_holder_waiters_and_recent_skips() {
    let page = GroupPage {
        view: group_view(),
        actions: Actions::v1(None),
    };
    let html = render_group(&page, NOW);
    let tags = parse(&html);
    assert!(html.contains("<h1>Group <code>deploy:octo/hello:main</code></h1>"));
    assert!(html.contains("<dt>Held for</dt><dd>4 min</dd>"));
    assert!(html.contains("<dt>Heartbeat</dt><dd>30 s ago</dd>"));
    assert!(html.contains("behind the holder <a class=\"exec\" href=\"/ui/executions/dep-a\">"));
    assert!(html.contains("behind an older waiter, <a class=\"exec\" href=\"/ui/executions/dep-b\"><code>dep-b.g1</code>"));
    assert!(html.contains("its instance is paused or finished"));
    assert!(html.contains("in 58 min"));
    assert!(html.contains("at its next poll"));
    assert!(html.contains("<span class=\"st\">operator</span>"));
    assert!(html.contains("<span class=\"reason\">superseded</span>"));
    assert!(html.contains("an operator's skip (silent)"));
    assert!(html.contains("3 min ago"));
    assert!(html.contains("1 h ago"));
    let posts = forms(&tags);
    let actions: Vec<&str> = posts.iter().filter_map(|f| f.attr("action")).collect();
    assert_eq!(
        actions,
        [
            "/v1/executions/dep-b/skip",
            "/v1/executions/dep-c/skip",
            "/v1/executions/dep-d/skip",
            "/v1/groups/deploy%3Aocto%2Fhello%3Amain/skip-all"
        ]
    );
    for region in ["holder", "waiters", "recent"] {
        assert!(
            html.contains(&format!("id=\"{region}\" data-live")),
            "{region}"
        );
    }

    let mut idle = group_view();
    idle.holder = None;
    idle.waiters.clear();
    idle.recent.clear();
    let html = render_group(
        &GroupPage {
            view: idle,
            actions: Actions::v1(None),
        },
        NOW,
    );
    assert!(html.contains("Nobody holds the group."));
    assert!(html.contains("Nobody waits."));
    assert!(!html.contains("skip-all"), "no skip-all without waiters");
}

#[test]
fn the_groups_overview_lists_holders_heartbeats_and_waiters() {
    let page = GroupsPage {
        groups: vec![
            GroupSummary {
                group: "deploy:octo/hello:main".into(),
                holder: Some("dep-a".into()),
                holder_heartbeat_age_ms: Some(12 * MIN),
                holder_stale: true,
                waiting: 2,
                oldest_waited_ms: Some(5 * MIN),
            },
            GroupSummary {
                group: "deploy:octo/world:main".into(),
                holder: None,
                holder_heartbeat_age_ms: None,
                holder_stale: false,
                waiting: 1,
                oldest_waited_ms: Some(1_500),
            },
        ],
        repo: Some("octo/hello".into()),
        next_cursor: Some("deploy:octo/world:main".into()),
        approvals: vec![approval("dep-q")],
        actions: Actions::v1(None),
    };
    let html = render_groups(&page, NOW);
    assert!(html
        .contains("href=\"/ui/groups?repo=octo%2Fhello&amp;cursor=deploy%3Aocto%2Fworld%3Amain\""));
    let tags = parse(&html);
    assert_eq!(count(&html, "<tr><td data-label=\"Group\">"), 2);
    assert!(html.contains("12 min ago <span class=\"st st-stale\">stale: no longer blocks</span>"));
    assert!(html.contains("<span class=\"none\">free</span>"));
    assert!(html.contains("<td data-label=\"Waiting\">2</td>"));
    assert!(html.contains("<td data-label=\"Oldest wait\">5 min</td>"));
    assert!(html.contains("<td data-label=\"Oldest wait\">1 s</td>"));
    let links = hrefs(&tags);
    assert!(links.contains(&"/ui/groups/deploy%3Aocto%2Fworld%3Amain".to_owned()));
    assert!(links.contains(&"/ui/executions/dep-a".to_owned()));
    assert!(html.contains("@octo/release-managers"));
    let empty = render_groups(
        &GroupsPage {
            groups: Vec::new(),
            repo: None,
            next_cursor: None,
            approvals: Vec::new(),
            actions: Actions::v1(None),
        },
        NOW,
    );
    assert!(empty.contains("No group is held or waited for."));
}

// --- hostile values ---

fn hostile_row(value: &str) -> ExecutionRow {
    let mut r = exec(value, Some(value), Some(&format!("branch:{value}")), value);
    r.key = value.to_owned();
    r.run = value.to_owned();
    r.sha = Some(value.to_owned());
    r.reason = Some(value.to_owned());
    r.error_tag = Some(value.to_owned());
    r.error_message = Some(value.to_owned());
    r
}

fn hostile_pages(value: &str) -> Vec<String> {
    let mut s = step(1, value, value, value);
    s.error_tag = Some(value.to_owned());
    s.error_message = Some(value.to_owned());
    let steps = vec![
        StepView {
            row: s.clone(),
            log_url: Some(format!("javascript:alert('{value}')")),
        },
        StepView {
            row: s,
            log_url: Some(format!("/logs/{value}")),
        },
    ];
    let mut a = approval(value);
    a.repo = Some(value.to_owned());
    a.event_type = value.to_owned();
    a.decider = Some(value.to_owned());
    let view = ExecutionView {
        row: hostile_row(value),
        newer_revision: Some(value.to_owned()),
    };
    let mut list = list_page(vec![view.clone()], Some(value));
    list.query = ExecutionsQuery::parse(&format!(
        "repo={0}&run={0}&status={0}&entity={0}",
        percent_encode(value)
    ));
    list.approvals = vec![a.clone()];
    list.actions.csrf = Some(value.to_owned());
    let mut running = view.clone();
    running.row.status = "running".into();
    let exec_page = ExecutionPage {
        execution: running,
        steps,
        steps_truncated: true,
        approvals: vec![a],
        group: Some(value.to_owned()),
        artifacts: vec![sluice::http::pages::execution::ArtifactView {
            label: value.to_owned(),
            what: value.to_owned(),
            download: Some(sluice::http::pages::paths::artifact(value, 1, value)),
        }],
        pipeline: sluice::http::pages::pipeline::view(
            Some(
                &serde_json::json!({"pipeline": [
                    {"name": value, "needs": [value], "result": "failed", "why": value}
                ]})
                .to_string(),
            ),
            &[],
        ),
        actions: Actions::v1(Some(value.to_owned())),
    };
    let mut gv = group_view();
    gv.group = value.to_owned();
    if let Some(h) = gv.holder.as_mut() {
        h.execution_id = value.to_owned();
        h.revision = value.to_owned();
    }
    for w in &mut gv.waiters {
        w.execution_id = value.to_owned();
        w.revision = value.to_owned();
        w.why = WaitReason::NextToClaim {
            takes_over: Some(value.to_owned()),
        };
    }
    let form = ActionForm {
        confirmed: false,
        csrf: Some(value.to_owned()),
        from_step: Some(value.to_owned()),
        event_type: Some(value.to_owned()),
        payload: Some(value.to_owned()),
    };
    let result = ActionResult {
        action: Action::SendEvent,
        target: value.to_owned(),
        ok: true,
        message: value.to_owned(),
    };
    let summary = GroupSummary {
        group: value.to_owned(),
        holder: Some(value.to_owned()),
        holder_heartbeat_age_ms: Some(1),
        holder_stale: false,
        waiting: 1,
        oldest_waited_ms: Some(1),
    };
    vec![
        render_executions(&list, NOW),
        render_execution(&exec_page, NOW),
        render_group(
            &GroupPage {
                view: gv,
                actions: Actions::v1(Some(value.to_owned())),
            },
            NOW,
        ),
        render_groups(
            &GroupsPage {
                groups: vec![summary],
                repo: Some(value.to_owned()),
                next_cursor: Some(value.to_owned()),
                approvals: Vec::new(),
                actions: Actions::v1(None),
            },
            NOW,
        ),
        render_confirm(Action::SendEvent, value, &form, &Actions::v1(None), NOW),
        render_confirm(Action::Restart, value, &form, &Actions::v1(None), NOW),
        render_result(&result, NOW),
    ]
}

#[test]
fn a_branch_named_script_renders_as_text() {
    for html in hostile_pages(XSS) {
        parse(&html);
        // The only script element is app.js.
        assert_eq!(count(&html, "<script"), 1, "{html}");
        assert!(html.contains("<script defer src=\"/ui/app.js\"></script>"));
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }
    let list = &hostile_pages(XSS)[0];
    assert!(list.contains("branch &lt;script&gt;alert(1)&lt;/script&gt;"));
    // In URLs it is one percent-encoded segment or value.
    assert!(list.contains("/ui/executions/%3Cscript%3Ealert%281%29%3C%2Fscript%3E"));
    assert!(list.contains("entity=branch%3A%3Cscript%3E"));
}

#[test]
fn quotes_ampersands_and_attribute_breakouts_render_as_text() {
    for value in [QUOTES, BREAKOUT, "&amp;&lt;", "'\"", "</td></tr></table>"] {
        for html in hostile_pages(value) {
            let tags = parse(&html);
            assert!(!html.contains(" onmouseover=\""), "{value}");
            // No attribute of any tag is named after a piece of the value.
            for t in &tags {
                for (k, _) in &t.attrs {
                    assert!(
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                        "attr {k}"
                    );
                }
            }
        }
    }
    let html = &hostile_pages(QUOTES)[1];
    assert!(html.contains("a&quot;b&#39;c&amp;d&lt;e&gt;f"));
    let html = &hostile_pages(BREAKOUT)[0];
    assert!(html.contains("x&quot; onmouseover=&quot;alert(1)"));
}

#[test]
fn javascript_and_other_unsafe_urls_never_become_links() {
    for html in hostile_pages("x") {
        let tags = parse(&html);
        for link in hrefs(&tags) {
            assert!(!link.to_ascii_lowercase().contains("javascript"), "{link}");
        }
    }
    for bad in [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        " javascript:alert(1)",
        "java\tscript:alert(1)",
        "data:text/html,<script>",
        "vbscript:x",
        "//evil.example/x",
        "/\\evil.example",
        "\\\\evil",
        "relative/path",
        "",
        "https://x\n.example",
    ] {
        assert_eq!(Url::checked(bad), None, "{bad:?}");
    }
    for good in [
        "/logs/a?b=c&d",
        "https://logs.example.com/a",
        "HTTP://x.example",
    ] {
        assert!(Url::checked(good).is_some(), "{good}");
    }
    // A refused log link leaves a dash, not an anchor.
    let mut page = exec_page("complete");
    page.steps[0].log_url = Some("javascript:alert(1)".into());
    page.steps[2].log_url = None;
    let html = render_execution(&page, NOW);
    assert_eq!(count(&html, ">log</a>"), 0);
}

#[test]
fn nothing_panics_on_odd_values() {
    let odd = [
        "",
        "é✓🚀",
        "\u{0}\u{7f}\u{feff}",
        "%",
        "%zz%",
        "a%2",
        &"x".repeat(10_000),
    ];
    for v in odd {
        for html in hostile_pages(v) {
            parse(&html);
        }
        let _ = ExecutionsQuery::parse(v);
        let _ = ActionForm::parse(v);
        let _ = form_pairs(v);
        let _ = percent_decode(v, true);
        let _ = parse_utc(v);
    }
    for t in [i64::MIN, -1, 0, i64::MAX, 253_402_300_800_000] {
        let mut r = exec("e", Some("r"), None, "running");
        r.created_ms = t;
        r.finished_ms = Some(t.wrapping_neg());
        r.wake_at_ms = Some(t);
        let html = render_executions(&list_page(vec![ExecutionView::new(r)], None), t);
        parse(&html);
        let _ = relative(t, t.wrapping_neg());
        let _ = duration(t);
    }
}

// --- escaping, URLs and times ---

#[test]
fn the_escaping_module() {
    assert_eq!(escape(QUOTES), "a&quot;b&#39;c&amp;d&lt;e&gt;f");
    assert_eq!(escape("plain é"), "plain é");
    assert_eq!(percent_encode("deploy:o/r:main"), "deploy%3Ao%2Fr%3Amain");
    assert_eq!(
        percent_encode("a b?#&=\"'<>é"),
        "a%20b%3F%23%26%3D%22%27%3C%3E%C3%A9"
    );
    assert_eq!(percent_encode("A-z_0.9~"), "A-z_0.9~");
    assert_eq!(percent_decode("a+b%2Bc%zz%", true), "a b+c%zz%");
    assert_eq!(percent_decode("a+b", false), "a+b");
    assert_eq!(percent_decode("%C3%A9%FF", false), "é\u{fffd}");
    let mut h = Html::new();
    h.raw("<p")
        .attr("title", XSS)
        .raw(">")
        .text(XSS)
        .raw("</p>");
    assert_eq!(
        h.as_str(),
        "<p title=\"&lt;script&gt;alert(1)&lt;/script&gt;\">&lt;script&gt;alert(1)&lt;/script&gt;</p>"
    );
    assert_eq!(
        Url::path("/ui/x")
            .seg("a/b")
            .query("q", "1&2")
            .query("r", "")
            .as_str(),
        "/ui/x/a%2Fb?q=1%262&r="
    );
    assert_eq!(
        form_pairs("a=1&&b&c=x+y&=z"),
        [
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), "".to_owned()),
            ("c".to_owned(), "x y".to_owned()),
            ("".to_owned(), "z".to_owned()),
        ]
    );
    assert_eq!(
        form_pairs(&"a=1&".repeat(1000)).len(),
        pages::query::FORM_PAIRS_MAX
    );
}

#[test]
fn times_render_as_iso_8601_and_relative_to_now() {
    assert_eq!(iso8601(0).as_deref(), Some("1970-01-01T00:00:00Z"));
    assert_eq!(iso8601(NOW).as_deref(), Some("2025-10-09T08:53:20Z"));
    assert_eq!(
        iso8601(951_782_400_000).as_deref(),
        Some("2000-02-29T00:00:00Z")
    );
    assert_eq!(
        iso8601(253_402_300_799_999).as_deref(),
        Some("9999-12-31T23:59:59Z")
    );
    assert_eq!(iso8601(253_402_300_800_000), None);
    assert_eq!(iso8601(-1), None);
    assert_eq!(datetime_local(NOW).as_deref(), Some("2025-10-09T08:53"));

    assert_eq!(relative(NOW, NOW), "just now");
    assert_eq!(relative(NOW - 4_999, NOW), "just now");
    assert_eq!(relative(NOW - 5_000, NOW), "5 s ago");
    assert_eq!(relative(NOW - 3 * MIN - 20_000, NOW), "3 min ago");
    assert_eq!(relative(NOW - 2 * 60 * MIN, NOW), "2 h ago");
    assert_eq!(relative(NOW - 3 * 24 * 60 * MIN, NOW), "3 d ago");
    assert_eq!(relative(NOW + 5 * MIN, NOW), "in 5 min");
    assert_eq!(relative(i64::MIN, i64::MAX), "106751991167 d ago");
    assert_eq!(relative(i64::MAX, i64::MIN), "in 106751991167 d");

    assert_eq!(duration(850), "850 ms");
    assert_eq!(duration(42_000), "42 s");
    assert_eq!(duration(3 * MIN + 4_000), "3 min 4 s");
    assert_eq!(duration(3 * MIN), "3 min");
    assert_eq!(duration(125 * MIN), "2 h 5 min");
    assert_eq!(duration(3 * 24 * 60 * MIN + 4 * 60 * MIN), "3 d 4 h");
    assert_eq!(duration(-5), "0 ms");

    for (s, want) in [
        ("2025-10-09T08:53:20Z", Some(NOW)),
        ("2025-10-09T08:53:20", Some(NOW)),
        ("2025-10-09T08:53", Some(NOW - 20_000)),
        ("2025-10-09", Some(NOW - (8 * 60 + 53) * MIN - 20_000)),
        ("2024-02-29", Some(1_709_164_800_000)),
        ("2023-02-29", None),
        ("2025-13-01", None),
        ("2025-10-09T24:00", None),
        ("2025-10-09T08:60", None),
        ("2025-10-9", None),
        ("2025-10-09T08", None),
        ("2025-10-09T08:53:20:00", None),
        ("2025-10-09-01", None),
        ("+025-10-09", None),
        ("", None),
    ] {
        assert_eq!(parse_utc(s), want, "{s}");
    }
    // Round trips through the form.
    for ms in [0, NOW - NOW % MIN, 253_402_300_740_000] {
        let local = datetime_local(ms).unwrap_or_default();
        assert_eq!(parse_utc(&local), Some(ms), "{local}");
    }
}

#[test]
fn entities_are_named_for_people() {
    assert_eq!(entity_label(Some("pr:12")), "pull request #12");
    assert_eq!(
        entity_label(Some("branch:release/1.x")),
        "branch release/1.x"
    );
    assert_eq!(entity_label(Some("tag:v1.2.3")), "tag v1.2.3");
    assert_eq!(entity_label(Some("cron:nightly")), "cron:nightly");
    assert_eq!(entity_label(None), "(no entity)");
}

// --- assets and headers ---

#[test]
fn the_csp_is_strict_and_the_pages_and_assets_need_nothing_inline() {
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-eval"));
    assert!(!CONTENT_SECURITY_POLICY.contains('*'));
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ] {
        assert!(CONTENT_SECURITY_POLICY.contains(directive), "{directive}");
    }
    assert!(SECURITY_HEADERS
        .iter()
        .any(|(k, v)| *k == "Content-Security-Policy" && *v == CONTENT_SECURITY_POLICY));
    assert!(SECURITY_HEADERS.contains(&("X-Content-Type-Options", "nosniff")));

    // The script needs no eval and writes no markup from strings.
    for banned in [
        "eval(",
        "new Function",
        "innerHTML",
        "outerHTML",
        "document.write",
        "setTimeout('",
        "setTimeout(\"",
    ] {
        assert!(!APP_JS.contains(banned), "app.js uses {banned}");
    }
    // What the pages promise, the script reads.
    for hook in [
        "data-refresh-ms",
        "data-live",
        "data-confirm",
        "confirm-dialog",
        "confirm-text",
        "live-status",
        "confirmed",
    ] {
        assert!(APP_JS.contains(hook), "app.js ignores {hook}");
    }
    // No external assets: nothing is loaded from another origin.
    assert!(!APP_CSS.contains("url("));
    assert!(!APP_CSS.contains("@import"));
    assert!(APP_CSS.contains("@media (max-width"));
    for html in hostile_pages("x") {
        assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
        assert!(html
            .contains("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"));
        assert!(html.contains("<link rel=\"stylesheet\" href=\"/ui/app.css\">"));
    }
}

// --- the checker itself bites ---

#[test]
#[should_panic(expected = "inline script")]
fn the_checker_refuses_an_injected_script() {
    parse("<p><script>alert(1)</script></p>");
}

#[test]
#[should_panic(expected = "inline handler")]
fn the_checker_refuses_an_injected_handler() {
    parse("<p title=\"x\" onmouseover=\"alert(1)\"></p>");
}

#[test]
#[should_panic(expected = "unsafe href")]
fn the_checker_refuses_a_javascript_link() {
    parse("<a href=\"javascript:alert(1)\">x</a>");
}

#[test]
#[should_panic(expected = "raw < in text")]
fn the_checker_refuses_a_stray_angle_bracket() {
    parse("<p>a < b</p>");
}

/// Issue 24: `/ui/previews` lists the live previews (pull request, commit,
/// URL, age, last deploy); every value is escaped and only an https URL
/// becomes a link.
#[test]
fn live_previews_are_listed_with_their_urls_escaped() {
    use sluice::http::pages::{render_previews, PreviewsPage};
    use sluice::store::previews::PreviewRow;
    let row = |pr: i64, url: Option<&str>| PreviewRow {
        repo: "octo/<script>".into(),
        pr,
        installation_id: 42,
        default_branch: "main".into(),
        head_branch: "feature".into(),
        state: "live".into(),
        sha: "a".repeat(40),
        url: url.map(str::to_owned),
        result: Some("success".into()),
        execution_id: "preview-octo-hello-pr7-aaaaaaaaaaaa-opened-12345678".into(),
        updated_ms: NOW - 60_000,
        checked_ms: NOW,
        fork: 0,
    };
    let page = PreviewsPage {
        previews: vec![
            row(7, Some("https://pr-7.preview.example/")),
            row(8, Some("javascript:alert(1)")),
            row(9, None),
        ],
        truncated: false,
        actions: sluice::http::pages::Actions::ui(None),
    };
    let html = render_previews(&page, NOW);
    let tags = parse(&html);
    let links = hrefs(&tags);
    assert!(
        links.iter().any(|l| l == "https://pr-7.preview.example/"),
        "{links:?}"
    );
    assert!(links.iter().all(|l| !l.contains("javascript")), "{links:?}");
    assert!(html.contains("octo/&lt;script&gt;") && !html.contains("octo/<script>"));
    assert!(html.contains("#7") && html.contains("success"));
    // Each row tears its preview down through the dashboard's own route.
    assert!(
        html.contains("/ui/previews/octo%2F%3Cscript%3E%3A7/teardown"),
        "{html}"
    );
    let empty = PreviewsPage {
        previews: vec![],
        truncated: false,
        actions: sluice::http::pages::Actions::ui(None),
    };
    let empty = render_previews(&empty, NOW);
    assert!(empty.contains("No preview is live."));
}

/// A unit of the pipeline `parent` started, as the index records it.
fn unit_row(
    parent: &str,
    job: &str,
    shard: Option<(u32, u32)>,
    conclusion: Option<&str>,
) -> ExecutionRow {
    let index = shard.map_or(0, |(i, _)| i);
    let mut row = exec(
        &format!("unit-{job}-{index}"),
        Some("octo/hello"),
        Some("pr:7"),
        "complete",
    );
    row.run = "check".into();
    row.key = format!("check:octo/hello:0123456789ab:pr7:job-{job}");
    let unit = serde_json::json!({
        "job": job, "cell": [], "shard": shard, "cell_index": 0,
    });
    row.input_json = serde_json::json!({ "wakes": parent, "job": unit }).to_string();
    match conclusion {
        Some(c) => row.output_json = Some(serde_json::json!({ "conclusion": c }).to_string()),
        None => {
            row.status = "running".into();
            row.finished_ms = None;
        }
    }
    row
}

/// A pipeline reads as its jobs' outcomes: stages left to right by needs,
/// a failed job as failed, the job it blocked as skipped naming why, each
/// unit linked to its execution; a running pipeline shows the units so far.
#[test]
fn a_pipeline_shows_each_job_outcome_in_needs_order() {
    let output = serde_json::json!({ "conclusion": "failure", "pipeline": [
        { "name": "lint", "result": "passed" },
        { "name": "test", "result": "failed" },
        { "name": "e2e", "needs": ["test"], "result": "blocked", "why": "`test`, which it needs, failed" },
    ]})
    .to_string();
    let units = [
        unit_row("p1", "lint", None, Some("success")),
        unit_row("p1", "test", Some((1, 2)), Some("failure")),
        unit_row("p1", "test", Some((2, 2)), Some("cancelled")),
    ];
    let view = sluice::http::pages::pipeline::view(Some(&output), &units).expect("a pipeline");
    let stages: Vec<(&str, usize)> = view
        .jobs
        .iter()
        .map(|j| (j.name.as_str(), j.stage))
        .collect();
    assert_eq!(stages, [("lint", 0), ("test", 0), ("e2e", 1)]);
    assert_eq!(
        view.jobs[1].units.len(),
        2,
        "the shards grouped under their job"
    );
    let mut page = exec_page("complete");
    page.pipeline = Some(view);
    let html = render_execution(&page, NOW);
    assert!(html.contains("id=\"pipeline\" data-live"));
    assert_eq!(count(&html, "<div class=\"stage\">"), 2);
    assert!(html.contains("<div class=\"job job-failed\"><p class=\"job-head\"><strong>test</strong> <span class=\"st st-failed\">failed</span>"), "{html}");
    assert!(html.contains(
        "<strong>e2e</strong> <span class=\"st st-skipped\">skipped: a need failed</span>"
    ));
    assert!(html.contains("<p class=\"needs\">needs ← test</p>"));
    assert!(html.contains("`test`, which it needs, failed"));
    assert!(hrefs(&parse(&html)).contains(&"/ui/executions/unit-test-2".to_owned()));
    assert!(
        html.contains(">sluice/test (2/2)</a> <span class=\"st st-cancelled\""),
        "{html}"
    );

    // After a restart, the pipeline is the newest generation's units alone.
    let mut again = unit_row("p1", "test", Some((1, 2)), Some("success"));
    again.id = "unit-test-1-g1".into();
    again.key.push_str("-p1tail.g1");
    let restarted = [units[1].clone(), units[2].clone(), again];
    let view = sluice::http::pages::pipeline::view(Some(&output), &restarted).expect("a pipeline");
    let test_units: Vec<&str> = view.jobs[1].units.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(
        test_units,
        ["unit-test-1-g1"],
        "the older generation's units are gone"
    );

    let running = [unit_row("p2", "lint", None, None)];
    let live = sluice::http::pages::pipeline::view(None, &running).expect("units so far");
    assert_eq!(live.jobs.len(), 1);
    assert_eq!(live.jobs[0].result, "running");
    assert!(
        sluice::http::pages::pipeline::view(None, &[]).is_none(),
        "no pipeline"
    );
}
