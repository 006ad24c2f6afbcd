//! Draws an [`App`]: the admission bar, the table of worlds by project,
//! the log or detail pane, and the status line; help over it on `?`.
//! Every name and log line passes through [`shown`] first.

use super::model::{App, Link, Mode, shown};
use crate::protocol::{ServiceState, WorldState, WorldStatus};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, Wrap};

/// Styles, all plain under `NO_COLOR` (bold and reverse still mark the
/// header and the selection).
#[derive(Clone, Copy)]
pub(super) struct Theme {
    pub colour: bool,
}

impl Theme {
    fn fg(self, c: Color) -> Style {
        if self.colour {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }
    fn dim(self) -> Style {
        if self.colour {
            Style::new().add_modifier(Modifier::DIM)
        } else {
            Style::new()
        }
    }
    fn state(self, s: WorldState) -> Style {
        match s {
            WorldState::Running => self.fg(Color::Green),
            WorldState::Starting | WorldState::Stopping => self.fg(Color::Cyan),
            WorldState::Queued | WorldState::Suspended => self.fg(Color::Yellow),
            WorldState::Failed => self.fg(Color::Red).add_modifier(Modifier::BOLD),
            WorldState::Stopped | WorldState::Sleeping | WorldState::Removed => self.dim(),
        }
    }
}

/// The rows of keys `?` shows.
pub(super) const KEYS: &[(&str, &str)] = &[
    ("j k ↑ ↓", "move"),
    ("enter", "services, ports and URLs of the world"),
    ("l", "follow its logs (again: one service, the next…)"),
    ("u d r", "up, down, reload"),
    ("x", "remove (asks first)"),
    ("v", "verify"),
    ("c", "copy its URL, or its export line"),
    ("/", "filter (enter keeps it, esc clears)"),
    ("?", "this help"),
    ("q", "quit"),
];

/// Draws `app` over the whole frame.
pub(super) fn draw(f: &mut Frame, app: &App, theme: Theme) {
    let [bar, table, pane, status] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(5),
        Constraint::Percentage(35),
        Constraint::Length(2),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(admission_bar(app, theme)), bar);
    draw_table(f, app, theme, table);
    if app.detail {
        draw_detail(f, app, theme, pane);
    } else {
        draw_logs(f, app, theme, pane);
    }
    // Two rows, wrapped: an error's hint must not be cut off.
    f.render_widget(
        Paragraph::new(status_line(app, theme)).wrap(Wrap { trim: true }),
        status,
    );
    if app.mode == Mode::Help {
        draw_help(f, theme);
    }
}

/// Worlds running / `max_parallel`, RAM and disk against their reserves,
/// the queue, and each group's share.
fn admission_bar(app: &App, theme: Theme) -> Vec<Line<'static>> {
    let mut running = 0u32;
    let mut groups: std::collections::BTreeMap<String, u32> = Default::default();
    for w in app.report.projects.iter().flat_map(|p| &p.worlds) {
        if matches!(w.state, WorldState::Running | WorldState::Starting) {
            running += 1;
            *groups
                .entry(w.group.clone().unwrap_or_else(|| "-".into()))
                .or_default() += 1;
        }
    }
    let max = match app.settings.as_ref().map(|s| s.max_parallel) {
        Some(0) | None => "∞".to_owned(),
        Some(n) => n.to_string(),
    };
    let mut first = vec![
        Span::styled("binky ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!("worlds {running}/{max}")),
    ];
    if let Some(m) = &app.metrics {
        if let (Some(avail), Some(total), Some(s)) =
            (m.memory_available, m.memory_total, &app.settings)
        {
            let reserve = (total as f64 * s.ram_reserve_pct / 100.0) as u64;
            first.extend(room("RAM", avail, reserve, theme));
        }
        if let (Some(free), Some(reserve)) = (m.disk_free, m.disk_reserve) {
            first.extend(room("disk", free, reserve, theme));
        }
        first.push(Span::raw(format!("  queue {}", m.queue_length)));
    }
    let mut second = vec![];
    if groups.len() > 1 || groups.keys().any(|g| g != "-") {
        second.push(Span::styled("groups ", theme.dim()));
        second.push(Span::raw(
            groups
                .iter()
                .map(|(g, n)| format!("{} {n}", shown(g)))
                .collect::<Vec<_>>()
                .join(" · "),
        ));
    }
    match app.link {
        Link::Gone => second.push(Span::styled(
            "  the daemon stopped: waiting for it to come back",
            theme.fg(Color::Red).add_modifier(Modifier::BOLD),
        )),
        Link::Connecting => second.push(Span::styled("  connecting…", theme.dim())),
        Link::Live => {}
    }
    vec![Line::from(first), Line::from(second)]
}

