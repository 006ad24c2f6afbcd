//! The `redis` adapter (and its `valkey` name) against the Redis server on
//! 127.0.0.1:6379.

use crate::harness::*;
use crate::project::*;

const SERVER: &str = "redis://127.0.0.1:6379/0";

fn redis_up() -> bool {
    std::net::TcpStream::connect(("127.0.0.1", 6379)).is_ok()
}

/// A connection to the server as its admin.
fn admin() -> redis::Connection {
    redis::Client::open(SERVER)
        .unwrap()
        .get_connection_with_timeout(std::time::Duration::from_secs(5))
        .expect("redis on 127.0.0.1:6379")
}

/// Every key matching `pattern`, sorted (SCAN, as a client would).
fn keys(pattern: &str) -> Vec<String> {
    let mut c = admin();
    let mut out: Vec<String> = redis::cmd("SCAN")
        .cursor_arg(0)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(1000)
        .clone()
        .iter::<String>(&mut c)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    out.sort();
    out
}

fn set(key: &str, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut admin())
        .unwrap();
}

fn get(key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(&mut admin()).unwrap()
}

/// Deletes this test's keys (its project's and its markers) however the
/// test ends.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !redis_up() {
            return;
        }
        let mut c = admin();
        for pattern in [
            format!("{}:*", self.0),
            format!("_binky:slice:{}:*", self.0),
        ] {
            for k in keys(&pattern) {
                let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&k).query(&mut c);
            }
        }
    }
}

fn project(tag: &str) -> String {
    format!("rd{tag}{}", std::process::id() % 100000)
}

#[test]
fn redis_prefixes_isolate_worlds_and_teardown_deletes_exactly_their_keys() {
    if !redis_up() {
        skip("no Redis on 127.0.0.1:6379");
        return;
    }
    let p = project("i");
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    // `valkey` is the same implementation; the seed writes through the
    // world's own prefix.
    let toml = format!(
        "{}[services.cache]\nadapter = \"valkey\"\nseed = \"redis-cli -n 0 set ${{self.prefix}}seeded yes\"\nclone_from = \"golden\"\n",
        project_header(&p, 2)
    );
    let repo = Repo::new(&toml);
    // A key of a world whose name merely starts the same, and one with no
    // separator after the name: neither is feat-a's.
    set(&format!("{p}:feat-a-2:own"), "keep");
    set(&format!("{p}:feat-a"), "keep");
    let long = format!("feature/{}", "Very-Long-Branch-Name-".repeat(7));
    let worlds = ["feat-a", "Feature/UPPER_case", long.as_str()];
    let mut prefixes = Vec::new();
    for w in worlds {
        repo.ok(&home, &["up", w]);
        let env = repo.ok(&home, &["env", w]).json();
        let url = env["cache"].as_str().unwrap().to_owned();
        let (server, prefix) = url
            .split_once('#')
            .expect("the prefix is the URL's fragment");
        assert_eq!(server, SERVER, "{url}");
        assert!(
            prefix.starts_with(&format!("{p}:")) && prefix.ends_with(':'),
            "{url}"
        );
        assert!(
            prefix.chars().all(|c| !c.is_ascii_uppercase() && c != '/'),
            "{prefix}"
        );
        // Provisioned and seeded per world (no server-side clone).
        assert_eq!(
            get(&format!("{prefix}seeded")).as_deref(),
            Some("yes"),
            "{w}"
        );
        // A real client takes the URL as it is (the fragment is ignored).
        let mut c = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("{prefix}written"))
            .arg(w)
            .query(&mut c)
            .unwrap();
        prefixes.push(prefix.to_owned());
    }
    assert_eq!(
        prefixes
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        3
    );
    // One world's value is not another's.
    assert_eq!(
        get(&format!("{}written", prefixes[1])).as_deref(),
        Some(worlds[1])
    );
    assert_ne!(
        get(&format!("{}written", prefixes[0])).as_deref(),
        Some(worlds[1])
    );
    // `down` keeps the data; `up` finds the slice and does not re-seed.
    set(&format!("{}seeded", prefixes[0]), "changed");
    repo.ok(&home, &["down", "feat-a"]);
    repo.ok(&home, &["up", "feat-a"]);
    assert_eq!(
        get(&format!("{}seeded", prefixes[0])).as_deref(),
        Some("changed")
    );
    // Many keys, more than one batch: remove deletes every one of them,
    // and nothing else.
    {
        let mut c = admin();
        let mut pipe = redis::pipe();
        for i in 0..2500 {
            pipe.cmd("SET")
                .arg(format!("{}bulk:{i}", prefixes[0]))
                .arg(i)
                .ignore();
        }
        let _: () = pipe.query(&mut c).unwrap();
    }
    repo.ok(&home, &["remove", "feat-a", "--force"]);
    assert_eq!(keys(&format!("{}*", prefixes[0])), Vec::<String>::new());
    assert_eq!(get(&format!("_binky:slice:{}", prefixes[0])), None);
    assert_eq!(get(&format!("{p}:feat-a-2:own")).as_deref(), Some("keep"));
    assert_eq!(get(&format!("{p}:feat-a")).as_deref(), Some("keep"));
    assert_eq!(
        get(&format!("{}seeded", prefixes[1])).as_deref(),
        Some("yes")
    );
    for w in &worlds[1..] {
        repo.ok(&home, &["remove", w, "--force"]);
    }
    assert_eq!(
        keys(&format!("{p}:*")),
        vec![format!("{p}:feat-a"), format!("{p}:feat-a-2:own")]
    );
}

