//! What monitoring shows of JetStream (`monitor::JetStreamView`): the
//! `jetstream` and `raft` sections of `/varz`, `/jsz`, `/raftz`, and
//! JetStream's part of `/healthz`, read from the drivers' state
//! (`jsdriver`) into monitoring's shapes.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use flotilla_core::account::SYSTEM_ACCOUNT;
use flotilla_core::server::Server;
use jetstream::api::ClusterInfo;
use monitor::format::rfc3339;
use monitor::format::Empty;
use monitor::healthz::{HealthOptions, Issue, Kind};
use monitor::ipqueuesz::Queue as IpQueue;
use monitor::jsz::{
    AccountDetail, ApiStats, Config, JsInfo, JszOptions, MetaClusterInfo, SnapshotStats, Stats,
    StoreDamage, StreamDetail, Varz,
};
use monitor::metrics::{Histogram, RaftGroup};
use monitor::raftz::{RaftzGroup, RaftzPeer, META_NAME};
use monitor::varz::{RaftVarz, RejectedFrames};
use monitor::JetStreamView;

use jsdriver::js::{JetStream, SyncPolicy};
use jsdriver::jscluster::{peer_hash, JsCluster};

/// This server's JetStream, as monitoring sees it.
pub struct View {
    /// Each account's JetStream, sorted by account name; never empty.
    accounts: Vec<Arc<JetStream>>,
    /// Set when JetStream is clustered.
    jc: Option<Arc<JsCluster>>,
}

impl View {
    /// The view of `accounts` (at least one), and of the cluster when
    /// JetStream is clustered.
    pub fn new(mut accounts: Vec<Arc<JetStream>>, jc: Option<Arc<JsCluster>>) -> View {
        assert!(
            !accounts.is_empty(),
            "JetStream serves at least one account"
        );
        accounts.sort_by(|a, b| a.account.cmp(&b.account));
        View { accounts, jc }
    }

    /// What holds for the server as a whole (its limits, its settings).
    fn first(&self) -> &JetStream {
        &self.accounts[0]
    }
}

impl JetStreamView for View {
    fn varz(&self) -> Varz {
        Varz {
            config: Some(config(self.first())),
            stats: Some(stats(&self.accounts)),
            limits: Some(Empty {}),
        }
    }

    fn raft_varz(&self) -> Option<RaftVarz> {
        self.jc.as_deref().map(raft_varz)
    }

    fn jsz<'a>(
        &'a self,
        server: &'a Server,
        opts: &'a JszOptions,
    ) -> Pin<Box<dyn Future<Output = JsInfo> + Send + 'a>> {
        Box::pin(jsz(server, &self.accounts, self.jc.as_deref(), opts))
    }

    fn raftz(
        &self,
        acc: &str,
        group: &str,
    ) -> Option<BTreeMap<String, BTreeMap<String, RaftzGroup>>> {
        Some(raftz(self.jc.as_deref()?, acc, group))
    }

    fn healthz<'a>(
        &'a self,
        opts: &'a HealthOptions,
    ) -> Pin<Box<dyn Future<Output = Vec<Issue>> + Send + 'a>> {
        Box::pin(health_issues(&self.accounts, self.jc.as_deref(), opts))
    }

    fn raft_groups(&self) -> Vec<RaftGroup> {
        let Some(jc) = self.jc.as_deref() else {
            return Vec::new();
        };
        let names = jc.group_names();
        let status = jc.node.status();
        status
            .groups
            .iter()
            .filter_map(|g| {
                let (account, group) = if g.group == jsservice::meta_sm::META_GROUP {
                    (SYSTEM_ACCOUNT.to_string(), META_NAME.to_string())
                } else {
                    names.get(&g.group).cloned()?
                };
                Some(RaftGroup {
                    account,
                    group,
                    leader: g.is_leader,
                    term: g.term,
                    committed: g.committed,
                    applied: g.applied,
                    leader_changes: g.leader_changes,
                })
            })
            .collect()
    }

    fn ipqueues(&self) -> Vec<(String, IpQueue)> {
        let mut queues: Vec<(String, IpQueue)> = self
            .accounts
            .iter()
            .flat_map(|js| {
                js.streams().into_iter().map(|h| {
                    let name = format!("[ACC:{}] stream '{}' messages", js.account, h.name);
                    let queue = IpQueue {
                        pending: h.queued(),
                        in_progress: 0,
                    };
                    (name, queue)
                })
            })
            .collect();
        let commits = IpQueue {
            pending: self.first().shared.commits_queued(),
            in_progress: 0,
        };
        queues.push(("JetStream group commit".to_string(), commits));
        queues
    }

    /// The group committer's syncs and, clustered, the Raft logs':
    /// every durable write passes one or the other.
    fn write_latency(&self) -> Option<Histogram> {
        let committer = self.first().shared.write_latency();
        let raft = self.jc.as_ref().map(|jc| jc.node.sync_latency.snapshot());
        let (mut counts, mut sum) = committer.clone().or(raft.clone())?;
        if let (Some(_), Some((more, more_sum))) = (committer, raft) {
            counts.iter_mut().zip(more).for_each(|(c, m)| *c += m);
            sum += more_sum;
        }
        Some(Histogram {
            bounds: store::LATENCY_BOUNDS.to_vec(),
            counts,
            sum,
        })
    }
}

