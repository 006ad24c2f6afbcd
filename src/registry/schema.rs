//! Ordered schema migrations. Append only: a released migration is never
//! edited, so every older registry upgrades along the same path.

use rusqlite_migration::{M, Migrations};

/// The newest schema version (the number of migrations).
pub(super) const LATEST: i64 = 15;

/// All migrations, oldest first.
pub(super) fn migrations() -> Migrations<'static> {
    Migrations::new(vec![
        M::up(V1),
        M::up(V2),
        M::up(V3),
        M::up(V4),
        M::up(V5),
        M::up(V6),
        M::up(V7),
        M::up(V8),
        M::up(V9),
        M::up(V10),
        M::up(V11),
        M::up(V12),
        M::up(V13),
        M::up(V14),
        M::up(V15),
    ])
}

const V1: &str = r#"
CREATE TABLE projects (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    root        TEXT NOT NULL,            -- folder of binky.toml in the main worktree
    created_at  INTEGER NOT NULL
);

CREATE TABLE worlds (
    id          INTEGER PRIMARY KEY,
    project_id  INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,            -- the branch
    slug        TEXT NOT NULL,            -- DNS-safe, used in hostnames and paths
    path        TEXT NOT NULL,            -- the worktree
    state       TEXT NOT NULL,            -- running | stopped | failed | queued | suspended | starting | stopping
    intent      TEXT,                     -- operation in flight (up, down, reload, remove), for reconciliation
    grp         TEXT,
    error       TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (project_id, name),
    UNIQUE (project_id, slug)
);

