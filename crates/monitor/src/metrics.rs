//! `/metrics`: every figure monitoring shows, in Prometheus' text format
//! (0.0.4), named as prometheus-nats-exporter names them so its Grafana
//! dashboards read flotilla unchanged (`docs/metrics.md` has the
//! mapping):
//! - `/varz` as the exporter flattens it: `gnatsd_varz_<path>` for every
//!   number, nested keys joined by `_`; the few strings it keeps as
//!   `{value=...} 1` (times as epoch milliseconds);
//! - `/healthz` as `gnatsd_healthz_status` (0 when healthy, as there);
//! - `/jsz` as `jetstream_{server,account,stream,consumer}_*`, labelled
//!   as the exporter labels them;
//!
//! and beyond the exporter, `flotilla_raft_*` per Raft group (term,
//! commit, applied, apply lag, leader changes) and the durable-write
//! latency histogram `flotilla_jetstream_write_seconds`.
//!
//! Every series is a gauge but the histogram; label values are escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// A histogram as Prometheus shows one: each bucket's own count (bounds
/// `bounds`, then one for everything above), and the total observed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    pub bounds: Vec<f64>,
    pub counts: Vec<u64>,
    pub sum: f64,
}

/// One Raft group's figures, for `flotilla_raft_*`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaftGroup {
    pub account: String,
    pub group: String,
    pub leader: bool,
    pub term: u64,
    pub committed: u64,
    pub applied: u64,
    pub leader_changes: u64,
}

/// What `/metrics` reads: the endpoints' JSON and the view's figures.
pub struct Sources {
    pub varz: Value,
    pub jsz: Option<Value>,
    pub healthy: bool,
    pub raft: Vec<RaftGroup>,
    pub write_latency: Option<Histogram>,
}

/// The page, from what `sources` holds.
pub fn render(sources: &Sources) -> String {
    let mut out = Families::default();
    let server_id = sources.varz["server_id"].as_str().unwrap_or("").to_string();
    let id = [("server_id", server_id.as_str())];
    varz(&mut out, &id, "", &sources.varz);
    out.gauge(
        "gnatsd_healthz_status",
        "0 when the server is healthy, 1 when not",
        &id,
        f64::from(u8::from(!sources.healthy)),
    );
    if let Some(jsz) = &sources.jsz {
        let name = sources.varz["server_name"].as_str().unwrap_or("");
        jetstream(&mut out, &server_id, name, jsz);
    }
    for g in &sources.raft {
        let labels = [
            ("server_id", server_id.as_str()),
            ("account", g.account.as_str()),
            ("group", g.group.as_str()),
        ];
        let figures = [
            ("term", "The group's Raft term", g.term),
            ("commit", "The last index known committed", g.committed),
            ("applied", "The last index applied here", g.applied),
            (
                "apply_lag",
                "Committed entries not yet applied here",
                g.committed.saturating_sub(g.applied),
            ),
            (
                "leader_changes",
                "Leader changes this server saw",
                g.leader_changes,
            ),
            (
                "is_leader",
                "1 when this server leads the group",
                u64::from(g.leader),
            ),
        ];
        for (name, help, v) in figures {
            out.gauge(&format!("flotilla_raft_{name}"), help, &labels, v as f64);
        }
    }
    if let Some(h) = &sources.write_latency {
        out.histogram(
            "flotilla_jetstream_write_seconds",
            "How long a durable write (fsync batch) took",
            &id,
            h,
        );
    }
    out.text()
}

/// Keys whose string values the exporter keeps (`labelKeys`).
const KEPT_STRINGS: &[&str] = &[
    "server_id",
    "server_name",
    "version",
    "domain",
    "leader",
    "name",
    "start",
    "config_load_time",
];

/// Paths the exporter leaves out of `/varz`.
const SKIPPED: &[&str] = &[
    "leaf",
    "trusted_operators_claim",
    "cluster_tls_timeout",
    "cluster_cluster_port",
    "cluster_auth_timeout",
    "gateway_port",
    "gateway_auth_timeout",
    "gateway_tls_timeout",
    "gateway_connect_retries",
];

/// The exporter's flattened name of `key` under `prefix`: joined by `_`,
/// `/` as `_`, no doubled or edge `_`; anything Prometheus does not
/// allow in a name becomes `_` too.
fn flat(prefix: &str, key: &str) -> String {
    let joined = format!("{prefix}_{key}");
    let mut name = String::with_capacity(joined.len());
    for c in joined.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '_' };
        if c == '_' && name.ends_with('_') {
            continue;
        }
        name.push(c);
    }
    name.trim_matches('_').to_string()
}

