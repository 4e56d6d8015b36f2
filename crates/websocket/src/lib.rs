//! Clients over WebSocket (`websocket {}`): the TLS handshake when the
//! block has `tls`, then the HTTP upgrade, checked as nats-server's
//! `wsUpgrade` checks it, then the ordinary client connection
//! (`client::run`) over a byte stream carried in binary frames.
//!
//! Framing, masking, control frames and permessage-deflate are the
//! `yawc` crate's; this module only agrees on them. As in nats-server,
//! compression is agreed with no context takeover either way, whatever
//! parameters the client offered, and text frames are read like binary
//! ones.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tracing::error;
use yawc::close::CloseCode;
use yawc::{Frame, OpCode, Role, WebSocket};

use auth::tls::CertIdentity;
use config::file::websocket::split_host_port;
use config::options::{Origin, WebsocketOptions, WsCookies};
use flotilla_core::client::ClosedState;
use flotilla_core::conn::client::{self, CookieValues, Greeting};
use flotilla_core::server::Server;

/// The one extension reply nats-server gives an offer of
/// permessage-deflate.
const DEFLATE: &str = "permessage-deflate; server_no_context_takeover; client_no_context_takeover";
/// The GUID RFC 6455 appends to the key for `Sec-WebSocket-Accept`.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// An upgrade request longer than this is refused.
const MAX_REQUEST: usize = 16 * 1024;
/// How long an upgrade may take when `handshake_timeout` is not set
/// (nats-server waits forever).
const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages this small go out uncompressed (nats-server's
/// `wsCompressThreshold`).
const COMPRESS_THRESHOLD: usize = 64;
/// The largest message nats-server accepts compressed: eight payloads,
/// at most 64 MiB; flotilla holds uncompressed ones to the same bound.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// The pipe between the socket's task and the connection's, each way.
const PIPE: usize = 64 * 1024;
/// How long the socket's task waits, once the connection has written
/// its last, to hear why it closed before closing without a reason.
const REASON_WAIT: Duration = Duration::from_secs(1);
/// The longest close reason sent whole (RFC 6455 leaves 123 bytes for
/// it); a longer one is cut to 120 and ends in "..." (nats-server's
/// `wsCreateCloseMessage`).
const MAX_CLOSE_REASON: usize = 123;

/// Runs one WebSocket connection from accept to close.
/// Accepts WebSocket clients on `listener` until the server stops
/// accepting.
pub async fn accept_all(server: Arc<Server>, listener: tokio::net::TcpListener) {
    let stop = server.accepting_stopped();
    flotilla_core::conn::accept_until(listener, stop, "Websocket", |stream, addr| {
        let cid = server.next_cid();
        tokio::spawn(serve(server.clone(), stream, addr, cid));
    })
    .await;
}

pub async fn serve(server: Arc<Server>, stream: TcpStream, addr: SocketAddr, cid: u64) {
    let _ = stream.set_nodelay(true);
    let opts = server.opts();
    let ws = &opts.websocket;
    let (Some(tls), Some(config)) = (&ws.tls, server.websocket_tls()) else {
        return upgrade(server.clone(), stream, addr, cid, None, false).await;
    };
    match auth::tls::accept(config, stream, tls).await {
        Ok(stream) => {
            let cert = tls.map.then(|| CertIdentity::of(&stream)).flatten();
            upgrade(server.clone(), stream, addr, cid, cert, true).await
        }
        Err(reason) => error!("{addr} - wid:{cid} - {reason}"),
    }
}

/// The HTTP upgrade, then the client connection.
async fn upgrade<S>(
    server: Arc<Server>,
    mut stream: S,
    addr: SocketAddr,
    cid: u64,
    cert: Option<CertIdentity>,
    secure: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let opts = server.opts();
    let ws = &opts.websocket;
    let timeout = ws.handshake_timeout.unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT);
    let request = match tokio::time::timeout(timeout, read_request(&mut stream)).await {
        Ok(Ok(request)) => request,
        Ok(Err(e)) => {
            error!(
                "{addr} - wid:{cid} - websocket handshake error: {}",
                e.reason
            );
            if let Some(reply) = e.reply {
                let _ = stream.write_all(reply).await;
                let _ = stream.shutdown().await;
            }
            return;
        }
        Err(_) => return error!("{addr} - wid:{cid} - websocket handshake error: timeout"),
    };
    let agreed = match check(&request, ws, secure) {
        Ok(agreed) => agreed,
        Err(refusal) => {
            error!(
                "{addr} - wid:{cid} - websocket handshake error: {}",
                refusal.reason
            );
            let _ = stream.write_all(&refusal.response()).await;
            let _ = stream.shutdown().await;
            return;
        }
    };
    if stream.write_all(&agreed.response(ws)).await.is_err() {
        return;
    }
    let mut options = yawc::Options::default()
        .with_limits(max_message(opts.max_payload), max_message(opts.max_payload))
        .with_no_delay();
    if agreed.deflate {
        options = options.with_compression_threshold(COMPRESS_THRESHOLD);
    }
    let extensions = agreed.deflate.then_some(DEFLATE);
    let socket =
        match WebSocket::from_stream_with_extensions(stream, Role::Server, extensions, options) {
            Ok(socket) => socket,
            Err(e) => return error!("{addr} - wid:{cid} - websocket handshake error: {e}"),
        };
    let (closed, why) = oneshot::channel();
    let (rd, wr) = byte_stream(socket, why);
    let mut greeting = greeting(&server, cid, addr, cert);
    greeting.cookies = cookie_values(&request, &ws.cookies);
    let reason = client::run(server, cid, addr, greeting, rd, wr).await;
    let _ = closed.send(reason);
}