fn config(js: &JetStream) -> Config {
    let (sync_interval, sync_always) = match js.sync {
        SyncPolicy::Always => (0, true),
        SyncPolicy::Interval(d) => (d.as_nanos(), false),
    };
    Config {
        max_memory: js.max_memory,
        max_storage: js.max_store,
        store_dir: js.store_dir.join("jetstream").display().to_string(),
        sync_interval,
        sync_always,
        domain: js.domain.clone(),
        compress_ok: false,
        strict: true,
    }
}

/// The server's figures: the sums of its accounts'.
fn stats(accounts: &[Arc<JetStream>]) -> Stats {
    let sum = |f: &dyn Fn(&JetStream) -> u64| accounts.iter().map(|js| f(js)).sum::<u64>();
    let (memory, storage) = accounts[0].shared.usage();
    Stats {
        memory,
        storage,
        reserved_memory: sum(&|js| js.reserved_totals().0),
        reserved_storage: sum(&|js| js.reserved_totals().1),
        accounts: accounts.len(),
        ha_assets: 0,
        api: ApiStats {
            level: jetstream::api::API_LEVEL,
            total: sum(&|js| js.api_total.load(Ordering::Relaxed)),
            errors: sum(&|js| js.api_errors.load(Ordering::Relaxed)),
        },
        store_damage: Some(StoreDamage {
            found: sum(&|js| js.damage_found.load(Ordering::Relaxed)),
            repaired: sum(&|js| js.damage_repaired.load(Ordering::Relaxed)),
        }),
    }
}

fn meta_cluster(jc: &JsCluster) -> MetaClusterInfo {
    let g = jc.meta_status().unwrap_or_default();
    let name_of = |id: u64| {
        jc.peer_name(id)
            .unwrap_or_else(|| format!("Server name unknown at this time (peerID: {id:x})"))
    };
    let leader = if g.leader == 0 {
        String::new()
    } else {
        name_of(g.leader)
    };
    let replicas = jc.replicas(&g);
    MetaClusterInfo {
        name: jc.server.cluster_name(),
        peer: if leader.is_empty() {
            String::new()
        } else {
            peer_hash(&leader)
        },
        leader,
        replicas,
        cluster_size: g.voters.len(),
        quorum_needed: g.voters.len() / 2 + 1,
        pending: 0,
        pending_requests: 0,
        pending_infos: 0,
        snapshot: SnapshotStats {
            pending_entries: g.last_index.saturating_sub(g.applied),
            pending_size: 0,
        },
    }
}

/// nats-server's `Jsz`: the server's figures over every account; the
/// details of the account asked for, or of a page of them by name.
async fn jsz(
    server: &Server,
    accounts: &[Arc<JetStream>],
    jc: Option<&JsCluster>,
    opts: &JszOptions,
) -> JsInfo {
    let handles: Vec<_> = accounts.iter().flat_map(|js| js.streams()).collect();
    let mut info = JsInfo {
        stats: stats(accounts),
        server_id: server.id.clone(),
        now: rfc3339(SystemTime::now()),
        disabled: false,
        config: config(&accounts[0]),
        limits: Some(Empty {}),
        streams: handles.len(),
        consumers: handles
            .iter()
            .map(|h| h.consumers.load(Ordering::Relaxed))
            .sum(),
        messages: handles.iter().map(|h| h.msgs.load(Ordering::Relaxed)).sum(),
        bytes: handles
            .iter()
            .map(|h| h.bytes.load(Ordering::Relaxed))
            .sum(),
        meta_cluster: jc.map(meta_cluster),
        account_details: Vec::new(),
        total: accounts.len(),
    };
    // Sorted by name (`View::new`): a page is a slice.
    let wanted: &[Arc<JetStream>] = match accounts.iter().position(|js| js.account == opts.acc) {
        Some(i) => &accounts[i..=i],
        None if opts.accounts && opts.limit > 0 => {
            let from = opts.offset.min(accounts.len());
            let to = from + opts.limit.min(accounts.len() - from);
            &accounts[from..to]
        }
        None => &[],
    };
    for js in wanted {
        info.account_details
            .push(account_detail(server, js, opts).await);
    }
    info
}

