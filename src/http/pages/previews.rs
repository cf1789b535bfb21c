//! `/ui/previews`: the live pull-request previews (issue 24) as the
//! `previews` index holds them: the pull request, the commit it shows, its
//! URL, its age and how its last deploy ended. Every value is escaped; a
//! URL becomes a link only when it is a web URL (`Url::checked`).

use crate::store::previews::PreviewRow;

use super::actions::{self, Action, Actions, Fields};
use super::escape::{Html, Url};
use super::layout::{self, cell, Nav, REFRESH_MS};

/// What the previews page shows. The caller fills it.
#[derive(Debug, Clone, PartialEq)]
pub struct PreviewsPage {
    /// Live previews, the most recently updated first.
    pub previews: Vec<PreviewRow>,
    /// More are live than are listed (the store lists a bounded number).
    pub truncated: bool,
    /// Where each row's Tear down form posts.
    pub actions: Actions,
}

/// The page.
pub fn render(page: &PreviewsPage, now_ms: i64) -> String {
    let mut h = Html::new();
    h.raw("<h1>Previews</h1><section id=\"previews\" data-live class=\"previews\">");
    if page.previews.is_empty() {
        h.raw("<p class=\"empty\">No preview is live.</p></section>");
    } else {
        h.raw("<table><thead><tr><th>Repository</th><th>Pull request</th><th>Commit</th>")
            .raw("<th>URL</th><th>Updated</th><th>Last deploy</th><th>Execution</th>")
            .raw("<th></th></tr></thead><tbody>");
        for p in &page.previews {
            row(&mut h, p, &page.actions, now_ms);
        }
        h.raw("</tbody></table></section>");
    }
    if page.truncated {
        h.raw("<p class=\"note\">Only the most recently updated are listed.</p>");
    }
    layout::page("Previews", Nav::Previews, REFRESH_MS, now_ms, &h)
}

fn row(h: &mut Html, p: &PreviewRow, actions: &Actions, now_ms: i64) {
    h.raw("<tr>");
    cell(h, "Repository", |h| {
        h.text(&p.repo);
    });
    cell(h, "Pull request", |h| {
        h.raw("#").num(p.pr);
    });
    cell(h, "Commit", |h| layout::revision(h, Some(&p.sha)));
    cell(h, "URL", |h| match p.url.as_deref() {
        Some(u) => match Url::checked(u).filter(|_| u.starts_with("https://")) {
            Some(url) => {
                h.raw("<a rel=\"noopener noreferrer\"")
                    .href(&url)
                    .raw(">")
                    .text(u)
                    .raw("</a>");
            }
            None => {
                h.text(u);
            }
        },
        None => layout::dash(h),
    });
    cell(h, "Updated", |h| layout::time_el(h, p.updated_ms, now_ms));
    cell(h, "Last deploy", |h| {
        layout::opt_text(h, p.result.as_deref())
    });
    cell(h, "Execution", |h| layout::exec_link(h, &p.execution_id));
    cell(h, "Tear down", |h| {
        let target = format!("{}:{}", p.repo, p.pr);
        actions::form(h, actions, Action::Teardown, &target, Fields::None);
    });
    h.raw("</tr>");
}