CREATE TABLE services (
    id          INTEGER PRIMARY KEY,
    world_id    INTEGER NOT NULL REFERENCES worlds(id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,         -- start order
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL,            -- process | resource
    state       TEXT NOT NULL,
    pid         INTEGER,
    start_time  INTEGER,                  -- process start time (clock ticks since boot), with pid the identity
    pgid        INTEGER,
    restarts    INTEGER NOT NULL DEFAULT 0,
    last_exit   TEXT,
    updated_at  INTEGER NOT NULL,
    UNIQUE (world_id, name)
);

CREATE TABLE port_reservations (
    port        INTEGER PRIMARY KEY,      -- a port is never handed out twice, across all projects
    world_id    INTEGER NOT NULL REFERENCES worlds(id) ON DELETE CASCADE,
    service     TEXT NOT NULL,
    name        TEXT NOT NULL,            -- '' for the primary port
    UNIQUE (world_id, service, name)
);

CREATE TABLE slices (
    id          INTEGER PRIMARY KEY,
    world_id    INTEGER REFERENCES worlds(id) ON DELETE SET NULL,
    project     TEXT NOT NULL,
    service     TEXT NOT NULL,
    adapter     TEXT NOT NULL,
    slice       TEXT NOT NULL,
    state       TEXT NOT NULL,            -- provisioning | live | teardown
    created_at  INTEGER NOT NULL,
    UNIQUE (adapter, slice)
);

CREATE TABLE verify_results (
    id          INTEGER PRIMARY KEY,
    world_id    INTEGER NOT NULL REFERENCES worlds(id) ON DELETE CASCADE,
    passed      INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    commit_sha  TEXT,
    started_at  INTEGER NOT NULL,
    detail      TEXT
);

CREATE TABLE settings (
    key         TEXT PRIMARY KEY,
    value       TEXT NOT NULL
);
"#;

/// v2: the proxied hostname of a url service, so the daemon can rebuild its
/// routing table at start-up without re-reading any config.
const V2: &str = r#"
ALTER TABLE services ADD COLUMN host TEXT;
"#;

/// v3: the process group of a `verify` command in flight (pid and start
/// time), so a daemon that died mid-verify can stop it on restart instead of
/// leaving it orphaned.
const V3: &str = r#"
ALTER TABLE worlds ADD COLUMN verify_pid INTEGER;
ALTER TABLE worlds ADD COLUMN verify_start_time INTEGER;
"#;

/// v4: the sessions of daemons that started processes, so a new daemon can
/// find every process an earlier one started — recorded or not, as when a
/// daemon died between starting a service and recording its pid — by its
/// session id and `BINKY_HOME` (see daemon::world::stop_unknown).
const V4: &str = r#"
CREATE TABLE daemon_sessions (
    sid         INTEGER PRIMARY KEY,      -- session id = the daemon's pid when it ran setsid
    pid         INTEGER NOT NULL,
    started_at  INTEGER NOT NULL DEFAULT (unixepoch())
);
"#;

/// v5: the key a slice's schema was last migrated at (the migrate command
/// and the `clone_inputs` contents, or the worktree's commit), so `up`
/// runs `migrate` again when a world's branch moved past it.
const V5: &str = r#"
ALTER TABLE slices ADD COLUMN migrated_key TEXT;
"#;

/// v6: admission. The queue of `up`s waiting for room, in arrival order
/// (durable: a restarted daemon carries on with the same order); each
/// project's learned footprint; when a world was last admitted or resumed
/// (the newest is suspended first) and since when it is suspended.
const V6: &str = r#"
CREATE TABLE admission_queue (
    ticket      INTEGER PRIMARY KEY AUTOINCREMENT, -- arrival order, never reused
    project     TEXT NOT NULL,
    world       TEXT NOT NULL,
    grp         TEXT NOT NULL DEFAULT '',
    request     TEXT NOT NULL,            -- the world reference as JSON; never the caller's environment
    disk_path   TEXT NOT NULL,            -- the project's main checkout, whose filesystem keeps the disk reserve
    enqueued_at INTEGER NOT NULL,         -- unix ms
    resume      INTEGER NOT NULL DEFAULT 0, -- 1: a suspended world waiting to resume
    admitted    INTEGER NOT NULL DEFAULT 0, -- 1: admitted, its `up` under way (the row goes when it settles)
    since       INTEGER NOT NULL,         -- unix ms, the order key: when it first asked (a resume keeps its place)
    UNIQUE (project, world)
);
ALTER TABLE projects ADD COLUMN footprint_bytes INTEGER;  -- peak RSS of its last running world
ALTER TABLE worlds ADD COLUMN admitted_at INTEGER;        -- unix ms of the last admission or resume
ALTER TABLE worlds ADD COLUMN suspended_at INTEGER;       -- unix ms, while suspended
"#;

/// v7: where each slice lives, so a teardown reaches the server it was made
/// on whatever `admin_url` renders to later (`adapters::server`): the
/// server's address without credentials, and a keyed fingerprint of the
/// credentials it was made with. The key is random per registry, made here.
const V7: &str = r#"
ALTER TABLE slices ADD COLUMN server TEXT;              -- scheme://host:port[/path], no credentials
ALTER TABLE slices ADD COLUMN server_credentials TEXT;  -- adapters::server::fingerprint
CREATE TABLE fingerprint_key (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    key         TEXT NOT NULL
);
INSERT INTO fingerprint_key(id, key) VALUES (1, lower(hex(randomblob(32))));
"#;

/// v8: a random token per world, set in every process the world starts
/// (`BINKY_WORLD_TOKEN`), so a process that leaves its process group and
/// session (a server that daemonizes itself) is still found as the world's:
/// counted in its footprint, stopped with it. `binky env` never hands it
/// out, so a shell that sourced a world's variables carries no such mark.
const V8: &str = r#"
ALTER TABLE worlds ADD COLUMN token TEXT;
UPDATE worlds SET token = lower(hex(randomblob(16))) WHERE token IS NULL;
"#;

/// v9: how each `verify` run ended and whether the worktree held changes
/// beyond its commit, as columns: `status` reads them instead of matching
/// the words of `detail`. Rows from before are read once, here, from those
/// words (the only text they have).
const V9: &str = r#"
ALTER TABLE verify_results ADD COLUMN outcome TEXT;          -- passed, failed, interrupted
ALTER TABLE verify_results ADD COLUMN dirty INTEGER NOT NULL DEFAULT 0;
UPDATE verify_results SET
    outcome = CASE WHEN passed = 1 THEN 'passed'
                   WHEN detail LIKE 'interrupted%' THEN 'interrupted'
                   ELSE 'failed' END,
    dirty = (detail LIKE '%with uncommitted changes%');
"#;

/// v10: the golden template each slice was cloned from and that template's
/// key, so `status` can say when a world's data predates its branch's
/// migrations (`binky reset` then re-clones it). NULL: not cloned.
const V10: &str = r#"
ALTER TABLE slices ADD COLUMN template TEXT;
ALTER TABLE slices ADD COLUMN template_key TEXT;
"#;

/// v11: the password of each slice's own login user (a PostgreSQL role, a
/// MySQL user, a RabbitMQ user), random per slice, made on first use and
/// forgotten with the slice. Kept here, beside the world tokens and the
/// fingerprint key, in the registry only the daemon's user can read; the
/// daemon registers each one as a secret before it is used.
const V11: &str = r#"
CREATE TABLE slice_secrets (
    adapter     TEXT NOT NULL,
    slice       TEXT NOT NULL,
    secret      TEXT NOT NULL,
    PRIMARY KEY (adapter, slice)
);
"#;

/// v12: who asked for each queued `up` and each world (its *caller*: one
/// `binky mcp` server, or the shell a CLI runs in), so admission is fair
/// across callers before groups and a caller gains nothing by inventing a
/// group per request. `''`: asked before callers were recorded.
const V12: &str = r#"
ALTER TABLE admission_queue ADD COLUMN caller TEXT NOT NULL DEFAULT '';
ALTER TABLE worlds ADD COLUMN caller TEXT;
"#;

/// v13: whether a `verify` ran the branch's own checks (`--from-branch`)
/// rather than those committed on the main checkout's branch; `status`
/// says so beside the result.
const V13: &str = r#"
ALTER TABLE verify_results ADD COLUMN from_branch INTEGER NOT NULL DEFAULT 0;
"#;

/// v14: spare clones (issue 51): per golden template, clones made ahead of
/// time that an `up` takes by renaming. Recorded `making` before the
/// server sees them, `ready` once made, `taking` while an `up` renames one;
/// a row left `making` or `taking` by a crash is what `gc` sweeps. A spare
/// is never a world's: it has no world, and `status` counts it apart.
const V14: &str = r#"
CREATE TABLE spares (
    id          INTEGER PRIMARY KEY,
    adapter     TEXT NOT NULL,
    name        TEXT NOT NULL,
    project     TEXT NOT NULL,
    service     TEXT NOT NULL,
    template    TEXT NOT NULL,            -- the golden template it is a clone of
    template_key TEXT NOT NULL,           -- that template's key when it was made
    migrated    TEXT,                     -- the key the template's schema was migrated at
    server      TEXT,                     -- where it is made (address)
    server_credentials TEXT,              -- fingerprint of the credentials it was made with
    state       TEXT NOT NULL,            -- making | ready | taking
    bytes       INTEGER,                  -- the disk it took, when measured
    created_at  INTEGER NOT NULL,
    UNIQUE (adapter, name)
);
"#;

/// v15: idle sleep (issue 52). How long each world may go without a
/// request or CPU use before it sleeps, as its last `up` worked it out
/// (`[project] idle_after`, or `up --idle-after`; NULL: never), the
/// `--idle-after` it was last given (kept, so a wake-up does not lose it),
/// and since when it sleeps.
const V15: &str = r#"
ALTER TABLE worlds ADD COLUMN idle_after_ms INTEGER;      -- NULL: never sleeps
ALTER TABLE worlds ADD COLUMN idle_override_ms INTEGER;   -- `up --idle-after`: NULL the project's, 0 off
ALTER TABLE worlds ADD COLUMN slept_at INTEGER;           -- unix ms, while sleeping
"#;
