//! Write an external adapter in Rust: implement [`Adapter`] and call
//! [`run`] from `main`. The binary, named `binky-adapter-<name>` and put on
//! `PATH`, is then usable as `adapter = "<name>"` in binky.toml.
//!
//! ```no_run
//! use binky::adapter_sdk::{Adapter, AdapterError, Slice, async_trait};
//!
//! struct Noop;
//!
//! #[async_trait]
//! impl Adapter for Noop {
//!     fn name(&self) -> &str { "noop" }
//!     async fn provision(&self, _: &Slice) -> Result<(), AdapterError> { Ok(()) }
//!     async fn resolve(&self, s: &Slice) -> Result<String, AdapterError> {
//!         Ok(format!("noop://{}", s.name))
//!     }
//!     async fn teardown(&self, _: &Slice) -> Result<(), AdapterError> { Ok(()) }
//!     async fn exists(&self, _: &Slice) -> Result<bool, AdapterError> { Ok(false) }
//! }
//!
//! fn main() { binky::adapter_sdk::run(Noop) }
//! ```
//!
//! The wire protocol is described in [`crate::adapters::external`].

pub use crate::adapters::catalog::Facts;
pub use crate::adapters::external::{Request, Response};
pub use crate::adapters::{Adapter, AdapterError, Capabilities, Cloned, Slice};
pub use async_trait::async_trait;

use std::io::{Read, Write};

/// Builds the [`Slice`] a request describes.
pub fn slice_of(req: &Request, name: &str) -> Slice {
    let mut options = toml::Table::new();
    let mut admin_url = None;
    for (k, v) in &req.config {
        if k == "admin_url" {
            admin_url = v.as_str().map(crate::address::AdminUrl::new);
        } else if let Ok(t) = serde_json::from_value::<toml::Value>(v.clone()) {
            options.insert(k.clone(), t);
        }
    }
    Slice {
        name: name.to_owned(),
        project: req.project.clone(),
        admin_url,
        options,
        data_dir: req.data_dir.clone().into(),
        search_path: None,
        secret: None,
    }
}

/// Carries out one verb; errors become `{"ok": false, ...}` replies.
pub async fn handle<A: Adapter + ?Sized>(adapter: &A, verb: &str, req: &Request) -> Response {
    let slice = slice_of(req, &req.slice);
    let fail = |e: AdapterError| Response {
        ok: false,
        environmental: e.is_environmental(),
        error: Some(e.message),
        ..Response::default()
    };
    let done = Response {
        ok: true,
        ..Response::default()
    };
    match verb {
        "provision" => adapter.provision(&slice).await.map_or_else(fail, |_| done),
        "teardown" => adapter.teardown(&slice).await.map_or_else(fail, |_| done),
        "resolve" => adapter
            .resolve(&slice)
            .await
            .map_or_else(fail, |a| Response {
                address: Some(a),
                ..done
            }),
        "exists" => adapter
            .exists(&slice)
            .await
            .map_or_else(fail, |e| Response {
                exists: Some(e),
                ..done
            }),
        "capabilities" => Response {
            capabilities: Some(if adapter.facts().capabilities.clone {
                vec!["clone".into()]
            } else {
                Vec::new()
            }),
            ..done
        },
        "clone" => match &req.template {
            None => fail(AdapterError::new("clone needs \"template\" in the request")),
            Some(t) => adapter
                .clone_slice(&slice_of(req, t), &slice)
                .await
                .map_or_else(fail, |_| done),
        },
        other => fail(AdapterError::new(format!(
            "unknown verb `{other}`; expected provision, resolve, teardown, exists, capabilities or clone"
        ))),
    }
}

/// The whole `main` of an external adapter: reads the verb from argv and the
/// request from stdin, prints the reply on stdout, exits 0 (2 on a request
/// it cannot read).
pub fn run<A: Adapter>(adapter: A) -> ! {
    let verb = std::env::args().nth(1).unwrap_or_default();
    let mut input = String::new();
    let reply = match std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_str::<Request>(&input).map_err(|e| e.to_string()))
    {
        Ok(req) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            rt.block_on(handle(&adapter, &verb, &req))
        }
        Err(e) => {
            eprintln!("binky adapter: cannot read the request on stdin: {e}");
            std::process::exit(2);
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, &reply);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
    std::process::exit(0)
}
