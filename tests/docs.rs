//! The documentation against the repository: every relative link and `#anchor` of the README,
//! `docs/`, ARCHITECTURE.md and CONTRIBUTING.md resolves; every page of `docs/` is in the
//! mdBook's table of contents; and every configuration key and every subcommand appears in the
//! reference pages, so a key or command added without its documentation fails here.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Markdown files whose links are checked: the front door, the manual, and the two notes
/// for contributors. BENCHMARKS.md and the experiments' notebooks are records, and are not.
fn checked_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"]
        .iter()
        .map(|f| root().join(f))
        .collect();
    files.extend(docs_pages(true));
    files
}

/// The `.md` files of `docs/`, with or without SUMMARY.md.
fn docs_pages(with_summary: bool) -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("a docs/ folder")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .filter(|p| with_summary || p.file_name().unwrap() != "SUMMARY.md")
        .collect();
    pages.sort();
    assert!(pages.len() > 5, "docs/ holds only {pages:?}");
    pages
}

/// A Markdown file cut into what a renderer reads as prose and as headings: the text of each
/// paragraph-like block (consecutive non-blank lines outside fenced code) and each ATX
/// heading, each with the line it starts on. Fenced code is left out whole, so a `[x](y)` or a
/// `# comment` in a code block is neither a link nor a heading.
struct Doc {
    blocks: Vec<(usize, String)>,
    headings: Vec<(usize, usize, String)>,
}

fn parse(text: &str) -> Doc {
    let mut doc = Doc {
        blocks: Vec::new(),
        headings: Vec::new(),
    };
    // The open fence's character and length: a fence closes only on a run of the same
    // character at least as long (CommonMark), so ```` around ``` stays one block.
    let mut fence: Option<(char, usize)> = None;
    let mut block: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        let run = |c: char| trimmed.chars().take_while(|&x| x == c).count();
        let fence_here = ['`', '~']
            .into_iter()
            .map(|c| (c, run(c)))
            .find(|&(_, k)| k >= 3);
        match (fence, fence_here) {
            (Some((c, k)), Some((c2, k2)))
                if c == c2 && k2 >= k && trimmed.trim_end().len() == k2 =>
            {
                fence = None;
                continue;
            }
            (Some(_), _) => continue,
            (None, Some(f)) => {
                doc.blocks.extend(block.take());
                fence = Some(f);
                continue;
            }
            (None, None) => {}
        }
        if trimmed.is_empty() {
            doc.blocks.extend(block.take());
            continue;
        }
        let hashes = run('#');
        if (1..=6).contains(&hashes)
            && trimmed[hashes..].starts_with(' ')
            && line.len() - trimmed.len() < 4
        {
            doc.blocks.extend(block.take());
            let text = trimmed[hashes..]
                .trim()
                .trim_end_matches('#')
                .trim()
                .to_string();
            doc.headings.push((n, hashes, text.clone()));
            doc.blocks.push((n, text));
            continue;
        }
        match &mut block {
            Some((_, b)) => {
                b.push('\n');
                b.push_str(line);
            }
            None => block = Some((n, line.to_string())),
        }
    }
    doc.blocks.extend(block);
    doc
}

/// `text` with its inline code spans removed (a run of N backticks up to the next run of
/// exactly N, across lines as in CommonMark), each span's line breaks kept so that lines still
/// count; an unclosed run is kept as literal text.
fn strip_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let n = chars[i..].iter().take_while(|&&c| c == '`').count();
        let mut j = i + n;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let m = chars[j..].iter().take_while(|&&c| c == '`').count();
                if m == n {
                    close = Some(j + m);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                out.push(' ');
                out.extend(chars[i..end].iter().filter(|&&c| c == '\n'));
                i = end;
            }
            None => {
                out.extend(&chars[i..i + n]);
                i += n;
            }
        }
    }
    out
}

/// The destinations of a block's inline links and images (`[text](dest "title")`, `<dest>`
/// allowed) and of its reference definitions (`[label]: dest`), each with its line within the
/// block (0 for the first).
fn link_targets(block: &str) -> Vec<(usize, String)> {
    let text = strip_code_spans(block);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let line = text[..text.len() - rest.len() + at].matches('\n').count();
        let after = &rest[at + 2..];
        // The destination ends at the `)` that balances the parentheses opened inside it.
        let mut depth = 0;
        let mut end = None;
        for (k, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(k);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let inside = after[..end].trim();
        let dest = if let Some(s) = inside.strip_prefix('<') {
            s.split('>').next().unwrap_or("")
        } else {
            inside.split_whitespace().next().unwrap_or("")
        };
        out.push((line, dest.to_string()));
        rest = &after[end..];
    }
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if let Some(close) = t.strip_prefix('[').and_then(|s| s.find("]:")) {
            if let Some(dest) = t[close + 3..].split_whitespace().next() {
                out.push((n, dest.to_string()));
            }
        }
    }
    out
}

