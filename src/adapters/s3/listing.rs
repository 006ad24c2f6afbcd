//! Reading a bucket's listings: `ListObjectVersions` and `ListObjectsV2`
//! pages, read from their XML (versions, delete markers, continuation).

use super::{Api, BATCH, SIGNED_FOR, not_s3};
use crate::adapters::AdapterError;
use bytes::Bytes;
use instant_xml::FromXml;
use rusty_s3::{Bucket, S3Action};

/// The text of the first `<tag>` in an S3 error body (`Code`), for
/// messages.
pub(super) fn xml_text(body: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = body.find(&open)? + open.len();
    let end = body[start..].find('<')? + start;
    Some(body[start..end].to_owned())
}

/// One page of `GET /bucket?versions`.
#[derive(Debug, Default, FromXml)]
#[xml(
    rename = "ListVersionsResult",
    ns("http://s3.amazonaws.com/doc/2006-03-01/")
)]
pub(super) struct Versions {
    pub(super) versions: Vec<Version>,
    pub(super) markers: Vec<DeleteMarker>,
}

#[derive(Debug, FromXml)]
#[xml(rename = "Version", ns("http://s3.amazonaws.com/doc/2006-03-01/"))]
pub(super) struct Version {
    #[xml(rename = "Key")]
    pub(super) key: String,
    #[xml(rename = "VersionId")]
    pub(super) version_id: Option<String>,
}

#[derive(Debug, FromXml)]
#[xml(rename = "DeleteMarker", ns("http://s3.amazonaws.com/doc/2006-03-01/"))]
pub(super) struct DeleteMarker {
    #[xml(rename = "Key")]
    pub(super) key: String,
    #[xml(rename = "VersionId")]
    pub(super) version_id: Option<String>,
}

/// One page of `GET /bucket?list-type=2`: only the keys are read, since
/// servers differ in what else they give (s3s-fs sends no `ETag`).
#[derive(Debug, Default, FromXml)]
#[xml(
    rename = "ListBucketResult",
    ns("http://s3.amazonaws.com/doc/2006-03-01/")
)]
pub(super) struct Listing {
    pub(super) contents: Vec<Listed>,
}

#[derive(Debug, FromXml)]
#[xml(rename = "Contents", ns("http://s3.amazonaws.com/doc/2006-03-01/"))]
pub(super) struct Listed {
    #[xml(rename = "Key")]
    pub(super) key: String,
}

/// One page of every version and delete marker in `bucket`, each named by
/// its version id; `None` when the server has no versioning API.
pub(super) async fn list_versions(
    api: &Api,
    bucket: &Bucket,
) -> Result<Option<Vec<rusty_s3::actions::ObjectIdentifier>>, AdapterError> {
    let max = BATCH.to_string();
    // Sorted by name: the signature covers the query as the server sorts
    // it, and rusty-s3 merges this list with its own without sorting it.
    let q: Vec<(&str, &str)> = vec![("max-keys", &max), ("versions", "")];
    let signed = rusty_s3::signing::sign(
        &jiff::Timestamp::now(),
        rusty_s3::Method::Get,
        bucket.base_url().clone(),
        api.credentials.key(),
        api.credentials.secret(),
        None,
        bucket.region(),
        SIGNED_FOR.as_secs(),
        q.iter().copied(),
        std::iter::empty(),
    );
    let f = api.send("GET", signed, &[], Bytes::new()).await?;
    if f.status == 404 {
        return Ok(Some(Vec::new()));
    }
    if f.status == 501 || f.status == 405 {
        return Ok(None);
    }
    if !f.status.is_success() {
        return Err(api.refused(&format!("listing {}", bucket.name()), &f));
    }
    let page: Versions =
        instant_xml::from_str(&String::from_utf8_lossy(&f.body)).map_err(|e| not_s3(bucket, e))?;
    Ok(Some(
        page.versions
            .iter()
            .map(|v| (&v.key, &v.version_id))
            .chain(page.markers.iter().map(|m| (&m.key, &m.version_id)))
            .map(|(k, v)| {
                let mut o = rusty_s3::actions::ObjectIdentifier::new(k.clone());
                // `null` is the id of the version written before versioning
                // was on (or of every object without it): named as such it
                // is deleted, where no id would only add a delete marker.
                o.version_id = v.clone();
                o
            })
            .collect(),
    ))
}

/// One page of the objects in `bucket`, on a server without versioning.
pub(super) async fn list_objects(
    api: &Api,
    bucket: &Bucket,
) -> Result<Vec<rusty_s3::actions::ObjectIdentifier>, AdapterError> {
    let mut action = bucket.list_objects_v2(Some(&api.credentials));
    action.with_max_keys(BATCH);
    let f = api
        .send("GET", action.sign(SIGNED_FOR), &[], Bytes::new())
        .await?;
    if f.status == 404 {
        return Ok(Vec::new());
    }
    if !f.status.is_success() {
        return Err(api.refused(&format!("listing {}", bucket.name()), &f));
    }
    let page: Listing =
        instant_xml::from_str(&String::from_utf8_lossy(&f.body)).map_err(|e| not_s3(bucket, e))?;
    Ok(page
        .contents
        .into_iter()
        .map(|c| rusty_s3::actions::ObjectIdentifier::new(c.key))
        .collect())
}
