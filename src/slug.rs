//! Turning arbitrary names (git branches, project names) into DNS-label-safe
//! slugs for hostnames, slice names and directory names.

use sha2::{Digest, Sha256};

/// Longest world slug: leaves room in a 63-byte DNS label and a 63-byte
/// PostgreSQL identifier for the project name and separators.
pub const MAX_SLUG_LEN: usize = 40;

/// Length of the hex hash suffix.
const HASH_LEN: usize = 6;

/// A short, stable hex digest of `s` (first 24 bits of SHA-256).
pub fn short_hash(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    let mut out = String::with_capacity(HASH_LEN);
    for b in digest.iter().take(HASH_LEN / 2) {
        out.push_str(&format!("{b:02x}"));
    }
    out
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
pub fn world_slug(name: &str) -> String {
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
pub fn dns_label_hint(s: &str) -> String {
    let n = normalise(s);
    let mut n: String = n.chars().take(63).collect();
    while n.ends_with('-') {
        n.pop();
    }
    if n.is_empty() { "app".to_owned() } else { n }
}

#[cfg(test)]
mod tests {
    use super::*;

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
