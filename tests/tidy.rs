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
/// function that binds it. Statements are found by their verbs in the code
/// (comments may name them).
#[test]
fn sql_stays_in_store_and_gates() {
    let sql_markers = [
        "INSERT INTO",
        "DELETE FROM",
        "CREATE TABLE",
        "SELECT ",
        "UPDATE ",
    ];
    for module in ["engine", "runs", "http", "github", "sandbox", "worker_glue"] {
        for (path, text) in files_of(module) {
            let code = code_of(&text);
            for m in sql_markers {
                assert!(
                    !code.contains(m),
                    "{} contains SQL ({m}); SQL belongs in src/store or src/gates",
                    path.display()
                );
            }
        }
    }
}

/// The storeys of `src/runs/`, lowest first: a file may use its own
/// storey and the ones below it, never one above.
const RUN_STOREYS: [&str; 3] = ["kit", "run", "edge"];

/// Why a file of storey `storey` (in `src/runs/<storey>/<rest>`) may not
/// say what it says, or None. `crate::runs::<x>` must name a storey at or
/// below its own (not a re-export, which hides the storey); a run uses no
/// other run (`super::` in a run's top-level file is its own tests'
/// `super::*` only).
fn storey_violation(storey: &str, rest: &str, code: &str) -> Option<String> {
    let rank = RUN_STOREYS.iter().position(|s| *s == storey)?;
    for used in code.split("crate::runs::").skip(1) {
        let name: String = used
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        match RUN_STOREYS.iter().position(|s| *s == name) {
            Some(r) if r <= rank => {}
            Some(_) => return Some(format!("uses crate::runs::{name}, a storey above {storey}")),
            None => return Some(format!("uses crate::runs::{name}: name the storey")),
        }
    }
    if code.contains("super::super::") {
        return Some("reaches up with super::super::; name the storey".into());
    }
    let top_level_run = storey == "run" && !rest.contains('/');
    if top_level_run && code.split("super::").skip(1).any(|u| !u.starts_with('*')) {
        return Some("a run uses another run through super::".into());
    }
    None
}

/// Architecture invariant: `src/runs/` is built in storeys (kit, runs,
/// edge), each importing only the ones below it, with no circle inside a
/// storey (issue 22; ARCHITECTURE.md, "runs/ in storeys").
#[test]
fn runs_are_built_in_storeys() {
    let runs = root().join("src/runs");
    for (path, text) in files_of("runs") {
        let rel = path
            .strip_prefix(&runs)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let Some((storey, rest)) = rel.split_once('/') else {
            assert_eq!(
                rel, "mod.rs",
                "src/runs/{rel}: every file lives in a storey"
            );
            continue;
        };
        if let Some(why) = storey_violation(storey, rest, &code_of(&text)) {
            panic!("src/runs/{rel} {why}");
        }
    }
    for storey in RUN_STOREYS {
        let graph = storey_graph(storey);
        if let Some(circle) = a_circle(&graph) {
            panic!(
                "src/runs/{storey}: an import circle: {}",
                circle.join(" -> ")
            );
        }
    }
}

/// The modules of one storey and, for each, the storey's modules it uses
/// (`super::<m>` from a top-level file, or `crate::runs::<storey>::<m>`).
fn storey_graph(storey: &str) -> Vec<(String, Vec<String>)> {
    let dir = root().join("src/runs").join(storey);
    let mut modules: Vec<(String, String)> = Vec::new();
    for e in fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "mod" {
            continue;
        }
        let mut files = Vec::new();
        if p.is_dir() {
            rust_files(&p, &mut files);
        } else {
            files.push(p.clone());
        }
        let code: String = files
            .iter()
            .map(|f| code_of(&fs::read_to_string(f).unwrap()))
            .collect();
        modules.push((name, code));
    }
    let names: Vec<String> = modules.iter().map(|(n, _)| n.clone()).collect();
    modules
        .iter()
        .map(|(name, code)| {
            let uses = names
                .iter()
                .filter(|other| *other != name)
                .filter(|other| {
                    [
                        format!("super::{other}::"),
                        format!("super::{other};"),
                        format!("super::{other},"),
                        format!("crate::runs::{storey}::{other}"),
                    ]
                    .iter()
                    .any(|pat| code.contains(pat.as_str()))
                })
                .cloned()
                .collect();
            (name.clone(), uses)
        })
        .collect()
}

