//! Reaching a recorded slice on the server it was made on, and tearing it
//! down there — never on whatever server `admin_url` happens to render to
//! today (see [`adapters::server`]).

use crate::adapters;
use crate::adapters::Slice;
use crate::adapters::server::{self, Server};
use crate::address::AdminUrl;
use crate::daemon::Daemon;
use crate::protocol::ApiError;

/// A slice as it will be acted on: rendered so that it reaches the server
/// it was made on, with a note when that is not the server `admin_url`
/// names today.
pub(in crate::daemon::world) struct Reached {
    pub(in crate::daemon::world) slice: Slice,
    pub(in crate::daemon::world) note: Option<String>,
}

/// The server `slice` would be made on by `adapter` (see
/// [`adapters::server_of`]).
pub(in crate::daemon::world) fn server_now(
    d: &Daemon,
    adapter: &dyn adapters::Adapter,
    slice: &Slice,
) -> Result<Option<Server>, ApiError> {
    let key = d.registry(|r| r.fingerprint_key())?;
    Ok(adapters::server_of(adapter, slice, &key))
}

/// Picks the rendering of a recorded slice that reaches `recorded`, the
/// server it was made on. `candidates` are the slice rendered with today's
/// environment first, then with the environment the world was built with.
///
/// The first candidate whose server is the recorded one is used as it is;
/// else the first whose credentials are the ones the slice was made with
/// (by fingerprint) is moved to the recorded server with those
/// credentials, and the note says so. A slice recorded before servers
/// were (`recorded` is `None`) is reached as today's `admin_url` says.
///
/// # Errors
/// No candidate reaches the recorded server: the error names both servers
/// and says how to get the credentials back; the caller keeps the record.
pub(in crate::daemon::world) fn reach(
    d: &Daemon,
    adapter: &dyn adapters::Adapter,
    service: &str,
    mut candidates: Vec<Slice>,
    recorded: Option<&Server>,
) -> Result<Reached, ApiError> {
    assert!(!candidates.is_empty(), "reach needs a rendering");
    let Some(recorded) = recorded else {
        return Ok(Reached {
            slice: candidates.swap_remove(0),
            note: None,
        });
    };
    let key = d.registry(|r| r.fingerprint_key())?;
    let now = adapters::server_of(adapter, &candidates[0], &key);
    let named = now
        .as_ref()
        .map_or("no server".to_owned(), |s| s.address.clone());
    let moved = |how: &str| {
        format!(
            "services.{service}: admin_url now names {named}, but the slice {} was made on {}: {how}",
            candidates[0].name, recorded.address
        )
    };
    let keep_path = adapter.facts().path_names_server;
    for (i, c) in candidates.iter().enumerate() {
        let Some(url) = adapters::server_url(adapter, c) else {
            continue;
        };
        if url.server(keep_path) == recorded.address {
            let note = (i > 0).then(|| moved("reached it there with the environment of its `up`"));
            return Ok(Reached {
                slice: c.clone(),
                note,
            });
        }
    }
    for c in &candidates {
        let Some(url) = adapters::server_url(adapter, c) else {
            continue;
        };
        if server::of(&url, keep_path, &key).credentials != recorded.credentials {
            continue;
        }
        let no_credentials = url.credentials() == Default::default();
        let Some(rebased) = url
            .rebased(&recorded.address)
            .or_else(|| no_credentials.then(|| AdminUrl::new(recorded.address.clone())))
        else {
            continue;
        };
        crate::secrets::register_url(rebased.as_str());
        return Ok(Reached {
            slice: Slice {
                admin_url: Some(rebased),
                ..c.clone()
            },
            note: Some(moved("reached it there with the same credentials")),
        });
    }
    Err(ApiError::new(format!(
        "services.{service}: the slice {} was made on {}, but admin_url now names {named}, and the credentials it was made with are not at hand",
        candidates[0].name, recorded.address
    ))
    .hint(format!(
        "set admin_url (or the variables it is rendered from) so that it names {} again and run this again; the slice's record is kept",
        recorded.address
    )))
}

