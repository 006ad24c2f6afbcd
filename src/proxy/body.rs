//! The proxy's one body type: streamed, or whole when small and at hand,
//! so a short reply leaves in one write with its headers.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use std::pin::Pin;

/// What the proxy answers with. An enum rather than a boxed body: one
/// response per request, so the box and the dynamic calls would be paid on
/// every request.
pub(crate) enum Body {
    /// Bytes already at hand (pages, short replies), sent with the headers
    /// in one write. `None` once sent, or when empty.
    Full(Option<Bytes>),
    /// Bytes gathered already (if any), then the rest of the upstream's
    /// body, streamed as it arrives.
    Stream(Option<Bytes>, Incoming),
    /// Bytes gathered already, then the upstream's trailers.
    Trailers(Option<Bytes>, Option<HeaderMap>),
    /// Bytes as a task of the proxy's own sends them (the dashboard
    /// page's event stream), until it drops its sender.
    Channel(tokio::sync::mpsc::Receiver<Bytes>),
    /// A streamed reply that counts as its world's activity until it ends
    /// or the client goes (an event stream, a long download): its world
    /// does not fall asleep under it.
    Busy(Box<Body>, #[allow(dead_code)] super::wake::OpenGuard),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        use hyper::body::Frame;
        use std::task::Poll;
        match self.get_mut() {
            Body::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Body::Stream(first, body) => match first.take() {
                Some(d) => Poll::Ready(Some(Ok(Frame::data(d)))),
                None => Pin::new(body).poll_frame(cx),
            },
            Body::Trailers(first, trailers) => Poll::Ready(match first.take() {
                Some(d) => Some(Ok(Frame::data(d))),
                None => trailers.take().map(|t| Ok(Frame::trailers(t))),
            }),
            Body::Channel(rx) => rx.poll_recv(cx).map(|d| d.map(|d| Ok(Frame::data(d)))),
            Body::Busy(inner, _) => Pin::new(inner.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Full(data) => data.is_none(),
            Body::Stream(first, body) => first.is_none() && body.is_end_stream(),
            Body::Trailers(first, trailers) => first.is_none() && trailers.is_none(),
            Body::Channel(_) => false,
            Body::Busy(inner, _) => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            Body::Full(data) => {
                hyper::body::SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Body::Stream(first, body) => {
                let head = first.as_ref().map_or(0, |d| d.len() as u64);
                let rest = body.size_hint();
                let mut hint = hyper::body::SizeHint::new();
                hint.set_lower(rest.lower() + head);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + head);
                }
                hint
            }
            Body::Trailers(..) | Body::Channel(_) => hyper::body::SizeHint::default(),
            Body::Busy(inner, _) => inner.size_hint(),
        }
    }
}

/// Responses with a `Content-Length` up to this many bytes are read whole
/// before they are sent on, and bodies of unknown length are gathered up to
/// this size while frames keep arriving; see `Worker::handle`. Bounded, so
/// a 1 GiB download still runs in constant memory.
pub const SMALL_BODY_BYTES: u64 = 64 * 1024;

/// How many turns of the proxy thread's scheduler a body of unknown length
/// gets to produce its next frame before what has arrived is sent on.
/// hyper hands a body over one frame per turn of its upstream connection
/// (the reader asks, then the connection decodes), so even a reply already
/// whole in the socket buffer needs a few, more when that connection came
/// from the pool and runs as a task of its own: with 2, Node's chunked
/// replies on a pooled connection reached the client chunked, in two writes
/// instead of one (one system call a request more). 4 is enough for a reply
/// that is at hand; an event stream's first bytes still go after 4 empty
/// turns.
pub(super) const COALESCE_YIELDS: u32 = 4;

/// `fut`'s output if it is ready now or within `turns` trips through the
/// scheduler (other ready tasks run in between), else `None`.
pub(super) async fn ready_soon<F: std::future::Future>(
    mut fut: std::pin::Pin<&mut F>,
    turns: u32,
) -> Option<F::Output> {
    let mut left = turns;
    std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        std::task::Poll::Pending if left == 0 => std::task::Poll::Ready(None),
        std::task::Poll::Pending => {
            left -= 1;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

pub(super) fn full(text: impl Into<Bytes>) -> Body {
    let bytes = text.into();
    Body::Full((!bytes.is_empty()).then_some(bytes))
}

/// A length-delimited body of at most [`SMALL_BODY_BYTES`], whole. Usually
/// one frame, returned as it is (no copy).
pub(super) async fn read_short(mut body: Incoming) -> Result<Bytes, hyper::Error> {
    let mut first: Option<Bytes> = None;
    let mut more = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        match &first {
            None if more.is_empty() => first = Some(data),
            _ => {
                if let Some(f) = first.take() {
                    more.extend_from_slice(&f);
                }
                more.extend_from_slice(&data);
            }
        }
        if hyper::body::Body::is_end_stream(&body) {
            break;
        }
    }
    Ok(first.unwrap_or_else(|| more.freeze()))
}
