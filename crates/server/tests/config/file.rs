//! The config file through the real binary: values take effect, every
//! error names file, line and column, unknown keys warn.

#[path = "../common/mod.rs"]
mod common;

use std::process::Command;

use common::BIN;

/// Runs `flotilla -c <file> -t` on `text`: (exit code, stdout+stderr).
fn check(text: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = common::config_path(dir.path(), "test.conf", text);
    let out = Command::new(BIN)
        .arg("-c")
        .arg(&path)
        .arg("-t")
        .output()
        .unwrap();
    let all =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // Name the file the same way in every message, whatever the tempdir.
    (
        out.status.code().unwrap(),
        all.replace(&path.display().to_string(), "test.conf"),
    )
}

fn fails_with(text: &str, want: &str) {
    let (code, out) = check(text);
    assert_eq!(code, 1, "{text:?} should fail: {out}");
    assert!(out.contains(want), "{text:?}\nwant: {want}\ngot:  {out}");
}

#[test]
fn values_take_effect() {
    let s = common::server()
        .config(
            "# a full config\nserver_name: cfg-server\nmax_payload: 512KB\nmax_control_line = 2048\n\
             ping_interval: \"30s\"\nping_max 3\nwrite_deadline: 5s\nmax_connections: 100\n\
             max_pending: 32MB\nauthorization { user: u, password: p }\n",
        )
        .start();
    let varz = s.json("/varz");
    assert_eq!(varz["server_name"], "cfg-server");
    assert_eq!(varz["max_payload"], 512 * 1024);
    assert_eq!(varz["max_control_line"], 2048);
    assert_eq!(varz["ping_interval"], 30_000_000_000u64);
    assert_eq!(varz["ping_max"], 3);
    assert_eq!(varz["write_deadline"], 5_000_000_000u64);
    assert_eq!(varz["max_connections"], 100);
    assert_eq!(varz["max_pending"], 32 * 1024 * 1024);
    assert_eq!(varz["auth_required"], true);
}

#[test]
fn listen_and_flags_override_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::config_path(
        dir.path(),
        "x.conf",
        "listen: 127.0.0.1:1\nserver_name: from-config\n",
    );
    // The harness passes -p -1 and -a 127.0.0.1, which must win over listen.
    let s = common::server()
        .arg("-c")
        .arg(path.to_str().unwrap())
        .arg("--server_name")
        .arg("from-flag")
        .start();
    assert_ne!(s.port, 1);
    assert_eq!(s.json("/varz")["server_name"], "from-flag");
}

#[test]
fn zero_means_default() {
    let s = common::server()
        .config("ping_interval: \"0s\"\nping_max: 0\nwrite_deadline: 0s\n")
        .start();
    let v = s.json("/varz");
    assert_eq!(v["ping_interval"], 120_000_000_000u64);
    assert_eq!(v["ping_max"], 2);
    assert_eq!(v["write_deadline"], 10_000_000_000u64);
}

#[test]
fn unquoted_minutes_are_minutes() {
    let s = common::server().config("ping_interval: 2m\n").start();
    assert_eq!(s.json("/varz")["ping_interval"], 120_000_000_000u64);
}

#[test]
fn integer_durations_are_seconds_with_a_warning() {
    let (code, out) = check("ping_interval: 45\n");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("test.conf:1:16: invalid use of field \"ping_interval\": ping_interval should be converted to a duration"),
        "{out}"
    );
}

#[test]
fn unknown_keys_warn_with_position() {
    let (code, out) =
        check("port: 4222\n  bogus_key: 1\nauthorization {\n  token: x\n  nonsense: true\n}\n");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("test.conf:2:3: unknown field \"bogus_key\""),
        "{out}"
    );
    assert!(
        out.contains("test.conf:5:3: unknown field \"nonsense\""),
        "{out}"
    );
    assert!(
        out.contains("configuration file test.conf test is successful"),
        "{out}"
    );
}

#[test]
fn variables_are_not_unknown_keys() {
    let (code, out) = check("SECRET: abc\nauthorization { token: $SECRET }\n");
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("unknown field"), "{out}");
}

#[test]
fn syntax_errors() {
    fails_with(
        "port: 4222\nhost: bad value\n",
        "test.conf:2:11: Expected a top-level value to end with a new line",
    );
    fails_with(
        "authorization {\n  user: a\n",
        "test.conf:3:1: Unexpected EOF processing map.",
    );
    fails_with("port: \"4222\n", "test.conf:2:1: Unexpected EOF.");
    fails_with(
        "a: $NOPE_NOT_SET_ANYWHERE\n",
        "test.conf:1:4: variable reference for 'NOPE_NOT_SET_ANYWHERE' on line 1 can not be found",
    );
    fails_with(
        "include nothere.conf\n",
        "test.conf:1:1: error parsing include file 'nothere.conf'",
    );
}

