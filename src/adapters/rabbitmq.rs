//! `rabbitmq`: a virtual host per world on a RabbitMQ server the user runs,
//! made through its management HTTP API.
//!
//! The vhost is `<project>_<world-slug>`. `admin_url` is the AMQP URL of
//! an account allowed to manage vhosts (default
//! `amqp://guest:guest@127.0.0.1:5672/`, RabbitMQ's own default on
//! loopback); the management API is at port 15672 of the same host, or at
//! `options.management_url`. Provision is `PUT /api/vhosts/{vhost}` and
//! `PUT /api/permissions/{vhost}/{user}` (all rights for the admin user);
//! teardown `DELETE /api/vhosts/{vhost}`, which refuses to act on `/` or on
//! any name that is not a world's. Every vhost in a path or URL is
//! percent-encoded (`/` → `%2F`).
//!
//! Vhost creation is cluster-wide and can be slow; each call waits
//! `options.timeout` (default 30 s) and an error says so.
//!
//! With `options.acl` (on unless set to `false`) each world also gets a
//! user named as its vhost, with configure, write and read on that vhost
//! only and no management tag: `${mq.url}` carries it, so a worker handed
//! another world's URL by mistake is refused instead of taking its tasks.
//! Its password is the one Binky keeps for the slice ([`Slice::secret`]).
//! The user carries the tag [`USER_TAG`], which grants nothing and marks it
//! as Binky's: only such users are reset or deleted.

use super::kit::address::{self, Address, AdminUrl, encode};
use super::kit::users::Found;
use super::kit::{api, names, owner};
use super::{Adapter, AdapterError, Slice};
use crate::http::{Client, Fetched};
use async_trait::async_trait;
use bytes::Bytes;
use std::time::Duration;

/// The account and server when a resource has no `admin_url`.
pub const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/";
/// The management API's port when `options.management_url` is not given.
pub const MANAGEMENT_PORT: u16 = 15672;
/// Default wait for one management call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// RabbitMQ's longest vhost name, bytes.
pub const MAX_VHOST: usize = super::kit::names::VHOST.max_len;

/// The RabbitMQ adapter.
pub struct RabbitMq;

/// The tag that marks a user as a world's, made by Binky. Not one of
/// RabbitMQ's own (`management`, `administrator`…), so it grants nothing.
pub const USER_TAG: &str = "binky-world";

/// Whether the world gets its own user: `options.acl`, on by default.
fn wants_user(slice: &Slice) -> bool {
    super::kit::users::wanted(slice, true)
}

/// A user as `GET /api/users` lists it: `tags` is a list on RabbitMQ 3.9+
/// and a comma-separated string before.
#[derive(serde::Deserialize)]
struct User {
    name: String,
    #[serde(default)]
    tags: serde_json::Value,
}

impl User {
    fn is_binkys(&self) -> bool {
        match &self.tags {
            serde_json::Value::Array(t) => t.iter().any(|t| t.as_str() == Some(USER_TAG)),
            serde_json::Value::String(t) => t.split(',').any(|t| t.trim() == USER_TAG),
            _ => false,
        }
    }
}

/// What an AMQP URL names: where and as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Amqp {
    scheme: String,
    user: String,
    password: String,
    host: String,
    port: u16,
}

impl AdminUrl {
    /// This URL as `amqp[s]://user:password@host[:port][/vhost]`; no user
    /// info means RabbitMQ's own `guest:guest`. `binky check` refuses a
    /// literal `admin_url` by this same reader.
    ///
    /// # Errors
    /// Another scheme, no host, a bad port; never quoting a credential.
    pub(crate) fn amqp(&self) -> Result<Amqp, String> {
        let a = self
            .read(&["amqp", "amqps"], DEFAULT_URL)
            .map_err(|e| format!("admin_url {e}"))?;
        Ok(Amqp::of(a))
    }
}

impl Amqp {
    fn of(a: &Address) -> Amqp {
        let (user, password) = match (a.user(), a.password()) {
            (u, None) if u.is_empty() => ("guest".to_owned(), "guest".to_owned()),
            (u, p) => (u, p.unwrap_or_default()),
        };
        Amqp {
            scheme: a.scheme().to_owned(),
            user,
            password,
            host: a.host(),
            port: a.port_or(5672),
        }
    }
}

/// One management call's parts: the server and the account.
struct Api {
    amqp: Amqp,
    /// `host`, `port` of the management API, and whether it is `https`.
    host: String,
    port: u16,
    tls: bool,
    client: Client,
}

