//! The `redis` adapter (and its `valkey` name) against the Redis server on
//! 127.0.0.1:6379.

use crate::harness::*;
use crate::project::*;

pub(crate) const SERVER: &str = "redis://127.0.0.1:6379/0";

pub(crate) fn redis_up() -> bool {
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
pub(crate) fn keys(pattern: &str) -> Vec<String> {
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

pub(crate) fn get(key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(&mut admin()).unwrap()
}

/// Deletes this test's keys (its project's and its markers) however the
/// test ends.
pub(crate) struct Cleanup(pub(crate) String);

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

pub(crate) fn project(tag: &str) -> String {
    format!("rd{tag}{}", std::process::id() % 100000)
}

/// Project `tag` with one plain redis resource, `cache`: its name, the
/// guard that deletes its keys, a home and the repository. `None`, having
/// said so, without a Redis server.
fn cache_project(tag: &str) -> Option<(String, Cleanup, Home, Repo)> {
    if !redis_up() {
        skip("no Redis on 127.0.0.1:6379");
        return None;
    }
    let p = project(tag);
    let cleanup = Cleanup(p.clone());
    let toml = format!(
        "{}[services.cache]\nadapter = \"redis\"\n",
        project_header(&p, 2)
    );
    Some((p, cleanup, Home::new(), Repo::new(&toml)))
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
        let url = env["services"]["cache"].as_str().unwrap().to_owned();
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
    let url = env.json()["services"]["cache"].as_str().unwrap().to_owned();
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

/// A world made without `acl` gets its own ACL user when the option is
/// turned on and the world reloaded: its keys kept, its URL then the
/// user's, the user confined to its prefix; `remove` deletes the user.
#[test]
fn turning_acl_on_upgrades_a_world_in_place_on_reload_and_keeps_its_keys() {
    if !redis_up() {
        skip("no Redis on 127.0.0.1:6379");
        return;
    }
    let p = project("up");
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let plain = format!(
        "{}[services.cache]\nadapter = \"redis\"\nadmin_url = \"{SERVER}\"\n",
        project_header(&p, 2)
    );
    let repo = Repo::new(&plain);
    repo.ok(&home, &["up", "w"]);
    let prefix = format!("{p}:w:");
    set(&format!("{prefix}kept"), "data");
    set(&format!("{p}:other:secret"), "theirs");
    let with_acl = plain.replace(
        "admin_url = \"redis://127.0.0.1:6379/0\"\n",
        "admin_url = \"redis://127.0.0.1:6379/0\"\noptions = { acl = true }\n",
    );
    assert_ne!(with_acl, plain);
    let tree = std::path::PathBuf::from(repo.worlds(&home)["w"]["path"].as_str().unwrap());
    for dir in [repo.main.as_path(), tree.as_path()] {
        std::fs::write(dir.join("binky.toml"), &with_acl).unwrap();
    }
    let reload = repo.run(&home, &["reload", "w"]);
    assert_eq!(reload.code(), 0, "{reload}");
    let url = repo.ok(&home, &["env", "w"]).json()["services"]["cache"]
        .as_str()
        .unwrap()
        .to_owned();
    let user = format!("binky_{p}_w");
    assert!(url.starts_with(&format!("redis://{user}:")), "{url}");
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let kept: String = redis::cmd("GET")
        .arg(format!("{prefix}kept"))
        .query(&mut c)
        .unwrap();
    assert_eq!(kept, "data");
    let e = redis::cmd("GET")
        .arg(format!("{p}:other:secret"))
        .query::<redis::Value>(&mut c)
        .expect_err("another prefix");
    assert!(
        e.to_string().contains("NOPERM") || e.code() == Some("NOPERM"),
        "{e}"
    );
    // A second reload keeps the same user and password.
    repo.ok(&home, &["reload", "w"]);
    let again = repo.ok(&home, &["env", "w"]).json()["services"]["cache"].clone();
    assert_eq!(again, url.as_str());
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
    let Some((p, _cleanup, home, repo)) = cache_project("g") else {
        return;
    };
    repo.ok(&home, &["up", "live"]);
    // A daemon killed mid-remove: the marker and the app's keys are on the
    // server, the row says `teardown`.
    up_then_crash_removing(&repo, &home, "ghost", &[]);
    let ghost = format!("{p}:ghost:");
    assert_eq!(get(&format!("_binky:slice:{ghost}")).as_deref(), Some(""));
    set(&format!("{ghost}k1"), "1");
    set(&format!("{ghost}k2"), "2");
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

/// A second Redis server of this test's own, on a free port, with a
/// password: another server than 127.0.0.1:6379, reached with other
/// credentials. Stopped when dropped.
struct OtherRedis {
    child: std::process::Child,
    port: u16,
}

impl OtherRedis {
    fn start(password: &str) -> Option<OtherRedis> {
        let port = free_port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--requirepass",
                password,
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let up = wait_until(std::time::Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        up.then_some(OtherRedis { child, port })
    }
}

impl Drop for OtherRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue: `remove` rendered `admin_url` from the environment of the moment,
/// tore down in another database, and said "removed" with the keys and
/// marker still in the one the slice was made in.
#[test]
fn a_teardown_reaches_the_server_the_slice_was_made_on() {
    if !redis_up() {
        skip("no Redis on 127.0.0.1:6379");
        return;
    }
    let Some(other) = OtherRedis::start("Other5ecret") else {
        skip("cannot start a second redis-server");
        return;
    };
    let p = project("m");
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let toml = format!(
        "{}[services.cache]\nadapter = \"redis\"\nadmin_url = \"${{env.R_URL}}\"\n",
        project_header(&p, 4)
    );
    let repo = Repo::new(&toml);
    let run =
        |url: &str, args: &[&str]| Out(repo.cmd(&home, args).env("R_URL", url).output().unwrap());
    let db0 = "redis://127.0.0.1:6379/0";
    let db5 = "redis://127.0.0.1:6379/5";
    let elsewhere = format!("redis://:Other5ecret@127.0.0.1:{}/0", other.port);
    let prefix = format!("{p}:rmt:");
    let marker = format!("_binky:slice:{prefix}");

    // Another database, the same (no) credentials: torn down in db 0,
    // where it was made, and the output says so.
    let up = run(db0, &["up", "rmt"]);
    assert_eq!(up.code(), 0, "{up}");
    set(&format!("{prefix}x"), "1");
    // A daemon that restarted since the `up` no longer has its
    // environment: only the credentials tell the way back.
    home.ok(&["daemon", "stop"]);
    let rm = run(db5, &["remove", "rmt"]);
    assert_eq!(rm.code(), 0, "{rm}");
    assert!(
        rm.to_string()
            .contains("was made on redis://127.0.0.1:6379/0"),
        "{rm}"
    );
    assert_eq!(keys(&format!("{prefix}*")), Vec::<String>::new());
    assert_eq!(get(&marker), None);
    assert!(
        run(db0, &["gc", "--dry-run"])
            .stdout()
            .contains("nothing to sweep")
    );
    // …so the world can be made again where it was.
    let again = run(db0, &["up", "rmt"]);
    assert_eq!(again.code(), 0, "{again}");

    home.ok(&["daemon", "stop"]);
    // Another server, other credentials: the slice cannot be reached with
    // what is at hand. `remove` stops, naming both servers, and keeps the
    // world; no password is shown.
    let refused = run(&elsewhere, &["remove", "rmt"]);
    assert_eq!(refused.code(), 1, "{refused}");
    let text = refused.to_string();
    assert!(
        text.contains("was made on redis://127.0.0.1:6379/0")
            && text.contains(&format!("redis://127.0.0.1:{}/0", other.port)),
        "{refused}"
    );
    assert!(!text.contains("Other5ecret"), "{refused}");
    assert_eq!(get(&marker).as_deref(), Some(""));
    assert!(repo.worlds(&home).contains_key("rmt"));
    // `up` of the stopped world against the other server refuses too: its
    // data is on the first.
    assert_eq!(run(db0, &["down", "rmt"]).code(), 0);
    let moved = run(&elsewhere, &["up", "rmt"]);
    assert_eq!(moved.code(), 1, "{moved}");
    assert!(
        moved
            .to_string()
            .contains("lives on redis://127.0.0.1:6379/0"),
        "{moved}"
    );
    assert_eq!(get(&marker).as_deref(), Some(""));
    // With --force the world goes and the slice is left to gc, which
    // cannot reach it either and says so rather than "swept"…
    let forced = run(&elsewhere, &["remove", "rmt", "--force"]);
    assert_eq!(forced.code(), 0, "{forced}");
    assert!(forced.to_string().contains("binky gc"), "{forced}");
    let gc = run(&elsewhere, &["gc"]);
    assert!(
        gc.stdout().contains("not swept") && !gc.stdout().contains(" swept\n"),
        "{gc}"
    );
    assert_eq!(get(&marker).as_deref(), Some(""));
    // …until the credentials it was made with are back.
    let gc = run(db0, &["gc"]);
    assert!(gc.stdout().contains("swept"), "{gc}");
    assert_eq!(get(&marker), None);
    assert!(
        run(db0, &["gc", "--dry-run"])
            .stdout()
            .contains("nothing to sweep")
    );

    // A slice gone from its server (its marker deleted by hand) is not
    // reported as torn down.
    assert_eq!(run(db0, &["up", "gone"]).code(), 0);
    let _: () = redis::cmd("DEL")
        .arg(format!("_binky:slice:{p}:gone:"))
        .query(&mut admin())
        .unwrap();
    let rm = run(db0, &["remove", "gone"]);
    assert_eq!(rm.code(), 0, "{rm}");
    assert!(
        rm.to_string()
            .contains("was not on redis://127.0.0.1:6379/0"),
        "{rm}"
    );
}

/// Issue: a wrong password was answered "check that the server runs and
/// that admin_url names it"; the server runs, it refused the credentials.
#[test]
fn refused_credentials_and_a_missing_database_are_named_as_such_never_shown() {
    let Some(other) = OtherRedis::start("Right5ecret") else {
        skip("cannot start a redis-server");
        return;
    };
    let home = Home::new();
    let toml = format!(
        "{}[services.cache]\nadapter = \"redis\"\nadmin_url = \"${{env.R_URL}}\"\n",
        project_header("rdauth", 2)
    );
    let repo = Repo::new(&toml);
    for (url, says) in [
        (
            format!("redis://:Wrong5ecret@127.0.0.1:{}/0", other.port),
            "refused the credentials: the password in admin_url is not the server's",
        ),
        (
            format!("redis://127.0.0.1:{}/0", other.port),
            "refused the credentials: admin_url gives no password and the server requires one",
        ),
        // A database the server does not have: it answers, so "is it
        // running" is the wrong question too.
        (
            format!("redis://:Right5ecret@127.0.0.1:{}/16", other.port),
            "has no database 16 (the /16 of admin_url): Redis server refused to switch database: DB index is out of range",
        ),
    ] {
        let out = repo.run_with(&home, &["up", "a"], &[("R_URL", &url)]);
        assert_eq!(out.code(), 1, "{out}");
        assert!(out.stderr().contains(says), "{out}");
        assert!(
            !out.stderr().contains("check that the server runs"),
            "{out}"
        );
        assert!(!out.to_string().contains("Wrong5ecret"), "{out}");
    }
}

/// The adapter's own teardown, on the real server: a prefix without
/// Binky's marker is refused and its keys kept; a prefix with neither keys
/// nor marker is already gone; a marked one is deleted, marker last.
#[test]
fn teardown_deletes_only_a_marked_prefix_and_takes_a_gone_one_as_done() {
    use binky::adapters::{Adapter, Slice, redis::Redis};
    if !redis_up() {
        skip("no Redis on 127.0.0.1:6379");
        return;
    }
    let p = project("own");
    let _cleanup = Cleanup(p.clone());
    let slice = |world: &str| Slice {
        name: Redis.slice_name(&p, None, world),
        project: p.clone(),
        admin_url: Some(binky::address::AdminUrl::new(SERVER)),
        options: toml::Table::new(),
        data_dir: std::env::temp_dir(),
        search_path: None,
        secret: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Someone else's keys under a prefix Binky would give a world: not
    // taken over by provision, not deleted by teardown.
    let theirs = slice("theirs");
    set(&format!("{}order:1", theirs.name), "kept");
    let e = rt.block_on(Redis.provision(&theirs)).unwrap_err();
    assert!(
        e.message.contains("keys already lie under the prefix"),
        "{e}"
    );
    assert!(
        !rt.block_on(Redis.exists(&theirs)).unwrap(),
        "no marker made"
    );
    let e = rt.block_on(Redis.teardown(&theirs)).unwrap_err();
    assert!(
        e.message.contains("refusing to delete") && e.message.contains("no Binky marker"),
        "{e}"
    );
    assert!(e.message.contains("127.0.0.1:6379"), "{e}");
    assert_eq!(
        get(&format!("{}order:1", theirs.name)).as_deref(),
        Some("kept")
    );
    // Nothing there at all: done, and nothing is touched.
    rt.block_on(Redis.teardown(&slice("gone"))).unwrap();
    // Binky's own: made, written to, torn down.
    let ours = slice("ours");
    rt.block_on(Redis.provision(&ours)).unwrap();
    set(&format!("{}k", ours.name), "v");
    assert!(rt.block_on(Redis.exists(&ours)).unwrap());
    rt.block_on(Redis.teardown(&ours)).unwrap();
    assert_eq!(keys(&format!("{}*", ours.name)), Vec::<String>::new());
    assert!(!rt.block_on(Redis.exists(&ours)).unwrap());
    assert_eq!(
        get(&format!("{}order:1", theirs.name)).as_deref(),
        Some("kept")
    );
}

/// `remove` of a world whose marker was deleted by hand while its keys
/// stayed: the teardown's guard refuses (the keys may no longer be the
/// world's), the keys stay, and the record is kept rather than dropped as
/// "not on the server".
#[test]
fn remove_refuses_keys_under_a_prefix_whose_marker_is_gone() {
    let Some((p, _cleanup, home, repo)) = cache_project("nomark") else {
        return;
    };
    repo.ok(&home, &["up", "w"]);
    let key = format!("{p}:w:data");
    set(&key, "v");
    let _: () = redis::cmd("DEL")
        .arg(format!("_binky:slice:{p}:w:"))
        .query(&mut admin())
        .unwrap();
    let rm = Out(repo.cmd(&home, &["remove", "w"]).output().unwrap());
    assert_ne!(rm.code(), 0, "{rm}");
    assert!(rm.stderr().contains("no Binky marker"), "{rm}");
    assert!(!rm.stderr().contains("not on"), "{rm}");
    assert_eq!(get(&key).as_deref(), Some("v"));
    // Once the keys are gone by hand, the same remove finishes.
    let _: () = redis::cmd("DEL").arg(&key).query(&mut admin()).unwrap();
    let rm = Out(repo.cmd(&home, &["remove", "w"]).output().unwrap());
    assert_eq!(rm.code(), 0, "{rm}");
}
