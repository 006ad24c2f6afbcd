//! Handler-level tests: a [`Daemon`] built over a temporary home and
//! registry, each verb called through [`handlers::handle`] as the server
//! calls it, the world's slice made by an in-memory adapter. A verb's logic
//! (what it records, starts, keeps and tears down) is checked here without
//! a socket, a CLI or a database server; `tests/it/` checks the same verbs
//! end to end against real servers.

use super::{Daemon, ProgressTx, handlers, settings};
use crate::adapters::catalog::Facts;
use crate::adapters::{Adapter, AdapterError, Slice};
use crate::paths::Paths;
use crate::protocol::{
    ApiError, ClientEnv, Request, Response, ServiceKind, UpRequest, WorldOutcome, WorldRef,
    WorldState,
};
use crate::registry::Registry;
use crate::testkit::git;
use async_trait::async_trait;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Slices held in memory: a set of names, and every call in order.
/// `fail_provision` makes `provision` fail after recording the call, as a
/// server that refuses would.
#[derive(Default)]
struct Memory {
    slices: Mutex<BTreeSet<String>>,
    calls: Mutex<Vec<String>>,
    fail_provision: bool,
}

impl Memory {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn slices(&self) -> Vec<String> {
        self.slices.lock().unwrap().iter().cloned().collect()
    }

    fn record(&self, verb: &str, slice: &Slice) {
        self.calls
            .lock()
            .unwrap()
            .push(format!("{verb} {}", slice.name));
    }
}

#[async_trait]
impl Adapter for Memory {
    fn name(&self) -> &str {
        "memory"
    }

    fn facts(&self) -> Facts {
        Facts {
            serverless: true,
            ..Facts::SERVER
        }
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        self.record("provision", slice);
        if self.fail_provision {
            return Err(AdapterError::new("memory: the server refused"));
        }
        if !self.slices.lock().unwrap().insert(slice.name.clone()) {
            return Err(AdapterError::new(format!("{} exists", slice.name)));
        }
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        Ok(format!("memory://{}", slice.name))
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        self.record("teardown", slice);
        self.slices.lock().unwrap().remove(&slice.name);
        Ok(())
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        Ok(self.slices.lock().unwrap().contains(&slice.name))
    }
}

/// A daemon over a temporary home, a git repository holding one project
/// (a `memory` resource `db` and a process `app` that sees its address),
/// and the adapter its slices go to.
struct Fixture {
    d: Arc<Daemon>,
    memory: Arc<Memory>,
    repo: PathBuf,
    _dir: tempfile::TempDir,
}

/// Eight ports that nothing listens on now, for the project's range.
fn port_range() -> (u16, u16) {
    loop {
        let lo = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if let Some(hi) = lo.checked_add(7)
            && (lo..=hi).all(crate::ports::is_free)
        {
            return (lo, hi);
        }
    }
}

