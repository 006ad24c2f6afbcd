//! HTTPS through Caddy: a supervised child serving `tls internal` (a local
//! CA) on the HTTPS port, reverse-proxying to Binky's own proxy.
//!
//! Started on demand, when a project with `https = true` comes up; stopped
//! with the daemon. Without `caddy` on PATH, HTTPS degrades to HTTP: it never
//! breaks `up`.

use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::Mutex;

/// The Caddy child, if running.
#[derive(Default)]
pub struct Caddy {
    child: Mutex<Option<tokio::process::Child>>,
}

/// `caddy` on PATH.
pub fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("caddy"))
        .find(|p| p.is_file())
}

/// The local CA's root certificate, to trust in clients.
pub fn root_ca(dir: &Path) -> PathBuf {
    dir.join("data/pki/authorities/local/root.crt")
}

fn caddyfile(dir: &Path, https_port: u16, http_port: u16, proxy_port: u16) -> String {
    // On-demand certificates only for names Binky routes for an https
    // world (Caddy asks the proxy first; see proxy::TLS_ASK_PATH), and at
    // most a burst of them a minute: the local CA must not sign a name a
    // client merely claims (`-servername www.google.com`).
    format!(
        "{{
\tadmin off
\tauto_https disable_redirects
\tskip_install_trust
\tstorage file_system {data}
\thttp_port {http_port}
\thttps_port {https_port}
\ton_demand_tls {{
\t\task http://127.0.0.1:{proxy_port}{ask}
\t\tinterval 1m
\t\tburst 20
\t}}
}}

https:// {{
\tbind 127.0.0.1 ::1
\ttls internal {{
\t\ton_demand
\t}}
\treverse_proxy 127.0.0.1:{proxy_port} {{
\t\theader_up X-Forwarded-Proto https
\t}}
}}
",
        data = dir.join("data").display(),
        ask = super::TLS_ASK_PATH,
    )
}

/// Caddy's stdout and stderr: through Binky's log writer, so caddy.log
/// rolls by size and follows its name like every other log (appended to
/// directly when Binky's own executable cannot be found).
fn log_stdio(log: &Path) -> Result<(std::process::Stdio, std::process::Stdio), String> {
    match crate::platform::self_exe() {
        Ok(binky) => {
            let (w, _writer) =
                crate::supervisor::logs::spawn_writer(&binky, log).map_err(|e| e.to_string())?;
            let w2 = w.try_clone().map_err(|e| e.to_string())?;
            Ok((w.into(), w2.into()))
        }
        Err(_) => {
            let f = crate::supervisor::logs::open_append(log).map_err(|e| e.to_string())?;
            let f2 = f.try_clone().map_err(|e| e.to_string())?;
            Ok((f.into(), f2.into()))
        }
    }
}

impl Caddy {
    /// Starts Caddy unless it runs. `dir` holds its config, data (the CA) and
    /// log. Waits (bounded) until the HTTPS port answers.
    ///
    /// # Errors
    /// Caddy is not on PATH, or did not come up; the message says what to do.
    pub async fn ensure(
        &self,
        dir: &Path,
        https_port: u16,
        http_port: u16,
        proxy_port: u16,
    ) -> Result<(), String> {
        let mut guard = self.child.lock().await;
        if let Some(c) = guard.as_mut()
            && c.try_wait().ok().flatten().is_none()
        {
            return Ok(());
        }
        let exe = find()
            .ok_or("caddy is not on PATH; install it (Debian: apt-get install caddy) for HTTPS")?;
        std::fs::create_dir_all(dir.join("data")).map_err(|e| e.to_string())?;
        let file = dir.join("Caddyfile");
        // By rename: a link planted at the name is replaced, not written through.
        crate::platform::write_replacing(
            &file,
            caddyfile(dir, https_port, http_port, proxy_port).as_bytes(),
        )
        .map_err(|e| e.to_string())?;
        let (out, err) = log_stdio(&dir.join("caddy.log"))?;
        let mut child = crate::platform::command(exe)
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&file)
            .env("XDG_DATA_HOME", dir.join("data"))
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .env("HOME", dir)
            // How a later daemon of this BINKY_HOME recognises a Caddy an
            // earlier one left running (see daemon reconcile).
            .env("BINKY_CADDY", "1")
            .env(crate::paths::HOME_ENV, dir.parent().unwrap_or(dir))
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start caddy: {e}"))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", https_port))
                .await
                .is_ok()
            {
                break;
            }
            if let Ok(Some(st)) = child.try_wait() {
                return Err(format!(
                    "caddy exited ({st}); see {}",
                    dir.join("caddy.log").display()
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = child.kill().await;
                return Err(format!(
                    "caddy did not listen on {https_port} within 10 s; see {}",
                    dir.join("caddy.log").display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        *guard = Some(child);
        Ok(())
    }

    /// Whether Caddy runs now.
    pub async fn running(&self) -> bool {
        let mut guard = self.child.lock().await;
        guard
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}
