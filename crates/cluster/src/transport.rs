//! The Raft transport: checked frames (`replication::frame`) between
//! servers over TCP, separate from client traffic.
//!
//! Each server dials each peer twice, one connection per traffic class,
//! and only ever writes on the connections it dialed. Votes and
//! heartbeats therefore never queue behind appends or snapshots, in our
//! buffers or in the kernel's (incident 4). A connection opens with one
//! preface line, `RAFT {"peer":<id>,"class":"control"|"bulk"}`, so it can
//! share the route port: the route listener hands such connections over
//! ([`Transport::accept_after_preface`]).
//!
//! Inbound bytes go through `frame::StreamDecoder`: a frame that fails its
//! length or checksum check is counted and ends the connection (framing
//! after it cannot be trusted); a frame whose sender is not the peer the
//! connection claims is counted and ends it too. Frames that pass go to
//! the driver, which checks them again against group membership.
//!
//! Frames are not retried here: when a connection fails its queue is
//! dropped, and Raft resends what matters.
//!
//! When the route port requires TLS, the server gives the transport an
//! [`Upgrade`] that runs the client side of the handshake on each dialed
//! connection before its preface; the listener runs the server side
//! before it reads one.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use replication::frame::{self, Class, Frame, Rejections, StreamDecoder};
use replication::outbox::Outbox;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tracing::{debug, warn};

/// Bulk bytes queued per peer before further appends are dropped (Raft
/// resends them): appends are flow-controlled by this bound.
pub const BULK_LIMIT: usize = 8 << 20;
/// Bytes gathered into one write.
const BATCH: usize = 256 << 10;
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const REDIAL: Duration = Duration::from_millis(250);
/// Sent data unacknowledged this long ends the connection (TCP_USER_TIMEOUT),
/// so a connection that lived through a partition is replaced at once when
/// it heals, instead of waiting out TCP's retransmission backoff (which
/// grows to tens of seconds).
const USER_TIMEOUT: Duration = Duration::from_secs(3);
/// An inbound connection silent this long is closed (its dialer redials
/// when it has something to say).
const INBOUND_IDLE: Duration = Duration::from_secs(60);
/// Room made in an inbound connection's buffer before each read. Large
/// frames are split off that buffer and share it (small ones are copied
/// out, `frame::SPLIT_AT`) until the engine has decoded them: it is reused
/// once they are all dropped, and a fresh one is allocated while any is
/// held.
const READ_ROOM: usize = 64 << 10;
/// Longest preface line accepted.
const MAX_PREFACE: usize = 1024;

/// The first line of a Raft connection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Preface {
    pub peer: u64,
    pub class: String,
}

/// Counters for monitoring.
#[derive(Debug, Default)]
pub struct Counters {
    pub frames_out: AtomicU64,
    pub bytes_out: AtomicU64,
    pub frames_in: AtomicU64,
    pub bytes_in: AtomicU64,
    /// Frames that failed their checks, by reason.
    pub rejected: Mutex<Rejections>,
    /// Frames whose sender was not the connection's peer.
    pub foreign: AtomicU64,
    /// Queued frames dropped because their connection failed or the bulk
    /// queue was full.
    pub dropped: AtomicU64,
    pub dials: AtomicU64,
    pub dial_errors: AtomicU64,
}

struct Lane {
    class: Class,
    queue: Mutex<Outbox>,
    wake: Notify,
}

struct Peer {
    addr: Mutex<String>,
    lanes: [Arc<Lane>; 2],
}

/// Where inbound frames go: (peer, frame). Returns false once nobody
/// takes them any more.
pub type Deliver = Box<dyn Fn(u64, Frame) -> bool + Send + Sync>;

/// What frames are written on: a dialed connection, plain or upgraded.
pub type Outbound = Box<dyn AsyncWrite + Unpin + Send>;

/// Turns a dialed connection to `host:port` into the stream the preface
/// and frames go on (a TLS handshake), or says why it could not.
pub type Upgrade = Arc<
    dyn Fn(TcpStream, String) -> Pin<Box<dyn Future<Output = Result<Outbound, String>> + Send>>
        + Send
        + Sync,
>;

pub struct Transport {
    me: u64,
    peers: Mutex<BTreeMap<u64, Arc<Peer>>>,
    deliver: Deliver,
    pub counters: Counters,
    stop: Arc<Notify>,
    stopped: std::sync::atomic::AtomicBool,
    /// When a frame last came from each peer.
    heard: Mutex<BTreeMap<u64, std::time::Instant>>,
    /// Applied to every dialed connection; none leaves it plain.
    upgrade: Mutex<Option<Upgrade>>,
}

