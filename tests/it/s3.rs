//! The `s3` adapter (and its `minio` name) against a real S3-protocol
//! server: moto in server mode (PyPI), started by the test on a port of its
//! own.

use crate::harness::*;
use crate::project::*;
use std::time::Duration;

/// A moto S3 server for one test, stopped when dropped.
struct Moto {
    child: std::process::Child,
    port: u16,
}

impl Moto {
    fn start() -> Option<Moto> {
        let ok = std::process::Command::new("python3")
            .args(["-c", "import moto.server, flask"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return None;
        }
        let port = free_port();
        let child = std::process::Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let up = wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "moto did not listen on {port}");
        Some(Moto { child, port })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `method url [body]` with urllib (moto takes unsigned requests); the
/// status, then the body.
const HTTP: &str = r#"
import sys, urllib.request
method, url = sys.argv[1], sys.argv[2]
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
req = urllib.request.Request(url, data=data, method=method)
# Not urllib's form default: moto reads a form body as a browser upload.
req.add_header("Content-Type", "application/xml" if "?" in url else "application/octet-stream")
# moto wants an authorization header on object writes and checks no more.
req.add_header("Authorization", "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0")
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"#;

fn http(method: &str, url: &str, body: Option<&str>) -> (u16, String) {
    let mut args = vec![method, url];
    args.extend(body);
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(HTTP)
        .args(&args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, rest) = text.split_once('\n').unwrap_or((&text, ""));
    (code.trim().parse().unwrap_or(0), rest.to_owned())
}

#[test]
fn s3_buckets_follow_the_rules_isolate_worlds_and_empty_every_version() {
    let Some(moto) = Moto::start() else {
        skip("no moto server (pip install 'moto[server]')");
        return;
    };
    let home = Home::new();
    let toml = format!(
        "{}[services.store]\nadapter = \"minio\"\nadmin_url = \"${{env.S3_URL}}\"\n[services.app]\ncmd = \"echo ${{store.bucket}} > bucket.txt; exec sleep 600\"\ndepends_on = [\"store\"]\n",
        project_header("shop", 2)
    );
    let repo = Repo::new(&toml);
    let admin = format!("http://AKIAEXAMPLE:Hunter2Secret@127.0.0.1:{}", moto.port);
    let run = |args: &[&str]| {
        let out = Out(repo
            .cmd(&home, args)
            .env("S3_URL", &admin)
            .output()
            .unwrap());
        assert_eq!(out.code(), 0, "{args:?}: {out}");
        assert!(!out.to_string().contains("Hunter2Secret"), "{out}");
        out
    };
    // Case A3, a plain name, and a 150-character branch.
    let long = format!("feature/{}", "Very-Long-Branch-Name-".repeat(7));
    let worlds = ["feature/Login-Page", "feat-a", long.as_str()];
    let mut buckets = Vec::new();
    for w in worlds {
        run(&["up", w]);
        let url = run(&["env", w]).json()["services"]["store"]
            .as_str()
            .unwrap()
            .to_owned();
        let bucket = url
            .strip_prefix(&format!("{}/", moto.url()))
            .unwrap_or_else(|| panic!("{url}"))
            .to_owned();
        assert!((3..=63).contains(&bucket.len()), "{bucket}");
        assert!(
            bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{bucket}"
        );
        assert!(
            !bucket.starts_with('-') && !bucket.ends_with('-'),
            "{bucket}"
        );
        // The server has it.
        assert_eq!(http("HEAD", &url, None).0, 200, "{bucket}");
        buckets.push(bucket);
    }
    assert!(
        buckets[0].starts_with("shop-feature-login-page"),
        "{buckets:?}"
    );
    // ${store.bucket} reached the process.
    let wt = std::path::PathBuf::from(repo.worlds(&home)[worlds[1]]["path"].as_str().unwrap());
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(wt.join("bucket.txt")).is_ok_and(|b| b.trim() == buckets[1])
    }));
    let obj = |b: &str, k: &str| format!("{}/{b}/{k}", moto.url());
    // One world's object is not another's.
    assert_eq!(http("PUT", &obj(&buckets[1], "a.txt"), Some("one")).0, 200);
    assert_eq!(http("GET", &obj(&buckets[2], "a.txt"), None).0, 404);
    // Versioning on: two versions and a delete marker, all of which go.
    let versioning = "<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Status>Enabled</Status></VersioningConfiguration>";
    let b1 = format!("{}/{}", moto.url(), buckets[1]);
    assert_eq!(
        http("PUT", &format!("{b1}?versioning"), Some(versioning)).0,
        200
    );
    for body in ["v1", "v2"] {
        assert_eq!(http("PUT", &obj(&buckets[1], "v.txt"), Some(body)).0, 200);
    }
    assert_eq!(http("DELETE", &obj(&buckets[1], "v.txt"), None).0, 204);
    // More objects than one page of a listing (1,000), over one
    // connection so it takes seconds.
    let bulk = r#"