#[test]
fn value_errors() {
    fails_with(
        "port: \"abc\"\n",
        "test.conf:1:7: expected an integer for \"port\", got string",
    );
    fails_with(
        "debug: \"yes\"\n",
        "test.conf:1:8: expected a boolean for \"debug\", got string",
    );
    fails_with(
        "max_payload: 3GB\n",
        "test.conf:1:14: max_payload value is too big",
    );
    fails_with(
        "ping_interval: \"3d\"\n",
        "test.conf:1:16: error parsing ping_interval: time: unknown unit \"d\" in duration \"3d\"",
    );
    fails_with(
        "write_deadline: true\n",
        "error parsing write_deadline: expected a duration, got boolean",
    );
    fails_with(
        "ping_interval: \"100000000000000000000s\"\n",
        "is longer than a year",
    );
    fails_with("ping_interval: 99999999999\n", "is longer than a year");
    fails_with("write_deadline: 3d\n", "time: unknown unit \"d\"");
    fails_with(
        "listen: \"nohostport\"\n",
        "test.conf:1:9: could not parse address string \"nohostport\"",
    );
    fails_with("listen: \"host:abc\"\n", "could not parse port \"abc\"");
    fails_with(
        "server_name: \"has space\"\n",
        "server name cannot contain spaces",
    );
    fails_with(
        "authorization: 5\n",
        "expected a map for \"authorization\", got integer",
    );
    fails_with(
        "authorization { token: t, user: u, password: p }\n",
        "test.conf:1:1: Cannot have a user/pass and token",
    );
    fails_with(
        "authorization { user: u, users: [{user: a, password: b}] }\n",
        "Can not have a single user/pass and a users array",
    );
    fails_with(
        "authorization { token: t, users: [{user: a}] }\n",
        "Can not have a token and a users array",
    );
    fails_with(
        "authorization { users: [{user: a}, {user: a}] }\n",
        "Duplicate user \"a\" detected",
    );
    fails_with(
        "authorization { users: [{password: b}] }\n",
        "User entry requires a user",
    );
    fails_with(
        "authorization { users: [5] }\n",
        "Expected user entry to be a map/struct, got integer",
    );
    fails_with(
        "authorization { users: 5 }\n",
        "Expected users field to be an array, got integer",
    );
    fails_with(
        "authorization { timeout: \"x\" }\n",
        "error parsing authorization config, 'timeout' time: invalid duration \"x\"",
    );
    fails_with(
        "jetstream: maybe\n",
        "Expected 'enabled' or 'disabled' for string value, got 'maybe'",
    );
    fails_with(
        "lame_duck_duration: \"10s\"\n",
        "invalid lame_duck_duration of 10s, minimum is 30 seconds",
    );
    fails_with(
        "trusted: \"ABC\"\n",
        "test.conf:1:1: \"trusted\" is not supported by flotilla",
    );
}

/// A gateway or MQTT block starts the server without that feature: the
/// log says what is off and /varz lists the block (nats-server would run
/// it; refusing would stop an existing config from starting).
#[test]
fn features_flotilla_lacks_start_the_server_without_them() {
    let config = "gateway { name: A, port: -1 }\nmqtt { port: -1 }\n";
    let (code, out) = check(config);
    assert_eq!(code, 0, "{out}");
    for want in [
        "test.conf:1:1: \"gateway\" is not supported by flotilla and is ignored: no gateway connections",
        "test.conf:2:1: \"mqtt\" is not supported by flotilla and is ignored: no MQTT clients",
    ] {
        assert!(out.contains(want), "want: {want}\ngot: {out}");
    }
    let server = common::server().config(config).start();
    assert!(server
        .log_text()
        .contains("\"mqtt\" is not supported by flotilla"));
    let varz = server.json("/varz");
    assert_eq!(
        varz["ignored_config"],
        serde_json::json!(["gateway", "mqtt"])
    );
    let mut client = common::Raw::connect(&server.addr());
    client.send(b"CONNECT {}\r\nPING\r\n");
    let reply = client.read_until("PONG", std::time::Duration::from_secs(5));
    assert!(reply.ends_with("PONG"), "{reply}");
}