impl Fixture {
    fn new(memory: Memory) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("app");
        std::fs::create_dir(&repo).unwrap();
        let (lo, hi) = port_range();
        // `sleep` ends on its own if a failed test leaves it behind; it
        // listens nowhere, so its probe is a command.
        let toml = format!(
            "[project]\nname = \"unit\"\nport_range = [{lo}, {hi}]\n\n\
             [services.db]\nadapter = \"memory\"\n\n\
             [services.app]\ncmd = \"exec sleep 120\"\nurl = \"app\"\nhealth = {{ cmd = \"true\" }}\ndepends_on = [\"db\"]\n\
             env = {{ DB = \"${{db.url}}\", PORT = \"${{self.port}}\" }}\n\n\
             [env]\nDATABASE_URL = \"${{db.url}}\"\n\n\
             [agents]\nverify = [\"test -f binky.toml\", \"test \\\"$DATABASE_URL\\\" = memory://unit_checked\"]\n"
        );
        std::fs::write(repo.join("binky.toml"), toml).unwrap();
        git(&repo, &["init", "-q"]);
        git(&repo, &["add", "binky.toml"]);
        git(&repo, &["commit", "-q", "-m", "project"]);
        let paths = Paths::at(dir.path().join("home"));
        paths.ensure().unwrap();
        let registry = Registry::open(&paths.registry()).unwrap();
        let memory = Arc::new(memory);
        let d = Arc::new(Daemon::new(paths, registry).with_adapter(memory.clone()));
        settings::init_defaults(&d).unwrap();
        d.registry(|r| r.record_session(crate::platform::session_id(), crate::platform::pid()))
            .unwrap();
        Fixture {
            d,
            memory,
            repo,
            _dir: dir,
        }
    }

    fn world(&self, name: &str) -> WorldRef {
        WorldRef {
            project_dir: Some(self.repo.display().to_string()),
            project: None,
            name: name.to_owned(),
        }
    }

    fn up_request(&self, name: &str, wait: bool) -> UpRequest {
        UpRequest {
            detach: false,
            idle_after: None,
            world: self.world(name),
            group: None,
            caller: None,
            env: ClientEnv(std::env::vars().filter(|(k, _)| k == "PATH").collect()),
            wait,
        }
    }

    /// Runs `req` as the server would, with progress dropped.
    async fn call(&self, req: Request) -> Result<Response, ApiError> {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
        handlers::handle(&self.d, req, ProgressTx { tx, cancel }).await
    }

    async fn world_verb(&self, req: Request) -> WorldOutcome {
        match self.call(req).await {
            Ok(Response::World(o)) => o,
            other => panic!("expected a world outcome, got {other:?}"),
        }
    }

    async fn up(&self, name: &str) -> WorldOutcome {
        self.world_verb(Request::Up(self.up_request(name, true)))
            .await
    }

    async fn down(&self, name: &str) -> WorldOutcome {
        self.world_verb(Request::Down(self.world(name))).await
    }

    async fn remove(&self, name: &str) -> WorldOutcome {
        self.world_verb(Request::Remove {
            world: self.world(name),
            force: false,
            env: ClientEnv::default(),
        })
        .await
    }

    /// The world's state as `status` reports it.
    fn state(&self, name: &str) -> Option<WorldState> {
        let report = self.d.registry(|r| r.status(None)).unwrap();
        report
            .projects
            .iter()
            .flat_map(|p| &p.worlds)
            .find(|w| w.name == name)
            .map(|w| w.state)
    }

    /// Waits (at most 30 s) until the world is in `state`.
    async fn wait_state(&self, name: &str, state: WorldState) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.state(name) != Some(state) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} never became {state:?}; it is {:?}",
                self.state(name)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn app_pid(o: &WorldOutcome) -> u32 {
    o.world
        .services
        .iter()
        .find(|s| s.name == "app" && s.kind == ServiceKind::Process)
        .and_then(|s| s.pid)
        .unwrap_or_else(|| panic!("app has no pid: {o:?}"))
}

