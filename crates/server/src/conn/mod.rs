//! The tasks that run connections, on tokio: accepting clients
//! ([`accept_clients`]), one client connection's reader (`client`) and
//! writer (`writer`), routing what it publishes (`delivery`), and routes:
//! one route connection (`route`), listening for and dialing them
//! (`routes`). They act on the shared state in `client`, `route` and
//! `server`, which never call back into them.

pub mod client;
pub mod delivery;
pub mod route;
pub mod routes;
pub mod writer;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tracing::{debug, warn};

use crate::server::Server;

/// Accepts client connections on `listener`, each served on its own task,
/// until the server stops accepting (lame duck, shutdown).
pub async fn accept_clients(server: Arc<Server>, listener: TcpListener) {
    let mut stop = server.accepting_stopped();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let cid = server.next_cid();
                    tokio::spawn(client::serve(server.clone(), stream, addr, cid));
                }
                Err(e) => {
                    // Out of file descriptors and similar: back off
                    // instead of spinning, as nats-server does.
                    warn!("Temporary Client Accept Error ({e}), sleeping 10ms");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
    debug!("client accept loop exiting");
}