import sys, http.client
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
for i in range(1100):
    c.request("PUT", f"/{sys.argv[2]}/bulk/{i}", body=b"x", headers={"Content-Type": "application/octet-stream", "Authorization": "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0"})
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
"#;
    let put = std::process::Command::new("python3")
        .args(["-c", bulk, &moto.port.to_string(), &buckets[1]])
        .output()
        .unwrap();
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let (_, versions) = http("GET", &format!("{b1}?versions&prefix=v.txt"), None);
    assert_eq!(
        versions.matches("<DeleteMarker>").count(),
        1,
        "one delete marker"
    );
    assert_eq!(versions.matches("<Version>").count(), 2, "two versions");
    let rm = run(&["remove", "feat-a", "--force"]);
    assert!(!rm.stderr().contains("teardown"), "{rm}");
    assert_eq!(http("HEAD", &b1, None).0, 404, "{} left behind", buckets[1]);
    // The others stay.
    for b in [&buckets[0], &buckets[2]] {
        assert_eq!(
            http("HEAD", &format!("{}/{b}", moto.url()), None).0,
            200,
            "{b}"
        );
    }
    // gc sweeps a bucket a crash left half-made.
    let names = || {
        let (_, list) = http("GET", &format!("{}/", moto.url()), None);
        list.split("<Name>")
            .skip(1)
            .filter_map(|n| n.split_once("</Name>").map(|(n, _)| n.to_owned()))
            .collect::<Vec<_>>()
    };
    let before = names();
    up_then_crash_removing(&repo, &home, "ghost", &[("S3_URL", &admin)]);
    let made: Vec<String> = names()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert_eq!(made.len(), 1, "the crash made one bucket: {made:?}");
    let ghost = format!("{}/{}", moto.url(), made[0]);
    assert_eq!(http("PUT", &format!("{ghost}/k"), Some("x")).0, 200);
    assert!(run(&["gc"]).stdout().contains("swept"));
    assert_eq!(http("HEAD", &ghost, None).0, 404);
    run(&["remove", worlds[0], "--force"]);
    run(&["remove", worlds[2], "--force"]);
    let (_, list) = http("GET", &format!("{}/", moto.url()), None);
    for b in &buckets {
        assert!(
            !list.contains(&format!("<Name>{b}</Name>")),
            "{b} left: {list}"
        );
    }
}

#[test]
fn a_dead_s3_endpoint_is_named_never_the_secret() {
    let home = Home::new();
    let toml = format!(
        "{}[services.store]\nadapter = \"s3\"\nadmin_url = \"${{env.S3_URL}}\"\n",
        project_header("s3dead", 2)
    );
    let repo = Repo::new(&toml);
    let out = Out(repo
        .cmd(&home, &["up", "a"])
        .env("S3_URL", "http://AKIAEXAMPLE:Hunter2Secret@127.0.0.1:1")
        .output()
        .unwrap());
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("127.0.0.1:1"), "{out}");
    assert!(out.stderr().contains("cannot connect"), "{out}");
    assert!(!out.to_string().contains("Hunter2Secret"), "{out}");
}

