//! Instance keys: the idempotency key of every instance a trigger, a
//! dispatch, a schedule or a re-run makes (ADR-0001 rule 1,
//! docs/adr/0001-durable-execution-scope.md). Built and parsed here only.
//!
//! `<run>:<owner/repo>:<subject>[:<attempt>]`, where the subject is
//! - a check: `<sha12>` or `<sha12>:pr<n>` (two pull requests at one commit
//!   are two checks), and a pipeline job's unit that check starts
//!   `…:job-<unit>-<parent12>`;
//! - a deploy: `<branch>:<sha12>[:<before12>]` (a push's `before` makes a
//!   rollback a new deploy and a redelivery the same one);
//! - release notes: `<tag>:<sha12>:<push>` (the push as its signed body
//!   names it);
//! - schedules: `<sha12>:<before12>`;
//! - a dispatch: `dispatch-<signature16>` or `dispatch-oidc-<token id>`;
//! - ending checks: `pull:<n>:closed-<closed at, s>` (a pull request GitHub
//!   closed) or `group:<queue branch>:destroyed` (a merge queue group);
//!
//! and the attempt, when there is one, `rerun-…` (GitHub's Re-run) or
//! `schedule-…` (a schedule's slot). Git forbids `:` in branch and tag
//! names and GitHub in repository names, so `:` separates fields.

use std::fmt;

use super::inputs::PullNumber;

/// Characters of a sha in a key: as in ADR-0001's examples.
pub const KEY_SHA_CHARS: usize = 12;

const RERUN_PREFIX: &str = "rerun-";
const SCHEDULE_PREFIX: &str = "schedule-";
const DISPATCH_PREFIX: &str = "dispatch-";
const JOB_PREFIX: &str = "job-";

/// A parsed instance key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceKey {
    /// The run's name (`Run::NAME`).
    pub run: String,
    pub repo: String,
    pub subject: Subject,
    pub attempt: Option<Attempt>,
}

/// What the instance is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    Check {
        sha: String,
        pr: Option<PullNumber>,
        /// A pipeline job's unit: `job-<unit>-<parent>` (`JobUnit::key_part`
        /// and the tail of the parent's id, so a parent's re-run starts
        /// children of its own).
        job: Option<String>,
    },
    Deploy {
        branch: String,
        sha: String,
        before: Option<String>,
    },
    Release {
        tag: String,
        sha: String,
        push: String,
    },
    Schedules {
        sha: String,
        before: String,
    },
    /// `dispatch-…`: named by the request's token or signature.
    Dispatch {
        proof: String,
    },
    /// The end of what live checks were for: `pull:<n>:<when>` or
    /// `group:<branch>:<when>`.
    Cancel {
        of: CancelScope,
        when: String,
    },
    /// A pull request's preview of a head: `pr<n>:<sha12>:<arrival>`
    /// (`opened`, `s<before12>` for a push, `reopened-<s>`, `ready-<s>`),
    /// or its teardown: `pr<n>:closed-<closed at, s>`.
    Preview {
        pr: PullNumber,
        sha: Option<String>,
        arrival: String,
    },
}

/// Whose checks a `Subject::Cancel` ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelScope {
    Pull(PullNumber),
    Group(String),
}

/// Which attempt of its subject an instance is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// A Re-run: `rerun-<what was rerequested>-<suite updated, s>`.
    Rerun(String),
    /// A schedule's slot: `schedule-<schedule>-<slot, s>`.
    Schedule(String),
}

/// The first `KEY_SHA_CHARS` of a sha (all of a shorter one).
pub fn short(sha: &str) -> &str {
    sha.get(..KEY_SHA_CHARS).unwrap_or(sha)
}

impl Attempt {
    /// `rerun-<rest>` or `schedule-<rest>` as it appears in a key.
    pub fn parse(s: &str) -> Option<Attempt> {
        if let Some(rest) = s.strip_prefix(RERUN_PREFIX) {
            return Some(Attempt::Rerun(rest.to_owned()));
        }
        s.strip_prefix(SCHEDULE_PREFIX)
            .map(|rest| Attempt::Schedule(rest.to_owned()))
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attempt::Rerun(rest) => write!(f, "{RERUN_PREFIX}{rest}"),
            Attempt::Schedule(rest) => write!(f, "{SCHEDULE_PREFIX}{rest}"),
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Check { sha, pr, job } => {
                write!(f, "{}", short(sha))?;
                if let Some(n) = pr {
                    write!(f, ":pr{n}")?;
                }
                match job {
                    Some(j) => write!(f, ":{JOB_PREFIX}{j}"),
                    None => Ok(()),
                }
            }
            Subject::Deploy {
                branch,
                sha,
                before,
            } => {
                write!(f, "{branch}:{}", short(sha))?;
                match before {
                    Some(b) => write!(f, ":{}", short(b)),
                    None => Ok(()),
                }
            }
            Subject::Release { tag, sha, push } => write!(f, "{tag}:{}:{push}", short(sha)),
            Subject::Schedules { sha, before } => write!(f, "{}:{}", short(sha), short(before)),
            Subject::Dispatch { proof } => write!(f, "{DISPATCH_PREFIX}{proof}"),
            Subject::Cancel {
                of: CancelScope::Pull(n),
                when,
            } => write!(f, "pull:{n}:{when}"),
            Subject::Cancel {
                of: CancelScope::Group(branch),
                when,
            } => write!(f, "group:{branch}:{when}"),
            Subject::Preview {
                pr,
                sha: Some(sha),
                arrival,
            } => write!(f, "pr{pr}:{}:{arrival}", short(sha)),
            Subject::Preview {
                pr,
                sha: None,
                arrival,
            } => write!(f, "pr{pr}:{arrival}"),
        }
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.run, self.repo, self.subject)?;
        match &self.attempt {
            Some(a) => write!(f, ":{a}"),
            None => Ok(()),
        }
    }
}

