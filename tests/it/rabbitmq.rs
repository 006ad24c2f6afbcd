//! The `rabbitmq` adapter against the RabbitMQ server on 127.0.0.1:5672
//! with its management plugin on :15672, and a real AMQP client (pika).

use crate::harness::*;
use crate::project::*;

/// RabbitMQ's AMQP port and its management API both answer.
pub(crate) fn rabbit_up() -> bool {
    std::net::TcpStream::connect(("127.0.0.1", 5672)).is_ok()
        && std::net::TcpStream::connect(("127.0.0.1", 15672)).is_ok()
}

fn pika() -> bool {
    python_has("pika")
}

/// The management API as guest: `method path [json body]` → status.
const API: &str = r#"
import sys, urllib.request, base64
method, path = sys.argv[1], sys.argv[2]
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
req = urllib.request.Request("http://127.0.0.1:15672" + path, data=data, method=method)
req.add_header("Content-Type", "application/json")
req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code)
"#;

fn api(method: &str, path: &str) -> (u16, String) {
    api_with(method, path, "")
}

fn api_with(method: &str, path: &str, body: &str) -> (u16, String) {
    let mut args = vec![method, path];
    if !body.is_empty() {
        args.push(body);
    }
    let out = python(API, &args);
    let (code, body) = out.split_once('\n').unwrap_or((&out, ""));
    (code.trim().parse().unwrap(), body.to_owned())
}

fn vhosts() -> Vec<String> {
    let (code, body) = api("GET", "/api/vhosts");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Publishes `body` to queue `q` through `url` with pika, then prints how
/// many messages `q` holds as seen through `other` (0 when it has no such
/// queue).
const ISOLATION: &str = r#"
import sys, pika
url, other, body = sys.argv[1], sys.argv[2], sys.argv[3]
c = pika.BlockingConnection(pika.URLParameters(url))
ch = c.channel()
# Confirms: the publish returns once the broker has the message queued, so
# the count below includes it.
ch.confirm_delivery()
ch.queue_declare("jobs", durable=False)
ch.basic_publish("", "jobs", body.encode())
mine = ch.queue_declare("jobs", passive=True).method.message_count
c.close()
c = pika.BlockingConnection(pika.URLParameters(other))
ch = c.channel()
try:
    theirs = ch.queue_declare("jobs", passive=True).method.message_count
except pika.exceptions.ChannelClosedByBroker:
    theirs = 0
print(mine, theirs)
"#;

/// Deletes this test's vhosts and users however it ends.
pub(crate) struct Cleanup(pub(crate) String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !rabbit_up() {
            return;
        }
        for v in vhosts() {
            if v.starts_with(&format!("{}_", self.0)) {
                let enc = v.replace('/', "%2F");
                api("DELETE", &format!("/api/vhosts/{enc}"));
            }
        }
        for u in users() {
            if u.starts_with(&format!("{}_", self.0)) {
                api("DELETE", &format!("/api/users/{u}"));
            }
        }
    }
}