/// `RAM 12G free (keep 2.4G)`, the figure red when below what is kept.
fn room(what: &str, free: u64, reserve: u64, theme: Theme) -> [Span<'static>; 3] {
    let style = if free < reserve {
        theme.fg(Color::Red)
    } else {
        Style::new()
    };
    [
        Span::raw(format!("  {what} ")),
        Span::styled(format!("{} free", bytes(free)), style),
        Span::styled(format!(" (keep {})", bytes(reserve)), theme.dim()),
    ]
}

/// One row per world under a row per project.
fn draw_table(f: &mut Frame, app: &App, theme: Theme, area: Rect) {
    let header = Row::new([
        "WORLD", "STATE", "SERVICES", "↻", "VERIFY", "RSS", "CPU", "AGE",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let visible = app.visible();
    let selected = app.selected_world();
    let mut rows = Vec::new();
    let mut selected_row = None;
    let mut last_project: Option<&str> = None;
    for (p, w) in &visible {
        if last_project != Some(p.name.as_str()) {
            rows.push(Row::new([Cell::from(Span::styled(
                shown(&p.name),
                Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            ))]));
            last_project = Some(p.name.as_str());
        }
        if selected.is_some_and(|(sp, sw)| sp.name == p.name && sw.name == w.name) {
            selected_row = Some(rows.len());
        }
        rows.push(world_row(app, theme, &p.name, w));
    }
    let widths = [
        Constraint::Min(12),
        Constraint::Length(12),
        Constraint::Fill(2),
        Constraint::Length(3),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(5),
        Constraint::Length(4),
    ];
    let title = if app.filter.is_empty() && app.mode != Mode::Filter {
        " worlds ".to_owned()
    } else {
        format!(" worlds matching /{} ", shown(&app.filter))
    };
    if visible.is_empty() {
        let text = if app.filter.is_empty() {
            "no worlds yet: `binky up <branch>` in a project makes one"
        } else {
            "no world matches the filter (esc clears it)"
        };
        let block = Block::new().borders(Borders::TOP).title(title);
        f.render_widget(
            Paragraph::new(Line::styled(text, theme.dim()))
                .block(block)
                .wrap(Wrap { trim: true }),
            area,
        );
        return;
    }
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::new().borders(Borders::TOP).title(title))
        .column_spacing(1)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("›");
    let mut state = ratatui::widgets::TableState::default().with_selected(selected_row);
    f.render_stateful_widget(table, area, &mut state);
}

/// Where a sleeping world's services go: since when it sleeps, and what
/// wakes it.
fn sleeping_words(w: &WorldStatus) -> String {
    match &w.sleeping_since {
        Some(since) => format!("since {since}; a request wakes it"),
        None => "a request wakes it".to_owned(),
    }
}

fn world_row(app: &App, theme: Theme, project: &str, w: &WorldStatus) -> Row<'static> {
    let state = match (&w.state, &w.queue) {
        (WorldState::Queued, Some(q)) => format!("queued {}/{}", q.position, q.of),
        (s, _) => s.as_str().to_owned(),
    };
    // Queued, suspended and failed worlds say why where the services go.
    let services = match (&w.state, &w.queue, &w.error) {
        (WorldState::Queued, Some(q), _) => shown(&q.reason),
        (WorldState::Failed | WorldState::Suspended, _, Some(e)) => shown(e),
        (WorldState::Sleeping, ..) => sleeping_words(w),
        _ => w
            .services
            .iter()
            .map(|s| {
                // A service flooding its log says so where it is listed.
                let flag = if s.log_flood.is_some() { "⚠" } else { "" };
                match s.port {
                    Some(port) => format!("{flag}{}:{port}", shown(&s.name)),
                    None => format!("{flag}{}", shown(&s.name)),
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
    };
    let restarts: u32 = w.services.iter().map(|s| s.restarts).sum();
    let verify = w
        .verify
        .as_deref()
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or("-")
        .to_owned();
    let key = super::model::WorldKey {
        project: project.to_owned(),
        world: w.name.clone(),
    };
    let (rss, cpu) = match w.usage {
        Some(u) => (
            bytes(u.rss_bytes),
            app.cpu.get(&key).map_or("-".into(), |c| format!("{c:.0}%")),
        ),
        None => ("-".into(), "-".into()),
    };
    let age = w.created.as_deref().map_or("-".into(), age);
    let verify_style = match verify.as_str() {
        "passed" => theme.fg(Color::Green),
        "failed" => theme.fg(Color::Red),
        _ => theme.dim(),
    };
    Row::new(vec![
        Cell::from(format!("  {}", shown(&w.name))),
        Cell::from(Span::styled(state, theme.state(w.state))),
        Cell::from(services),
        Cell::from(if restarts > 0 {
            restarts.to_string()
        } else {
            String::new()
        }),
        Cell::from(Span::styled(verify, verify_style)),
        Cell::from(rss),
        Cell::from(cpu),
        Cell::from(age),
    ])
}

/// The selected world's services: state, pid, ports and URL each.
fn draw_detail(f: &mut Frame, app: &App, theme: Theme, area: Rect) {
    let Some((p, w)) = app.selected_world() else {
        return;
    };
    let mut lines = vec![Line::from(vec![
        Span::styled(
            format!("{}/{}", shown(&p.name), shown(&w.name)),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::styled(format!("  {}", shown(&w.path)), theme.dim()),
    ])];
    if let Some(e) = &w.error {
        lines.push(Line::styled(shown(e), theme.fg(Color::Red)));
    }
    if let Some(v) = &w.verify {
        lines.push(Line::from(format!("verify: {}", shown(v))));
    }
    for n in &w.notes {
        lines.push(Line::styled(shown(n), theme.fg(Color::Yellow)));
    }
    for s in &w.services {
        let style = match s.state {
            ServiceState::Running | ServiceState::Provisioned => theme.fg(Color::Green),
            ServiceState::Failed | ServiceState::Unhealthy => theme.fg(Color::Red),
            _ => Style::new(),
        };
        let mut spans = vec![
            Span::raw(format!("{:<12} ", shown(&s.name))),
            Span::styled(format!("{:<11} ", s.state.as_str()), style),
        ];
        if let Some(pid) = s.pid {
            spans.push(Span::styled(format!("pid {pid} "), theme.dim()));
        }
        if let Some(port) = s.port {
            spans.push(Span::raw(format!(":{port} ")));
        }
        for (name, port) in &s.ports {
            spans.push(Span::raw(format!("{}:{port} ", shown(name))));
        }
        if let Some(url) = &s.url {
            spans.push(Span::styled(
                shown(url),
                theme.fg(Color::Blue).add_modifier(Modifier::UNDERLINED),
            ));
        }
        lines.push(Line::from(spans));
    }
    let block = Block::new()
        .borders(Borders::TOP)
        .title(" services (enter: back to logs) ");
    f.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}

/// The newest lines of the followed logs that fit, oldest at the top.
fn draw_logs(f: &mut Frame, app: &App, theme: Theme, area: Rect) {
    let title = match &app.logs.target {
        Some((k, svc)) => format!(
            " logs: {}/{}{} ",
            shown(&k.project),
            shown(&k.world),
            svc.as_deref()
                .map(|s| format!(" {}", shown(s)))
                .unwrap_or_default()
        ),
        None => " logs (l: follow the selected world) ".to_owned(),
    };
    let block = Block::new().borders(Borders::TOP).title(title);
    let rows = area
        .height
        .saturating_sub(1 + u16::from(app.logs.ended.is_some()) + u16::from(app.logs.skipped))
        as usize;
    let width = app
        .logs
        .lines
        .iter()
        .map(|l| l.service.len())
        .max()
        .unwrap_or(0)
        .min(16);
    let mut lines: Vec<Line> = app
        .logs
        .lines
        .iter()
        .rev()
        .take(rows)
        .map(|l| {
            Line::from(vec![
                Span::styled(format!("{:<width$} | ", shown(&l.service)), theme.dim()),
                Span::raw(shown(&l.text)),
            ])
        })
        .collect();
    lines.reverse();
    if app.logs.skipped {
        lines.insert(0, Line::styled("… lines skipped", theme.dim()));
    }
    if let Some(e) = &app.logs.ended {
        lines.push(Line::styled(format!("(ended: {})", shown(e)), theme.dim()));
    }
    f.render_widget(Paragraph::new(lines).block(block), area);
}

fn status_line(app: &App, theme: Theme) -> Line<'static> {
    match &app.mode {
        Mode::Filter => Line::from(format!("/{}▏ enter keeps, esc clears", shown(&app.filter))),
        _ if !app.status.is_empty() => Line::from(shown(&app.status)),
        _ => Line::styled(
            "? help  q quit  u/d/r up/down/reload  x remove  v verify  l logs  / filter",
            theme.dim(),
        ),
    }
}

fn draw_help(f: &mut Frame, theme: Theme) {
    let area = f.area();
    let w = 60.min(area.width);
    let h = (KEYS.len() as u16 + 3).min(area.height);
    let rect = Rect::new((area.width - w) / 2, (area.height - h) / 2, w, h);
    let lines: Vec<Line> = KEYS
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(
                    format!("{k:>8}  "),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(*what),
            ])
        })
        .collect();
    f.render_widget(Clear, rect);
    f.render_widget(
        Paragraph::new(lines).block(
            Block::bordered()
                .title(" keys (any key closes) ")
                .border_style(theme.dim()),
        ),
        rect,
    );
}

/// `n` bytes in binary units, three significant digits at most.
pub(super) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 || v >= 10.0 {
        format!("{v:.0}{}", UNITS[i])
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

/// How long ago `rfc3339` was: `45s`, `12m`, `3h`, `2d`.
fn age(rfc3339: &str) -> String {
    let Ok(t) = humantime::parse_rfc3339_weak(rfc3339) else {
        return "-".into();
    };
    let s = std::time::SystemTime::now()
        .duration_since(t)
        .map_or(0, |d| d.as_secs());
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests;
