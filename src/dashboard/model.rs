//! The dashboard's state: what the daemon last said, what is selected,
//! and what each key does. Nothing here touches the terminal or the
//! socket ([`super::view`] draws, [`super`] runs), so every key is tested
//! as a plain function.

use crate::protocol::{
    LogLine, Metrics, ProjectStatus, Settings, StatusReport, WorldState, WorldStatus,
};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Most log lines the pane keeps (the oldest go first).
pub(super) const LOG_LINES: usize = 1_000;

/// A world, by project and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct WorldKey {
    pub project: String,
    pub world: String,
}

/// A daemon verb a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Up,
    Down,
    Reload,
    Remove,
    Verify,
}

impl Verb {
    pub(super) fn name(self) -> &'static str {
        match self {
            Verb::Up => "up",
            Verb::Down => "down",
            Verb::Reload => "reload",
            Verb::Remove => "remove",
            Verb::Verify => "verify",
        }
    }
}

/// What the runner does after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// Nothing beyond drawing again.
    Draw,
    Quit,
    /// Run a verb on a world (in the background; progress to the status line).
    Run(Verb, WorldKey),
    /// Follow this world's logs (one service's, or all) in the log pane.
    Follow(WorldKey, Option<String>),
    /// Put this text on the clipboard.
    Copy(String),
}

/// What keys mean at the moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Mode {
    Normal,
    /// Typing a filter.
    Filter,
    /// `x` asked: `y` removes this world.
    Confirm(WorldKey),
    Help,
}

/// The daemon connection as the dashboard last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    Connecting,
    Live,
    /// It went away; the dashboard waits for it and shows that.
    Gone,
}

/// The log pane.
#[derive(Debug, Default)]
pub(super) struct LogPane {
    /// What it follows: a world and maybe one service.
    pub target: Option<(WorldKey, Option<String>)>,
    pub lines: VecDeque<LogLine>,
    /// Lines were skipped (a reader fell behind, a log rotated twice).
    pub skipped: bool,
    /// Why the follow ended (the world was removed), shown under the lines.
    pub ended: Option<String>,
}

impl LogPane {
    /// Appends `lines`, keeping at most [`LOG_LINES`].
    pub(super) fn push(&mut self, lines: impl IntoIterator<Item = LogLine>) {
        self.lines.extend(lines);
        while self.lines.len() > LOG_LINES {
            self.lines.pop_front();
        }
    }
}

/// Everything the dashboard shows.
pub(super) struct App {
    pub report: StatusReport,
    pub metrics: Option<Metrics>,
    pub settings: Option<Settings>,
    /// Each world's CPU use since the previous reading, percent of a core.
    pub cpu: HashMap<WorldKey, f32>,
    last_cpu: HashMap<WorldKey, (u64, Instant)>,
    /// Index into [`App::visible`].
    pub selected: usize,
    pub filter: String,
    pub mode: Mode,
    /// `enter`: the selected world's services, ports and URLs instead of
    /// its logs.
    pub detail: bool,
    pub logs: LogPane,
    /// The last thing an action said (progress, result or error).
    pub status: String,
    pub link: Link,
}

impl Default for App {
    fn default() -> Self {
        App {
            report: StatusReport::default(),
            metrics: None,
            settings: None,
            cpu: HashMap::new(),
            last_cpu: HashMap::new(),
            selected: 0,
            filter: String::new(),
            mode: Mode::Normal,
            detail: false,
            logs: LogPane::default(),
            status: String::new(),
            link: Link::Connecting,
        }
    }
}

impl App {
    /// Takes a new status report, keeping the same world selected (by
    /// name) and working out CPU rates from the previous reading.
    pub(super) fn set_report(&mut self, mut report: StatusReport, now: Instant) {
        let keep = self.selected_key();
        for p in &mut report.projects {
            for w in &mut p.worlds {
                let key = WorldKey {
                    project: p.name.clone(),
                    world: w.name.clone(),
                };
                match w.usage {
                    Some(u) => {
                        if let Some((ms, at)) = self.last_cpu.get(&key) {
                            let wall = now.duration_since(*at).as_millis() as f64;
                            if wall > 0.0 {
                                let pct = u.cpu_ms.saturating_sub(*ms) as f64 / wall * 100.0;
                                self.cpu.insert(key.clone(), pct as f32);
                            }
                        }
                        self.last_cpu.insert(key, (u.cpu_ms, now));
                    }
                    None => {
                        self.cpu.remove(&key);
                        self.last_cpu.remove(&key);
                    }
                }
            }
        }
        self.report = report;
        self.reselect(keep);
    }

