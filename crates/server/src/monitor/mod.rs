//! HTTP monitoring: `/varz`, `/connz`, `/subsz`, `/jsz`, `/healthz`, `/routez`, `/leafz`,
//! with nats-server's JSON field names, query parameters and errors.

mod connz;
pub mod format;
mod jsz;
mod leafz;
mod query;
pub(crate) mod raftz;
mod routez;
mod subsz;
mod varz;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCESS_CONTROL_ALLOW_ORIGIN, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpListener;
use tracing::debug;

pub use connz::ClosedConn;
use query::{Query, QueryError};

use flotilla_core::server::Server;

type Body = Full<Bytes>;

fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut()
        .insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    r
}

fn pretty<T: Serialize>(v: &T) -> Response<Body> {
    json_response(
        StatusCode::OK,
        serde_json::to_vec_pretty(v).expect("monitoring types serialize"),
    )
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn bad_request(e: QueryError) -> Response<Body> {
    text(StatusCode::BAD_REQUEST, e.0, "text/plain; charset=utf-8")
}

/// What monitoring shows beside the core server: closed connections
/// (kept from when monitoring starts), and JetStream once it runs.
#[derive(Default)]
pub struct Services {
    closed: parking_lot::Mutex<std::collections::VecDeque<ClosedConn>>,
    pub js: std::sync::OnceLock<Arc<jsdriver::js::JetStream>>,
    pub jc: std::sync::OnceLock<Arc<jsdriver::jscluster::JsCluster>>,
}

/// Closed connections kept for `/connz?state=closed`.
const CLOSED_RING: usize = 10_000;

impl Services {
    /// Monitoring's state, told of every connection that closes.
    pub fn install(server: &Server) -> Arc<Services> {
        let services = Arc::new(Services::default());
        let keep = Arc::downgrade(&services);
        let hook: flotilla_core::server::ClosedHook = Box::new(move |client, subs| {
            let Some(services) = keep.upgrade() else {
                return;
            };
            let closed = ClosedConn::capture(client, subs);
            let mut ring = services.closed.lock();
            if ring.len() == CLOSED_RING {
                ring.pop_front();
            }
            ring.push_back(closed);
        });
        let _ = server.on_close.set(hook);
        services
    }
}

struct Monitor {
    server: Arc<Server>,
    services: Arc<Services>,
    cpu: varz::CpuSampler,
}

impl Monitor {
    fn count(&self, path: &str) {
        *self
            .server
            .http_req_stats
            .lock()
            .entry(path.to_string())
            .or_default() += 1;
    }

    async fn handle(&self, req: &Request<Incoming>) -> Response<Body> {
        let q = Query::parse(req.uri().query());
        match req.uri().path() {
            "/jsz" => match jsz::jsz(&self.server, &self.services, &q).await {
                Ok(j) => {
                    self.count("/jsz");
                    pretty(&j)
                }
                Err(e) => bad_request(e),
            },
            "/" => {
                self.count("/");
                text(StatusCode::OK, root_page(), "text/html; charset=utf-8")
            }
            "/varz" => {
                self.count("/varz");
                pretty(&varz::varz(&self.server, &self.services, &self.cpu))
            }
            "/connz" => match connz::connz(&self.server, &self.services, &q) {
                Ok(c) => {
                    self.count("/connz");
                    pretty(&c)
                }
                Err(e) => bad_request(e),
            },
            "/subsz" | "/subscriptionsz" => {
                self.count("/subsz");
                match subsz::subsz(&self.server, &q) {
                    Ok(s) => pretty(&s),
                    Err(e) => bad_request(e),
                }
            }
            "/routez" => {
                let subs = match q.subs() {
                    Ok((subs, detail)) => subs || detail,
                    Err(e) => return bad_request(e),
                };
                self.count("/routez");
                pretty(&routez::routez(&self.server, subs))
            }
            "/leafz" => {
                let subs = match q.subs() {
                    Ok((subs, detail)) => subs || detail,
                    Err(e) => return bad_request(e),
                };
                self.count("/leafz");
                pretty(&leafz::leafz(&self.server, subs, q.get("acc")))
            }
            "/raftz" => {
                self.count("/raftz");
                match raftz::raftz(&self.server, &self.services, q.get("acc"), q.get("group")) {
                    Some(groups) => pretty(&groups),
                    None => text(
                        StatusCode::NOT_FOUND,
                        "No Raft nodes registered".into(),
                        "text/plain; charset=utf-8",
                    ),
                }
            }
            "/healthz" => {
                self.count("/healthz");
                self.healthz(&q)
            }
            _ => text(
                StatusCode::NOT_FOUND,
                "404 page not found\n".into(),
                "text/plain; charset=utf-8",
            ),
        }
    }

    fn healthz(&self, q: &Query) -> Response<Body> {
        for flag in [
            "js-enabled",
            "js-enabled-only",
            "js-server-only",
            "js-meta-only",
            "details",
        ] {
            if let Err(e) = q.bool(flag) {
                return bad_request(e);
            }
        }
        let server_only = q.bool("js-server-only").unwrap_or(false);
        let enabled_only = q.bool("js-enabled-only").unwrap_or(false);
        let (status, body) = if self.server.is_shutting_down() {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Health {
                    status: "error",
                    error: Some("failed to be ready for connections after 1ms: server".into()),
                },
            )
        } else if let Some(e) = (!server_only && !enabled_only)
            .then(|| meta_health(&self.server, &self.services))
            .flatten()
        {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Health {
                    status: "unavailable",
                    error: Some(e),
                },
            )
        } else {
            (
                StatusCode::OK,
                Health {
                    status: "ok",
                    error: None,
                },
            )
        };
        json_response(status, serde_json::to_vec(&body).expect("json"))
    }
}

