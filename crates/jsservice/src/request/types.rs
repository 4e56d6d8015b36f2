//! What a classified message is: the requests, by who decides them.

use bytes::Bytes;
use jetstream::api::{
    ApiError, MsgGetRequest, StreamConfig, StreamInfoRequest, StreamNamesRequest,
};

use crate::reply::{Answer, Kind};
use crate::stream_sm::Op;

/// A message on a JetStream subject, as a subscription received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    pub subject: String,
    pub reply: Option<String>,
    pub headers: Option<Bytes>,
    pub payload: Bytes,
}

/// Whether this server runs JetStream alone or in a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Single,
    Clustered,
}

/// What a message asks for.
#[derive(Debug)]
pub enum Request {
    /// Nobody answers: nats-server has no subscription there, or there is
    /// nowhere to answer.
    Ignore,
    /// Answered at once (a refusal, a status).
    Answer(Answer),
    /// About the account's streams as a whole: decided where every
    /// stream is known (`account`).
    Account {
        reply: String,
        request: AccountRequest,
    },
    /// About one stream: answered by (or through) that stream.
    Stream {
        stream: String,
        reply: Option<String>,
        request: StreamRequest,
    },
    /// The meta group's operator API (a cluster's meta leader).
    Operator {
        reply: String,
        request: OperatorRequest,
    },
}

#[derive(Debug)]
pub enum AccountRequest {
    Info,
    Create {
        name: String,
        config: Box<StreamConfig>,
    },
    Update {
        name: String,
        config: Box<StreamConfig>,
    },
    Delete {
        name: String,
    },
    Names(StreamNamesRequest),
    List(StreamNamesRequest),
    /// Take a server off a stream (a cluster only).
    PeerRemove {
        name: String,
        peer: String,
    },
}

impl AccountRequest {
    pub fn kind(&self) -> Kind {
        match self {
            AccountRequest::Info => Kind::AccountInfo,
            AccountRequest::Create { .. } => Kind::StreamCreate,
            AccountRequest::Update { .. } => Kind::StreamUpdate,
            AccountRequest::Delete { .. } => Kind::StreamDelete,
            AccountRequest::Names(_) => Kind::StreamNames,
            AccountRequest::List(_) => Kind::StreamList,
            AccountRequest::PeerRemove { .. } => Kind::StreamRemovePeer,
        }
    }
}

/// A request about one stream.
#[derive(Debug)]
pub enum StreamRequest {
    /// Answered from the stream's state (`stream_api::read`).
    Read(Read),
    /// An input to the stream's state machine, applied (one server) or
    /// proposed (a cluster) once `stream_api::admit` lets it in.
    Change(Op),
    /// Hand the stream's (and its consumers') leadership over (a cluster
    /// only): to the server named, if one is.
    StepDown {
        consumer: Option<String>,
        preferred: Option<String>,
    },
}

#[derive(Debug)]
pub enum Read {
    /// STREAM.INFO; answered as a create when `create` (see
    /// [`RESPONSE_TYPE`]).
    Info {
        request: StreamInfoRequest,
        create: bool,
    },
    MsgGet(MsgGetRequest),
    ConsumerInfo(String),
    ConsumerNames(i64),
    ConsumerList(i64),
    /// `DIRECT.GET`, with the subject given after the stream name, if
    /// any; its body is read only if the stream serves direct gets.
    Direct {
        subject: Option<String>,
        body: Bytes,
    },
}

impl Read {
    /// Whether the answer can be large (a stream's subjects or deleted
    /// sequences, a page of consumer infos): worth computing off the
    /// driver's event loop.
    pub fn may_be_large(&self) -> bool {
        matches!(self, Read::Info { .. } | Read::ConsumerList(_))
    }

    /// The kind of API response it is answered with (`Kind::System` for
    /// a direct get, answered with the message or a status).
    pub fn kind(&self) -> Kind {
        match self {
            Read::Info { .. } => Kind::StreamInfo,
            Read::MsgGet(_) => Kind::MsgGet,
            Read::ConsumerInfo(_) => Kind::ConsumerInfo,
            Read::ConsumerNames(_) => Kind::ConsumerNames,
            Read::ConsumerList(_) => Kind::ConsumerList,
            Read::Direct { .. } => Kind::System,
        }
    }
}

#[derive(Debug)]
pub enum OperatorRequest {
    /// `$JS.API.META.LEADER.STEPDOWN`, to the server named, if one is.
    MetaStepDown { preferred: String },
    /// `$JS.API.SERVER.REMOVE`: a server by name, or by peer id (which
    /// takes precedence).
    ServerRemove { peer: String, peer_id: String },
}

impl StreamRequest {
    /// The kind of API response its requester hears; `Kind::System`
    /// for what is answered with messages and statuses instead (direct
    /// gets, pulls, acks, inputs that come from no API request).
    pub fn kind(&self) -> Kind {
        match self {
            StreamRequest::Read(read) => read.kind(),
            StreamRequest::Change(op) => match op {
                Op::Purge { .. } => Kind::StreamPurge,
                Op::DeleteMsg { .. } => Kind::MsgDelete,
                Op::ConsumerCreate { .. } => Kind::ConsumerCreate,
                Op::DeleteConsumer { .. } => Kind::ConsumerDelete,
                Op::PauseConsumer { .. } => Kind::ConsumerPause,
                Op::UnpinConsumer { .. } => Kind::ConsumerUnpin,
                Op::ResetConsumer { .. } => Kind::ConsumerReset,
                _ => Kind::System,
            },
            StreamRequest::StepDown { consumer, .. } => match consumer {
                Some(_) => Kind::ConsumerLeaderStepdown,
                None => Kind::StreamLeaderStepdown,
            },
        }
    }
}

/// Why a request gets no further.
pub type Refusal = (Kind, ApiError);

pub(super) const API_PREFIX: &str = "$JS.API.";
pub const META_STEPDOWN: &str = "$JS.API.META.LEADER.STEPDOWN";
/// A header naming the response type a request is answered as: `create`
/// on a STREAM.INFO makes it a create's answer (a cluster's meta leader
/// forwards a create of a stream that exists, with the same config, to
/// its leader so).
pub const RESPONSE_TYPE: &str = "Nats-Response-Type";
pub const SERVER_REMOVE: &str = "$JS.API.SERVER.REMOVE";
