//! The layer rules of ARCHITECTURE.md, checked against the imports of every file under `src/`:
//! no module imports a layer above its own, no `never A B` pair is crossed, and no two
//! modules import each other, directly or round a loop.
//!
//! Imports are read as text: every `crate::a::b` path in the library (and `gavel::a::b` in the
//! binary, `main.rs` and `commands/`), `use crate::{a, b}` groups included, and a top-level
//! file's `super::a`. Comments are left out, so a doc link is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The rules: each top-level module's layer, and the pairs of module paths (`judge::local`)
/// that must never meet.
struct Rules {
    layer: BTreeMap<String, usize>,
    never: Vec<(String, String)>,
}

/// Reads the ```layers block of ARCHITECTURE.md.
fn parse_rules(text: &str) -> Result<Rules, String> {
    let start = text
        .find("```layers\n")
        .ok_or("no ```layers block in ARCHITECTURE.md")?;
    let body = &text[start + "```layers\n".len()..];
    let body = &body[..body
        .find("```")
        .ok_or("the ```layers block is not closed")?];
    let mut rules = Rules {
        layer: BTreeMap::new(),
        never: Vec::new(),
    };
    for (i, line) in body.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => {}
            ["layer", n, modules @ ..] => {
                let n: usize = n
                    .parse()
                    .map_err(|_| format!("line {}: layer {n}", i + 1))?;
                for m in modules {
                    if rules.layer.insert(m.to_string(), n).is_some() {
                        return Err(format!("{m} is in two layers"));
                    }
                }
            }
            ["never", a, b] => rules.never.push((a.to_string(), b.to_string())),
            _ => return Err(format!("line {} of the block: {line:?}", i + 1)),
        }
    }
    Ok(rules)
}

/// A file's module path under `src/` (`judge/local/engine.rs` → `judge::local::engine`;
/// `mod.rs` names its folder).
fn module_of(rel: &str) -> String {
    let rel = rel.trim_end_matches(".rs").trim_end_matches("/mod");
    rel.replace('/', "::")
}

/// The module paths a file imports, each as written after `crate::` (or `gavel::` in the
/// binary): `judge::local::Engine`, `score`.
fn imports(module: &str, source: &str) -> BTreeSet<String> {
    let code: String = source
        .lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let binary = module == "main" || module == "commands" || module.starts_with("commands::");
    let mut roots = vec![if binary { "gavel::" } else { "crate::" }];
    if !module.contains("::") && !binary {
        roots.push("super::"); // a top-level file's parent is the crate
    }
    let mut out = BTreeSet::new();
    for root in roots {
        let mut rest = code.as_str();
        while let Some(i) = rest.find(root) {
            let before = rest[..i].chars().last();
            rest = &rest[i + root.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let inner = &group[..group.find('}').unwrap_or(group.len())];
                for item in inner.split(',') {
                    out.insert(path_head(item.trim()));
                }
            } else {
                out.insert(path_head(rest));
            }
        }
    }
    out.retain(|p| !p.is_empty() && p != "self");
    out
}

/// The module path at the start of `text`: identifiers joined by `::`, up to the first item
/// that starts with a capital (a type) or anything that is not a path.
fn path_head(text: &str) -> String {
    let mut parts = Vec::new();
    for seg in text.split("::") {
        let ident: String = seg
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() || ident.starts_with(|c: char| c.is_uppercase()) {
            break;
        }
        parts.push(ident.clone());
        if ident.len() != seg.len() {
            break;
        }
    }
    parts.join("::")
}

fn under(module: &str, prefix: &str) -> bool {
    module == prefix || module.starts_with(&format!("{prefix}::"))
}

/// Every broken rule among `files` (module path, source), one line each.
fn violations(rules: &Rules, files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, source) in files {
        let Some(&mine) = rules.layer.get(&top(module)) else {
            out.push(format!("{module}: its top-level module is in no layer"));
            continue;
        };
        for imported in imports(module, source) {
            let theirs = top(&imported);
            let Some(&layer) = rules.layer.get(&theirs) else {
                continue; // a macro or item at the crate root, not a module
            };
            if layer > mine {
                out.push(format!(
                    "{module} (layer {mine}) imports {imported} (layer {layer})"
                ));
            }
            for (a, b) in &rules.never {
                if under(module, a) && under(&imported, b) {
                    out.push(format!("{module} imports {imported}: never {a} {b}"));
                }
            }
            if theirs != top(module) {
                edges.entry(top(module)).or_default().insert(theirs);
            }
        }
    }
    // A loop between top-level modules: a path back from a module it imports.
    for (from, tos) in &edges {
        for to in tos {
            let mut seen = BTreeSet::new();
            let mut stack = vec![to.clone()];
            while let Some(m) = stack.pop() {
                if &m == from {
                    out.push(format!(
                        "import loop: {from} imports {to}, which leads back"
                    ));
                    break;
                }
                if seen.insert(m.clone()) {
                    stack.extend(edges.get(&m).into_iter().flatten().cloned());
                }
            }
        }
    }
    out
}

fn source_files(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_files(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            if rel == "lib.rs" {
                continue; // declares the modules; imports nothing
            }
            out.push((module_of(&rel), std::fs::read_to_string(&path).unwrap()));
        }
    }
}

#[test]
fn no_module_imports_a_layer_above_its_own() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let rules = parse_rules(&text).unwrap();
    let mut files = Vec::new();
    source_files(&root.join("src"), &root.join("src"), &mut files);
    assert!(files.len() > 100, "only {} files read", files.len());
    let broken = violations(&rules, &files);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The checker finds what it is for: an import upwards, a `never` pair, a loop, a module in no
/// layer; and it reads grouped imports, a top-level file's `super::`, and skips comments.
#[test]
fn the_checker_reports_each_kind_of_break() {
    let rules = parse_rules(
        "```layers\nlayer 1 domain\nlayer 2 judge train\nlayer 3 score\nnever judge::local train\n```",
    )
    .unwrap();
    let file = |m: &str, s: &str| (m.to_string(), s.to_string());
    let clean = [
        file(
            "domain::trajectory",
            "// crate::score is only named here\nuse crate::domain::rng::Rng;",
        ),
        file("judge", "use crate::domain::{trajectory, rng};"),
        file("score", "use crate::{judge::Judge, domain::trajectory};"),
        file("train", "fn f() { crate::judge::remote::call() }"),
    ];
    assert_eq!(violations(&rules, &clean), Vec::<String>::new());

    let broken = violations(
        &rules,
        &[
            file("domain::reward", "use crate::{score::Scorer, domain::rng};"),
            file("judge::local::engine", "use crate::train::model::LoraQwen;"),
            file("train", "use crate::judge::Judge;"),
            file("judge", "use crate::train::Trainer;"),
            file("unknown::thing", ""),
        ],
    );
    let has = |s: &str| broken.iter().any(|b| b.contains(s));
    assert!(
        has("domain::reward (layer 1) imports score (layer 3)"),
        "{broken:?}"
    );
    assert!(
        has("judge::local::engine imports train::model: never judge::local train"),
        "{broken:?}"
    );
    assert!(has("import loop: judge imports train"), "{broken:?}");
    assert!(
        has("unknown::thing: its top-level module is in no layer"),
        "{broken:?}"
    );

    // A top-level file's `super::` is the crate.
    let up = violations(&rules, &[file("domain", "use super::score::Scorer;")]);
    assert_eq!(
        up,
        vec!["domain (layer 1) imports score (layer 3)".to_string()]
    );
}