/// `/healthz`'s body, in nats-server's field order.
#[derive(Serialize)]
struct Health {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Why a clustered JetStream server is not healthy, in nats-server's
/// words: its Raft node must be running; it must know a meta leader, and
/// a follower must have heard from it lately and applied what is
/// committed; and every stream assigned to it must be current (see
/// [`stream_health`]).
fn meta_health(server: &Server, services: &Services) -> Option<String> {
    let _ = server;
    let jc = services.jc.get()?;
    let status = jc.node.status();
    if !status.running {
        return Some("JetStream raft node stopped (a log write failed)".into());
    }
    let Some(g) = jc.meta_status().filter(|g| g.leader != 0) else {
        return Some("JetStream has not established contact with a meta leader".into());
    };
    if !g.is_leader {
        let heard = jc.node.transport.last_heard(g.leader);
        let current = heard.is_some_and(|d| d <= std::time::Duration::from_secs(2))
            && g.applied >= g.committed;
        if !current {
            return Some("JetStream is not current with the meta leader".into());
        }
    }
    let assigned: Vec<(String, u64, usize)> = jc
        .meta
        .lock()
        .streams()
        .filter(|a| a.peers.contains(&jc.me.id))
        .map(|a| (a.name.clone(), a.group, a.peers.len()))
        .collect();
    for (name, group, replicas) in assigned {
        let g = status.groups.iter().find(|g| g.group == group);
        if let Some(why) = stream_health(jc, g, replicas) {
            return Some(format!(
                "JetStream stream {} is not current: {why}",
                jc.js.label(&name)
            ));
        }
    }
    None
}

/// nats-server's reasons a stream replica is not current.
fn stream_health(
    jc: &jsdriver::jscluster::JsCluster,
    g: Option<&cluster::node::GroupStatus>,
    replicas: usize,
) -> Option<&'static str> {
    let Some(g) = g else {
        return Some("group node missing");
    };
    if replicas <= 1 || g.is_leader {
        return None;
    }
    if g.leader == 0 {
        return Some("group node unhealthy");
    }
    let heard = jc.node.transport.last_heard(g.leader);
    let current =
        heard.is_some_and(|d| d <= std::time::Duration::from_secs(2)) && g.applied >= g.committed;
    (!current).then_some("stream catching up")
}

fn root_page() -> String {
    let links = [
        ("General", "varz"),
        ("Connections", "connz"),
        ("Subscriptions", "subsz"),
        ("Routes", "routez"),
        ("LeafNodes", "leafz"),
        ("JetStream", "jsz"),
        ("Health Probe", "healthz"),
    ];
    let mut html = String::from("<html lang=\"en\"><head><title>flotilla</title></head><body>\n");
    html.push_str(&format!(
        "<h1>flotilla</h1><p>nats-server v{} compatible</p>\n",
        protocol::NATS_VERSION
    ));
    for (label, path) in links {
        html.push_str(&format!(
            "<a href=./{path}>{label} <span>/{path}</span></a><br/>\n"
        ));
    }
    html.push_str("</body></html>\n");
    html
}

/// Serves monitoring on `listener` until the server shuts down; over
/// TLS (`https_port`) when `secure`, with the client TLS certificate and
/// no client certificate asked for, as nats-server does.
pub async fn serve(
    server: Arc<Server>,
    services: Arc<Services>,
    listener: TcpListener,
    secure: bool,
) {
    let monitor = Arc::new(Monitor {
        server: server.clone(),
        services,
        cpu: varz::CpuSampler::new(),
    });
    let mut shutdown = server.shutdown_signal();
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.changed() => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    debug!("monitoring accept error: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let monitor = monitor.clone();
        let tls = secure.then(|| server.monitor_tls()).flatten();
        // The client TLS settings, without client certificates: none are
        // asked for, so none are pinned.
        let options = server
            .opts()
            .tls
            .as_ref()
            .map(|t| config::options::TlsOptions {
                pinned_certs: Default::default(),
                ..t.clone()
            });
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let monitor = monitor.clone();
                async move { Ok::<_, Infallible>(monitor.handle(&req).await) }
            });
            let http = hyper::server::conn::http1::Builder::new();
            match (tls, options) {
                (Some(config), Some(options)) => {
                    match auth::tls::accept(config, stream, &options).await {
                        Ok(stream) => {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                        Err(reason) => debug!("monitoring: {reason}"),
                    }
                }
                _ => {
                    let _ = http.serve_connection(TokioIo::new(stream), service).await;
                }
            }
        });
    }
}
