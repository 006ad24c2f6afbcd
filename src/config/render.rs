//! Token rendering: `${self.port}`, `${api.url}`, `${env.NAME}`, …
//!
//! Rendering is one pure function over a world's facts ([`Facts`]). A token it
//! does not recognise — or recognises but has no value for — is left exactly as
//! written, never blanked, so `${...}` owned by the user's own tooling (shell
//! defaults, Compose, Terraform) survives. `$${` is the escape for a literal
//! `${`.

use indexmap::IndexMap;

/// The field a service token asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field<'a> {
    /// `.port`: the primary port.
    Port,
    /// `.ports.NAME`: a named extra port.
    Ports(&'a str),
    /// `.url`: the proxied URL (url service), the address (resource), or the
    /// loopback URL (a service with only ports).
    Url,
    /// `.local_url`: `http://localhost:<port>`, no DNS needed.
    LocalUrl,
    /// `.host`: the hostname of `.url`.
    Host,
    /// A field only some adapters' slices have: `.prefix` (a key, topic,
    /// collection or index prefix), `.bucket`, `.database` (see
    /// [`SLICE_FIELDS`]).
    Slice(&'a str),
}

/// The adapter-specific fields a token may name (`${cache.prefix}`); which
/// adapter fills which is in `adapters::catalog`.
pub const SLICE_FIELDS: &[&str] = &["prefix", "bucket", "database"];

/// What a `${…}` body means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token<'a> {
    /// `${self.FIELD}`.
    SelfField(Field<'a>),
    /// `${SVC.FIELD}`.
    Service(&'a str, Field<'a>),
    /// `${env.NAME}`.
    Env(&'a str),
    /// `${worktree.name}`.
    WorktreeName,
    /// `${worktree.path}`.
    WorktreePath,
    /// `${project.name}`.
    ProjectName,
}

/// One `${…}` occurrence in a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occurrence<'a> {
    /// Byte offset of the `$`.
    pub start: usize,
    /// Byte offset just past the `}`.
    pub end: usize,
    /// The text between the braces.
    pub body: &'a str,
}

impl<'a> Occurrence<'a> {
    /// The whole token as written, `${…}`.
    pub fn text<'s>(&self, source: &'s str) -> &'s str {
        &source[self.start..self.end]
    }
}

/// A piece of a template: literal text or a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text copied through (an escaped `$${` yields `${` here).
    Literal(&'a str),
    /// A `${…}` token.
    Token(Occurrence<'a>),
}

/// Splits a template into literal runs and tokens. A `${` without a closing
/// `}` is literal. Never panics; the pieces' text concatenates back to the
/// input with each `$${` reduced to `${`.
pub fn pieces(s: &str) -> Vec<Piece<'_>> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut lit_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' {
            i += 1;
            continue;
        }
        if bytes[i..].starts_with(b"$${") {
            // Escape: emit up to and including the first `$`, skip the second.
            out.push(Piece::Literal(&s[lit_start..i + 1]));
            lit_start = i + 2;
            i += 3;
            continue;
        }
        if bytes[i..].starts_with(b"${")
            && let Some(close) = s[i + 2..].find('}')
        {
            let body = &s[i + 2..i + 2 + close];
            // A body spanning another `${` is not one token: leave the outer
            // `${` literal and let the inner one be found.
            if !body.contains("${") {
                if lit_start < i {
                    out.push(Piece::Literal(&s[lit_start..i]));
                }
                let end = i + 3 + close;
                out.push(Piece::Token(Occurrence {
                    start: i,
                    end,
                    body,
                }));
                lit_start = end;
                i = end;
                continue;
            }
        }
        i += 1;
    }
    if lit_start < s.len() {
        out.push(Piece::Literal(&s[lit_start..]));
    }
    out
}

