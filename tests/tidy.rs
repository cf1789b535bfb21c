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
        .map(|p| {
            // An unreadable file must fail the check, not pass it as empty.
            let text = fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

/// The text of Rust source without its comments (line comments and doc
/// comments), so a module may mention what it does not use.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Architecture invariant: only `worker_glue` (and the entry shells in
/// `lib.rs`) know the `worker` crate; everything else is tested natively.
#[test]
fn logic_is_free_of_worker_types() {
    for module in [
        "engine", "gates", "runs", "http", "store", "github", "sandbox", "net", "blobs", "secret",
        "limits", "obs",
    ] {
        for (path, text) in files_of(module) {
            let code = code_of(&text);
            for js in [
                "worker::",
                "use worker",
                "js_sys",
                "wasm_bindgen",
                "web_sys",
            ] {
                assert!(
                    !code.contains(js),
                    "{} names {js}; move that code to src/worker_glue/",
                    path.display()
                );
            }
        }
    }
}

/// The module tree is the dependency graph, and it has no cycles: each
/// module uses only the modules below it in this order (a module may use
/// any module of a lower layer).
const LAYERS: &[&[&str]] = &[
    &["limits", "secret", "net", "blobs", "clock", "obs", "cost"],
    &["journal"],
    &["store"],
    &["engine"],
    &["gates", "sandbox", "github"],
    &["runs"],
    &["http"],
    &["worker_glue"],
];

#[test]
fn modules_depend_only_on_lower_layers() {
    let layer_of = |m: &str| LAYERS.iter().position(|l| l.contains(&m));
    for (layer, modules) in LAYERS.iter().enumerate() {
        for module in *modules {
            for (path, text) in files_of(module) {
                let code = code_of(&text);
                for used in code.split("crate::").skip(1) {
                    let name: String = used
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if name == *module || name == "stmt" {
                        continue;
                    }
                    let used_layer = layer_of(&name).unwrap_or_else(|| {
                        panic!("{} uses crate::{name}, in no layer", path.display())
                    });
                    assert!(
                        used_layer < layer,
                        "{} ({module}, layer {layer}) uses crate::{name} (layer {used_layer}): \
                         a module uses only lower layers",
                        path.display()
                    );
                }
            }
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
/// the top-level documents must be in the repository, and every
/// `path/like/this.rs::name` must name a function (or item) in that file.
#[test]
fn documents_cite_existing_files() {
    for doc in ["README.md", "ARCHITECTURE.md"] {
        let text = fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
        for (i, chunk) in text.split('`').enumerate() {
            if i % 2 == 1 {
                check_item_citation(doc, chunk);
            }
            // Odd chunks are inside backticks.
            if i % 2 == 0
                || chunk.contains(' ')
                || chunk.contains('*')
                || chunk.contains('{')
                || chunk.contains('<')
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

/// `file.rs::name` (or `file.rs::Type::name`): the file exists and defines
/// the last name (`fn name`, `struct name`, `mod name`, ...).
fn check_item_citation(doc: &str, chunk: &str) {
    let Some((file, item)) = chunk.split_once(".rs::") else {
        return;
    };
    if chunk.contains(' ') || !file.contains('/') {
        return;
    }
    let path = root().join(format!("{file}.rs"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc} cites {chunk}: {e}"));
    let name = item.rsplit("::").next().unwrap_or(item);
    let defined = [
        "fn ", "struct ", "enum ", "mod ", "trait ", "const ", "type ",
    ]
    .iter()
    .any(|kw| text.contains(&format!("{kw}{name}")));
    assert!(
        defined,
        "{doc} cites {chunk}, but {file}.rs defines no {name}"
    );
}

/// Every migration explains itself: a header comment before any SQL.
#[test]
fn migrations_have_headers() {
    let dir = root().join("migrations");
    let mut n = 0;
    for e in fs::read_dir(&dir).expect("migrations dir").flatten() {
        let text = fs::read_to_string(e.path())
            .unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
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
