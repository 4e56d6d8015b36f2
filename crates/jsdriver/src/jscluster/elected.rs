//! New leaders say so, as nats-server's do: a replicated stream's new
//! leader on `$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.<stream>` (and,
//! since its consumers are led with it, each consumer's on
//! `CONSUMER.LEADER_ELECTED`), once in the stream's account without
//! `account` and once in the system account with it; the meta group's
//! new leader on `DOMAIN.LEADER_ELECTED`, in the system account only.
//! Each copy is built only if someone listens there.

use jetstream::api::advisory::{
    Advisory, DomainLeaderElected, LeaderElected, DOMAIN_LEADER_ELECTED,
};
use jetstream::api::PeerInfo;
use jsservice::meta_sm::META_GROUP;

use super::{peer_hash, JsCluster};
use crate::js::{wall_clock, JetStream};
use flotilla_core::bus::Bus;

impl JsCluster {
    /// `group`'s members as this server sees them (the advisories'
    /// `replicas` include the leader, unlike an info's).
    fn members(&self, group: u64) -> Vec<PeerInfo> {
        let g = self.node.status().group(group).cloned().unwrap_or_default();
        self.members_of(&g, true)
    }

    /// This server leads stream `stream`'s group `group`, and so the
    /// stream (`consumer` None) or one of its consumers.
    pub fn tell_leader(&self, js: &JetStream, stream: &str, consumer: Option<&str>, group: u64) {
        let replicas = self.members(group);
        let me = self.server.name().to_string();
        let system = self.server.system_bus();
        let mut event = LeaderElected {
            account: None,
            stream,
            consumer,
            leader: &me,
            replicas: &replicas,
            domain: js.domain.as_deref(),
        };
        let subject = event.subject();
        // A stream in the system account is told there once.
        if system
            .as_ref()
            .is_none_or(|b| b.account_name() != js.account)
        {
            send(&js.bus, &subject, |id| event.render(id, wall_clock()));
        }
        if let Some(bus) = &system {
            event.account = Some(&js.account);
            send(bus, &subject, |id| event.render(id, wall_clock()));
        }
    }

    /// This server took the lead of the meta group.
    pub fn tell_meta_leader(&self, domain: Option<&str>) {
        let Some(bus) = self.server.system_bus() else {
            return;
        };
        let replicas = self.members(META_GROUP);
        let event = DomainLeaderElected {
            leader: &peer_hash(self.server.name()),
            replicas: &replicas,
            cluster: &self.server.cluster_name(),
            domain,
        };
        send(&bus, DOMAIN_LEADER_ELECTED, |id| {
            event.render(id, wall_clock())
        });
    }
}

/// Publishes on `bus` what `body` renders, if anyone listens there.
fn send(bus: &Bus, subject: &str, body: impl FnOnce(&str) -> Vec<u8>) {
    if !bus.has_listener(subject.as_bytes()) {
        return;
    }
    let body = body(&flotilla_core::nuid());
    let mut p = bus.publisher();
    p.publish(subject, subject, None, None, &body);
    p.flush();
}
