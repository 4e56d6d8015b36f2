//! Signals, as nats-server handles them: TERM/INT stop gracefully, USR2
//! enters lame-duck mode, HUP reloads the config file.

use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tracing::{error, info};

use crate::cli::Cli;
use crate::logging::LogHandle;
use crate::options::Options;
use crate::server::Server;

/// Handles signals until the server has shut down.
pub async fn run(server: Arc<Server>, cli: Cli, log: LogHandle) {
    let (Ok(mut term), Ok(mut int), Ok(mut usr2), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
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
            _ = usr2.recv() => {
                info!("Trapped \"user defined signal 2\" signal");
                tokio::spawn(server.clone().lame_duck());
            }
            _ = hup.recv() => {
                info!("Trapped \"hangup\" signal");
                reload(&server, &cli, &log);
            }
            _ = shutdown.changed() => {}
        }
    }
}

/// Re-reads the config file and applies what can change while running;
/// refuses the whole reload if anything else changed.
fn reload(server: &Server, cli: &Cli, log: &LogHandle) {
    let Some(path) = &cli.config else {
        error!("Failed to reload server configuration: no configuration file");
        return;
    };
    let mut new = match crate::config::load(path) {
        Ok((o, _warnings)) => o,
        Err(e) => {
            error!("Failed to reload server configuration: {e:#}");
            return;
        }
    };
    cli.apply(&mut new);
    new.apply_baseline();
    if let Err(e) = new.validate() {
        error!("Failed to reload server configuration: {e}");
        return;
    }
    let old = server.opts();
    if let Some(field) = not_reloadable(&old, &new) {
        error!("Failed to reload server configuration: config reload not supported for {field}");
        return;
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
    server.set_opts(new);
    if auth_changed {
        server.recheck_auth();
    }
    info!("Reloaded server configuration");
}

/// The first option that changed but cannot change without a restart.
fn not_reloadable(old: &Options, new: &Options) -> Option<&'static str> {
    let checks: [(&'static str, bool); 11] = [
        ("host", old.host != new.host),
        ("port", old.port != new.port),
        ("server_name", old.server_name != new.server_name),
        (
            "http_port",
            old.http_port != new.http_port || old.http_host != new.http_host,
        ),
        ("pid_file", old.pid_file != new.pid_file),
        ("ports_file_dir", old.ports_file_dir != new.ports_file_dir),
        (
            "logfile",
            old.logfile != new.logfile || old.logtime != new.logtime,
        ),
        ("jetstream", old.jetstream != new.jetstream),
        ("cluster", old.cluster != new.cluster),
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