impl Api {
    fn of(slice: &Slice) -> Result<Api, AdapterError> {
        let amqp = slice
            .admin_url_or(DEFAULT_URL)
            .amqp()
            .map_err(|e| AdapterError::new(format!("rabbitmq: {e}")).redacted(slice))?;
        let (host, port, tls) = match slice.options.get("management_url").and_then(|v| v.as_str()) {
            Some(m) => {
                let u = crate::http::parse_url(m).map_err(|e| {
                    AdapterError::new(format!("rabbitmq: options.management_url: {e}"))
                })?;
                (u.host, u.port, u.tls)
            }
            None => (amqp.host.clone(), MANAGEMENT_PORT, false),
        };
        Ok(Api {
            amqp,
            host,
            port,
            tls,
            client: api::client(slice, DEFAULT_TIMEOUT, 1024 * 1024),
        })
    }

    fn server(&self) -> String {
        crate::http::host_header(&self.host, self.port)
    }

    /// `method path` with the admin account; the answer, whatever its
    /// status.
    async fn call(&self, method: &str, path: &str, body: &str) -> Result<Fetched, AdapterError> {
        use base64::Engine as _;
        let auth = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", self.amqp.user, self.amqp.password))
        );
        let url = crate::http::Url {
            tls: self.tls,
            host: self.host.clone(),
            port: self.port,
            authority: self.server(),
            path_and_query: path.to_owned(),
        };
        let mut headers = vec![("Authorization", auth.as_str())];
        if !body.is_empty() {
            headers.push(("Content-Type", "application/json"));
        }
        let req = crate::http::request(method, &url, &headers, Bytes::from(body.to_owned()))
            .map_err(|e| AdapterError::new(format!("rabbitmq: {e}")))?;
        self.client
            .fetch(&url, req)
            .await
            .map_err(|e| {
                api::Exchange {
                    call: &format!(
                        "rabbitmq: the management API at {}, {method} {path}",
                        self.server()
                    ),
                    unreachable: "enable it with `rabbitmq-plugins enable rabbitmq_management`, or set options.management_url",
                    slow: if method == "GET" {
                        "it accepts connections but does not serve them (stuck, or not RabbitMQ)"
                    } else {
                        "vhost changes are cluster-wide and can be slow"
                    },
                }
                .error(&e, self.client.read_timeout)
            })
    }

    /// An answer that is not `ok` as an error naming the call, with what to
    /// do read from RabbitMQ's own reason (it answers 401 for a refused
    /// login and for an account without the tag a call needs alike).
    fn refused(&self, what: &str, f: &Fetched) -> AdapterError {
        let body = f.text_head();
        let user = &self.amqp.user;
        let hint = if body.contains("Not management user") {
            format!(
                "; the account `{user}` may not use the management API: give it the `management` or `administrator` tag (`rabbitmqctl set_user_tags {user} administrator`)"
            )
        } else if body.contains("Not administrator user") {
            format!(
                "; the account `{user}` needs the `administrator` tag to manage vhosts (`rabbitmqctl set_user_tags {user} administrator`)"
            )
        } else if body.contains("only log in via localhost") {
            format!(
                "; RabbitMQ lets `{user}` in from loopback only: use another account, or reach the server on 127.0.0.1"
            )
        } else {
            match f.status.as_u16() {
                401 => format!(
                    "; the user or password in admin_url is not one the server accepts (account `{user}`)"
                ),
                403 => {
                    format!("; the account `{user}` needs the `administrator` tag to manage vhosts")
                }
                _ => String::new(),
            }
        };
        AdapterError::new(format!(
            "rabbitmq at {}: {what} answered {}: {}{hint}",
            self.server(),
            f.status,
            body.trim()
        ))
    }
}

/// Anything the management API lists by name (a vhost).
#[derive(serde::Deserialize)]
struct Named {
    name: String,
}

impl Api {
    /// `GET path`, a JSON list of `what` (`users`, `vhosts`).
    async fn list<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> Result<Vec<T>, AdapterError> {
        let f = self.call("GET", path, "").await?;
        if !f.status.is_success() {
            return Err(self.refused(&format!("listing {what}"), &f));
        }
        serde_json::from_slice(&f.body).map_err(|e| {
            AdapterError::new(format!(
                "rabbitmq at {}: reading {what}: {e}",
                self.server()
            ))
        })
    }

