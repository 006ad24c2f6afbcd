//! Unit tests of `s3`.

use super::listing::Versions;
use super::*;

#[test]
fn bucket_names_follow_s3s_rules_case_a3() {
    // Case A3: world `feature/Login-Page` of project `shop`, slugged.
    let slug = crate::slug::world_slug("feature/Login-Page");
    let name = bucket_name("shop", None, &slug);
    assert_eq!(bucket_name_error(&name), None, "{name}");
    assert!(name.starts_with("shop-feature"), "{name}");
    // `-` joins project and world and may sit inside either: the hash
    // keeps such pairs apart, and the reserved-prefix rewrite too.
    assert_ne!(
        bucket_name("my-app", None, "x"),
        bucket_name("my", None, "app-x")
    );
    assert_ne!(
        bucket_name("sthree", None, "x"),
        bucket_name("b", None, "x")
    );
    for (project, world) in [
        ("shop", "a_b"),
        ("xn--shop", "w"),
        ("sthree", "x"),
        ("a", "b"),
        ("shop", "x-s3alias"),
        ("shop", "w--ol-s3"),
        ("192", "168.0.1"),
        ("p", &"Very-Long-Branch-Name-".repeat(7)),
    ] {
        let n = bucket_name(project, None, world);
        assert_eq!(bucket_name_error(&n), None, "{project}/{world} → {n}");
        assert!(n.parse::<std::net::Ipv4Addr>().is_err(), "{n}");
    }
    // Two long names that share a prefix stay two buckets.
    let a = bucket_name("p", None, &format!("{}a", "x".repeat(80)));
    let b = bucket_name("p", None, &format!("{}b", "x".repeat(80)));
    assert_ne!(a, b);
    assert!(a.len() <= MAX_BUCKET && b.len() <= MAX_BUCKET);
}

/// The guard runs before any request: a bucket Binky would not name
/// is refused (it was taken as done before), a name Binky gives is sent
/// on to the server (here: none, so the error is the connection's).
#[test]
fn teardown_refuses_a_bucket_binky_does_not_name() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let slice = |name: &str| Slice {
        name: name.to_owned(),
        project: "shop".into(),
        admin_url: Some(AdminUrl::new("http://KEY:SECRET@127.0.0.1:1")),
        options: toml::Table::new(),
        data_dir: std::env::temp_dir(),
        search_path: None,
        secret: None,
    };
    for theirs in ["prod-backups", "Prod_Backups", "shop-feat-a"] {
        let e = rt.block_on(S3.teardown(&slice(theirs))).unwrap_err();
        assert!(
            e.message
                .starts_with("s3 at 127.0.0.1:1: refusing to delete bucket"),
            "{e}"
        );
        assert!(!e.message.contains("SECRET"), "{e}");
    }
    let ours = bucket_name("shop", None, "feat-a");
    let e = rt.block_on(S3.teardown(&slice(&ours))).unwrap_err();
    assert!(e.is_environmental(), "{e}");
}

#[test]
fn bad_names_are_named() {
    for bad in ["ab", "Upper", "a_b", "-ab", "ab-", "xn--ab", "ab-s3alias"] {
        assert!(bucket_name_error(bad).is_some(), "{bad}");
    }
}

#[test]
fn admin_urls_with_a_raw_slash_in_the_secret_or_a_path_say_what_to_write() {
    let read = |u: &str| AdminUrl::new(u).s3_account();
    let e = read("http://AK:wJal/rXU+tn@127.0.0.1:9000").unwrap_err();
    assert!(e.contains("percent-encode") && e.contains("%2F"), "{e}");
    assert!(!e.contains("rXU"), "{e}");
    let e = read("http://AK:SK@127.0.0.1:0").unwrap_err();
    assert!(e.contains("bad port"), "{e}");
    let (endpoint, _, secret) = read("http://AK:wJal%2FrXU%2Btn@127.0.0.1:9000").unwrap();
    assert_eq!(secret, "wJal/rXU+tn");
    assert_eq!(endpoint.as_str(), "http://127.0.0.1:9000/");
    let e = read("http://AK:SK@127.0.0.1:9000/some/path").unwrap_err();
    assert!(e.contains("has a path (/some/path)"), "{e}");
    assert!(read("http://AK:SK@127.0.0.1:9000/").is_ok());
    let e = read("ftp://AK:SK@127.0.0.1:9000/").unwrap_err();
    assert!(e.contains("must be http://"), "{e}");
}

#[test]
fn version_pages_parse() {
    let body = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><IsTruncated>true</IsTruncated><NextKeyMarker>k2</NextKeyMarker><NextVersionIdMarker>v2</NextVersionIdMarker>
<Version><Key>a &amp; b</Key><VersionId>v1</VersionId><IsLatest>true</IsLatest></Version>
<DeleteMarker><Key>c</Key><VersionId>v3</VersionId></DeleteMarker></ListVersionsResult>"#;
    let p: Versions = instant_xml::from_str(body).unwrap();
    assert_eq!(p.versions[0].key, "a & b");
    assert_eq!(p.markers[0].version_id.as_deref(), Some("v3"));
    // moto 5.2's answer, as it comes (empty markers, owners, an XML
    // declaration in lower case).
    let p: Versions = instant_xml::from_str(MOTO_VERSIONS).unwrap();
    assert_eq!(p.versions.len(), 2, "{p:?}");
    assert_eq!(p.markers.len(), 1, "{p:?}");
}

const MOTO_VERSIONS: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><IsTruncated>false</IsTruncated><KeyMarker/><VersionIdMarker/><Version><ETag>"d41d8cd98f00b204e9800998ecf8427e"</ETag><Size>0</Size><StorageClass>STANDARD</StorageClass><Key>a</Key><VersionId>213764cf-fe06-47f8-b92f-5e08b655c9ed</VersionId><IsLatest>true</IsLatest><LastModified>2026-12-01T15:30:49.000Z</LastModified><Owner><DisplayName>webfile</DisplayName><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID></Owner></Version><Version><ETag>"d41d8cd98f00b204e9800998ecf8427e"</ETag><Size>0</Size><StorageClass>STANDARD</StorageClass><Key>v.txt</Key><VersionId>aedd26d9-df33-4577-b1bf-e6ab3e0f9662</VersionId><IsLatest>false</IsLatest><LastModified>2026-12-01T15:30:49.000Z</LastModified><Owner><DisplayName>webfile</DisplayName><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID></Owner></Version><DeleteMarker><Owner><DisplayName>webfile</DisplayName><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID></Owner><Key>v.txt</Key><VersionId>e01994f4-64a0-4164-a056-87a0dd5b7388</VersionId><IsLatest>true</IsLatest><LastModified>2026-12-01T15:30:49.000Z</LastModified></DeleteMarker><Name>bk1</Name><Prefix/><MaxKeys>1000</MaxKeys></ListVersionsResult>"#;
