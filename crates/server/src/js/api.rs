//! The `$JS.API.>` dispatcher. One task, one request at a time: requests
//! that span streams (create, update, delete, names, list, account info)
//! are decided here, so their checks cannot race each other. Requests
//! about one stream are parsed and checked here, in nats-server's order,
//! then run by that stream's actor, which replies once its writes are
//! durable.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use jetstream::api::{
    self, go_types::GoShape, gojson, parse_stream_config, AccountInfo, AccountLimits, ApiError,
    ApiStats, CreateConsumerRequest, MsgDeleteRequest, MsgGetRequest, NamesRequest, PurgeRequest,
    StreamInfo, StreamInfoRequest, StreamNamesRequest, E,
};
use jetstream::headers;
use jetstream::output::OutMsg;
use jetstream::stream::config as stream_config;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use super::response::{self, Created, Kind, Paged, Streams, Success};
use super::sinks::{self, status_msg};
use super::stream_api::Op;
use super::{Cmd, Inbound, JetStream, StreamHandle};
use crate::internal::InternalPublisher;

const NAMES_LIMIT: usize = 1024;
const LIST_LIMIT: usize = 256;

pub async fn run(
    js: Arc<JetStream>,
    mut rx: mpsc::UnboundedReceiver<Inbound>,
    mut bounce: mpsc::UnboundedReceiver<OutMsg>,
) {
    let mut d = Dispatcher {
        publisher: InternalPublisher::new(js.server.clone()),
        js,
    };
    loop {
        tokio::select! {
            m = rx.recv() => {
                let Some(m) = m else { break };
                d.request(m).await;
                d.publisher.flush();
            }
            b = bounce.recv() => {
                let Some(b) = b else { break };
                d.send(b);
                d.publisher.flush();
            }
        }
    }
}

pub(crate) struct Dispatcher {
    js: Arc<JetStream>,
    publisher: InternalPublisher,
}

/// Why a request gets no further.
pub(crate) type Refusal = (Kind, ApiError);

/// Bodies nats-server reads only when they start like a JSON object or
/// array; anything else (empty, `null`, a string) is the zero request.
pub(crate) fn optional<T: DeserializeOwned + Default + GoShape>(
    body: &[u8],
) -> Result<T, ApiError> {
    let first = body
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    match first {
        Some(b'{' | b'[') => strict(body),
        _ => Ok(T::default()),
    }
}

/// nats-server's request decoding, error texts included.
pub(crate) fn strict<T: DeserializeOwned + GoShape>(body: &[u8]) -> Result<T, ApiError> {
    gojson::decode(body, T::SCHEMA, gojson::Mode::Request)
        .map_err(|e| E::INVALID_JSON.with("err", e))
}