/// The server's user names.
pub(crate) fn users() -> Vec<String> {
    let (code, body) = api("GET", "/api/users");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Connects to `url` and says `ok`, or `refused` when the broker will not
/// let its user into its vhost.
const CONNECT: &str = r#"
import sys, pika
try:
    pika.BlockingConnection(pika.URLParameters(sys.argv[1])).close()
    print("ok")
except (pika.exceptions.ProbableAccessDeniedError, pika.exceptions.ProbableAuthenticationError, pika.exceptions.ConnectionClosedByBroker):
    print("refused")
"#;

#[test]
fn rabbitmq_vhosts_isolate_worlds_and_teardown_deletes_only_theirs() {
    if !rabbit_up() || !pika() {
        skip("no RabbitMQ with its management API on 127.0.0.1:5672/15672, or no pika");
        return;
    }
    let p = format!("rq{}", std::process::id() % 100000);
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let toml = format!(
        "{}[services.queue]\nadapter = \"rabbitmq\"\nadmin_url = \"amqp://guest:guest@127.0.0.1:5672/\"\n",
        project_header(&p, 2)
    );
    let repo = Repo::new(&toml);
    // A vhost whose name merely starts like a world's is not that world's.
    assert_eq!(api("PUT", &format!("/api/vhosts/{p}_feat-a-2")).0, 201);
    let long = format!("feature/{}", "Very-Long-Branch-Name-".repeat(7));
    let worlds = ["feat-a", "Feature/UPPER_case", long.as_str()];
    let mut urls = Vec::new();
    for w in worlds {
        repo.ok(&home, &["up", w]);
        let env = repo.ok(&home, &["env", w]).json();
        let url = env["services"]["queue"].as_str().unwrap().to_owned();
        // The world's own user, named as its vhost, never the admin's.
        let vhost = url.rsplit('/').next().unwrap().to_owned();
        assert!(
            url.starts_with(&format!("amqp://{vhost}:"))
                && url.ends_with(&format!("@127.0.0.1:5672/{vhost}")),
            "{url}"
        );
        assert!(!url.contains("guest"), "{url}");
        assert!(vhosts().contains(&vhost), "{vhost} not listed");
        urls.push(url);
    }
    // One world's user cannot enter another's vhost.
    let a_at_b = format!(
        "{}/{}",
        urls[0].rsplit_once('/').unwrap().0,
        urls[1].rsplit('/').next().unwrap()
    );
    assert_eq!(python(CONNECT, &[&urls[0]]), "ok");
    assert_eq!(python(CONNECT, &[&a_at_b]), "refused");
    // And has no management tag: the API turns it away.
    let a_user = urls[0].rsplit('/').next().unwrap().to_owned();
    let tags = api("GET", &format!("/api/users/{a_user}")).1;
    assert!(
        tags.contains("binky-world") && !tags.contains("management"),
        "{tags}"
    );
    // A message published in one world is not in another's queue.
    assert_eq!(python(ISOLATION, &[&urls[0], &urls[1], "hello"]), "1 0");
    assert_eq!(python(ISOLATION, &[&urls[1], &urls[2], "x"]), "1 0");
    // down keeps the vhost and its messages; up finds it again.
    repo.ok(&home, &["down", "feat-a"]);
    repo.ok(&home, &["up", "feat-a"]);
    assert_eq!(python(ISOLATION, &[&urls[0], &urls[2], "again"]), "2 0");
    for w in worlds {
        repo.ok(&home, &["remove", w, "--force"]);
    }
    let left = vhosts();
    assert!(left.contains(&"/".to_owned()), "{left:?}");
    assert!(left.contains(&format!("{p}_feat-a-2")), "{left:?}");
    let left_users = users();
    for u in &urls {
        let v = u.rsplit('/').next().unwrap();
        assert!(!left.contains(&v.to_owned()), "{v} left behind");
        assert!(!left_users.contains(&v.to_owned()), "user {v} left behind");
    }
}

#[test]
fn rabbitmq_errors_name_the_server_and_what_to_do_never_the_password() {
    if !rabbit_up() {
        skip("no RabbitMQ with its management API on 127.0.0.1:5672/15672");
        return;
    }
    // Accounts of this test's own: one with no tag (no management API at
    // all), one with `management` but not `administrator`.
    let tag = std::process::id() % 100000;
    let users = Users(vec![format!("rqnotag{tag}"), format!("rqmgmt{tag}")]);
    for (u, tags) in users.0.iter().zip(["", "management"]) {
        let body = format!("{{\"password\":\"Hunter2Secret\",\"tags\":\"{tags}\"}}");
        assert_eq!(api_with("PUT", &format!("/api/users/{u}"), &body).0, 201);
    }
    // A management API that accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let cases = [
        (
            "amqp://guest:Hunter2Secret@127.0.0.1:5672/".to_owned(),
            String::new(),
            "the user or password in admin_url is not one the server accepts (account `guest`)"
                .to_owned(),
        ),
        (
            format!("amqp://{}:Hunter2Secret@127.0.0.1:5672/", users.0[0]),
            String::new(),
            format!(
                "may not use the management API: give it the `management` or `administrator` tag (`rabbitmqctl set_user_tags {} administrator`)",
                users.0[0]
            ),
        ),
        (
            format!("amqp://{}:Hunter2Secret@127.0.0.1:5672/", users.0[1]),
            String::new(),
            format!(
                "the account `{}` needs the `administrator` tag to manage vhosts",
                users.0[1]
            ),
        ),
        (
            "amqp://guest:guest@127.0.0.1:5672/".to_owned(),
            "options = { management_url = \"http://127.0.0.1:1\" }\n".to_owned(),
            "the management API at 127.0.0.1:1, GET /api/vhosts/".to_owned(),
        ),
        (
            "amqp://guest:guest@127.0.0.1:5672/".to_owned(),
            format!(
                "options = {{ management_url = \"http://127.0.0.1:{silent_port}\", timeout = \"1s\" }}\n"
            ),
            "no answer within 1s".to_owned(),
        ),
    ];
    for (url, options, says) in cases {
        let home = Home::new();
        let toml = format!(
            "{}[services.queue]\nadapter = \"rabbitmq\"\nadmin_url = \"${{env.RMQ_URL}}\"\n{options}",
            project_header("rqbad", 2)
        );
        let repo = Repo::new(&toml);
        let out = repo.run_with(&home, &["up", "a"], &[("RMQ_URL", &url)]);
        assert_eq!(out.code(), 1, "{out}");
        assert!(out.stderr().contains(&says), "wanted {says:?}:\n{out}");
        assert!(!out.to_string().contains("Hunter2Secret"), "{out}");
        if says.contains("no answer") {
            assert!(
                out.stderr().contains("GET /api/vhosts/")
                    && out.stderr().contains("raise options.timeout"),
                "{out}"
            );
        }
        if says.contains("127.0.0.1:1,") {
            assert!(
                out.stderr().contains("cannot connect")
                    && out.stderr().contains("rabbitmq-plugins enable"),
                "{out}"
            );
        }
    }
    drop(silent);
}

