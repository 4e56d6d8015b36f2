//! Message schedules (ADR-51): the publish refusals word for word, the
//! configs nats-server refuses, and schedules that fire: once (`@at`),
//! repeatedly (`@every`, cron in a time zone), sampling a source subject,
//! ended early by a purge message, and still firing after a restart.
//! Runs in every JetStream test mode; the refusals also run against
//! nats-server (`FLOTILLA_TEST_SERVER`).
#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{api, js_publish_text as pubt};
use serde_json::{json, Value};

/// Headers of a publish, in order.
type Headers<'a> = &'a [(&'a str, &'a str)];

fn ack(stream: &str, seq: u64) -> Value {
    json!({"stream": stream, "seq": seq})
}

fn err_ack(stream: &str, err_code: u64, desc: &str) -> Value {
    json!({"error": {"code": 400, "err_code": err_code, "description": desc}, "stream": stream, "seq": 0})
}

async fn create(c: &async_nats::Client, cfg: Value) -> Value {
    let name = cfg["name"].as_str().unwrap().to_string();
    common::create_stream(c, &name, cfg).await
}

/// The last message on `subject` (MSG.GET), once there is one newer than
/// `after`, within `limit`.
async fn wait_last(
    c: &async_nats::Client,
    stream: &str,
    subject: &str,
    after: u64,
    limit: Duration,
) -> Value {
    let deadline = Instant::now() + limit;
    let body = json!({ "last_by_subj": subject }).to_string();
    loop {
        let got = api(c, &format!("$JS.API.STREAM.MSG.GET.{stream}"), &body).await;
        if got["message"]["seq"]
            .as_u64()
            .is_some_and(|seq| seq > after)
        {
            return got["message"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "nothing new on {subject} after {after} within {limit:?}: {got}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The header block of a MSG.GET message, as text.
fn headers_of(msg: &Value) -> String {
    let hdrs = msg["hdrs"].as_str().unwrap_or_default();
    String::from_utf8(common::unb64(hdrs)).unwrap()
}

fn header<'a>(block: &'a str, name: &str) -> Option<&'a str> {
    block
        .split("\r\n")
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
}

async fn count_on(c: &async_nats::Client, stream: &str, subject: &str) -> u64 {
    let body = json!({ "subjects_filter": subject }).to_string();
    let info = api(c, &format!("$JS.API.STREAM.INFO.{stream}"), &body).await;
    info["state"]["subjects"][subject].as_u64().unwrap_or(0)
}

fn schedules_stream(name: &str, extra: Value) -> Value {
    let mut cfg =
        json!({"name": name, "subjects": [format!("{name}.>")], "allow_msg_schedules": true});
    cfg.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    cfg
}

#[tokio::test]
async fn schedule_publishes_are_checked_as_nats_server_checks_them() {
    let s = common::js_server();
    let c = s.client().await;
    let info = create(&c, schedules_stream("S", json!({}))).await;
    assert_eq!(info["config"]["allow_msg_schedules"], true, "{info}");
    assert_eq!(info["config"]["allow_rollup_hdrs"], true, "{info}");
    assert_eq!(info["config"]["metadata"]["_nats.req.level"], "2", "{info}");
    create(&c, json!({"name": "PLAIN", "subjects": ["plain.>"]})).await;
    const LATER: &str = "@at 2999-01-01T00:00:00Z";
    const PATTERN: &str = "Nats-Schedule";
    const TZ: &str = "Nats-Schedule-Time-Zone";
    const TARGET: &str = "Nats-Schedule-Target";
    const SOURCE: &str = "Nats-Schedule-Source";
    // (subject, headers, the ack expected)
    let table: Vec<(&str, Headers, Value)> = vec![
        ("S.a", &[(PATTERN, LATER), (TARGET, "S.t")], ack("S", 1)),
        (
            "S.a",
            &[(PATTERN, "@every 500ms"), (TARGET, "S.t")],
            err_ack("S", 10189, "message schedules pattern is invalid"),
        ),
        (
            "S.a",
            &[(PATTERN, "61 * * * * *"), (TARGET, "S.t")],
            err_ack("S", 10189, "message schedules pattern is invalid"),
        ),
        (
            "S.a",
            &[(PATTERN, "@every 1m"), (TZ, "UTC"), (TARGET, "S.t")],
            err_ack("S", 10189, "message schedules pattern is invalid"),
        ),
        (
            "S.a",
            &[
                (PATTERN, "@hourly"),
                (TZ, "Nowhere/Atlantis"),
                (TARGET, "S.t"),
            ],
            err_ack("S", 10223, "message schedules time zone is invalid"),
        ),
        (
            "S.a",
            &[(PATTERN, "@hourly"), (TZ, ""), (TARGET, "S.t")],
            err_ack("S", 10223, "message schedules time zone is invalid"),
        ),
        (
            "S.a",
            &[(PATTERN, LATER)],
            err_ack("S", 10190, "message schedules target is invalid"),
        ),
        (
            "S.a",
            &[(PATTERN, LATER), (TARGET, "S.a")],
            err_ack("S", 10190, "message schedules target is invalid"),
        ),
        (
            "S.a",
            &[(PATTERN, LATER), (TARGET, "S.*")],
            err_ack("S", 10190, "message schedules target is invalid"),
        ),
        (
            "S.a",
            &[(PATTERN, LATER), (TARGET, "elsewhere")],
            err_ack("S", 10190, "message schedules target is invalid"),
        ),
        (
            "S.a",
            &[(PATTERN, LATER), (TARGET, "S.t"), (SOURCE, "S.t")],
            err_ack("S", 10203, "message schedules source is invalid"),
        ),
        (
            "S.a",
            &[(PATTERN, LATER), (TARGET, "S.t"), (SOURCE, "elsewhere")],
            err_ack("S", 10203, "message schedules source is invalid"),
        ),
        (
            "S.a",
            &[
                (PATTERN, LATER),
                (TARGET, "S.t"),
                ("Nats-Schedule-TTL", "soon"),
            ],
            err_ack("S", 10191, "message schedules invalid per-message TTL"),
        ),
        (
            "S.a",
            &[
                (PATTERN, LATER),
                (TARGET, "S.t"),
                ("Nats-Schedule-TTL", "5m"),
            ],
            err_ack("S", 10166, "per-message TTL is disabled"),
        ),
        (
            "S.a",
            &[
                (PATTERN, LATER),
                (TARGET, "S.t"),
                ("Nats-Schedule-Rollup", "all"),
            ],
            err_ack("S", 10192, "message schedules invalid rollup"),
        ),
        (
            "S.a",
            &[(PATTERN, LATER), (TARGET, "S.t"), ("Nats-Rollup", "all")],
            err_ack("S", 10192, "message schedules invalid rollup"),
        ),
        (
            "S.b",
            &[
                ("Nats-Schedule-Next", "2999-01-01T00:00:00Z"),
                ("Nats-Scheduler", "S.a"),
            ],
            err_ack("S", 10212, "message schedules invalid scheduler"),
        ),
        (
            "S.b",
            &[("Nats-Schedule-Next", "purge")],
            err_ack("S", 10212, "message schedules invalid scheduler"),
        ),
        (
            "S.b",
            &[("Nats-Schedule-Next", "purge"), ("Nats-Scheduler", "S.b")],
            err_ack("S", 10212, "message schedules invalid scheduler"),
        ),
        (
            "S.b",
            &[("Nats-Scheduler", "S.a")],
            err_ack("S", 10212, "message schedules invalid scheduler"),
        ),
        // A target header alone is no schedule.
        ("S.c", &[(TARGET, "S.t")], ack("S", 2)),
        // Ending something that is not a schedule is refused.
        (
            "S.b",
            &[("Nats-Schedule-Next", "purge"), ("Nats-Scheduler", "S.c")],
            err_ack("S", 10212, "message schedules invalid scheduler"),
        ),
        (
            "plain.a",
            &[(PATTERN, LATER), (TARGET, "plain.t")],
            err_ack("PLAIN", 10188, "message schedules is disabled"),
        ),
        (
            "plain.a",
            &[(PATTERN, "nonsense"), (TARGET, "plain.t")],
            err_ack("PLAIN", 10188, "message schedules is disabled"),
        ),
        (
            "plain.b",
            &[
                ("Nats-Schedule-Next", "purge"),
                ("Nats-Scheduler", "plain.a"),
            ],
            err_ack("PLAIN", 10188, "message schedules is disabled"),
        ),
        // A schedule ended by a message published elsewhere.
        (
            "S.b",
            &[("Nats-Schedule-Next", "purge"), ("Nats-Scheduler", "S.a")],
            ack("S", 3),
        ),
    ];
    for (i, (subject, headers, want)) in table.iter().enumerate() {
        let got: Value = serde_json::from_str(&pubt(&c, subject, headers, b"x").await).unwrap();
        assert_eq!(&got, want, "step {i}: {subject} {headers:?}");
    }
    // The schedule was stored with a roll-up, and the purge message ended it.
    assert_eq!(count_on(&c, "S", "S.a").await, 0);
    assert_eq!(count_on(&c, "S", "S.b").await, 1);
}

#[tokio::test]
async fn schedule_configs_nats_server_refuses() {
    let s = common::js_server();
    let c = s.client().await;
    let invalid = |text: &str| (500, 10052, text.to_string());
    let table = [
        (
            schedules_stream("A", json!({"discard": "new"})),
            invalid("message scheduling cannot use discard new"),
        ),
        (
            json!({"name": "A", "mirror": {"name": "X"}, "allow_msg_schedules": true}),
            (
                400,
                10186,
                "stream mirrors can not also schedule messages".to_string(),
            ),
        ),
        (
            json!({"name": "A", "sources": [{"name": "X"}], "allow_msg_schedules": true}),
            (
                400,
                10187,
                "stream source can not also schedule messages".to_string(),
            ),
        ),
        (
            json!({"name": "A", "subjects": ["a"], "allow_msg_schedules": true, "allow_msg_counter": true}),
            invalid("counter stream cannot use message schedules"),
        ),
    ];
    for (cfg, want) in table {
        let r = api(&c, "$JS.API.STREAM.CREATE.A", &cfg.to_string()).await;
        assert_eq!(common::api_err(&r), want, "{cfg}: {r}");
    }
    // Schedules can be switched on later, not off.
    create(&c, json!({"name": "B", "subjects": ["B.>"]})).await;
    let on = schedules_stream("B", json!({}));
    let r = api(&c, "$JS.API.STREAM.UPDATE.B", &on.to_string()).await;
    assert_eq!(r["config"]["allow_msg_schedules"], true, "{r}");
    let off = json!({"name": "B", "subjects": ["B.>"], "allow_rollup_hdrs": true});
    let r = api(&c, "$JS.API.STREAM.UPDATE.B", &off.to_string()).await;
    assert_eq!(
        common::api_err(&r),
        invalid("message schedules can not be disabled"),
        "{r}"
    );
}

#[tokio::test]
async fn a_delayed_message_is_published_once_and_its_schedule_removed() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, schedules_stream("D", json!({"allow_msg_ttl": true}))).await;
    let headers: Headers = &[
        ("Nats-Schedule", "@at 2009-11-10T23:00:00Z"),
        ("Nats-Schedule-Target", "D.orders"),
        ("Nats-Schedule-TTL", "5m"),
        ("Nats-Msg-Id", "once"),
        ("App", "kept"),
    ];
    let got: Value =
        serde_json::from_str(&pubt(&c, "D.sched.one", headers, b"body").await).unwrap();
    assert_eq!(got, ack("D", 1));
    let fired = wait_last(&c, "D", "D.orders", 1, Duration::from_secs(10)).await;
    assert_eq!(common::unb64(fired["data"].as_str().unwrap()), b"body");
    let block = headers_of(&fired);
    assert_eq!(
        header(&block, "Nats-Scheduler"),
        Some("D.sched.one"),
        "{block:?}"
    );
    assert_eq!(
        header(&block, "Nats-Schedule-Next"),
        Some("purge"),
        "{block:?}"
    );
    assert_eq!(header(&block, "Nats-TTL"), Some("5m"), "{block:?}");
    assert_eq!(header(&block, "App"), Some("kept"), "{block:?}");
    assert_eq!(header(&block, "Nats-Msg-Id"), None, "{block:?}");
    assert_eq!(header(&block, "Nats-Schedule"), None, "{block:?}");
    // The schedule is gone and fires no more.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(count_on(&c, "D", "D.sched.one").await, 0);
    assert_eq!(count_on(&c, "D", "D.orders").await, 1);
}

