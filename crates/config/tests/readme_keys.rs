//! The README's config keys, held to the code: every key it names is
//! one the config file reads, so the README cannot promise a setting the
//! loader would call unknown.
//!
//! Two kinds of mention are checked:
//! - a block written out, `tls { cert_file, key_file }`, or nested,
//!   `leafnodes { remotes [{ url(s), account }] }`: each key is loaded
//!   at exactly that place;
//! - a key named alone, `max_pending`: it must be read at one of the
//!   places in [`PLACES`], unless [`NOT_CONFIG`] lists it as a word the
//!   README uses for something else (a test, a JSON field, a signal).
//!
//! "Read" means loading it earns no `unknown field` message. A value of
//! the wrong type is fine here: the key was recognised.

use std::path::PathBuf;

/// Where a key named alone may live: a config with `{}` replaced by
/// `key: 1`. Each is otherwise valid, as a config with errors reports
/// only its errors.
const PLACES: &[&str] = &[
    "{}",
    "tls { {} }",
    "jetstream { {} }",
    "cluster { {} }",
    "cluster { tls { {} } }",
    "websocket { {} }",
    "websocket { authorization { {} } }",
    "leafnodes { {} }",
    "leafnodes { remotes [ { url: \"nats://h:1\", {} } ] }",
    "authorization { {} }",
    "authorization { users [ { user: a, {} } ] }",
    "authorization { users [ { user: a, permissions { {} } } ] }",
    "accounts { A { {} } }",
    "accounts { A { jetstream { {} } } }",
    "accounts { A { limits { {} } } }",
    "accounts { A { exports [ { stream: x, {} } ] } }",
    "accounts { A { exports [ { stream: x } ], imports [ { stream: { account: A, subject: x }, {} } ] } }",
];

/// Backticked words in the README that are not config keys.
const NOT_CONFIG: &[&str] = &[
    // A /healthz query option, a consumer config field, an advisory type.
    "details",
    "sample_freq",
    "server_out_of_space",
    // Subject transform functions.
    "left",
    "partition",
    "random",
    "right",
    "split",
    "wildcard",
    // Test files and client suites.
    "client_tests",
    "js_ack",
    "js_consumer_api",
    "js_kv",
    "js_limits",
    "js_messages",
    "js_object",
    "js_publish",
    "js_pull",
    "js_push",
    "js_sources",
    "js_streams",
    // Benchmark scenarios and parts.
    "failover",
    "idle",
    "kv",
    "pubsub",
    "queue",
    "request",
    "r3big",
    "r3mem",
    // Signals.
    "ldm",
    "quit",
    "reload",
    "reopen",
    "stop",
    "term",
    // Values, not keys.
    "auto",
    "off",
    // JSON fields of the API, monitoring, JWTs and trace events, and
    // headers.
    "cid",
    "conn",
    "connect_urls",
    "deleted_details",
    "exact_match",
    "external",
    "filter",
    "first_seq",
    "flow_control",
    "ignored_config",
    "keep",
    "local_subject",
    "lost",
    "meta_cluster",
    "num_replicas",
    "payload",
    "persist_mode",
    "resp",
    "se",
    "seq",
    "service_latency",
    "si",
    "sm",
    "src",
    "subjects_filter",
    "subs",
    "tags",
    "tiers",
    "times",
    "token_req",
    "traceparent",
    // Account JWT `limits` (claims, not config).
    "consumer",
    "disk_storage",
    "mem_storage",
    "tiered_limits",
    // A Debian package.
    "fuse3",
];

/// Backticked blocks in the README that are JSON an API answers with, not
/// config (by how they start).
const NOT_CONFIG_BLOCKS: &[&str] = &["cluster {name, raft_group"];

fn readme() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    std::fs::read_to_string(path).expect("README.md")
}

/// The README's backticked spans (they may run over a line break).
fn spans(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for block in text.split("```").step_by(2) {
        let parts: Vec<&str> = block.split('`').collect();
        out.extend(parts.iter().skip(1).step_by(2).map(|s| s.to_string()));
    }
    out
}

/// The messages loading `place` with `key: 1` at its `{}` earns.
fn load_at(place: &str, key: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("flotilla-readme-{}-{n}.conf", std::process::id()));
    std::fs::write(&path, place.replacen("{}", &format!("{key}: 1"), 1)).expect("write config");
    let messages = match flotilla_config::load(&path) {
        Ok((_, warnings)) => warnings.join("\n"),
        Err(e) => e.to_string(),
    };
    let _ = std::fs::remove_file(&path);
    // Most blocks say `unknown field "k"`; permissions `Unknown field`.
    messages.to_ascii_lowercase()
}

/// Whether the loader recognises `key` at `place`.
fn read_at(place: &str, key: &str) -> bool {
    !load_at(place, key).contains(&format!("unknown field \"{key}\""))
}