/// nats-server's "empty request": no bytes, or a JSON object with no keys.
pub(crate) fn is_empty_request(body: &[u8]) -> bool {
    if body.is_empty() {
        return true;
    }
    matches!(
        serde_json::from_slice::<serde_json::Value>(body),
        Ok(serde_json::Value::Object(m)) if m.is_empty()
    )
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct PauseRequest {
    #[serde(default, with = "api::time::opt")]
    pub pause_until: Option<i64>,
}

impl GoShape for PauseRequest {
    const SCHEMA: &'static gojson::Schema = &api::go_types::CONSUMER_PAUSE_REQUEST;
}

impl Dispatcher {
    fn send(&mut self, m: OutMsg) {
        self.publisher.publish_out(&m);
    }

    fn reply(&mut self, to: &str, body: &[u8]) {
        self.publisher.publish(to, to, None, None, body);
    }

    fn ok<B: serde::Serialize>(&mut self, to: &str, kind: Kind, body: &B) {
        self.js.api_total.fetch_add(1, Ordering::Relaxed);
        let b = response::ok(kind, body);
        self.reply(to, &b);
    }

    fn fail(&mut self, to: &str, (kind, e): Refusal) {
        self.js.api_total.fetch_add(1, Ordering::Relaxed);
        self.js.api_errors.fetch_add(1, Ordering::Relaxed);
        let b = response::error(kind, &e);
        self.reply(to, &b);
    }

    async fn request(&mut self, m: Inbound) {
        let Some(rest) = m.subject.strip_prefix("$JS.API.") else {
            return;
        };
        let tokens: Vec<&str> = rest.split('.').collect();
        let Some(reply) = m.reply.clone() else { return };
        let kind = endpoint(&tokens);
        if kind.is_none() && !is_pull_or_direct(&tokens) {
            // nats-server has no subscription there: no reply at all.
            return;
        }
        if !api_level_ok(&m) {
            if is_pull_or_direct(&tokens) {
                self.send(status_msg(&reply, 412, "Required Api Level"));
            } else {
                self.fail(
                    &reply,
                    (kind.unwrap_or(Kind::System), E::REQUIRED_API_LEVEL.err()),
                );
            }
            return;
        }
        let r = match tokens.as_slice() {
            ["INFO"] => {
                self.account_info(&reply);
                Ok(())
            }
            ["STREAM", "CREATE", name] => self.stream_create(name, &m, &reply),
            ["STREAM", "UPDATE", name] => self.stream_update(name, &m, &reply).await,
            ["STREAM", "NAMES"] => self.stream_names(&m, &reply),
            ["STREAM", "LIST"] => self.stream_list(&m, &reply).await,
            ["STREAM", "INFO", name] => {
                let req =
                    optional::<StreamInfoRequest>(&m.payload).map_err(|e| (Kind::StreamInfo, e));
                req.and_then(|req| self.forward(name, Kind::StreamInfo, Op::Info(req), &reply))
            }
            ["STREAM", "DELETE", name] => self.stream_delete(name, &m, &reply).await,
            ["STREAM", "PURGE", name] => {
                let req = optional::<PurgeRequest>(&m.payload).map_err(|e| (Kind::StreamPurge, e));
                req.and_then(|req| {
                    if req.seq > 0 && req.keep > 0 {
                        return Err((Kind::StreamPurge, E::BAD_REQUEST.err()));
                    }
                    self.forward(name, Kind::StreamPurge, Op::Purge(req), &reply)
                })
            }
            ["STREAM", "MSG", "GET", name] => match msg_get_request(&m.payload) {
                Ok(req) => self.forward(name, Kind::MsgGet, Op::MsgGet(req), &reply),
                Err(e) => Err((Kind::MsgGet, e)),
            },
            ["STREAM", "MSG", "DELETE", name] => {
                if is_empty_request(&m.payload) {
                    Err((Kind::MsgDelete, E::BAD_REQUEST.err()))
                } else {
                    match strict::<MsgDeleteRequest>(&m.payload) {
                        Ok(req) => self.forward(name, Kind::MsgDelete, Op::MsgDelete(req), &reply),
                        Err(e) => Err((Kind::MsgDelete, e)),
                    }
                }
            }
            ["DIRECT", "GET", name, subject @ ..] => {
                let subject = (!subject.is_empty()).then(|| subject.join("."));
                self.direct(name, subject, &m, &reply);
                Ok(())
            }
            ["CONSUMER", "CREATE", stream, rest @ ..] => {
                let name = rest.first().map(|s| s.to_string());
                let filter = (rest.len() > 1).then(|| rest[1..].join("."));
                self.consumer_create(stream, name, filter, false, &m, &reply)
            }
            // nats-server subscribes to `DURABLE.CREATE.*.*` only: other
            // token counts get no answer.
            ["CONSUMER", "DURABLE", "CREATE", stream, durable] => {
                self.consumer_create(stream, Some(durable.to_string()), None, true, &m, &reply)
            }
            ["CONSUMER", "DURABLE", "CREATE", ..] | ["CONSUMER", "CREATE"] => Ok(()),
            ["CONSUMER", "INFO", stream, consumer] => {
                if !is_empty_request(&m.payload) {
                    Err((Kind::ConsumerInfo, E::NOT_EMPTY_REQUEST.err()))
                } else {
                    self.forward(
                        stream,
                        Kind::ConsumerInfo,
                        Op::ConsumerInfo(consumer.to_string()),
                        &reply,
                    )
                }
            }
            ["CONSUMER", "DELETE", stream, consumer] => {
                if !is_empty_request(&m.payload) {
                    Err((Kind::ConsumerDelete, E::NOT_EMPTY_REQUEST.err()))
                } else {
                    self.forward(
                        stream,
                        Kind::ConsumerDelete,
                        Op::ConsumerDelete(consumer.to_string()),
                        &reply,
                    )
                }
            }
            ["CONSUMER", "NAMES", stream] => match optional::<NamesRequest>(&m.payload) {
                Ok(req) => self.forward(
                    stream,
                    Kind::ConsumerNames,
                    Op::ConsumerNames(req.offset),
                    &reply,
                ),
                Err(e) => Err((Kind::ConsumerNames, e)),
            },
            ["CONSUMER", "LIST", stream] => match optional::<NamesRequest>(&m.payload) {
                Ok(req) => self.forward(
                    stream,
                    Kind::ConsumerList,
                    Op::ConsumerList(req.offset),
                    &reply,
                ),
                Err(e) => Err((Kind::ConsumerList, e)),
            },
            ["CONSUMER", "PAUSE", stream, consumer] => match optional::<PauseRequest>(&m.payload) {
                Ok(req) => self.forward(
                    stream,
                    Kind::ConsumerPause,
                    Op::ConsumerPause {
                        name: consumer.to_string(),
                        until: req.pause_until,
                    },
                    &reply,
                ),
                Err(e) => Err((Kind::ConsumerPause, e)),
            },
            ["CONSUMER", "MSG", "NEXT", stream, consumer] => {
                match self.js.stream(stream) {
                    Some(h) => {
                        let op = Op::Next {
                            consumer: consumer.to_string(),
                            body: m.payload.clone(),
                        };
                        if !h.send(Cmd::Api {
                            op,
                            reply: reply.clone(),
                        }) {
                            self.send(sinks::no_responders(&reply, &m.subject));
                        }
                    }
                    None => self.send(sinks::no_responders(&reply, &m.subject)),
                }
                Ok(())
            }
            // A single server has no leaders to move and no peers to
            // remove; nats-server answers these so.
            ["STREAM", "LEADER", "STEPDOWN", _]
            | ["CONSUMER", "LEADER", "STEPDOWN", _, _]
            | ["STREAM", "PEER", "REMOVE", _] => {
                Err((kind.unwrap_or(Kind::System), E::CLUSTER_REQUIRED.err()))
            }
            _ => Err((Kind::System, E::BAD_REQUEST.err())),
        };
        if let Err(refusal) = r {
            self.fail(&reply, refusal);
        }
    }

    /// Hands a request to the stream's actor, which replies.
    fn forward(&mut self, stream: &str, kind: Kind, op: Op, reply: &str) -> Result<(), Refusal> {
        let h = self
            .js
            .stream(stream)
            .ok_or((kind, E::STREAM_NOT_FOUND.err()))?;
        if !h.send(Cmd::Api {
            op,
            reply: reply.to_string(),
        }) {
            return Err((kind, E::STREAM_NOT_FOUND.err()));
        }
        Ok(())
    }

    fn direct(&mut self, stream: &str, subject: Option<String>, m: &Inbound, reply: &str) {
        let handle = self
            .js
            .stream(stream)
            .filter(|h| h.config.read().allow_direct);
        let Some(h) = handle else {
            // No stream serves direct gets here: what a client sees when
            // nothing is subscribed.
            self.send(sinks::no_responders(reply, &m.subject));
            return;
        };
        let op = Op::Direct {
            subject,
            body: m.payload.clone(),
        };
        if !h.send(Cmd::Api {
            op,
            reply: reply.to_string(),
        }) {
            self.send(sinks::no_responders(reply, &m.subject));
        }
    }

    fn account_info(&mut self, reply: &str) {
        let streams = self.js.streams();
        let (memory, storage) = self.js.usage();
        let (reserved_memory, reserved_storage) = self.js.reserved_totals();
        let info = AccountInfo {
            memory,
            storage,
            reserved_memory,
            reserved_storage,
            streams: streams.len() as u64,
            consumers: streams
                .iter()
                .map(|h| h.consumers.load(Ordering::Relaxed))
                .sum(),
            limits: AccountLimits::default(),
            api: ApiStats {
                level: api::API_LEVEL,
                total: self.js.api_total.load(Ordering::Relaxed),
                errors: self.js.api_errors.load(Ordering::Relaxed),
            },
        };
        self.ok(reply, Kind::AccountInfo, &info);
    }

    /// Parses and checks a create or update body for stream `name`.
    pub(crate) fn stream_config(
        kind: Kind,
        name: &str,
        body: &[u8],
        clustered: bool,
    ) -> Result<api::StreamConfig, Refusal> {
        let (mut cfg, pedantic) =
            parse_stream_config(body).map_err(|e| (kind, E::INVALID_JSON.with("err", e)))?;
        if kind == Kind::StreamCreate {
            if cfg.name != name {
                return Err((kind, E::STREAM_MISMATCH.err()));
            }
            if name.contains(['\\', '/']) {
                return Err((kind, E::STREAM_NAME_CONTAINS_PATH_SEPARATORS.err()));
            }
            if cfg.sealed {
                return Err((
                    kind,
                    E::STREAM_INVALID_CONFIG
                        .with("err", "stream configuration for create can not be sealed"),
                ));
            }
        }
        stream_config::check(&mut cfg, pedantic, clustered).map_err(|e| (kind, e))?;
        if kind == Kind::StreamUpdate && cfg.name != name {
            return Err((kind, E::STREAM_MISMATCH.err()));
        }
        let remote = cfg
            .mirror
            .iter()
            .chain(cfg.sources.iter())
            .any(|s| s.external.is_some() || s.consumer.is_some());
        if remote {
            return Err((
                kind,
                E::STREAM_INVALID_CONFIG.with(
                    "err",
                    "external and durable-consumer sources are not supported by this server",
                ),
            ));
        }
        cfg.metadata.insert(
            "_nats.req.level".into(),
            stream_config::required_level(&cfg).to_string(),
        );
        Ok(cfg)
    }

    fn stream_create(&mut self, name: &str, m: &Inbound, reply: &str) -> Result<(), Refusal> {
        let kind = Kind::StreamCreate;
        let cfg = Self::stream_config(kind, name, &m.payload, false)?;
        if let Some(h) = self.js.stream(name) {
            let existing = h.config.read().clone();
            if existing != cfg {
                return Err((kind, E::STREAM_NAME_EXIST.err()));
            }
            // The same config again: the stream as it is.
            let (done, rx) = oneshot::channel();
            h.send(Cmd::Info {
                consumers: false,
                done,
            });
            let js = self.js.clone();
            let reply = reply.to_string();
            // Answered when the actor has looked, without holding up the
            // dispatcher.
            tokio::spawn(async move {
                let Ok((mut info, _)) = rx.await else { return };
                response::stamp_stream(&mut info);
                js.api_total.fetch_add(1, Ordering::Relaxed);
                let body = response::ok(
                    kind,
                    &Created {
                        info,
                        did_create: true,
                    },
                );
                let mut p = InternalPublisher::new(js.server.clone());
                p.publish(&reply, &reply, None, None, &body);
                p.flush();
            });
            return Ok(());
        }
        if self.js.overlapping(name, &cfg.subjects) {
            return Err((kind, E::STREAM_SUBJECT_OVERLAP.err()));
        }
        let mut info = self.js.create_stream(cfg).map_err(|e| (kind, e))?;
        response::stamp_stream(&mut info);
        self.ok(
            reply,
            kind,
            &Created {
                info,
                did_create: true,
            },
        );
        Ok(())
    }

    async fn stream_update(&mut self, name: &str, m: &Inbound, reply: &str) -> Result<(), Refusal> {
        let kind = Kind::StreamUpdate;
        let cfg = Self::stream_config(kind, name, &m.payload, false)?;
        let h = self
            .js
            .stream(name)
            .ok_or((kind, E::STREAM_NOT_FOUND.err()))?;
        if self.js.overlapping(name, &cfg.subjects) {
            return Err((kind, E::STREAM_SUBJECT_OVERLAP.err()));
        }
        self.js.check_reservation(&cfg).map_err(|e| (kind, e))?;
        let old_subjects = h.config.read().subjects.clone();
        let new_subjects = cfg.subjects.clone();
        let (done, rx) = oneshot::channel();
        if !h.send(Cmd::Update {
            config: Box::new(cfg),
            done,
        }) {
            return Err((kind, E::STREAM_NOT_FOUND.err()));
        }
        let mut info = rx
            .await
            .unwrap_or_else(|_| Err(E::STREAM_NOT_FOUND.err()))
            .map_err(|e| (kind, e))?;
        if old_subjects != new_subjects {
            if let Err(e) = sinks::subscribe_stream(&self.js, &h, &new_subjects) {
                tracing::error!("Stream '{name}': subjects could not be subscribed: {e}");
            }
        }
        response::stamp_stream(&mut info);
        self.ok(reply, kind, &info);
        Ok(())
    }

    async fn stream_delete(&mut self, name: &str, m: &Inbound, reply: &str) -> Result<(), Refusal> {
        let kind = Kind::StreamDelete;
        if !is_empty_request(&m.payload) {
            return Err((kind, E::NOT_EMPTY_REQUEST.err()));
        }
        let h = self
            .js
            .stream(name)
            .ok_or((kind, E::STREAM_NOT_FOUND.err()))?;
        self.js.delete_stream(&h).await.map_err(|e| (kind, e))?;
        self.ok(reply, kind, &Success { success: true });
        Ok(())
    }

    /// Streams in name order whose subjects could meet `filter`.
    fn matching(&self, filter: &str) -> Vec<Arc<StreamHandle>> {
        self.js
            .streams()
            .into_iter()
            .filter(|h| {
                filter.is_empty()
                    || h.config
                        .read()
                        .subjects
                        .iter()
                        .any(|s| subjects::subjects_collide(s.as_bytes(), filter.as_bytes()))
            })
            .collect()
    }

    fn stream_names(&mut self, m: &Inbound, reply: &str) -> Result<(), Refusal> {
        let kind = Kind::StreamNames;
        let req = optional::<StreamNamesRequest>(&m.payload).map_err(|e| (kind, e))?;
        let all = self.matching(&req.subject);
        let total = all.len();
        let offset = (req.offset.max(0) as usize).min(total);
        let names: Vec<String> = all
            .iter()
            .skip(offset)
            .take(NAMES_LIMIT)
            .map(|h| h.name.clone())
            .collect();
        let body = Paged {
            total,
            offset,
            limit: NAMES_LIMIT,
            rest: Streams {
                streams: (!names.is_empty()).then_some(names),
            },
        };
        self.ok(reply, kind, &body);
        Ok(())
    }

    async fn stream_list(&mut self, m: &Inbound, reply: &str) -> Result<(), Refusal> {
        let kind = Kind::StreamList;
        let req = optional::<StreamNamesRequest>(&m.payload).map_err(|e| (kind, e))?;
        let all = self.matching(&req.subject);
        let total = all.len();
        let offset = (req.offset.max(0) as usize).min(total);
        let mut waits = Vec::new();
        for h in all.iter().skip(offset).take(LIST_LIMIT) {
            let (done, rx) = oneshot::channel();
            if h.send(Cmd::Info {
                consumers: false,
                done,
            }) {
                waits.push(rx);
            }
        }
        let mut infos: Vec<StreamInfo> = Vec::with_capacity(waits.len());
        for rx in waits {
            if let Ok((info, _)) = rx.await {
                infos.push(info);
            }
        }
        let body = Paged {
            total,
            offset,
            limit: LIST_LIMIT,
            rest: Streams { streams: infos },
        };
        self.ok(reply, kind, &body);
        Ok(())
    }

    fn consumer_create(
        &mut self,
        stream: &str,
        name: Option<String>,
        filter: Option<String>,
        durable_api: bool,
        m: &Inbound,
        reply: &str,
    ) -> Result<(), Refusal> {
        let kind = Kind::ConsumerCreate;
        let mut req = consumer_create_request(
            stream,
            name.as_deref(),
            filter.as_deref(),
            durable_api,
            &m.payload,
        )?;
        jetstream::consumer::stamp_required_level(&mut req.config);
        self.forward(
            stream,
            kind,
            Op::ConsumerCreate {
                req: Box::new(req),
                name,
                filter,
                durable_api,
            },
            reply,
        )
    }
}

/// A consumer create's request-level checks, in nats-server's order: the
/// body, the stream it names, the name and filter in the subject.
pub(crate) fn consumer_create_request(
    stream: &str,
    name: Option<&str>,
    filter: Option<&str>,
    durable_api: bool,
    body: &[u8],
) -> Result<CreateConsumerRequest, Refusal> {
    let kind = Kind::ConsumerCreate;
    let mut req =
        CreateConsumerRequest::parse(body).map_err(|e| (kind, E::INVALID_JSON.with("err", e)))?;
    if req.stream_name != stream {
        return Err((kind, E::STREAM_MISMATCH.err()));
    }
    jetstream::consumer::prepare_create(&mut req, name, filter, durable_api)
        .map_err(|e| (kind, e))?;
    if req.config.direct {
        // Only streams sourcing from this one run direct consumers.
        return Err((
            kind,
            E::STREAM_INVALID_CONFIG.with("err", "direct consumers are internal"),
        ));
    }
    Ok(req)
}

/// Whether this server has the API level a request requires
/// (`Nats-Required-Api-Level`), or it requires none.
pub(crate) fn api_level_ok(m: &Inbound) -> bool {
    let level = m
        .headers
        .as_deref()
        .and_then(|h| headers::get(h, "Nats-Required-Api-Level"));
    level.is_none_or(|level| {
        level
            .trim()
            .parse::<i64>()
            .is_ok_and(|l| l <= api::API_LEVEL)
    })
}

/// MSG.GET's checks, in nats-server's order.
pub(crate) fn msg_get_request(body: &[u8]) -> Result<MsgGetRequest, ApiError> {
    if is_empty_request(body) {
        return Err(E::BAD_REQUEST.err());
    }
    let req: MsgGetRequest = strict(body)?;
    if req.batch > 0 || req.max_bytes > 0 {
        return Err(E::BAD_REQUEST.err());
    }
    let seq = req.seq > 0;
    let last = !req.last_by_subj.is_empty();
    let next = !req.next_by_subj.is_empty();
    let time = req.start_time.is_some();
    if (seq && last)
        || (!seq && !last && !next && !time)
        || (seq && time)
        || (time && last)
        || (last && next)
    {
        return Err(E::BAD_REQUEST.err());
    }
    Ok(req)
}

pub(crate) fn is_pull_or_direct(tokens: &[&str]) -> bool {
    matches!(
        tokens,
        ["CONSUMER", "MSG", "NEXT", _, _] | ["DIRECT", "GET", _, ..]
    )
}

/// The response kind of an API subject, for errors found before routing.
pub(crate) fn endpoint(tokens: &[&str]) -> Option<Kind> {
    Some(match tokens {
        ["INFO"] => Kind::AccountInfo,
        ["STREAM", "CREATE", _] => Kind::StreamCreate,
        ["STREAM", "UPDATE", _] => Kind::StreamUpdate,
        ["STREAM", "NAMES"] => Kind::StreamNames,
        ["STREAM", "LIST"] => Kind::StreamList,
        ["STREAM", "INFO", _] => Kind::StreamInfo,
        ["STREAM", "DELETE", _] => Kind::StreamDelete,
        ["STREAM", "PURGE", _] => Kind::StreamPurge,
        ["STREAM", "MSG", "GET", _] => Kind::MsgGet,
        ["STREAM", "MSG", "DELETE", _] => Kind::MsgDelete,
        ["CONSUMER", "CREATE", _, ..] | ["CONSUMER", "DURABLE", "CREATE", _, _] => {
            Kind::ConsumerCreate
        }
        ["CONSUMER", "INFO", _, _] => Kind::ConsumerInfo,
        ["CONSUMER", "DELETE", _, _] => Kind::ConsumerDelete,
        ["CONSUMER", "NAMES", _] => Kind::ConsumerNames,
        ["CONSUMER", "LIST", _] => Kind::ConsumerList,
        ["CONSUMER", "PAUSE", _, _] => Kind::ConsumerPause,
        ["STREAM", "LEADER", "STEPDOWN", _] => Kind::StreamLeaderStepdown,
        ["CONSUMER", "LEADER", "STEPDOWN", _, _] => Kind::ConsumerLeaderStepdown,
        ["STREAM", "PEER", "REMOVE", _] => Kind::StreamRemovePeer,
        _ => return None,
    })
}
