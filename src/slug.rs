//! Turning arbitrary names (git branches, project names) into DNS-label-safe
//! slugs for hostnames, slice names and directory names.

use sha2::{Digest, Sha256};

/// Longest world slug: leaves room in a 63-byte DNS label and a 63-byte
/// PostgreSQL identifier for the project name and separators.
pub(crate) const MAX_SLUG_LEN: usize = 40;

/// Hex digits in a [`short_hash`].
pub(crate) const HASH_LEN: usize = 6;

/// A short, stable hex digest of `s` (first 24 bits of SHA-256).
pub(crate) fn short_hash(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    let mut out = String::with_capacity(HASH_LEN);
    for b in digest.iter().take(HASH_LEN / 2) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Punctuation a world name may hold besides letters and digits (any
/// script): none of it means anything to a POSIX shell.
pub(crate) const NAME_PUNCTUATION: &str = "._-/+@,=%";

/// Checks that a world name (a branch name) cannot change the shape of a
/// command it is rendered into (`${worktree.name}` in `cmd`, `migrate`,
/// `verify`…): letters and digits of any script and [`NAME_PUNCTUATION`]
/// only, not starting with `-`. World names come from agents and from other
/// people's branches; git itself accepts `;`, `$()`, backticks, quotes and
/// `|` in a branch name.
///
/// # Errors
/// The first character that is not allowed, described, with what is.
pub(crate) fn check_world_name(name: &str) -> Result<(), String> {
    check_name("world name", name)
}

/// A world's name (its branch) with its slug: checked once where it
/// enters the daemon ([`WorldName::parse`]: an `up`'s request), or read
/// back from the registry, which only ever recorded checked ones
/// ([`WorldName::recorded`]). The slug is made with the name, so the two
/// never travel apart and never disagree.
///
/// It reads as the name (`Deref<Target = str>`, `Display`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct WorldName {
    name: String,
    slug: String,
}

impl WorldName {
    /// `name` checked by [`check_world_name`], with its [`world_slug`].
    ///
    /// # Errors
    /// The first character a world name may not hold, as
    /// [`check_world_name`] says it.
    pub(crate) fn parse(name: &str) -> Result<WorldName, String> {
        check_world_name(name)?;
        Ok(WorldName {
            name: name.to_owned(),
            slug: world_slug(name),
        })
    }

    /// A name and slug as the registry recorded them: checked when
    /// recorded, and the slug kept as it was (paths and slices are named
    /// by it).
    pub(crate) fn recorded(name: &str, slug: &str) -> WorldName {
        WorldName {
            name: name.to_owned(),
            slug: slug.to_owned(),
        }
    }

    /// The name.
    pub(crate) fn as_str(&self) -> &str {
        &self.name
    }

    /// The DNS-label-safe slug: hostnames, slice names, folders.
    pub(crate) fn slug(&self) -> &str {
        &self.slug
    }
}

impl std::ops::Deref for WorldName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Display for WorldName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// [`check_world_name`]'s rules, the name called `what` in its errors.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("a {what} cannot be empty"));
    }
    if name.starts_with('-') {
        return Err(format!(
            "{what} `{name}` starts with `-`, which commands would read as an option"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_alphanumeric() || NAME_PUNCTUATION.contains(*c)))
    {
        let shown = if c.is_control() || c.is_whitespace() {
            format!("{c:?}")
        } else {
            format!("`{c}`")
        };
        // ASCII punctuation, spaces and controls mean something to a shell;
        // other symbols (a full-width `＜`, an emoji) are refused as not
        // being letters, digits or the punctuation allowed.
        let why = if c.is_ascii() {
            "which a shell would read"
        } else {
            "which is neither a letter, a digit nor punctuation a name may hold"
        };
        return Err(format!(
            "{what} {:?} holds {shown}, {why}; {what}s may hold letters, digits and {}",
            name,
            NAME_PUNCTUATION
                .chars()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    Ok(())
}

/// Longest admission group name, characters.
pub(crate) const MAX_GROUP_LEN: usize = 64;

/// Checks an admission group name (`--group`, MCP `group`): 1 to
/// [`MAX_GROUP_LEN`] characters, the characters a world name may hold (it
/// is shown in status and events, and comes from agents).
///
/// # Errors
/// Empty, too long, or a character that is not allowed, described.
pub(crate) fn check_group(group: &str) -> Result<(), String> {
    if group.is_empty() {
        return Err(
            "a group name cannot be empty (leave --group out for the default group)".into(),
        );
    }
    let n = group.chars().count();
    if n > MAX_GROUP_LEN {
        return Err(format!(
            "a group name is at most {MAX_GROUP_LEN} characters; this one has {n}"
        ));
    }
    check_name("group name", group)
}

/// Lowercases, maps every run of characters outside `[a-z0-9]` to one `-`,
/// and trims `-` from both ends. May return an empty string.
fn normalise(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut dash = false;
    for c in s.chars().flat_map(|c| c.to_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
            dash = false;
        } else if !dash && !out.is_empty() {
            out.push('-');
            dash = true;
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// The world slug of a branch name: lowercase DNS-label characters, at most
/// [`MAX_SLUG_LEN`] bytes, never empty.
///
/// A name that is already a valid slug is kept as is. Any other name (changed
/// by normalising, or shortened) gets `-<hash>` of the original name appended,
/// so `feat/x` and `feat-x` — or two long names sharing a prefix — never share
/// a slug, and the slug of a name never changes.
pub(crate) fn world_slug(name: &str) -> String {
    let base = normalise(name);
    if base == name && !base.is_empty() && base.len() <= MAX_SLUG_LEN {
        return base;
    }
    let hash = short_hash(name);
    let keep = MAX_SLUG_LEN - HASH_LEN - 1;
    let mut head: String = base.chars().take(keep).collect();
    while head.ends_with('-') {
        head.pop();
    }
    if head.is_empty() {
        // Nothing ASCII survived (e.g. `日本語`): the hash alone is the slug,
        // prefixed so it never starts with a digit-only look.
        format!("w-{hash}")
    } else {
        format!("{head}-{hash}")
    }
}

/// A suggestion for turning `s` into a valid DNS label, for error hints.
pub(crate) fn dns_label_hint(s: &str) -> String {
    let n = normalise(s);
    let mut n: String = n.chars().take(63).collect();
    while n.ends_with('-') {
        n.pop();
    }
    if n.is_empty() { "app".to_owned() } else { n }
}

/// The environment-variable form of a service (or port) name: uppercased,
/// every other character `_` (`api-v2` → `API_V2`). What `<SVC>_URL`
/// (`binky env --dotenv`, `verify`, `migrate`) and `BINKY_PORT_<SVC>` are
/// built from, in the CLI and the daemon alike.
pub(crate) fn env_key(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The variable holding a port: `BINKY_PORT_<SVC>` for a service's primary
/// port (`port` empty), `BINKY_PORT_<SVC>_<PORT>` for a named one.
pub(crate) fn port_var(service: &str, port: &str) -> String {
    if port.is_empty() {
        format!("BINKY_PORT_{}", env_key(service))
    } else {
        format!("BINKY_PORT_{}_{}", env_key(service), env_key(port))
    }
}

/// A world name as an error message shows it, where the name may be one
/// the name rules refuse: a control character (a line break that would
/// forge a line of output) written as its escape (`\n`), the rest as is.
pub(crate) fn shown(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(name);
    }
    name.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_name_in_a_message_cannot_forge_a_line() {
        assert_eq!(super::shown("feat/a"), "feat/a");
        assert_eq!(super::shown("a\nb\u{7}"), "a\\nb\\u{7}");
    }

    use super::*;

    #[test]
    fn a_refused_group_is_called_a_group_and_each_refusal_gives_its_real_reason() {
        let e = check_group("x<script>").unwrap_err();
        assert!(
            e.starts_with(
                "group name \"x<script>\" holds `<`, which a shell would read; group names may hold"
            ),
            "{e}"
        );
        assert!(!e.contains("world name"), "{e}");
        let e = check_world_name("a＜b").unwrap_err();
        assert!(!e.contains("shell"), "{e}");
        assert!(
            e.contains("neither a letter, a digit nor punctuation"),
            "{e}"
        );
    }

    #[test]
    fn world_names_with_shell_metacharacters_are_refused() {
        for ok in [
            "feature/Login-Page",
            "fix/ÜBER_bug.v2",
            "日本語",
            "agent-17+retry@2,x=y%",
        ] {
            assert!(check_world_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "feat;touch${IFS}/tmp/x;y",
            "feat/$(touch${IFS}/tmp/x)",
            "feat`touch${IFS}/tmp/x`",
            "a|b",
            "a&b",
            "it's",
            "say\"hi\"",
            "a*b",
            "a\nb",
            "a b",
            "#1",
            "a>b",
            "-rf",
            "",
        ] {
            let e = check_world_name(bad).unwrap_err();
            assert!(
                bad.is_empty() || bad.starts_with('-') || e.contains("letters, digits"),
                "{bad}: {e}"
            );
        }
    }

    fn valid(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= MAX_SLUG_LEN
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn plain_names_are_kept() {
        assert_eq!(world_slug("login-fix"), "login-fix");
        assert_eq!(world_slug("feat-x"), "feat-x");
    }

    #[test]
    fn odd_names_are_valid_distinct_and_stable() {
        let names = [
            "feature/Login-Page",
            "fix/ÜBER_bug.v2",
            "日本語",
            "ctd-1744-improve-visibility-of-later-and-undated-notifications-in-the-inbox-view",
            "feat-x",
            "feat/x",
            "feature/JIRA-12_Fix.login",
            &"a".repeat(150),
            &"a".repeat(151),
        ];
        let slugs: Vec<String> = names.iter().map(|n| world_slug(n)).collect();
        for (n, s) in names.iter().zip(&slugs) {
            assert!(valid(s), "{n:?} -> {s:?}");
            assert_eq!(&world_slug(n), s, "stable");
        }
        let unique: std::collections::BTreeSet<_> = slugs.iter().collect();
        assert_eq!(unique.len(), slugs.len(), "{slugs:?}");
    }
}
