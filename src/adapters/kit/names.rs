//! Slice names: `(project, world slug)` → the name of a database, key
//! prefix, vhost, topic prefix, bucket, index or collection prefix, under
//! one [`Rule`] per kind.
//!
//! The inputs are DNS labels (`[a-z0-9-]`: `binky check` holds a project
//! name to that, and `crate::slug::world_slug` makes every slug one), and
//! one algorithm turns them into names for every kind:
//!
//! 1. `project`, the kind's separator, `slug` (then the kind's own rewrite,
//!    such as S3's reserved prefixes).
//! 2. When the separator is a character the parts may hold (`-`), the split
//!    is ambiguous (`my-app` + `x` and `my` + `app-x`), so the name always
//!    ends in `<sep><hash>`, the hash taken over `project\0slug`.
//! 3. Otherwise a name longer than the kind allows is cut and ends in
//!    `<sep><hash>` of the whole name, so two long names that share a head
//!    never meet. A prefix kind cuts a little early (see
//!    `PREFIX_CUT_ROOM`), so a whole prefix never covers a cut one.
//! 4. A prefix kind ends in its terminator (`:` for keys), which makes the
//!    prefix exact: `shop:feat-a:` covers none of `shop:feat-a-2:`'s keys.
//!
//! So no two distinct `(project, slug)` pairs map to one name (the property
//! tests below check it), and every name made since Binky began is made the
//! same way still (slices are found again by name).

use crate::slug::short_hash;

/// How one kind of slice is named.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// What the name is, for messages (`SQL identifier`, `key prefix`).
    pub kind: &'static str,
    /// Joins the project and the slug.
    pub separator: char,
    /// Ends a prefix so it matches only itself; `None` for a whole name.
    pub terminator: Option<char>,
    /// Longest name in bytes, terminator included.
    pub max_len: usize,
    /// The kind's own rewrite of the joined name (before any hash).
    pub rewrite: Option<fn(String) -> String>,
    /// Whether a byte may stand in a name of this kind.
    pub allowed: fn(u8) -> bool,
}

fn label_or(extra: &'static [u8]) -> impl Fn(u8) -> bool {
    move |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || extra.contains(&b)
}

/// A PostgreSQL database (an identifier of at most 63 bytes, quoted).
pub const POSTGRES_DATABASE: Rule = Rule {
    kind: "SQL identifier",
    separator: '_',
    terminator: None,
    max_len: 63,
    rewrite: None,
    allowed: |b| label_or(b"_")(b),
};

/// A MySQL/MariaDB database (64 bytes).
pub const MYSQL_DATABASE: Rule = Rule {
    max_len: 64,
    ..POSTGRES_DATABASE
};

/// A key prefix on a key-value server (Redis, Valkey).
pub const KEY_PREFIX: Rule = Rule {
    kind: "key prefix",
    separator: ':',
    terminator: Some(':'),
    // No server limit worth naming; a project (63) and a slug fit well.
    max_len: 256,
    rewrite: None,
    allowed: |b| label_or(b":")(b),
};

/// A RabbitMQ virtual host (255 bytes).
pub const VHOST: Rule = Rule {
    kind: "vhost",
    max_len: 255,
    ..POSTGRES_DATABASE
};

/// A Kafka topic prefix: `-` joins, so the name always carries the hash;
/// never `.` or `_`, which Kafka treats as one character.
pub const TOPIC_PREFIX: Rule = Rule {
    kind: "topic prefix",
    separator: '-',
    terminator: Some('-'),
    // A project (63), a slug, a hash and three `-`.
    max_len: 63 + crate::slug::MAX_SLUG_LEN + 6 + 3,
    rewrite: None,
    allowed: |b| label_or(b"")(b),
};

/// An S3 bucket: 3–63 lowercase letters, digits and `-`, never a reserved
/// prefix; `-` joins, so the name always carries the hash (which also keeps
/// it off every reserved suffix and from looking like an IP address).
pub const BUCKET: Rule = Rule {
    kind: "bucket",
    separator: '-',
    terminator: None,
    max_len: 63,
    rewrite: Some(bucket_rewrite),
    allowed: |b| label_or(b"")(b),
};

