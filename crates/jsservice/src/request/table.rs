//! The `$JS.API` requests, one entry each in [`APIS`]: the subject's
//! tokens after `$JS.API.`, the kind of response it gets, who may ask,
//! and the function that reads the rest (the body, headers) into a
//! typed request, with every refusal nats-server makes before a stream
//! is looked at. A subject no entry matches gets no answer at all:
//! nats-server has no subscription there.

use jetstream::api::{MsgDeleteRequest, NamesRequest, PurgeRequest, E};
use jetstream::headers;

use super::body::{
    consumer_create, is_empty_request, msg_get_request, object_or_default, optional, peer_remove,
    preferred, reset_request, stream_config, strict, unpin_request, PauseRequest, RemoveRequest,
    StepDownRequest,
};
use super::types::{
    AccountRequest, Inbound, Mode, OperatorRequest, Read, Refusal, StreamRequest, RESPONSE_TYPE,
};
use crate::reply::Kind;
use crate::stream_sm::Op;

/// One `$JS.API` request.
pub(super) struct Api {
    /// The subject after `$JS.API.`, token by token: literals, `*` for
    /// one token (a stream's name, then a consumer's), and last `>` for
    /// any number of tokens, none included.
    pub pattern: &'static str,
    /// The kind of API response it gets; none for what is answered
    /// with messages and statuses (pulls, direct gets).
    pub kind: Option<Kind>,
    pub scope: Scope,
    /// Whether a cluster's meta leader answers "stream not found" for
    /// it itself, before reading the body (`stream_of`).
    pub not_found_by_meta: bool,
    /// Reads the request, or refuses it.
    pub parse: Parse,
}

/// Who may ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Any server.
    Any,
    /// A cluster's servers: one server answers that it takes a cluster.
    Cluster,
    /// The meta leader's operator API: one server does not answer.
    Operator,
}

/// What a request is, read.
pub(super) enum Classified {
    Account(AccountRequest),
    Stream(String, StreamRequest),
    Operator(OperatorRequest),
}

/// What an entry's `parse` is given.
pub(super) struct Call<'a, 't> {
    /// The entry's kind (`Kind::System` when it has none).
    pub kind: Kind,
    /// The tokens of the pattern's `*`s, in order.
    pub names: Vec<&'t str>,
    /// The tokens of its `>`.
    pub rest: &'a [&'t str],
    pub m: &'a Inbound,
    pub mode: Mode,
    /// Names a consumer whose create names none.
    pub new_name: &'a mut dyn FnMut() -> String,
}

type Parse = fn(&mut Call<'_, '_>) -> Result<Classified, Refusal>;

impl Api {
    const fn new(pattern: &'static str, kind: Kind, parse: Parse) -> Api {
        Api {
            pattern,
            kind: Some(kind),
            scope: Scope::Any,
            not_found_by_meta: false,
            parse,
        }
    }

    /// Answered with messages and statuses, not an API response.
    const fn messages(pattern: &'static str, parse: Parse) -> Api {
        Api {
            kind: None,
            ..Api::new(pattern, Kind::System, parse)
        }
    }

    const fn not_found_by_meta(self) -> Api {
        Api {
            not_found_by_meta: true,
            ..self
        }
    }

    const fn cluster(self) -> Api {
        Api {
            scope: Scope::Cluster,
            ..self
        }
    }

    const fn operator(self) -> Api {
        Api {
            scope: Scope::Operator,
            ..self
        }
    }
}

