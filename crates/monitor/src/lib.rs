//! HTTP monitoring: `/varz`, `/connz`, `/subsz`, `/jsz`, `/healthz`, `/routez`, `/leafz`, `/accountz`, `/accstatz`,
//! with nats-server's JSON field names, query parameters and errors.

mod accountz;
pub mod accstatz;
mod connz;
pub mod format;
mod gatewayz;
pub mod healthz;
pub mod ipqueuesz;
pub mod jsz;
mod leafz;
pub mod metrics;
pub mod query;
pub mod raftz;
mod routez;
mod subsz;
pub mod varz;

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
    /// JetStream, once it runs.
    pub js: std::sync::OnceLock<Arc<dyn JetStreamView>>,
}

/// What monitoring shows of JetStream, which JetStream's driver gives:
/// monitoring owns the shapes (nats-server's field names and order) and
/// the queries; the driver fills them from its state. Each is called on
/// a request's task, and must not block it.
pub trait JetStreamView: Send + Sync {
    /// `/varz`'s `jetstream` section.
    fn varz(&self) -> jsz::Varz;
    /// `/varz`'s `raft` counters; `None` when JetStream is not clustered.
    fn raft_varz(&self) -> Option<varz::RaftVarz>;
    /// `/jsz`, its query parsed.
    fn jsz<'a>(
        &'a self,
        server: &'a Server,
        opts: &'a jsz::JszOptions,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = jsz::JsInfo> + Send + 'a>>;
    /// `/raftz`, by account then group name; `None` when this server runs
    /// no Raft group.
    fn raftz(
        &self,
        acc: &str,
        group: &str,
    ) -> Option<
        std::collections::BTreeMap<String, std::collections::BTreeMap<String, raftz::RaftzGroup>>,
    >;
    /// Why JetStream makes this server unhealthy, in nats-server's words
    /// (its meta group, and its streams and consumers, or those `opts`
    /// names); empty when healthy.
    fn healthz<'a>(
        &'a self,
        opts: &'a healthz::HealthOptions,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<healthz::Issue>> + Send + 'a>>;
    /// Every Raft group this server runs, for `/metrics`.
    fn raft_groups(&self) -> Vec<metrics::RaftGroup> {
        Vec::new()
    }
    /// JetStream's queues of work, for `/ipqueuesz`.
    fn ipqueues(&self) -> Vec<(String, ipqueuesz::Queue)> {
        Vec::new()
    }
    /// How long durable writes took, for `/metrics`; `None` before any.
    fn write_latency(&self) -> Option<metrics::Histogram> {
        None
    }
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

/// The monitoring endpoints, answered for HTTP ([`serve`]) and for the
/// system account's requests (`$SYS.REQ.SERVER.PING.VARZ` and the rest,
/// which the `system` crate serves with the same data).
pub struct Endpoints {
    server: Arc<Server>,
    services: Arc<Services>,
    cpu: varz::CpuSampler,
}

/// The paths [`Endpoints::reply`] answers.
pub const ENDPOINTS: &[&str] = &[
    "/varz",
    "/connz",
    "/subsz",
    "/subscriptionsz",
    "/routez",
    "/leafz",
    "/raftz",
    "/healthz",
    "/accstatz",
    "/accountz",
    "/jsz",
    "/gatewayz",
    "/ipqueuesz",
];

/// An endpoint's answer.
pub enum Reply {
    /// Its JSON, with the HTTP status it goes out with.
    Json { status: u16, body: Vec<u8> },
    /// nats-server's error for a bad query (HTTP 400).
    BadRequest(String),
    /// Nothing to show (HTTP 404, as `/raftz` without Raft groups).
    NotFound(String),
}

impl Reply {
    fn of<T: Serialize>(v: &T, pretty: bool) -> Reply {
        let body = match pretty {
            true => serde_json::to_vec_pretty(v),
            false => serde_json::to_vec(v),
        };
        Reply::Json {
            status: 200,
            body: body.expect("monitoring types serialize"),
        }
    }

    fn or_bad<T: Serialize>(r: Result<T, QueryError>, pretty: bool) -> Reply {
        match r {
            Ok(v) => Reply::of(&v, pretty),
            Err(e) => Reply::BadRequest(e.0),
        }
    }
}

impl Endpoints {
    pub fn new(server: Arc<Server>, services: Arc<Services>) -> Self {
        Endpoints {
            server,
            services,
            cpu: varz::CpuSampler::default(),
        }
    }