/// A database on a server whose names are short (MongoDB: 63 bytes, none
/// of `/\. "$`; ClickHouse).
pub const DATABASE: Rule = POSTGRES_DATABASE;

/// A collection prefix (Qdrant): `<project>_<slug>_`.
pub const COLLECTION_PREFIX: Rule = Rule {
    kind: "collection prefix",
    separator: '_',
    terminator: Some('_'),
    max_len: 128,
    rewrite: None,
    allowed: |b| label_or(b"_")(b),
};

/// An index prefix (Elasticsearch/OpenSearch: lowercase; no `\/*?"<>|
/// ,#:`; never starting with `-`, `_` or `+`; at most 255 bytes with the
/// index's own name after it). `-` joins, as for topics, so the name always
/// carries the hash.
pub const INDEX_PREFIX: Rule = Rule {
    kind: "index prefix",
    ..TOPIC_PREFIX
};

/// S3 prefixes a bucket may not start with.
pub const RESERVED_BUCKET_PREFIXES: &[&str] = &["xn--", "sthree-", "amzn-s3-demo-"];

/// Lowercase, `[a-z0-9-]` with no `--` run (how reserved suffixes are
/// spelled), trimmed of `-`, and a reserved prefix turned into `b-`.
fn bucket_rewrite(raw: String) -> String {
    let mut name = String::with_capacity(raw.len());
    for c in raw.to_ascii_lowercase().chars() {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if !(c == '-' && name.ends_with('-')) {
            name.push(c);
        }
    }
    let mut name = name.trim_matches('-').to_owned();
    for p in RESERVED_BUCKET_PREFIXES {
        if let Some(rest) = name.strip_prefix(p.trim_end_matches('-')) {
            name = format!("b-{}", rest.trim_start_matches('-'));
        }
    }
    name
}

impl Rule {
    /// The name of world `slug`'s slice of `project` (see the module docs),
    /// for `resource` when the slice names its resource (a project with
    /// several resources on one adapter: see
    /// [`Config::slice_resource`](crate::config::Config::slice_resource)).
    pub fn name(&self, project: &str, resource: Option<&str>, slug: &str) -> String {
        let sep = self.separator;
        // `_` in a resource's name reads as `-` (`binky check` refuses two
        // resources of one adapter that would then meet), so a slug, which
        // never holds `_`, stays the part after the last `_`.
        let label = resource.map(|r| r.replace('_', "-"));
        let head = match &label {
            None => project.to_owned(),
            // Joined by `-`, the name ends in a hash that tells the parts
            // apart anyway.
            Some(l) if sep == '-' => format!("{project}-{l}"),
            // A doubled separator: no project or slug is empty or holds
            // one, so `<project>_<slug>` never equals, nor as a prefix
            // covers, `<project>__<resource>_<slug>`.
            Some(l) => format!("{project}{sep}{sep}{l}"),
        };
        let mut joined = format!("{head}{sep}{slug}");
        if let Some(rewrite) = self.rewrite {
            joined = rewrite(joined);
        }
        let limit = self.max_len - self.terminator.map_or(0, char::len_utf8);
        // Project names and slugs are DNS labels: they may hold `-`.
        let mut name = if sep == '-' {
            let parts = match &label {
                None => format!("{project}\0{slug}"),
                Some(l) => format!("{project}\0{l}\0{slug}"),
            };
            with_hash(&joined, &short_hash(&parts), sep, limit)
        } else if self.terminator.is_some() && joined.len() > limit - PREFIX_CUT_ROOM {
            // A prefix kind cuts to exactly `limit` bytes, untrimmed, and
            // keeps whole only names well short of it: a whole name then
            // ends before the cut, where no `<sep>` can follow it (no part
            // holds one), so it never covers a cut name.
            let head = &joined[..limit - crate::slug::HASH_LEN - sep.len_utf8()];
            format!("{head}{sep}{}", short_hash(&joined))
        } else if joined.len() > limit {
            with_hash(&joined, &short_hash(&joined), sep, limit)
        } else {
            joined
        };
        if let Some(t) = self.terminator {
            name.push(t);
        }
        name
    }

