//! **Recorded, not real.** No Qdrant or Elasticsearch/OpenSearch server can
//! be installed on the machines Binky is tested on (none ships in Debian,
//! PyPI, npm or crates.io as something that runs here), so their adapters
//! are tested against recordings: the requests each server's API reference
//! documents, with the answers it documents for them
//! (`tests/recordings/*.json`, each naming its source). A [`Replay`] server
//! answers a request only when it is the next recorded one for its method
//! and path, with the recorded body when one is recorded; anything else is
//! an error the test reports. So these tests hold the adapters to the
//! documented wire, in order, and to reading the documented answers; they
//! prove nothing about a real server's behaviour beyond its documentation.
//! The README's adapter table says so.

use crate::harness::*;
use crate::project::*;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// One recorded exchange.
#[derive(Debug, Clone)]
struct Exchange {
    method: String,
    /// Path and query, as sent.
    path: String,
    /// The JSON body the request must carry, if recorded.
    body: Option<serde_json::Value>,
    /// A header the request must carry (`api-key: …`).
    header: Option<(String, String)>,
    status: u16,
    answer: serde_json::Value,
}

#[derive(Default)]
struct State {
    /// Recorded exchanges not yet answered, in order.
    left: VecDeque<Exchange>,
    /// Requests no recorded exchange matched: `METHOD path (why)`.
    stray: Vec<String>,
}

/// A server that answers from a recording.
struct Replay {
    port: u16,
    state: Arc<Mutex<State>>,
}

impl Replay {
    /// Serves `file` (under `tests/recordings/`), with `{prefix}` in paths,
    /// bodies and answers replaced by `vars`.
    fn start(file: &str, vars: &[(&str, &str)]) -> Replay {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/recordings")
            .join(file);
        let mut text = std::fs::read_to_string(&path).unwrap();
        for (k, v) in vars {
            text = text.replace(&format!("{{{k}}}"), v);
        }
        let rec: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(
            rec["source"].as_str().is_some_and(|s| !s.is_empty()),
            "{file} names no source"
        );
        let left = rec["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| Exchange {
                method: x["request"]["method"].as_str().unwrap().to_owned(),
                path: x["request"]["path"].as_str().unwrap().to_owned(),
                body: x["request"].get("body").cloned(),
                header: x["request"]["header"].as_array().map(|h| {
                    (
                        h[0].as_str().unwrap().to_owned(),
                        h[1].as_str().unwrap().to_owned(),
                    )
                }),
                status: x["response"]["status"].as_u64().unwrap() as u16,
                answer: x["response"]["body"].clone(),
            })
            .collect();
        let state = Arc::new(Mutex::new(State {
            left,
            stray: Vec::new(),
        }));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let st = st.clone();
                std::thread::spawn(move || serve(conn, &st));
            }
        });
        Replay { port, state }
    }

    /// Asserts every recorded exchange was answered and nothing else came.
    fn finished(&self) {
        let st = self.state.lock().unwrap();
        assert!(
            st.stray.is_empty(),
            "requests not in the recording: {:#?}",
            st.stray
        );
        let left: Vec<String> = st
            .left
            .iter()
            .map(|x| format!("{} {}", x.method, x.path))
            .collect();
        assert!(left.is_empty(), "recorded but never asked: {left:#?}");
    }
}

/// Answers the requests on one connection (keep-alive) from the recording.
fn serve(conn: std::net::TcpStream, st: &Mutex<State>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or("").to_owned(),
            parts.next().unwrap_or("").to_owned(),
        );
        let mut headers = Vec::new();
        let mut len = 0;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
                if k == "content-length" {
                    len = v.parse().unwrap_or(0);
                }
                headers.push((k, v));
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let (status, answer) = answer(st, &method, &target, &headers, &body);
        let text = answer.to_string();
        let head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            text.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

fn answer(
    st: &Mutex<State>,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, serde_json::Value) {
    let mut st = st.lock().unwrap();
    let Some(i) = st
        .left
        .iter()
        .position(|x| x.method == method && x.path == target)
    else {
        st.stray.push(format!("{method} {target}"));
        return (599, serde_json::json!({"error": "not in the recording"}));
    };
    let x = st.left[i].clone();
    if let Some(want) = &x.body {
        let got: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        if &got != want {
            st.stray
                .push(format!("{method} {target} (body {got}, recorded {want})"));
            return (599, serde_json::json!({"error": "body differs"}));
        }
    }
    if let Some((k, v)) = &x.header
        && !headers.iter().any(|(hk, hv)| hk == k && hv == v)
    {
        st.stray
            .push(format!("{method} {target} (no `{k}: {v}` header)"));
        return (599, serde_json::json!({"error": "header missing"}));
    }
    st.left.remove(i);
    (x.status, x.answer)
}