/// Issue: an S3 endpoint that never answers got "no answer in time", no
/// hint, and no way to wait less (`options.timeout` was refused for s3).
#[test]
fn a_silent_s3_endpoint_times_out_as_options_timeout_says_with_a_hint() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let home = Home::new();
    let toml = format!(
        "{}[services.store]\nadapter = \"s3\"\nadmin_url = \"${{env.S3_URL}}\"\noptions = {{ timeout = \"1s\" }}\n",
        project_header("s3silent", 2)
    );
    let repo = Repo::new(&toml);
    assert_eq!(
        repo.run(&home, &["check"]).code(),
        0,
        "options.timeout is an s3 option"
    );
    let url = format!("http://AKIAEXAMPLE:Hunter2Secret@127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let out = repo.run_with(&home, &["up", "a"], &[("S3_URL", &url)]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("no answer within 1s")
            && out
                .stderr()
                .contains("raise options.timeout if it is only slow"),
        "{out}"
    );
    // Bounded by the option, not the 30 s default (generous for a slow
    // machine: one call, plus the world's own steps).
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(!out.to_string().contains("Hunter2Secret"), "{out}");
    drop(silent);
}

#[test]
fn a_teardown_that_fails_leaves_the_slices_already_gone_shown_as_stopped() {
    let Some(moto) = Moto::start() else {
        skip("no moto server (pip install 'moto[server]')");
        return;
    };
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\n[services.store]\nadapter = \"s3\"\nadmin_url = \"${{env.S3_URL}}\"\n",
        project_header("s3half", 2)
    );
    let repo = Repo::new(&toml);
    let admin = format!("http://AKIAEXAMPLE:Hunter2Secret@127.0.0.1:{}", moto.port);
    let up = Out(repo
        .cmd(&home, &["up", "w"])
        .env("S3_URL", &admin)
        .output()
        .unwrap());
    assert_eq!(up.code(), 0, "{up}");
    drop(moto);
    let rm = Out(repo
        .cmd(&home, &["remove", "w"])
        .env("S3_URL", &admin)
        .output()
        .unwrap());
    assert_eq!(rm.code(), 1, "{rm}");
    let w = &repo.worlds(&home)["w"];
    assert_eq!(w["state"], "failed", "{w}");
    let db = w["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "db")
        .unwrap();
    // Slices are torn down in the config's order: db's went before the
    // dead endpoint stopped the teardown, and status must say so.
    assert!(!home.file("slices/sqlite/s3half_w.sqlite3").exists());
    assert_eq!(db["state"], "stopped", "{w}");
    // --force removes the world and says which slice is left for gc,
    // not that every slice was released.
    let forced = Out(repo
        .cmd(&home, &["remove", "w", "--force"])
        .env("S3_URL", &admin)
        .output()
        .unwrap());
    assert_eq!(forced.code(), 0, "{forced}");
    assert!(!forced.stdout().contains("slices,"), "{forced}");
    assert!(
        forced.stdout().contains("left for `binky gc`: s3half-w-"),
        "{forced}"
    );
}

#[test]
fn two_worlds_brought_up_at_once_get_a_bucket_each() {
    let Some(moto) = Moto::start() else {
        skip("no moto server (pip install 'moto[server]')");
        return;
    };
    let home = Home::new();
    let toml = format!(
        "{}[services.store]\nadapter = \"s3\"\nadmin_url = \"${{env.S3_URL}}\"\n",
        project_header("s3c", 4)
    );
    let repo = Repo::new(&toml);
    let admin = format!("http://AKIAEXAMPLE:Hunter2Secret@127.0.0.1:{}", moto.port);
    home.ok(&["daemon", "start"]);
    up_at_once(&repo, &home, &["one", "two"], &[("S3_URL", &admin)]);
    let (_, list) = http("GET", &format!("{}/", moto.url()), None);
    for w in ["one", "two"] {
        let url = Out(repo
            .cmd(&home, &["env", w])
            .env("S3_URL", &admin)
            .output()
            .unwrap())
        .json()["services"]["store"]
            .as_str()
            .unwrap()
            .to_owned();
        let bucket = url.rsplit('/').next().unwrap().to_owned();
        assert!(
            list.contains(&format!("<Name>{bucket}</Name>")),
            "{bucket}: {list}"
        );
        let rm = Out(repo
            .cmd(&home, &["remove", w, "--force"])
            .env("S3_URL", &admin)
            .output()
            .unwrap());
        assert_eq!(rm.code(), 0, "{rm}");
    }
}

