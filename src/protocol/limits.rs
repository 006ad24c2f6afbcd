//! Bounds on everything a client sends, checked where a request enters the
//! daemon, before anything is stored or looked up: a request past a bound
//! is refused at once with an error naming the field and the bound.
//!
//! The frame itself is bounded first ([`MAX_FRAME`](super::MAX_FRAME)),
//! and an MCP message before it reaches the daemon at all
//! ([`MAX_MCP_MESSAGE`]). Within a frame each field has its own bound, so
//! one oversized value (a 5 MB admission group, a 50 KB world name) can
//! never reach the registry, the queue, an event or a log line.

use super::{ApiError, ClientEnv, Request, WorldRef};

/// Longest world name, bytes: git stores a branch as a file, and locks it
/// as `<name>.lock`, which must fit the longest file name most filesystems
/// hold (255 bytes).
pub const MAX_WORLD_NAME: usize = 250;
/// Longest project path or name, bytes (Linux `PATH_MAX`).
pub const MAX_PATH: usize = 4096;
/// Longest service name, bytes.
pub const MAX_SERVICE_NAME: usize = 255;
/// Most services one `reset` names.
pub const MAX_SERVICES: usize = 256;
/// Longest log cursor, bytes (one the daemon hands out is far shorter).
pub const MAX_CURSOR: usize = 1024;
/// Longest caller identity, bytes.
pub const MAX_CALLER: usize = 64;
/// Most variables in a caller's environment.
pub const MAX_ENV_VARS: usize = 10_000;
/// Longest environment variable name, bytes.
pub const MAX_ENV_NAME: usize = 1024;
/// Longest environment variable, bytes, as `NAME=value` with its closing
/// NUL: Linux's `MAX_ARG_STRLEN`, past which no process could be given it.
pub const MAX_ENV_VALUE: usize = 128 * 1024;
/// Largest MCP message `binky mcp` reads, bytes: a tool call's arguments
/// are names and short options, far below this.
pub const MAX_MCP_MESSAGE: usize = 1 << 20;

fn too_long(what: &str, len: usize, max: usize) -> ApiError {
    ApiError::new(format!(
        "{what} is {len} bytes long; at most {max} are accepted"
    ))
    .hint("nothing was stored; send a shorter value")
}

fn bounded(what: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.len() > max {
        return Err(too_long(what, value.len(), max));
    }
    Ok(())
}

fn world(w: &WorldRef) -> Result<(), ApiError> {
    bounded("the world name", &w.name, MAX_WORLD_NAME)?;
    if let Some(p) = &w.project {
        bounded("the project name", p, MAX_PATH)?;
    }
    if let Some(p) = &w.project_dir {
        bounded("the project folder", p, MAX_PATH)?;
    }
    Ok(())
}

fn env(e: &ClientEnv) -> Result<(), ApiError> {
    if e.0.len() > MAX_ENV_VARS {
        return Err(ApiError::new(format!(
            "the environment holds {} variables; at most {MAX_ENV_VARS} are accepted",
            e.0.len()
        ))
        .hint("nothing was stored; run binky from a smaller environment"));
    }
    for (k, v) in &e.0 {
        bounded("an environment variable's name", k, MAX_ENV_NAME)?;
        // The name is safe to show; the value may be a credential.
        let len = k.len() + 1 + v.len() + 1;
        if len > MAX_ENV_VALUE {
            return Err(ApiError::new(format!(
                "environment variable {} is {len} bytes long as NAME=value; at most {MAX_ENV_VALUE} are accepted",
                crate::output::untrusted(&k.chars().take(64).collect::<String>()),
            ))
            .hint("nothing was stored; unset or shorten it in the shell that runs binky"));
        }
    }
    Ok(())
}

fn up(r: &super::UpRequest) -> Result<(), ApiError> {
    world(&r.world)?;
    if let Some(g) = &r.group {
        // Length first, in bytes, so a huge group is not scanned char by
        // char (64 characters are at most 256 bytes); then the characters,
        // as a world name's.
        if g.len() > crate::slug::MAX_GROUP_LEN * 4 {
            return Err(ApiError::new(format!(
                "the admission group is {} bytes long; a group name is at most {} characters",
                g.len(),
                crate::slug::MAX_GROUP_LEN
            ))
            .hint("nothing was stored; pick a shorter group name"));
        }
        crate::slug::check_group(g).map_err(|e| {
            ApiError::new(e).hint("nothing was stored; pick a group name as the message says")
        })?;
    }
    if let Some(c) = &r.caller {
        bounded("the caller", c, MAX_CALLER)?;
    }
    env(&r.env)
}