#[test]
fn qdrant_makes_the_worlds_collections_and_deletes_exactly_them_by_name_recorded() {
    let home = Home::new();
    let toml = format!(
        "{}[services.vectors]\nadapter = \"qdrant\"\nadmin_url = \"${{env.QDRANT_URL}}\"\noptions = {{ collections = {{ docs = {{ size = 384, distance = \"Cosine\" }}, img = {{ size = 4 }} }} }}\n[services.app]\ncmd = \"echo URL=$V PREFIX=$P > app.txt; exec sleep 600\"\nenv = {{ V = \"${{vectors.url}}\", P = \"${{vectors.prefix}}\" }}\n",
        project_header("rec", 2)
    );
    let repo = Repo::new(&toml);
    let replay = Replay::start("qdrant.json", &[("prefix", "rec_feat-a_")]);
    let url = format!("http://:Key-Hunter2@127.0.0.1:{}", replay.port);
    let env = [("QDRANT_URL", url.as_str())];
    let up = repo.run_with(&home, &["up", "feat-a"], &env);
    assert_eq!(up.code(), 0, "{up}");
    let app = repo.worktree_root().join("feat-a/app.txt");
    assert!(wait_until(std::time::Duration::from_secs(10), || app.exists()));
    let text = std::fs::read_to_string(&app).unwrap();
    assert!(text.contains("PREFIX=rec_feat-a_"), "{text}");
    assert!(text.contains(&format!("URL={url}")), "{text}");
    let out = repo.run_with(&home, &["remove", "feat-a", "--force"], &env);
    assert_eq!(out.code(), 0, "{out}");
    // The key never reaches what Binky prints.
    assert!(!up.to_string().contains("Hunter2") && !out.to_string().contains("Hunter2"));
    replay.finished();
}

#[test]
fn elasticsearch_deletes_the_worlds_indices_and_streams_by_concrete_name_recorded() {
    let home = Home::new();
    let toml = format!(
        "{}[services.search]\nadapter = \"opensearch\"\nadmin_url = \"${{env.ES_URL}}\"\n",
        project_header("rec", 2)
    );
    let repo = Repo::new(&toml);
    let prefix = "rec-feat-a-13fa88-";
    let replay = Replay::start("elasticsearch.json", &[("prefix", prefix)]);
    let url = format!("http://elastic:Hunter2@127.0.0.1:{}", replay.port);
    let env = [("ES_URL", url.as_str())];
    let up = repo.run_with(&home, &["up", "feat-a"], &env);
    assert_eq!(up.code(), 0, "{up}");
    let got = repo.run_with(&home, &["env", "feat-a"], &env).json();
    assert_eq!(got["services"]["search"], format!("{url}/"));
    let out = repo.run_with(&home, &["remove", "feat-a", "--force"], &env);
    assert_eq!(out.code(), 0, "{out}");
    assert!(!up.to_string().contains("Hunter2") && !out.to_string().contains("Hunter2"));
    replay.finished();
}

/// Not a recording: nothing listens, so the error must name the server and
/// what to check, and never the credentials.
#[test]
fn a_dead_qdrant_or_search_server_is_named_without_its_credentials() {
    for (adapter, url, says) in [
        (
            "qdrant",
            "http://:Key-Hunter2@127.0.0.1:1",
            "qdrant at 127.0.0.1:1: GET /collections: cannot connect",
        ),
        (
            "elasticsearch",
            "http://elastic:Hunter2@127.0.0.1:1",
            "elasticsearch at 127.0.0.1:1: GET /_cat/indices/",
        ),
    ] {
        let home = Home::new();
        let toml = format!(
            "{}[services.s]\nadapter = \"{adapter}\"\nadmin_url = \"${{env.S_URL}}\"\n",
            project_header("dead", 2)
        );
        let repo = Repo::new(&toml);
        let out = repo.run_with(&home, &["up", "a"], &[("S_URL", url)]);
        assert_eq!(out.code(), 1, "{out}");
        assert!(out.stderr().contains(says), "wanted {says:?}:\n{out}");
        assert!(out.stderr().contains("check that"), "{out}");
        assert!(!out.to_string().contains("Hunter2"), "{out}");
    }
}
