//! `s3` (also `minio`): a bucket per world on an S3-protocol server the user
//! runs (MinIO, moto, SeaweedFS, AWS itself).
//!
//! `admin_url` is the endpoint with the access key and secret as its user
//! info: `http://KEY:SECRET@127.0.0.1:9000` (write it as
//! `"${env.S3_ADMIN_URL}"`). Requests are path-style and signed with AWS
//! Signature V4 (rusty-s3, sans-IO) on Binky's own HTTP client; the region
//! is `options.region` (default `us-east-1`).
//!
//! A bucket name follows S3's rules before the server sees it: 3–63
//! lowercase letters, digits and `-`; starting and ending with a letter or
//! digit; never IP-shaped; never a reserved prefix (`xn--`, `sthree-`,
//! `amzn-s3-demo-`) or suffix (`-s3alias`, `--ol-s3`, `--x-s3`,
//! `--table-s3`); a long name is cut and given a hash, so two long branch
//! names never share a bucket. The address is `<endpoint>/<bucket>`, and
//! the bucket alone is `${SVC.bucket}`.
//!
//! Teardown empties the bucket — every object, and every version and
//! delete marker where versioning is on — 1,000 at a time, then deletes
//! it. There is no server-side copy of a bucket, so `clone_from` builds each
//! world by provision + migrate + seed.

use super::kit::address::{self, AddressError, AdminUrl};
use super::kit::{api, batch, names, owner};
use super::{Adapter, AdapterError, Slice};
use crate::http::{Client, Fetched};
use async_trait::async_trait;
use bytes::Bytes;
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use std::time::Duration;

/// S3's longest bucket name.
pub const MAX_BUCKET: usize = 63;
/// Default wait for one call, when `options.timeout` is not given.
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// The region when `options.region` is not given.
pub const DEFAULT_REGION: &str = "us-east-1";
/// How long a signed request stays valid.
const SIGNED_FOR: Duration = Duration::from_secs(300);
/// Keys (or versions) listed and deleted per request.
const BATCH: usize = 1000;

use super::kit::names::RESERVED_BUCKET_PREFIXES as RESERVED_PREFIXES;

mod listing;
use listing::{list_objects, list_versions, xml_text};
const RESERVED_SUFFIXES: &[&str] = &["-s3alias", "--ol-s3", "--x-s3", "--table-s3"];

/// The S3 adapter.
pub struct S3;

/// A bucket name for world `world_slug` of `project` (for `resource` where
/// the slice names it) that S3 accepts:
/// [`super::kit::names::BUCKET`], which always ends in a hash
/// of the pair (`-` joins the two and may sit inside either).
pub fn bucket_name(project: &str, resource: Option<&str>, world_slug: &str) -> String {
    super::kit::names::BUCKET.name(project, resource, world_slug)
}

/// Why `name` is not a bucket name S3 accepts, if it is not.
pub fn bucket_name_error(name: &str) -> Option<String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !(3..=MAX_BUCKET).contains(&name.len()) {
        Some(format!("`{name}` is not 3–63 characters"))
    } else if !ok_chars {
        Some(format!(
            "`{name}` holds a character other than a-z, 0-9 and -"
        ))
    } else if !edge(name.chars().next()) || !edge(name.chars().last()) {
        Some(format!(
            "`{name}` does not start and end with a letter or digit"
        ))
    } else if RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
        || RESERVED_SUFFIXES.iter().any(|s| name.ends_with(s))
    {
        Some(format!("`{name}` uses a reserved prefix or suffix"))
    } else {
        None
    }
}

