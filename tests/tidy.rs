//! Repository-wide invariants, checked once (rust-analyzer's `tidy` habit):
//! the module tree is the dependency graph, SQL stays in the store and the
//! gates, and documents cite files that exist.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn files_of(module: &str) -> Vec<(PathBuf, String)> {
    let mut paths = Vec::new();
    rust_files(&root().join("src").join(module), &mut paths);
    let single = root().join("src").join(format!("{module}.rs"));
    if single.exists() {
        paths.push(single);
    }
    paths
        .into_iter()
        .map(|p| (p.clone(), fs::read_to_string(&p).unwrap_or_default()))
        .collect()
}

/// Architecture invariant: only `worker_glue` (and the entry shells in
/// `lib.rs`) know the `worker` crate; everything else is tested natively.
#[test]
fn logic_is_free_of_worker_types() {
    for module in [
        "engine", "gates", "runs", "http", "store", "github", "sandbox", "net", "blobs", "secret",
        "limits",
    ] {
        for (path, text) in files_of(module) {
            assert!(
                !text.contains("worker::") && !text.contains("use worker"),
                "{} names the worker crate; move that code to src/worker_glue/",
                path.display()
            );
        }
    }
}

/// Architecture invariant: SQL lives in `store` and `gates`, next to the
/// function that binds it.
#[test]
fn sql_stays_in_store_and_gates() {
    let sql_markers = [
        "INSERT INTO",
        "DELETE FROM",
        "CREATE TABLE",
        "SELECT seq",
        "UPDATE serial_queue",
        "UPDATE executions",
    ];
    for module in ["engine", "runs", "http", "github", "sandbox", "worker_glue"] {
        for (path, text) in files_of(module) {
            for m in sql_markers {
                assert!(
                    !text.contains(m),
                    "{} contains SQL ({m}); SQL belongs in src/store or src/gates",
                    path.display()
                );
            }
        }
    }
}

/// Docs cite files that exist: every `path/like/this.ext` in backticks in
/// the top-level documents must be in the repository.
#[test]
fn documents_cite_existing_files() {
    for doc in ["README.md", "ARCHITECTURE.md"] {
        let text = fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
        for (i, chunk) in text.split('`').enumerate() {
            // Odd chunks are inside backticks.
            if i % 2 == 0
                || chunk.contains(' ')
                || chunk.contains('*')
                || chunk.contains('{')
                || chunk.starts_with("http")
            {
                continue;
            }
            let looks_like_path = chunk.contains('/')
                && [".rs", ".sql", ".mjs", ".toml", ".md", ".sh", ".json"]
                    .iter()
                    .any(|ext| chunk.ends_with(ext));
            if looks_like_path && !chunk.starts_with('/') && !chunk.starts_with("../") {
                assert!(
                    root().join(chunk).exists(),
                    "{doc} cites {chunk}, which does not exist"
                );
            }
        }
    }
}

/// Every migration explains itself: a header comment before any SQL.
#[test]
fn migrations_have_headers() {
    let dir = root().join("migrations");
    let mut n = 0;
    for e in fs::read_dir(&dir).expect("migrations dir").flatten() {
        let text = fs::read_to_string(e.path()).unwrap_or_default();
        assert!(
            text.starts_with("-- "),
            "{} must start with a header comment",
            e.path().display()
        );
        assert!(
            text.contains("Why"),
            "{} must say why it exists",
            e.path().display()
        );
        n += 1;
    }
    assert!(n >= 3);
}