    /// Why `name` is not a name of this kind, if it is not.
    pub fn check(&self, name: &str) -> Option<String> {
        if name.is_empty() || name.len() > self.max_len {
            return Some(format!(
                "`{name}` is not 1–{} bytes long: no {} is",
                self.max_len, self.kind
            ));
        }
        if let Some(b) = name.bytes().find(|b| !(self.allowed)(*b)) {
            return Some(format!(
                "`{name}` holds {:?}, which no {} made by Binky holds",
                b as char, self.kind
            ));
        }
        let body = match self.terminator {
            Some(t) => match name.strip_suffix(t) {
                Some(b) => b,
                None => {
                    return Some(format!(
                        "`{name}` does not end in `{t}`, as every {} Binky makes does",
                        self.kind
                    ));
                }
            },
            None => name,
        };
        // Every name joins a project and a slug.
        if !body.contains(self.separator) {
            return Some(format!(
                "`{name}` has no `{}`, which joins the project and the world in every {} Binky makes",
                self.separator, self.kind
            ));
        }
        // Rule 2 of the module docs: a name joined by `-` ends in its hash.
        if self.separator == '-' {
            let hash = body.rsplit('-').next().unwrap_or(body);
            if hash.len() != 6
                || !hash
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Some(format!(
                    "`{name}` does not end in the hash every {} Binky makes ends in",
                    self.kind
                ));
            }
        }
        None
    }
}

/// How much shorter than its limit a prefix kind's whole name stays: the
/// `<sep><hash>` a cut name ends in, and one byte, so a whole name never
/// ends where a cut name's `<sep>` stands. No name made before resources
/// were named came near it (a project, `:` and a slug are at most 104
/// bytes; the shortest prefix limit is 128).
const PREFIX_CUT_ROOM: usize = 8;

/// `name` cut so that `<sep><hash>` fits in `limit` bytes, the cut end
/// trimmed of separators, then `<sep><hash>`; the hash alone when nothing
/// is left of the name.
fn with_hash(name: &str, hash: &str, sep: char, limit: usize) -> String {
    let mut cut = name.len().min(limit - hash.len() - sep.len_utf8());
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = name[..cut].trim_end_matches(['_', '-', sep]);
    if head.is_empty() {
        hash.to_owned()
    } else {
        format!("{head}{sep}{hash}")
    }
}