impl AdminUrl {
    /// The endpoint (no credentials, path `/`), access key and secret this
    /// URL names; `binky check` refuses a literal `admin_url` by this same
    /// reader.
    ///
    /// # Errors
    /// No scheme, a scheme this build cannot speak, no host, a bad port, no
    /// access key and secret, or a path; never quoting a credential.
    pub(crate) fn s3_account(&self) -> Result<(url::Url, String, String), String> {
        let schemes = crate::http::SCHEMES
            .iter()
            .map(|s| format!("{s}://"))
            .collect::<Vec<_>>()
            .join(" or ");
        let a = self
            .read(&[], "http://KEY:SECRET@host:port")
            .map_err(|e| match e {
                AddressError::NoScheme { .. } => {
                    format!("admin_url has no scheme: write {schemes}KEY:SECRET@host:port")
                }
                e => format!("admin_url {e}"),
            })?;
        if !crate::http::SCHEMES.contains(&a.scheme()) {
            return Err(format!(
                "admin_url for {} must be {schemes} (this build speaks no other scheme{})",
                a.host_port(),
                if crate::http::TLS {
                    ""
                } else {
                    "; https needs binky built with `--features tls`"
                }
            ));
        }
        let (key, secret) = (a.user(), a.password().unwrap_or_default());
        if key.is_empty() || secret.is_empty() {
            return Err(format!(
                "admin_url for {} has no access key and secret: write {}://KEY:SECRET@host:port",
                a.host_port(),
                a.scheme()
            ));
        }
        if !matches!(a.path(), "" | "/") {
            return Err(format!(
                "admin_url for {} has a path ({}): buckets are made at the server's root, so write it without one",
                a.host_port(),
                a.path()
            ));
        }
        let endpoint = url::Url::parse(&format!("{}/", a.server(false)))
            .map_err(|e| format!("admin_url is not a URL: {e}"))?;
        Ok((endpoint, key, secret))
    }
}

/// The endpoint and account of an `admin_url`.
struct Api {
    endpoint: url::Url,
    credentials: Credentials,
    region: String,
    client: Client,
}

impl Api {
    fn of(slice: &Slice) -> Result<Api, AdapterError> {
        let url = slice.admin_url.as_ref().ok_or_else(|| {
            AdapterError::new(
                "the s3 adapter needs admin_url: the endpoint with the access key and secret, e.g. admin_url = \"${env.S3_ADMIN_URL}\" with S3_ADMIN_URL=http://KEY:SECRET@127.0.0.1:9000",
            )
        })?;
        let (endpoint, key, secret) = url
            .s3_account()
            .map_err(|e| AdapterError::new(format!("s3: {e}")))?;
        let region = slice
            .options
            .get("region")
            .and_then(|v| v.as_str())
            .unwrap_or(DEFAULT_REGION)
            .to_owned();
        Ok(Api {
            endpoint,
            credentials: Credentials::new(key, secret),
            region,
            client: api::client(slice, DEFAULT_TIMEOUT, 8 * 1024 * 1024),
        })
    }

    fn bucket(&self, name: &str) -> Result<Bucket, AdapterError> {
        Bucket::new(
            self.endpoint.clone(),
            UrlStyle::Path,
            name.to_owned(),
            self.region.clone(),
        )
        .map_err(|e| AdapterError::new(format!("s3: bucket {name}: {e}")))
    }

