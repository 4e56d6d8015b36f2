//! The tasks that run connections, on tokio: accepting clients
//! ([`accept_clients`]), one client connection's reader (`client`) and
//! writer (`writer`), routing what it publishes (`delivery`), and routes:
//! one route connection (`route`), listening for and dialing them
//! (`routes`). They act on the shared state in `client`, `route` and
//! `server`, which never call back into them.

pub mod client;
pub mod delivery;
pub mod leaf;
pub mod route;
pub mod routes;
pub mod websocket;
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

/// Accepts WebSocket clients on `listener` until the server stops
/// accepting.
pub async fn accept_websocket(server: Arc<Server>, listener: TcpListener) {
    let stop = server.accepting_stopped();
    accept_until(listener, stop, "Websocket", |stream, addr| {
        let cid = server.next_cid();
        tokio::spawn(websocket::serve(server.clone(), stream, addr, cid));
    })
    .await;
}

/// Accepts leaf node connections on `listener` until the server stops
/// accepting.
pub async fn accept_leafnodes(server: Arc<Server>, listener: TcpListener) {
    let stop = server.accepting_stopped();
    accept_until(listener, stop, "Leafnode", |stream, addr| {
        tokio::spawn(leaf::accept(server.clone(), stream, addr));
    })
    .await;
}

/// Accepts connections on `listener` until `stop` changes, handing each
/// to `serve`. `kind` names them in the log ("Client", "Route").
async fn accept_until(
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