/// Fits `name` into `max` bytes: unchanged when it fits, else cut, with `_`
/// and a short hash of the whole name (rule 3 of the module docs with `_`).
pub fn fit_identifier(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_owned();
    }
    with_hash(name, &short_hash(name), '_', max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RULES: &[Rule] = &[
        POSTGRES_DATABASE,
        MYSQL_DATABASE,
        KEY_PREFIX,
        VHOST,
        TOPIC_PREFIX,
        BUCKET,
        DATABASE,
        COLLECTION_PREFIX,
        INDEX_PREFIX,
    ];

    /// The names every adapter made before the kit, kept.
    #[test]
    fn names_made_before_are_made_the_same() {
        assert_eq!(
            POSTGRES_DATABASE.name("shop", None, "feat-a"),
            "shop_feat-a"
        );
        assert_eq!(KEY_PREFIX.name("shop", None, "feat-a"), "shop:feat-a:");
        assert_eq!(
            TOPIC_PREFIX.name("shop", None, "feat-a"),
            "shop-feat-a-203252-"
        );
        assert_eq!(
            TOPIC_PREFIX.name("shop", None, "feature-login-page-1cd8fc"),
            "shop-feature-login-page-1cd8fc-9a9368-"
        );
        let long = "x".repeat(40);
        let fitted = POSTGRES_DATABASE.name(&"p".repeat(30), None, &long);
        assert_eq!(
            fitted,
            fit_identifier(&format!("{}_{long}", "p".repeat(30)), 63)
        );
        assert_eq!(fitted.len(), 63);
        assert!(
            BUCKET
                .name("shop", None, "feat-a")
                .starts_with("shop-feat-a-")
        );
        assert_eq!(
            BUCKET.name("xn--shop", None, "w"),
            format!("b-shop-w-{}", short_hash("xn--shop\0w"))
        );
    }

    /// A slice that names its resource never meets, nor as a prefix
    /// covers, one that does not.
    #[test]
    fn a_resources_name_is_its_own() {
        assert_eq!(
            POSTGRES_DATABASE.name("shop", Some("analytics_db"), "feat-a"),
            "shop__analytics-db_feat-a"
        );
        assert_eq!(
            KEY_PREFIX.name("shop", Some("cache"), "feat-a"),
            "shop::cache:feat-a:"
        );
        assert_eq!(
            TOPIC_PREFIX.name("shop", Some("events"), "feat-a"),
            format!("shop-events-feat-a-{}-", short_hash("shop\0events\0feat-a"))
        );
        // A project named like the project and resource joined.
        assert_ne!(
            TOPIC_PREFIX.name("shop-events", None, "feat-a"),
            TOPIC_PREFIX.name("shop", Some("events"), "feat-a")
        );
    }

    fn label() -> impl Strategy<Value = String> {
        "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
    }

    fn slug() -> impl Strategy<Value = String> {
        any::<String>().prop_map(|s| crate::slug::world_slug(&s))
    }

    /// A resource as `binky check` takes a service's name, or none.
    fn resource() -> impl Strategy<Value = Option<String>> {
        proptest::option::of("[a-z][a-z0-9_-]{0,62}")
    }

    /// What tells two slices apart: `_` and `-` in a resource's name are
    /// one (`binky check` refuses two resources that differ only there).
    fn parts(p: &str, r: &Option<String>, s: &str) -> (String, Option<String>, String) {
        (
            p.to_owned(),
            r.as_ref().map(|r| r.replace('_', "-")),
            s.to_owned(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn no_two_slices_share_a_name(
            a in (label(), resource(), slug()),
            b in (label(), resource(), slug()),
        ) {
            prop_assume!(parts(&a.0, &a.1, &a.2) != parts(&b.0, &b.1, &b.2));
            for rule in RULES {
                prop_assert_ne!(
                    rule.name(&a.0, a.1.as_deref(), &a.2),
                    rule.name(&b.0, b.1.as_deref(), &b.2),
                    "{}", rule.kind
                );
            }
        }

        #[test]
        fn every_name_keeps_its_kinds_rules(p in label(), r in resource(), s in slug()) {
            for rule in RULES {
                let name = rule.name(&p, r.as_deref(), &s);
                prop_assert_eq!(rule.check(&name), None);
            }
        }

        #[test]
        fn a_prefix_covers_no_other_slices_prefix(
            p in label(),
            a in (resource(), slug()),
            b in (resource(), slug()),
        ) {
            prop_assume!(parts(&p, &a.0, &a.1) != parts(&p, &b.0, &b.1));
            for rule in RULES.iter().filter(|r| r.terminator.is_some()) {
                let x = rule.name(&p, a.0.as_deref(), &a.1);
                let y = rule.name(&p, b.0.as_deref(), &b.1);
                prop_assert!(!y.starts_with(&x), "{}: {x} prefixes {y}", rule.kind);
            }
        }

        /// Sibling slugs a person would make: one extends the other.
        #[test]
        fn a_prefix_covers_no_longer_sibling(
            p in label(),
            r in resource(),
            s in slug(),
            ext in "[a-z0-9-]{1,10}",
        ) {
            let t = crate::slug::world_slug(&format!("{s}{ext}"));
            prop_assume!(s != t);
            for rule in RULES.iter().filter(|r| r.terminator.is_some()) {
                let (a, b) = (rule.name(&p, r.as_deref(), &s), rule.name(&p, r.as_deref(), &t));
                prop_assert!(!b.starts_with(&a), "{}: {a} prefixes {b}", rule.kind);
            }
        }
    }
}
