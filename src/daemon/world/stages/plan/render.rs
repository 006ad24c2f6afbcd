//! Rendering a value with the world's environment: strict (an unset
//! `${env.NAME}` is an error naming it), a resource's `admin_url` and
//! options, and an `env_file`.

use super::facts_for;
use crate::address::AdminUrl;
use crate::config;
use crate::config::Config;
use crate::config::render::{Facts, ServiceFacts, render};
use crate::protocol::ApiError;
use indexmap::IndexMap;
use std::path::Path;

/// Reads a dotenv file: the world's copy first, else the main checkout's
/// (a git-ignored `.env` exists only where the user made it).
pub(in crate::daemon::world) fn read_env_file(
    world_root: &Path,
    main_root: &Path,
    rel: &str,
) -> Result<Vec<(String, String)>, ApiError> {
    let candidates = [
        config::resolve_against(world_root, rel),
        config::resolve_against(main_root, rel),
    ];
    let path = candidates.iter().find(|p| p.is_file()).ok_or_else(|| {
        ApiError::new(format!(
            "env_file {rel} not found in the world's checkout or the main one"
        ))
        .hint(format!(
            "create {} or remove env_file",
            candidates[1].display()
        ))
    })?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| ApiError::new(format!("cannot read env_file {}: {e}", path.display())))?;
    // Values are taken literally (see config::dotenv); errors never quote one.
    let pairs = config::dotenv::parse(&text).map_err(|e| {
        ApiError::new(format!("env_file {}, {e}", path.display()))
            .hint("each line is KEY=value (quote a value with spaces); `#` starts a comment")
    })?;
    for (k, v) in &pairs {
        crate::secrets::register_var(k, v);
    }
    Ok(pairs)
}

/// The error for a `${env.NAME}` with no value, at `key` (`services.db.admin_url`).
pub(in crate::daemon::world) fn unset_env(key: &str, token: &str) -> ApiError {
    ApiError::new(format!("{key} uses {token}, which is not set"))
        .hint("export it in the shell you run binky from (or put it in env_file)")
}

/// Renders `template` at `key` (`services.web.env.DATABASE_URL`), failing
/// on a `${env.NAME}` that has no value: a process must never be handed, nor
/// a user shown, an unrendered `${env.NAME}`. Other unresolved tokens are
/// left as written (`binky check` warns about them).
pub(in crate::daemon::world) fn render_strict(
    template: &str,
    key: &str,
    service: Option<&str>,
    facts: &Facts<'_>,
) -> Result<String, ApiError> {
    let rendered = render(template, service, facts);
    if let Some(tok) = rendered.unresolved.iter().find(|t| t.starts_with("${env.")) {
        return Err(unset_env(key, tok));
    }
    // A service's fact with no value now (a slice whose address could not
    // be resolved): as bad as an unset variable.
    if let Some(tok) = rendered.unresolved.iter().find(|t| {
        t.strip_prefix("${")
            .and_then(|b| b.split('.').next())
            .is_some_and(|svc| {
                facts.services.contains_key(svc) || (svc == "self" && service.is_some())
            })
    }) {
        return Err(
            ApiError::new(format!("{key} uses {tok}, which has no value now"))
                .hint("run `binky up` for the world again from the shell it was built in"),
        );
    }
    Ok(rendered.text)
}

/// What a resource's `admin_url` and options are rendered against: the
/// world's config, name and folder, the other services' facts and the
/// environment (see [`facts_for`]).
pub(in crate::daemon::world) struct Renderer<'a> {
    pub(in crate::daemon::world) cfg: &'a Config,
    pub(in crate::daemon::world) world: &'a str,
    pub(in crate::daemon::world) world_root: &'a Path,
    pub(in crate::daemon::world) facts: &'a IndexMap<String, ServiceFacts>,
    pub(in crate::daemon::world) env: &'a (dyn Fn(&str) -> Option<String> + Sync),
}

impl Renderer<'_> {
    fn facts(&self) -> Facts<'_> {
        facts_for(self.cfg, self.world, self.world_root, self.facts, self.env)
    }

    /// A resource's rendered `admin_url` (registered as a secret), or `None`
    /// when it has none.
    ///
    /// # Errors
    /// It uses a `${env.NAME}` that is not set.
    pub(in crate::daemon::world) fn admin_url(
        &self,
        service: &str,
        r: &config::Resource,
    ) -> Result<Option<AdminUrl>, ApiError> {
        let Some(t) = &r.admin_url else {
            return Ok(None);
        };
        let url = render_strict(
            t,
            &format!("services.{service}.admin_url"),
            Some(service),
            &self.facts(),
        )?;
        crate::secrets::register_url(&url);
        // Read here, once: every later step takes the parsed URL.
        let url = AdminUrl::new(url);
        if let Some(e) = crate::adapters::catalog::find(&r.adapter) {
            e.check_admin_url(&url).map_err(|why| {
                ApiError::new(crate::secrets::redact_url(
                    &format!("services.{service}: {}: {why}", e.name),
                    Some(url.as_str()),
                ))
                .hint("fix admin_url, or the variables it is rendered from, and run this again")
            })?;
        }
        Ok(Some(url))
    }

    /// A resource's `options` with every string's tokens rendered (each
    /// registered as a secret where its key or a URL in it says so), then
    /// checked as `binky check` checks literal ones.
    ///
    /// # Errors
    /// An option uses a `${env.NAME}` that is not set, or its rendered value is
    /// not what the adapter takes.
    pub(in crate::daemon::world) fn options(
        &self,
        service: &str,
        r: &config::Resource,
    ) -> Result<toml::Table, ApiError> {
        if !r
            .options
            .values()
            .any(crate::config::render::value_has_binky_token)
        {
            return Ok(r.options.clone());
        }
        let fx = self.facts();
        fn walk(
            v: &toml::Value,
            key: &str,
            service: &str,
            fx: &Facts<'_>,
        ) -> Result<toml::Value, ApiError> {
            Ok(match v {
                toml::Value::String(t) => {
                    let text = render_strict(t, key, Some(service), fx)?;
                    let name = key.rsplit('.').next().unwrap_or(key);
                    crate::secrets::register_var(name, &text);
                    toml::Value::String(text)
                }
                toml::Value::Array(a) => toml::Value::Array(
                    a.iter()
                        .enumerate()
                        .map(|(i, x)| walk(x, &format!("{key}[{i}]"), service, fx))
                        .collect::<Result<_, _>>()?,
                ),
                toml::Value::Table(t) => toml::Value::Table(
                    t.iter()
                        .map(|(k, x)| Ok((k.clone(), walk(x, &format!("{key}.{k}"), service, fx)?)))
                        .collect::<Result<_, ApiError>>()?,
                ),
                other => other.clone(),
            })
        }
        let entry = crate::adapters::catalog::find(&r.adapter);
        let mut out = toml::Table::new();
        for (k, v) in &r.options {
            let mut rendered = walk(v, &format!("services.{service}.options.{k}"), service, &fx)?;
            if let Some(entry) = entry
                && crate::config::render::value_has_binky_token(v)
            {
                rendered = entry.typed(k, rendered);
            }
            out.insert(k.clone(), rendered);
        }
        if let Some(entry) = entry {
            entry.check_options(&out).map_err(|e| {
                ApiError::new(format!(
                    "services.{service}.{e}, once its tokens are rendered"
                ))
                .hint("set the variables it is rendered from to a value of that kind")
            })?;
        }
        Ok(out)
    }
}