/// Every `$JS.API` request this server answers: the subject, the kind
/// of response, the function that reads it; then who may ask (`cluster`,
/// `operator`; anyone otherwise) and whether the meta leader answers
/// "not found" itself. `messages`: answered with messages and statuses.
#[rustfmt::skip]
pub(super) const APIS: &[Api] = &[
    Api::new("INFO",                         Kind::AccountInfo,            account_info),
    Api::new("STREAM.CREATE.*",              Kind::StreamCreate,           stream_create),
    Api::new("STREAM.UPDATE.*",              Kind::StreamUpdate,           stream_update),
    Api::new("STREAM.NAMES",                 Kind::StreamNames,            stream_names),
    Api::new("STREAM.LIST",                  Kind::StreamList,             stream_list),
    Api::new("STREAM.DELETE.*",              Kind::StreamDelete,           stream_delete),
    Api::new("STREAM.INFO.*",                Kind::StreamInfo,             stream_info).not_found_by_meta(),
    Api::new("STREAM.PURGE.*",               Kind::StreamPurge,            stream_purge).not_found_by_meta(),
    Api::new("STREAM.MSG.GET.*",             Kind::MsgGet,                 msg_get).not_found_by_meta(),
    Api::new("STREAM.MSG.DELETE.*",          Kind::MsgDelete,              msg_delete).not_found_by_meta(),
    Api::messages("DIRECT.GET.*.>",                                        direct_get),
    // The body is read before the stream is looked for.
    Api::new("CONSUMER.CREATE.*.>",          Kind::ConsumerCreate,         consumer_create_api),
    // nats-server subscribes to `DURABLE.CREATE.*.*` only: other token
    // counts get no answer.
    Api::new("CONSUMER.DURABLE.CREATE.*.*",  Kind::ConsumerCreate,         durable_create),
    Api::new("CONSUMER.INFO.*.*",            Kind::ConsumerInfo,           consumer_info).not_found_by_meta(),
    Api::new("CONSUMER.DELETE.*.*",          Kind::ConsumerDelete,         consumer_delete).not_found_by_meta(),
    Api::new("CONSUMER.NAMES.*",             Kind::ConsumerNames,          consumer_names).not_found_by_meta(),
    Api::new("CONSUMER.LIST.*",              Kind::ConsumerList,           consumer_list).not_found_by_meta(),
    Api::new("CONSUMER.PAUSE.*.*",           Kind::ConsumerPause,          consumer_pause).not_found_by_meta(),
    Api::new("CONSUMER.UNPIN.*.*",           Kind::ConsumerUnpin,          consumer_unpin).not_found_by_meta(),
    // Nothing answers a reset for a consumer that is not there.
    Api::new("CONSUMER.RESET.*.*",           Kind::ConsumerReset,          consumer_reset),
    // Read once the consumer is known to exist: nats-server has no
    // subscription for one that does not (`stream_api::admit`).
    Api::messages("CONSUMER.MSG.NEXT.*.*",                                 consumer_next),
    Api::new("STREAM.LEADER.STEPDOWN.*",     Kind::StreamLeaderStepdown,   stream_step_down).cluster().not_found_by_meta(),
    Api::new("CONSUMER.LEADER.STEPDOWN.*.*", Kind::ConsumerLeaderStepdown, consumer_step_down).cluster().not_found_by_meta(),
    Api::new("STREAM.PEER.REMOVE.*",         Kind::StreamRemovePeer,       stream_peer_remove).cluster(),
    Api::new("META.LEADER.STEPDOWN",         Kind::MetaLeaderStepdown,     meta_step_down).operator(),
    Api::new("SERVER.REMOVE",                Kind::MetaServerRemove,       server_remove).operator(),
];

/// An entry that matched, with what its wildcards matched.
pub(super) struct Found<'a, 't> {
    pub api: &'static Api,
    pub names: Vec<&'t str>,
    pub rest: &'a [&'t str],
}

/// The entry `tokens` (a subject's, after `$JS.API.`) match, if any.
pub(super) fn find<'a, 't>(tokens: &'a [&'t str]) -> Option<Found<'a, 't>> {
    APIS.iter().find_map(|api| matches(api, tokens))
}

fn matches<'a, 't>(api: &'static Api, tokens: &'a [&'t str]) -> Option<Found<'a, 't>> {
    let mut names = Vec::new();
    let mut at = 0;
    for want in api.pattern.split('.') {
        match want {
            ">" => {
                return Some(Found {
                    api,
                    names,
                    rest: &tokens[at..],
                })
            }
            "*" => names.push(*tokens.get(at)?),
            literal if tokens.get(at) == Some(&literal) => {}
            _ => return None,
        }
        at += 1;
    }
    (at == tokens.len()).then_some(Found {
        api,
        names,
        rest: &[],
    })
}

impl<'t> Call<'_, 't> {
    /// The stream the subject names (its first `*`).
    fn stream(&self) -> &'t str {
        self.names[0]
    }

    /// The consumer the subject names (its second `*`).
    fn consumer(&self) -> &'t str {
        self.names[1]
    }

    fn body(&self) -> &[u8] {
        &self.m.payload
    }

    /// A refusal of this kind.
    fn refused(&self, e: jetstream::api::ApiError) -> Refusal {
        (self.kind, e)
    }

    fn read(&self, read: Read) -> Result<Classified, Refusal> {
        Ok(Classified::Stream(
            self.stream().to_string(),
            StreamRequest::Read(read),
        ))
    }

    fn change(&self, op: Op) -> Result<Classified, Refusal> {
        Ok(Classified::Stream(
            self.stream().to_string(),
            StreamRequest::Change(op),
        ))
    }

    fn account(&self, request: AccountRequest) -> Result<Classified, Refusal> {
        Ok(Classified::Account(request))
    }
}

