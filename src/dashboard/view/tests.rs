//! The dashboard's drawing, checked on a test backend.

use super::*;
use crate::protocol::{ProjectStatus, ServiceKind, ServiceStatus, StatusReport};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// One project `shop` holding `w`.
fn one_world(w: WorldStatus) -> StatusReport {
    StatusReport {
        projects: vec![ProjectStatus {
            name: "shop".into(),
            root: "/r".into(),
            queued_unlisted: 0,
            spares: None,
            worlds: vec![w],
        }],
        ..Default::default()
    }
}

fn screen(app: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| draw(f, app, Theme { colour: false })).unwrap();
    let buf = t.backend().buffer().clone();
    (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn figures_read_as_people_write_them() {
    assert_eq!(bytes(512), "512B");
    assert_eq!(bytes(1536), "1.5K");
    assert_eq!(bytes(300 << 20), "300M");
    assert_eq!(bytes(24 << 30), "24G");
}

#[test]
fn a_hostile_world_name_and_log_line_draw_as_text_at_80_by_24() {
    let mut app = App::default();
    let svc = ServiceStatus {
        name: "web".into(),
        kind: ServiceKind::Process,
        state: ServiceState::Running,
        pid: Some(7),
        port: Some(41000),
        ports: Default::default(),
        restarts: 2,
        host: None,
        url: None,
        log_flood: None,
    };
    app.set_report(
        one_world(WorldStatus {
            name: "evil\x1b[2J".into(),
            slug: "evil".into(),
            state: WorldState::Running,
            path: "/w".into(),
            group: None,
            error: None,
            verify: Some("passed at abc".into()),
            services: vec![svc],
            queue: None,
            suspended_since: None,
            sleeping_since: None,
            idle_after_s: None,
            created: None,
            usage: None,
            notes: Vec::new(),
        }),
        std::time::Instant::now(),
    );
    app.logs.push([crate::protocol::LogLine {
        service: "web".into(),
        ts: None,
        text: "\x1b]0;pwned\x07hello".into(),
    }]);
    let s = screen(&app, 80, 24);
    assert!(s.contains("evil^[[2J"), "{s}");
    assert!(s.contains("^[]0;pwned^Ghello"), "{s}");
    assert!(s.contains("web:41000"), "{s}");
    assert!(s.contains("passed"), "{s}");
    assert!(!s.contains('\x1b'), "{s}");
}

#[test]
fn a_service_flooding_its_log_is_flagged_in_the_row() {
    let mut app = App::default();
    let svc = |name: &str, flood: Option<u32>| ServiceStatus {
        name: name.into(),
        kind: ServiceKind::Process,
        state: ServiceState::Running,
        pid: Some(7),
        port: None,
        ports: Default::default(),
        restarts: 0,
        host: None,
        url: None,
        log_flood: flood,
    };
    app.set_report(
        one_world(WorldStatus {
            name: "a".into(),
            slug: "a".into(),
            state: WorldState::Running,
            path: "/w".into(),
            group: None,
            error: None,
            verify: None,
            services: vec![svc("worker", Some(2200)), svc("web", None)],
            queue: None,
            suspended_since: None,
            sleeping_since: None,
            idle_after_s: None,
            created: None,
            usage: None,
            notes: vec!["worker is flooding its log".into()],
        }),
        std::time::Instant::now(),
    );
    let s = screen(&app, 100, 24);
    assert!(s.contains("⚠worker web"), "{s}");
}

#[test]
fn a_suspended_world_says_why_where_its_services_go() {
    let mut app = App::default();
    app.set_report(
        one_world(WorldStatus {
            name: "newest".into(),
            slug: "newest".into(),
            state: WorldState::Suspended,
            path: "/w".into(),
            group: None,
            error: Some("suspended: RAM below the reserve".into()),
            verify: None,
            services: vec![],
            queue: None,
            suspended_since: Some("2026-12-03T10:00:00Z".into()),
            sleeping_since: None,
            idle_after_s: None,
            created: None,
            usage: None,
            notes: Vec::new(),
        }),
        std::time::Instant::now(),
    );
    let s = screen(&app, 80, 24);
    let row = s.lines().find(|l| l.contains("newest")).unwrap();
    assert!(
        row.contains("suspended") && row.contains("RAM below"),
        "{s}"
    );
}

#[test]
fn a_sleeping_world_says_since_when_and_what_wakes_it() {
    let mut app = App::default();
    app.set_report(
        one_world(WorldStatus {
            name: "napper".into(),
            slug: "napper".into(),
            state: WorldState::Sleeping,
            path: "/w".into(),
            group: None,
            error: None,
            verify: None,
            services: vec![],
            queue: None,
            suspended_since: None,
            sleeping_since: Some("2026-12-07T10:00:00Z".into()),
            idle_after_s: Some(1200),
            created: None,
            usage: None,
            notes: Vec::new(),
        }),
        std::time::Instant::now(),
    );
    let s = screen(&app, 100, 24);
    let row = s.lines().find(|l| l.contains("napper")).unwrap();
    assert!(
        row.contains("sleeping") && row.contains("since 2026-12-07T10:00:00Z"),
        "{s}"
    );
}