#[test]
fn account_errors() {
    for (text, want) in [
        ("accounts { $G: {} }\n", "\"$G\" is a Reserved Account"),
        ("accounts: [\"$G\"]\n", "\"$G\" is a Reserved Account"),
        ("accounts { A: 5 }\n", "Expected map entries for accounts"),
        (
            "accounts: 5\n",
            "Expected map or array for accounts, got integer",
        ),
        (
            "accounts { A: { users: [{user: u}] }, B: { users: [{user: u}] } }\n",
            "Duplicate user \"u\" detected",
        ),
        (
            "authorization { user: x, password: y }\naccounts { A: { users: [{user: u}] } }\n",
            "Can not have a single user/pass and accounts",
        ),
        (
            "accounts { A: { jetstream: sometimes } }\n",
            "Expected 'enabled' or 'disabled' for string value, got 'sometimes'",
        ),
        (
            "accounts { A: { nkey: x } }\n",
            "\"nkey\" in an account is not supported by flotilla",
        ),
        ("accounts { A: { userz: [] } }\n", "unknown field \"userz\""),
        (
            "jetstream: enabled\naccounts { A: {} }\n",
            "JetStream is enabled but no account enables it",
        ),
        (
            "accounts { A: { users: [{user: u}] } }\nno_auth_user: v\n",
            "no_auth_user: \"v\" not present as user or nkey",
        ),
    ] {
        fails_with(text, want);
    }
    let (code, out) = check(
        "accounts { A: { users: [{user: u, password: p}], default_permissions: { publish: a } } }\nno_auth_user: u\n",
    );
    assert_eq!(code, 0, "{out}");
}

#[test]
fn permission_errors() {
    let user =
        |perms: &str| format!("authorization {{ users: [{{user: a, permissions: {perms}}}] }}\n");
    for (perms, want) in [
        ("5", "Expected permissions to be a map/struct, got integer"),
        ("{ publsh: x }", "Unknown field \"publsh\" parsing permissions"),
        (
            "{ publish: { allow: x, nope: y } }",
            "Unknown field name \"nope\" parsing subject permissions, only 'allow' or 'deny' are permitted",
        ),
        ("{ publish: [\"a b\"] }", "subject \"a b\" is not a valid subject"),
        ("{ publish: [\"a.>.b\"] }", "subject \"a.>.b\" is not a valid subject"),
        ("{ subscribe: [\"a b c\"] }", "subject \"a b c\" is not a valid subject"),
        ("{ subscribe: [\"a.>.b q\"] }", "subject \"a.>.b\" is not a valid subject"),
        ("{ subscribe: [5] }", "Subject in permissions array cannot be cast to string"),
        (
            "{ subscribe: 5 }",
            "Expected subject permissions to be a subject, or array of subjects, got integer",
        ),
        (
            "{ allow_responses: 5 }",
            "error parsing response permissions, expected a boolean or a map",
        ),
        (
            "{ allow_responses: { expires: \"x\" } }",
            "error parsing expires: time: invalid duration \"x\"",
        ),
        (
            "{ allow_responses: { expires: 5 } }",
            "error parsing expires, not a duration string",
        ),
    ] {
        fails_with(&user(perms), want);
    }
    let key = nkeys::KeyPair::new_user().public_key();
    let account = nkeys::KeyPair::new_account().public_key();
    for (entry, want) in [
        (
            "{nkey: UBAD}".to_string(),
            "Not a valid public nkey for a user",
        ),
        (
            format!("{{nkey: {account}}}"),
            "Not a valid public nkey for a user",
        ),
        (
            format!("{{nkey: {key}, user: a}}"),
            "Nkey users do not take usernames or passwords",
        ),
        (
            format!("{{nkey: {key}, password: a}}"),
            "Nkey users do not take usernames or passwords",
        ),
    ] {
        fails_with(&format!("authorization {{ users: [{entry}] }}\n"), want);
    }
    let (code, out) = check(&format!(
        "authorization {{ users: [{{nkey: {key}}}] }}\nno_auth_user: {key}\n"
    ));
    assert_eq!(code, 0, "{out}");
    fails_with(
        "authorization { default_permissions: 5 }\n",
        "Expected permissions to be a map/struct, got integer",
    );
    fails_with(
        "no_auth_user: ghost\n",
        "no_auth_user: \"ghost\" present, but users/nkeys are not defined",
    );
    fails_with(
        "authorization { users: [{user: a}] }\nno_auth_user: ghost\n",
        "no_auth_user: \"ghost\" not present as user or nkey in authorization block or account configuration",
    );
    let (code, out) = check(
        "authorization {\n  default_permissions: { publish: { deny: \">\" }, allow_responses: true }\n  \
         users: [{user: a, permissions: { subscribe: [\"q.* group\"] }}, {user: b}]\n}\nno_auth_user: b\n",
    );
    assert_eq!(code, 0, "{out}");
}