fn account_info(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    c.account(AccountRequest::Info)
}

fn stream_create(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let config = stream_config(c.kind, c.stream(), c.body(), c.mode)?;
    c.account(AccountRequest::Create {
        name: c.stream().to_string(),
        config: Box::new(config),
    })
}

fn stream_update(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let config = stream_config(c.kind, c.stream(), c.body(), c.mode)?;
    c.account(AccountRequest::Update {
        name: c.stream().to_string(),
        config: Box::new(config),
    })
}

fn stream_names(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let req = optional(c.body()).map_err(|e| c.refused(e))?;
    c.account(AccountRequest::Names(req))
}

fn stream_list(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let req = optional(c.body()).map_err(|e| c.refused(e))?;
    c.account(AccountRequest::List(req))
}

fn stream_delete(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    if !is_empty_request(c.body()) {
        return Err(c.refused(E::NOT_EMPTY_REQUEST.err()));
    }
    c.account(AccountRequest::Delete {
        name: c.stream().to_string(),
    })
}

fn stream_info(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let create =
        c.m.headers
            .as_deref()
            .and_then(|h| headers::get(h, RESPONSE_TYPE))
            .is_some_and(|t| t == "create");
    let request = optional(c.body()).map_err(|e| c.refused(e))?;
    c.read(Read::Info { request, create })
}

fn stream_purge(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let req: PurgeRequest = optional(c.body()).map_err(|e| c.refused(e))?;
    if req.seq > 0 && req.keep > 0 {
        return Err(c.refused(E::BAD_REQUEST.err()));
    }
    c.change(Op::Purge {
        request: c.m.payload.clone(),
    })
}

fn msg_get(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let req = msg_get_request(c.body()).map_err(|e| c.refused(e))?;
    c.read(Read::MsgGet(req))
}

fn msg_delete(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    if is_empty_request(c.body()) {
        return Err(c.refused(E::BAD_REQUEST.err()));
    }
    let req: MsgDeleteRequest = strict(c.body()).map_err(|e| c.refused(e))?;
    c.change(Op::DeleteMsg {
        seq: req.seq,
        erase: !req.no_erase,
    })
}

/// `DIRECT.GET.<stream>[.<subject>]`: the body is read only if the
/// stream serves direct gets (`stream_api::read`).
fn direct_get(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    c.read(Read::Direct {
        subject: (!c.rest.is_empty()).then(|| c.rest.join(".")),
        body: c.m.payload.clone(),
    })
}

/// `CONSUMER.CREATE.<stream>[.<name>[.<filter>]]`.
fn consumer_create_api(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let subject_name = c.rest.first().map(|s| s.to_string());
    let filter = (c.rest.len() > 1).then(|| c.rest[1..].join("."));
    let op = consumer_create(
        c.stream(),
        subject_name,
        filter,
        false,
        &c.m.payload,
        stream_identity(c.m),
        c.new_name,
    )?;
    c.change(op)
}

/// `CONSUMER.DURABLE.CREATE.<stream>.<durable>`.
fn durable_create(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let op = consumer_create(
        c.stream(),
        Some(c.consumer().to_string()),
        None,
        true,
        &c.m.payload,
        stream_identity(c.m),
        c.new_name,
    )?;
    c.change(op)
}

fn consumer_info(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    if !is_empty_request(c.body()) {
        return Err(c.refused(E::NOT_EMPTY_REQUEST.err()));
    }
    c.read(Read::ConsumerInfo(c.consumer().to_string()))
}

fn consumer_delete(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    if !is_empty_request(c.body()) {
        return Err(c.refused(E::NOT_EMPTY_REQUEST.err()));
    }
    c.change(Op::DeleteConsumer {
        name: c.consumer().to_string(),
    })
}

