//! The `kafka` adapter (and its `redpanda` name) against a real
//! Kafka-protocol broker: tansu (crates.io), started by each test on a port
//! of its own. `.ci/run` builds it into `~/.cache/binky-tansu`; `BINKY_TANSU`
//! names another binary.

use crate::harness::*;
use crate::project::*;
use rskafka::client::partition::{Compression, OffsetAt, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use std::time::Duration;

/// A tansu broker for one test, stopped when dropped.
struct Tansu {
    child: std::process::Child,
    port: u16,
    rt: tokio::runtime::Runtime,
}

/// The tansu binary: `BINKY_TANSU`, the one `.ci/run` builds, or `PATH`'s.
fn tansu_bin() -> Option<std::path::PathBuf> {
    cached_tool("BINKY_TANSU", "binky-tansu/bin/tansu", "tansu")
}

impl Tansu {
    /// A broker keeping its topics in memory (`memory://`), or, with
    /// `null://`, one that answers every delete with success and deletes
    /// nothing: a broker with topic deletion disabled, as far as a client
    /// can tell.
    fn start(storage: &str) -> Option<Tansu> {
        let bin = tansu_bin()?;
        let port = free_port();
        let listen = format!("tcp://127.0.0.1:{port}");
        let child = std::process::Command::new(bin)
            .args([
                "broker",
                "--listener-url",
                &listen,
                "--advertised-listener-url",
                &listen,
                "--storage-engine",
                storage,
                "--silent",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let up = wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "tansu did not listen on {port}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Some(Tansu { child, port, rt })
    }

    fn url(&self) -> String {
        format!("kafka://127.0.0.1:{}", self.port)
    }

    fn client(&self) -> Client {
        let servers = vec![format!("127.0.0.1:{}", self.port)];
        self.rt
            .block_on(ClientBuilder::new(servers).build())
            .expect("a client of tansu")
    }

    /// Every topic, sorted.
    fn topics(&self) -> Vec<String> {
        let c = self.client();
        let mut t: Vec<String> = self
            .rt
            .block_on(c.list_topics())
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        t.sort();
        t
    }

    fn create(&self, topic: &str) {
        let c = self.client();
        self.rt
            .block_on(
                c.controller_client()
                    .unwrap()
                    .create_topic(topic, 1, 1, 5000),
            )
            .unwrap_or_else(|e| panic!("creating {topic}: {e}"));
    }

    /// Writes one record to partition 0 of `topic`.
    fn produce(&self, topic: &str, value: &str) {
        let c = self.client();
        self.rt.block_on(async {
            let p = c
                .partition_client(topic, 0, UnknownTopicHandling::Error)
                .await
                .unwrap_or_else(|e| panic!("{topic}: {e}"));
            let record = rskafka::record::Record {
                key: None,
                value: Some(value.as_bytes().to_vec()),
                headers: Default::default(),
                timestamp: rskafka::chrono::Utc::now(),
            };
            p.produce(vec![record], Compression::NoCompression)
                .await
                .unwrap();
        });
    }

    /// How many records partition 0 of `topic` holds.
    fn records(&self, topic: &str) -> i64 {
        let c = self.client();
        self.rt.block_on(async {
            let p = c
                .partition_client(topic, 0, UnknownTopicHandling::Error)
                .await
                .unwrap_or_else(|e| panic!("{topic}: {e}"));
            let end = p.get_offset(OffsetAt::Latest).await.unwrap();
            let start = p.get_offset(OffsetAt::Earliest).await.unwrap();
            end - start
        })
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A world's prefix, derived here independently of Binky:
/// `<project>-<slug>-<first 6 hex digits of sha256(project \0 slug)>-`.
fn prefix(project: &str, slug: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("{project}\0{slug}").as_bytes());
    format!("{project}-{slug}-{:02x}{:02x}{:02x}-", d[0], d[1], d[2])
}

const NO_TANSU: &str =
    "no tansu broker (cargo install tansu --features dynostore, or set BINKY_TANSU)";

fn kafka_project(name: &str, extra: &str) -> String {
    format!(
        "{}[services.bus]\nadapter = \"redpanda\"\nadmin_url = \"${{env.KAFKA_URL}}\"\noptions = {{ topics = [\"orders\", \"order.events\"]{extra} }}\n[services.app]\ncmd = \"echo ${{bus.prefix}} ${{bus.url}} > bus.txt; exec sleep 600\"\ndepends_on = [\"bus\"]\n",
        project_header(name, 2)
    )
}

#[test]
fn kafka_prefixes_isolate_worlds_and_teardown_deletes_exactly_their_topics() {
    let Some(kafka) = Tansu::start("memory://tansu/") else {
        skip(NO_TANSU);
        return;
    };
    let home = Home::new();
    let repo = Repo::new(&kafka_project("shop", ""));
    let run = |args: &[&str]| {
        let out = Out(repo
            .cmd(&home, args)
            .env("KAFKA_URL", kafka.url())
            .output()
            .unwrap());
        assert_eq!(out.code(), 0, "{args:?}: {out}");
        out
    };
    // Hyphenated and uppercase, a world whose name starts another's, and a
    // 150-character branch.
    let long = format!("feature/{}", "Very-Long-Branch-Name-".repeat(7));
    let worlds = ["feature/Login-Page", "feat-a", "feat-a-2", long.as_str()];
    let mut prefixes = Vec::new();
    for w in worlds {
        run(&["up", w]);
        let wt = std::path::PathBuf::from(repo.worlds(&home)[w]["path"].as_str().unwrap());
        let mut line = String::new();
        assert!(
            wait_until(Duration::from_secs(5), || {
                line = std::fs::read_to_string(wt.join("bus.txt")).unwrap_or_default();
                !line.is_empty()
            }),
            "{w}: no bus.txt"
        );
        let (prefix, url) = line.trim().split_once(' ').unwrap();
        assert_eq!(url, format!("127.0.0.1:{}", kafka.port), "{w}");
        assert!(
            prefix.starts_with("shop-") && prefix.ends_with('-'),
            "{prefix}"
        );
        assert!(
            prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{prefix}: only a-z, 0-9 and - avoid the ./_ collision"
        );
        assert!(prefix.len() + "order.events".len() <= 249, "{prefix}");
        // `env` gives the same address and the prefix, as JSON and as
        // shell lines.
        let env = run(&["env", w]).json();
        assert_eq!(env["services"]["bus"], url, "{w}");
        assert_eq!(env["fields"]["bus"]["prefix"], prefix, "{env}");
        let dotenv = run(&["env", w, "--dotenv"]).stdout();
        assert!(
            dotenv.contains(&format!("BUS_PREFIX='{prefix}'\n")),
            "{dotenv}"
        );
        prefixes.push(prefix.to_owned());
    }
    assert!(
        prefixes[0].starts_with("shop-feature-login-page"),
        "{prefixes:?}"
    );
    assert_eq!(prefixes[1], prefix("shop", "feat-a"));
    assert_eq!(prefixes[2], prefix("shop", "feat-a-2"));
    let (a, a2) = (prefixes[1].clone(), prefixes[2].clone());
    let topics = kafka.topics();
    for p in &prefixes {
        for t in ["orders", "order.events"] {
            assert!(topics.contains(&format!("{p}{t}")), "{p}{t}: {topics:?}");
        }
    }
    // A record in one world's topic is not in another's.
    kafka.produce(&format!("{a}orders"), "one");
    assert_eq!(kafka.records(&format!("{a}orders")), 1);
    assert_eq!(kafka.records(&format!("{a2}orders")), 0);
    // A topic the app made under its prefix is the world's too; a topic of
    // no world's is nobody's to delete.
    kafka.create(&format!("{a}scratch"));
    kafka.create("shop-feat-alpha");
    kafka.create("shop-feat-a-orders");
    run(&["remove", "feat-a", "--force"]);
    let topics = kafka.topics();
    for gone in [
        format!("{a}orders"),
        format!("{a}order.events"),
        format!("{a}scratch"),
        format!("_binky-slice-{a}"),
    ] {
        assert!(!topics.contains(&gone), "{gone} left: {topics:?}");
    }
    for kept in [
        format!("{a2}orders"),
        format!("{a2}order.events"),
        format!("_binky-slice-{a2}"),
        "shop-feat-alpha".to_owned(),
        "shop-feat-a-orders".to_owned(),
    ] {
        assert!(topics.contains(&kept), "{kept} gone: {topics:?}");
    }
    assert_eq!(kafka.records(&format!("{a2}orders")), 0);
    // gc sweeps a slice a crash mid-remove left: its marker and a topic.
    let ghost = prefix("shop", "ghost");
    up_then_crash_removing(&repo, &home, "ghost", &[("KAFKA_URL", &kafka.url())]);
    let made = kafka.topics();
    assert!(
        made.contains(&format!("_binky-slice-{ghost}")) && made.contains(&format!("{ghost}orders")),
        "{made:?}"
    );
    assert!(run(&["gc"]).stdout().contains("swept"));
    let topics = kafka.topics();
    assert!(!topics.iter().any(|t| t.contains(&ghost)), "{topics:?}");
    for w in [worlds[0], worlds[2], worlds[3]] {
        run(&["remove", w, "--force"]);
    }
    let left: Vec<String> = kafka
        .topics()
        .into_iter()
        .filter(|t| prefixes.iter().any(|p| t.contains(p.as_str())))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_topic_colliding_by_dot_or_underscore_is_named_and_nothing_is_made() {
    // Case A5, first half.
    let Some(kafka) = Tansu::start("memory://tansu/") else {
        skip(NO_TANSU);
        return;
    };
    let taken = format!("{}order_events", prefix("clash", "a"));
    kafka.create(&taken);
    let home = Home::new();
    let repo = Repo::new(&kafka_project("clash", ""));
    let up = Out(repo
        .cmd(&home, &["up", "a"])
        .env("KAFKA_URL", kafka.url())
        .output()
        .unwrap());
    assert_eq!(up.code(), 1, "{up}");
    assert!(
        up.stderr()
            .contains(&format!("collides with the existing topic `{taken}`")),
        "{up}"
    );
    let wanted = format!("{}order.events", prefix("clash", "a"));
    assert!(up.stderr().contains(&wanted), "{up}");
    // Nothing of the world is on the broker, and the topic it refused is
    // still there: no marker made, no topic deleted.
    assert_eq!(kafka.topics(), std::slice::from_ref(&taken));
    // A slice another Binky made (its marker and data, on a shared broker)
    // is refused, never torn down to start afresh.
    let theirs = prefix("clash", "b");
    let data = format!("{theirs}important-data");
    kafka.create(&format!("_binky-slice-{theirs}"));
    kafka.create(&data);
    let up = Out(repo
        .cmd(&home, &["up", "b"])
        .env("KAFKA_URL", kafka.url())
        .output()
        .unwrap());
    assert_eq!(up.code(), 1, "{up}");
    assert!(up.stderr().contains("this Binky did not make it"), "{up}");
    let topics = kafka.topics();
    assert!(topics.contains(&data), "{topics:?}");
    // Removing the failed world leaves the other Binky's slice alone.
    let rm = Out(repo
        .cmd(&home, &["remove", "b", "--force"])
        .env("KAFKA_URL", kafka.url())
        .output()
        .unwrap());
    assert_eq!(rm.code(), 0, "{rm}");
    assert!(kafka.topics().contains(&data), "{:?}", kafka.topics());
}

#[test]
fn a_broker_that_keeps_deleted_topics_fails_teardown_naming_them() {
    // Case A5, second half: tansu's null storage answers every delete with
    // success and keeps the topic, as a broker with deletion disabled that
    // only marks topics for deletion appears to a client.
    let Some(kafka) = Tansu::start("null://sink") else {
        skip(NO_TANSU);
        return;
    };
    let home = Home::new();
    // No app: `remove` without --force refuses a worktree with new files.
    let toml = format!(
        "{}[services.bus]\nadapter = \"kafka\"\nadmin_url = \"${{env.KAFKA_URL}}\"\noptions = {{ topics = [\"orders\", \"order.events\"], timeout = \"1s\" }}\n",
        project_header("keep", 2)
    );
    let repo = Repo::new(&toml);
    let env = [("KAFKA_URL", kafka.url())];
    let up = Out(repo
        .cmd(&home, &["up", "w"])
        .envs(env.clone())
        .output()
        .unwrap());
    assert_eq!(up.code(), 0, "{up}");
    let rm = Out(repo
        .cmd(&home, &["remove", "w"])
        .envs(env.clone())
        .output()
        .unwrap());
    assert_eq!(rm.code(), 1, "{rm}");
    let p = prefix("keep", "w");
    assert!(
        rm.stderr().contains(&format!("still lists {p}orders")),
        "{rm}"
    );
    assert!(rm.stderr().contains(&format!("{p}order.events")), "{rm}");
    assert!(rm.stderr().contains("delete.topic.enable"), "{rm}");
    assert_eq!(repo.worlds(&home)["w"]["state"], "failed");
    // The marker stays, so the slice is still known and can be swept.
    assert!(kafka.topics().contains(&format!("_binky-slice-{p}")));
    let forced = Out(repo
        .cmd(&home, &["remove", "w", "--force"])
        .envs(env)
        .output()
        .unwrap());
    assert_eq!(forced.code(), 0, "{forced}");
    assert!(
        forced
            .stdout()
            .contains(&format!("left for `binky gc`: {p}")),
        "{forced}"
    );
}

#[test]
fn a_dead_broker_is_named_and_the_failed_world_holds_no_slice() {
    let home = Home::new();
    let repo = Repo::new(&kafka_project("kdead", ""));
    let out = Out(repo
        .cmd(&home, &["up", "a"])
        .env("KAFKA_URL", "kafka://127.0.0.1:1")
        .output()
        .unwrap());
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("127.0.0.1:1"), "{out}");
    assert!(out.stderr().contains("cannot connect"), "{out}");
    // Credentials are refused without being echoed.
    let out = Out(repo
        .cmd(&home, &["up", "b"])
        .env("KAFKA_URL", "kafka://admin:Hunter2Secret@127.0.0.1:1")
        .output()
        .unwrap());
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("SASL"), "{out}");
    assert!(!out.to_string().contains("Hunter2Secret"), "{out}");
    // A URL refused by the adapter's reader is refused before anything is
    // made (as `check` refuses it): no world `b`. A broker that does not
    // answer is found only by trying: the world `a` is kept as `failed`
    // for `up` to retry or `remove` to drop, its error shown by `status`.
    assert!(out.stderr().contains("nothing was made"), "{out}");
    let worlds = repo.worlds(&home);
    assert_eq!(worlds["a"]["state"], "failed", "{worlds:?}");
    assert!(worlds.get("b").is_none(), "{worlds:?}");
    assert!(!format!("{worlds:?}").contains("Hunter2Secret"));
    // Nothing was made on a broker that never answered: no slice is
    // recorded for `remove` or `gc` to reach, and `remove` says none.
    let conn = rusqlite::Connection::open(home.file("registry.db")).unwrap();
    let slices: i64 = conn
        .query_row("SELECT count(*) FROM slices", [], |r| r.get(0))
        .unwrap();
    assert_eq!(slices, 0);
    let rm = repo.run_with(
        &home,
        &["remove", "a"],
        &[("KAFKA_URL", "kafka://127.0.0.1:1")],
    );
    assert_eq!(rm.code(), 0, "{rm}");
    assert!(!rm.to_string().contains("slices"), "{rm}");
    assert!(repo.worlds(&home).is_empty());
}

#[test]
fn two_worlds_brought_up_at_once_get_a_prefix_each() {
    let Some(kafka) = Tansu::start("memory://tansu/") else {
        skip(NO_TANSU);
        return;
    };
    let home = Home::new();
    let repo = Repo::new(&kafka_project("kc", ""));
    home.ok(&["daemon", "start"]);
    let url = kafka.url();
    up_at_once(&repo, &home, &["one", "two"], &[("KAFKA_URL", &url)]);
    let topics = kafka.topics();
    for w in ["one", "two"] {
        for t in ["orders", "order.events"] {
            let name = format!("{}{t}", prefix("kc", w));
            assert!(topics.contains(&name), "{name}: {topics:?}");
        }
        let rm = Out(repo
            .cmd(&home, &["remove", w, "--force"])
            .env("KAFKA_URL", &url)
            .output()
            .unwrap());
        assert_eq!(rm.code(), 0, "{rm}");
    }
    assert!(
        !kafka.topics().iter().any(|t| t.contains("kc-")),
        // (every topic of this broker was made by this test's worlds)
        "{:?}",
        kafka.topics()
    );
}

/// Issue: a teardown rendered `admin_url` as it was at that moment, so a
/// world upped on one broker and removed with another named deleted
/// nothing where its topics were, and said "removed".
#[test]
fn a_world_made_on_one_broker_is_torn_down_there_whatever_admin_url_names_now() {
    let (Some(first), Some(second)) = (
        Tansu::start("memory://tansu/"),
        Tansu::start("memory://tansu/"),
    ) else {
        skip(NO_TANSU);
        return;
    };
    let home = Home::new();
    let toml = format!(
        "{}[services.bus]\nadapter = \"kafka\"\nadmin_url = \"${{env.KAFKA_URL}}\"\noptions = {{ topics = [\"orders\"] }}\n",
        project_header("moved", 2)
    );
    let repo = Repo::new(&toml);
    let run = |url: &str, args: &[&str]| repo.run_with(&home, args, &[("KAFKA_URL", url)]);
    let up = run(&first.url(), &["up", "w"]);
    assert_eq!(up.code(), 0, "{up}");
    let p = prefix("moved", "w");
    assert!(first.topics().contains(&format!("{p}orders")));
    // A restarted daemon has no memory of the `up`'s environment.
    home.ok(&["daemon", "stop"]);
    let rm = run(&second.url(), &["remove", "w"]);
    assert_eq!(rm.code(), 0, "{rm}");
    assert!(
        rm.to_string()
            .contains(&format!("was made on {}", first.url())),
        "{rm}"
    );
    let left: Vec<String> = first
        .topics()
        .into_iter()
        .filter(|t| t.contains(&p))
        .collect();
    assert!(left.is_empty(), "left on the first broker: {left:?}");
    assert!(second.topics().iter().all(|t| !t.contains(&p)));
}

/// `options.partitions` reaches the broker: each topic is made with the
/// partitions asked for, written as a number or rendered from a token. (tansu accepts any replication factor on one broker
/// and reports none back, so `replication_factor` cannot be observed here.)
#[test]
fn partitions_are_applied_to_every_topic() {
    let Some(kafka) = Tansu::start("memory://tansu/") else {
        skip(NO_TANSU);
        return;
    };
    let home = Home::new();
    let url = kafka.url();
    let repo = Repo::new(&kafka_project("kparts", ", partitions = 3"));
    let up = repo.run_with(&home, &["up", "w"], &[("KAFKA_URL", &url)]);
    assert_eq!(up.code(), 0, "{up}");
    let c = kafka.client();
    let topics = kafka.rt.block_on(c.list_topics()).unwrap();
    let ours: Vec<_> = topics
        .iter()
        .filter(|t| t.name.starts_with(&prefix("kparts", "w")))
        .collect();
    assert_eq!(ours.len(), 2, "{topics:?}");
    for t in &ours {
        assert_eq!(t.partitions.len(), 3, "{t:?}");
    }
    // From a token: rendered text, read as the count it spells.
    let repo = Repo::new(&kafka_project("ktoken", ", partitions = \"${env.P}\""));
    assert_eq!(repo.run(&home, &["check"]).code(), 0);
    let up = repo.run_with(&home, &["up", "w"], &[("KAFKA_URL", &url), ("P", "2")]);
    assert_eq!(up.code(), 0, "{up}");
    let topics = kafka.rt.block_on(c.list_topics()).unwrap();
    let ours: Vec<_> = topics
        .iter()
        .filter(|t| t.name.starts_with(&prefix("ktoken", "w")))
        .collect();
    assert_eq!(ours.len(), 2, "{topics:?}");
    for t in &ours {
        assert_eq!(t.partitions.len(), 2, "{t:?}");
    }
    let bad = repo.run_with(&home, &["up", "x"], &[("KAFKA_URL", &url), ("P", "many")]);
    assert_eq!(bad.code(), 1, "{bad}");
    assert!(bad.stderr().contains("options.partitions"), "{bad}");
}
