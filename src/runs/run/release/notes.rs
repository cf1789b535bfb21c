//! Release notes as pure decisions: which tags a glob selects, how tags
//! order (so "newer" means the later version, not the later push), which
//! tag a release follows, which pull requests a commit range merged, and
//! the notes' Markdown. No I/O: `runs::release` feeds it what GitHub said.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::github::releases::{CommitInfo, PullInfo, ReleaseKind, Tag};

/// Characters of a commit id the notes show.
const SHORT_SHA_CHARS: usize = 7;
/// Where pull requests without a label go.
pub const UNLABELED: &str = "Other changes";

/// Whether `name` matches `glob`: `*` any run of characters (also none),
/// `?` exactly one; everything else itself. Iterative, with one backtrack
/// point, so a hostile glob costs at most `glob.len() * name.len()` steps.
pub fn glob_match(glob: &str, name: &str) -> bool {
    let (g, n): (Vec<char>, Vec<char>) = (glob.chars().collect(), name.chars().collect());
    let (mut gi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match g.get(gi) {
            Some('*') => {
                star = Some((gi, ni));
                gi += 1;
            }
            Some(c) if *c == '?' || *c == n[ni] => {
                gi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sg, sn)) => {
                    gi = sg + 1;
                    ni = sn + 1;
                    star = Some((sg, sn + 1));
                }
                None => return false,
            },
        }
    }
    g[gi..].iter().all(|c| *c == '*')
}

/// Tags in version order: runs of digits compare as numbers (`v1.10` after
/// `v1.9`), everything else as text; a pre-release (`-rc1` after the
/// version's digits) comes before its release, as semver orders them;
/// equal versions by their text.
pub fn tag_cmp(a: &str, b: &str) -> Ordering {
    let ((ca, pre_a), (cb, pre_b)) = (split_pre(a), split_pre(b));
    parts_cmp(ca, cb)
        .then_with(|| match (pre_a, pre_b) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(x), Some(y)) => parts_cmp(x, y),
        })
        .then_with(|| a.cmp(b))
}

/// The version and its pre-release: split at the first `-` after a digit.
fn split_pre(s: &str) -> (&str, Option<&str>) {
    let Some(first_digit) = s.find(|c: char| c.is_ascii_digit()) else {
        return (s, None);
    };
    match s[first_digit..].find('-') {
        Some(i) => (&s[..first_digit + i], Some(&s[first_digit + i + 1..])),
        None => (s, None),
    }
}