    /// The user named `name`, if there is one.
    async fn user(&self, name: &str) -> Result<Option<User>, AdapterError> {
        let f = self
            .call("GET", &format!("/api/users/{}", encode(name)), "")
            .await?;
        match f.status.as_u16() {
            404 => Ok(None),
            200 => serde_json::from_slice(&f.body).map(Some).map_err(|e| {
                AdapterError::new(format!(
                    "rabbitmq at {}: reading user {name}: {e}",
                    self.server()
                ))
            }),
            _ => Err(self.refused(&format!("looking up user {name}"), &f)),
        }
    }

    /// Whether the world's user is there, and whether it is Binky's (it
    /// carries [`USER_TAG`], given in the same call that made it).
    async fn find_user(&self, slice: &Slice) -> Result<Found, AdapterError> {
        Ok(match self.user(&slice.name).await? {
            None => Found::Missing,
            Some(u) if u.is_binkys() => Found::Binkys,
            Some(_) => Found::Foreign,
        })
    }

    /// The refusal for a user of the world's name that is not Binky's.
    fn foreign(&self, slice: &Slice) -> AdapterError {
        super::kit::users::foreign(
            "rabbitmq",
            &self.server(),
            &format!("a user named {}", slice.name),
            &format!("no `{USER_TAG}` tag"),
        )
    }

    /// Makes the world's user (or resets the password of Binky's own) with
    /// every right on its vhost and none elsewhere.
    async fn ensure_user(&self, slice: &Slice) -> Result<(), AdapterError> {
        let name = &slice.name;
        let password = super::kit::users::password("rabbitmq", slice)?;
        if self.find_user(slice).await? == Found::Foreign {
            return Err(self.foreign(slice));
        }
        // The tag in the same call: the user is never there unmarked.
        let body = serde_json::json!({ "password": password, "tags": USER_TAG }).to_string();
        let f = self
            .call("PUT", &format!("/api/users/{}", encode(name)), &body)
            .await?;
        if !f.status.is_success() {
            return Err(self.refused(&format!("creating user {name}"), &f));
        }
        super::kit::users::made();
        let perms = r#"{"configure":".*","write":".*","read":".*"}"#;
        let path = format!("/api/permissions/{}/{}", encode(name), encode(name));
        let f = self.call("PUT", &path, perms).await?;
        if !f.status.is_success() {
            return Err(self.refused(&format!("granting {name} on its vhost"), &f));
        }
        Ok(())
    }

    /// Deletes the world's user when it is Binky's.
    async fn drop_user(&self, slice: &Slice) -> Result<(), AdapterError> {
        let name = &slice.name;
        if self.find_user(slice).await? != Found::Binkys {
            return Ok(());
        }
        let f = self
            .call("DELETE", &format!("/api/users/{}", encode(name)), "")
            .await?;
        match api::deleted(f.status.as_u16()) {
            Some(_) => Ok(()),
            None => Err(self.refused(&format!("deleting user {name}"), &f)),
        }
    }
}

/// Refuses a vhost name no world has (`/`, `production`): Binky acts
/// only on its own.
fn check_ours(slice: &Slice) -> Result<(), AdapterError> {
    owner::check_name(
        "rabbitmq",
        &slice.admin_url_or(DEFAULT_URL).to_string(),
        &names::VHOST,
        &slice.name,
    )
}

#[async_trait]
impl Adapter for RabbitMq {
    fn name(&self) -> &str {
        "rabbitmq"
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        check_ours(slice)?;
        let api = Api::of(slice)?;
        // The management API may answer while nothing serves AMQP where
        // admin_url says (a wrong port): the world would get a dead URL.
        let amqp = crate::http::host_header(&api.amqp.host, api.amqp.port);
        if let Err(e) =
            crate::http::dial(&api.amqp.host, api.amqp.port, Duration::from_secs(5)).await
        {
            return Err(AdapterError::environmental(format!(
                "rabbitmq: nothing answers AMQP at {amqp} (admin_url): {e}; check its host and port"
            )));
        }
        let vhost = encode(&slice.name);
        if self.exists(slice).await? {
            return Err(AdapterError::new(format!(
                "rabbitmq: the vhost {} already exists",
                slice.name
            )));
        }
        let body = r#"{"description":"a Binky world"}"#;
        let f = api
            .call("PUT", &format!("/api/vhosts/{vhost}"), body)
            .await?;
        if !f.status.is_success() {
            return Err(api.refused(&format!("creating vhost {}", slice.name), &f));
        }
        let perms = r#"{"configure":".*","write":".*","read":".*"}"#;
        let path = format!("/api/permissions/{vhost}/{}", encode(&api.amqp.user));
        let f = api.call("PUT", &path, perms).await?;
        if !f.status.is_success() {
            let e = api.refused(&format!("granting {} on {}", api.amqp.user, slice.name), &f);
            let _ = api
                .call("DELETE", &format!("/api/vhosts/{vhost}"), "")
                .await;
            return Err(e);
        }
        if wants_user(slice)
            && let Err(e) = api.ensure_user(slice).await
        {
            let _ = api.drop_user(slice).await;
            let _ = api
                .call("DELETE", &format!("/api/vhosts/{vhost}"), "")
                .await;
            return Err(e);
        }
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        let api = Api::of(slice)?;
        let a = &api.amqp;
        // Looked up, never made: a world made before it had a user (or with
        // `acl = false`) keeps the admin's address until `up` or `reload`
        // gives it one (`complete`).
        let found = if wants_user(slice) {
            api.find_user(slice).await?
        } else {
            Found::Missing
        };
        let (user, password) = match found {
            Found::Binkys => (
                slice.name.clone(),
                super::kit::users::password("rabbitmq", slice)?.to_owned(),
            ),
            Found::Missing => (a.user.clone(), a.password.clone()),
            Found::Foreign => return Err(api.foreign(slice)),
        };
        Ok(format!(
            "{}://{}:{}@{}/{}",
            a.scheme,
            encode(&user),
            encode(&password),
            address::host_port(&a.host, a.port),
            encode(&slice.name)
        ))
    }

