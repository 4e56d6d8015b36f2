//! A connection's outbound buffer: producers (any connection's reader
//! delivering a message, or this connection's own replies) append under a
//! short lock; one writer task swaps the buffer out and writes it in one
//! go. That batches many messages into each socket write.
//!
//! Invariants:
//! - `pending()` is the bytes queued plus the bytes being written; it is
//!   what `max_pending` is checked against.
//! - Once closing, nothing more is appended, and the writer stops after at
//!   most one final flush (only when the close reason allows one).

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Buffers larger than this are dropped after a write instead of kept for
/// reuse, so one burst does not pin memory for the connection's life.
const KEEP_CAPACITY: usize = 1 << 20;
/// A fresh buffer's size. Small, because an idle connection keeps two;
/// busy ones grow theirs by doubling and keep up to `KEEP_CAPACITY`.
const INITIAL_CAPACITY: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    Queued,
    /// Queued, and pending bytes are past three quarters of the limit: the
    /// producer should pause briefly (see [`Outbound::wait_drained`]) so a
    /// consumer that is reading, only not quite as fast, is not cut off.
    QueuedNearLimit,
    /// The append took pending bytes over the limit; the caller closes the
    /// connection as a slow consumer. Nothing was appended.
    SlowConsumer,
    /// The connection is closing; nothing was appended.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closing {
    Open,
    /// Write what is queued, then stop.
    FlushThenStop,
    /// Stop without writing.
    Stop,
}

struct State {
    buf: BytesMut,
    inflight: usize,
    out_msgs: u64,
    out_bytes: u64,
    closing: Closing,
}

pub struct Outbound {
    state: Mutex<State>,
    wake: Notify,
    /// Signalled after each completed write, for stalled producers.
    drained: Notify,
}

/// What the writer should do next.
pub enum Next {
    /// Write these bytes, then call [`Outbound::written`].
    Write(BytesMut),
    /// Nothing queued; wait on [`Outbound::wait`].
    Idle,
    /// The connection is closed; shut the socket.
    Stop,
}

/// Counters for monitoring.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutStats {
    pub pending: usize,
    pub out_msgs: u64,
    pub out_bytes: u64,
}

impl Default for Outbound {
    fn default() -> Self {
        Self::new()
    }
}

impl Outbound {
    pub fn new() -> Self {
        Outbound {
            state: Mutex::new(State {
                buf: BytesMut::new(),
                inflight: 0,
                out_msgs: 0,
                out_bytes: 0,
                closing: Closing::Open,
            }),
            wake: Notify::new(),
            drained: Notify::new(),
        }
    }

    /// Appends whatever `write` puts in the buffer, counted as one message
    /// of `msg_bytes` payload if `msg_bytes` is `Some`.
    pub fn push(
        &self,
        max_pending: usize,
        msg_bytes: Option<usize>,
        write: impl FnOnce(&mut BytesMut),
    ) -> Push {
        let mut st = self.state.lock();
        if st.closing != Closing::Open {
            return Push::Closed;
        }
        let before = st.buf.len();
        if st.buf.capacity() == 0 {
            st.buf.reserve(INITIAL_CAPACITY);
        }
        write(&mut st.buf);
        if st.buf.len() + st.inflight > max_pending {
            st.buf.truncate(before);
            return Push::SlowConsumer;
        }
        if let Some(n) = msg_bytes {
            st.out_msgs += 1;
            st.out_bytes += n as u64;
        }
        if st.buf.len() + st.inflight > max_pending / 4 * 3 {
            return Push::QueuedNearLimit;
        }
        Push::Queued
    }

