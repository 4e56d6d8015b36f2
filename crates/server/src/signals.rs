//! Signals, as nats-server handles them: TERM/INT stop gracefully, USR2
//! enters lame-duck mode, HUP reloads the config file, USR1 reopens the
//! log file. And `--signal`, which sends them to a running server.

use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tracing::{error, info};

use crate::logging::LogHandle;
use config::cli::Cli;
use config::options::Options;
use flotilla_core::server::Server;

/// Handles signals until the server has shut down.
pub async fn run(server: Arc<Server>, cli: Cli, log: LogHandle) {
    let (Ok(mut term), Ok(mut int), Ok(mut usr1), Ok(mut usr2), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
        signal(SignalKind::hangup()),
    ) else {
        error!("cannot install signal handlers");
        server.shutdown();
        return;
    };
    let mut shutdown = server.shutdown_signal();
    while !*shutdown.borrow() {
        tokio::select! {
            _ = term.recv() => {
                info!("Trapped \"terminated\" signal");
                // In lame duck, TERM waits for the drain to finish, as
                // nats-server; INT still stops at once.
                if !server.lame_duck.load(std::sync::atomic::Ordering::Relaxed) {
                    server.shutdown();
                }
            }
            _ = int.recv() => {
                info!("Trapped \"interrupt\" signal");
                server.shutdown();
            }
            _ = usr1.recv() => {
                info!("Trapped \"user defined signal 1\" signal");
                log.reopen();
            }
            _ = usr2.recv() => {
                info!("Trapped \"user defined signal 2\" signal");
                tokio::spawn(server.clone().lame_duck());
            }
            _ = hup.recv() => {
                info!("Trapped \"hangup\" signal");
                let _ = reload(&server, &cli, &log);
            }
            _ = shutdown.changed() => {}
        }
    }
}

/// Re-reads the config file and applies what can change while running;
/// refuses the whole reload if anything else changed, and says why (in
/// the log, and to the caller: the system account's `RELOAD`).
pub fn reload(server: &Server, cli: &Cli, log: &LogHandle) -> Result<(), String> {
    try_reload(server, cli, log).inspect_err(|e| {
        error!("Failed to reload server configuration: {e}");
    })
}

fn try_reload(server: &Server, cli: &Cli, log: &LogHandle) -> Result<(), String> {
    let Some(path) = &cli.config else {
        return Err("no configuration file".into());
    };
    let mut new = match config::load(path) {
        Ok((o, _warnings)) => o,
        Err(e) => return Err(format!("{e:#}")),
    };
    cli.apply(&mut new);
    new.apply_baseline();
    new.validate().and_then(|()| auth::check_options(&new))?;
    let old = server.opts();
    if let Some(field) = not_reloadable(&old, &new) {
        return Err(format!("config reload not supported for {field}"));
    }
    if jwt_jetstream_changed(server, &new) {
        return Err("config reload not supported for JetStream limits in account JWTs".into());
    }
    if old.debug != new.debug || old.trace != new.trace {
        log.set_level(new.debug, new.trace);
        if old.debug != new.debug {
            info!("Reloaded: debug = {}", new.debug);
        }
        if old.trace != new.trace {
            info!("Reloaded: trace = {}", new.trace);
        }
    }
    let auth_changed = old.authorization != new.authorization;
    if auth_changed {
        info!("Reloaded: authorization");
    }
    let tls = new.tls.is_some() || old.tls.is_some() || new.cluster.tls.is_some();
    let accounts_changed = old.imports != new.imports
        || old.exports != new.exports
        || old.mappings != new.mappings
        || old.account_limits != new.account_limits;
    server.set_opts(new);
    if accounts_changed {
        server.configure_accounts();
        info!("Reloaded: account imports, exports, mappings and limits");
    }
    // Certificates are read again on every reload, changed paths or not,
    // as nats-server does: renewing one in place is the usual case.
    if tls {
        match server.load_tls() {
            Ok(()) => info!("Reloaded: tls"),
            Err(e) => error!("Failed to reload TLS configuration: {e}"),
        }
    }
    if auth_changed {
        if let Err(e) = server.load_trust() {
            error!("Failed to reload the operator's trust: {e}");
        }
        server.recheck_auth();
    }
    info!("Reloaded server configuration");
    Ok(())
}

/// Whether the preloaded account JWTs of `new` say of JetStream what
/// the running ones do not: the accounts' JetStreams are made at start.
fn jwt_jetstream_changed(server: &Server, new: &Options) -> bool {
    use auth::operator::{JwtJetStream, Trust};
    let with_jetstream = |t: Option<Arc<Trust>>| -> Vec<(String, JwtJetStream)> {
        t.map(|t| t.jetstream())
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, js)| *js != JwtJetStream::Disabled)
            .collect()
    };
    let wanted = new
        .authorization
        .operator
        .as_ref()
        .and_then(|op| Trust::new(&op.jwts, &op.preload).ok())
        .map(Arc::new);
    server.opts().jetstream.enabled && with_jetstream(server.trust()) != with_jetstream(wanted)
}

