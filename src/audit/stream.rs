//! A relayed stream that keeps a copy of what it sends, for its audit row:
//! written when the stream is dropped, at its end or when the caller left.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;

use super::Capture;

type Chunk = Result<Bytes, std::io::Error>;

pub struct Audited {
    inner: Pin<Box<dyn Stream<Item = Chunk>>>,
    copy: Vec<u8>,
    limit: usize,
    /// Events were relayed past the copy's limit.
    cut: bool,
    cache: Option<&'static str>,
    capture: Option<Capture>,
}

impl Audited {
    pub fn new(
        inner: Pin<Box<dyn Stream<Item = Chunk>>>,
        capture: Capture,
        cache: Option<&'static str>,
    ) -> Audited {
        Audited {
            inner,
            copy: Vec::new(),
            limit: capture.collect_limit(),
            cut: false,
            cache,
            capture: Some(capture),
        }
    }
}

impl Stream for Audited {
    type Item = Chunk;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Chunk>> {
        let polled = self.inner.as_mut().poll_next(cx);
        if let Poll::Ready(Some(Ok(bytes))) = &polled {
            let room = self.limit.saturating_sub(self.copy.len());
            let taken = bytes.len().min(room);
            let cut = taken < bytes.len();
            self.copy.extend_from_slice(&bytes[..taken]);
            self.cut |= cut;
        }
        polled
    }
}

impl Drop for Audited {
    fn drop(&mut self) {
        if let Some(capture) = self.capture.take() {
            let copy = Bytes::from(std::mem::take(&mut self.copy));
            capture.finish(200, self.cache, copy, self.cut);
        }
    }
}
