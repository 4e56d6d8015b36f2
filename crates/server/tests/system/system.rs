//! The system account (issue 37): which account it is, in config mode
//! as nats-server picks it, and what a bad choice is told.

#[path = "../common/mod.rs"]
mod common;

/// The accounts `/accountz` lists, sorted.
fn accounts(s: &common::Server) -> Vec<String> {
    let all = s.json("/accountz");
    let mut names: Vec<String> = all["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// Without a config naming one, the server makes `$SYS`; with
/// `no_system_account` it makes none; a named account is the system
/// account, and then no `$SYS` is made.
#[test]
fn the_system_account_is_made_or_named() {
    let cases: &[(&str, &[&str])] = &[
        ("", &["$G", "$SYS"]),
        ("no_system_account: true\n", &["$G"]),
        ("no_sys_acc: true\n", &["$G"]),
        (
            "accounts { SYS { users: [{ user: s, password: p }] } }\nsystem_account: SYS\n",
            &["$G", "SYS"],
        ),
        (
            "accounts { SYS { users: [{ user: s, password: p }] } }\nsystem: SYS\nno_system_account: true\n",
            &["$G", "SYS"],
        ),
    ];
    for (config, want) in cases {
        let s = common::server().config(config).start();
        assert_eq!(accounts(&s), *want, "{config}");
    }
}

/// A system account that no account block defines stops the server at
/// start, with nats-server's words (flotilla's `-t` refuses it too, and
/// names the file, line and column).
#[test]
fn a_missing_system_account_is_refused() {
    let text = "system_account: NOPE\n";
    let dir = tempfile::tempdir().unwrap();
    let path = common::config_path(dir.path(), "test.conf", text);
    let bin = std::env::var_os("FLOTILLA_TEST_SERVER").unwrap_or_else(|| common::BIN.into());
    let mut child = std::process::Command::new(bin)
        .arg("-c")
        .arg(&path)
        .args(["-a", "127.0.0.1", "-p", "-1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the server started with a missing system account");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("error resolving system account: account missing"),
        "{said}"
    );
    if !common::reference_server() {
        let said = common::refused_by_server(text);
        assert!(said.contains("test.conf:1:1"), "{said}");
    }
}
