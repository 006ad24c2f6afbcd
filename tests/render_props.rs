//! Properties of token rendering and of `check_str`.
//!
//! - `render` never panics, whatever the template, `self` and facts;
//! - text without `${` comes out byte for byte;
//! - `${…}` bodies Binky does not own come out byte for byte;
//! - `$${` always yields a literal `${`;
//! - `check_str` never panics, on arbitrary text or TOML-shaped text.

use binky::config::check_str;
use binky::config::render::{Facts, ServiceFacts, classify, render};
use indexmap::IndexMap;
use proptest::prelude::*;
use std::path::Path;

fn svc_facts() -> impl Strategy<Value = ServiceFacts> {
    (
        proptest::option::of(any::<u16>()),
        proptest::collection::vec(("[a-z][a-z0-9_]{0,6}", any::<u16>()), 0..3),
        proptest::option::of(".{0,20}"),
        proptest::option::of(".{0,20}"),
        proptest::option::of(".{0,20}"),
    )
        .prop_map(|(port, ports, url, local_url, host)| ServiceFacts {
            port,
            ports: ports.into_iter().collect(),
            url,
            local_url,
            host,
            slice: IndexMap::new(),
        })
}

fn world() -> impl Strategy<Value = IndexMap<String, ServiceFacts>> {
    proptest::collection::vec(("[a-z][a-z0-9_-]{0,6}", svc_facts()), 0..4)
        .prop_map(|v| v.into_iter().collect())
}

/// Renders with a fixed project/worktree, the given services, and an
/// environment where every even-length name is set.
fn render_with(
    template: &str,
    self_name: Option<&str>,
    services: &IndexMap<String, ServiceFacts>,
) -> binky::config::render::Rendered {
    let env = |n: &str| n.len().is_multiple_of(2).then(|| format!("<{n}>"));
    let facts = Facts {
        project: "acme",
        worktree_name: "login-fix",
        worktree_path: "/w/login-fix",
        services,
        env: &env,
    };
    render(template, self_name, &facts)
}

/// Token bodies: a mix of owned shapes, near misses and noise.
fn token_body() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("self.port".to_owned()),
        Just("self.url".to_owned()),
        Just("env.HOME".to_owned()),
        Just("worktree.name".to_owned()),
        "[a-z]{1,5}\\.(port|url|host|local_url|ports\\.[a-z]{1,4})",
        "[a-zA-Z_.:${-]{0,12}",
        "[^}]{0,12}",
    ]
}

/// Template text that leans on `$`, `{`, `}` and token-like pieces.
fn template() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[^$]{0,8}",
        Just("$".to_owned()),
        Just("$$".to_owned()),
        Just("${".to_owned()),
        Just("$${".to_owned()),
        Just("}".to_owned()),
        token_body().prop_map(|b| format!("${{{b}}}")),
        token_body().prop_map(|b| format!("$${{{b}}}")),
    ];
    proptest::collection::vec(piece, 0..10).prop_map(|v| v.concat())
}

