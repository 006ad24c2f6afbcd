//! Batch teardown: the one bounded loop that empties a slice whose server
//! lists its contents a page at a time (Redis keys by `SCAN`, S3 objects
//! and versions by `ListObjectVersions`).
//!
//! Each turn lists a page and deletes exactly the names on it (never a
//! pattern the server expands: `FLUSHDB`, `KEYS`, a bucket-wide delete), so
//! other clients of the server wait at most one batch. The loop ends when a
//! page says nothing follows it, or fails at a deadline: a client that
//! writes under the slice as fast as Binky deletes would otherwise keep a
//! teardown going for ever.

use super::super::AdapterError;
use std::time::{Duration, Instant};

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The names on this page (may be empty while `more` is true: `SCAN`
    /// pages can be).
    pub names: Vec<T>,
    /// Whether the listing goes on past this page.
    pub more: bool,
}

/// How long a whole drain may take when one call may take `per_call`
/// (`options.timeout`): thirty calls' time, and at least a minute. A
/// million Redis keys take about 2.3 s (benchmarks/worlds.py): the bound is
/// for a listing that never ends, not for a large slice.
pub fn within(per_call: Duration) -> Duration {
    per_call.saturating_mul(30).max(Duration::from_secs(60))
}

/// A slice's contents as its server lists them: a page at a time, deleted
/// by name.
pub trait Listing {
    /// What names one thing to delete (a key, an object version).
    type Name;
    /// The next page.
    fn page(&mut self) -> impl Future<Output = Result<Page<Self::Name>, AdapterError>> + Send;
    /// Deletes exactly `names`; how many were deleted.
    fn delete(
        &mut self,
        names: Vec<Self::Name>,
    ) -> impl Future<Output = Result<u64, AdapterError>> + Send;
}

/// Lists `listing` and deletes each page until a page says nothing
/// follows; returns how many were deleted in all. `what` leads the error
/// (`redis at h:6379: deleting the keys under shop:a:`).
///
/// # Errors
/// The first error of the listing or a delete; or, when `within` has
/// passed before the listing ended, an error naming how many were deleted
/// and what to do.
pub async fn drain<L: Listing>(
    what: &str,
    within: Duration,
    listing: &mut L,
) -> Result<u64, AdapterError> {
    let deadline = Instant::now() + within;
    let mut deleted = 0;
    loop {
        if Instant::now() >= deadline {
            return Err(AdapterError::new(format!(
                "{what}: still deleting after {within:?} ({deleted} deleted so far): something may be writing as fast as Binky deletes; stop the world's clients and run the command again"
            )));
        }
        let page = listing.page().await?;
        if !page.names.is_empty() {
            deleted += listing.delete(page.names).await?;
        }
        if !page.more {
            return Ok(deleted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Pages from a list; `None` pages for ever; a delete fails when
    /// `refuse`.
    struct Fake {
        pages: Option<std::vec::IntoIter<Page<i32>>>,
        refuse: bool,
        seen: Vec<i32>,
    }

    impl Listing for Fake {
        type Name = i32;
        async fn page(&mut self) -> Result<Page<i32>, AdapterError> {
            Ok(match &mut self.pages {
                Some(p) => p.next().expect("no page after the last"),
                None => Page {
                    names: vec![9],
                    more: true,
                },
            })
        }
        async fn delete(&mut self, names: Vec<i32>) -> Result<u64, AdapterError> {
            if self.refuse {
                return Err(AdapterError::new("refused"));
            }
            self.seen.extend(&names);
            Ok(names.len() as u64)
        }
    }

    fn fake(pages: Option<Vec<Page<i32>>>, refuse: bool) -> Fake {
        Fake {
            pages: pages.map(Vec::into_iter),
            refuse,
            seen: Vec::new(),
        }
    }

    #[test]
    fn pages_are_deleted_until_one_says_nothing_follows() {
        let mut f = fake(
            Some(vec![
                Page {
                    names: vec![1, 2],
                    more: true,
                },
                Page {
                    names: vec![],
                    more: true,
                },
                Page {
                    names: vec![3],
                    more: false,
                },
            ]),
            false,
        );
        assert_eq!(run(drain("t", Duration::from_secs(5), &mut f)).unwrap(), 3);
        assert_eq!(f.seen, [1, 2, 3]);
    }

    #[test]
    fn a_listing_that_never_ends_fails_at_the_deadline_saying_what_was_done() {
        let e = run(drain(
            "redis at h:6379: deleting the keys under shop:a:",
            Duration::from_millis(50),
            &mut fake(None, false),
        ))
        .unwrap_err();
        assert!(
            e.message.starts_with(
                "redis at h:6379: deleting the keys under shop:a:: still deleting after 50ms ("
            ),
            "{e}"
        );
        assert!(e.message.contains("deleted so far"), "{e}");
    }

    #[test]
    fn the_first_error_ends_the_loop() {
        let e = run(drain("t", Duration::from_secs(5), &mut fake(None, true))).unwrap_err();
        assert_eq!(e.message, "refused");
        assert_eq!(within(Duration::from_secs(10)), Duration::from_secs(300));
        assert_eq!(within(Duration::from_secs(1)), Duration::from_secs(60));
    }
}