/// Issue: a teardown with another endpoint in `admin_url` than the one the
/// bucket was made on deleted nothing and said "removed".
#[test]
fn a_bucket_made_on_one_endpoint_is_torn_down_there_whatever_admin_url_names_now() {
    let (Some(first), Some(second)) = (Moto::start(), Moto::start()) else {
        skip("no moto server (pip install 'moto[server]')");
        return;
    };
    let home = Home::new();
    let toml = format!(
        "{}[services.store]\nadapter = \"s3\"\nadmin_url = \"${{env.S3_URL}}\"\n",
        project_header("s3moved", 2)
    );
    let repo = Repo::new(&toml);
    let with_keys = |url: String| url.replacen("http://", "http://AKIAEXAMPLE:Hunter2Secret@", 1);
    let run = |url: &str, args: &[&str]| {
        repo.run_with(&home, args, &[("S3_URL", &with_keys(url.to_owned()))])
    };
    let up = run(&first.url(), &["up", "w"]);
    assert_eq!(up.code(), 0, "{up}");
    let env = run(&first.url(), &["env", "w", "--json"]).json();
    let bucket = env["fields"]["store"]["bucket"]
        .as_str()
        .expect("store.bucket")
        .to_owned();
    assert_eq!(
        http("HEAD", &format!("{}/{bucket}", first.url()), None).0,
        200
    );
    home.ok(&["daemon", "stop"]);
    let rm = run(&second.url(), &["remove", "w"]);
    assert_eq!(rm.code(), 0, "{rm}");
    assert!(
        rm.to_string()
            .contains(&format!("was made on {}", first.url())),
        "{rm}"
    );
    assert!(!rm.to_string().contains("Hunter2Secret"), "{rm}");
    assert_eq!(
        http("HEAD", &format!("{}/{bucket}", first.url()), None).0,
        404
    );
}

/// The s3s-fs binary: `BINKY_S3S`, the one `.ci/run` builds, or `PATH`'s.
fn s3s_bin() -> Option<std::path::PathBuf> {
    cached_tool("BINKY_S3S", "binky-s3s/bin/s3s-fs", "s3s-fs")
}

const NO_S3S: &str = "no s3s-fs (cargo install s3s-fs --features binary, or set BINKY_S3S)";

/// The access key and secret the s3s-fs server of a test accepts.
const S3S_KEY: &str = "AKIAS3STEST";
const S3S_SECRET: &str = "Hunter2SecretS3s";