/// A circle in `graph`, as the modules along it, or None.
fn a_circle(graph: &[(String, Vec<String>)]) -> Option<Vec<String>> {
    fn visit(
        graph: &[(String, Vec<String>)],
        node: &str,
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.iter().any(|d| d == node) {
            return None;
        }
        path.push(node.to_owned());
        let edges = graph
            .iter()
            .find(|(n, _)| n == node)
            .map(|(_, e)| e.clone());
        for next in edges.unwrap_or_default() {
            if let Some(c) = visit(graph, &next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.push(node.to_owned());
        None
    }
    let mut done = Vec::new();
    graph
        .iter()
        .find_map(|(n, _)| visit(graph, n, &mut Vec::new(), &mut done))
}

#[test]
fn the_storey_check_sees_an_import_across_storeys() {
    assert_eq!(
        storey_violation("edge", "triggers.rs", "use crate::runs::run::check;"),
        None
    );
    assert!(storey_violation("kit", "gate.rs", "use crate::runs::run::deploy;").is_some());
    assert!(storey_violation("kit", "gate.rs", "use crate::runs::edge::sweep;").is_some());
    assert!(storey_violation("run", "check.rs", "use crate::runs::config;").is_some());
    assert!(storey_violation("run", "check.rs", "use super::deploy::X;").is_some());
    assert_eq!(
        storey_violation("run", "check.rs", "mod tests { use super::*; }"),
        None
    );
    assert_eq!(
        storey_violation("run", "release/notes.rs", "use super::Decision;"),
        None
    );
    let circle = |a: &str, b: &str| {
        vec![
            (a.to_owned(), vec![b.to_owned()]),
            (b.to_owned(), vec![a.to_owned()]),
        ]
    };
    assert!(a_circle(&circle("config", "schedule")).is_some());
    let line = vec![
        ("config".to_owned(), vec!["schedule".to_owned()]),
        ("schedule".to_owned(), vec![]),
    ];
    assert_eq!(a_circle(&line), None);
}

/// Every `ADR-NNNN` the code cites is a record in `docs/adr/`, and each
/// file that cites one names the record's file, so a reader can open it.
#[test]
fn adr_citations_name_records_that_exist() {
    let adr_dir = root().join("docs/adr");
    let records: Vec<String> = fs::read_dir(&adr_dir)
        .expect("docs/adr")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut paths = Vec::new();
    rust_files(&root().join("src"), &mut paths);
    rust_files(&root().join("crates"), &mut paths);
    for path in paths {
        let text = fs::read_to_string(&path).unwrap();
        for cited in text.split("ADR-").skip(1) {
            let num: String = cited.chars().take_while(char::is_ascii_digit).collect();
            if num.len() != 4 {
                continue;
            }
            let record = records.iter().find(|r| r.starts_with(&format!("{num}-")));
            let record = record.unwrap_or_else(|| {
                panic!("{} cites ADR-{num}, which docs/adr/ lacks", path.display())
            });
            assert!(
                text.contains(&format!("docs/adr/{record}")),
                "{} cites ADR-{num} without naming docs/adr/{record}",
                path.display()
            );
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

/// The tooling's `.mjs` files under `dir` (recursively), as paths relative to
/// the repository root with `/` separators.
fn mjs_files(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && p.file_name().is_some_and(|n| n != "node_modules") {
            mjs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "mjs") {
            let rel = p.strip_prefix(root()).expect("under the root");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The relative `.mjs` modules `text` imports or re-exports (`import ... from
/// './x.mjs'`, `export ... from`, `import('./x.mjs')`, over several lines or
/// one), resolved against `file`'s folder.
fn mjs_imports(file: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for lead in ["from ", "import(", "import "] {
        for (at, _) in text.match_indices(lead) {
            let rest = &text[at + lead.len()..];
            let Some(quote) = rest.chars().next().filter(|c| *c == '\'' || *c == '"') else {
                continue;
            };
            let Some(spec) = rest[1..].split(quote).next() else {
                continue;
            };
            if spec.starts_with('.') && spec.ends_with(".mjs") {
                out.push(resolve_mjs(file, spec));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `spec` (`./x.mjs`, `../../y/z.mjs`) from `file`'s folder, normalised.
fn resolve_mjs(file: &str, spec: &str) -> String {
    let mut parts: Vec<&str> = file.split('/').collect();
    parts.pop();
    for seg in spec.split('/') {
        match seg {
            "." | "" => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

/// How low a tooling folder stands: tools/ is the library, scripts/ use it,
/// tests/ use both. An import may only point to the same rank or lower.
fn tooling_rank(path: &str) -> usize {
    ["tools/", "scripts/", "tests/"]
        .iter()
        .position(|top| path.starts_with(top))
        .unwrap_or(usize::MAX)
}

/// The first upward import or import circle among `files` (path, text), or
/// None.
fn tooling_violation(files: &[(String, String)]) -> Option<String> {
    let graph: Vec<(String, Vec<String>)> = files
        .iter()
        .map(|(path, text)| (path.clone(), mjs_imports(path, text)))
        .collect();
    for (from, tos) in &graph {
        if let Some(to) = tos.iter().find(|to| tooling_rank(to) > tooling_rank(from)) {
            return Some(format!(
                "{from} imports {to}: tools/ must not import scripts/ or tests/, nor scripts/ tests/"
            ));
        }
    }
    a_circle(&graph).map(|c| format!("import circle: {}", c.join(" -> ")))
}

/// The tooling's module graph points down and has no circle: the stack
/// harness (tools/stack/) and the stand-in are libraries the scripts and the
/// tests import, never the other way round.
#[test]
fn tooling_imports_have_no_circle_and_point_down() {
    let mut paths = Vec::new();
    for dir in ["tools", "scripts", "tests"] {
        mjs_files(&root().join(dir), &mut paths);
    }
    assert!(
        paths.iter().any(|p| p == "tools/stack/index.mjs"),
        "the walk finds the harness: {paths:?}"
    );
    let files: Vec<(String, String)> = paths
        .into_iter()
        .map(|p| {
            let text = fs::read_to_string(root().join(&p)).unwrap_or_else(|e| panic!("{p}: {e}"));
            (p, text)
        })
        .collect();
    if let Some(violation) = tooling_violation(&files) {
        panic!("{violation}");
    }
}

#[test]
fn the_tooling_check_sees_an_upward_import_and_a_circle() {
    let file = |p: &str, t: &str| (p.to_owned(), t.to_owned());
    let fine = [
        file(
            "tests/e2e/check.test.mjs",
            "import {\n  startStack,\n} from '../../tools/stack/index.mjs';\nimport { x } from '../../scripts/demo.mjs';",
        ),
        file("scripts/demo.mjs", "import { y } from \"../tools/stack/index.mjs\";"),
        file("tools/stack/index.mjs", "export * from './env.mjs';\nimport { z } from 'node:fs';"),
        file("tools/stack/env.mjs", "// the values come from './nowhere' in prose"),
    ];
    assert_eq!(tooling_violation(&fine), None);
    let upward = [
        file(
            "tools/stack/index.mjs",
            "export * from '../../tests/e2e/harness.mjs';",
        ),
        file("tests/e2e/harness.mjs", ""),
    ];
    assert!(tooling_violation(&upward)
        .is_some_and(|v| v.contains("tools/stack/index.mjs imports tests/e2e/harness.mjs")));
    let dynamic = [file(
        "scripts/soak.mjs",
        "const m = await import('../tests/e2e/harness.mjs');",
    )];
    assert!(tooling_violation(&dynamic).is_some());
    let circle = [
        file(
            "scripts/bench.mjs",
            "import { benchAgent } from './bench-agent.mjs';",
        ),
        file(
            "scripts/bench-agent.mjs",
            "import { median } from './bench.mjs';",
        ),
    ];
    assert!(tooling_violation(&circle).is_some_and(|v| v.starts_with("import circle")));
}

/// Longest function in the Worker and the crates' libraries (STYLE.md).
const FN_LINES_MAX: usize = 70;
/// Longest function in tests and tools, whose setup is spelled out in place.
const TEST_FN_LINES_MAX: usize = 150;

/// `text` with the contents of comments, strings and character literals
/// replaced by spaces (newlines kept), so braces in them do not count.
/// Lifetimes and labels (`'a`) stay: they are not character literals.
fn blank_literals(text: &str) -> Vec<char> {
    let s: Vec<char> = text.chars().collect();
    let mut out = s.clone();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let mut i = 0;
    while i < s.len() {
        let at = |k: usize| s.get(k).copied().unwrap_or('\0');
        let end = if s[i] == '/' && at(i + 1) == '/' {
            (i..s.len()).find(|&k| s[k] == '\n').unwrap_or(s.len())
        } else if s[i] == '/' && at(i + 1) == '*' {
            block_comment_end(&s, i)
        } else if s[i] == '"' {
            quoted_end(&s, i, '"')
        } else if s[i] == 'r'
            && (i == 0 || !ident(s[i - 1]) || (s[i - 1] == 'b' && (i < 2 || !ident(s[i - 2]))))
        {
            let hashes = (i + 1..s.len()).take_while(|&k| s[k] == '#').count();
            if at(i + 1 + hashes) != '"' {
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let from = i + 2 + hashes;
            (from..s.len())
                .find(|&k| s[k..].starts_with(&close))
                .map_or(s.len(), |k| k + close.len())
        } else if s[i] == '\'' && (at(i + 1) == '\\' || (at(i + 2) == '\'' && at(i + 1) != '\'')) {
            quoted_end(&s, i, '\'')
        } else {
            i += 1;
            continue;
        };
        blank(&mut out, i, end);
        i = end;
    }
    out
}

/// Where a (nested) block comment opened at `from` ends.
fn block_comment_end(s: &[char], from: usize) -> usize {
    let (mut depth, mut k) = (0, from);
    while k + 1 < s.len() {
        if s[k] == '/' && s[k + 1] == '*' {
            depth += 1;
            k += 2;
        } else if s[k] == '*' && s[k + 1] == '/' {
            depth -= 1;
            k += 2;
            if depth == 0 {
                return k;
            }
        } else {
            k += 1;
        }
    }
    s.len()
}

/// Where a string or character literal opened by `quote` at `from` ends,
/// past its escapes.
fn quoted_end(s: &[char], from: usize, quote: char) -> usize {
    let mut k = from + 1;
    while k < s.len() {
        match s[k] {
            '\\' => k += 2,
            c if c == quote => return k + 1,
            _ => k += 1,
        }
    }
    s.len()
}

/// Every function with a body in Rust source: its name, the line of its
/// `fn` (1-based) and its length in lines, from that line to its closing brace.
fn functions_of(text: &str) -> Vec<(String, usize, usize)> {
    let s = blank_literals(text);
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let line_at = |k: usize| 1 + s[..k].iter().filter(|&&c| c == '\n').count();
    let mut found = Vec::new();
    for i in 0..s.len().saturating_sub(2) {
        let keyword = s[i] == 'f' && s[i + 1] == 'n' && s[i + 2].is_whitespace();
        if !keyword || (i > 0 && ident(s[i - 1])) {
            continue;
        }
        let name_at = (i + 2..s.len())
            .find(|&k| !s[k].is_whitespace())
            .unwrap_or(s.len());
        let name: String = s[name_at..].iter().take_while(|&&c| ident(c)).collect();
        if name.is_empty() {
            continue;
        }
        if let Some(close) = body_end(&s, name_at) {
            found.push((name, line_at(i), line_at(close) - line_at(i) + 1));
        }
    }
    found
}

/// The index of the closing brace of the body of the function whose name
/// starts at `from`, or `None` for a declaration without one (`fn f();`).
fn body_end(s: &[char], from: usize) -> Option<usize> {
    let mut nesting = 0i32;
    let mut k = from;
    while k < s.len() {
        match s[k] {
            '(' | '[' => nesting += 1,
            ')' | ']' => nesting -= 1,
            ';' if nesting == 0 => return None,
            '{' if nesting == 0 => break,
            _ => {}
        }
        k += 1;
    }
    let mut depth = 0;
    for (j, &c) in s.iter().enumerate().skip(k) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// The bound for a file (by its path from the repository root), or `None`
/// when it is not checked (documents, build files).
fn fn_lines_max_of(rel: &str) -> Option<usize> {
    let parts: Vec<&str> = rel.split('/').collect();
    match parts.as_slice() {
        ["src", ..] | ["crates", _, "src", ..] => Some(FN_LINES_MAX),
        ["tests" | "tools" | "scripts", ..] | ["crates", _, "tests", ..] => Some(TEST_FN_LINES_MAX),
        _ => None,
    }
}

/// Functions stay short: at most `FN_LINES_MAX` lines in `src/` and the
/// crates' `src/`, `TEST_FN_LINES_MAX` in tests and tools.
#[test]
fn functions_stay_short() {
    let mut paths = Vec::new();
    for dir in ["src", "crates", "tests", "tools", "scripts"] {
        rust_files(&root().join(dir), &mut paths);
    }
    let mut long = Vec::new();
    let mut checked = 0;
    for p in paths {
        let rel = p
            .strip_prefix(root())
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        let Some(max) = fn_lines_max_of(&rel) else {
            continue;
        };
        let text = fs::read_to_string(&p).unwrap_or_else(|e| panic!("{rel}: {e}"));
        for (name, line, lines) in functions_of(&text) {
            checked += 1;
            if lines > max {
                long.push(format!(
                    "{rel}:{line} fn {name}: {lines} lines (at most {max})"
                ));
            }
        }
    }
    assert!(
        checked > 500,
        "saw only {checked} functions: is the scan broken?"
    );
    assert!(
        long.is_empty(),
        "functions over their bound; split them into named steps:\n{}",
        long.join("\n")
    );
}

/// The scan sees a long function, measures it to its own closing brace past
/// braces in strings, raw strings, characters and comments, and keeps
/// lifetimes, declarations and `fn` types out of the count.
#[test]
fn functions_stay_short_sees_a_long_function() {
    let filler = "    let _x = 1;\n".repeat(FN_LINES_MAX - 8);
    let long = format!(
        "fn long<'a>(s: &'a str) -> [u8; 2] {{\n    let _ = \"{{ \\\" }}\";\n    let _ = r#\"}} \"{{ \"#;\n    let _ = '{{';\n    let _ = '\\'';\n    // }} a comment\n    /* }} /* nested }} */ */\n{filler}    [0; 2]\n}}\n"
    );
    let text = format!(
        "trait T {{\n    fn declared(&self) -> u8;\n}}\n{long}fn short(f: fn(u8) -> u8) -> u8 {{\n    f(1)\n}}\n"
    );
    let fns = functions_of(&text);
    let names: Vec<(&str, usize, usize)> =
        fns.iter().map(|(n, a, b)| (n.as_str(), *a, *b)).collect();
    assert_eq!(
        names,
        vec![
            ("long", 4, FN_LINES_MAX + 1),
            ("short", FN_LINES_MAX + 5, 3)
        ]
    );
    assert_eq!(fn_lines_max_of("src/engine/context.rs"), Some(FN_LINES_MAX));
    assert_eq!(
        fn_lines_max_of("crates/redact/src/lib.rs"),
        Some(FN_LINES_MAX)
    );
    assert_eq!(
        fn_lines_max_of("crates/sandbox-agent/tests/agent.rs"),
        Some(TEST_FN_LINES_MAX)
    );
    assert_eq!(fn_lines_max_of("tests/tidy.rs"), Some(TEST_FN_LINES_MAX));
}