fn consumer_names(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let req: NamesRequest = optional(c.body()).map_err(|e| c.refused(e))?;
    c.read(Read::ConsumerNames(req.offset))
}

fn consumer_list(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let req: NamesRequest = optional(c.body()).map_err(|e| c.refused(e))?;
    c.read(Read::ConsumerList(req.offset))
}

fn consumer_pause(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let req: PauseRequest = optional(c.body()).map_err(|e| c.refused(e))?;
    c.change(Op::PauseConsumer {
        name: c.consumer().to_string(),
        until: req.pause_until,
    })
}

fn consumer_reset(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let req = reset_request(c.body()).map_err(|e| c.refused(e))?;
    c.change(Op::ResetConsumer {
        name: c.consumer().to_string(),
        seq: req.seq,
        identity: stream_identity(c.m).is_some(),
    })
}

fn consumer_unpin(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let req = unpin_request(c.body()).map_err(|e| c.refused(e))?;
    c.change(Op::UnpinConsumer {
        name: c.consumer().to_string(),
        group: req.group,
    })
}

/// `CONSUMER.MSG.NEXT.<stream>.<consumer>`: a pull, its body read once
/// the consumer is known to exist.
fn consumer_next(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    c.change(Op::Pull {
        consumer: c.consumer().to_string(),
        request: c.m.payload.clone(),
        reply: c.m.reply.clone().unwrap_or_default(),
    })
}

fn stream_step_down(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let preferred = preferred(c.body()).map_err(|e| c.refused(e))?;
    Ok(Classified::Stream(
        c.stream().to_string(),
        StreamRequest::StepDown {
            consumer: None,
            preferred,
        },
    ))
}

fn consumer_step_down(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let preferred = preferred(c.body()).map_err(|e| c.refused(e))?;
    Ok(Classified::Stream(
        c.stream().to_string(),
        StreamRequest::StepDown {
            consumer: Some(c.consumer().to_string()),
            preferred,
        },
    ))
}

fn stream_peer_remove(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let peer = peer_remove(c.body())?;
    c.account(AccountRequest::PeerRemove {
        name: c.stream().to_string(),
        peer,
    })
}

fn meta_step_down(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let req: StepDownRequest = object_or_default(c.body()).map_err(|e| c.refused(e))?;
    Ok(Classified::Operator(OperatorRequest::MetaStepDown {
        preferred: req.placement.map(|p| p.preferred).unwrap_or_default(),
    }))
}

fn server_remove(c: &mut Call<'_, '_>) -> Result<Classified, Refusal> {
    let body = c.body();
    let trimmed: Vec<u8> = body
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    if trimmed.is_empty() || trimmed == b"{}" {
        return Err(c.refused(E::BAD_REQUEST.err()));
    }
    let req: RemoveRequest =
        serde_json::from_slice(body).map_err(|e| c.refused(E::INVALID_JSON.with("err", e)))?;
    Ok(Classified::Operator(OperatorRequest::ServerRemove {
        peer: req.peer,
        peer_id: req.peer_id,
    }))
}