/// One account's part of `/jsz`.
async fn account_detail(server: &Server, js: &JetStream, opts: &JszOptions) -> AccountDetail {
    let (memory, storage) = js.usage();
    let (reserved_memory, reserved_storage) = js.reserved_totals();
    let mut detail = AccountDetail {
        name: js.name_tag.clone(),
        id: js.account.clone(),
        stats: Stats {
            memory,
            storage,
            reserved_memory,
            reserved_storage,
            accounts: 0,
            ha_assets: 0,
            api: ApiStats {
                level: 0,
                total: js.api_total.load(Ordering::Relaxed),
                errors: js.api_errors.load(Ordering::Relaxed),
            },
            store_damage: None,
        },
        stream_detail: Vec::new(),
    };
    if !opts.streams {
        return detail;
    }
    for (stream, consumers) in js.snapshots(opts.consumers).await {
        let mut d = StreamDetail {
            name: stream.config.name.clone(),
            created: jetstream::api::time::rfc3339(stream.created),
            cluster: ClusterInfo {
                leader: server.name.clone(),
                ..ClusterInfo::default()
            },
            config: opts.config.then(|| stream.config.clone()),
            state: stream.state,
            consumer_detail: Vec::new(),
        };
        if opts.consumers {
            d.consumer_detail = consumers
                .iter()
                .map(|c| {
                    let mut v = serde_json::to_value(c).expect("consumer info serializes");
                    if !opts.config {
                        if let Some(o) = v.as_object_mut() {
                            o.remove("config");
                        }
                    }
                    v
                })
                .collect();
        }
        detail.stream_detail.push(d);
    }
    detail
}

fn raftz(jc: &JsCluster, acc: &str, group: &str) -> BTreeMap<String, BTreeMap<String, RaftzGroup>> {
    let mut out = BTreeMap::new();
    let wanted =
        |a: &str, name: &str| (acc.is_empty() || acc == a) && (group.is_empty() || group == name);
    let status = jc.node.status();
    let names = jc.group_names();
    for g in status.groups.iter() {
        let (account, name) = if g.group == jsservice::meta_sm::META_GROUP {
            (SYSTEM_ACCOUNT, META_NAME.to_string())
        } else if let Some((account, n)) = names.get(&g.group) {
            (account.as_str(), n.clone())
        } else {
            continue;
        };
        if wanted(account, &name) {
            out.entry(account.to_string())
                .or_insert_with(BTreeMap::new)
                .insert(name, group_of(jc, g));
        }
    }
    out
}

fn group_of(jc: &JsCluster, g: &cluster::node::GroupStatus) -> RaftzGroup {
    let hash_of = |id: u64| {
        jc.peer_name(id)
            .map(|n| peer_hash(&n))
            .unwrap_or_else(|| format!("{id:x}"))
    };
    let state = if g.is_leader {
        "LEADER"
    } else if g.leader == 0 && g.vote == jc.me.id {
        "CANDIDATE"
    } else {
        "FOLLOWER"
    };
    let transport = &jc.node.transport;
    let peers = g
        .voters
        .iter()
        .filter(|&&v| v != jc.me.id)
        .map(|&v| {
            let name = jc.peer_name(v).unwrap_or_default();
            let replicated = g.progress.iter().find(|(id, _)| *id == v).map(|(_, m)| *m);
            let last_seen = transport
                .last_heard(v)
                .map(jetstream::duration::format)
                .unwrap_or_default();
            (
                hash_of(v),
                RaftzPeer {
                    known: !name.is_empty(),
                    name,
                    last_replicated_index: replicated,
                    last_seen,
                },
            )
        })
        .collect();
    RaftzGroup {
        id: peer_hash(jc.server.name()),
        state,
        size: g.voters.len(),
        quorum_needed: g.voters.len() / 2 + 1,
        committed: g.committed,
        applied: g.applied,
        leader: if g.leader == 0 {
            String::new()
        } else {
            hash_of(g.leader)
        },
        ever_had_leader: g.leader != 0 || g.term > 1,
        term: g.term,
        voted_for: if g.vote == 0 {
            String::new()
        } else {
            hash_of(g.vote)
        },
        pterm: g.last_term,
        pindex: g.last_index,
        // Every group's replication goes through the system account, as
        // nats-server's does unless an account volunteers its own.
        system_account: true,
        traffic_account: SYSTEM_ACCOUNT,
        ipq_proposal_len: 0,
        ipq_entry_len: 0,
        ipq_resp_len: 0,
        ipq_apply_len: 0,
        peers,
    }
}