impl Transport {
    /// A transport for server `me`, handing inbound frames to `deliver`.
    pub fn new(me: u64, deliver: Deliver) -> Arc<Transport> {
        Arc::new(Transport {
            me,
            peers: Mutex::new(BTreeMap::new()),
            deliver,
            counters: Counters::default(),
            stop: Arc::new(Notify::new()),
            stopped: std::sync::atomic::AtomicBool::new(false),
            heard: Mutex::new(BTreeMap::new()),
            upgrade: Mutex::new(None),
        })
    }

    /// Runs `upgrade` on every connection dialed from now on (TLS on the
    /// route port). Connections already up keep going as they are.
    pub fn set_upgrade(&self, upgrade: Upgrade) {
        *self.upgrade.lock() = Some(upgrade);
    }

    /// How long ago a frame last came from `peer`.
    pub fn last_heard(&self, peer: u64) -> Option<Duration> {
        self.heard.lock().get(&peer).map(|t| t.elapsed())
    }

    pub fn id(&self) -> u64 {
        self.me
    }

    /// Where peer `id` accepts connections (`host:port`). The first call
    /// for a peer starts its two writers (needs a tokio runtime).
    pub fn set_peer(self: &Arc<Self>, id: u64, addr: &str) {
        let mut peers = self.peers.lock();
        if let Some(p) = peers.get(&id) {
            *p.addr.lock() = addr.to_string();
            return;
        }
        let lane = |class| {
            Arc::new(Lane {
                class,
                queue: Mutex::new(Outbox::new(BULK_LIMIT)),
                wake: Notify::new(),
            })
        };
        let p = Arc::new(Peer {
            addr: Mutex::new(addr.to_string()),
            lanes: [lane(Class::Control), lane(Class::Bulk)],
        });
        for l in &p.lanes {
            tokio::spawn(writer(self.clone(), id, p.clone(), l.clone()));
        }
        peers.insert(id, p);
    }