    fn reselect(&mut self, keep: Option<WorldKey>) {
        let visible = self.visible();
        if let Some(k) = keep
            && let Some(i) = visible
                .iter()
                .position(|(p, w)| p.name == k.project && w.name == k.world)
        {
            self.selected = i;
            return;
        }
        self.selected = self.selected.min(visible.len().saturating_sub(1));
    }

    /// The worlds shown (those matching the filter), in report order.
    pub(super) fn visible(&self) -> Vec<(&ProjectStatus, &WorldStatus)> {
        let f = self.filter.to_lowercase();
        self.report
            .projects
            .iter()
            .flat_map(|p| p.worlds.iter().map(move |w| (p, w)))
            .filter(|(p, w)| {
                f.is_empty()
                    || format!("{}/{}", p.name, w.name).to_lowercase().contains(&f)
                    || w.state.as_str().contains(&f)
            })
            .collect()
    }

    /// The selected world.
    pub(super) fn selected_world(&self) -> Option<(&ProjectStatus, &WorldStatus)> {
        self.visible().get(self.selected).copied()
    }

    pub(super) fn selected_key(&self) -> Option<WorldKey> {
        self.selected_world().map(|(p, w)| WorldKey {
            project: p.name.clone(),
            world: w.name.clone(),
        })
    }

    /// Whether any world has processes whose figures change on their own.
    pub(super) fn anything_running(&self) -> bool {
        self.report
            .projects
            .iter()
            .flat_map(|p| &p.worlds)
            .any(|w| matches!(w.state, WorldState::Running | WorldState::Starting))
    }

    /// What `key` does now.
    pub(super) fn on_key(&mut self, key: KeyEvent) -> Action {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        match self.mode.clone() {
            Mode::Help => {
                self.mode = Mode::Normal;
                Action::Draw
            }
            Mode::Confirm(k) => {
                self.mode = Mode::Normal;
                if key.code == KeyCode::Char('y') {
                    Action::Run(Verb::Remove, k)
                } else {
                    self.status = "remove cancelled".into();
                    Action::Draw
                }
            }
            Mode::Filter => {
                match key.code {
                    KeyCode::Enter => self.mode = Mode::Normal,
                    KeyCode::Esc => {
                        self.filter.clear();
                        self.mode = Mode::Normal;
                    }
                    KeyCode::Backspace => {
                        self.filter.pop();
                    }
                    KeyCode::Char(c) if !c.is_control() && self.filter.chars().count() < 64 => {
                        self.filter.push(c)
                    }
                    _ => {}
                }
                let keep = self.selected_key();
                self.reselect(keep);
                Action::Draw
            }
            Mode::Normal => self.on_normal_key(key.code),
        }
    }

    fn on_normal_key(&mut self, code: KeyCode) -> Action {
        let count = self.visible().len();
        let key = self.selected_key();
        let on_world = |verb: Verb| match key.clone() {
            Some(k) => Action::Run(verb, k),
            None => Action::Draw,
        };
        match code {
            KeyCode::Char('q') | KeyCode::Esc
                if self.filter.is_empty() || code == KeyCode::Char('q') =>
            {
                Action::Quit
            }
            KeyCode::Esc => {
                self.filter.clear();
                Action::Draw
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected = (self.selected + 1).min(count.saturating_sub(1));
                Action::Draw
            }
            KeyCode::Up | KeyCode::Char('k') => {
                self.selected = self.selected.saturating_sub(1);
                Action::Draw
            }
            KeyCode::Home | KeyCode::Char('g') => {
                self.selected = 0;
                Action::Draw
            }
            KeyCode::End | KeyCode::Char('G') => {
                self.selected = count.saturating_sub(1);
                Action::Draw
            }
            KeyCode::Enter => {
                self.detail = !self.detail;
                Action::Draw
            }
            KeyCode::Char('u') => on_world(Verb::Up),
            KeyCode::Char('d') => on_world(Verb::Down),
            KeyCode::Char('r') => on_world(Verb::Reload),
            KeyCode::Char('v') => on_world(Verb::Verify),
            KeyCode::Char('x') => {
                if let Some(k) = key {
                    self.status = format!(
                        "remove {}/{}? y to confirm, any other key to keep it",
                        k.project, k.world
                    );
                    self.mode = Mode::Confirm(k);
                }
                Action::Draw
            }
            KeyCode::Char('l') => match key {
                Some(k) => {
                    self.detail = false;
                    Action::Follow(k.clone(), self.next_log_service(&k))
                }
                None => Action::Draw,
            },
            KeyCode::Char('/') => {
                self.mode = Mode::Filter;
                Action::Draw
            }
            KeyCode::Char('c') => match self.selected_world() {
                Some((p, w)) => Action::Copy(copy_text(&p.name, w)),
                None => Action::Draw,
            },
            KeyCode::Char('?') => {
                self.mode = Mode::Help;
                Action::Draw
            }
            _ => Action::Draw,
        }
    }