/// The close frame nats-server sends a client it closes
/// (`wsEnqueueCloseMessage`): the status for `reason` and its text, or
/// none when writing is what failed (it does not flush then either).
fn close_frame(reason: ClosedState) -> Option<Frame> {
    if !reason.flushes() {
        return None;
    }
    let code: u16 = match reason {
        ClosedState::ClientClosed => 1000,
        ClosedState::AuthenticationTimeout
        | ClosedState::AuthenticationViolation
        | ClosedState::AuthenticationExpired
        | ClosedState::MaxConnectionsExceeded
        | ClosedState::MaxAccountConnectionsExceeded
        | ClosedState::MaxControlLineExceeded
        | ClosedState::SlowConsumerPendingBytes
        | ClosedState::SlowConsumerWriteDeadline => 1008,
        ClosedState::ParseError
        | ClosedState::ProtocolViolation
        | ClosedState::BadClientProtocolVersion => 1002,
        ClosedState::MaxPayloadExceeded => 1009,
        ClosedState::WriteError
        | ClosedState::ReadError
        | ClosedState::StaleConnection
        | ClosedState::ServerShutdown => 1001,
        ClosedState::NoRespondersRequiresHeaders
        | ClosedState::DuplicateRoute
        | ClosedState::ClusterNameConflict
        | ClosedState::Kicked => 1011,
    };
    let text = reason.as_str();
    let text = match text.len() > MAX_CLOSE_REASON {
        true => format!("{}...", &text[..120]),
        false => text.to_string(),
    };
    Some(Frame::close(CloseCode::from(code), text))
}

/// The compressed or uncompressed size a message may have.
fn max_message(max_payload: usize) -> usize {
    max_payload
        .saturating_mul(8)
        .clamp(1024 * 1024, MAX_MESSAGE)
}

/// The socket as the byte stream the client protocol reads and writes:
/// the payloads of data frames in, one binary frame per read of the
/// pipe out. One task owns the socket: split between a reader and a
/// writer task, its halves would take turns registering for the same
/// socket's readiness, and a frame could wait unread.
fn byte_stream<S>(
    socket: WebSocket<S>,
    why: oneshot::Receiver<ClosedState>,
) -> (
    impl AsyncRead + Unpin + Send + 'static,
    impl AsyncWrite + Unpin + Send + 'static,
)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(PIPE);
    tokio::spawn(pump(socket, theirs, why));
    tokio::io::split(ours)
}