fn parts_cmp(a: &str, b: &str) -> Ordering {
    let (pa, pb) = (parts(a), parts(b));
    for (x, y) in pa.iter().zip(pb.iter()) {
        let o = match (x, y) {
            (Part::Num(x), Part::Num(y)) => x.cmp(y),
            (Part::Text(x), Part::Text(y)) => x.cmp(y),
            (Part::Num(_), Part::Text(_)) => Ordering::Greater,
            (Part::Text(_), Part::Num(_)) => Ordering::Less,
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    pa.len().cmp(&pb.len())
}

#[derive(Debug, PartialEq, Eq)]
enum Part<'a> {
    /// Leading zeros dropped; compared by length first, then digits, so a
    /// number of any size compares without overflow.
    Num((usize, &'a str)),
    Text(&'a str),
}

fn parts(s: &str) -> Vec<Part<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = s.as_bytes();
    while start < bytes.len() {
        let digit = bytes[start].is_ascii_digit();
        let mut end = start;
        while end < bytes.len() && bytes[end].is_ascii_digit() == digit {
            end += 1;
        }
        let run = &s[start..end];
        out.push(if digit {
            let trimmed = run.trim_start_matches('0');
            Part::Num((trimmed.len(), trimmed))
        } else {
            Part::Text(run)
        });
        start = end;
    }
    out
}

/// The tag this release follows: the greatest tag matching `glob` that
/// orders before `tag` (None for a first release).
pub fn previous_tag<'t>(tags: &'t [Tag], glob: &str, tag: &str) -> Option<&'t Tag> {
    tags.iter()
        .filter(|t| t.name != tag && glob_match(glob, &t.name))
        .filter(|t| tag_cmp(&t.name, tag) == Ordering::Less)
        .max_by(|a, b| tag_cmp(&a.name, &b.name))
}

/// Whether `tag` names a pre-release: a `-` part after its version that
/// carries a letter (`v2.0.0-rc1`, `v1.0.0-beta.2`), not a date's
/// (`release-2024-01`).
pub fn is_prerelease(tag: &str) -> bool {
    split_pre(tag)
        .1
        .is_some_and(|p| p.chars().any(|c| c.is_ascii_alphabetic()))
}

/// How `tag` is published, given the tag of GitHub's "Latest" release now:
/// a pre-release never takes it; a release takes it unless the one shown
/// is a later version of the same line (a release of another `glob` line
/// is not compared). An older version released late must not become
/// "Latest".
pub fn release_kind(tag: &str, latest_now: Option<&str>, glob: &str) -> ReleaseKind {
    let prerelease = is_prerelease(tag);
    let behind = latest_now
        .filter(|l| glob_match(glob, l))
        .is_some_and(|l| tag_cmp(tag, l) == Ordering::Less);
    ReleaseKind {
        prerelease,
        latest: !prerelease && !behind,
    }
}

/// The pull request a commit merged, from its message as GitHub writes
/// it: a merge commit's `Merge pull request #12 from ...`, a squash's
/// subject ending in `(#12)`.
pub fn pull_of(message: &str) -> Option<u64> {
    let subject = message.lines().next().unwrap_or_default().trim();
    if let Some(rest) = subject.strip_prefix("Merge pull request #") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        return digits.parse().ok();
    }
    let inner = subject.strip_suffix(')')?.rsplit_once("(#")?.1;
    inner.parse().ok()
}

/// What the notes are made of.
pub struct NotesInput<'a> {
    pub tag: &'a str,
    pub previous: Option<&'a str>,
    pub commits: &'a [CommitInfo],
    /// The pull requests the commits name, as GitHub answered (merged ones
    /// are listed; the rest fall back to their commits).
    pub pulls: &'a [PullInfo],
}

/// The notes' Markdown: merged pull requests grouped by their first label
/// (labels in name order, unlabeled last), each crediting its author; the
/// commits that belong to no merged pull request by their subjects; the
/// contributors.
pub fn render(n: &NotesInput<'_>) -> String {
    let merged: BTreeMap<u64, &PullInfo> = n
        .pulls
        .iter()
        .filter(|p| p.merged)
        .map(|p| (p.number, p))
        .collect();
    let mut groups: BTreeMap<(bool, &str), Vec<&PullInfo>> = BTreeMap::new();
    for p in merged.values() {
        let label = p.labels.first().map(String::as_str);
        groups
            .entry((label.is_none(), label.unwrap_or(UNLABELED)))
            .or_default()
            .push(p);
    }
    let mut authors: Vec<String> = Vec::new();
    let mut credit = |who: &Option<String>| {
        if let Some(w) = who.as_ref().filter(|w| !authors.contains(w)) {
            authors.push(w.clone());
        }
    };
    let mut out = format!("## {}\n", n.tag);
    for ((_, label), pulls) in &groups {
        out.push_str(&format!("\n### {label}\n\n"));
        for p in pulls {
            credit(&p.author);
            let title = clip(&p.title);
            out.push_str(&format!("- {title} (#{}){}\n", p.number, by(&p.author)));
        }
    }
    let loose: Vec<&CommitInfo> = n
        .commits
        .iter()
        .filter(|c| pull_of(&c.message).is_none_or(|num| !merged.contains_key(&num)))
        .collect();
    if !loose.is_empty() {
        out.push_str("\n### Commits\n\n");
        for c in loose {
            credit(&c.author);
            let subject = clip(c.message.lines().next().unwrap_or_default());
            let short = c.sha.get(..SHORT_SHA_CHARS).unwrap_or(&c.sha);
            out.push_str(&format!("- {short} {subject}{}\n", by(&c.author)));
        }
    }
    if merged.is_empty() && n.commits.is_empty() {
        out.push_str("\nNo changes since the previous release.\n");
    }
    if !authors.is_empty() {
        let names: Vec<String> = authors.iter().map(|a| format!("@{a}")).collect();
        out.push_str(&format!("\n**Contributors:** {}\n", names.join(", ")));
    }
    match n.previous {
        Some(p) => out.push_str(&format!("\n**Full changelog:** {p}...{}\n", n.tag)),
        None => out.push_str("\nThe first release.\n"),
    }
    capped(out)
}