/// `place` reports an unknown key at all (a config with errors reports
/// only its errors), so [`read_at`] means something there.
fn assert_reports_unknown(place: &str) {
    let bogus = "no_such_key_here";
    let found = load_at(place, bogus);
    assert!(
        found.contains(&format!("unknown field \"{bogus}\"")),
        "{place} does not report unknown keys: {found}"
    );
}

fn is_word(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The keys of a written-out block, each with the place it stands at:
/// `a { b, c [{ d }] }` gives (`a { {} }`, b), (`a { c [ { {} } ] }`, d).
fn block_keys(span: &str) -> Vec<(String, String)> {
    // `url(s)` names `url` and `urls`.
    let mut text = String::new();
    for (i, part) in span.split("(s)").enumerate() {
        if i > 0 {
            let word: String = text
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let word: String = word.chars().rev().collect();
            text.push_str(&format!(", {word}s"));
        }
        text.push_str(part);
    }
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if "{}[]".contains(c) {
            tokens.push(c.to_string());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    // The path of opened blocks, as (opening text, closing text).
    let mut path: Vec<(String, &str)> = Vec::new();
    let mut keys = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let next = tokens.get(i + 1).map(String::as_str);
        match t.as_str() {
            "{" | "[" => {
                // An anonymous block: a list's element.
                let prev = i.checked_sub(1).map(|p| tokens[p].as_str());
                if matches!(prev, Some("[")) && t == "{" {
                    // What a list's element needs to be valid at all.
                    let list = path.last().map_or("", |(open, _)| open.as_str());
                    let needs = match list {
                        "remotes [" => " url: \"nats://h:1\",",
                        "users [" => " user: a,",
                        _ => "",
                    };
                    path.push((format!("{{{needs}"), "}"));
                }
            }
            "}" | "]" => {
                path.pop();
            }
            w if next == Some("{") => path.push((format!("{w} {{"), "}")),
            w if next == Some("[") => path.push((format!("{w} ["), "]")),
            w if !path.is_empty() && is_word(w) => {
                let open: Vec<&str> = path.iter().map(|(o, _)| o.as_str()).collect();
                let close: Vec<&str> = path.iter().rev().map(|(_, c)| *c).collect();
                let place = format!("{} {{}} {}", open.join(" "), close.join(" "));
                keys.push((place, w.to_string()));
            }
            _ => {}
        }
    }
    keys
}

#[test]
fn every_block_the_readme_writes_out_is_read_as_written() {
    let mut checked = 0;
    let mut unread = Vec::new();
    let config_blocks = spans(&readme())
        .into_iter()
        .filter(|s| s.contains('{'))
        .filter(|s| !NOT_CONFIG_BLOCKS.iter().any(|b| s.starts_with(b)));
    let mut calibrated = std::collections::BTreeSet::new();
    for span in config_blocks {
        for (place, key) in block_keys(&span) {
            if calibrated.insert(place.clone()) {
                assert_reports_unknown(&place);
            }
            checked += 1;
            if !read_at(&place, &key) {
                unread.push(format!("{key} in {place} (README: `{span}`)"));
            }
        }
    }
    assert!(
        checked > 20,
        "the README's blocks were found ({checked} keys)"
    );
    assert!(unread.is_empty(), "not read:\n{}", unread.join("\n"));
}

#[test]
fn every_key_the_readme_names_is_read_somewhere() {
    let text = readme();
    let words: std::collections::BTreeSet<String> =
        spans(&text).into_iter().filter(|s| is_word(s)).collect();
    PLACES
        .iter()
        .for_each(|place| assert_reports_unknown(place));
    let mut unread = Vec::new();
    for word in &words {
        let listed = NOT_CONFIG.contains(&word.as_str());
        let read = PLACES.iter().any(|place| read_at(place, word));
        match (listed, read) {
            (false, false) => unread.push(format!("`{word}` is read nowhere")),
            (true, true) => unread.push(format!(
                "`{word}` is listed in NOT_CONFIG but is a config key"
            )),
            _ => {}
        }
    }
    for word in NOT_CONFIG {
        if !words.contains(*word) {
            unread.push(format!(
                "NOT_CONFIG lists `{word}`, which the README no longer names"
            ));
        }
    }
    assert!(unread.is_empty(), "{}", unread.join("\n"));
}

#[test]
fn an_unknown_key_is_caught() {
    let remote = r#"leafnodes { remotes [ { url: "nats://h:1", {} } ] }"#.to_string();
    // The check itself can fail.
    assert_reports_unknown("{}");
    assert!(!read_at("{}", "no_such_key_her"));
    assert!(!read_at("tls { {} }", "no_such_key_her"));
    assert!(read_at("{}", "max_payload"));
    assert_eq!(
        block_keys("leafnodes { listen, remotes [{ url(s), account }] }"),
        vec![
            ("leafnodes { {} }".into(), "listen".into()),
            (remote.clone(), "url".into()),
            (remote.clone(), "urls".into()),
            (remote, "account".into()),
        ]
    );
}