/// Moves bytes between the socket and the pipe until either ends: a
/// close frame or a protocol error from the client, or the connection
/// dropping its end, after which the client is sent the close frame for
/// why the connection closed (`why`, [`close_frame`]).
async fn pump<S>(
    mut socket: WebSocket<S>,
    mut pipe: DuplexStream,
    mut why: oneshot::Receiver<ClosedState>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut out = BytesMut::with_capacity(PIPE);
    loop {
        tokio::select! {
            frame = socket.next() => match frame {
                Some(frame) if is_data(frame.opcode()) => {
                    if pipe.write_all(frame.payload()).await.is_err() {
                        break;
                    }
                }
                // Pings are answered by yawc; pongs mean nothing.
                Some(frame) if frame.opcode() != OpCode::Close => {}
                // yawc queued the echo of a close: it goes out first.
                Some(_) => {
                    let _ = socket.flush().await;
                    break;
                }
                None => break,
            },
            read = pipe.read_buf(&mut out) => match read {
                Ok(n) if n > 0 => {
                    let bytes = out.split().freeze();
                    if socket.send(Frame::binary(bytes)).await.is_err() {
                        break;
                    }
                }
                _ => {
                    let reason = tokio::time::timeout(REASON_WAIT, &mut why).await;
                    let frame = match reason {
                        Ok(Ok(reason)) => close_frame(reason),
                        _ => Some(Frame::close(CloseCode::Normal, [])),
                    };
                    if let Some(frame) = frame {
                        let _ = socket.send(frame).await;
                        let _ = socket.close().await;
                    }
                    break;
                }
            },
        }
    }
}

fn is_data(opcode: OpCode) -> bool {
    matches!(opcode, OpCode::Text | OpCode::Binary | OpCode::Continuation)
}

/// INFO for this client: the WebSocket listener's, sent as the first
/// frame.
fn greeting(server: &Server, cid: u64, addr: SocketAddr, cert: Option<CertIdentity>) -> Greeting {
    let (bytes, nonce) = client::info_for(server, server.websocket_info(), cid, addr);
    Greeting {
        nonce,
        cert,
        bytes,
        cookies: None,
        websocket: true,
    }
}

/// The cookies of `request` that `names` names: `None` when the config
/// names no cookie or the request sends none of those named.
fn cookie_values(request: &Request, names: &WsCookies) -> Option<CookieValues> {
    let mut values = CookieValues::default();
    for (name, value) in request.cookies() {
        let slot = |wanted: &Option<String>| wanted.as_deref() == Some(name);
        let value = Some(value.to_string());
        if slot(&names.jwt) {
            values.jwt = value;
        } else if slot(&names.user) {
            values.user = value;
        } else if slot(&names.pass) {
            values.pass = value;
        } else if slot(&names.token) {
            values.token = value;
        }
    }
    (values != CookieValues::default()).then_some(values)
}

/// The parts of an upgrade request that are checked.
#[derive(Debug, Default)]
struct Request {
    method: String,
    /// Header names lowercased, in the order sent.
    headers: Vec<(String, String)>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether any value of `name`, split at commas, is `token`
    /// (ignoring case), as nats-server's `wsHeaderContains`.
    /// The `Cookie` headers' `name=value` pairs, a quoted value unquoted
    /// (as Go's `Request.Cookies`).
    fn cookies(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers
            .iter()
            .filter(|(name, _)| name == "cookie")
            .flat_map(|(_, value)| value.split(';'))
            .filter_map(|pair| {
                let (name, value) = pair.trim().split_once('=')?;
                let value = value.trim();
                let value = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(value);
                Some((name.trim(), value))
            })
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }
}

/// An upgrade request that could not be read: why, and what the client
/// is told, as Go's HTTP server answers a request it cannot parse (it
/// never reaches nats-server's `wsUpgrade`). A client that went away or
/// did not wait for the upgrade is told nothing.
struct Unreadable {
    reason: String,
    reply: Option<&'static [u8]>,
}

const BAD_REQUEST: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request";
const TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large";

impl Unreadable {
    fn silent(reason: impl Into<String>) -> Unreadable {
        Unreadable {
            reason: reason.into(),
            reply: None,
        }
    }
}

/// Reads the request up to its blank line. Bytes after it mean the
/// client did not wait for the upgrade: refused, as nats-server does.
async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Request, Unreadable> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let mut chunk = [0u8; 1024];
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| Unreadable::silent(e.to_string()))?;
        if n == 0 {
            return Err(Unreadable::silent("connection closed during the upgrade"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                if len != buf.len() {
                    return Err(Unreadable::silent(
                        "client sent data before handshake is complete",
                    ));
                }
                return Ok(Request {
                    method: parsed.method.unwrap_or_default().to_string(),
                    headers: parsed
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_ascii_lowercase(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect(),
                });
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_REQUEST => continue,
            Ok(httparse::Status::Partial) => {
                return Err(Unreadable {
                    reason: "request too large".into(),
                    reply: Some(TOO_LARGE),
                })
            }
            Err(e) => {
                return Err(Unreadable {
                    reason: format!("invalid request: {e}"),
                    reply: Some(BAD_REQUEST),
                })
            }
        }
    }
}

/// What the client and server agreed on.
#[derive(Debug)]
struct Agreed {
    accept: String,
    deflate: bool,
    no_masking: bool,
}

impl Agreed {
    fn response(&self, ws: &WebsocketOptions) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n",
            self.accept
        );
        if self.deflate {
            out.push_str(&format!("Sec-WebSocket-Extensions: {DEFLATE}\r\n"));
        }
        if self.no_masking {
            out.push_str("Nats-No-Masking: true\r\n");
        }
        for (name, value) in &ws.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("\r\n");
        out.into_bytes()
    }
}