    /// `l` on a world: its logs (all services); again on the world the pane
    /// follows, the next service alone, then all again.
    fn next_log_service(&self, k: &WorldKey) -> Option<String> {
        let Some((followed, current)) = &self.logs.target else {
            return None;
        };
        if followed != k {
            return None;
        }
        let names: Vec<&str> = self
            .selected_world()
            .map(|(_, w)| w.services.iter().map(|s| s.name.as_str()).collect())
            .unwrap_or_default();
        match current {
            None => names.first().map(|s| (*s).to_owned()),
            Some(c) => {
                let i = names.iter().position(|n| n == c)?;
                names.get(i + 1).map(|s| (*s).to_owned())
            }
        }
    }
}

/// What `c` copies: the world's first URL, or else the shell line that
/// loads its environment. Binky-made text only (the slug and port are
/// DNS-safe and numeric); the project and world names are quoted.
pub(super) fn copy_text(project: &str, w: &WorldStatus) -> String {
    if let Some(url) = w.services.iter().find_map(|s| s.url.clone()) {
        return url;
    }
    format!(
        "eval \"$(binky env -p {} {} --export)\"",
        shell_quote(project),
        shell_quote(&w.name)
    )
}

/// `s` as one shell word: as it is when it needs no quoting, else in
/// single quotes ([`crate::output::shell_quote`]).
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
    {
        return s.to_owned();
    }
    crate::output::shell_quote(s)
}

