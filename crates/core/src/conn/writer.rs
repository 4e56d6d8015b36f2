//! The writer task: drains a client's outbound buffer to its socket, one
//! batch per write, each write bounded by the write deadline.

use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tracing::info;

use crate::client::outbound::Next;
use crate::client::{Client, ClosedState};
use crate::server::Server;

/// Queues what the connection opens with (INFO, and a route's CONNECT)
/// and starts its writer.
pub fn start<W: AsyncWrite + Unpin + Send + 'static>(
    server: Arc<Server>,
    client: Arc<Client>,
    wr: W,
    deadline: Duration,
    greeting: impl FnOnce(&mut BytesMut),
) -> tokio::task::JoinHandle<()> {
    client.out.push(usize::MAX, None, greeting);
    client.out.flush();
    tokio::spawn(run(server, client, wr, deadline))
}

pub async fn run<W: AsyncWrite + Unpin>(
    server: Arc<Server>,
    client: Arc<Client>,
    mut wr: W,
    deadline: Duration,
) {
    let mut spare = BytesMut::new();
    loop {
        let chunk = match client.out.next(&mut spare) {
            Next::Write(chunk) => chunk,
            Next::Idle => {
                tokio::select! {
                    _ = client.out.wait() => {}
                    _ = client.killed() => {}
                }
                continue;
            }
            Next::Stop => break,
        };
        let len = chunk.len();
        // Flushed too: a TLS stream may keep the end of a chunk's records
        // when the socket is full, until the next write or a flush.
        let mut write = pin!(tokio::time::timeout(deadline, async {
            wr.write_all(&chunk).await?;
            wr.flush().await
        }));
        let mut kill_seen = false;
        let result = loop {
            tokio::select! {
                r = &mut write => break Some(r),
                _ = client.killed(), if !kill_seen => {
                    // A close that keeps queued output (an -ERR) lets this
                    // write finish; one that does not (slow consumer,
                    // write error) abandons it now.
                    kill_seen = true;
                    if !client.closed_reason().is_some_and(|r| r.flushes()) {
                        break None;
                    }
                }
            }
        };
        match result {
            None => break,
            Some(Ok(Ok(()))) => {
                spare = client.out.written(chunk);
                client.touch(SystemTime::now());
            }
            Some(Ok(Err(_))) => {
                client.close(ClosedState::WriteError);
                break;
            }
            Some(Err(_elapsed)) => {
                if client.close(ClosedState::SlowConsumerWriteDeadline) {
                    server.stats.slow_consumers.fetch_add(1, Ordering::Relaxed);
                    info!(
                        "{} - Slow Consumer Detected: WriteDeadline of {:?} exceeded with 1 chunks of {} total bytes.",
                        client.log_prefix(),
                        deadline,
                        len
                    );
                }
                break;
            }
        }
    }
    client.out.release();
    let _ = wr.shutdown().await;
}