/// One line of the notes (a title, a subject) is at most this many
/// characters: one long subject must not crowd out the rest.
const LINE_CHARS_MAX: usize = 300;
/// The notes in all: under GitHub's 65,536-character pull request body
/// (which adds a footer) and 125,000-character release body.
pub const NOTES_CHARS_MAX: usize = 60_000;

fn clip(line: &str) -> String {
    if line.chars().count() <= LINE_CHARS_MAX {
        return line.to_owned();
    }
    let kept: String = line.chars().take(LINE_CHARS_MAX).collect();
    format!("{kept}…")
}

fn capped(notes: String) -> String {
    if notes.chars().count() <= NOTES_CHARS_MAX {
        return notes;
    }
    let mut kept: String = notes.chars().take(NOTES_CHARS_MAX).collect();
    if let Some(cut) = kept.rfind('\n') {
        kept.truncate(cut + 1);
    }
    kept.push_str("\n…and more: the notes were cut at 60,000 characters.\n");
    kept
}

fn by(author: &Option<String>) -> String {
    author
        .as_ref()
        .map_or_else(String::new, |a| format!(" by @{a}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_shells_do() {
        assert!(glob_match("v*", "v1.2.0"));
        assert!(glob_match("v*", "v"));
        assert!(!glob_match("v*", "release-1"));
        assert!(glob_match("v?.*", "v1.0"));
        assert!(!glob_match("v?.*", "v10.0"));
        assert!(glob_match("*-rc*", "v1-rc2"));
        assert!(glob_match("v1.2.0", "v1.2.0"));
        assert!(!glob_match("", "v1"));
        assert!(glob_match(&"*".repeat(50), &"a".repeat(200)));
    }

    #[test]
    fn notes_are_capped_per_line_and_in_all() {
        let long = "x".repeat(LINE_CHARS_MAX + 50);
        assert_eq!(clip(&long).chars().count(), LINE_CHARS_MAX + 1);
        let big = "line\n".repeat(NOTES_CHARS_MAX);
        let cut = capped(big);
        assert!(cut.chars().count() < NOTES_CHARS_MAX + 100);
        assert!(cut.ends_with("cut at 60,000 characters.\n"));
    }

    #[test]
    fn tags_order_as_versions() {
        assert_eq!(tag_cmp("v1.10.0", "v1.9.0"), Ordering::Greater);
        assert_eq!(tag_cmp("v2", "v10"), Ordering::Less);
        assert_eq!(tag_cmp("v1.2", "v1.2.1"), Ordering::Less);
        // A pre-release comes before its release, and after the one before.
        assert_eq!(tag_cmp("v2.0.0-rc1", "v2.0.0"), Ordering::Less);
        assert_eq!(tag_cmp("v2.0.0-rc2", "v2.0.0-rc10"), Ordering::Less);
        assert_eq!(tag_cmp("v2.0.0-rc1", "v1.9.9"), Ordering::Greater);
        assert_eq!(tag_cmp("release-2", "release-10"), Ordering::Less);
        assert_eq!(
            tag_cmp("v01", "v1"),
            Ordering::Less,
            "equal versions by text"
        );
        let huge = format!("v{}", "9".repeat(60));
        assert_eq!(tag_cmp(&huge, "v1"), Ordering::Greater);
    }

    fn tag(name: &str) -> Tag {
        Tag {
            name: name.into(),
            sha: "a".repeat(40),
        }
    }

    #[test]
    fn a_release_follows_the_greatest_earlier_matching_tag() {
        let tags = [tag("v1.9.0"), tag("v1.10.0"), tag("v2.0.0"), tag("nightly")];
        let prev = previous_tag(&tags, "v*", "v1.11.0").map(|t| t.name.as_str());
        assert_eq!(prev, Some("v1.10.0"));
        assert_eq!(previous_tag(&tags, "v*", "v1.0.0"), None);
    }

    #[test]
    fn merge_and_squash_subjects_name_their_pull_request() {
        assert_eq!(
            pull_of("Merge pull request #12 from ana/fix\n\nFix"),
            Some(12)
        );
        assert_eq!(pull_of("Fix the parser (#34)"), Some(34));
        assert_eq!(pull_of("Fix the parser"), None);
        assert_eq!(pull_of("Odd (#x)"), None);
    }

    #[test]
    fn notes_group_pulls_by_label_credit_authors_and_fall_back_to_commits() {
        let commit = |sha: char, message: &str, author: &str| CommitInfo {
            sha: sha.to_string().repeat(40),
            message: message.into(),
            author: Some(author.into()),
        };
        let commits = [
            commit('a', "Merge pull request #3 from ana/fix", "ana"),
            commit('b', "Add a flag (#4)", "bo"),
            commit('c', "Tidy the docs", "carl"),
        ];
        let pull = |number: u64, title: &str, author: &str, labels: &[&str]| PullInfo {
            number,
            title: title.into(),
            author: Some(author.into()),
            labels: labels.iter().map(|l| l.to_string()).collect(),
            state: "closed".into(),
            merged: true,
        };
        let pulls = [
            pull(3, "Fix the crash", "ana", &["bug"]),
            pull(4, "Add a flag", "bo", &[]),
        ];
        let notes = render(&NotesInput {
            tag: "v1.1.0",
            previous: Some("v1.0.0"),
            commits: &commits,
            pulls: &pulls,
        });
        let bug = notes.find("### bug").unwrap();
        let other = notes.find("### Other changes").unwrap();
        assert!(bug < other, "{notes}");
        assert!(notes.contains("- Fix the crash (#3) by @ana"), "{notes}");
        assert!(
            notes.contains("- ccccccc Tidy the docs by @carl"),
            "{notes}"
        );
        assert!(
            !notes.contains("aaaaaaa"),
            "a merged pull request's commit is not repeated"
        );
        assert!(
            notes.contains("**Contributors:** @ana, @bo, @carl"),
            "{notes}"
        );
        assert!(notes.contains("v1.0.0...v1.1.0"), "{notes}");
    }

    #[test]
    fn a_release_takes_latest_unless_it_is_a_prerelease_or_behind_the_one_shown() {
        let kind = |tag, now| release_kind(tag, now, "v*");
        assert!(kind("v1.2.0", None).latest, "the first release");
        assert!(kind("v1.10.0", Some("v1.9.0")).latest);
        assert!(kind("v1.9.1", Some("v1.9.0")).latest);
        assert!(
            !kind("v1.9.1", Some("v1.10.0")).latest,
            "a hotfix of an older line"
        );
        let rc = kind("v2.0.0-rc1", Some("v1.9.0"));
        assert!(
            rc.prerelease && !rc.latest,
            "a pre-release never takes Latest"
        );
        // After a pre-release, its line's next release still does.
        assert!(kind("v1.9.2", Some("v1.9.1")).latest);
        // Another line's release is not compared.
        assert!(kind("v1.0.0", Some("tools-9.0")).latest);
        assert!(
            !is_prerelease("release-2024-01"),
            "a date is not a pre-release"
        );
        assert!(is_prerelease("v1.0.0-beta.2"));
        assert!(!is_prerelease("v1.0.0"));
    }
}