    /// Sends a request to a signed URL.
    async fn send(
        &self,
        method: &str,
        signed: url::Url,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Fetched, AdapterError> {
        let host = signed
            .host_str()
            .unwrap_or("")
            .trim_matches(['[', ']'])
            .to_owned();
        let port = signed.port_or_known_default().unwrap_or(80);
        let mut target = signed.path().to_owned();
        if let Some(q) = signed.query() {
            target.push('?');
            target.push_str(q);
        }
        let url = crate::http::Url {
            tls: signed.scheme() == "https",
            authority: crate::http::host_header(&host, port),
            host: host.clone(),
            port,
            path_and_query: target,
        };
        let req = crate::http::request(method, &url, headers, body)
            .map_err(|e| AdapterError::new(format!("s3: {e}")))?;
        self.client.fetch(&url, req).await.map_err(|e| {
            api::Exchange {
                // The path only: the query holds the signature.
                call: &format!("s3: {method} {}{}", server(&self.endpoint), signed.path()),
                unreachable: "check that the server runs and that admin_url names it",
                slow: "the endpoint accepts connections but does not serve them (stuck, or not an S3 server)",
            }
            .error(&e, self.client.read_timeout)
        })
    }

    /// An answer that is not a success as an error naming the call and
    /// the server's code, with what to do for the codes that are about the
    /// account.
    fn refused(&self, what: &str, f: &Fetched) -> AdapterError {
        let code = xml_text(&String::from_utf8_lossy(&f.body), "Code").unwrap_or_default();
        let hint = match code.as_str() {
            "SignatureDoesNotMatch" => format!(
                "; the server computes another signature: the secret in admin_url is not the one of this access key, or options.region (`{}`) is not the server's",
                self.region
            ),
            "InvalidAccessKeyId" | "NotSignedUp" => {
                "; the server knows no such access key: check the key in admin_url".to_owned()
            }
            "AccessDenied" => {
                "; the account in admin_url may not do this: give it the right to create and delete buckets".to_owned()
            }
            "" if f.status == 403 => {
                "; the server gave no reason: check the access key and secret in admin_url, and that the account may create and delete buckets".to_owned()
            }
            _ => String::new(),
        };
        AdapterError::new(format!(
            "s3 at {}: {what} answered {} {code}{hint}",
            server(&self.endpoint),
            f.status
        ))
    }
}

/// `host:port` of the endpoint, for messages.
fn server(u: &url::Url) -> String {
    address::shown(u.as_str())
}

/// Every object version and delete marker of the bucket, deleted a page at
/// a time; returns how many. Each page is listed from the start again: the
/// one before it is gone, and a marker naming a deleted key is not one
/// every server pages from (moto answers an empty page).
async fn empty(api: &Api, bucket: &Bucket) -> Result<u64, AdapterError> {
    let what = format!(
        "s3 at {}: emptying {}",
        server(&api.endpoint),
        bucket.name()
    );
    let within = batch::within(api.client.read_timeout);
    let mut objects = Objects {
        api,
        bucket,
        versioned: true,
    };
    batch::drain(&what, within, &mut objects).await
}

/// A bucket's object versions (or objects, on a server without
/// versioning), listed from the start each time: the page before is gone,
/// and a marker naming a deleted key is not one every server pages from.
struct Objects<'a> {
    api: &'a Api,
    bucket: &'a Bucket,
    versioned: bool,
}

impl batch::Listing for Objects<'_> {
    type Name = rusty_s3::actions::ObjectIdentifier;

    async fn page(&mut self) -> Result<batch::Page<Self::Name>, AdapterError> {
        let listed = if self.versioned {
            list_versions(self.api, self.bucket).await?
        } else {
            None
        };
        let names = match listed {
            Some(o) => o,
            // The server has no versioning (it answered 501/405 to
            // `?versions`): then every object is its only version.
            None => {
                self.versioned = false;
                list_objects(self.api, self.bucket).await?
            }
        };
        // Listed from the start: an empty page is the end.
        let more = !names.is_empty();
        Ok(batch::Page { names, more })
    }

    async fn delete(&mut self, names: Vec<Self::Name>) -> Result<u64, AdapterError> {
        delete_page(self.api, self.bucket, &names).await
    }
}

/// Deletes one listed page by name; returns how many.
async fn delete_page(
    api: &Api,
    bucket: &Bucket,
    objects: &[rusty_s3::actions::ObjectIdentifier],
) -> Result<u64, AdapterError> {
    let mut action = bucket.delete_objects(Some(&api.credentials), objects.iter());
    action.set_quiet(true);
    let signed = action.sign(SIGNED_FOR);
    let (body, md5) = action.body_with_md5();
    let f = api
        .send(
            "POST",
            signed,
            &[("Content-MD5", &md5), ("Content-Type", "application/xml")],
            Bytes::from(body),
        )
        .await?;
    // A 200 can still carry per-key failures: never report an emptied
    // bucket that is not.
    let text = String::from_utf8_lossy(&f.body);
    if !f.status.is_success() || text.contains("<Error>") {
        let failed = text.matches("<Error>").count();
        // The first failure's own fields: a server that ignores `Quiet`
        // lists the keys it deleted before the ones it did not.
        let first = text.find("<Error>").map_or(&*text, |at| &text[at..]);
        let key = xml_text(first, "Key").unwrap_or_default();
        let code = xml_text(first, "Code").unwrap_or_default();
        let message = xml_text(first, "Message").unwrap_or_default();
        return Err(AdapterError::new(format!(
            "s3 at {}: emptying {} answered {}: {} of {} object(s) not deleted, the first `{key}`: {code} {message}",
            server(&api.endpoint),
            bucket.name(),
            f.status,
            failed.max(1),
            objects.len()
        )));
    }
    Ok(objects.len() as u64)
}

