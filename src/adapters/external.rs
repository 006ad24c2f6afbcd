//! External adapters: an executable `binky-adapter-<name>` on `PATH`, run
//! once per verb.
//!
//! The protocol (version 1), which [`crate::adapter_sdk`] implements for Rust
//! authors and `examples/adapters/filestore.py` for Python ones:
//!
//! - argv\[1\] is the verb: `provision`, `resolve`, `teardown`, `exists`,
//!   `capabilities` or `clone`.
//! - stdin is one JSON object: [`Request`] — `{"slice": "...", "project":
//!   "...", "config": {...}, "data_dir": "...", "template": "..."}`, where
//!   `config` is the resource's `options` table plus its rendered
//!   `admin_url`, and `template` is set for `clone` only.
//! - stdout is one JSON object: [`Response`] — `{"ok": true}` plus
//!   `"address"` for `resolve`, `"exists"` for `exists` and
//!   `"capabilities": ["clone"]` for `capabilities`; or `{"ok": false,
//!   "error": "...", "environmental": false}`.
//! - Every run has a timeout (`options.timeout`, default 60 s). A non-zero
//!   exit, a timeout or output that is not that JSON is an error quoting the
//!   tail of the adapter's stderr.

use super::catalog::Facts;
use super::{Adapter, AdapterError, Capabilities, Cloned, Slice, find_executable, stderr_tail};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// The prefix of external adapter executables.
pub const PREFIX: &str = "binky-adapter-";

/// How long one verb may run when `options.timeout` does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// What an external adapter reads on stdin.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// The slice's name.
    pub slice: String,
    /// The project it belongs to.
    #[serde(default)]
    pub project: String,
    /// The resource's `options`, plus `admin_url` when one is set.
    #[serde(default)]
    pub config: serde_json::Map<String, serde_json::Value>,
    /// A folder the adapter may keep files in.
    #[serde(default)]
    pub data_dir: String,
    /// For `clone`: the template slice to copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
}

/// What an external adapter writes on stdout.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Response {
    /// Whether the verb succeeded.
    pub ok: bool,
    /// `resolve`: the slice's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `exists`: whether the slice exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
    /// `capabilities`: e.g. `["clone"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    /// When `ok` is false: what went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When `ok` is false: the failure is environmental (a clone may fall
    /// back to provision + migrate + seed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub environmental: bool,
}

/// An adapter backed by an executable.
pub struct External {
    name: String,
    exe: PathBuf,
}

impl External {
    /// Finds `binky-adapter-<name>` on `search_path` (else the daemon's
    /// `PATH`).
    pub fn find(name: &str, search_path: Option<&std::ffi::OsStr>) -> Option<External> {
        find_executable(&[&format!("{PREFIX}{name}")], search_path).map(|exe| External {
            name: name.to_owned(),
            exe,
        })
    }

    /// Runs one verb and checks the reply's shape. Errors never quote the
    /// admin URL or its password, whatever the adapter printed.
    async fn call(
        &self,
        verb: &str,
        slice: &Slice,
        template: Option<&Slice>,
    ) -> Result<Response, AdapterError> {
        self.call_raw(verb, slice, template)
            .await
            .map_err(|e| e.redacted(slice))
    }

    async fn call_raw(
        &self,
        verb: &str,
        slice: &Slice,
        template: Option<&Slice>,
    ) -> Result<Response, AdapterError> {
        use tokio::io::AsyncWriteExt;
        let mut config = serde_json::Map::new();
        for (k, v) in &slice.options {
            if let Ok(j) = serde_json::to_value(v) {
                config.insert(k.clone(), j);
            }
        }
        if let Some(a) = &slice.admin_url {
            config.insert("admin_url".into(), a.as_str().into());
        }
        let timeout = slice.timeout(DEFAULT_TIMEOUT);
        let req = Request {
            slice: slice.name.clone(),
            project: slice.project.clone(),
            config,
            data_dir: slice.data_dir.display().to_string(),
            template: template.map(|t| t.name.clone()),
        };
        let input = serde_json::to_vec(&req).expect("a request serialises");
        let who = format!("adapter {} ({})", self.name, self.exe.display());
        let _ = std::fs::create_dir_all(&slice.data_dir);
        let mut child = crate::platform::command(&self.exe)
            .arg(verb)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| AdapterError::new(format!("{who}: cannot run: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            // An adapter that exits without reading is judged by its reply.
            let _ = stdin.write_all(&input).await;
        }
        let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(r) => r.map_err(|e| AdapterError::new(format!("{who}: {e}")))?,
            Err(_) => {
                return Err(AdapterError::new(format!(
                    "{who}: `{verb}` did not finish within {} (set options.timeout to allow longer)",
                    humantime::format_duration(timeout)
                )));
            }
        };
        let tail = stderr_tail(&out.stderr, 10);
        // The last stderr line stays on the first line of the message (the
        // one `binky status` shows); the rest of the tail follows.
        let quoted = match tail.rsplit_once('\n') {
            None if tail.is_empty() => String::new(),
            None => format!(": {tail}"),
            Some((_, last)) => format!(": {last}\n  its stderr ends:\n{tail}"),
        };
        if !out.status.success() {
            return Err(AdapterError::new(format!(
                "{who}: `{verb}` exited with {}{quoted}",
                out.status
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let reply: Response = serde_json::from_str(text.trim()).map_err(|e| {
            let shown: String = text.trim().chars().take(200).collect();
            AdapterError::new(format!(
                "{who}: `{verb}` did not print one JSON object like {{\"ok\": true}} ({e}); it printed {shown:?}{quoted}"
            ))
        })?;
        if !reply.ok {
            let message = format!(
                "{who}: `{verb}` failed: {}",
                reply.error.as_deref().unwrap_or("(no error given)")
            );
            return Err(if reply.environmental {
                AdapterError::environmental(message)
            } else {
                AdapterError::new(message)
            });
        }
        Ok(reply)
    }
}

#[async_trait]
impl Adapter for External {
    fn name(&self) -> &str {
        &self.name
    }

    /// External adapters report capabilities through the `capabilities`
    /// verb; the synchronous answer here is "clone", and a `clone` an
    /// adapter does not support fails environmentally, falling back to
    /// provision + migrate + seed.
    fn facts(&self) -> Facts {
        Facts {
            capabilities: Capabilities {
                clone: true,
                spares: false,
            },
            ..Facts::SERVER
        }
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        self.call("provision", slice, None).await.map(|_| ())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        let r = self.call("resolve", slice, None).await?;
        r.address.ok_or_else(|| {
            AdapterError::new(format!(
                "adapter {}: `resolve` replied without an \"address\"",
                self.name
            ))
        })
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        self.call("teardown", slice, None).await.map(|_| ())
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let r = self.call("exists", slice, None).await?;
        r.exists.ok_or_else(|| {
            AdapterError::new(format!(
                "adapter {}: `exists` replied without \"exists\": true/false",
                self.name
            ))
        })
    }

    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<Cloned, AdapterError> {
        let caps = self.call("capabilities", slice, None).await?;
        if !caps
            .capabilities
            .unwrap_or_default()
            .iter()
            .any(|c| c == "clone")
        {
            return Err(AdapterError::environmental(format!(
                "adapter {} does not list the clone capability",
                self.name
            )));
        }
        self.call("clone", slice, Some(template))
            .await
            .map(|_| Cloned::said(format!("{} clone", self.name)))
    }
}