/// A refused upgrade: the status and why.
#[derive(Debug)]
struct Refusal {
    status: u16,
    reason: String,
}

impl Refusal {
    fn new(status: u16, reason: impl Into<String>) -> Refusal {
        Refusal {
            status,
            reason: reason.into(),
        }
    }

    /// As Go's `http.Error` writes it, with nats-server's version header.
    fn response(&self) -> Vec<u8> {
        let text = match self.status {
            400 => "Bad Request",
            403 => "Forbidden",
            405 => "Method Not Allowed",
            _ => "Internal Server Error",
        };
        format!(
            "HTTP/1.1 {} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nSec-Websocket-Version: 13\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}\n",
            self.status,
            text.len() + 1
        )
        .into_bytes()
    }
}

/// nats-server's checks, in its order.
fn check(request: &Request, ws: &WebsocketOptions, secure: bool) -> Result<Agreed, Refusal> {
    if request.method != "GET" {
        return Err(Refusal::new(405, "request method must be GET"));
    }
    let host = request.header("host").unwrap_or_default();
    if host.is_empty() {
        return Err(Refusal::new(400, "'Host' missing in request"));
    }
    if !request.has_token("upgrade", "websocket") {
        return Err(Refusal::new(400, "invalid value for header 'Upgrade'"));
    }
    if !request.has_token("connection", "upgrade") {
        return Err(Refusal::new(400, "invalid value for header 'Connection'"));
    }
    let Some(key) = request.header("sec-websocket-key") else {
        return Err(Refusal::new(400, "key missing"));
    };
    let decoded = data_encoding::BASE64.decode(key.trim().as_bytes());
    if decoded.map_or(true, |k| k.len() != 16) {
        return Err(Refusal::new(400, "invalid websocket key"));
    }
    if !request.has_token("sec-websocket-version", "13") {
        return Err(Refusal::new(400, "invalid version"));
    }
    check_origin(request, ws, host, secure)
        .map_err(|why| Refusal::new(403, format!("origin not allowed: {why}")))?;
    let deflate = ws.compression && request.has_token_prefix("sec-websocket-extensions");
    Ok(Agreed {
        accept: accept_key(key.trim()),
        deflate,
        no_masking: request.header("nats-no-masking") == Some("true"),
    })
}

impl Request {
    /// Whether an extensions header offers permessage-deflate (with any
    /// parameters).
    fn has_token_prefix(&self, name: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, v)| v.split(','))
            .filter_map(|offer| offer.split(';').next())
            .any(|ext| ext.trim().eq_ignore_ascii_case("permessage-deflate"))
    }
}

/// `same_origin` and `allowed_origins`; a request without an `Origin` is
/// let in, as in nats-server (it is not a browser).
fn check_origin(
    request: &Request,
    ws: &WebsocketOptions,
    host: &str,
    secure: bool,
) -> Result<(), String> {
    if !ws.same_origin && ws.allowed_origins.is_empty() {
        return Ok(());
    }
    let Some(origin) = request
        .header("origin")
        .or_else(|| request.header("sec-websocket-origin"))
    else {
        return Ok(());
    };
    let origin = config::file::websocket::parse_origin(origin).map_err(|_| "invalid origin")?;
    if ws.same_origin {
        let scheme = if secure { "https" } else { "http" };
        let (host, port) = split_host_port(host, scheme).ok_or("invalid host")?;
        let own = Origin {
            scheme: scheme.into(),
            host,
            port,
        };
        if origin != own {
            return Err("not same origin".into());
        }
    }
    if !ws.allowed_origins.is_empty() && !ws.allowed_origins.contains(&origin) {
        return Err("not in the allowed list".into());
    }
    Ok(())
}

