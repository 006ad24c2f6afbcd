//! The dependency graph: unknown and cyclic `depends_on`, url labels.

use super::*;

/// Unknown dependencies, self-dependencies, duplicates and cycles.
pub(super) fn check_graph(
    cx: &mut Cx<'_>,
    services: &IndexMap<String, Service>,
    declared: &BTreeSet<&str>,
) {
    for (name, svc) in services {
        let mut seen = BTreeSet::new();
        for (i, dep) in svc.depends_on().iter().enumerate() {
            let path = keypath!["services", name.as_str(), "depends_on", i];
            if dep == name {
                cx.error(
                    "dependency-cycle",
                    &path,
                    format!("`{name}` depends on itself"),
                    None,
                );
            } else if !declared.contains(dep.as_str()) {
                let others = || declared.iter().copied().filter(|d| *d != name);
                let hint = suggest(dep, others()).map(|m| format!("did you mean `{m}`?"));
                cx.error(
                    "unknown-dependency",
                    &path,
                    format!("`{name}` depends on `{dep}`, which is not a service"),
                    hint.or_else(|| {
                        let others: Vec<&str> = others().collect();
                        Some(if others.is_empty() {
                            format!("`{name}` is the only service; declare [services.{dep}] or remove it")
                        } else {
                            format!("other services are: {}", others.join(", "))
                        })
                    }),
                );
            } else if !seen.insert(dep.as_str()) {
                cx.warn(
                    "duplicate-dependency",
                    &path,
                    format!("`{name}` lists `{dep}` in depends_on twice"),
                    None,
                );
            }
        }
    }
    for cycle in find_cycles(services) {
        let first = &cycle[0];
        let idx = services[first]
            .depends_on()
            .iter()
            .position(|d| *d == cycle[1 % cycle.len()])
            .unwrap_or(0);
        let mut shown = cycle.clone();
        shown.push(first.clone());
        cx.error(
            "dependency-cycle",
            &keypath!["services", first.as_str(), "depends_on", idx],
            format!("dependency cycle: {}", shown.join(" → ")),
            Some("remove one of these depends_on entries; a service may still name another's port or URL without depending on it".to_owned()),
        );
    }
}

/// Elementary cycles found by DFS, each reported once, rotated to start at
/// its first service in file order. Self-loops are reported elsewhere.
pub(crate) fn find_cycles(services: &IndexMap<String, Service>) -> Vec<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let index: HashMap<&str, usize> = services
        .keys()
        .enumerate()
        .map(|(i, k)| (k.as_str(), i))
        .collect();
    let mut mark = vec![Mark::New; services.len()];
    let mut stack: Vec<usize> = Vec::new();
    let mut cycles: Vec<Vec<String>> = Vec::new();
    fn dfs(
        v: usize,
        services: &IndexMap<String, Service>,
        index: &HashMap<&str, usize>,
        mark: &mut [Mark],
        stack: &mut Vec<usize>,
        cycles: &mut Vec<Vec<String>>,
    ) {
        mark[v] = Mark::Active;
        stack.push(v);
        for dep in services[v].depends_on() {
            let Some(&w) = index.get(dep.as_str()) else {
                continue;
            };
            if w == v {
                continue;
            }
            match mark[w] {
                Mark::New => dfs(w, services, index, mark, stack, cycles),
                Mark::Active => {
                    let pos = stack.iter().position(|&x| x == w).unwrap_or(0);
                    let mut cyc: Vec<usize> = stack[pos..].to_vec();
                    let min_pos = cyc
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, x)| **x)
                        .map(|(i, _)| i)
                        .unwrap_or(0);
                    cyc.rotate_left(min_pos);
                    let names: Vec<String> = cyc
                        .iter()
                        .map(|&i| services.get_index(i).unwrap().0.clone())
                        .collect();
                    if !cycles.contains(&names) {
                        cycles.push(names);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        mark[v] = Mark::Done;
    }
    for v in 0..services.len() {
        if mark[v] == Mark::New {
            dfs(v, services, &index, &mut mark, &mut stack, &mut cycles);
        }
    }
    cycles
}

/// Two resources on one adapter whose names meet once `_` reads as `-`
/// (`an_db`, `an-db`) would get one slice: a slice carries its resource's
/// name that way ([`crate::config::Config::slice_resource`]).
pub(super) fn check_shared_slices(cx: &mut Cx<'_>, services: &IndexMap<String, Service>) {
    let mut owner: HashMap<(&str, String), &str> = HashMap::new();
    for (name, svc) in services {
        let Some(r) = svc.resource() else { continue };
        let implementation = crate::adapters::catalog::implementation(&r.adapter);
        let label = name.replace('_', "-");
        match owner.get(&(implementation, label.clone())) {
            Some(first) => cx.error(
                "shared-slice",
                &keypath!["services", name.as_str()],
                format!("`{first}` and `{name}` both use the {implementation} adapter and differ only in `_` and `-`, so each world would give them one and the same slice"),
                Some(format!("rename `{name}`: a slice carries its resource's name with `_` read as `-`")),
            ),
            None => {
                owner.insert((implementation, label), name);
            }
        }
    }
}

pub(super) fn check_urls(cx: &mut Cx<'_>, services: &IndexMap<String, Service>) {
    let mut owner: HashMap<&str, &str> = HashMap::new();
    for (name, svc) in services {
        if let Some(url) = svc.process().and_then(|p| p.url.as_deref()) {
            if let Some(first) = owner.get(url) {
                cx.error(
                    "duplicate-url",
                    &keypath!["services", name.as_str(), "url"],
                    format!("url label `{url}` is used by both `{first}` and `{name}`; hostnames must be unique"),
                    Some(format!("give `{name}` its own label, e.g. url = \"{name}\"")),
                );
            } else {
                owner.insert(url, name);
            }
        }
    }
}
