//! The docs hold together: every relative link and `#anchor` in the README,
//! the top-level guides and the book (`docs/src`) resolves, the book's pages
//! stay inside the book and are all in its SUMMARY, mdBook builds it without
//! a warning, and every complete `binky.toml` the docs show passes `binky
//! check`.

use crate::harness::*;
use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book() -> PathBuf {
    root().join("docs/src")
}

/// Markdown files under `dir`, recursively, sorted.
fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The files whose links are checked: the top-level guides, each folder's
/// README and the book.
fn documents() -> Vec<PathBuf> {
    let r = root();
    let mut out: Vec<PathBuf> = [
        "README.md",
        "AGENTS.md",
        "ARCHITECTURE.md",
        "CONTRIBUTING.md",
        "SECURITY.md",
        "TROUBLESHOOTING.md",
        "benchmarks/README.md",
    ]
    .iter()
    .map(|f| r.join(f))
    .collect();
    for e in std::fs::read_dir(r.join("examples")).unwrap().flatten() {
        let readme = e.path().join("README.md");
        if readme.is_file() {
            out.push(readme);
        }
    }
    out.extend(markdown_under(&book()));
    out
}

/// `p` with `.` and `..` folded, without touching the filesystem.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The text of `file` as mdBook renders it: each `{{#include PATH}}` line
/// replaced by that file's text (the only preprocessor the book uses), with
/// where each included part came from.
fn rendered(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        match line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|l| l.strip_suffix("}}"))
        {
            Some(inc) => {
                let path = normalize(&file.parent().unwrap().join(inc.trim()));
                out.push_str(
                    &std::fs::read_to_string(&path).unwrap_or_else(|e| {
                        panic!("{}: {{{{#include {inc}}}}}: {e}", file.display())
                    }),
                );
                out.push('\n');
            }
            None => out.push_str(line),
        }
    }
    out
}

/// A heading's anchor as GitHub and mdBook both make it: lowercased,
/// letters, digits, `-` and `_` kept, spaces to `-`, anything else dropped;
/// a repeated one gets `-1`, `-2`…
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut heading: Option<String> = None;
    for ev in Parser::new_ext(markdown, Options::all()) {
        match ev {
            Event::Start(Tag::Heading { id, .. }) => {
                if let Some(id) = id {
                    out.insert(id.to_string());
                }
                heading = Some(String::new());
            }
            Event::Text(t) | Event::Code(t) if heading.is_some() => {
                heading.as_mut().unwrap().push_str(&t);
            }
            Event::End(TagEnd::Heading(_)) => {
                let text = heading.take().unwrap_or_default();
                let slug: String = text
                    .to_lowercase()
                    .chars()
                    .filter_map(|c| match c {
                        ' ' => Some('-'),
                        c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                        _ => None,
                    })
                    .collect();
                let n = seen.entry(slug.clone()).or_insert(0);
                out.insert(if *n == 0 {
                    slug.clone()
                } else {
                    format!("{slug}-{n}")
                });
                *n += 1;
            }
            _ => {}
        }
    }
    out
}

/// Every link and image target in `markdown`.
fn links(markdown: &str) -> Vec<String> {
    Parser::new_ext(markdown, Options::all())
        .filter_map(|ev| match ev {
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => Some(dest_url.to_string()),
            _ => None,
        })
        .collect()
}