/// The stream identity a request names (`Nats-Stream-Identity`).
fn stream_identity(m: &Inbound) -> Option<String> {
    let h = m.headers.as_deref()?;
    headers::get(h, "Nats-Stream-Identity").map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Subjects an entry's pattern matches: its `*`s filled, its `>`
    /// matching no token, one, and two.
    fn samples(api: &Api) -> Vec<Vec<&'static str>> {
        let base: Vec<&str> = api
            .pattern
            .split('.')
            .filter(|t| *t != ">")
            .map(|t| if t == "*" { "X" } else { t })
            .collect();
        match api.pattern.ends_with(".>") {
            true => (0..3)
                .map(|n| {
                    let mut s = base.clone();
                    s.extend(std::iter::repeat_n("Y", n));
                    s
                })
                .collect(),
            false => vec![base],
        }
    }

    /// Each request is found by its own entry, whatever its names: no
    /// two entries match one subject, so their order does not matter.
    #[test]
    fn every_subject_has_one_entry() {
        for api in APIS {
            for tokens in samples(api) {
                let matching: Vec<_> = APIS
                    .iter()
                    .filter(|other| matches(other, &tokens).is_some())
                    .collect();
                assert_eq!(matching.len(), 1, "{tokens:?}");
                assert!(std::ptr::eq(matching[0], api), "{tokens:?}");
            }
        }
    }

    #[test]
    fn wildcards_give_their_tokens() {
        let tokens = ["CONSUMER", "CREATE", "S", "C", "f", "x"];
        let found = find(&tokens).unwrap();
        assert_eq!(found.api.kind, Some(Kind::ConsumerCreate));
        assert_eq!(found.names, ["S"]);
        assert_eq!(found.rest, ["C", "f", "x"]);
        assert!(find(&["CONSUMER", "DURABLE", "CREATE", "S"]).is_none());
        assert!(find(&["STREAM", "INFO", "S", "x"]).is_none());
        let direct = find(&["DIRECT", "GET", "S"]).unwrap();
        assert_eq!((direct.api.kind, direct.rest.len()), (None, 0));
    }

    /// What the meta leader answers itself: every request about one
    /// stream that is read and answered by its leader, but not a consumer
    /// create (the body comes first), a reset (nothing answers one for a
    /// missing consumer), pulls or direct gets.
    #[test]
    fn the_meta_leader_answers_not_found_to_these() {
        let mut kinds: Vec<_> = APIS
            .iter()
            .filter(|a| a.not_found_by_meta)
            .filter_map(|a| a.kind)
            .collect();
        kinds.sort_by_key(|k| format!("{k:?}"));
        assert_eq!(
            format!("{kinds:?}"),
            "[ConsumerDelete, ConsumerInfo, ConsumerLeaderStepdown, ConsumerList, \
             ConsumerNames, ConsumerPause, ConsumerUnpin, MsgDelete, MsgGet, StreamInfo, \
             StreamLeaderStepdown, StreamPurge]"
        );
    }

    /// Every entry classifies its own subjects, in both modes and with
    /// bodies each reads, without tripping `classify`'s check that the
    /// request is answered with the entry's kind.
    #[test]
    fn every_entry_classifies_with_its_kind() {
        let bodies: [&[u8]; 6] = [
            b"",
            b"{}",
            br#"{"name":"X","subjects":["x.>"]}"#,
            br#"{"stream_name":"X","config":{"durable_name":"X"}}"#,
            br#"{"seq":1}"#,
            br#"{"peer":"p","group":"g"}"#,
        ];
        for api in APIS {
            for tokens in samples(api) {
                for body in bodies {
                    for mode in [Mode::Single, Mode::Clustered] {
                        let m = Inbound {
                            subject: format!("$JS.API.{}", tokens.join(".")),
                            reply: Some("r".into()),
                            headers: None,
                            payload: bytes::Bytes::from_static(body),
                        };
                        let _ = super::super::classify(m, mode, &mut || "n".into());
                    }
                }
            }
        }
    }

    /// A request nobody serves: an API response with 503 10008 in the
    /// endpoint's own type, a pull or direct get a no-responders status,
    /// an unknown subject nothing.
    #[test]
    fn what_an_unserved_request_is_told() {
        let cases = [
            ("$JS.API.STREAM.INFO.S", Some("stream_info_response")),
            (
                "$JS.API.CONSUMER.CREATE.S",
                Some("consumer_create_response"),
            ),
            ("$JS.API.STREAM.CREATE.S", Some("stream_create_response")),
            ("$JS.API.INFO", Some("account_info_response")),
            ("$JS.API.CONSUMER.MSG.NEXT.S.C", None),
            ("$JS.API.DIRECT.GET.S", None),
        ];
        for (subject, response) in cases {
            let a = super::super::unserved(subject, "_INBOX.r").expect(subject);
            assert_eq!(a.msg.subject, "_INBOX.r");
            let body: serde_json::Value = match response {
                Some(_) => serde_json::from_slice(&a.msg.payload).expect(subject),
                None => {
                    let h = a.msg.headers.as_deref().expect(subject);
                    assert!(h.starts_with(b"NATS/1.0 503"), "{subject}");
                    continue;
                }
            };
            let ty = format!("io.nats.jetstream.api.v1.{}", response.unwrap());
            assert_eq!(body["type"], ty.as_str(), "{subject}");
            assert_eq!(body["error"]["code"], 503, "{subject}");
            assert_eq!(body["error"]["err_code"], 10008, "{subject}");
        }
        assert!(super::super::unserved("$JS.API.NOPE", "_INBOX.r").is_none());
        assert!(super::super::unserved("orders.1", "_INBOX.r").is_none());
    }
}