    /// A world made before it had a user (or with `acl = false`) gets
    /// one; Binky's own has its password set to the one Binky keeps.
    async fn complete(&self, slice: &Slice) -> Result<(), AdapterError> {
        if !wants_user(slice) {
            return Ok(());
        }
        check_ours(slice)?;
        Api::of(slice)?.ensure_user(slice).await
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        check_ours(slice)?;
        let api = Api::of(slice)?;
        let f = api
            .call(
                "DELETE",
                &format!("/api/vhosts/{}", encode(&slice.name)),
                "",
            )
            .await?;
        match api::deleted(f.status.as_u16()) {
            Some(_) => api.drop_user(slice).await,
            None => Err(api.refused(&format!("deleting vhost {}", slice.name), &f)),
        }
    }

    async fn orphan_users(&self, server: &Slice) -> Result<Vec<String>, AdapterError> {
        let api = Api::of(server)?;
        let users: Vec<User> = api.list("/api/users", "users").await?;
        // One listing of the vhosts, not a lookup per user.
        let vhosts: std::collections::HashSet<String> = api
            .list::<Named>("/api/vhosts", "vhosts")
            .await?
            .into_iter()
            .map(|v| v.name)
            .collect();
        Ok(users
            .into_iter()
            .filter(|u| u.is_binkys() && !vhosts.contains(&u.name))
            .map(|u| u.name)
            .collect())
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let api = Api::of(slice)?;
        let f = api
            .call("GET", &format!("/api/vhosts/{}", encode(&slice.name)), "")
            .await?;
        match f.status.as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(api.refused(&format!("looking up vhost {}", slice.name), &f)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vhosts_are_percent_encoded_everywhere() {
        assert_eq!(encode("/"), "%2F");
        assert_eq!(encode("shop_feat-a"), "shop_feat-a");
        assert_eq!(encode("a b/c%"), "a%20b%2Fc%25");
    }

    #[test]
    fn amqp_urls_parse_with_defaults() {
        let a = AdminUrl::new("amqp://admin:p%40ss@rmq.local/")
            .amqp()
            .unwrap();
        assert_eq!(
            (
                a.user.as_str(),
                a.password.as_str(),
                a.host.as_str(),
                a.port
            ),
            ("admin", "p@ss", "rmq.local", 5672)
        );
        let a = AdminUrl::new("amqps://u:p@[::1]:5999/%2F").amqp().unwrap();
        assert_eq!(
            (a.host.as_str(), a.port, a.scheme.as_str()),
            ("::1", 5999, "amqps")
        );
        let a = AdminUrl::new("amqp://127.0.0.1").amqp().unwrap();
        assert_eq!((a.user.as_str(), a.password.as_str()), ("guest", "guest"));
        assert!(AdminUrl::new("http://x").amqp().is_err());
        assert!(AdminUrl::new("amqp://u:p@h:notaport/").amqp().is_err());
    }

    #[test]
    fn only_binkys_own_vhosts_are_touched() {
        let s = super::super::test_slice;
        assert!(check_ours(&s("/")).is_err());
        assert!(check_ours(&s("")).is_err());
        assert!(check_ours(&s("production")).is_err());
        assert!(check_ours(&s("shop_feat-a")).is_ok());
    }
}