impl Request {
    /// Checks every field against its bound.
    ///
    /// # Errors
    /// The first field past its bound, named with its length and the bound
    /// (never its value: it may be a credential, or megabytes).
    pub fn check_bounds(&self) -> Result<(), ApiError> {
        match self {
            Request::Up(r) | Request::Reload(r) => up(r),
            Request::Reset(r) => {
                up(&r.up)?;
                if r.services.len() > MAX_SERVICES {
                    return Err(ApiError::new(format!(
                        "`reset` names {} services; at most {MAX_SERVICES} are accepted",
                        r.services.len()
                    )));
                }
                r.services
                    .iter()
                    .try_for_each(|s| bounded("a service name", s, MAX_SERVICE_NAME))
            }
            Request::Down(w) => world(w),
            Request::Remove {
                world: w, env: e, ..
            }
            | Request::Verify {
                world: w, env: e, ..
            }
            | Request::Env {
                world: w, env: e, ..
            } => {
                world(w)?;
                env(e)
            }
            Request::Gc { env: e, .. } => env(e),
            Request::Locate { world: w, service } => {
                world(w)?;
                bounded("the service name", service, MAX_SERVICE_NAME)
            }
            Request::Logs {
                world: w,
                service,
                cursor,
                ..
            } => {
                world(w)?;
                if let Some(s) = service {
                    bounded("the service name", s, MAX_SERVICE_NAME)?;
                }
                if let Some(c) = cursor {
                    bounded("the cursor", c, MAX_CURSOR)?;
                }
                Ok(())
            }
            Request::Subscribe(s) => {
                if let Some(w) = &s.world {
                    world(w)?;
                }
                if let Some(l) = &s.logs {
                    if let Some(s) = &l.service {
                        bounded("the service name", s, MAX_SERVICE_NAME)?;
                    }
                    if let Some(c) = &l.cursor {
                        bounded("the cursor", c, MAX_CURSOR)?;
                    }
                }
                Ok(())
            }
            Request::Status {
                project: Some(p), ..
            } => bounded("the project name", p, MAX_PATH),
            Request::Ping
            | Request::DaemonStatus
            | Request::Shutdown
            | Request::Status { project: None, .. }
            | Request::Config
            | Request::SetReserve { .. }
            | Request::SetPorts { .. }
            | Request::Metrics
            | Request::Cancel => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::UpRequest;

    fn up_named(name: &str, group: Option<String>) -> Request {
        Request::Up(UpRequest {
            detach: false,
            idle_after: None,
            world: WorldRef {
                project_dir: None,
                project: Some("p".into()),
                name: name.into(),
            },
            group,
            caller: None,
            env: ClientEnv::default(),
            wait: true,
        })
    }

    #[test]
    fn each_bound_holds_at_its_edge_and_refuses_one_past_it() {
        let at = "a".repeat(MAX_WORLD_NAME);
        assert!(up_named(&at, None).check_bounds().is_ok());
        let past = "a".repeat(MAX_WORLD_NAME + 1);
        let e = up_named(&past, None).check_bounds().unwrap_err();
        assert_eq!(
            e.message,
            "the world name is 251 bytes long; at most 250 are accepted"
        );
        let g = "g".repeat(crate::slug::MAX_GROUP_LEN);
        assert!(up_named("w", Some(g.clone())).check_bounds().is_ok());
        let e = up_named("w", Some(format!("{g}g")))
            .check_bounds()
            .unwrap_err();
        assert!(e.message.contains("at most 64 characters"), "{e:?}");
        // Megabytes are refused by length, before any character is read.
        let e = up_named("w", Some("x".repeat(5 << 20)))
            .check_bounds()
            .unwrap_err();
        assert_eq!(
            e.message,
            "the admission group is 5242880 bytes long; a group name is at most 64 characters"
        );
        // A group holds what a world name may.
        assert!(
            up_named("w", Some("a;b".into()))
                .check_bounds()
                .unwrap_err()
                .message
                .contains("group name")
        );
    }

    #[test]
    fn an_environment_value_past_the_bound_is_named_never_shown() {
        let mut r = up_named("w", None);
        let Request::Up(u) = &mut r else {
            unreachable!()
        };
        // `BIG=` and the closing NUL count, as the kernel counts them.
        u.env = ClientEnv(vec![("BIG".into(), "s".repeat(MAX_ENV_VALUE - 5))]);
        assert!(r.check_bounds().is_ok());
        let Request::Up(u) = &mut r else {
            unreachable!()
        };
        u.env = ClientEnv(vec![("BIG".into(), "s".repeat(MAX_ENV_VALUE - 4))]);
        let e = r.check_bounds().unwrap_err();
        assert_eq!(
            e.message,
            format!(
                "environment variable BIG is {} bytes long as NAME=value; at most {MAX_ENV_VALUE} are accepted",
                MAX_ENV_VALUE + 1
            )
        );
        assert!(!e.message.contains("sss"));
    }
}