fn alive(pid: u32) -> bool {
    // A zombie is dead for this purpose: its process has ended.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

async fn gone(pid: u32) -> bool {
    for _ in 0..500 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_down_up_reload_remove_make_keep_and_tear_down_one_slice() {
    let f = Fixture::new(Memory::default());
    let first = f.up("feature-a").await;
    assert_eq!(first.world.state, WorldState::Running, "{first:?}");
    assert_eq!(f.memory.slices(), ["unit_feature-a"]);
    let pid = app_pid(&first);
    assert!(alive(pid));
    // The process got the slice's address, rendered. /proc shows the
    // environment the child was forked with until it execs, and an empty one
    // for a moment inside each exec (`sh -c "exec sleep"` execs twice; CI
    // once read it empty): wait until the address shows, within 10 s.
    let has_db = || {
        std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|e| {
            e.split(|b| *b == 0)
                .any(|v| v == b"DB=memory://unit_feature-a")
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !has_db() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "DB is not the slice's address"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let worktree = PathBuf::from(&first.world.path);
    assert!(worktree.join("binky.toml").is_file());

    // down stops the process and keeps the slice and the worktree.
    let down = f.down("feature-a").await;
    assert_eq!(down.world.state, WorldState::Stopped);
    assert!(gone(pid).await, "app {pid} outlived down");
    assert_eq!(f.memory.slices(), ["unit_feature-a"]);
    assert!(worktree.is_dir());

    // up again reuses the slice (no second provision) and the ports.
    let again = f.up("feature-a").await;
    assert_eq!(again.world.state, WorldState::Running);
    assert_eq!(f.memory.calls(), ["provision unit_feature-a"]);
    let port = |o: &WorldOutcome| o.world.services.iter().find_map(|s| s.port);
    assert!(port(&first).is_some(), "{first:?}");
    assert_eq!(port(&again), port(&first));

    // reload: a new process, the same slice.
    let old = app_pid(&again);
    let reloaded = f
        .world_verb(Request::Reload(f.up_request("feature-a", true)))
        .await;
    assert_ne!(app_pid(&reloaded), old);
    assert!(gone(old).await);
    let pid = app_pid(&reloaded);

    // remove: the process, the slice (once) and the worktree go; the
    // registry forgets the world.
    let removed = f.remove("feature-a").await;
    assert_eq!(removed.torn_down, ["unit_feature-a"], "{removed:?}");
    assert!(gone(pid).await, "app {pid} outlived remove");
    assert_eq!(
        f.memory.calls(),
        ["provision unit_feature-a", "teardown unit_feature-a"]
    );
    assert!(f.memory.slices().is_empty());
    assert!(!worktree.exists());
    assert_eq!(f.state("feature-a"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_provision_fails_up_and_leaves_no_slice_and_no_process() {
    let f = Fixture::new(Memory {
        fail_provision: true,
        ..Memory::default()
    });
    let err = f
        .call(Request::Up(f.up_request("broken", true)))
        .await
        .expect_err("up must fail");
    assert!(
        err.message.contains("services.db") && err.message.contains("the server refused"),
        "{err:?}"
    );
    assert_eq!(f.state("broken"), Some(WorldState::Failed));
    let owner =
        f.d.registry(|r| r.slice_owner("memory", "unit_broken"))
            .unwrap();
    assert_eq!(owner, None, "a slice that was never made is recorded");
    // The process that needs the slice never started.
    assert!(
        f.d.registry(|r| r.status(None)).unwrap().projects[0].worlds[0]
            .services
            .iter()
            .all(|s| s.pid.is_none())
    );
    // The failed provision was dropped at once (a server may have made
    // part of it); remove then has nothing left to tear down.
    let dropped = ["provision unit_broken", "teardown unit_broken"];
    assert_eq!(f.memory.calls(), dropped);
    let removed = f.remove("broken").await;
    assert!(removed.torn_down.is_empty(), "{removed:?}");
    assert_eq!(f.memory.calls(), dropped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_max_parallel_one_a_second_up_queues_until_the_first_is_down() {
    let f = Fixture::new(Memory::default());
    settings::set_reserve(
        &f.d,
        settings::ReserveChange {
            max_parallel: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    f.up("first").await;
    let queued = f
        .world_verb(Request::Up(f.up_request("second", false)))
        .await;
    assert_eq!(queued.world.state, WorldState::Queued, "{queued:?}");
    let place = queued.world.queue.as_ref().expect("a queue place");
    assert_eq!((place.position, place.of), (1, 1));
    // Nothing of the queued world is made while it waits.
    assert_eq!(f.memory.slices(), ["unit_first"]);
    // A third waits behind it; `down` takes it out of the queue, and since
    // it was never made, that is all it does.
    let third = f
        .world_verb(Request::Up(f.up_request("third", false)))
        .await;
    assert_eq!(third.world.queue.as_ref().map(|q| q.position), Some(2));
    let queued = || -> Vec<String> {
        let q = f.d.registry(|r| r.queue()).unwrap();
        q.into_iter().map(|r| r.world).collect()
    };
    assert_eq!(queued(), ["second", "third"]);
    let withdrawn = f.down("third").await;
    assert!(withdrawn.left_queue, "{withdrawn:?}");
    assert!(withdrawn.world.path.is_empty(), "{withdrawn:?}");
    assert_eq!(queued(), ["second"]);

    f.down("first").await;
    f.wait_state("second", WorldState::Running).await;
    assert_eq!(f.memory.slices(), ["unit_first", "unit_second"]);

    for w in ["first", "second"] {
        f.remove(w).await;
    }
    assert!(f.memory.slices().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_drops_and_remakes_the_slice_on_the_same_worktree_and_ports() {
    let f = Fixture::new(Memory::default());
    let first = f.up("r").await;
    let port = |o: &WorldOutcome| o.world.services.iter().find_map(|s| s.port);
    let old = app_pid(&first);
    let reset_of = |service: &str| {
        Request::Reset(crate::protocol::ResetRequest {
            up: f.up_request("r", true),
            services: vec![service.to_owned()],
            all: false,
            force: false,
        })
    };
    let reset = f.world_verb(reset_of("db")).await;
    assert_eq!(reset.world.state, WorldState::Running, "{reset:?}");
    assert_eq!(
        f.memory.calls(),
        ["provision unit_r", "teardown unit_r", "provision unit_r"]
    );
    assert_eq!(f.memory.slices(), ["unit_r"]);
    assert_eq!(port(&reset), port(&first));
    assert_eq!(reset.world.path, first.world.path);
    // The process that used the old slice was restarted on the new one.
    assert!(gone(old).await, "app {old} outlived the reset");
    assert!(alive(app_pid(&reset)));
    // A service that is not a resource has no slice to reset.
    let err = f
        .call(reset_of("app"))
        .await
        .expect_err("reset of a process");
    assert!(err.message.contains("app"), "{err:?}");
    assert_eq!(f.memory.calls().len(), 3);
    f.remove("r").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_and_locate_answer_from_the_running_world() {
    let f = Fixture::new(Memory::default());
    let up = f.up("e").await;
    let env = match f
        .call(Request::Env {
            world: f.world("e"),
            env: ClientEnv::default(),
            reveal: false,
            agent: false,
        })
        .await
    {
        Ok(Response::Env(e)) => e,
        other => panic!("expected env, got {other:?}"),
    };
    assert_eq!(env.services["db"], "memory://unit_e", "{env:?}");
    assert_eq!(env.vars["DATABASE_URL"].as_deref(), Some("memory://unit_e"));
    assert_eq!(env.worktree, up.world.path);
    // locate: a `url` service is reached through the proxy, by its host.
    let target = match f
        .call(Request::Locate {
            world: f.world("e"),
            service: "app".into(),
        })
        .await
    {
        Ok(Response::Located(t)) => t,
        other => panic!("expected a target, got {other:?}"),
    };
    assert!(target.via_proxy, "{target:?}");
    assert_eq!(target.host, "app.e.unit.localhost");
    // A service the project does not have is an error naming it.
    let err = f
        .call(Request::Locate {
            world: f.world("e"),
            service: "nope".into(),
        })
        .await
        .expect_err("locate of no such service");
    assert!(err.message.contains("nope"), "{err:?}");
    f.remove("e").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_runs_the_committed_checks_in_the_worlds_environment() {
    let f = Fixture::new(Memory::default());
    let verify = |name: &str| Request::Verify {
        world: f.world(name),
        keep_going: true,
        from_branch: false,
        env: ClientEnv(std::env::vars().filter(|(k, _)| k == "PATH").collect()),
    };
    // The second check passes only in world `checked`, whose slice is the
    // one it names: the commands see the world's rendered [env].
    for (name, passed) in [("checked", true), ("other", false)] {
        f.up(name).await;
        let report = match f.call(verify(name)).await {
            Ok(Response::Verified(r)) => r,
            other => panic!("expected a verify report, got {other:?}"),
        };
        assert_eq!(report.passed, passed, "{name}: {report:?}");
        assert_eq!(report.checks.len(), 2, "{report:?}");
        assert!(report.checks[0].passed, "{report:?}");
        assert_eq!(report.checks[1].passed, passed, "{report:?}");
        assert!(!report.from_branch);
        f.remove(name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_sweeps_a_slice_a_crash_left_half_made_and_never_a_live_one() {
    let f = Fixture::new(Memory::default());
    f.up("live").await;
    let gc = |dry_run| Request::Gc {
        dry_run,
        env: ClientEnv::default(),
    };
    let swept = |r: Result<Response, ApiError>| match r {
        Ok(Response::Swept(items)) => items,
        other => panic!("expected a sweep, got {other:?}"),
    };
    assert!(swept(f.call(gc(true)).await).is_empty());
    // An `up` that died between recording its intent and finishing: the
    // slice is made, its row says `provisioning`, and no world is busy.
    f.up("crashed").await;
    f.down("crashed").await;
    let world_id = {
        f.d.registry(|reg| {
            let project = reg.project_id("unit").unwrap().unwrap();
            reg.find_world(project, "crashed").unwrap().unwrap().id
        })
    };
    let key = crate::registry::SliceKey {
        world_id: Some(world_id),
        project: "unit",
        service: "db",
        adapter: "memory",
        slice: "unit_crashed",
    };
    f.d.registry(|r| r.set_slice(&key, crate::protocol::SliceState::Provisioning, None))
        .unwrap();
    let listed = swept(f.call(gc(true)).await);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(f.memory.slices(), ["unit_crashed", "unit_live"], "dry run");
    let done = swept(f.call(gc(false)).await);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(f.memory.slices(), ["unit_live"]);
    f.remove("live").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_status_answer_with_the_world_and_name_what_is_wrong_by_kind() {
    let f = Fixture::new(Memory::default());
    f.up("l").await;
    let logs = |cursor: Option<String>| Request::Logs {
        world: f.world("l"),
        service: Some("app".into()),
        lines: 10,
        cursor,
    };
    // The log as the supervisor began it, then only what was written
    // after the cursor (here by hand: the fixture's log writer is not the
    // binary's, so the service's own output is not captured).
    let report = |out: Result<Response, ApiError>| match out {
        Ok(Response::Logs(r)) => r,
        other => panic!("expected logs, got {other:?}"),
    };
    let first = report(f.call(logs(None)).await);
    assert!(
        first.lines.iter().any(|l| l.text.contains("app starting")),
        "{first:?}"
    );
    let log = f.d.paths.world_logs("unit", "l").join("app.log");
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut file, b"later line\n").unwrap();
    let since = report(f.call(logs(Some(first.cursor.clone()))).await);
    let texts: Vec<&str> = since.lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(texts, ["later line"], "{since:?}");
    let bad = f
        .call(logs(Some("not-a-cursor".into())))
        .await
        .expect_err("a cursor this daemon did not give");
    assert_eq!(
        bad.kind,
        crate::protocol::ErrorKind::InvalidInput,
        "{bad:?}"
    );
    // status reads through the second connection and sees the world.
    let status = match f
        .call(Request::Status {
            project: Some("unit".into()),
            usage: false,
        })
        .await
    {
        Ok(Response::Status(s)) => s,
        other => panic!("expected status, got {other:?}"),
    };
    let world = status.projects[0]
        .worlds
        .iter()
        .find(|w| w.name == "l")
        .unwrap_or_else(|| panic!("{status:?}"));
    assert_eq!(world.state, WorldState::Running);
    // A world that is not there is `not_found`, whatever the words say.
    let missing = f
        .call(Request::Down(f.world("nowhere")))
        .await
        .expect_err("down of no such world");
    assert_eq!(
        missing.kind,
        crate::protocol::ErrorKind::NotFound,
        "{missing:?}"
    );
    f.remove("l").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_that_would_take_the_disk_below_its_reserve_is_not_made() {
    let f = Fixture::new(Memory::default());
    let dir = f.repo.clone();
    let (free, _) = crate::platform::disk_space(&dir).expect("the test folder's disk");
    // A spare as big as what is free would leave nothing: refused, named.
    let why = crate::daemon::admission::room_for_spare(&f.d, Some(&dir), free)
        .expect_err("no room for a spare that fills the disk");
    assert!(why.contains("would fall below the disk reserve"), "{why}");
    assert!(why.contains(&dir.display().to_string()), "{why}");
}