    /// Queues a frame for a peer. Unknown peers' frames are dropped.
    pub fn send(&self, to: u64, f: Frame) {
        let Some(p) = self.peers.lock().get(&to).cloned() else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let lane = &p.lanes[f.class as usize];
        if !lane.queue.lock().push(f) {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
        lane.wake.notify_one();
    }

    /// Stops every writer and reader of this transport.
    pub fn shutdown(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.stop.notify_waiters();
        for p in self.peers.lock().values() {
            for l in &p.lanes {
                l.wake.notify_one();
            }
        }
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// Serves an inbound connection from its first byte: reads the
    /// preface, then frames.
    pub async fn accept(self: Arc<Self>, mut stream: TcpStream) {
        let mut buf = BytesMut::with_capacity(4096);
        let line = loop {
            if let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                let line = buf.split_to(nl + 1);
                break line;
            }
            if buf.len() > MAX_PREFACE {
                warn!("raft connection sent no preface; closing");
                return;
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let line = String::from_utf8_lossy(&line);
        let Some(json) = line.trim_end().strip_prefix("RAFT ") else {
            warn!("raft connection sent a bad preface; closing");
            return;
        };
        self.accept_after_preface(stream, json.as_bytes(), &buf)
            .await;
    }

    /// Serves an inbound connection whose preface (`json`) was read by
    /// someone else, with the bytes they read past it.
    pub async fn accept_after_preface(
        self: Arc<Self>,
        mut rd: impl AsyncRead + Unpin,
        json: &[u8],
        already: &[u8],
    ) {
        let Ok(pre) = serde_json::from_slice::<Preface>(json) else {
            warn!("raft connection sent a bad preface; closing");
            return;
        };
        let peer = pre.peer;
        debug!("raft {} connection from peer {peer:x}", pre.class);
        let mut dec = StreamDecoder::new();
        dec.feed(already);
        let stop = self.stop.clone();
        loop {
            loop {
                match dec.next_frame() {
                    Ok(Some(f)) => {
                        if f.sender != peer {
                            self.counters.foreign.fetch_add(1, Ordering::Relaxed);
                            warn!(
                                "Rejected raft frame from peer {peer:x}: it names sender {:x}; closing the connection",
                                f.sender
                            );
                            return;
                        }
                        self.counters.frames_in.fetch_add(1, Ordering::Relaxed);
                        self.heard.lock().insert(peer, std::time::Instant::now());
                        self.counters.bytes_in.fetch_add(
                            (frame::HEADER_LEN + f.payload.len()) as u64,
                            Ordering::Relaxed,
                        );
                        if !(self.deliver)(peer, f) {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(r) => {
                        self.counters.rejected.lock().count(r);
                        warn!(
                            "Rejected raft frame from peer {peer:x}: {r}; closing the connection"
                        );
                        return;
                    }
                }
            }
            if self.is_stopped() {
                return;
            }
            tokio::select! {
                // Read straight into the decoder's buffer: frames are
                // split off it, not copied.
                n = tokio::time::timeout(INBOUND_IDLE, rd.read_buf(dec.unfilled(READ_ROOM))) => match n {
                    Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
                    Ok(Ok(_)) => {}
                },
                _ = stop.notified() => return,
            }
        }
    }
}

/// Ends `s` when data it sent stays unacknowledged for `limit` (Linux's
/// TCP_USER_TIMEOUT): after a partition heals, such a connection is
/// replaced at once instead of waiting out TCP's retransmission backoff.
/// Elsewhere it does nothing.
pub fn bound_unacked(s: &TcpStream, limit: Duration) {
    #[cfg(target_os = "linux")]
    let _ = socket2::SockRef::from(s).set_tcp_user_timeout(Some(limit));
    #[cfg(not(target_os = "linux"))]
    let _ = (s, limit);
}

/// Writes one lane of one peer: dials when there is something to send,
/// batches what is queued into one write, and on any failure drops the
/// connection and what was queued.
async fn writer(t: Arc<Transport>, id: u64, peer: Arc<Peer>, lane: Arc<Lane>) {
    let class = match lane.class {
        Class::Control => "control",
        Class::Bulk => "bulk",
    };
    let mut conn: Option<Outbound> = None;
    let mut out = BytesMut::new();
    loop {
        if t.is_stopped() {
            return;
        }
        let n = {
            let mut q = lane.queue.lock();
            out.clear();
            q.drain_batch(BATCH, &mut out)
        };
        if n == 0 {
            lane.wake.notified().await;
            continue;
        }
        if conn.is_none() {
            let addr = peer.addr.lock().clone();
            t.counters.dials.fetch_add(1, Ordering::Relaxed);
            match dial(&t, &addr, class).await {
                Ok(s) => {
                    debug!("raft {class} connection to peer {id:x} at {addr}");
                    conn = Some(s);
                }
                Err(e) => {
                    debug!("raft {class} connection to peer {id:x} at {addr}: {e}");
                    t.counters.dial_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            if conn.is_none() {
                // The peer is away: what was queued is stale by the time
                // it is back, and Raft resends.
                t.counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
                drop_queue(&lane, &t);
                tokio::time::sleep(REDIAL).await;
                continue;
            }
        }
        let s = conn.as_mut().expect("connected");
        // Flushed too: a TLS stream may keep the end of a batch's records
        // when the socket is full, until the next write or a flush.
        let write = async {
            s.write_all(&out).await?;
            s.flush().await
        };
        match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(Ok(())) => {
                t.counters.frames_out.fetch_add(n as u64, Ordering::Relaxed);
                t.counters
                    .bytes_out
                    .fetch_add(out.len() as u64, Ordering::Relaxed);
            }
            _ => {
                debug!("raft {class} connection to peer {id} failed");
                conn = None;
                t.counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
                drop_queue(&lane, &t);
            }
        }
    }
}

/// A connection to `addr` for one traffic class, upgraded if the
/// transport says so, with its preface sent.
async fn dial(t: &Transport, addr: &str, class: &str) -> Result<Outbound, String> {
    let tcp = match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("dial timeout".into()),
    };
    let _ = tcp.set_nodelay(true);
    bound_unacked(&tcp, USER_TIMEOUT);
    let upgrade = t.upgrade.lock().clone();
    let mut s: Outbound = match upgrade {
        Some(upgrade) => upgrade(tcp, addr.to_string()).await?,
        None => Box::new(tcp),
    };
    let pre = serde_json::to_string(&Preface {
        peer: t.me,
        class: class.into(),
    })
    .expect("preface serializes");
    let line = format!("RAFT {pre}\r\n");
    let write = async {
        s.write_all(line.as_bytes()).await?;
        s.flush().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => Ok(s),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("preface write timeout".into()),
    }
}

fn drop_queue(lane: &Lane, t: &Transport) {
    let mut q = lane.queue.lock();
    let mut k = 0u64;
    while q.pop().is_some() {
        k += 1;
    }
    t.counters.dropped.fetch_add(k, Ordering::Relaxed);
}