fn not_s3(bucket: &Bucket, e: impl std::fmt::Display) -> AdapterError {
    AdapterError::new(format!(
        "s3: listing {} gave an answer that is not S3's: {e}",
        bucket.name()
    ))
}

#[async_trait]
impl Adapter for S3 {
    fn name(&self) -> &str {
        "s3"
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        if let Some(why) = bucket_name_error(&slice.name) {
            return Err(AdapterError::new(format!("s3: {why}")));
        }
        let api = Api::of(slice)?;
        let bucket = api.bucket(&slice.name)?;
        // CreateBucket answers 200 to the owner of an existing bucket (in
        // us-east-1): look first, so a bucket is never taken over.
        if self.exists(slice).await? {
            return Err(AdapterError::new(format!(
                "s3: the bucket {} already exists on {}",
                slice.name,
                server(&api.endpoint)
            )));
        }
        let action = bucket.create_bucket(&api.credentials);
        let f = api
            .send("PUT", action.sign(SIGNED_FOR), &[], Bytes::new())
            .await?;
        match f.status.as_u16() {
            200..=299 => Ok(()),
            409 => Err(AdapterError::new(format!(
                "s3: the bucket {} already exists on {}",
                slice.name,
                server(&api.endpoint)
            ))),
            _ => Err(api.refused(&format!("creating bucket {}", slice.name), &f)),
        }
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        let api = Api::of(slice)?;
        Ok(format!("{}{}", api.endpoint.as_str(), slice.name))
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        let api = Api::of(slice)?;
        // Not a name Binky gives a world: someone else's bucket.
        owner::check_name("s3", &server(&api.endpoint), &names::BUCKET, &slice.name)?;
        let bucket = api.bucket(&slice.name)?;
        empty(&api, &bucket).await?;
        let action = bucket.delete_bucket(&api.credentials);
        let f = api
            .send("DELETE", action.sign(SIGNED_FOR), &[], Bytes::new())
            .await?;
        match api::deleted(f.status.as_u16()) {
            Some(_) => Ok(()),
            None => Err(api.refused(&format!("deleting bucket {}", slice.name), &f)),
        }
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let api = Api::of(slice)?;
        let bucket = api.bucket(&slice.name)?;
        let action = bucket.head_bucket(Some(&api.credentials));
        let f = api
            .send("HEAD", action.sign(SIGNED_FOR), &[], Bytes::new())
            .await?;
        let what = format!("looking up bucket {}", slice.name);
        match f.status.as_u16() {
            200..=299 => Ok(true),
            404 => Ok(false),
            // A HEAD answer has no body, so no error code: ask again with
            // a GET (a one-key listing) to learn why it was refused.
            _ if f.body.is_empty() => {
                let mut list = bucket.list_objects_v2(Some(&api.credentials));
                list.with_max_keys(1);
                let g = api
                    .send("GET", list.sign(SIGNED_FOR), &[], Bytes::new())
                    .await?;
                Err(api.refused(&what, if g.status.is_success() { &f } else { &g }))
            }
            _ => Err(api.refused(&what, &f)),
        }
    }

    fn fields(&self, slice: &Slice) -> Vec<(&'static str, String)> {
        vec![("bucket", slice.name.clone())]
    }
}

#[cfg(test)]
mod tests;