fn raft_varz(jc: &JsCluster) -> RaftVarz {
    let c = &jc.node.transport.counters;
    let r = *c.rejected.lock();
    let st = jc.node.status();
    RaftVarz {
        frames_in: c.frames_in.load(Ordering::Relaxed),
        bytes_in: c.bytes_in.load(Ordering::Relaxed),
        frames_out: c.frames_out.load(Ordering::Relaxed),
        bytes_out: c.bytes_out.load(Ordering::Relaxed),
        rejected_frames: RejectedFrames {
            length: r.length,
            checksum: r.checksum,
            class: r.class,
            short: r.short,
        },
        foreign_frames: c.foreign.load(Ordering::Relaxed),
        dropped_frames: c.dropped.load(Ordering::Relaxed),
        refused_not_member: st.refused_foreign,
        refused_unknown_group: st.refused_unknown_group,
        refused_undecodable: st.refused_undecodable,
        votes_withheld: st.votes_withheld,
    }
}

/// Why a clustered JetStream server is not healthy, in nats-server's
/// words: its Raft node must be running; it must know a meta leader, and
/// a follower must have heard from it lately and applied what is
/// committed; and every stream assigned to it must be current (see
/// [`stream_health`]).
/// Why the meta group makes this server unhealthy, in nats-server's
/// words.
fn meta_problem(jc: &JsCluster) -> Option<String> {
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
    None
}

/// nats-server's health checks of JetStream (`healthz` past its server
/// checks): the meta group, then each stream this server holds in each
/// account (or the account, stream and consumer `opts` names), in that
/// order. A consumer is led with its stream, so it is as current as
/// its stream.
async fn health_issues(
    accounts: &[Arc<JetStream>],
    jc: Option<&JsCluster>,
    opts: &HealthOptions,
) -> Vec<Issue> {
    if let Some(jc) = jc {
        if let Some(why) = meta_problem(jc) {
            return vec![Issue::new(Kind::JetStream, ["", "", ""], why)];
        }
        if opts.meta_only {
            return Vec::new();
        }
    }
    let account = opts.account.as_str();
    let wanted: Vec<&Arc<JetStream>> = accounts
        .iter()
        .filter(|js| account.is_empty() || js.account == account)
        .collect();
    if wanted.is_empty() && !account.is_empty() {
        let why = format!("JetStream account {account:?} not found");
        return vec![Issue::not_found(Kind::Account, [account, "", ""], why)];
    }
    let mut issues = Vec::new();
    for js in wanted {
        match account_issues(js, jc, opts).await {
            Ok(found) => issues.extend(found),
            Err(not_found) => return vec![not_found],
        }
    }
    issues
}

/// One account's streams this server holds (one server's all; a
/// cluster's those assigned to it): those not current, or, when `opts`
/// names a stream or consumer this server does not hold, that (`Err`).
async fn account_issues(
    js: &JetStream,
    jc: Option<&JsCluster>,
    opts: &HealthOptions,
) -> Result<Vec<Issue>, Issue> {
    let acc = js.account.as_str();
    let held: Vec<(String, Option<(u64, usize)>)> = match jc {
        None => js
            .streams()
            .iter()
            .map(|h| (h.name.clone(), None))
            .collect(),
        Some(jc) => jc
            .meta
            .lock()
            .streams()
            .filter(|a| a.account == js.account && a.peers.contains(&jc.me.id))
            .map(|a| (a.name.clone(), Some((a.group, a.peers.len()))))
            .collect(),
    };
    let stream = opts.stream.as_str();
    if !stream.is_empty() && !held.iter().any(|(name, _)| name == stream) {
        let why = format!("JetStream stream {stream:?} not found on account {acc:?}");
        return Err(Issue::not_found(Kind::Stream, [acc, stream, ""], why));
    }
    let mut issues = Vec::new();
    for (name, group) in held
        .iter()
        .filter(|(n, _)| stream.is_empty() || n == stream)
    {
        if let (Some(jc), Some((group, replicas))) = (jc, group) {
            let status = jc.node.status();
            let g = status.groups.iter().find(|g| g.group == *group);
            if let Some(why) = stream_health(jc, g, *replicas) {
                let why = format!("JetStream stream '{acc} > {name}' is not current: {why}");
                issues.push(Issue::new(Kind::Stream, [acc, name, ""], why));
                continue;
            }
        }
        let consumer = opts.consumer.as_str();
        if consumer.is_empty() {
            continue;
        }
        let names = js.consumer_names(name).await.unwrap_or_default();
        if !names.iter().any(|c| c == consumer) {
            let why = format!(
                "JetStream consumer {consumer:?} not found for stream {name:?} on account {acc:?}"
            );
            return Err(Issue::not_found(Kind::Consumer, [acc, name, consumer], why));
        }
    }
    Ok(issues)
}

/// nats-server's reasons a stream replica is not current.
fn stream_health(
    jc: &JsCluster,
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