#[tokio::test]
async fn repeating_schedules_fire_and_sample_their_source() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, schedules_stream("R", json!({}))).await;
    pubt(&c, "R.temp", &[("Unit", "C")], b"20.5").await;
    let every: Headers = &[
        ("Nats-Schedule", "@every 1s"),
        ("Nats-Schedule-Target", "R.sampled"),
        ("Nats-Schedule-Source", "R.temp"),
    ];
    pubt(&c, "R.sched.sample", every, b"no reading yet").await;
    let first = wait_last(&c, "R", "R.sampled", 0, Duration::from_secs(10)).await;
    assert_eq!(common::unb64(first["data"].as_str().unwrap()), b"20.5");
    let block = headers_of(&first);
    assert_eq!(header(&block, "Unit"), Some("C"), "{block:?}");
    let next = header(&block, "Nats-Schedule-Next").unwrap_or_default();
    assert!(common::is_timestamp(&json!(next)), "{block:?}");
    // A newer reading is what the next firing samples.
    pubt(&c, "R.temp", &[("Unit", "C")], b"21.0").await;
    let seq = first["seq"].as_u64().unwrap();
    let mut later = wait_last(&c, "R", "R.sampled", seq, Duration::from_secs(10)).await;
    if common::unb64(later["data"].as_str().unwrap()) != b"21.0" {
        let seq = later["seq"].as_u64().unwrap();
        later = wait_last(&c, "R", "R.sampled", seq, Duration::from_secs(10)).await;
    }
    assert_eq!(common::unb64(later["data"].as_str().unwrap()), b"21.0");
    // The schedule itself stays; a cron schedule in a time zone fires too.
    assert_eq!(count_on(&c, "R", "R.sched.sample").await, 1);
    let cron: Headers = &[
        ("Nats-Schedule", "* * * * * *"),
        ("Nats-Schedule-Time-Zone", "Asia/Tokyo"),
        ("Nats-Schedule-Target", "R.tick"),
    ];
    pubt(&c, "R.sched.cron", cron, b"tick").await;
    let tick = wait_last(&c, "R", "R.tick", 0, Duration::from_secs(10)).await;
    let block = headers_of(&tick);
    let next = header(&block, "Nats-Schedule-Next").unwrap_or_default();
    assert!(next.ends_with("+09:00"), "{block:?}");
}

#[tokio::test]
async fn a_schedule_keeps_firing_after_a_restart() {
    let mut s = common::js_server();
    let c = s.client().await;
    create(&c, schedules_stream("K", json!({}))).await;
    let every: Headers = &[
        ("Nats-Schedule", "@every 1s"),
        ("Nats-Schedule-Target", "K.out"),
    ];
    pubt(&c, "K.sched", every, b"beat").await;
    let before = wait_last(&c, "K", "K.out", 0, Duration::from_secs(10)).await;
    drop(c);
    s.kill9();
    s.restart();
    let c = s.client().await;
    let seq = before["seq"].as_u64().unwrap();
    let after = wait_last(&c, "K", "K.out", seq, Duration::from_secs(15)).await;
    assert_eq!(common::unb64(after["data"].as_str().unwrap()), b"beat");
    // Replacing the schedule with a plain message stops it.
    pubt(&c, "K.sched", &[("Nats-Rollup", "sub")], b"stop").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let settled = count_on(&c, "K", "K.out").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(count_on(&c, "K", "K.out").await, settled);
}
