//! Listening for routes and dialing them: the cluster port's accept loop,
//! one dial loop per route URL (configured, or learned through gossip),
//! and telling clients of the cluster's URLs when they change. One route
//! connection runs in `route`; the registry every task shares (one route
//! per server pair, interest propagation) is `flotilla_core::route`,
//! which delivery consults.

pub mod route;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, error, info, warn};

use crate::route::RouteStream;
use flotilla_core::client::Client;
use flotilla_core::route::{creds, host_port};
use flotilla_core::server::Server;

/// Wait between dial attempts, and before redialing a dropped route
/// (nats-server's DEFAULT_ROUTE_CONNECT and DEFAULT_ROUTE_RECONNECT).
const RETRY: Duration = Duration::from_secs(1);
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// Random extra wait before a redial, so two servers that lost the same
/// route do not dial each other in lockstep.
const JITTER_MS: u64 = 100;
/// Attempts for a route learned through gossip before giving up on it
/// (the server it names dials its configured routes itself).
const IMPLICIT_ATTEMPTS: u32 = 3;

/// Binds the cluster port and starts accepting routes and dialing the
/// configured ones.
pub async fn start(server: Arc<Server>) -> std::io::Result<()> {
    let opts = server.opts();
    let host = opts
        .cluster
        .host
        .clone()
        .unwrap_or_else(|| "0.0.0.0".into());
    let port = match opts.cluster.port {
        Some(p) if p > 0 => p as u16,
        _ => 0,
    };
    let listener = TcpListener::bind((host.as_str(), port)).await?;
    let bound = listener.local_addr()?.port();
    server.routes.port.store(bound as u64, Ordering::Relaxed);
    let (name, dynamic) = server.routes.cluster_name();
    info!("Cluster name is {name}");
    if dynamic {
        warn!("Cluster name was dynamically generated, consider setting one");
    }
    info!("Listening for route connections on {host}:{bound}");
    tokio::spawn(accept_loop(server.clone(), listener));
    for url in &opts.cluster.routes {
        solicit(server.clone(), url.clone(), true);
    }
    Ok(())
}

async fn accept_loop(server: Arc<Server>, listener: TcpListener) {
    let stop = server.shutdown_signal();
    flotilla_core::conn::accept_until(listener, stop, "Route", |stream, addr| {
        let server = server.clone();
        tokio::spawn(async move {
            let Some(stream) = secure(&server, stream, addr, None).await else {
                return;
            };
            crate::route::serve(server, stream, addr, None).await;
        });
    })
    .await;
}

/// `stream` as the route port speaks: plain, or after a TLS handshake,
/// the client side of it if this server dialed `dialed` (`host:port`).
/// A failed handshake is logged, as nats-server logs it, and ends the
/// connection.
async fn secure(
    server: &Server,
    stream: TcpStream,
    addr: std::net::SocketAddr,
    dialed: Option<&str>,
) -> Option<RouteStream> {
    let Some(tls) = server.route_tls() else {
        return Some(RouteStream::Plain(stream));
    };
    let handshake = match dialed {
        Some(host_port) => tls.connect(stream, host_port).await,
        None => tls.accept(stream).await,
    };
    match handshake {
        Ok(stream) => Some(RouteStream::Tls(Box::new(stream))),
        Err(e) => {
            // A peer refused once is refused on every redial: logged once
            // per window, by its address without the dialing port.
            let kind = format!("{} - TLS route handshake error: {e}", addr.ip());
            let line = format!("{addr} - TLS route handshake error: {e}");
            cluster::repeats::TRANSPORT.error(&kind, &line);
            None
        }
    }
}

/// Dials `url` and keeps a route to it: a configured route forever
/// (redialing whenever no route to its server is up), a gossiped one a
/// few times.
pub fn solicit(server: Arc<Server>, url: String, configured: bool) {
    if !configured && !server.routes.start_dialing(&url) {
        return;
    }
    tokio::spawn(async move {
        dial_loop(&server, &url, configured).await;
        if !configured {
            server.routes.stop_dialing(&url);
        }
    });
}