/// Untrusted text (a branch name, what a service printed) made safe to
/// draw: every control character shown in caret notation (`^[` for an
/// escape, `^J` for a newline), and the characters that reorder or hide
/// text (bidirectional overrides, zero-width joiners) shown as `<U+XXXX>`,
/// so nothing reaches the terminal but printable text.
pub(super) fn shown(text: &str) -> String {
    let hidden = crate::output::hidden_format;
    if !text.chars().any(|c| c.is_control() || hidden(c)) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\t' => out.push(' '),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push((c as u8 + b'@') as char);
            }
            '\u{7f}' => out.push_str("^?"),
            c if c.is_control() || hidden(c) => out.push_str(&format!("<U+{:04X}>", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ServiceKind, ServiceState, ServiceStatus, Usage};

    fn world(name: &str, state: WorldState) -> WorldStatus {
        WorldStatus {
            name: name.into(),
            slug: name.into(),
            state,
            path: String::new(),
            group: None,
            error: None,
            verify: None,
            services: vec![ServiceStatus {
                name: "web".into(),
                kind: ServiceKind::Process,
                state: ServiceState::Running,
                pid: Some(1),
                port: Some(41000),
                ports: Default::default(),
                restarts: 0,
                host: None,
                url: None,
                log_flood: None,
            }],
            queue: None,
            suspended_since: None,
            sleeping_since: None,
            idle_after_s: None,
            created: None,
            usage: None,
            notes: Vec::new(),
        }
    }

    fn report(names: &[&str]) -> StatusReport {
        StatusReport {
            projects: vec![ProjectStatus {
                name: "shop".into(),
                root: "/r".into(),
                queued_unlisted: 0,
                spares: None,
                worlds: names
                    .iter()
                    .map(|n| world(n, WorldState::Running))
                    .collect(),
            }],
            ..Default::default()
        }
    }

    fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    #[test]
    fn the_selection_follows_its_world_when_the_table_changes() {
        let mut app = App::default();
        let now = Instant::now();
        app.set_report(report(&["a", "b", "c"]), now);
        app.on_key(key('j'));
        app.on_key(key('j'));
        assert_eq!(app.selected_key().unwrap().world, "c");
        // A world appears before it: still `c` selected.
        app.set_report(report(&["0", "a", "b", "c"]), now);
        assert_eq!(app.selected_key().unwrap().world, "c");
        // It goes: the selection stays in range.
        app.set_report(report(&["a"]), now);
        assert_eq!(app.selected_key().unwrap().world, "a");
        app.on_key(key('k'));
        assert_eq!(app.selected, 0);
    }

    #[test]
    fn remove_asks_first_and_only_y_confirms() {
        let mut app = App::default();
        app.set_report(report(&["a"]), Instant::now());
        assert_eq!(app.on_key(key('x')), Action::Draw);
        assert!(app.status.contains("y to confirm"), "{}", app.status);
        assert_eq!(app.on_key(key('n')), Action::Draw);
        assert_eq!(app.mode, Mode::Normal);
        app.on_key(key('x'));
        let k = WorldKey {
            project: "shop".into(),
            world: "a".into(),
        };
        assert_eq!(app.on_key(key('y')), Action::Run(Verb::Remove, k.clone()));
        assert_eq!(app.on_key(key('d')), Action::Run(Verb::Down, k));
    }

    #[test]
    fn a_filter_narrows_the_table_and_esc_clears_it() {
        let mut app = App::default();
        app.set_report(report(&["feat-a", "feat-b", "main"]), Instant::now());
        app.on_key(key('/'));
        for c in "main".chars() {
            app.on_key(key(c));
        }
        // Typed letters are the filter's, not keys (`d` did not down).
        assert_eq!(app.visible().len(), 1);
        app.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        assert_eq!(app.selected_key().unwrap().world, "main");
        app.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
        assert_eq!(app.visible().len(), 3);
        assert_eq!(app.on_key(key('q')), Action::Quit);
    }

    #[test]
    fn l_cycles_all_services_then_each_then_all() {
        let mut app = App::default();
        app.set_report(report(&["a"]), Instant::now());
        let k = app.selected_key().unwrap();
        assert_eq!(app.on_key(key('l')), Action::Follow(k.clone(), None));
        app.logs.target = Some((k.clone(), None));
        assert_eq!(
            app.on_key(key('l')),
            Action::Follow(k.clone(), Some("web".into()))
        );
        app.logs.target = Some((k.clone(), Some("web".into())));
        assert_eq!(app.on_key(key('l')), Action::Follow(k, None));
    }

    #[test]
    fn cpu_is_a_rate_between_two_readings() {
        let mut app = App::default();
        let t0 = Instant::now();
        let mut r = report(&["a"]);
        r.projects[0].worlds[0].usage = Some(Usage {
            rss_bytes: 1,
            cpu_ms: 1_000,
        });
        app.set_report(r.clone(), t0);
        assert!(app.cpu.is_empty(), "one reading is no rate");
        r.projects[0].worlds[0].usage = Some(Usage {
            rss_bytes: 1,
            cpu_ms: 1_500,
        });
        app.set_report(r, t0 + std::time::Duration::from_secs(1));
        let pct = app.cpu.values().next().copied().unwrap();
        assert!((pct - 50.0).abs() < 0.5, "{pct}");
    }

    #[test]
    fn untrusted_text_is_drawn_with_no_control_character_left() {
        assert_eq!(shown("plain ünïcode"), "plain ünïcode");
        assert_eq!(shown("a\x1b[2Jb\r\n"), "a^[[2Jb^M^J");
        assert_eq!(shown("x\u{9b}31m"), "x<U+009B>31m");
        assert_eq!(shown("evil\u{202e}txt.exe"), "evil<U+202E>txt.exe");
        assert!(!shown("\x07\x00\x7f").chars().any(char::is_control));
    }

    #[test]
    fn copy_gives_a_url_or_a_quoted_export_line() {
        let mut w = world("feat/x y", WorldState::Running);
        assert_eq!(
            copy_text("shop", &w),
            "eval \"$(binky env -p shop 'feat/x y' --export)\""
        );
        assert_eq!(
            copy_text("it's", &w),
            "eval \"$(binky env -p 'it'\\''s' 'feat/x y' --export)\""
        );
        w.services[0].url = Some("http://web.x.shop.localhost:7355".into());
        assert_eq!(copy_text("shop", &w), "http://web.x.shop.localhost:7355");
    }
}