/// GitHub's anchor for a heading: its text as rendered (code spans keep their text, a link
/// keeps its text), lowercased, every character but letters, digits, `-`, `_` and spaces
/// dropped, spaces turned into `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](url)` renders as `text`.
    while let Some(open) = rest.find('[') {
        match rest[open..].find("](").map(|k| open + k) {
            Some(mid) if rest[mid..].contains(')') => {
                let close = mid + rest[mid..].find(')').unwrap();
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..mid]);
                rest = &rest[close + 1..];
            }
            _ => break,
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a file's headings get: a repeated slug gets `-1`, `-2`, ... as on GitHub.
fn anchors(doc: &Doc) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, _, text) in &doc.headings {
        let base = slug(text);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `path` with `.` and `..` resolved without touching the file system (a link to a file that
/// is missing must still name the path it meant).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Every problem with the links of `file`, a file under `base` (the repository, which no link
/// may leave): `FILE:LINE: (link): problem`.
fn link_problems(file: &Path, base: &Path) -> Vec<String> {
    let doc = parse(&read(file));
    let rel = file.strip_prefix(base).unwrap().display().to_string();
    let mut problems = Vec::new();
    let mut cache: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    for (start, block) in &doc.blocks {
        for (offset, dest) in link_targets(block) {
            let line = start + offset;
            let lower = dest.to_lowercase();
            if ["http://", "https://", "mailto:"]
                .iter()
                .any(|p| lower.starts_with(p))
            {
                continue;
            }
            let (path, anchor) = match dest.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (dest.as_str(), None),
            };
            let target = if path.is_empty() {
                file.to_path_buf()
            } else {
                normalize(&file.parent().unwrap().join(path))
            };
            let problem = if !target.starts_with(base) {
                Some("leads out of the repository".to_string())
            } else if !target.exists() {
                Some("no such file".to_string())
            } else if let Some(anchor) = anchor {
                if target.extension().is_some_and(|x| x == "md") {
                    let known = cache
                        .entry(target.clone())
                        .or_insert_with(|| anchors(&parse(&read(&target))));
                    (!known.contains(anchor)).then(|| {
                        format!(
                            "no heading of {} has the anchor #{anchor}",
                            target.strip_prefix(base).unwrap().display()
                        )
                    })
                } else {
                    Some("an anchor into a file that is not Markdown".to_string())
                }
            } else {
                None
            };
            if let Some(p) = problem {
                problems.push(format!("{rel}:{line}: ({dest}): {p}"));
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut problems = Vec::new();
    let mut links = 0;
    for file in checked_files() {
        links += parse(&read(&file))
            .blocks
            .iter()
            .map(|(_, b)| link_targets(b).len())
            .sum::<usize>();
        problems.extend(link_problems(&file, root()));
    }
    // A parser that found no links would pass everything.
    assert!(links > 100, "only {links} links found");
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

/// The link checker's own rules, on a made-up file: a missing file, a missing anchor, GitHub's
/// slugs (punctuation dropped, backticks gone, duplicates numbered), and links in code ignored.
#[test]
fn the_link_checker_catches_what_it_should() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "# Title\n\n## `gavel eval --attacks`: reward hacking\n\n## Again\n\n## Again\n\n\
         [ok](#title) [ok](#gavel-eval---attacks-reward-hacking) [ok](#again-1)\n\
         [bad anchor](#again-2) [bad file](missing.md) [web](https://example.com/x#y)\n\n\
         `[in code](nowhere.md)`\n\n```md\n[in a fence](nowhere.md)\n```\n",
    )
    .unwrap();
    let problems = link_problems(&page, dir.path());
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].starts_with("page.md:10: (#again-2)"),
        "{problems:#?}"
    );
    assert!(
        problems[1].contains("(missing.md): no such file"),
        "{problems:#?}"
    );
    assert_eq!(
        slug("Local judge: candle vs llama.cpp"),
        "local-judge-candle-vs-llamacpp"
    );
    assert_eq!(
        slug("Reference-guided judging: the judge answers first (`reference = \"judge\"`)"),
        "reference-guided-judging-the-judge-answers-first-reference--judge"
    );
}

#[test]
fn every_docs_page_is_in_the_books_table_of_contents() {
    let summary = parse(&read(&root().join("docs/SUMMARY.md")));
    let listed: BTreeSet<String> = summary
        .blocks
        .iter()
        .flat_map(|(_, b)| link_targets(b))
        .map(|(_, dest)| dest)
        .collect();
    let missing: Vec<String> = docs_pages(false)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|name| !listed.contains(name))
        .collect();
    // mdBook renders only what SUMMARY.md lists: a page left out is a page nobody reaches.
    assert!(
        missing.is_empty(),
        "docs/SUMMARY.md does not list {missing:?}"
    );
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The keys a file may hold under `struct NAME`: the deserialized fields of the one struct of
/// that name under `src/` with `deny_unknown_fields`, each with its type
/// (`#[serde(rename = "...")]` honoured, `skip`ped fields left out), and the file it is in.
///
/// The source of truth for the configuration's keys is the serde structs the files are read
/// into, not `examples/gavel.toml`: with `deny_unknown_fields`, a struct's fields are exactly
/// the keys a file may hold, where a commented example is written by hand and can drift. The
/// struct is looked up by name, wherever it lives, so moving it between files changes nothing
/// here. The structs are plain (one field a line), so reading their source is enough; anything
/// this reader does not understand (`flatten`) fails the test rather than passing.
fn struct_fields(name: &str) -> (String, Vec<(String, String)>) {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = read(&file);
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let l = l.trim_start();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            if !l.starts_with(&format!("struct {name} {{")) {
                continue;
            }
            // The attributes and doc comment right above the struct.
            let above = lines[..i]
                .iter()
                .rev()
                .take_while(|l| {
                    let l = l.trim_start();
                    l.starts_with("#[") || l.starts_with("//")
                })
                .any(|l| l.contains("deny_unknown_fields"));
            if above {
                found.push((file.clone(), lines[i + 1..].join("\n")));
            }
        }
    }
    assert!(
        found.len() == 1,
        "{} structs named {name} with deny_unknown_fields under src/: {:?}",
        found.len(),
        found.iter().map(|(f, _)| f).collect::<Vec<_>>()
    );
    let (file, body) = found.remove(0);
    let file = file.strip_prefix(root()).unwrap().display().to_string();
    let mut fields = Vec::new();
    let mut attrs = String::new();
    let mut attr_depth = 0i32;
    for line in body.lines() {
        let t = line.trim();
        if t == "}" {
            break;
        }
        if attr_depth > 0 || t.starts_with("#[") {
            attrs.push_str(t);
            attr_depth += t.matches('[').count() as i32 - t.matches(']').count() as i32;
            continue;
        }
        if t.starts_with("//") || t.is_empty() {
            continue;
        }
        let t = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        let (field, ty) = t
            .split_once(':')
            .unwrap_or_else(|| panic!("{file}: struct {name}: cannot read {line:?}"));
        assert!(
            !attrs.contains("flatten"),
            "{file}: struct {name}: a flattened field; teach tests/docs.rs to read it"
        );
        let skipped = attrs
            .split(['(', ')', ','])
            .any(|a| matches!(a.trim(), "skip" | "skip_deserializing"));
        let key = attrs
            .split("rename = \"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or(field.trim())
            .to_string();
        if !skipped {
            fields.push((key, ty.trim().trim_end_matches(',').to_string()));
        }
        attrs.clear();
    }
    assert!(
        !fields.is_empty(),
        "{file}: struct {name} has no fields this reader found"
    );
    (file, fields)
}

