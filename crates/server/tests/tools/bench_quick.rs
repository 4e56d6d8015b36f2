//! The benchmark's quick mode, run once by CI so that it never rots: every
//! `flotilla-bench` scenario against a real server, and the replicated
//! ones against a real three-server cluster, with small counts. A
//! scenario fails on any lost message, missing PubAck, unacked consumer
//! message or wrong KV value; timings are reported, never asserted.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use flotilla_bench::{run, Params, Scenario};

fn quick(url: String) -> Params {
    Params {
        url,
        msgs: 2_000,
        pubs: 2,
        subs: 2,
        in_flight: 64,
        stall: Duration::from_secs(20),
        progress: false,
        conns: 100,
        subs_per_conn: 10,
        ..Params::default()
    }
}

fn check(scenario: Scenario, p: &Params, reports: &[flotilla_bench::Report]) {
    let want: &[&str] = match scenario {
        Scenario::Kv => &["kv-put", "kv-get"],
        other => &[other.name()],
    };
    let got: Vec<&str> = reports.iter().map(|r| r.scenario.as_str()).collect();
    assert_eq!(got, want);
    for r in reports {
        let expected = match scenario {
            Scenario::Idle => (p.conns * p.subs_per_conn) as u64,
            _ => p.msgs,
        };
        assert_eq!(r.msgs, expected, "{}", r.json());
        if scenario == Scenario::Churn {
            assert!(
                r.subs >= p.conns,
                "every connection came and went: {}",
                r.json()
            );
        }
        assert!(r.msgs_per_sec > 0.0 && r.elapsed_s > 0.0, "{}", r.json());
        let back: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(back["scenario"], r.scenario);
        let timed = matches!(
            scenario,
            Scenario::Request | Scenario::JsPub | Scenario::Kv | Scenario::JsCounter
        );
        assert_eq!(r.latency.is_some(), timed, "{}", r.json());
        if let Some(l) = &r.latency {
            assert_eq!(l.samples as u64, p.msgs);
            assert!(l.p50_us <= l.p90_us && l.p90_us <= l.p99_us && l.p99_us <= l.max_us);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_against_one_server() {
    let s = common::one_js_server();
    let p = quick(s.url());
    for &scenario in &Scenario::ONE_SERVER {
        let reports = run(scenario, &p)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", scenario.name()));
        check(scenario, &p, &reports);
    }
    // Synchronous publish and memory storage.
    let sync = Params {
        in_flight: 1,
        memory: true,
        pubs: 1,
        ..quick(s.url())
    };
    check(
        Scenario::JsPub,
        &sync,
        &run(Scenario::JsPub, &sync).await.unwrap(),
    );
    // A capped stream keeps only the newest: the run checks that exactly
    // `max_msgs` are stored after every PubAck.
    let capped = Params {
        max_msgs: Some(500),
        keep: true,
        ..quick(s.url())
    };
    check(
        Scenario::JsPub,
        &capped,
        &run(Scenario::JsPub, &capped).await.unwrap(),
    );
    let c = s.client().await;
    let info = common::api(&c, "$JS.API.STREAM.INFO.BENCH", "").await;
    assert_eq!(info["config"]["max_msgs"], 500, "{info}");
    assert_eq!(info["state"]["messages"], 500, "{info}");
    assert_eq!(info["state"]["first_seq"], 1501, "{info}");
    common::api(&c, "$JS.API.STREAM.DELETE.BENCH", "").await;
    // Runs clean up after themselves.
    let r = common::api(&c, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(r["total"], 0, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_scenarios_against_a_cluster() {
    let mut all = common::replicated::cluster3();
    let mut clients = Vec::new();
    for s in &all {
        clients.push(s.client().await);
    }
    common::replicated::api_ready(&clients).await;
    let p = Params {
        replicas: 3,
        msgs: 500,
        ..quick(all[1].url())
    };
    for scenario in [Scenario::JsPub, Scenario::JsPull, Scenario::Kv] {
        let reports = run(scenario, &p)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", scenario.name()));
        check(scenario, &p, &reports);
        assert!(reports.iter().all(|r| r.replicas == 3));
    }
    // Last, since it kills a server: the stream's leader, whichever it is.
    let urls: Vec<String> = all.iter().map(|s| s.url()).collect();
    let p = Params {
        url: urls.join(","),
        pids: (0..all.len())
            .map(|i| (format!("S{i}"), all[i].child.id()))
            .collect(),
        ..p
    };
    let r = run(Scenario::Failover, &p).await.unwrap();
    assert_eq!(r[0].scenario, "failover");
    assert!(r[0].elapsed_s > 0.0);
    let mut dead = 0;
    for s in all.iter_mut() {
        dead += usize::from(matches!(s.child.try_wait(), Ok(Some(_))));
    }
    assert_eq!(dead, 1, "exactly the leader was killed");
}