/// The first option that changed but cannot change without a restart.
fn not_reloadable(old: &Options, new: &Options) -> Option<&'static str> {
    let checks: [(&'static str, bool); 13] = [
        ("host", old.host != new.host),
        ("port", old.port != new.port),
        ("server_name", old.server_name != new.server_name),
        (
            "http_port",
            old.http_port != new.http_port
                || old.https_port != new.https_port
                || old.http_host != new.http_host,
        ),
        ("pid_file", old.pid_file != new.pid_file),
        ("ports_file_dir", old.ports_file_dir != new.ports_file_dir),
        (
            "logfile",
            old.logfile != new.logfile || old.logtime != new.logtime,
        ),
        ("jetstream", old.jetstream != new.jetstream),
        (
            "jetstream in accounts",
            old.account_jetstream != new.account_jetstream,
        ),
        ("cluster", old.cluster != new.cluster),
        // nats-server: the system account in force stays.
        (
            "system_account",
            old.system_account() != new.system_account(),
        ),
        ("max_pending", old.max_pending != new.max_pending),
        (
            "lame_duck_duration",
            old.lame_duck_duration != new.lame_duck_duration
                || old.lame_duck_grace_period != new.lame_duck_grace_period,
        ),
    ];
    checks
        .into_iter()
        .find(|(_, changed)| *changed)
        .map(|(f, _)| f)
}

/// `--signal <command>[=<pid or pid file>]`: sends `command` to a running
/// server, as nats-server's `processSignal` and `ProcessSignal` do. With
/// no pid, the one running process named `process` is found with
/// `pgrep`; a pid ending in `*` signals every one whose pid starts so.
pub fn send(arg: &str, process: &str) -> Result<(), String> {
    let parts: Vec<&str> = arg.split('=').collect();
    let (command, pid_expr) = match parts[..] {
        [command] => (command, String::new()),
        [command, pid] => (command, read_pid_file(pid)),
        _ => {
            return Err(format!(
                "invalid signal parameters: [{}]",
                parts[2..].join(" ")
            ))
        }
    };
    let glob = pid_expr.ends_with('*');
    let pid_str = pid_expr.trim_end_matches('*');
    let mut pids = Vec::new();
    if !pid_str.is_empty() {
        pids.push(
            pid_str
                .parse::<i32>()
                .map_err(|_| format!("invalid pid: {pid_str}"))?,
        );
    }
    if pid_str.is_empty() || glob {
        pids = running(process)?;
    }
    if pids.len() > 1 && !glob {
        let list: String = pids.iter().map(|p| format!("\n{p}")).collect();
        return Err(format!("multiple {process} processes running:{list}"));
    }
    if pids.is_empty() {
        return Err(format!("no {process} processes running"));
    }
    let signal = command_signal(command)?;
    let mut errors = String::new();
    for pid in pids {
        let text = pid.to_string();
        if !pid_str.is_empty() && text != pid_str && !(glob && text.starts_with(pid_str)) {
            continue;
        }
        // SAFETY: kill(2) takes plain integers and touches no memory.
        if unsafe { libc::kill(pid, signal) } != 0 {
            let e = std::io::Error::last_os_error();
            errors.push_str(&format!("\nsignal {command:?} {pid}: {e}"));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// nats-server's `CommandToSignal`.
fn command_signal(command: &str) -> Result<libc::c_int, String> {
    Ok(match command {
        "stop" => libc::SIGKILL,
        "quit" => libc::SIGINT,
        "reopen" => libc::SIGUSR1,
        "reload" => libc::SIGHUP,
        "ldm" => libc::SIGUSR2,
        "term" => libc::SIGTERM,
        _ => return Err(format!("unknown signal {command:?}")),
    })
}

/// A pid given as a path to a pid file is read from it
/// (`maybeReadPidFile`); anything else is taken as written.
fn read_pid_file(pid: &str) -> String {
    match std::fs::read_to_string(pid) {
        Ok(text) => text.trim().to_string(),
        Err(_) => pid.to_string(),
    }
}

/// Pids of the running processes named `process`, this one excepted
/// (nats-server's `resolvePids`).
fn running(process: &str) -> Result<Vec<i32>, String> {
    let unresolved = || "unable to resolve pid, try providing one".to_string();
    let out = std::process::Command::new("pgrep")
        .arg(process)
        .output()
        .map_err(|_| unresolved())?;
    // pgrep exits 1 when nothing matched, which is an empty list here.
    if !out.status.success() && out.status.code() != Some(1) {
        return Err(unresolved());
    }
    let me = std::process::id() as i32;
    let mut pids = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let pid: i32 = line.trim().parse().map_err(|_| unresolved())?;
        if pid != me {
            pids.push(pid);
        }
    }
    Ok(pids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_arguments_are_refused_before_anything_is_sent() {
        for (arg, want) in [
            ("stop=1=2", "invalid signal parameters: [2]"),
            ("stop=abc", "invalid pid: abc"),
            ("bogus=1", "unknown signal \"bogus\""),
            ("stop", "no flotilla-no-such-process processes running"),
        ] {
            assert_eq!(
                send(arg, "flotilla-no-such-process"),
                Err(want.to_string()),
                "{arg}"
            );
        }
    }
}