/// The text under a heading of `page`, up to the next heading of the same level or above.
fn section(page: &str, heading: &str) -> String {
    let text = read(&root().join(page));
    let doc = parse(&text);
    let (at, level) = doc
        .headings
        .iter()
        .find(|(_, _, h)| h == heading)
        .map(|(n, l, _)| (*n, *l))
        .unwrap_or_else(|| panic!("{page}: no heading {heading:?}"));
    let end = doc
        .headings
        .iter()
        .find(|(n, l, _)| *n > at && *l <= level)
        .map(|(n, _, _)| *n)
        .unwrap_or(usize::MAX);
    text.lines()
        .enumerate()
        .filter(|(i, _)| *i + 1 > at && *i + 1 < end)
        .map(|(_, l)| l)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_configuration_key_is_in_the_reference() {
    const PAGE: &str = "docs/configuration.md";
    // (struct, the heading of docs/configuration.md that lists its keys). Each is a struct a
    // file is deserialized into: `gavel.toml` and its tables, `train.toml` and its tables,
    // rubric files and their checklist items, attack files. `[judges.NAME]` is read through
    // `JudgeTable`, the flat table every backend's keys come from.
    let sections: &[(&str, &str)] = &[
        ("Config", "Top-level keys"),
        ("JudgeTable", "`[judges.NAME]`"),
        ("ServerConfig", "`[server]`"),
        ("StoreConfig", "`[store]`"),
        ("DedupSection", "`[dedup]`"),
        ("OpenRlhfConfig", "`[openrlhf]`"),
        ("TrainConfig", "`train.toml`"),
        ("SamplingConfig", "`[sampling]`"),
        ("LoraConfig", "`[lora]`"),
        ("GrpoConfig", "`[grpo]`"),
        ("AdamWConfig", "`[adamw]`"),
        ("FilterConfig", "`[filter]`"),
        ("RubricSpec", "Rubric files"),
        ("ChecklistItem", "Rubric files"),
        ("AttackFile", "Attack files"),
    ];
    let mut missing = Vec::new();
    for (name, heading) in sections {
        let text = section(PAGE, heading);
        let (file, fields) = struct_fields(name);
        for (key, _) in fields {
            if !text.contains(&format!("`{key}`")) {
                missing.push(format!(
                    "{file}: {name}.{key}: not under {PAGE} \"{heading}\""
                ));
            }
        }
    }
    // A new table (a field whose type is a section struct) must be added to the list above,
    // or its keys would go unchecked. `JudgeConfig` is read through `JudgeTable`.
    let known: BTreeSet<&str> = sections.iter().map(|(n, _)| *n).collect();
    for top in ["Config", "TrainConfig"] {
        let (file, fields) = struct_fields(top);
        for (key, ty) in fields {
            let inner = ty
                .rsplit(['<', ' ', ','])
                .find(|s| !s.is_empty())
                .unwrap_or(&ty)
                .trim_end_matches('>');
            let is_section = inner.ends_with("Config") || inner.ends_with("Section");
            if is_section && !known.contains(inner) && inner != "JudgeConfig" {
                missing.push(format!(
                    "{file}: {top}.{key}: its table {inner} is not in tests/docs.rs's list"
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "undocumented configuration keys:\n{}",
        missing.join("\n")
    );
}

/// The subcommands `gavel CMD... --help` lists under "Commands:" (clap's own `help` left out).
fn subcommands(path: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_gavel"))
        .args(path)
        .arg("--help")
        .output()
        .expect("the gavel binary runs");
    assert!(
        out.status.success(),
        "gavel {path:?} --help failed: {out:?}"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let Some(list) = text.split("\nCommands:\n").nth(1) else {
        return Vec::new();
    };
    list.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_subcommand_is_in_the_cli_page() {
    const PAGE: &str = "docs/cli.md";
    // The built binary is the source of truth: its help lists exactly the commands clap
    // parses, whatever file declares them (`train`'s actions are not a clap enum of main.rs).
    let top = subcommands(&[]);
    assert!(
        top.len() >= 10 && top.contains(&"serve".to_string()),
        "gavel --help listed {top:?}"
    );
    // A command is documented when a code span of the page names it, alone or after `gavel`:
    // `eval`, `train judge`, `gavel cache clear ...`.
    let spans: Vec<String> = {
        let text = read(&root().join(PAGE));
        let mut spans = Vec::new();
        for (_, block) in parse(&text).blocks {
            let mut parts = block.split('`');
            parts.next();
            while let (Some(inside), Some(_)) = (parts.next(), parts.next()) {
                spans.push(inside.trim_start_matches("gavel ").to_string());
            }
        }
        spans
    };
    let named = |cmd: &str| {
        spans
            .iter()
            .any(|s| s == cmd || s.starts_with(&format!("{cmd} ")))
    };
    let mut missing = Vec::new();
    for cmd in &top {
        if !named(cmd) {
            missing.push(cmd.clone());
        }
        for sub in subcommands(&[cmd]) {
            let both = format!("{cmd} {sub}");
            if !named(&both) {
                missing.push(both);
            }
        }
    }
    assert!(missing.is_empty(), "{PAGE} does not name: {missing:?}");
}
