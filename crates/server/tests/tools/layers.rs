//! The crate layering that ARCHITECTURE.md draws, checked against Cargo.
//!
//! `ALLOWED` lists, for every workspace crate, the workspace crates it
//! may depend on (normal and build dependencies; dev-dependencies are
//! free). The test fails on an edge Cargo has that the table lacks, so a
//! new edge is a deliberate change to this table, and on an edge the
//! table lists that Cargo no longer has, so the table stays the truth.
//! It also checks that the table itself has no cycle and that nothing
//! depends on the binary (its line comes last).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// crate (package name without `flotilla-`) -> the crates it may use.
/// Lower layers first; each line names only crates above it.
const ALLOWED: &[(&str, &[&str])] = &[
    // Leaves: wire formats and pure data, no workspace dependencies.
    ("protocol", &[]),
    ("subjects", &[]),
    ("conf", &[]),
    ("jsapi", &[]),
    ("jwt", &[]),
    ("lossyfs", &[]),
    ("bench", &[]),
    // Storage and consensus, sans-IO where it decides.
    ("store", &["subjects"]),
    ("replication", &["store"]),
    ("cluster", &["replication", "store"]),
    // JetStream state machines and the replicated service over them.
    ("jetstream", &["jsapi", "protocol", "store", "subjects"]),
    ("jsservice", &["jetstream", "protocol", "store", "subjects"]),
    ("sim", &["jetstream", "jsservice", "replication", "store"]),
    // Config is plain data: no runtime crate below it.
    ("config", &["conf", "jsapi", "jwt", "subjects"]),
    ("auth", &["config", "jsapi", "jwt", "protocol", "subjects"]),
    // The core: subject space, accounts, clients, delivery.
    ("core", &["auth", "config", "jsapi", "protocol", "subjects"]),
    // Surfaces over the core. None of them knows another surface,
    // except routes, which carry the cluster's raft traffic.
    ("routes", &["cluster", "core", "protocol", "subjects"]),
    ("leafnodes", &["auth", "config", "core", "protocol"]),
    ("websocket", &["auth", "config", "core", "protocol"]),
    (
        "monitor",
        &["auth", "config", "core", "jsapi", "protocol", "subjects"],
    ),
    (
        "jsdriver",
        &[
            "cluster",
            "config",
            "core",
            "jetstream",
            "jsservice",
            "protocol",
            "replication",
            "store",
            "subjects",
        ],
    ),
    // JetStream's view for monitoring: the drivers' state in the
    // monitor's shapes.
    (
        "jsmonitor",
        &[
            "cluster",
            "core",
            "jetstream",
            "jsdriver",
            "jsservice",
            "monitor",
            "store",
        ],
    ),
    // The system account: $SYS requests and events, answered from
    // monitoring's endpoints.
    (
        "system",
        &["core", "jsapi", "monitor", "protocol", "subjects"],
    ),
    ("chaos", &["lossyfs"]),
    // The binary: wires the surfaces together; nothing depends on it.
    (
        "flotilla",
        &[
            "auth",
            "cluster",
            "config",
            "core",
            "jetstream",
            "jsdriver",
            "jsmonitor",
            "jsservice",
            "leafnodes",
            "monitor",
            "protocol",
            "routes",
            "subjects",
            "system",
            "websocket",
        ],
    ),
];

fn short(package: &str) -> String {
    package
        .strip_prefix("flotilla-")
        .unwrap_or(package)
        .to_string()
}

/// The workspace's crate graph as Cargo resolves it: crate -> crates.
fn cargo_graph() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect();
    let mut graph = BTreeMap::new();
    for p in packages {
        let deps = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .map(|d| d["name"].as_str().expect("dependency name"))
            .filter(|n| names.contains(*n))
            .map(short)
            .collect();
        graph.insert(short(p["name"].as_str().expect("name")), deps);
    }
    graph
}

fn allowed() -> BTreeMap<String, BTreeSet<String>> {
    let mut table = BTreeMap::new();
    for (krate, deps) in ALLOWED {
        let deps: BTreeSet<String> = deps.iter().map(|d| d.to_string()).collect();
        assert!(
            table.insert(krate.to_string(), deps).is_none(),
            "{krate} is listed twice in ALLOWED"
        );
    }
    table
}

#[test]
fn crate_dependencies_match_the_allowed_table() {
    let graph = cargo_graph();
    let table = allowed();
    let mut problems = Vec::new();
    for (krate, deps) in &graph {
        let Some(allowed) = table.get(krate) else {
            problems.push(format!(
                "crate {krate} is not in ALLOWED: give it a line and a layer"
            ));
            continue;
        };
        for dep in deps.difference(allowed) {
            problems.push(format!(
                "new edge {krate} -> {dep}: not allowed by the layering"
            ));
        }
        for dep in allowed.difference(deps) {
            problems.push(format!(
                "edge {krate} -> {dep} is allowed but gone: drop it from ALLOWED"
            ));
        }
    }
    for krate in table.keys().filter(|k| !graph.contains_key(*k)) {
        problems.push(format!(
            "ALLOWED names {krate}, which is not a workspace crate"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_allowed_table_is_layered() {
    // Each crate may only name crates listed on an earlier line, so the
    // table is a topological order and can hold no cycle.
    let mut seen = BTreeSet::new();
    for (krate, deps) in ALLOWED {
        for dep in *deps {
            assert!(
                seen.contains(dep),
                "{krate} uses {dep}, which is not on an earlier line"
            );
        }
        seen.insert(*krate);
    }
    // The binary is the last line, so no crate may name it.
    assert_eq!(
        ALLOWED.last().map(|(krate, _)| *krate),
        Some("flotilla"),
        "the binary comes last"
    );
}
