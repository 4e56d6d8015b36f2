//! `/metrics` (issue 37, beyond nats-server, which has no such
//! endpoint: these tests say so and stop against it). The page is read
//! as Prometheus reads it: Debian's `promtool check metrics` when it is
//! installed (`.ci/run` installs `prometheus`), and its series by name,
//! with prometheus-nats-exporter's names that its Grafana dashboards and
//! the one shipped here (`dashboards/flotilla.json`) query.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeMap;

use serde_json::json;

/// Samples by `name{labels}`, from the text format.
fn samples(page: &str) -> BTreeMap<String, f64> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l
                .rsplit_once(' ')
                .expect("a sample is a series and a value");
            (series.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

/// The value of the one series of `name` whose labels include `with`.
fn value(all: &BTreeMap<String, f64>, name: &str, with: &[&str]) -> f64 {
    let found: Vec<f64> = all
        .iter()
        .filter(|(s, _)| s.starts_with(&format!("{name}{{")) || *s == name)
        .filter(|(s, _)| with.iter().all(|w| s.contains(w)))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(found.len(), 1, "{name} {with:?}: {found:?}");
    found[0]
}

/// Runs `promtool check metrics` on the page, when Debian's prometheus
/// is installed; says so when it is not.
fn promtool_accepts(page: &str) {
    use std::io::Write;
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("promtool missing (Debian's prometheus): the format check is skipped");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // Lint advice (names, help text) is not an error; a page that does
    // not parse is.
    assert!(
        !said.contains("error while linting") && !said.contains("text format parsing error"),
        "{said}"
    );
}

#[tokio::test]
async fn the_page_has_every_figure_as_the_exporter_names_it() {
    if common::reference_server() {
        eprintln!("nats-server has no /metrics: flotilla's own endpoint");
        return;
    }
    let s = common::js_server();
    let c = s.client().await;
    common::create_stream(&c, "MET", json!({"name": "MET", "subjects": ["met"]})).await;
    let body =
        json!({"stream_name": "MET", "config": {"durable_name": "D", "ack_policy": "explicit"}});
    let r = common::api(&c, "$JS.API.CONSUMER.CREATE.MET.D", &body.to_string()).await;
    assert!(r.get("error").is_none(), "{r}");
    for i in 0..3 {
        common::js_publish_text(&c, "met", &[], format!("{i}").as_bytes()).await;
    }
    let (code, headers, page) = s.http("/metrics");
    assert_eq!(code, 200);
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("text/plain; version=0.0.4"),
        "{headers}"
    );
    promtool_accepts(&page);
    let all = samples(&page);
    // What the exporter's two dashboards query.
    for name in [
        "gnatsd_varz_cpu",
        "gnatsd_varz_mem",
        "gnatsd_varz_in_bytes",
        "gnatsd_varz_in_msgs",
        "gnatsd_varz_out_bytes",
        "gnatsd_varz_out_msgs",
        "gnatsd_varz_connections",
        "gnatsd_varz_subscriptions",
        "gnatsd_varz_slow_consumers",
        "gnatsd_varz_jetstream_stats_storage",
        "gnatsd_varz_jetstream_stats_memory",
        "gnatsd_varz_jetstream_config_max_storage",
        "gnatsd_varz_jetstream_config_max_memory",
        "jetstream_server_total_streams",
        "jetstream_server_total_consumers",
    ] {
        value(&all, name, &[]);
    }
    let varz = s.json("/varz");
    let id = format!("server_id=\"{}\"", varz["server_id"].as_str().unwrap());
    assert!(value(&all, "gnatsd_varz_in_msgs", &[&id]) >= 3.0);
    assert_eq!(
        value(&all, "gnatsd_varz_connections", &[]),
        varz["connections"].as_f64().unwrap()
    );
    assert_eq!(value(&all, "gnatsd_healthz_status", &[]), 0.0, "healthy");
    let stream = ["stream_name=\"MET\""];
    assert_eq!(value(&all, "jetstream_stream_total_messages", &stream), 3.0);
    assert_eq!(value(&all, "jetstream_stream_last_seq", &stream), 3.0);
    assert!(value(&all, "jetstream_stream_total_bytes", &stream) > 0.0);
    let consumer = ["stream_name=\"MET\"", "consumer_name=\"D\""];
    assert_eq!(
        value(&all, "jetstream_consumer_num_pending", &consumer),
        3.0
    );
    assert_eq!(
        value(&all, "jetstream_consumer_num_ack_pending", &consumer),
        0.0
    );
    value(&all, "jetstream_consumer_delivered_consumer_seq", &consumer);
    // Every acknowledged publish waited for a durable write.
    let writes = value(&all, "flotilla_jetstream_write_seconds_count", &[]);
    assert!(writes >= 1.0, "{writes}");
    let inf = value(
        &all,
        "flotilla_jetstream_write_seconds_bucket",
        &["le=\"+Inf\""],
    );
    assert_eq!(inf, writes);
    if common::clustered() {
        let meta = ["group=\"_meta_\""];
        assert!(value(&all, "flotilla_raft_term", &meta) >= 1.0);
        assert!(value(&all, "flotilla_raft_leader_changes", &meta) >= 1.0);
        assert!(value(&all, "flotilla_raft_commit", &meta) >= 1.0);
    }
}