fn varz(out: &mut Families, id: &[(&str, &str)], prefix: &str, v: &Value) {
    let Some(object) = v.as_object() else { return };
    for (key, value) in object {
        let path = flat(prefix, key);
        if SKIPPED.contains(&path.as_str()) {
            continue;
        }
        let name = format!("gnatsd_varz_{path}");
        match value {
            Value::Number(n) => out.gauge(&name, &path, id, n.as_f64().unwrap_or(0.0)),
            Value::String(s) if KEPT_STRINGS.contains(&key.as_str()) => {
                match jsapi::time::parse(s) {
                    Some(nanos) if key == "start" || key == "config_load_time" => {
                        out.gauge(&name, &path, id, (nanos / 1_000_000) as f64)
                    }
                    _ => {
                        let labels = [id, &[("value", s.as_str())]].concat();
                        out.gauge(&name, &path, &labels, 1.0);
                    }
                }
            }
            Value::Object(_) => varz(out, id, &path, value),
            _ => {}
        }
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// A family's name after its prefix, its help, and where its value is
/// in the JSON it is read from (a JSON pointer).
type Figure = (&'static str, &'static str, &'static str);

/// The exporter's JetStream figures: of the server (`/jsz`), an account
/// (`account_details[]`), a stream (`stream_detail[]`) and a consumer
/// (`consumer_detail[]`).
const SERVER: &[Figure] = &[
    (
        "total_streams",
        "Total number of streams in JetStream",
        "/streams",
    ),
    (
        "total_consumers",
        "Total number of consumers in JetStream",
        "/consumers",
    ),
    (
        "total_messages",
        "Total number of stored messages in JetStream",
        "/messages",
    ),
    (
        "total_message_bytes",
        "Total number of bytes stored in JetStream",
        "/bytes",
    ),
    ("max_memory", "JetStream max memory", "/config/max_memory"),
    (
        "max_storage",
        "JetStream max storage",
        "/config/max_storage",
    ),
];
const ACCOUNT: &[Figure] = &[
    (
        "max_memory",
        "JetStream max memory in bytes",
        "/reserved_memory",
    ),
    (
        "max_storage",
        "JetStream max storage in bytes",
        "/reserved_storage",
    ),
    (
        "storage_used",
        "Total number of bytes used by JetStream storage",
        "/storage",
    ),
    (
        "memory_used",
        "Total number of bytes used by JetStream memory",
        "/memory",
    ),
];
const STREAM: &[Figure] = &[
    (
        "total_messages",
        "Total number of messages from a stream",
        "/state/messages",
    ),
    (
        "total_bytes",
        "Total stored bytes from a stream",
        "/state/bytes",
    ),
    (
        "first_seq",
        "First sequence from a stream",
        "/state/first_seq",
    ),
    ("last_seq", "Last sequence from a stream", "/state/last_seq"),
    (
        "consumer_count",
        "Total number of consumers from a stream",
        "/state/consumer_count",
    ),
    (
        "subject_count",
        "Total number of subjects in a stream",
        "/state/num_subjects",
    ),
];
/// Only with the stream's config.
const STREAM_LIMITS: &[Figure] = &[
    (
        "limit_messages",
        "The maximum number of messages allowed",
        "/config/max_msgs",
    ),
    (
        "limit_bytes",
        "The maximum configured storage size",
        "/config/max_bytes",
    ),
];
const CONSUMER: &[Figure] = &[
    (
        "delivered_consumer_seq",
        "Latest sequence number of a stream consumer",
        "/delivered/consumer_seq",
    ),
    (
        "delivered_stream_seq",
        "Latest sequence number of a stream",
        "/delivered/stream_seq",
    ),
    (
        "num_ack_pending",
        "Number of pending acks from a consumer",
        "/num_ack_pending",
    ),
    (
        "num_redelivered",
        "Number of redelivered messages from a consumer",
        "/num_redelivered",
    ),
    (
        "num_waiting",
        "Number of inflight fetch requests from a pull consumer",
        "/num_waiting",
    ),
    (
        "num_pending",
        "Number of pending messages from a consumer",
        "/num_pending",
    ),
    (
        "ack_floor_stream_seq",
        "Number of ack floor stream seq from a consumer",
        "/ack_floor/stream_seq",
    ),
    (
        "ack_floor_consumer_seq",
        "Number of ack floor consumer seq from a consumer",
        "/ack_floor/consumer_seq",
    ),
];

/// `figures` of `v`, each a gauge `<prefix>_<name>` with `labels`.
fn gauges(
    out: &mut Families,
    prefix: &str,
    figures: &[Figure],
    labels: &[(&str, &str)],
    v: &Value,
) {
    for (name, help, at) in figures {
        let value = v.pointer(at).map_or(0.0, num);
        out.gauge(&format!("{prefix}_{name}"), help, labels, value);
    }
}

fn list(v: &Value) -> &[Value] {
    v.as_array().map_or(&[][..], Vec::as_slice)
}

fn yes(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// `/jsz?accounts&streams&consumers&config` as the exporter's JetStream
/// collector shows it.
fn jetstream(out: &mut Families, server_id: &str, server_name: &str, jsz: &Value) {
    let meta = &jsz["meta_cluster"];
    let is_meta_leader = meta.is_null() || text(&meta["leader"]) == server_name;
    let server: Vec<(&str, &str)> = vec![
        ("server_id", server_id),
        ("server_name", server_name),
        ("cluster", text(&meta["name"])),
        ("domain", text(&jsz["config"]["domain"])),
        ("meta_leader", text(&meta["leader"])),
        ("is_meta_leader", yes(is_meta_leader)),
    ];
    let disabled = f64::from(u8::from(jsz["disabled"] == true));
    out.gauge(
        "jetstream_server_jetstream_disabled",
        "JetStream disabled or not",
        &server,
        disabled,
    );
    gauges(out, "jetstream_server", SERVER, &server, jsz);
    for a in list(&jsz["account_details"]) {
        let name = text(&a["name"]);
        let own = [
            ("account", name),
            ("account_name", name),
            ("account_id", text(&a["id"])),
        ];
        let account = [server.as_slice(), &own].concat();
        gauges(out, "jetstream_account", ACCOUNT, &account, a);
        for s in list(&a["stream_detail"]) {
            stream(out, &account, server_name, s);
        }
    }
}

fn stream(out: &mut Families, account: &[(&str, &str)], server_name: &str, s: &Value) {
    let leader = text(&s["cluster"]["leader"]);
    let own = [
        ("stream_name", text(&s["name"])),
        ("stream_leader", leader),
        (
            "is_stream_leader",
            yes(s["cluster"].is_null() || leader == server_name),
        ),
        ("stream_raft_group", text(&s["stream_raft_group"])),
    ];
    let labels = [account, &own].concat();
    gauges(out, "jetstream_stream", STREAM, &labels, s);
    if !s["config"].is_null() {
        gauges(out, "jetstream_stream", STREAM_LIMITS, &labels, s);
    }
    for c in list(&s["consumer_detail"]) {
        consumer(out, &labels, server_name, c);
    }
}

fn consumer(out: &mut Families, stream: &[(&str, &str)], server_name: &str, c: &Value) {
    let leader = text(&c["cluster"]["leader"]);
    let own = [
        ("consumer_name", text(&c["name"])),
        ("consumer_leader", leader),
        (
            "is_consumer_leader",
            yes(c["cluster"].is_null() || leader == server_name),
        ),
        ("consumer_desc", text(&c["config"]["description"])),
    ];
    let labels = [stream, &own].concat();
    gauges(out, "jetstream_consumer", CONSUMER, &labels, c);
    // Seconds since the last delivery and ack, when there was one.
    let now = jsapi::time::parse(text(&c["ts"]));
    let since = |v: &Value| Some((now? - jsapi::time::parse(v.as_str()?)?) as f64 / 1e9);
    let ages = [
        (
            "last_delivery_seconds",
            "Seconds since the last delivery",
            &c["delivered"]["last_active"],
        ),
        (
            "last_ack_seconds",
            "Seconds since the last ack",
            &c["ack_floor"]["last_active"],
        ),
    ];
    for (name, help, v) in ages {
        if let Some(age) = since(v) {
            out.gauge(&format!("jetstream_consumer_{name}"), help, &labels, age);
        }
    }
}

/// Metric families in name order, each with its samples.
#[derive(Default)]
struct Families {
    families: BTreeMap<String, Family>,
}

struct Family {
    help: String,
    kind: &'static str,
    /// Rendered label sets (sorted by label name) and their values.
    samples: Vec<(String, String, f64)>,
}

impl Families {
    fn family(&mut self, name: &str, help: &str, kind: &'static str) -> &mut Family {
        self.families
            .entry(name.to_string())
            .or_insert_with(|| Family {
                help: help.to_string(),
                kind,
                samples: Vec::new(),
            })
    }

    fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) {
        let labels = render_labels(labels);
        self.family(name, help, "gauge")
            .samples
            .push((String::new(), labels, value));
    }

    fn histogram(&mut self, name: &str, help: &str, labels: &[(&str, &str)], h: &Histogram) {
        debug_assert_eq!(
            h.counts.len(),
            h.bounds.len() + 1,
            "a bucket per bound, and +Inf"
        );
        let family = self.family(name, help, "histogram");
        let mut cumulative = 0;
        let bounds = h
            .bounds
            .iter()
            .map(|b| b.to_string())
            .chain(["+Inf".to_string()]);
        for (le, count) in bounds.zip(&h.counts) {
            cumulative += count;
            let with_le = [labels, &[("le", le.as_str())]].concat();
            family
                .samples
                .push(("_bucket".into(), render_labels(&with_le), cumulative as f64));
        }
        let labels = render_labels(labels);
        family.samples.push(("_sum".into(), labels.clone(), h.sum));
        family
            .samples
            .push(("_count".into(), labels, cumulative as f64));
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for (name, f) in &self.families {
            let _ = writeln!(
                out,
                "# HELP {name} {}",
                f.help.replace('\\', "\\\\").replace('\n', "\\n")
            );
            let _ = writeln!(out, "# TYPE {name} {}", f.kind);
            for (suffix, labels, value) in &f.samples {
                let _ = writeln!(out, "{name}{suffix}{labels} {}", number(*value));
            }
        }
        out
    }
}

/// `{a="x",b="y"}`, names sorted, values escaped as the format asks.
fn render_labels(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let mut sorted = labels.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let pairs: Vec<String> = sorted
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{{{}}}", pairs.join(","))
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn page(varz: Value, jsz: Option<Value>) -> String {
        render(&Sources {
            varz,
            jsz,
            healthy: true,
            raft: vec![],
            write_latency: Some(Histogram {
                bounds: vec![0.001, 0.01],
                counts: vec![2, 1, 1],
                sum: 0.5,
            }),
        })
    }

    #[test]
    fn varz_is_flattened_as_the_exporter_flattens_it() {
        let varz = json!({"server_id": "NID", "in_msgs": 7, "cpu": 1.5,
            "start": "2024-01-01T00:00:00Z", "version": "2.15.1", "host": "ignored",
            "http_req_stats": {"/varz": 3}, "jetstream": {"stats": {"storage": 9}},
            "leaf": {"port": 1}, "tags": ["a"], "auth_required": true});
        let text = page(varz, None);
        for line in [
            "# TYPE gnatsd_varz_in_msgs gauge",
            "gnatsd_varz_in_msgs{server_id=\"NID\"} 7",
            "gnatsd_varz_cpu{server_id=\"NID\"} 1.5",
            "gnatsd_varz_start{server_id=\"NID\"} 1704067200000",
            "gnatsd_varz_version{server_id=\"NID\",value=\"2.15.1\"} 1",
            "gnatsd_varz_http_req_stats_varz{server_id=\"NID\"} 3",
            "gnatsd_varz_jetstream_stats_storage{server_id=\"NID\"} 9",
            "gnatsd_healthz_status{server_id=\"NID\"} 0",
            "flotilla_jetstream_write_seconds_bucket{le=\"0.001\",server_id=\"NID\"} 2",
            "flotilla_jetstream_write_seconds_bucket{le=\"+Inf\",server_id=\"NID\"} 4",
            "flotilla_jetstream_write_seconds_count{server_id=\"NID\"} 4",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        for gone in [
            "gnatsd_varz_host",
            "gnatsd_varz_leaf",
            "gnatsd_varz_tags",
            "gnatsd_varz_auth",
        ] {
            assert!(!text.contains(gone), "{gone}\n{text}");
        }
    }

    #[test]
    fn streams_and_consumers_carry_the_exporters_labels() {
        let jsz = json!({"streams": 1, "config": {"max_memory": 10}, "account_details": [
            {"name": "A", "id": "A", "stream_detail": [{"name": "S\"1", "state": {"messages": 4},
             "consumer_detail": [{"name": "C", "num_pending": 2}]}]}]});
        let text = page(json!({"server_id": "NID", "server_name": "n1"}), Some(jsz));
        let stream = text
            .lines()
            .find(|l| l.starts_with("jetstream_stream_total_messages{"))
            .unwrap();
        assert!(stream.contains("stream_name=\"S\\\"1\""), "{stream}");
        assert!(stream.contains("is_stream_leader=\"true\""), "{stream}");
        assert!(stream.ends_with(" 4"), "{stream}");
        let consumer = text
            .lines()
            .find(|l| l.starts_with("jetstream_consumer_num_pending{"))
            .unwrap();
        assert!(
            consumer.contains("consumer_name=\"C\"") && consumer.ends_with(" 2"),
            "{consumer}"
        );
        assert!(text.contains("jetstream_server_max_memory{"), "{text}");
    }
}