/// Every token occurrence in `s` (escapes skipped).
pub fn occurrences(s: &str) -> impl Iterator<Item = Occurrence<'_>> {
    pieces(s).into_iter().filter_map(|p| match p {
        Piece::Token(o) => Some(o),
        Piece::Literal(_) => None,
    })
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_field(rest: &str) -> Option<Field<'_>> {
    match rest {
        "port" => Some(Field::Port),
        "url" => Some(Field::Url),
        "local_url" => Some(Field::LocalUrl),
        "host" => Some(Field::Host),
        f if SLICE_FIELDS.contains(&f) => Some(Field::Slice(f)),
        _ => rest
            .strip_prefix("ports.")
            .filter(|n| is_ident(n))
            .map(Field::Ports),
    }
}

/// Whether `s` holds a `${…}` Binky owns (see [`classify`]), as opposed to
/// only a shell's own `${HOME}` or none.
pub fn has_binky_token(s: &str) -> bool {
    occurrences(s).any(|o| classify(o.body).is_some())
}

/// Whether any string in `v` (an option's value, at any depth) holds a
/// token Binky owns.
pub fn value_has_binky_token(v: &toml::Value) -> bool {
    match v {
        toml::Value::String(s) => has_binky_token(s),
        toml::Value::Array(a) => a.iter().any(value_has_binky_token),
        toml::Value::Table(t) => t.values().any(value_has_binky_token),
        _ => false,
    }
}

/// Classifies a token body; `None` for anything Binky does not own.
pub fn classify(body: &str) -> Option<Token<'_>> {
    let (head, rest) = body.split_once('.')?;
    match head {
        "env" => is_env_name(rest).then_some(Token::Env(rest)),
        "worktree" => match rest {
            "name" => Some(Token::WorktreeName),
            "path" => Some(Token::WorktreePath),
            _ => None,
        },
        "project" => (rest == "name").then_some(Token::ProjectName),
        "self" => parse_field(rest).map(Token::SelfField),
        svc if is_ident(svc) => parse_field(rest).map(|f| Token::Service(svc, f)),
        _ => None,
    }
}

/// What one service contributes to rendering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceFacts {
    /// Primary port, if allocated.
    pub port: Option<u16>,
    /// Named extra ports.
    pub ports: IndexMap<String, u16>,
    /// `${SVC.url}`.
    pub url: Option<String>,
    /// `${SVC.local_url}`.
    pub local_url: Option<String>,
    /// `${SVC.host}`.
    pub host: Option<String>,
    /// A resource's adapter-specific fields (`${SVC.prefix}`, `${SVC.bucket}`).
    pub slice: IndexMap<String, String>,
}

/// Everything rendering may read about one world. Building it is the caller's
/// job; rendering itself touches nothing else.
pub struct Facts<'a> {
    /// The project name.
    pub project: &'a str,
    /// The world's name (its branch).
    pub worktree_name: &'a str,
    /// The worktree's path.
    pub worktree_path: &'a str,
    /// Every service of the world.
    pub services: &'a IndexMap<String, ServiceFacts>,
    /// `${env.NAME}` look-up.
    pub env: &'a (dyn Fn(&str) -> Option<String> + Sync),
}

/// The result of rendering one string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The text, with known tokens replaced.
    pub text: String,
    /// Tokens Binky owns but could not fill (left as written), e.g. an unset
    /// `${env.NAME}`. Callers decide whether that is an error.
    pub unresolved: Vec<String>,
}

/// Renders `template` for service `self_name` (`None` where `self` has no
/// meaning, e.g. `[agents] verify`).
pub fn render(template: &str, self_name: Option<&str>, facts: &Facts<'_>) -> Rendered {
    let mut text = String::with_capacity(template.len());
    let mut unresolved = Vec::new();
    for piece in pieces(template) {
        match piece {
            Piece::Literal(l) => text.push_str(l),
            Piece::Token(occ) => {
                match classify(occ.body).and_then(|t| value(t, self_name, facts)) {
                    Some(v) => text.push_str(&v),
                    None => {
                        let raw = occ.text(template);
                        if classify(occ.body).is_some() {
                            unresolved.push(raw.to_owned());
                        }
                        text.push_str(raw);
                    }
                }
            }
        }
    }
    Rendered { text, unresolved }
}