impl InstanceKey {
    pub fn new(run: &str, repo: &str, subject: Subject) -> InstanceKey {
        InstanceKey {
            run: run.to_owned(),
            repo: repo.to_owned(),
            subject,
            attempt: None,
        }
    }

    pub fn with_attempt(mut self, attempt: Option<Attempt>) -> InstanceKey {
        self.attempt = attempt;
        self
    }

    /// A key as built here, or None. The run decides how its subject reads;
    /// a dispatch's subject reads the same for every run.
    pub fn parse(key: &str) -> Option<InstanceKey> {
        let mut fields: Vec<&str> = key.split(':').collect();
        if fields.len() < 3 || fields.iter().any(|f| f.is_empty()) {
            return None;
        }
        let attempt = match fields.last().and_then(|l| Attempt::parse(l)) {
            Some(a) if fields.len() > 3 => {
                fields.pop();
                Some(a)
            }
            _ => None,
        };
        let (run, repo, rest) = (fields[0], fields[1], &fields[2..]);
        let subject = parse_subject(run, rest)?;
        Some(InstanceKey {
            run: run.to_owned(),
            repo: repo.to_owned(),
            subject,
            attempt,
        })
    }

    /// The key every attempt of this subject shares: without the attempt.
    pub fn base(&self) -> InstanceKey {
        self.clone().with_attempt(None)
    }
}

/// The key `key`'s attempts share: itself without an attempt. A string
/// that is no key is its own base.
pub fn base_key(key: &str) -> String {
    InstanceKey::parse(key).map_or_else(|| key.to_owned(), |k| k.base().to_string())
}

/// A check's subject after its sha: `[pr<n>][:job-<unit>]`.
fn check_subject(sha: &str, tail: &[&str]) -> Option<Subject> {
    let pr_of = |f: &str| PullNumber::new(f.strip_prefix("pr")?.parse().ok()?);
    let job_of = |f: &str| f.strip_prefix(JOB_PREFIX).map(str::to_owned);
    let (pr, job) = match tail {
        [] => (None, None),
        [f] if f.starts_with(JOB_PREFIX) => (None, Some(job_of(f)?)),
        [f] => (Some(pr_of(f)?), None),
        [p, j] => (Some(pr_of(p)?), Some(job_of(j)?)),
        _ => return None,
    };
    Some(Subject::Check {
        sha: sha.to_owned(),
        pr,
        job,
    })
}