#[test]
fn redis_acl_users_may_touch_only_their_worlds_keys() {
    if !redis_up() {
        skip("no Redis on 127.0.0.1:6379");
        return;
    }
    let p = project("a");
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let toml = format!(
        "{}[services.cache]\nadapter = \"redis\"\nadmin_url = \"{SERVER}\"\noptions = {{ acl = true }}\n",
        project_header(&p, 2)
    );
    let repo = Repo::new(&toml);
    set(&format!("{p}:other:secret"), "theirs");
    repo.ok(&home, &["up", "w"]);
    // `env` hands out the world's own credentials (that is what it is
    // for)…
    let env = repo.ok(&home, &["env", "w"]);
    let url = env.json()["cache"].as_str().unwrap().to_owned();
    let user = format!("binky_{p}_w");
    assert!(url.starts_with(&format!("redis://{user}:")), "{url}");
    let password = url
        .split_once(&format!("{user}:"))
        .unwrap()
        .1
        .split('@')
        .next()
        .unwrap()
        .to_owned();
    assert!(password.len() >= 32);
    // …and from the daemon's logs and the registry.
    for f in ["events.log", "registry.db", "daemon.log"] {
        let text =
            String::from_utf8_lossy(&std::fs::read(home.file(f)).unwrap_or_default()).into_owned();
        assert!(!text.contains(&password), "{f} holds the world's password");
    }
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let prefix = format!("{p}:w:");
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}mine"))
        .arg(1)
        .query(&mut c)
        .unwrap();
    for (cmd, args) in [
        ("GET", vec![format!("{p}:other:secret")]),
        ("SET", vec![format!("{p}:other:secret"), "x".into()]),
        ("FLUSHALL", vec![]),
        ("FLUSHDB", vec![]),
        ("KEYS", vec!["*".into()]),
        ("SWAPDB", vec!["0".into(), "1".into()]),
        ("CONFIG", vec!["GET".into(), "*".into()]),
        ("SELECT", vec!["1".into()]),
        ("SCRIPT", vec!["FLUSH".into()]),
        ("FUNCTION", vec!["FLUSH".into()]),
    ] {
        let e = redis::cmd(cmd)
            .arg(&args)
            .query::<redis::Value>(&mut c)
            .expect_err(cmd);
        assert!(
            e.to_string().contains("NOPERM") || e.code() == Some("NOPERM"),
            "{cmd}: {e}"
        );
    }
    assert_eq!(get(&format!("{p}:other:secret")).as_deref(), Some("theirs"));
    repo.ok(&home, &["remove", "w", "--force"]);
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query(&mut admin()).unwrap();
    assert!(!users.contains(&user), "{users:?}");
    assert_eq!(keys(&format!("{prefix}*")), Vec::<String>::new());
}

#[test]
fn a_dead_redis_is_named_by_host_and_port_never_the_password() {
    let home = Home::new();
    let toml = format!(
        "{}[services.cache]\nadapter = \"redis\"\nadmin_url = \"${{env.DEAD_REDIS}}\"\n",
        project_header("rddead", 2)
    );
    let repo = Repo::new(&toml);
    let out = Out(repo
        .cmd(&home, &["up", "a"])
        .env("DEAD_REDIS", "redis://:Hunter2Secret@127.0.0.1:1/0")
        .output()
        .unwrap());
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("cannot connect to 127.0.0.1:1"),
        "{out}"
    );
    assert!(!out.to_string().contains("Hunter2Secret"), "{out}");
    // Nothing half-made is recorded.
    let w = &repo.worlds(&home)["a"];
    assert_eq!(w["state"], "failed", "{w}");
}

#[test]
fn gc_sweeps_a_half_made_redis_slice() {
    if !redis_up() {
        skip("no Redis on 127.0.0.1:6379");
        return;
    }
    let p = project("g");
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let toml = format!(
        "{}[services.cache]\nadapter = \"redis\"\n",
        project_header(&p, 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "live"]);
    // What a daemon killed mid-provision leaves: a marker, some keys and a
    // `provisioning` row.
    let ghost = format!("{p}:ghost:");
    set(&format!("_binky:slice:{ghost}"), "");
    set(&format!("{ghost}k1"), "1");
    set(&format!("{ghost}k2"), "2");
    record_half_made_slice(&home, &p, "cache", "redis", &ghost);
    let out = repo.ok(&home, &["gc"]);
    assert!(out.stdout().contains("swept"), "{out}");
    assert_eq!(keys(&format!("{ghost}*")), Vec::<String>::new());
    assert_eq!(get(&format!("_binky:slice:{ghost}")), None);
    // The live world is untouched.
    assert_eq!(get(&format!("_binky:slice:{p}:live:")).as_deref(), Some(""));
    repo.ok(&home, &["remove", "live", "--force"]);
}

#[test]
fn two_worlds_brought_up_at_once_get_a_prefix_each() {
    if !redis_up() {
        skip("no Redis on 127.0.0.1:6379");
        return;
    }
    let p = project("c");
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let toml = format!(
        "{}[services.cache]\nadapter = \"redis\"\nseed = \"redis-cli -n 0 set ${{self.prefix}}seeded ${{worktree.name}}\"\n",
        project_header(&p, 4)
    );
    let repo = Repo::new(&toml);
    home.ok(&["daemon", "start"]);
    up_at_once(&repo, &home, &["one", "two"], &[]);
    for w in ["one", "two"] {
        assert_eq!(get(&format!("{p}:{w}:seeded")).as_deref(), Some(w));
        repo.ok(&home, &["remove", w, "--force"]);
        assert_eq!(keys(&format!("{p}:{w}:*")), Vec::<String>::new());
    }
}
