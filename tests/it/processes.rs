//! Stopping process groups: every member gone before a verb returns.

use crate::harness::*;
use crate::project::*;

/// A service whose grandchild ignores SIGTERM, holds the service's port and
/// takes a while to die once killed (it frees a large heap first, and the
/// kernel closes a dying process's sockets only after its memory).
const STUBBORN: &str = r#"
import os, signal, socket, sys, time
port = int(sys.argv[1])
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ballast = bytearray(1536 * 1024 * 1024)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    open("grandchild.pid", "w").write(str(os.getpid()))
    while True:
        time.sleep(1)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
while True:
    time.sleep(1)
"#;

#[test]
fn down_returns_only_once_every_process_of_the_group_is_gone() {
    let home = Home::new();
    let toml = format!(
        "{}[services.web]\ncmd = \"exec python3 stubborn.py ${{self.port}}\"\nurl = \"web\"\nhealth = {{ tcp = \"localhost:${{self.port}}\", timeout = \"30s\" }}\nstop_timeout = \"300ms\"\n",
        project_header("stubborn", 2)
    );
    let repo = Repo::with("", &toml, &[("stubborn.py", STUBBORN)]);
    repo.ok(&home, &["up", "x"]);
    let w = &repo.worlds(&home)["x"];
    let port = w["services"][0]["port"].as_u64().unwrap() as u16;
    let wt = std::path::PathBuf::from(w["path"].as_str().unwrap());
    let grandchild: u32 = std::fs::read_to_string(wt.join("grandchild.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    repo.ok(&home, &["down", "x"]);
    // At once: no member left, the port free for the next `up`.
    assert!(!alive(grandchild), "grandchild {grandchild} outlived down");
    let bound = std::net::TcpListener::bind(("127.0.0.1", port));
    assert!(
        bound.is_ok(),
        "port {port} still held after down: {bound:?}"
    );
    drop(bound);
    repo.ok(&home, &["up", "x"]);
    repo.ok(&home, &["remove", "x", "--force"]);
}