/// The dashboard shipped in the repository loads as Grafana's JSON
/// model (Grafana is not packaged for Debian here: a schema check of
/// its fields instead), and every metric its queries name is on the
/// page.
#[tokio::test]
async fn the_dashboard_reads_what_the_page_has() {
    if common::reference_server() {
        eprintln!("nats-server has no /metrics: flotilla's own endpoint");
        return;
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dashboards/flotilla.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string());
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    let s = common::js_server();
    let c = s.client().await;
    common::create_stream(&c, "DASH", json!({"name": "DASH", "subjects": ["dash"]})).await;
    let body =
        json!({"stream_name": "DASH", "config": {"durable_name": "D", "ack_policy": "explicit"}});
    common::api(&c, "$JS.API.CONSUMER.CREATE.DASH.D", &body.to_string()).await;
    common::js_publish_text(&c, "dash", &[], b"x").await;
    let (_, _, page) = s.http("/metrics");
    let names: std::collections::BTreeSet<String> = samples(&page)
        .keys()
        .map(|k| k.split('{').next().unwrap().to_string())
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    for p in panels {
        assert!(p["type"].is_string() && p["title"].is_string(), "{p}");
        assert!(
            ids.insert(p["id"].as_u64().expect("a panel id")),
            "ids are unique: {p}"
        );
        let grid = &p["gridPos"];
        for k in ["h", "w", "x", "y"] {
            assert!(grid[k].is_u64(), "gridPos.{k}: {p}");
        }
        for t in p["targets"].as_array().expect("targets") {
            let expr = t["expr"].as_str().expect("a PromQL expression");
            let named: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| {
                    w.starts_with("gnatsd_")
                        || w.starts_with("jetstream_")
                        || w.starts_with("flotilla_")
                })
                .collect();
            assert!(!named.is_empty(), "{expr}");
            for n in named {
                assert!(names.contains(n), "{n} (in {expr}) is not on the page");
            }
        }
    }
}

/// A real Prometheus (Debian's `prometheus`, when installed) scrapes
/// `/metrics` and answers queries over what it stored.
#[tokio::test]
async fn a_real_prometheus_scrapes_the_page() {
    if common::reference_server() {
        eprintln!("nats-server has no /metrics: flotilla's own endpoint");
        return;
    }
    let Ok(prometheus) = which("prometheus") else {
        eprintln!("prometheus missing (Debian's prometheus): the scrape test is skipped");
        return;
    };
    let s = common::js_server();
    let c = s.client().await;
    common::create_stream(&c, "PROM", json!({"name": "PROM", "subjects": ["prom"]})).await;
    common::js_publish_text(&c, "prom", &[], b"x").await;
    let dir = tempfile::tempdir().unwrap();
    let target = format!("127.0.0.1:{}", s.http_port.unwrap());
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: flotilla\n    static_configs:\n      - targets: ['{target}']\n"
    );
    let config_path = dir.path().join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let port = common::free_ports(1)[0];
    let mut child = std::process::Command::new(prometheus)
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let query = |q: &str| -> serde_json::Value {
        let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            return serde_json::Value::Null;
        };
        use std::io::{Read, Write};
        let _ = write!(
            conn,
            "GET /api/v1/query?query={q} HTTP/1.0\r\nHost: localhost\r\n\r\n"
        );
        let mut raw = String::new();
        let _ = conn.read_to_string(&mut raw);
        raw.split_once("\r\n\r\n")
            .and_then(|(_, body)| serde_json::from_str(body).ok())
            .unwrap_or_default()
    };
    let result = |q: &str| {
        query(q)["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let mut last = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        last = result("jetstream_stream_total_messages");
        if !last.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let up = result("up");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0]["value"][1], "1", "the target is up: {up:?}");
    let stream = last
        .iter()
        .find(|r| r["metric"]["stream_name"] == "PROM")
        .unwrap_or_else(|| panic!("PROM stored: {last:?}"));
    assert_eq!(stream["value"][1], "1", "{stream}");
}

fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .ok_or(())
}
