use super::*;

#[test]
fn client_errors_read_without_debug_names() {
    let e = redis::Client::open("redis://127.0.0.1:6379/abc")
        .err()
        .unwrap();
    assert_eq!(plain(&e), "Invalid database number");
    assert_eq!(
        plain(
            &"Redis server refused to switch database - Server(ResponseError): DB index is out of range"
        ),
        "Redis server refused to switch database: DB index is out of range"
    );
    assert_eq!(plain(&"a - b c"), "a - b c");
}

/// The book's examples of the one naming rule (docs/src/adapters/redis.md),
/// as the code makes them.
#[test]
fn the_readmes_slice_names_are_the_ones_made() {
    let slug = crate::slug::world_slug("feature/Login-Page");
    assert_eq!(slug, "feature-login-page-1cd8fc");
    assert_eq!(
        Redis.slice_name("shop", None, &slug),
        "shop:feature-login-page-1cd8fc:"
    );
    use crate::adapters::kafka::Kafka;
    assert_eq!(
        Kafka.slice_name("shop", None, "feat-a"),
        "shop-feat-a-203252-"
    );
    assert_eq!(
        Kafka.slice_name("shop", None, &slug),
        "shop-feature-login-page-1cd8fc-9a9368-"
    );
    let readme = include_str!("../../../docs/src/adapters/redis.md");
    for name in [
        "shop:feature-login-page-1cd8fc:",
        "shop-feat-a-203252-orders",
        "shop-feature-login-page-1cd8fc-9a9368-",
    ] {
        assert!(readme.contains(name), "{name}");
    }
}

#[test]
fn prefixes_match_only_themselves() {
    assert_eq!(Redis.slice_name("shop", None, "feat-a"), "shop:feat-a:");
    // Project `binky`, world `slice`: its prefix covers no marker.
    let world = Redis.slice_name("binky", None, "slice");
    assert!(!marker(&slice("shop:a:")).starts_with(&world));
    assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
}

#[test]
fn world_urls_keep_the_server_and_swap_the_credentials() {
    assert_eq!(
        world_url(&AdminUrl::new("redis://127.0.0.1:6379/2"), None, "shop:a:").unwrap(),
        "redis://127.0.0.1:6379/2#shop:a:"
    );
    assert_eq!(
        world_url(
            &AdminUrl::new("redis://admin:s3cret@h:6380/0#old"),
            Some(("binky_shop_a", "pw")),
            "shop:a:"
        )
        .unwrap(),
        "redis://binky_shop_a:pw@h:6380/0#shop:a:"
    );
    assert_eq!(
        world_url(&AdminUrl::new("rediss://:pw@h/1"), None, "p:w:").unwrap(),
        "rediss://:pw@h/1#p:w:"
    );
    assert_eq!(
        server_of(&AdminUrl::new("redis://admin:s3cret@h:6380/0")),
        "h:6380"
    );
    assert_eq!(acl_user(&slice("shop:feat-a:")), "binky_shop_feat-a");
}

fn slice(name: &str) -> Slice {
    crate::adapters::test_slice(name)
}