/// An s3s-fs server for one test: an S3-protocol server that verifies the
/// SigV4 signature of every request against one key pair, keeping its
/// buckets as folders. Stopped when dropped.
struct S3s {
    child: std::process::Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl S3s {
    fn start() -> Option<S3s> {
        let bin = s3s_bin()?;
        let data = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = std::process::Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", S3S_KEY, "--secret-key", S3S_SECRET])
            .arg(data.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let up = wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "s3s-fs did not listen on {port}");
        Some(S3s {
            child,
            port,
            _data: data,
        })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An `admin_url` with `secret` as the secret key.
    fn admin_url(&self, secret: &str) -> String {
        format!("http://{S3S_KEY}:{secret}@127.0.0.1:{}", self.port)
    }

    /// One signed call through boto3 (a client that signs as AWS's SDKs
    /// do): `op` is `buckets`, `create BUCKET`, `put BUCKET KEY` or `list
    /// BUCKET`; prints the bucket or key names, one a line.
    fn call(&self, op: &[&str]) -> Vec<String> {
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(BOTO)
            .arg(self.url())
            .args([S3S_KEY, S3S_SECRET])
            .args(op)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "boto3 {op:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for S3s {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const BOTO: &str = r#"
import sys, boto3
from botocore.config import Config
url, key, secret, op, *rest = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret,
                  region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
if op == "buckets":
    for b in s3.list_buckets().get("Buckets", []): print(b["Name"])
elif op == "create":
    s3.create_bucket(Bucket=rest[0])
elif op == "put":
    s3.put_object(Bucket=rest[0], Key=rest[1], Body=b"x")
elif op == "list":
    for o in s3.list_objects_v2(Bucket=rest[0]).get("Contents", []): print(o["Key"])
"#;

fn s3s_project(name: &str) -> String {
    format!(
        "{}[services.store]\nadapter = \"s3\"\nadmin_url = \"${{env.S3_URL}}\"\n",
        project_header(name, 2)
    )
}

/// Every call Binky makes (create, list, delete of objects and bucket) is
/// signed as a server that checks SigV4 accepts.
#[test]
fn a_server_that_checks_signatures_accepts_every_call_binky_signs() {
    let Some(s3) = S3s::start() else {
        skip(NO_S3S);
        return;
    };
    let home = Home::new();
    let repo = Repo::new(&s3s_project("s3sig"));
    let admin = s3.admin_url(S3S_SECRET);
    let up = repo.run_with(&home, &["up", "feature/Sig"], &[("S3_URL", &admin)]);
    assert_eq!(up.code(), 0, "{up}");
    let env = repo
        .run_with(
            &home,
            &["env", "feature/Sig", "--json"],
            &[("S3_URL", &admin)],
        )
        .json();
    let bucket = env["fields"]["store"]["bucket"]
        .as_str()
        .expect("store.bucket")
        .to_owned();
    assert_eq!(s3.call(&["buckets"]), [bucket.as_str()]);
    // Objects, one with a key that needs escaping in a signed query.
    for key in ["a.txt", "dir/b c+d.txt"] {
        s3.call(&["put", &bucket, key]);
    }
    assert_eq!(s3.call(&["list", &bucket]).len(), 2);
    let rm = repo.run_with(&home, &["remove", "feature/Sig"], &[("S3_URL", &admin)]);
    assert_eq!(rm.code(), 0, "{rm}");
    // Named with the server it was deleted on.
    assert!(
        rm.stdout().contains(&format!(
            "slice {bucket} (s3 on http://127.0.0.1:{}),",
            s3.port
        )),
        "{rm}"
    );
    assert!(s3.call(&["buckets"]).is_empty(), "{rm}");
    assert!(!format!("{up}{rm}").contains(S3S_SECRET));
}

/// A wrong secret is refused by the server's signature check: `up` says the
/// credentials were refused, never the secret, and makes nothing.
#[test]
fn a_wrong_secret_is_refused_by_the_signature_check_and_named_as_such() {
    let Some(s3) = S3s::start() else {
        skip(NO_S3S);
        return;
    };
    let home = Home::new();
    let repo = Repo::new(&s3s_project("s3bad"));
    let wrong = "WrongSecretValue99";
    let up = repo.run_with(&home, &["up", "w"], &[("S3_URL", &s3.admin_url(wrong))]);
    assert_eq!(up.code(), 1, "{up}");
    let text = up.to_string();
    assert!(text.contains("SignatureDoesNotMatch"), "{up}");
    assert!(text.contains("secret"), "what to check: {up}");
    assert!(!text.contains(wrong), "{up}");
    assert!(s3.call(&["buckets"]).is_empty());
}

/// A bucket of the world's name that Binky did not make is never taken
/// over: `up` refuses it and leaves it, and its objects, as they were.
#[test]
fn an_existing_bucket_of_the_worlds_name_is_refused_and_left_alone() {
    let Some(s3) = S3s::start() else {
        skip(NO_S3S);
        return;
    };
    let home = Home::new();
    let repo = Repo::new(&s3s_project("s3taken"));
    let admin = s3.admin_url(S3S_SECRET);
    // The name the world would get, from a first world made and removed.
    assert_eq!(
        repo.run_with(&home, &["up", "w"], &[("S3_URL", &admin)])
            .code(),
        0
    );
    let bucket = s3.call(&["buckets"]).pop().expect("the world's bucket");
    assert_eq!(
        repo.run_with(&home, &["remove", "w"], &[("S3_URL", &admin)])
            .code(),
        0
    );
    s3.call(&["create", &bucket]);
    s3.call(&["put", &bucket, "theirs.txt"]);
    let up = repo.run_with(&home, &["up", "w"], &[("S3_URL", &admin)]);
    assert_eq!(up.code(), 1, "{up}");
    assert!(
        up.stderr().contains(&format!(
            "`{bucket}` already exists on the server, and this Binky did not make it"
        )),
        "{up}"
    );
    let rm = repo.run_with(&home, &["remove", "w"], &[("S3_URL", &admin)]);
    assert_eq!(rm.code(), 0, "{rm}");
    assert_eq!(s3.call(&["buckets"]), [bucket.as_str()]);
    assert_eq!(s3.call(&["list", &bucket]), ["theirs.txt"]);
}

/// A DeleteObjects answered 200 that lists per-key errors is a failed
/// teardown: `remove` says how many objects stayed and which, keeps the
/// world to retry, and succeeds once the server lets them go.
#[test]
fn a_partial_delete_is_an_error_that_names_the_objects_left() {
    let Some(moto) = Moto::start() else {
        skip("no moto server (pip install 'moto[server]')");
        return;
    };
    let home = Home::new();
    let repo = Repo::new(&s3s_project("s3held"));
    let admin = format!("http://AKIAEXAMPLE:Hunter2Secret@127.0.0.1:{}", moto.port);
    let env = [("S3_URL", admin.as_str())];
    assert_eq!(repo.run_with(&home, &["up", "w"], &env).code(), 0);
    let bucket =
        repo.run_with(&home, &["env", "w", "--json"], &env).json()["fields"]["store"]["bucket"]
            .as_str()
            .unwrap()
            .to_owned();
    let base = format!("{}/{bucket}", moto.url());
    // Object Lock on the (still empty) bucket, and a legal hold on one
    // object: the server refuses to delete that one version.
    let steps = [
        (
            format!("{base}?versioning"),
            "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>",
        ),
        (
            format!("{base}?object-lock"),
            "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled></ObjectLockConfiguration>",
        ),
        (format!("{base}/free.txt"), "x"),
        (format!("{base}/held.txt"), "x"),
        (
            format!("{base}/held.txt?legal-hold"),
            "<LegalHold><Status>ON</Status></LegalHold>",
        ),
    ];
    for (url, body) in &steps {
        let (code, text) = http("PUT", url, Some(body));
        assert_eq!(code, 200, "PUT {url}: {text}");
    }
    let rm = repo.run_with(&home, &["remove", "w"], &env);
    assert_eq!(rm.code(), 1, "{rm}");
    assert!(
        rm.stderr().contains("1 of 2 object(s) not deleted") && rm.stderr().contains("`held.txt`"),
        "{rm}"
    );
    assert!(repo.worlds(&home).contains_key("w"), "kept to retry");
    assert_eq!(http("HEAD", &base, None).0, 200, "the bucket stays");
    let (code, text) = http(
        "PUT",
        &format!("{base}/held.txt?legal-hold"),
        Some("<LegalHold><Status>OFF</Status></LegalHold>"),
    );
    assert_eq!(code, 200, "{text}");
    let rm = repo.run_with(&home, &["remove", "w"], &env);
    assert_eq!(rm.code(), 0, "{rm}");
    assert_eq!(http("HEAD", &base, None).0, 404);
}