/// `slice` (as rendered today) pinned to the server world `world_id`'s
/// record of it names, so its address is the one it was made on.
///
/// # Errors
/// That server cannot be reached with the credentials at hand (see
/// [`reach`]).
pub(in crate::daemon::world) fn pinned(
    d: &Daemon,
    adapter: &dyn adapters::Adapter,
    service: &str,
    world_id: i64,
    slice: Slice,
) -> Result<Slice, ApiError> {
    let recorded = d
        .registry(|r| r.slices_of(world_id))?
        .into_iter()
        .find(|r| r.service == service && r.slice == slice.name)
        .and_then(|r| r.server);
    Ok(reach(d, adapter, service, vec![slice], recorded.as_ref())?.slice)
}

/// What a teardown found and did on the server it reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::daemon::world) enum TornDown {
    /// The slice was there and is gone now.
    Deleted,
    /// The slice (or its marker) was not on the server: nothing was
    /// deleted.
    NotFound,
}

/// Tears `slice` down on the server it names, saying whether there was
/// anything to delete: a slice missing where it was made is reported, not
/// counted as a teardown.
///
/// # Errors
/// The adapter's, from looking for the slice or from the teardown.
pub(in crate::daemon::world) async fn tear_down(
    adapter: &dyn adapters::Adapter,
    slice: &Slice,
) -> Result<TornDown, adapters::AdapterError> {
    found_then(adapter, slice, adapter.teardown(slice)).await
}

/// [`tear_down`], choosing what happens to sessions on the slice Binky did
/// not open; also the sessions it ended.
///
/// # Errors
/// The adapter's; with [`adapters::OtherSessions::Wait`], sessions still
/// open after the wait.
pub(in crate::daemon::world) async fn tear_down_with(
    adapter: &dyn adapters::Adapter,
    slice: &Slice,
    others: adapters::OtherSessions,
) -> Result<(TornDown, Vec<String>), adapters::AdapterError> {
    let mut ended = Vec::new();
    let found = found_then(adapter, slice, async {
        ended = adapter.teardown_with(slice, others).await?;
        Ok(())
    })
    .await?;
    Ok((found, ended))
}

/// Whether `slice` is there, then `drop` (run even when it is missing: the
/// adapter's ownership guard refuses what it finds there that Binky did
/// not make, such as keys under a prefix whose marker is gone, and takes
/// an empty place as gone).
async fn found_then(
    adapter: &dyn adapters::Adapter,
    slice: &Slice,
    drop: impl std::future::Future<Output = Result<(), adapters::AdapterError>>,
) -> Result<TornDown, adapters::AdapterError> {
    let existed = adapter.exists(slice).await?;
    drop.await?;
    Ok(if existed {
        TornDown::Deleted
    } else {
        TornDown::NotFound
    })
}

/// [`tear_down`] for a golden template: dropped with
/// [`adapters::Adapter::drop_template`], which never ends another's
/// session on it.
///
/// # Errors
/// The adapter's; a template in use is an error, and is left.
pub(in crate::daemon::world) async fn drop_template(
    adapter: &dyn adapters::Adapter,
    template: &Slice,
) -> Result<TornDown, adapters::AdapterError> {
    found_then(adapter, template, adapter.drop_template(template)).await
}

/// The note for a slice that was not where it was made.
pub(in crate::daemon::world) fn not_found_note(
    d: &Daemon,
    adapter: &dyn adapters::Adapter,
    slice: &Slice,
) -> String {
    let on = server_now(d, adapter, slice)
        .ok()
        .flatten()
        .map_or_else(|| "its store".to_owned(), |s| s.address);
    format!(
        "the {} slice {} was not on {on} (nothing deleted there); its record is dropped",
        adapter.name(),
        slice.name
    )
}
