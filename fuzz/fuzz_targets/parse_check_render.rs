//! `check_str` over arbitrary text, then `render` over every string field of
//! every service of the config it produced, with made-up facts.

#![no_main]

use binky::config::render::{Facts, ServiceFacts, render};
use binky::config::{ServiceKind, check_str};
use indexmap::IndexMap;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let report = check_str(text, Path::new("binky.toml"));
    // Every diagnostic must render, and the model exists only without errors.
    for d in &report.diagnostics {
        let _ = d.render("binky.toml");
    }
    assert_eq!(report.config.is_some(), report.errors() == 0);
    let Some(config) = report.config else {
        return;
    };

    // Made-up facts: every service gets a port, its named ports, and URLs.
    let mut services = IndexMap::new();
    for (i, (name, svc)) in config.services.iter().enumerate() {
        let base = 20000u16.wrapping_add((i as u16).wrapping_mul(10));
        let mut f = ServiceFacts::default();
        if svc.has_port() {
            f.port = Some(base);
            for (j, p) in svc.port_names().iter().enumerate() {
                f.ports.insert(p.clone(), base.wrapping_add(1 + j as u16));
            }
            f.url = Some(format!("http://{name}.w.{}", config.project.domain));
            f.local_url = Some(format!("http://localhost:{base}"));
            f.host = Some(format!("{name}.w.{}", config.project.domain));
        } else if svc.resource().is_some() {
            f.url = Some(format!("sqlite:///tmp/{name}.db"));
        }
        services.insert(name.clone(), f);
    }
    let env = |n: &str| (n.len() % 2 == 0).then(|| format!("<{n}>"));
    let facts = Facts {
        project: &config.project.name,
        worktree_name: "fuzz",
        worktree_path: "/tmp/fuzz",
        services: &services,
        env: &env,
    };

    let mut strings: Vec<(Option<&str>, &str)> = Vec::new();
    for (name, svc) in &config.services {
        let me = Some(name.as_str());
        match &svc.kind {
            ServiceKind::Process(p) => {
                strings.push((me, &p.cmd));
                strings.extend(p.cwd.as_deref().map(|s| (me, s)));
                strings.extend(p.url.as_deref().map(|s| (me, s)));
                strings.extend(p.env_file.as_deref().map(|s| (me, s)));
                strings.extend(
                    p.env
                        .iter()
                        .map(|(k, v)| [(me, k.as_str()), (me, v.as_str())])
                        .flatten(),
                );
                strings.extend(p.ports.iter().map(|s| (me, s.as_str())));
                strings.extend(p.depends_on.iter().map(|s| (me, s.as_str())));
                strings.extend(p.watch.iter().map(|s| (me, s.as_str())));
                if let Some(h) = &p.health {
                    let v = match &h.probe {
                        binky::config::Probe::Http(v)
                        | binky::config::Probe::Tcp(v)
                        | binky::config::Probe::Cmd(v) => v,
                    };
                    strings.push((me, v));
                }
            }
            ServiceKind::Resource(r) => {
                strings.push((me, &r.adapter));
                for s in [&r.admin_url, &r.migrate, &r.seed, &r.clone_from]
                    .into_iter()
                    .flatten()
                {
                    strings.push((me, s));
                }
                strings.extend(r.clone_inputs.iter().map(|s| (me, s.as_str())));
            }
        }
    }
    for v in &config.agents.verify {
        strings.push((None, v));
    }
    strings.extend(config.project.worktree_root.as_deref().map(|s| (None, s)));
    strings.extend(config.project.env_file.as_deref().map(|s| (None, s)));

    for (me, s) in strings {
        let r = render(s, me, &facts);
        // Text without any `${` must come out unchanged.
        if !s.contains("${") {
            assert_eq!(r.text, s);
        }
        for u in &r.unresolved {
            assert!(s.contains(u.as_str()));
        }
    }
});
