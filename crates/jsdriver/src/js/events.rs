//! How JetStream's answers leave, with what they tell besides: every
//! answer goes through [`JetStream::answer`], which counts an API
//! response and audits it (`$JS.EVENT.ADVISORY.API`), and renders an
//! advisory or metric (`jsapi::advisory`) with its id, time and domain.
//! Everything goes to the account whose JetStream it is, and is built
//! only when someone there (or over a route) listens, as nats-server's
//! `publishAdvisory` checks interest first.
//!
//! An audit pairs a request with its answer: the sinks that take API
//! requests note each one ([`JetStream::note_request`]) under its reply
//! subject, and the answer to that subject takes the note.

use std::sync::atomic::Ordering;

use jetstream::api::advisory::{
    Advisory, Audit, AuditBook, AuditNote, OutOfSpace, API_AUDIT, OUT_OF_STORAGE,
};
use jsservice::reply::{Answer, What};
use parking_lot::Mutex;

use super::stream::PublishOut;
use super::{wall_clock, JetStream};
use flotilla_core::bus::{Message, Publisher};

/// Requests noted and not answered yet are forgotten past this many
/// (one answered by another server, or never).
const MAX_NOTES: usize = 1024;

/// API requests waiting for their answer, to audit the pair.
#[derive(Default)]
pub struct Audits {
    book: Mutex<AuditBook>,
}

/// Requests nats-server does not audit: pulls and direct gets.
fn audited(subject: &[u8]) -> bool {
    !subject.starts_with(b"$JS.API.CONSUMER.MSG.NEXT.") && !subject.starts_with(b"$JS.API.DIRECT.")
}

impl JetStream {
    /// An API request arrived from connection `publisher`: noted for its
    /// audit while anyone listens for audits.
    pub fn note_request(&self, msg: &Message<'_>, publisher: u64) {
        let Some(reply) = msg.reply.filter(|r| !r.is_empty()) else {
            return;
        };
        if !audited(msg.subject) || !self.bus.has_listener(API_AUDIT.as_bytes()) {
            return;
        }
        let note = AuditNote {
            subject: String::from_utf8_lossy(msg.subject).into_owned(),
            request: msg.payload.to_vec(),
            client: self.bus.requester_info(publisher),
        };
        let reply = String::from_utf8_lossy(reply).into_owned();
        self.audits.book.lock().note(reply, note, MAX_NOTES);
    }

    /// Sends `a` on `p`: an API response counted in account info and
    /// audited, an event rendered, anything else as it is.
    pub fn answer(&self, p: &mut Publisher, a: &Answer) {
        match &a.what {
            What::Event(e) => {
                let subject = a.msg.subject.as_str();
                debug_assert_eq!(subject, e.subject(), "an event goes on its own subject");
                if self.bus.has_listener(subject.as_bytes()) {
                    let body = e.render(
                        &flotilla_core::nuid(),
                        wall_clock(),
                        self.domain.as_deref(),
                        &self.account,
                    );
                    p.publish(subject, subject, None, None, &body);
                }
            }
            What::Api { .. } => {
                self.count(a.count());
                p.publish_out(&a.msg);
                if let Some(note) = self.take_note(&a.msg.subject) {
                    self.audit(p, note, a);
                }
            }
            What::Out | What::PubAck { .. } => {
                p.publish_out(&a.msg);
            }
        }
    }

    /// Sends API answer `a` to a request on `asked` that another server
    /// took (a cluster's stream leader answering what the meta leader
    /// proposed): audited as nats-server audits it, from the assignment,
    /// without the request or its requester.
    pub fn answer_for(&self, p: &mut Publisher, asked: &str, a: &Answer) {
        debug_assert!(matches!(a.what, What::Api { .. }), "only API answers");
        self.count(a.count());
        p.publish_out(&a.msg);
        let _ = self.take_note(&a.msg.subject);
        let note = AuditNote {
            subject: asked.to_string(),
            request: Vec::new(),
            client: None,
        };
        self.audit(p, note, a);
    }

    /// The request noted for an answer to `reply`, taken.
    fn take_note(&self, reply: &str) -> Option<AuditNote> {
        self.audits.book.lock().take(reply)
    }

    /// The audit of API answer `a` to request `note`.
    fn audit(&self, p: &mut Publisher, note: AuditNote, a: &Answer) {
        if !self.bus.has_listener(API_AUDIT.as_bytes()) {
            return;
        }
        let audit = Audit {
            server: self.bus.server_name(),
            client: note.client.as_ref(),
            subject: &note.subject,
            request: &String::from_utf8_lossy(&note.request),
            response: &String::from_utf8_lossy(&a.msg.payload),
            domain: self.domain.as_deref(),
        };
        let body = audit.render(&flotilla_core::nuid(), wall_clock());
        p.publish(API_AUDIT, API_AUDIT, None, None, &body);
    }

    /// A write of `stream` failed with `e`: if the disk is full, the
    /// system account is told, once (`SERVER.OUT_OF_STORAGE`). flotilla
    /// keeps refusing writes until space returns, where nats-server stops
    /// JetStream.
    pub fn note_write_error(&self, stream: &str, e: &str) {
        if e.contains("No space left on device") || e.contains("os error 28") {
            self.tell_out_of_space(stream);
        }
    }

    /// The disk is full under `stream` (`""`: under the Raft logs):
    /// the system account is told, the first time.
    pub fn tell_out_of_space(&self, stream: &str) {
        if self.shared.told_out_of_space.swap(true, Ordering::Relaxed) {
            return;
        }
        let Some(system) = self.bus.system() else {
            return;
        };
        if !system.has_listener(OUT_OF_STORAGE.as_bytes()) {
            return;
        }
        let (server_id, cluster) = self.bus.server_identity();
        let event = OutOfSpace {
            server: self.bus.server_name(),
            server_id,
            stream,
            cluster: &cluster,
            domain: self.domain.as_deref(),
        };
        let body = event.render(&flotilla_core::nuid(), wall_clock());
        let mut p = system.publisher();
        p.publish(OUT_OF_STORAGE, OUT_OF_STORAGE, None, None, &body);
        p.flush();
    }
}