fn value(token: Token<'_>, self_name: Option<&str>, facts: &Facts<'_>) -> Option<String> {
    let field_of = |svc: &str, field: Field<'_>| -> Option<String> {
        let s = facts.services.get(svc)?;
        match field {
            Field::Port => s.port.map(|p| p.to_string()),
            Field::Ports(n) => s.ports.get(n).map(|p| p.to_string()),
            Field::Url => s.url.clone(),
            Field::LocalUrl => s.local_url.clone(),
            Field::Host => s.host.clone(),
            Field::Slice(n) => s.slice.get(n).cloned(),
        }
    };
    match token {
        Token::SelfField(f) => field_of(self_name?, f),
        Token::Service(svc, f) => field_of(svc, f),
        Token::Env(name) => (facts.env)(name),
        Token::WorktreeName => Some(facts.worktree_name.to_owned()),
        Token::WorktreePath => Some(facts.worktree_path.to_owned()),
        Token::ProjectName => Some(facts.project.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts_with<'a>(
        services: &'a IndexMap<String, ServiceFacts>,
        env: &'a (dyn Fn(&str) -> Option<String> + Sync),
    ) -> Facts<'a> {
        Facts {
            project: "acme",
            worktree_name: "login-fix",
            worktree_path: "/w/login-fix",
            services,
            env,
        }
    }

    fn world() -> IndexMap<String, ServiceFacts> {
        let mut m = IndexMap::new();
        m.insert(
            "api".into(),
            ServiceFacts {
                port: Some(20001),
                ports: [("grpc".to_string(), 20002)].into_iter().collect(),
                url: Some("http://api.login-fix.acme.localhost".into()),
                local_url: Some("http://localhost:20001".into()),
                host: Some("api.login-fix.acme.localhost".into()),
                slice: IndexMap::new(),
            },
        );
        m.insert(
            "db".into(),
            ServiceFacts {
                url: Some("sqlite:///tmp/x.db".into()),
                ..Default::default()
            },
        );
        m
    }

    #[test]
    fn known_tokens_render() {
        let w = world();
        let env = |n: &str| (n == "HOME").then(|| "/root".to_string());
        let f = facts_with(&w, &env);
        let r = render(
            "serve --port ${self.port} --grpc ${self.ports.grpc} db=${db.url} h=${env.HOME} ${project.name}/${worktree.name}@${worktree.path} ${api.local_url} ${api.host}",
            Some("api"),
            &f,
        );
        assert_eq!(
            r.text,
            "serve --port 20001 --grpc 20002 db=sqlite:///tmp/x.db h=/root acme/login-fix@/w/login-fix http://localhost:20001 api.login-fix.acme.localhost"
        );
        assert!(r.unresolved.is_empty());
    }

    #[test]
    fn unknown_and_unfilled_tokens_survive() {
        let w = world();
        let env = |_: &str| None;
        let f = facts_with(&w, &env);
        let src = "${FOO:-bar} ${HOME} ${env.MISSING} ${nope.port} ${db.port} ${self.port} ${} ${ unterminated";
        let r = render(src, None, &f);
        assert_eq!(r.text, src);
        assert_eq!(
            r.unresolved,
            vec![
                "${env.MISSING}",
                "${nope.port}",
                "${db.port}",
                "${self.port}"
            ]
        );
    }

    #[test]
    fn dollar_dollar_escapes() {
        let w = world();
        let env = |_: &str| None;
        let f = facts_with(&w, &env);
        assert_eq!(
            render("a $${self.port} b", Some("api"), &f).text,
            "a ${self.port} b"
        );
        assert_eq!(render("$$", Some("api"), &f).text, "$$");
        assert_eq!(render("cost $5", Some("api"), &f).text, "cost $5");
    }

    #[test]
    fn classify_forms() {
        assert_eq!(classify("self.port"), Some(Token::SelfField(Field::Port)));
        assert_eq!(
            classify("api.ports.grpc"),
            Some(Token::Service("api", Field::Ports("grpc")))
        );
        assert_eq!(classify("env.PG_URL"), Some(Token::Env("PG_URL")));
        assert_eq!(classify("env.PG-URL"), None);
        assert_eq!(classify("api.portz"), None);
        assert_eq!(classify("HOME"), None);
    }
}