    /// Waits, at most `max`, until pending bytes are at or below
    /// `threshold` or the connection closes.
    pub async fn wait_drained(&self, threshold: usize, max: std::time::Duration) {
        let notified = self.drained.notified();
        let mut notified = std::pin::pin!(notified);
        let deadline = tokio::time::Instant::now() + max;
        loop {
            notified.as_mut().enable();
            {
                let st = self.state.lock();
                if st.closing != Closing::Open || st.buf.len() + st.inflight <= threshold {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, notified.as_mut())
                .await
                .is_err()
            {
                return;
            }
            notified.set(self.drained.notified());
        }
    }

    /// Wakes the writer; producers call this once per batch, not per push.
    pub fn flush(&self) {
        self.wake.notify_one();
    }

    /// Stops accepting output. With `flush`, what is queued is still
    /// written (an `-ERR` before closing); without, it is dropped.
    pub fn close(&self, flush: bool) {
        let mut st = self.state.lock();
        if st.closing == Closing::Open {
            st.closing = if flush {
                Closing::FlushThenStop
            } else {
                // Dropped now: a cut-off slow consumer may hold megabytes,
                // and publishers' caches can keep the client alive a while.
                st.buf = BytesMut::new();
                Closing::Stop
            };
        }
        drop(st);
        self.wake.notify_one();
        self.drained.notify_waiters();
    }

    /// Takes the queued bytes for writing, handing over `spare` (empty) to
    /// collect the next batch.
    pub fn next(&self, spare: &mut BytesMut) -> Next {
        let mut st = self.state.lock();
        match st.closing {
            Closing::Stop => return Next::Stop,
            Closing::FlushThenStop if st.buf.is_empty() => return Next::Stop,
            _ => {}
        }
        if st.buf.is_empty() {
            return Next::Idle;
        }
        debug_assert!(spare.is_empty());
        std::mem::swap(&mut st.buf, spare);
        let chunk = std::mem::take(spare);
        st.inflight = chunk.len();
        Next::Write(chunk)
    }

    /// Marks the last chunk written and returns its buffer for reuse.
    pub fn written(&self, mut chunk: BytesMut) -> BytesMut {
        self.state.lock().inflight = 0;
        self.drained.notify_waiters();
        if chunk.capacity() > KEEP_CAPACITY {
            return BytesMut::new();
        }
        chunk.clear();
        chunk
    }

    /// Frees the buffers once the writer has stopped.
    pub fn release(&self) {
        let mut st = self.state.lock();
        st.closing = Closing::Stop;
        st.buf = BytesMut::new();
    }

    /// Resolves when a producer has flushed or the connection closes.
    pub async fn wait(&self) {
        self.wake.notified().await
    }

    pub fn stats(&self) -> OutStats {
        let st = self.state.lock();
        OutStats {
            pending: st.buf.len() + st.inflight,
            out_msgs: st.out_msgs,
            out_bytes: st.out_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn slow_consumer_appends_nothing() {
        let o = Outbound::new();
        assert_eq!(o.push(10, Some(4), |b| b.put_slice(b"abcd")), Push::Queued);
        assert_eq!(
            o.push(10, Some(8), |b| b.put_slice(b"efghijkl")),
            Push::SlowConsumer
        );
        assert_eq!(o.stats().pending, 4);
        assert_eq!(o.stats().out_msgs, 1);
    }

    #[test]
    fn writer_sees_batches_then_stop() {
        let o = Outbound::new();
        let mut spare = BytesMut::new();
        assert!(matches!(o.next(&mut spare), Next::Idle));
        o.push(100, None, |b| b.put_slice(b"a"));
        o.push(100, None, |b| b.put_slice(b"b"));
        let Next::Write(chunk) = o.next(&mut spare) else {
            panic!()
        };
        assert_eq!(&chunk[..], b"ab");
        assert_eq!(o.stats().pending, 2, "in flight counts as pending");
        spare = o.written(chunk);
        assert_eq!(o.stats().pending, 0);
        o.push(100, None, |b| b.put_slice(b"-ERR"));
        o.close(true);
        assert_eq!(o.push(100, None, |b| b.put_slice(b"x")), Push::Closed);
        let Next::Write(chunk) = o.next(&mut spare) else {
            panic!()
        };
        assert_eq!(&chunk[..], b"-ERR");
        spare = o.written(chunk);
        assert!(matches!(o.next(&mut spare), Next::Stop));
    }

    #[test]
    fn close_without_flush_drops_queue() {
        let o = Outbound::new();
        o.push(100, None, |b| b.put_slice(b"data"));
        o.close(false);
        assert!(matches!(o.next(&mut BytesMut::new()), Next::Stop));
    }
}