#[test]
fn several_errors_are_all_reported() {
    let (code, out) = check("port: \"a\"\ndebug: 1\n");
    assert_eq!(code, 1);
    assert!(
        out.contains("test.conf:1:7:") && out.contains("test.conf:2:8:"),
        "{out}"
    );
}

#[test]
fn cross_field_rules() {
    fails_with(
        "max_payload: 2MB\nmax_pending: 1MB\n",
        "max_payload (2097152) cannot be higher than max_pending (1048576)",
    );
    fails_with(
        "lame_duck_duration: \"30s\"\nlame_duck_grace_period: \"40s\"\n",
        "lame duck grace period (40s) should be strictly lower than lame duck duration (30s)",
    );
}

#[test]
fn jetstream_and_cluster_blocks_check_clean() {
    // JetStream is available: a jetstream block parses and checks clean.
    let (code, out) = check("jetstream { store_dir: /tmp/x }\n");
    assert_eq!(code, 0, "{out}");
    // Server tags: a string or a list of strings.
    let (code, out) = check("server_tags: [\"az:1\", \"ssd\"]\n");
    assert_eq!(code, 0, "{out}");
    let (code, out) = check("server_tags: \"az:1\"\n");
    assert_eq!(code, 0, "{out}");
    fails_with(
        "server_tags: [1]\n",
        "1:15: error parsing tags: unsupported type",
    );
    // JetStream in a cluster too.
    let (code, out) =
        check("server_name: a\njetstream: enabled\ncluster { name: c, listen: 127.0.0.1:6222 }\n");
    assert_eq!(code, 0, "{out}");
    let (code, out) = check("cluster { name: c, listen: 127.0.0.1:6222 }\n");
    assert_eq!(code, 0, "{out}");
    // Disabled JetStream is fine.
    let (code, out) = check("jetstream: disabled\n");
    assert_eq!(code, 0, "{out}");
}

#[test]
fn missing_config_file() {
    let out = Command::new(BIN)
        .arg("-c")
        .arg("/nonexistent/flotilla.conf")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/flotilla.conf: error opening config file"),
        "{err}"
    );
}

#[test]
fn include_and_env_variables() {
    let dir = tempfile::tempdir().unwrap();
    common::config_path(
        dir.path(),
        "auth.conf",
        "authorization { token: $FLOTILLA_TEST_TOKEN }\n",
    );
    let main = common::config_path(
        dir.path(),
        "main.conf",
        "include auth.conf\nmax_payload: $FLOTILLA_TEST_MP\n",
    );
    let out = Command::new(BIN)
        .arg("-c")
        .arg(&main)
        .arg("-t")
        .env("FLOTILLA_TEST_TOKEN", "tok")
        .env("FLOTILLA_TEST_MP", "2KB")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The websocket block's authorization is checked as nats-server's
/// `validateWebsocketOptions` checks it.
#[test]
fn websocket_authorization_is_validated() {
    let ws = "websocket { port: -1, no_tls: true";
    let users = "authorization { users: [{user: a, password: p}] }\n";
    for (text, want) in [
        (
            format!("{users}{ws}, authorization {{ user: u, password: p }} }}\n"),
            "websocket authentication username not compatible with presence of users/nkeys",
        ),
        (
            format!("{ws}, authorization {{ token: t }} }}\n{users}"),
            "websocket authentication token not compatible with presence of users/nkeys",
        ),
        (
            format!("{ws}, no_auth_user: b }}\n{users}"),
            "no_auth_user: \"b\" not present as user or nkey",
        ),
        (
            format!("{ws}, no_auth_user: b }}\n"),
            "no_auth_user: \"b\" present, but users/nkeys are not defined",
        ),
        (
            format!("{ws}, jwt_cookie: jwt }}\n"),
            "trusted operators or trusted keys configuration is required for JWT authentication via cookie \"jwt\"",
        ),
        (
            format!("{ws}, authorization {{ users: [] }} }}\n"),
            "unknown field \"users\"",
        ),
    ] {
        fails_with(&text, want);
    }
}
