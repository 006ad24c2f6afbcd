//! Terminal output: colour choice (terminal detection and `NO_COLOR` via
//! anstream) and the few styles Binky uses.

use crate::cli::ColorChoice;
use anstyle::{AnsiColor, Style};

/// Applies `--color` globally; `auto` follows the terminal, `NO_COLOR` and
/// `CLICOLOR_FORCE`.
pub fn init(choice: ColorChoice) {
    let c = match choice {
        ColorChoice::Auto => anstream::ColorChoice::Auto,
        ColorChoice::Always => anstream::ColorChoice::Always,
        ColorChoice::Never => anstream::ColorChoice::Never,
    };
    c.write_global();
}

/// Whether text written to stderr should carry colour: the `--color`
/// choice, `NO_COLOR`/`CLICOLOR_FORCE`, and whether stderr is a terminal,
/// decided the way every other Binky output decides it (for `tracing`,
/// which writes its own escape codes).
pub fn stderr_colour_on() -> bool {
    anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never
}

/// Errors.
pub const ERROR: Style = AnsiColor::Red.on_default().bold();
/// Warnings.
pub const WARN: Style = AnsiColor::Yellow.on_default().bold();
/// Success marks.
pub const OK: Style = AnsiColor::Green.on_default().bold();
/// Secondary text.
pub const DIM: Style = Style::new().dimmed();
/// Emphasis (names).
pub const BOLD: Style = Style::new().bold();

/// Wraps `text` in `style`; anstream strips the codes where colour is off.
pub fn paint(style: Style, text: impl std::fmt::Display) -> String {
    format!("{style}{text}{style:#}")
}

/// Prints `error: msg` (and `hint: …` lines) to stderr.
pub fn error(msg: impl std::fmt::Display, hint: Option<&str>) {
    anstream::eprintln!("{} {msg}", paint(ERROR, "error:"));
    if let Some(h) = hint {
        anstream::eprintln!("  {} {h}", paint(DIM, "hint:"));
    }
}
