//! Terminal output: colour choice (terminal detection and `NO_COLOR` via
//! anstream) and the few styles Binky uses.

use crate::cli::ColorChoice;
use anstyle::{AnsiColor, Style};

/// Applies `--color` globally; `auto` follows the terminal, `NO_COLOR` and
/// `CLICOLOR_FORCE`.
pub(crate) fn init(choice: ColorChoice) {
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
pub(crate) fn stderr_colour_on() -> bool {
    anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never
}

/// Errors.
pub(crate) const ERROR: Style = AnsiColor::Red.on_default().bold();
/// Warnings.
pub(crate) const WARN: Style = AnsiColor::Yellow.on_default().bold();
/// Success marks.
pub(crate) const OK: Style = AnsiColor::Green.on_default().bold();
/// Secondary text.
pub(crate) const DIM: Style = Style::new().dimmed();
/// Emphasis (names).
pub(crate) const BOLD: Style = Style::new().bold();

/// Wraps `text` in `style`; anstream strips the codes where colour is off.
pub(crate) fn paint(style: Style, text: impl std::fmt::Display) -> String {
    format!("{style}{text}{style:#}")
}

/// Prints `error: msg` (and `hint: …` lines) to stderr. Both may quote
/// what a service printed (a failed `up`'s log tail): they go through
/// [`untrusted`].
pub(crate) fn error(msg: impl std::fmt::Display, hint: Option<&str>) {
    anstream::eprintln!("{} {}", paint(ERROR, "error:"), untrusted(&msg.to_string()));
    if let Some(h) = hint {
        anstream::eprintln!("  {} {}", paint(DIM, "hint:"), untrusted(h));
    }
}

/// Whether `c` changes how the text around it is shown rather than what it
/// says: a bidirectional embedding, override or isolate (U+202E turns
/// `exe.txt` into what reads as `txt.exe`), a zero-width space or joiner,
/// a directional mark, the byte-order mark. Text from outside Binky shows
/// each as `<U+XXXX>` wherever Binky prints or draws it: the terminal
/// ([`untrusted`]), the dashboard and the proxy's pages.
pub(crate) fn hidden_format(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Text from outside Binky (a service's output, a server's message) made
/// safe for a terminal: colour (SGR, `ESC [ … m`) is kept, for anstream to
/// pass or strip as colour is on or off; every other escape sequence (a
/// title, a hyperlink, the clipboard, cursor moves) is dropped, and every
/// other control character but tab and newline is shown in caret notation
/// (`^M` for a carriage return), so the text can never rewrite the line
/// Binky printed before it or the terminal's state; a [`hidden_format`]
/// character is shown as `<U+XXXX>`.
pub(crate) fn untrusted(text: &str) -> std::borrow::Cow<'_, str> {
    let clean = |c: char| c == '\t' || c == '\n' || !(c.is_control() || hidden_format(c));
    if text.chars().all(clean) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            match chars.peek() {
                // CSI: parameters and intermediates, then a final byte.
                Some('[') => {
                    chars.next();
                    let mut seq = String::new();
                    let mut last = None;
                    for n in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&n) {
                            last = Some(n);
                            break;
                        }
                        seq.push(n);
                    }
                    let sgr = seq.chars().all(|c| c.is_ascii_digit() || c == ';');
                    if last == Some('m') && sgr {
                        out.push_str("\u{1b}[");
                        out.push_str(&seq);
                        out.push('m');
                    }
                }
                // OSC, DCS, SOS, PM, APC: a string up to BEL or ST.
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    chars.next();
                    while let Some(n) = chars.next() {
                        if n == '\u{7}' {
                            break;
                        }
                        if n == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                // A two-character escape (ESC c resets the terminal).
                Some(_) => {
                    chars.next();
                }
                None => {}
            }
        } else if clean(c) {
            out.push(c);
        } else if (c as u32) < 0x20 {
            out.push('^');
            out.push(char::from(b'@' + c as u8));
        } else if c == '\u{7f}' {
            out.push_str("^?");
        } else if hidden_format(c) {
            out.push_str(&format!("<U+{:04X}>", c as u32));
        }
        // C1 controls (U+0080–U+009F, an 8-bit CSI among them): dropped.
    }
    std::borrow::Cow::Owned(out)
}

/// Quotes `v` for POSIX shells: single quotes, with `'` written as `'\''`.
/// Exact in bash, zsh and sh for any value, newlines included.
pub(crate) fn shell_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::untrusted;

    #[test]
    fn untrusted_text_keeps_colour_and_nothing_else_that_moves_the_terminal() {
        let cases = [
            ("plain text", "plain text"),
            ("tab\tkept\nand newline", "tab\tkept\nand newline"),
            ("\u{1b}[1;31mred\u{1b}[0m", "\u{1b}[1;31mred\u{1b}[0m"),
            ("hello\r overwrite", "hello^M overwrite"),
            ("bell\u{7}", "bell^G"),
            ("\u{1b}]0;title\u{7}after", "after"),
            ("\u{1b}]52;c;Y2xpcA==\u{1b}\\after", "after"),
            ("\u{1b}[2J\u{1b}[Hcleared", "cleared"),
            ("\u{1b}[?1049hswap", "swap"),
            ("\u{1b}creset", "reset"),
            ("c1\u{9b}31m", "c131m"),
            ("del\u{7f}", "del^?"),
            ("ünïcödé ☃", "ünïcödé ☃"),
            ("trailing \u{1b}", "trailing "),
            // Shown as what it is, as the dashboard and the web pages do.
            ("evil\u{202e}txt.exe", "evil<U+202E>txt.exe"),
            (
                "zero\u{200b}width\u{2066}isolate",
                "zero<U+200B>width<U+2066>isolate",
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(untrusted(raw), want, "{raw:?}");
        }
    }
}