    /// The answer of the endpoint at `path` (`/varz`, ...) to query `q`,
    /// its JSON indented when `pretty`; `None` for no such endpoint.
    pub async fn reply(&self, path: &str, q: &Query, pretty: bool) -> Option<Reply> {
        let (server, services) = (&self.server, &self.services);
        let reply = match path {
            "/jsz" => Reply::or_bad(jsz::jsz(server, services, q).await, pretty),
            "/varz" => Reply::of(&varz::varz(server, services, &self.cpu), pretty),
            "/connz" => Reply::or_bad(connz::connz(server, services, q), pretty),
            "/subsz" | "/subscriptionsz" => Reply::or_bad(subsz::subsz(server, q), pretty),
            "/routez" => match q.subs() {
                Ok((subs, detail)) => Reply::of(&routez::routez(server, subs || detail), pretty),
                Err(e) => Reply::BadRequest(e.0),
            },
            "/leafz" => match q.subs() {
                Ok((subs, detail)) => {
                    Reply::of(&leafz::leafz(server, subs || detail, q.get("acc")), pretty)
                }
                Err(e) => Reply::BadRequest(e.0),
            },
            "/raftz" => match raftz::raftz(services, q.get("acc"), q.get("group")) {
                Some(groups) => Reply::of(&groups, pretty),
                None => Reply::NotFound("No Raft nodes registered".into()),
            },
            "/healthz" => self.healthz(q).await,
            "/accstatz" => Reply::or_bad(accstatz::accstatz(server, q), pretty),
            "/accountz" => Reply::or_bad(accountz::accountz(server, q), pretty),
            "/gatewayz" => Reply::of(&gatewayz::gatewayz(server), pretty),
            "/ipqueuesz" => {
                let queues = services.js.get().map(|v| v.ipqueues()).unwrap_or_default();
                Reply::or_bad(ipqueuesz::ipqueuesz(queues, q), pretty)
            }
            _ => return None,
        };
        Some(reply)
    }

    /// `/metrics`' page (see [`metrics`]).
    pub async fn metrics(&self) -> String {
        let json = |reply: Option<Reply>| match reply {
            Some(Reply::Json { body, .. }) => serde_json::from_slice(&body).ok(),
            _ => None,
        };
        let none = Query::parse(None);
        let varz = json(self.reply("/varz", &none, false).await).unwrap_or_default();
        let view = self.services.js.get();
        let jsz = match view {
            Some(_) => {
                let q = Query::parse(Some(
                    "accounts=true&streams=true&consumers=true&config=true",
                ));
                json(self.reply("/jsz", &q, false).await)
            }
            None => None,
        };
        let healthy = matches!(self.healthz(&none).await, Reply::Json { status: 200, .. });
        let sources = metrics::Sources {
            varz,
            jsz,
            healthy,
            raft: view.map(|v| v.raft_groups()).unwrap_or_default(),
            write_latency: view.and_then(|v| v.write_latency()),
        };
        metrics::render(&sources)
    }

    /// `/healthz` (see [`healthz`]).
    async fn healthz(&self, q: &Query) -> Reply {
        let asked = match healthz::Asked::parse(q) {
            Ok(asked) => asked,
            Err(e) => return Reply::BadRequest(e.0),
        };
        let view = self.services.js.get();
        let issues: Vec<healthz::Issue> = if let Some(bad) = asked.bad_request() {
            vec![bad]
        } else if self.server.is_shutting_down() {
            let error = "failed to be ready for connections after 1ms: server".to_string();
            vec![healthz::Issue {
                status: 500,
                ..healthz::Issue::new(healthz::Kind::Connection, ["", "", ""], error)
            }]
        } else {
            match view {
                Some(view) if !asked.server_only && !asked.enabled_only => {
                    view.healthz(&asked.js).await
                }
                _ => Vec::new(),
            }
        };
        let (status, body) = healthz::answer(&issues, asked.details);
        Reply::Json { status, body }
    }
}

/// `http_base_path` as nats-server's `normalizeBasePath` makes it: a
/// leading `/`, cleaned; empty is `/`.
fn base_path(given: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in given.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The endpoint a request path names under `base` (`/` alone for the
/// base itself, the root page); `None` outside it.
fn under_base<'a>(base: &str, path: &'a str) -> Option<&'a str> {
    if base == "/" {
        return Some(path);
    }
    match path.strip_prefix(base)? {
        "" => Some("/"),
        rest if rest.starts_with('/') && rest != "/" => Some(rest),
        _ => None,
    }
}

struct Monitor {
    server: Arc<Server>,
    endpoints: Endpoints,
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
        let base = base_path(&self.server.opts().http_base_path);
        let Some(path) = under_base(&base, req.uri().path()) else {
            return text(
                StatusCode::NOT_FOUND,
                "404 page not found\n".into(),
                "text/plain; charset=utf-8",
            );
        };
        if path == "/" {
            self.count("/");
            return text(StatusCode::OK, root_page(), "text/html; charset=utf-8");
        }
        if path == "/metrics" {
            self.count(path);
            let page = self.endpoints.metrics().await;
            return text(
                StatusCode::OK,
                page,
                "text/plain; version=0.0.4; charset=utf-8",
            );
        }
        // Counted before it is answered, so `/varz` counts itself.
        if ENDPOINTS.contains(&path) {
            self.count(if path == "/subscriptionsz" {
                "/subsz"
            } else {
                path
            });
        }
        match self.endpoints.reply(path, &q, true).await {
            None => text(
                StatusCode::NOT_FOUND,
                "404 page not found\n".into(),
                "text/plain; charset=utf-8",
            ),
            Some(Reply::BadRequest(e)) => bad_request(QueryError(e)),
            Some(Reply::NotFound(why)) => {
                text(StatusCode::NOT_FOUND, why, "text/plain; charset=utf-8")
            }
            Some(Reply::Json { status, body }) => {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
                json_response(status, body)
            }
        }
    }
}

fn root_page() -> String {
    let links = [
        ("General", "varz"),
        ("Connections", "connz"),
        ("Subscriptions", "subsz"),
        ("Routes", "routez"),
        ("LeafNodes", "leafz"),
        ("Accounts", "accountz"),
        ("Account Stats", "accstatz"),
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
        endpoints: Endpoints::new(server.clone(), services),
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