/// A body `classify` rejects, that the scanner reads as one token: no `}`
/// and no `${` inside.
fn unowned_body() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^}]{0,16}",
        "[A-Za-z_][A-Za-z0-9_]{0,8}(:-[^}]{0,6})?",
        "[a-z]{1,6}\\.[a-z_.]{0,10}",
        "(self|env|worktree|project)\\.[^}]{0,8}",
    ]
    .prop_filter("owned or not one token", |b| {
        !b.contains("${") && classify(b).is_none()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn render_never_panics_on_arbitrary_text(
        s in any::<String>(),
        me in proptest::option::of("[a-z]{1,6}"),
        w in world(),
    ) {
        let _ = render_with(&s, me.as_deref(), &w);
    }

    #[test]
    fn render_never_panics_on_token_heavy_text(
        s in template(),
        me in proptest::option::of("[a-z]{1,6}"),
        w in world(),
    ) {
        let r = render_with(&s, me.as_deref(), &w);
        // Whatever could not be filled was written in the template.
        for u in &r.unresolved {
            prop_assert!(s.contains(u.as_str()), "{u:?} not in {s:?}");
        }
    }

    #[test]
    fn text_without_token_opener_is_unchanged(
        s in any::<String>().prop_filter("has ${", |s| !s.contains("${")),
        me in proptest::option::of("[a-z]{1,6}"),
        w in world(),
    ) {
        let r = render_with(&s, me.as_deref(), &w);
        prop_assert_eq!(r.text.as_bytes(), s.as_bytes());
        prop_assert!(r.unresolved.is_empty());
    }

    #[test]
    fn dollar_heavy_text_without_opener_is_unchanged(
        s in "[$}{a ]{0,24}".prop_filter("has ${", |s| !s.contains("${")),
        w in world(),
    ) {
        let r = render_with(&s, Some("api"), &w);
        prop_assert_eq!(r.text, s);
    }

    #[test]
    fn unowned_tokens_are_unchanged(
        parts in proptest::collection::vec(("[^$]{0,8}", unowned_body()), 0..6),
        tail in "[^$]{0,8}",
        me in proptest::option::of("[a-z]{1,6}"),
        w in world(),
    ) {
        let mut s = String::new();
        for (lit, body) in &parts {
            s.push_str(lit);
            s.push_str("${");
            s.push_str(body);
            s.push('}');
        }
        s.push_str(&tail);
        let r = render_with(&s, me.as_deref(), &w);
        prop_assert_eq!(r.text.as_bytes(), s.as_bytes());
        prop_assert!(r.unresolved.is_empty(), "{:?}", r.unresolved);
    }

    #[test]
    fn owned_tokens_without_facts_are_unchanged_and_reported(
        // `env`, `self`, `worktree` and `project` are token heads, not services.
        svc in "[a-z]{1,6}".prop_filter("a service name, not a reserved token head", |s| {
            !["env", "self", "worktree", "project"].contains(&s.as_str())
        }),
        field in "(port|url|host|local_url|ports\\.[a-z]{1,4})",
    ) {
        let empty = IndexMap::new();
        let s = format!("a ${{{svc}.{field}}} b ${{self.{field}}}");
        let r = render_with(&s, Some("me"), &empty);
        prop_assert_eq!(&r.text, &s);
        prop_assert_eq!(r.unresolved.len(), 2);
    }

    #[test]
    fn escape_yields_literal_opener(
        a in "[^$]{0,12}",
        b in "[^$]{0,12}",
        me in proptest::option::of("[a-z]{1,6}"),
        w in world(),
    ) {
        // `b` may look like a token body (`self.port}`): still literal.
        let s = format!("{a}$${{{b}");
        let r = render_with(&s, me.as_deref(), &w);
        prop_assert_eq!(r.text, format!("{a}${{{b}"));
    }

    #[test]
    fn escape_always_starts_a_literal_opener(
        rest in any::<String>(),
        me in proptest::option::of("[a-z]{1,6}"),
        w in world(),
    ) {
        let r = render_with(&format!("$${{{rest}"), me.as_deref(), &w);
        prop_assert!(r.text.starts_with("${"), "{:?}", r.text);
    }

    #[test]
    fn escaped_owned_token_never_renders(
        field in "(port|url|host|local_url)",
        w in world(),
    ) {
        let Some(name) = w.keys().next().cloned() else { return Ok(()); };
        let s = format!("$${{{name}.{field}}} $${{self.{field}}}");
        let r = render_with(&s, Some(&name), &w);
        prop_assert_eq!(r.text, format!("${{{name}.{field}}} ${{self.{field}}}"));
        prop_assert!(r.unresolved.is_empty());
    }

    #[test]
    fn check_str_never_panics_on_arbitrary_text(s in any::<String>()) {
        let r = check_str(&s, Path::new("binky.toml"));
        prop_assert_eq!(r.config.is_some(), r.errors() == 0);
    }

    #[test]
    fn check_str_never_panics_on_toml_shaped_text(s in toml_like()) {
        let r = check_str(&s, Path::new("binky.toml"));
        prop_assert_eq!(r.config.is_some(), r.errors() == 0);
        for d in &r.diagnostics {
            let _ = d.render("binky.toml");
            // A located finding points inside the file.
            if let Some(l) = d.line {
                prop_assert!(l >= 1 && l <= s.lines().count().max(1) + 1, "{d:?} in {s:?}");
            }
        }
    }
}

/// A TOML string literal holding `s`.
fn tstr(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn pick(options: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    proptest::sample::select(options).prop_map(tstr)
}

fn str_array(options: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    proptest::collection::vec(proptest::sample::select(options), 0..4).prop_map(|v| {
        format!(
            "[{}]",
            v.iter().map(|s| tstr(s)).collect::<Vec<_>>().join(", ")
        )
    })
}

const NAMES: &[&str] = &["api", "web", "db", "worker", "cache", "self", "Api", "9x"];
const DURATIONS: &[&str] = &["5s", "500ms", "0s", "1m 30s", "soon", "", "-1s"];

/// One `key = value` of a service: mostly right types and values, some wrong.
fn service_entry() -> impl Strategy<Value = (&'static str, String)> {
    let text = template().prop_map(|t| tstr(&t)).boxed();
    let secretish = pick(&[
        "${env.X}",
        "postgres://u:pw@h/db",
        "redis://:pw@${env.H}/0",
        "plain",
        "",
    ]);
    let health_table = (
        proptest::option::of(prop_oneof![pick(&["/", "/health"]), text.clone()]),
        proptest::option::of(prop_oneof![
            pick(&["localhost:${self.port}", "h:5432"]),
            text.clone()
        ]),
        proptest::option::of(text.clone()),
        proptest::option::of(pick(DURATIONS)),
        proptest::option::of(prop_oneof![pick(DURATIONS), Just("0".to_owned())]),
    )
        .prop_map(|(h, t, c, to, iv)| {
            let parts: Vec<String> = [
                ("http", h),
                ("tcp", t),
                ("cmd", c),
                ("timeout", to),
                ("interval", iv),
            ]
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k} = {v}")))
            .collect();
            format!("{{ {} }}", parts.join(", "))
        });
    let restart_table = (
        proptest::option::of(pick(&["no", "always", "on-failure", "sometimes"])),
        proptest::option::of(pick(DURATIONS)),
        proptest::option::of(-2i64..10),
    )
        .prop_map(|(p, b, m)| {
            let mut parts = Vec::new();
            parts.extend(p.map(|p| format!("policy = {p}")));
            parts.extend(b.map(|b| format!("backoff = {b}")));
            parts.extend(m.map(|m| format!("max_failures = {m}")));
            format!("{{ {} }}", parts.join(", "))
        });
    let env_table = proptest::collection::vec(
        (
            proptest::sample::select(
                &["A", "DB_PASSWORD", "API_KEY", "2X", "LOG-LEVEL", "URL"][..],
            ),
            prop_oneof![
                text.clone(),
                secretish.clone(),
                Just("4".to_owned()),
                Just("true".to_owned())
            ],
        ),
        0..4,
    )
    .prop_map(|v| {
        let m: std::collections::BTreeMap<_, _> = v.into_iter().collect();
        let parts: Vec<String> = m
            .iter()
            .map(|(k, v)| format!("{} = {v}", tstr(k)))
            .collect();
        format!("{{ {} }}", parts.join(", "))
    });
    prop_oneof![
        4 => text.clone().prop_map(|v| ("cmd", v)),
        1 => Just(("cmd", "[\"a\"]".to_owned())),
        1 => pick(&["api", "web", "API", "a b", "-x"]).prop_map(|v| ("url", v)),
        1 => str_array(&["grpc", "http", "Bad", "grpc"]).prop_map(|v| ("ports", v)),
        2 => str_array(NAMES).prop_map(|v| ("depends_on", v)),
        2 => env_table.prop_map(|v| ("env", v)),
        1 => pick(&["/", "/healthz", "http://localhost:3000/", "${db.url}"]).prop_map(|v| ("health", v)),
        1 => health_table.prop_map(|v| ("health", v)),
        1 => prop_oneof![pick(&["always", "no", "sometimes"]), Just("false".to_owned())].prop_map(|v| ("restart", v)),
        1 => restart_table.prop_map(|v| ("restart", v)),
        1 => str_array(&["src/**", "[a", "{x,y", "*.rs"]).prop_map(|v| ("watch", v)),
        1 => pick(&["TERM", "SIGINT", "SIGSTOP", ""]).prop_map(|v| ("stop_signal", v)),
        1 => prop_oneof![pick(DURATIONS), Just("3".to_owned()), Just("1.5".to_owned())].prop_map(|v| ("stop_timeout", v)),
        3 => pick(&["postgres", "sqlite", "Bad!"]).prop_map(|v| ("adapter", v)),
        1 => secretish.prop_map(|v| ("admin_url", v)),
        1 => text.clone().prop_map(|v| ("migrate", v)),
        1 => text.prop_map(|v| ("seed", v)),
        1 => pick(&["golden", "Bad"]).prop_map(|v| ("clone_from", v)),
        1 => str_array(&["db/*.sql", "[x"]).prop_map(|v| ("clone_inputs", v)),
        1 => Just(("options", "{ a = 1 }".to_owned())),
    ]
}

/// Whole files shaped like a `binky.toml`: real tables and keys with mostly
/// well-typed values (tokens, credentials, bad names and durations mixed in),
/// so most inputs get past the TOML parser into validation.
fn toml_like() -> impl Strategy<Value = String> {
    let project = (
        pick(&["acme", "acme", "Bad Name", ""]),
        proptest::option::of(
            ((-5i64..70000), (-5i64..70000)).prop_map(|(a, b)| format!("[{a}, {b}]")),
        ),
        proptest::option::of(pick(&["acme.test", "bad..domain"])),
    )
        .prop_map(|(name, range, domain)| {
            let mut s = format!("[project]\nname = {name}\n");
            if let Some(r) = range {
                s.push_str(&format!("port_range = {r}\n"));
            }
            if let Some(d) = domain {
                s.push_str(&format!("domain = {d}\n"));
            }
            s
        });
    let service = (
        proptest::sample::select(NAMES),
        proptest::collection::vec(service_entry(), 0..7),
    )
        .prop_map(|(name, entries)| {
            let m: std::collections::BTreeMap<_, _> = entries.into_iter().collect();
            let mut s = format!("\n[services.{}]\n", tstr(name));
            for (k, v) in m {
                s.push_str(&format!("{k} = {v}\n"));
            }
            s
        });
    let agents = (
        str_array(NAMES),
        proptest::collection::vec(template(), 0..3),
    )
        .prop_map(|(expose, verify)| {
            let verify: Vec<String> = verify.iter().map(|v| tstr(v)).collect();
            format!(
                "\n[agents]\nexpose = {expose}\nverify = [{}]\n",
                verify.join(", ")
            )
        });
    (
        project,
        proptest::collection::vec(service, 0..5),
        proptest::option::of(agents),
    )
        .prop_map(|(p, services, agents)| {
            let mut seen = std::collections::BTreeSet::new();
            let mut s = p;
            for svc in services {
                // A table defined twice is a syntax error; keep the first.
                if seen.insert(svc.lines().nth(1).unwrap_or_default().to_owned()) {
                    s.push_str(&svc);
                }
            }
            s.push_str(&agents.unwrap_or_default());
            s
        })
}

/// The TOML-shaped generator is only worth its name if much of what it makes
/// gets past the TOML parser into validation proper.
#[test]
fn toml_like_inputs_reach_validation() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = toml_like();
    let (mut parsed, mut valid, total) = (0, 0, 500);
    for _ in 0..total {
        let s = strategy.new_tree(&mut runner).unwrap().current();
        let r = check_str(&s, Path::new("binky.toml"));
        let parse_codes = ["syntax", "invalid-type", "unknown-key", "missing-key"];
        if !r.diagnostics.iter().any(|d| parse_codes.contains(&d.code)) {
            parsed += 1;
        }
        if r.config.is_some() {
            valid += 1;
        }
    }
    eprintln!("{parsed}/{total} parsed, {valid}/{total} valid");
    assert!(parsed * 2 >= total, "only {parsed}/{total} parsed");
    assert!(valid * 50 >= total, "only {valid}/{total} valid");
}