async fn dial_loop(server: &Arc<Server>, url: &str, configured: bool) {
    let Some(hp) = host_port(url) else {
        error!("error parsing route url [{url:?}]");
        return;
    };
    let mut attempt: u32 = 0;
    let mut reconnecting = false;
    // A gossiped route is not dialed if it is one this server is
    // configured to dial anyway.
    if !configured
        && server
            .opts()
            .cluster
            .routes
            .iter()
            .any(|r| host_port(r).as_deref() == Some(hp.as_str()))
    {
        return;
    }
    loop {
        if server.is_shutting_down() {
            return;
        }
        debug!("Trying to connect to route on {hp}");
        let dialed = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(&hp)).await;
        let stream = match dialed {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                attempt += 1;
                dial_failed(attempt, reconnecting, &e.to_string());
                if !configured && attempt >= implicit_attempts(server) {
                    return;
                }
                tokio::time::sleep(RETRY).await;
                continue;
            }
            Err(_) => {
                attempt += 1;
                dial_failed(
                    attempt,
                    reconnecting,
                    &format!("dial tcp {hp}: i/o timeout"),
                );
                if !configured && attempt >= implicit_attempts(server) {
                    return;
                }
                continue;
            }
        };
        attempt = 0;
        let addr = match stream.peer_addr() {
            Ok(a) => a,
            Err(_) => continue,
        };
        let Some(stream) = secure(server, stream, addr, Some(&hp)).await else {
            tokio::time::sleep(RETRY).await;
            continue;
        };
        let outcome = crate::route::serve(
            server.clone(),
            stream,
            addr,
            Some(crate::route::Dialed {
                url: url.to_string(),
                configured,
                creds: creds(url).or_else(|| {
                    let o = server.opts();
                    Some((o.cluster.user.clone()?, o.cluster.password.clone()?))
                }),
            }),
        )
        .await;
        match outcome {
            crate::route::Outcome::ToSelf => {
                debug!("Detected route to self, ignoring {url:?}");
                return;
            }
            crate::route::Outcome::Remote(id) => {
                if !configured {
                    // Kept by the other connection: nothing to do. Lost:
                    // dial again (a few times, as nats-server retries
                    // implicit routes), or a pair linked only through
                    // gossip would stay apart.
                    if server.routes.has(&id) {
                        return;
                    }
                } else {
                    // Another connection to the same server may be the
                    // one kept; dial again only once no route to it is up.
                    while server.routes.has(&id) && !server.is_shutting_down() {
                        tokio::time::sleep(RETRY).await;
                    }
                }
            }
            crate::route::Outcome::NoRoute => {
                if !configured {
                    attempt += 1;
                    if attempt >= implicit_attempts(server) {
                        return;
                    }
                }
            }
        }
        if server.is_shutting_down() {
            return;
        }
        reconnecting = true;
        debug!("Attempting reconnect for solicited route {url:?}");
        let jitter = Duration::from_millis(fastrand::u64(..JITTER_MS));
        tokio::time::sleep(RETRY + jitter).await;
    }
}

/// Attempts for a gossiped route: `connect_retries` + 1, and never fewer
/// than flotilla's floor (a pair linked only through gossip must find
/// each other again).
fn implicit_attempts(server: &Server) -> u32 {
    IMPLICIT_ATTEMPTS.max(server.opts().cluster.connect_retries.saturating_add(1))
}

/// nats-server logs the first failure of a first connect, and every
/// failure of a reconnect.
fn dial_failed(attempt: u32, reconnecting: bool, e: &str) {
    if attempt == 1 || reconnecting {
        error!("Error trying to connect to route (attempt {attempt}): {e}");
    } else {
        debug!("Error trying to connect to route (attempt {attempt}): {e}");
    }
}

/// Sends a fresh INFO to every client that takes asynchronous INFO, if
/// the `connect_urls` it carries changed: plain clients the client URLs,
/// WebSocket clients the WebSocket ones (`Server::websocket_info`), each
/// only when theirs changed.
pub fn send_info_to_clients(server: &Server) {
    let plain = server.info();
    let ws = server.websocket_info();
    let tell_plain = server.routes.tell_urls(&plain.connect_urls, false);
    let tell_ws = server.routes.tell_urls(&ws.connect_urls, true);
    if !tell_plain && !tell_ws {
        return;
    }
    let clients: Vec<Arc<Client>> = server.clients.lock().values().cloned().collect();
    let max_pending = server.opts().max_pending;
    for c in clients {
        let (tell, base) = match c.websocket {
            true => (tell_ws, &ws),
            false => (tell_plain, &plain),
        };
        if tell && c.async_info.load(Ordering::Relaxed) {
            let mut info = base.clone();
            info.client_id = Some(c.cid);
            info.client_ip = Some(c.addr.ip().to_string());
            let json = serde_json::to_vec(&info).expect("info serializes");
            c.out
                .push(max_pending, None, |b| protocol::encode::info(b, &json));
            c.out.flush();
        }
    }
}
