//! What the cluster driver sees of the core server, and all it touches:
//! this server's name and tags, the cluster's name, the peers routes
//! reach and the routes configured, the hello it gossips on routes, the
//! route port's Raft connections and TLS, and shutdown. Everything else
//! of the core it reaches through `flotilla_core::bus`, as `js` does.
//! This file is the only one in `jscluster` that names `Server`.

use std::sync::Arc;

use flotilla_core::server::Server;
use protocol::route::FlotillaHello;
use tokio::sync::watch;

/// A JetStream server reachable over a route.
#[derive(Debug, Clone)]
pub(super) struct RoutedPeer {
    pub id: u64,
    pub name: String,
    /// `host:port` of its route listener (Raft connections go there too).
    pub addr: String,
    pub hello: FlotillaHello,
}

/// The cluster driver's view of the core server.
#[derive(Clone)]
pub struct ClusterView(Arc<Server>);

impl ClusterView {
    pub fn new(server: Arc<Server>) -> ClusterView {
        ClusterView(server)
    }

    /// The system account's bus, if the server has one: where the meta
    /// group's operator API listens (nats-server answers it to the
    /// system account alone).
    pub fn system_bus(&self) -> Option<flotilla_core::bus::Bus> {
        let opts = self.0.opts();
        let account = opts.system_account()?;
        Some(flotilla_core::bus::Bus::named(self.0.clone(), account))
    }

    /// This server's name (`server_name`, or its id).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// This server's `server_tags`, as configured now.
    pub fn tags(&self) -> Vec<String> {
        self.0.opts().server_tags.clone()
    }

    /// The cluster's name: configured, or agreed with the routes.
    pub fn cluster_name(&self) -> String {
        self.0.routes.cluster_name().0
    }

    /// Whether every configured route resolved, and how many servers they
    /// name besides this one.
    pub fn configured_routes(&self) -> (bool, usize) {
        self.0.routes.configured_view(&self.0.opts().cluster.routes)
    }

    /// The JetStream servers this server has routes to: those whose route
    /// carried a hello.
    pub(super) fn routed_peers(&self) -> Vec<RoutedPeer> {
        self.0
            .routes
            .routes()
            .iter()
            .filter_map(|r| {
                let hello = r.hello.lock().clone()?;
                Some(RoutedPeer {
                    id: hello.peer,
                    name: r.remote_name.clone(),
                    addr: flotilla_core::route::host_port(&r.url)?,
                    hello,
                })
            })
            .collect()
    }

    /// What this server tells its routes of its JetStream peer.
    pub fn set_hello(&self, hello: FlotillaHello) {
        self.0.set_hello(Some(hello));
    }

    /// `poke` runs whenever a route comes or goes, or a peer's hello
    /// changes. Set once.
    pub fn on_routes_changed(&self, poke: Box<dyn Fn() + Send + Sync>) {
        let set = self.0.on_routes_changed.set(poke);
        assert!(set.is_ok(), "one JetStream cluster per server");
    }

    /// Raft connections arriving on the route port go to `transport`.
    /// Set once.
    pub fn serve_raft(&self, transport: Arc<cluster::transport::Transport>) {
        let set = self.0.raft.set(Arc::new(RaftPort(transport)));
        assert!(set.is_ok(), "one JetStream cluster per server");
    }

    /// What the Raft transport does to each connection it dials: the
    /// route port's TLS handshake when `cluster { tls {} }` is set (read
    /// at each dial, so a reload's certificates apply to the next
    /// connection).
    pub fn raft_upgrade(&self) -> cluster::transport::Upgrade {
        let server = Arc::downgrade(&self.0);
        Arc::new(move |tcp, host_port| {
            let tls = server.upgrade().and_then(|s| s.route_tls());
            Box::pin(async move {
                let Some(tls) = tls else {
                    return Ok(Box::new(tcp) as cluster::transport::Outbound);
                };
                match tls.connect(tcp, &host_port).await {
                    Ok(stream) => Ok(Box::new(stream) as cluster::transport::Outbound),
                    Err(e) => {
                        let line = format!("{host_port} - TLS route handshake error: {e}");
                        cluster::repeats::TRANSPORT.error(&line, &line);
                        Err(e)
                    }
                }
            })
        })
    }

    /// Changes to `true` when the server shuts down.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.0.shutdown_signal()
    }
}

/// The Raft transport behind the route port (`flotilla_core::server::RaftPort`).
struct RaftPort(Arc<cluster::transport::Transport>);

impl flotilla_core::server::RaftPort for RaftPort {
    fn accept(
        &self,
        rd: Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        json: Vec<u8>,
        rest: bytes::BytesMut,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let transport = self.0.clone();
        Box::pin(async move { transport.accept_after_preface(rd, &json, &rest).await })
    }
}