fn parse_subject(run: &str, rest: &[&str]) -> Option<Subject> {
    if let [proof] = rest {
        if let Some(proof) = proof.strip_prefix(DISPATCH_PREFIX) {
            return Some(Subject::Dispatch {
                proof: proof.to_owned(),
            });
        }
    }
    let owned = |s: &str| s.to_owned();
    match (run, rest) {
        ("check", [sha, tail @ ..]) => check_subject(sha, tail),
        ("deploy", [branch, sha]) => Some(Subject::Deploy {
            branch: owned(branch),
            sha: owned(sha),
            before: None,
        }),
        ("deploy", [branch, sha, before]) => Some(Subject::Deploy {
            branch: owned(branch),
            sha: owned(sha),
            before: Some(owned(before)),
        }),
        ("release-notes", [tag, sha, push]) => Some(Subject::Release {
            tag: owned(tag),
            sha: owned(sha),
            push: owned(push),
        }),
        ("schedules", [sha, before]) => Some(Subject::Schedules {
            sha: owned(sha),
            before: owned(before),
        }),
        ("cancel-checks", ["pull", n, when]) => Some(Subject::Cancel {
            of: CancelScope::Pull(PullNumber::new(n.parse().ok()?)?),
            when: owned(when),
        }),
        ("cancel-checks", ["group", branch, when]) => Some(Subject::Cancel {
            of: CancelScope::Group(owned(branch)),
            when: owned(when),
        }),
        ("preview", [pr, sha, arrival]) => Some(Subject::Preview {
            pr: PullNumber::new(pr.strip_prefix("pr")?.parse().ok()?)?,
            sha: Some(owned(sha)),
            arrival: owned(arrival),
        }),
        ("preview-teardown" | "preview-reconcile", [pr, when]) => Some(Subject::Preview {
            pr: PullNumber::new(pr.strip_prefix("pr")?.parse().ok()?)?,
            sha: None,
            arrival: owned(when),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift): the property test's
    /// cases are the same on every run, so a failure replays.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// A name git and GitHub allow: letters, digits, `-`, `_`, `.`
        /// and `/` (no `:`), sometimes shaped like a prefix the grammar
        /// uses, to show positions, not prefixes, decide.
        fn name(&mut self) -> String {
            const ALPHABET: &[u8] = b"abcXYZ019-_./";
            const TRICKY: [&str; 4] = ["rerun-1", "schedule-x", "dispatch-y", "pr7"];
            if self.below(6) == 0 {
                return TRICKY[self.below(4) as usize].to_owned();
            }
            let len = 1 + self.below(12) as usize;
            (0..len)
                .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize] as char)
                .collect()
        }

        fn sha(&mut self) -> String {
            (0..KEY_SHA_CHARS)
                .map(|_| char::from_digit(self.below(16) as u32, 16).unwrap())
                .collect()
        }

        fn attempt(&mut self) -> Option<Attempt> {
            match self.below(3) {
                0 => None,
                1 => Some(Attempt::Rerun(format!(
                    "cr{}-{}",
                    self.below(999),
                    self.below(9)
                ))),
                _ => Some(Attempt::Schedule(format!(
                    "{}-{}",
                    self.sha(),
                    self.below(9)
                ))),
            }
        }

        fn key(&mut self) -> InstanceKey {
            let (run, subject) = match self.below(8) {
                0 => (
                    "check",
                    Subject::Check {
                        sha: self.sha(),
                        pr: PullNumber::new(self.below(3)),
                        job: (self.below(2) == 0)
                            .then(|| format!("test.m{}.s1-{}", self.below(4), self.sha())),
                    },
                ),
                1 => {
                    let before = (self.below(2) == 0).then(|| self.sha());
                    (
                        "deploy",
                        Subject::Deploy {
                            branch: self.name(),
                            sha: self.sha(),
                            before,
                        },
                    )
                }
                2 => (
                    "release-notes",
                    Subject::Release {
                        tag: self.name(),
                        sha: self.sha(),
                        push: self.sha(),
                    },
                ),
                3 => (
                    "schedules",
                    Subject::Schedules {
                        sha: self.sha(),
                        before: self.sha(),
                    },
                ),
                4 => ("check", Subject::Dispatch { proof: self.sha() }),
                5 => (
                    "cancel-checks",
                    Subject::Cancel {
                        of: CancelScope::Pull(PullNumber::new(1 + self.below(99)).unwrap()),
                        when: format!("closed-{}", self.below(9)),
                    },
                ),
                6 => (
                    "cancel-checks",
                    Subject::Cancel {
                        of: CancelScope::Group(self.name()),
                        when: "destroyed".to_owned(),
                    },
                ),
                _ => (
                    "deploy",
                    Subject::Dispatch {
                        proof: format!("oidc-{}", self.sha()),
                    },
                ),
            };
            let repo = format!("{}/{}", self.name(), self.name());
            InstanceKey::new(run, &repo, subject).with_attempt(self.attempt())
        }
    }

    /// Cases of the round-trip property: enough to meet every subject with
    /// every attempt and the tricky names many times, in well under a second.
    const ROUND_TRIP_CASES: usize = 5_000;

    #[test]
    fn every_key_parses_back_to_itself_and_its_base_drops_only_the_attempt() {
        let mut g = Gen(0x5eed_cafe_f00d);
        for _ in 0..ROUND_TRIP_CASES {
            let key = g.key();
            let text = key.to_string();
            assert_eq!(InstanceKey::parse(&text).as_ref(), Some(&key), "{text}");
            let base = key.base();
            assert_eq!(base_key(&text), base.to_string(), "{text}");
            assert!(text.starts_with(&base.to_string()), "{text}");
        }
    }

    #[test]
    fn keys_read_as_the_instances_made_before_they_were_typed() {
        let sha = "0123456789ab";
        let cases = [
            format!("check:octo/hello:{sha}"),
            format!("check:octo/hello:{sha}:pr7:rerun-cr9-1796403600"),
            format!("deploy:octo/hello:main:{sha}:000000000000"),
            "deploy:octo/hello:dispatch-0123456789abcdef:rerun-cr9-1796403600".to_owned(),
            format!("release-notes:octo/hello:v1.0.0:{sha}:{sha}-p1796403600"),
            format!("schedules:octo/hello:{sha}:{sha}"),
            format!("check:octo/hello:{sha}:schedule-abcdef012345-1796403600"),
            "cancel-checks:octo/hello:pull:7:closed-1796403600".to_owned(),
            format!("cancel-checks:octo/hello:group:gh-readonly-queue/main/pr-7-{sha}:destroyed"),
        ];
        for text in cases {
            let key = InstanceKey::parse(&text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(key.to_string(), text);
        }
        assert_eq!(InstanceKey::parse("check:octo/hello"), None);
        assert_eq!(
            InstanceKey::parse(&format!("check:octo/hello:{sha}:pr0")),
            None
        );
        assert_eq!(base_key("not a key"), "not a key");
    }
}
