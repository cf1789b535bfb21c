//! Everything that knows GitHub's JSON: webhook signatures and payloads,
//! the App JWT and installation tokens, and the REST calls Sluice makes.
//!
//! Architecture invariant: no other module parses or builds GitHub JSON.

pub mod app;
pub mod client;
pub mod webhook;

pub use client::{CheckConclusion, CheckOutput, CheckRunUpdate, GitHub, GitHubError};
