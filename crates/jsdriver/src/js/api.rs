//! The `$JS.API.>` dispatcher of one server. One task, one request at a
//! time: each request is classified (`jsservice::request`); account-level
//! requests are decided here (`jsservice::account`), one at a time, so
//! their checks across streams never race; requests about one stream go
//! to that stream's actor, which answers once its writes are durable.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use jetstream::api::advisory::{Action, Event};
use jetstream::api::StreamInfo;
use jsservice::account::{self, Decision, Usage};
use jsservice::reply::{self, Answer};
use jsservice::request::{classify, AccountRequest, Inbound, Mode, Request};
use jsservice::stream_api;
use tokio::sync::{mpsc, oneshot};

use super::{new_consumer_name, Cmd, JetStream};
use flotilla_core::bus::Publisher as InternalPublisher;

pub async fn run(js: Arc<JetStream>, mut rx: mpsc::UnboundedReceiver<Inbound>) {
    let mut d = Dispatcher {
        publisher: js.bus.publisher(),
        js,
    };
    while let Some(m) = rx.recv().await {
        d.request(m).await;
        d.publisher.flush();
    }
}

struct Dispatcher {
    js: Arc<JetStream>,
    publisher: InternalPublisher,
}

impl Dispatcher {
    fn send(&mut self, a: Answer) {
        self.js.answer(&mut self.publisher, &a);
    }

    async fn request(&mut self, m: Inbound) {
        match classify(m, Mode::Single, &mut new_consumer_name) {
            Request::Ignore => {}
            Request::Answer(a) => self.send(a),
            Request::Account { reply, request } => self.account(reply, request).await,
            Request::Stream {
                stream,
                reply,
                request,
            } => {
                let cmd = Cmd::Request { reply, request };
                let refused = match self.js.stream(&stream) {
                    Some(h) => h.try_send(cmd).err().map(|c| *c),
                    None => Some(cmd),
                };
                if let Some(Cmd::Request { reply, request }) = refused {
                    if let Some(a) = stream_api::missing(&stream, reply.as_deref(), &request) {
                        self.send(a);
                    }
                }
            }
            // Only a cluster's meta leader answers these.
            Request::Operator { .. } => {}
        }
    }

    async fn account(&mut self, to: String, request: AccountRequest) {
        let kind = request.kind();
        let limits = self.js.limits();
        let decision = account::decide(self.js.as_ref(), limits, Mode::Single, &to, request);
        let answer = match decision {
            Decision::Answer(a) => a,
            Decision::Create(config) => match self.js.create_stream(*config) {
                Ok(info) => {
                    let name = info.config.name.clone();
                    self.send(reply::created(&to, info));
                    Answer::event(Event::Stream {
                        stream: name,
                        action: Action::Create,
                    })
                }
                Err(e) => Answer::refused(&to, kind, &e),
            },
            Decision::Exists(name) => {
                // The same config again: the stream as it is, answered
                // when its actor has looked, without holding up the
                // dispatcher.
                let Some(rx) = self.info(&name) else { return };
                let js = self.js.clone();
                tokio::spawn(async move {
                    let Ok((info, _)) = rx.await else { return };
                    let a = reply::created(&to, info);
                    let mut p = js.bus.publisher();
                    js.answer(&mut p, &a);
                    p.flush();
                });
                return;
            }
            Decision::Update(config) => match self.js.update_stream(*config, &to).await {
                // Answered by the stream once durable.
                Ok(()) => return,
                Err(e) => Answer::refused(&to, kind, &e),
            },
            Decision::Delete(name) => match self.js.delete_stream(&name).await {
                Ok(()) => account::deleted(&to),
                Err(e) => Answer::refused(&to, kind, &e),
            },
            Decision::List {
                names,
                total,
                offset,
            } => {
                let waits: Vec<_> = names.iter().filter_map(|n| self.info(n)).collect();
                let mut infos: Vec<StreamInfo> = Vec::with_capacity(waits.len());
                for rx in waits {
                    if let Ok((info, _)) = rx.await {
                        infos.push(info);
                    }
                }
                account::list(&to, total, offset, infos)
            }
            Decision::Info => account::info(
                &to,
                self.js.as_ref(),
                self.usage(),
                &self.js.account_limits,
                self.js.domain.as_deref(),
            ),
            // Refused by the classifier on one server.
            Decision::PeerRemove { .. } => return,
        };
        self.send(answer);
    }

    /// Asks a stream's actor for its info.
    fn info(
        &self,
        name: &str,
    ) -> Option<oneshot::Receiver<(StreamInfo, Vec<jetstream::api::ConsumerInfo>)>> {
        let h = self.js.stream(name)?;
        let (done, rx) = oneshot::channel();
        h.send(Cmd::Info {
            consumers: false,
            done,
        })
        .then_some(rx)
    }

    fn usage(&self) -> Usage {
        let streams = self.js.streams();
        let (memory, storage) = self.js.usage();
        let mut usage = Usage {
            memory,
            storage,
            streams: streams.len() as u64,
            consumers: streams
                .iter()
                .map(|h| h.consumers.load(Ordering::Relaxed))
                .sum(),
            total: self.js.api_total.load(Ordering::Relaxed),
            errors: self.js.api_errors.load(Ordering::Relaxed),
            tiers: Default::default(),
        };
        self.js.tier_usage(&mut usage, true);
        usage
    }
}