/// What is wrong with one link `dest` written in `file` (rendered as
/// `text`), if anything.
fn broken(file: &Path, text: &str, dest: &str) -> Option<String> {
    if dest.contains("://") || dest.starts_with("mailto:") {
        return None; // not checked: no network in tests
    }
    let (path, fragment) = match dest.split_once('#') {
        Some((p, f)) => (p, Some(f)),
        None => (dest, None),
    };
    let target = if path.is_empty() {
        file.to_path_buf()
    } else {
        normalize(&file.parent().unwrap().join(path))
    };
    if !target.exists() {
        return Some(format!("{dest}: no such file"));
    }
    // mdBook copies only what is under docs/src: a page linking out of it
    // is a dead link on the built site.
    if file.starts_with(book()) && !target.starts_with(book()) {
        return Some(format!(
            "{dest}: outside docs/src, so not in the built book (name the repository file in words, or include it)"
        ));
    }
    let fragment = fragment?;
    if target.extension().is_none_or(|x| x != "md") {
        return Some(format!(
            "{dest}: an anchor into a file that is not markdown"
        ));
    }
    let headings = if target == file {
        anchors(text)
    } else {
        anchors(&rendered(&target))
    };
    (!headings.contains(fragment)).then(|| {
        format!(
            "{dest}: no heading with anchor #{fragment} in {}",
            target.strip_prefix(root()).unwrap_or(&target).display()
        )
    })
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let mut problems = Vec::new();
    for file in documents() {
        let text = rendered(&file);
        for dest in links(&text) {
            if let Some(why) = broken(&file, &text, &dest) {
                problems.push(format!(
                    "{}: {why}",
                    file.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} broken link(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The README is the front page: short enough to read through (issue 49),
/// naming the web view, saying which adapters meet real servers and which
/// recipes a test brings up.
#[test]
fn the_readme_is_short_and_says_what_is_tested() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; keep it within 250"
    );
    assert!(
        text.contains("binky.localhost"),
        "the web view is not named"
    );
    // Words, whatever the line breaks.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        "MongoDB against nx-27017",
        "Elasticsearch/OpenSearch against recorded replies",
        "(both brought up by tests)",
        "(checked by `binky check` only)",
    ] {
        assert!(flat.contains(said), "the README no longer says {said:?}");
    }
}

#[test]
fn the_link_checker_sees_a_broken_anchor_and_a_missing_file() {
    // The checker itself: a test that cannot fail is a defect.
    let file = root().join("README.md");
    let text = "# Quick start\n## `binky env --json`\n## Quick start\n";
    assert_eq!(broken(&file, text, "#quick-start"), None);
    assert_eq!(broken(&file, text, "#quick-start-1"), None);
    assert_eq!(broken(&file, text, "#binky-env---json"), None);
    assert!(broken(&file, text, "#quick-starts").is_some());
    assert!(broken(&file, text, "no-such-file.md").is_some());
    assert!(broken(&file, text, "LICENSE#x").is_some());
    assert_eq!(broken(&file, text, "https://example.invalid/#x"), None);
    let page = book().join("introduction.md");
    assert!(broken(&page, "", "../../README.md").is_some());
}

#[test]
fn every_book_page_is_in_the_summary_and_every_summary_entry_exists() {
    let summary = std::fs::read_to_string(book().join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&summary)
        .iter()
        .map(|l| normalize(&book().join(l)))
        .collect();
    for page in &listed {
        assert!(
            page.is_file(),
            "SUMMARY.md lists {}, which is missing",
            page.display()
        );
    }
    for page in markdown_under(&book()) {
        if page.file_name().is_some_and(|f| f == "SUMMARY.md") {
            continue;
        }
        assert!(
            listed.contains(&page),
            "{} is not in SUMMARY.md, so the book never shows it",
            page.display()
        );
    }
}

#[test]
fn the_book_builds_without_a_warning() {
    let Some(mdbook) = cached_tool("BINKY_MDBOOK", "binky-mdbook/bin/mdbook", "mdbook") else {
        skip("mdbook is not installed (`cargo install mdbook`, as .ci/run does)");
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let built = std::process::Command::new(&mdbook)
        .args(["build", "--dest-dir"])
        .arg(out.path())
        .arg(root().join("docs"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&built.stderr);
    assert!(
        built.status.success() && !said.contains("WARN") && !said.contains("ERROR"),
        "mdbook build: {}\n{said}",
        built.status
    );
    assert!(out.path().join("index.html").is_file());
    assert!(out.path().join("images/dashboard.png").is_file());
}

/// The ```toml blocks of the docs that are a whole `binky.toml` (they have
/// a `[project]` table), with where each is.
fn whole_configs() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for file in documents() {
        let text = rendered(&file);
        let mut block: Option<String> = None;
        for ev in Parser::new_ext(&text, Options::all()) {
            match ev {
                Event::Start(Tag::CodeBlock(pulldown_cmark::CodeBlockKind::Fenced(lang)))
                    if lang.as_ref() == "toml" =>
                {
                    block = Some(String::new());
                }
                Event::Text(t) if block.is_some() => block.as_mut().unwrap().push_str(&t),
                Event::End(TagEnd::CodeBlock) => {
                    if let Some(b) = block.take()
                        && b.lines().any(|l| l.trim() == "[project]")
                    {
                        out.push((file.strip_prefix(root()).unwrap().display().to_string(), b));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[test]
fn every_whole_binky_toml_in_the_docs_passes_check() {
    let configs = whole_configs();
    // The finder itself: the README's example and each recipe's file.
    for page in [
        "README.md",
        "docs/src/recipes/django-celery.md",
        "docs/src/recipes/vite-api.md",
        "docs/src/recipes/nextjs-prisma-redis.md",
        "docs/src/recipes/rails-sidekiq.md",
    ] {
        assert!(
            configs.iter().any(|(f, _)| f == page),
            "no whole binky.toml found in {page}"
        );
    }
    let home = Home::new();
    let mut failed = Vec::new();
    for (file, toml) in &configs {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("binky.toml"), toml).unwrap();
        let out = home.run(&["check", &dir.path().display().to_string()]);
        if out.code() != 0 {
            failed.push(format!("{file}:\n{toml}\n{out}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n---\n"));
}

#[test]
fn headings_are_h1_once_per_page() {
    // mdBook titles a page by its first heading; a page without one, or
    // with two top-level ones, reads wrongly in the sidebar and search.
    for page in markdown_under(&book()) {
        let text = std::fs::read_to_string(&page).unwrap();
        let h1 = Parser::new_ext(&text, Options::all())
            .filter(|ev| {
                matches!(
                    ev,
                    Event::Start(Tag::Heading {
                        level: HeadingLevel::H1,
                        ..
                    })
                )
            })
            .count();
        let is_summary = page.file_name().is_some_and(|f| f == "SUMMARY.md");
        assert!(
            is_summary || h1 == 1 || text.contains("{{#include"),
            "{}: {h1} top-level headings",
            page.display()
        );
    }
}
