//! The tasks that run client connections, on tokio: accepting clients
//! ([`accept_clients`]), one client connection's reader (`client`) and
//! writer (`writer`), and routing what any connection publishes
//! (`delivery`). They act on the shared state in `client`, `route`,
//! `leaf` and `server`, which never call back into them. The other
//! connection surfaces (routes, leaf nodes, WebSocket) run in crates of
//! their own on these same pieces, and accept with [`accept_until`].

pub mod client;
pub mod delivery;
pub mod writer;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::server::Server;

/// Accepts client connections on `listener`, each served on its own task,
/// until the server stops accepting (lame duck, shutdown).
pub async fn accept_clients(server: Arc<Server>, listener: TcpListener) {
    let stop = server.accepting_stopped();
    accept_until(listener, stop, "Client", |stream, addr| {
        let cid = server.next_cid();
        tokio::spawn(client::serve(server.clone(), stream, addr, cid));
    })
    .await;
}

/// Accepts connections on `listener` until `stop` changes, handing each
/// to `serve`. `kind` names them in the log ("Client", "Route").
pub async fn accept_until(
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    kind: &str,
    mut serve: impl FnMut(TcpStream, SocketAddr),
) {
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => serve(stream, addr),
                Err(e) => {
                    // Out of file descriptors and similar: back off
                    // instead of spinning, as nats-server does.
                    warn!("Temporary {kind} Accept Error ({e}), sleeping 10ms");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
    debug!("{kind} accept loop exiting");
}