/// `Sec-WebSocket-Accept` for a key.
fn accept_key(key: &str) -> String {
    let mut sha1 = sha1_smol::Sha1::new();
    sha1.update(key.as_bytes());
    sha1.update(ACCEPT_GUID.as_bytes());
    data_encoding::BASE64.encode(&sha1.digest().bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(lines: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            headers: lines
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string()))
                .collect(),
        }
    }

    fn good() -> Vec<(&'static str, &'static str)> {
        vec![
            ("Host", "localhost:8080"),
            ("Upgrade", "websocket"),
            ("Connection", "keep-alive, Upgrade"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13"),
        ]
    }

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    /// Each check in nats-server's order, with its status and reason.
    #[test]
    fn a_bad_upgrade_is_refused_as_nats_server_refuses_it() {
        let ws = WebsocketOptions::default();
        let mut post = request(&good());
        post.method = "POST".into();
        let cases: Vec<(Request, u16, &str)> = vec![
            (post, 405, "request method must be GET"),
            (request(&good()[1..]), 400, "'Host' missing in request"),
            (
                request(&[
                    good()[0],
                    ("Upgrade", "h2c"),
                    good()[2],
                    good()[3],
                    good()[4],
                ]),
                400,
                "invalid value for header 'Upgrade'",
            ),
            (
                request(&[
                    good()[0],
                    good()[1],
                    ("Connection", "close"),
                    good()[3],
                    good()[4],
                ]),
                400,
                "invalid value for header 'Connection'",
            ),
            (
                request(&[good()[0], good()[1], good()[2], good()[4]]),
                400,
                "key missing",
            ),
            (
                request(&[
                    good()[0],
                    good()[1],
                    good()[2],
                    ("Sec-WebSocket-Key", "c2hvcnQ="),
                    good()[4],
                ]),
                400,
                "invalid websocket key",
            ),
            (
                request(&[
                    good()[0],
                    good()[1],
                    good()[2],
                    good()[3],
                    ("Sec-WebSocket-Version", "8"),
                ]),
                400,
                "invalid version",
            ),
        ];
        for (request, status, reason) in cases {
            let refusal = check(&request, &ws, false).unwrap_err();
            assert_eq!((refusal.status, refusal.reason.as_str()), (status, reason));
        }
        assert!(check(&request(&good()), &ws, false).is_ok());
    }

    #[test]
    fn origins_are_checked_only_when_configured_and_sent() {
        let mut ws = WebsocketOptions {
            same_origin: true,
            ..WebsocketOptions::default()
        };
        let with_origin = |origin: &'static str| {
            let mut lines = good();
            lines.push(("Origin", origin));
            request(&lines)
        };
        assert!(check(&request(&good()), &ws, false).is_ok());
        assert!(check(&with_origin("http://localhost:8080"), &ws, false).is_ok());
        let refusal = check(&with_origin("http://other:8080"), &ws, false).unwrap_err();
        assert_eq!(refusal.status, 403);
        assert_eq!(refusal.reason, "origin not allowed: not same origin");
        assert!(check(&with_origin("http://localhost:8080"), &ws, true).is_err());

        ws.same_origin = false;
        ws.allowed_origins =
            vec![config::file::websocket::parse_origin("https://app.example").unwrap()];
        assert!(check(&with_origin("https://app.example:443"), &ws, false).is_ok());
        let refusal = check(&with_origin("http://app.example"), &ws, false).unwrap_err();
        assert_eq!(
            refusal.reason,
            "origin not allowed: not in the allowed list"
        );
    }

    #[test]
    fn deflate_is_agreed_only_when_configured_and_offered() {
        let mut offer = good();
        offer.push((
            "Sec-WebSocket-Extensions",
            "permessage-deflate; client_max_window_bits",
        ));
        let on = WebsocketOptions {
            compression: true,
            ..WebsocketOptions::default()
        };
        assert!(check(&request(&offer), &on, false).unwrap().deflate);
        assert!(!check(&request(&good()), &on, false).unwrap().deflate);
        let off = WebsocketOptions::default();
        assert!(!check(&request(&offer), &off, false).unwrap().deflate);
        let response =
            String::from_utf8(check(&request(&offer), &on, false).unwrap().response(&on)).unwrap();
        assert!(response.contains(&format!("Sec-WebSocket-Extensions: {DEFLATE}\r\n")));
    }
}