/// Deletes this test's RabbitMQ users however it ends.
struct Users(Vec<String>);

impl Drop for Users {
    fn drop(&mut self) {
        for u in &self.0 {
            let _ = api("DELETE", &format!("/api/users/{u}"));
        }
    }
}

#[test]
fn a_dead_amqp_port_fails_up_though_the_management_api_answers() {
    if !rabbit_up() {
        skip("no RabbitMQ with its management API on 127.0.0.1:5672/15672");
        return;
    }
    let home = Home::new();
    let toml = format!(
        "{}[services.queue]\nadapter = \"rabbitmq\"\nadmin_url = \"amqp://guest:guest@127.0.0.1:1/\"\noptions = {{ management_url = \"http://127.0.0.1:15672\" }}\n",
        project_header("rqamqp", 2)
    );
    let repo = Repo::new(&toml);
    let out = repo.run(&home, &["up", "a"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("nothing answers AMQP at 127.0.0.1:1"),
        "{out}"
    );
    // Nothing made: no vhost for the world.
    assert!(!vhosts().contains(&"rqamqp_a".to_owned()));
}

#[test]
fn gc_sweeps_a_half_made_vhost() {
    if !rabbit_up() {
        skip("no RabbitMQ with its management API on 127.0.0.1:5672/15672");
        return;
    }
    let p = format!("rqg{}", std::process::id() % 100000);
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let toml = format!(
        "{}[services.queue]\nadapter = \"rabbitmq\"\n",
        project_header(&p, 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "live"]);
    // A daemon killed mid-remove: the vhost is whole, the row says
    // `teardown`.
    up_then_crash_removing(&repo, &home, "ghost", &[]);
    let ghost = format!("{p}_ghost");
    assert!(vhosts().contains(&ghost), "{:?}", vhosts());
    let out = repo.ok(&home, &["gc"]);
    assert!(out.stdout().contains("swept"), "{out}");
    let left = vhosts();
    assert!(!left.contains(&ghost), "{left:?}");
    assert!(left.contains(&format!("{p}_live")), "{left:?}");
    repo.ok(&home, &["remove", "live", "--force"]);
}

#[test]
fn two_worlds_brought_up_at_once_get_a_vhost_each() {
    if !rabbit_up() {
        skip("no RabbitMQ with its management API on 127.0.0.1:5672/15672");
        return;
    }
    let p = format!("rqc{}", std::process::id() % 100000);
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let toml = format!(
        "{}[services.queue]\nadapter = \"rabbitmq\"\n",
        project_header(&p, 4)
    );
    let repo = Repo::new(&toml);
    home.ok(&["daemon", "start"]);
    up_at_once(&repo, &home, &["one", "two"], &[]);
    let hosts = vhosts();
    for w in ["one", "two"] {
        assert!(hosts.contains(&format!("{p}_{w}")), "{w}: {hosts:?}");
        repo.ok(&home, &["remove", w, "--force"]);
    }
}

/// Issue: `options = { management_url = "${env.RMQ_MGMT}" }` passed
/// `binky check` and `up` then failed with "`${env.RMQ_MGMT}` is not a URL":
/// tokens in options were never rendered. Now they are, and a rendered
/// value of the wrong kind is refused by the rule check uses.
#[test]
fn tokens_in_options_are_rendered_and_their_values_checked() {
    if !rabbit_up() {
        skip("no RabbitMQ with its management API on 127.0.0.1:5672/15672");
        return;
    }
    let p = format!("rqo{}", std::process::id() % 100000);
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let toml = format!(
        "{}[services.queue]\nadapter = \"rabbitmq\"\noptions = {{ management_url = \"${{env.RMQ_MGMT}}\", timeout = \"${{env.RMQ_TIMEOUT}}\" }}\n",
        project_header(&p, 2)
    );
    let repo = Repo::new(&toml);
    let good = [
        ("RMQ_MGMT", "http://127.0.0.1:15672"),
        ("RMQ_TIMEOUT", "20s"),
    ];
    let up = repo.run_with(&home, &["up", "w"], &good);
    assert_eq!(up.code(), 0, "{up}");
    assert!(vhosts().contains(&format!("{p}_w")));
    let rm = repo.run_with(&home, &["remove", "w"], &good);
    assert_eq!(rm.code(), 0, "{rm}");
    assert!(!vhosts().contains(&format!("{p}_w")));
    // A value that renders to no duration is refused before anything is
    // made, naming the option.
    let bad = [
        ("RMQ_MGMT", "http://127.0.0.1:15672"),
        ("RMQ_TIMEOUT", "soon"),
    ];
    let up = repo.run_with(&home, &["up", "v"], &bad);
    assert_eq!(up.code(), 1, "{up}");
    assert!(
        up.stderr()
            .contains("services.queue.options.timeout for the rabbitmq adapter")
            && up.stderr().contains("once its tokens are rendered"),
        "{up}"
    );
    assert!(!vhosts().contains(&format!("{p}_v")));
}

#[test]
fn a_world_gets_its_user_on_reload_and_gc_sweeps_only_binkys_users() {
    if !rabbit_up() || !pika() {
        skip("no RabbitMQ with its management API on 127.0.0.1:5672/15672, or no pika");
        return;
    }
    let p = format!("rqu{}", std::process::id() % 100000);
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let base = format!(
        "{}[services.queue]\nadapter = \"rabbitmq\"\nadmin_url = \"amqp://guest:guest@127.0.0.1:5672/\"\n",
        project_header(&p, 2)
    );
    let repo = Repo::new(&format!("{base}options = {{ acl = false }}\n"));
    repo.ok(&home, &["up", "w"]);
    let url = |repo: &Repo| {
        repo.ok(&home, &["env", "w"]).json()["services"]["queue"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let before = url(&repo);
    assert!(before.starts_with("amqp://guest:guest@"), "{before}");
    assert_eq!(python(ISOLATION, &[&before, &before, "kept"]), "1 1");
    let tree = std::path::PathBuf::from(repo.worlds(&home)["w"]["path"].as_str().unwrap());
    for dir in [repo.project_dir(), tree.as_path()] {
        std::fs::write(dir.join("binky.toml"), &base).unwrap();
    }
    repo.ok(&home, &["reload", "w"]);
    let after = url(&repo);
    let vhost = after.rsplit('/').next().unwrap().to_owned();
    assert!(after.starts_with(&format!("amqp://{vhost}:")), "{after}");
    // The message published before is still there for the world's user.
    assert_eq!(python(ISOLATION, &[&after, &after, "new"]), "2 2");

    // gc: a user Binky tagged whose vhost is gone is swept; an untagged one
    // of the same shape is left.
    let (gone, mine) = (format!("{p}_gone-1"), format!("{p}_mine-2"));
    let user = |tags: &str| format!(r#"{{"password":"pw-{p}","tags":"{tags}"}}"#);
    assert_eq!(
        api_with("PUT", &format!("/api/users/{gone}"), &user("binky-world")).0,
        201
    );
    assert_eq!(
        api_with("PUT", &format!("/api/users/{mine}"), &user("")).0,
        201
    );
    repo.ok(&home, &["gc"]);
    let left = users();
    assert!(!left.contains(&gone), "{left:?}");
    assert!(left.contains(&mine), "{left:?}");
    assert!(
        left.contains(&vhost),
        "gc took a live world's user: {left:?}"
    );
    repo.ok(&home, &["remove", "w", "--force"]);
    assert!(!users().contains(&vhost));
}
