//! `flotilla`: a NATS server. This file wires the command line, the
//! config file and logging to the server, and owns process life: signals,
//! pid and ports files, exit codes.

mod logging;
mod signals;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use tracing::{error, info, warn};

use config::cli;
use config::options::{self, Options};
use flotilla_core::server::Server;
use protocol::NATS_VERSION;

// glibc's allocator took about a sixth of the server's CPU time under
// JetStream load (BENCHMARKS.md, "Profiles"); mimalloc's per-thread free
// lists suit the many short-lived buffers of the message path.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc 3's `mi_option_purge_delay` (its position in `mi_option_e`,
/// mimalloc.h; the -sys crate names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays mapped before it goes back to the OS.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// Keeps the allocator's resident memory close to what is in use,
/// without giving pages back that the message path wants again at once.
///
/// Freed memory goes back to the OS after a second. mimalloc 3 keeps it
/// that long by default too, but only purges when it is next called, so
/// the delay is set here explicitly, with the reasons in both directions:
/// - At 10 ms (mimalloc 2's default) an R3 stream
///   taking 1 KiB publishes took 1.5 page faults per message, from the
///   Raft path's buffers (entries decoded, chunks reassembled, publishes
///   encoded): pages freed, purged and faulted in again. At a second,
///   0.25; R3 publish with 256 in flight went from 34.8k to 40.6k msgs/s
///   (medians of 3 rounds at a million messages, nats-server 41.0k).
/// - Memory kept longer: 1M stored 128-byte messages peak at 29 MiB
///   instead of 24 while publishing, and a server that recovered them and
///   went quiet holds 64 MiB instead of 44. Purging at once (0) cost R3
///   publish about a tenth.
///
/// Transparent huge pages are turned off for the process, as mimalloc's
/// own `allow_thp` option does at its start: mimalloc asks for them on its
/// arenas, and every 2 MiB page it touched stayed whole, so with a million
/// stored messages 37 of the 61 MiB resident were huge pages, with a live
/// heap of 22 MiB. Without them the peak is 36-37 MiB, with no throughput
/// change measured (BENCHMARKS.md, "Profiles"). The prctl covers arenas
/// mimalloc mapped before `main` too, which setting its option here would not.
fn tune_allocator() {
    // SAFETY: setting an option is allowed at any time; an unknown option
    // number is ignored by mimalloc.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and touches no
    // memory of ours. Failing (an old kernel) leaves THP as it was.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc != 0 {
        eprintln!(
            "flotilla: transparent huge pages stay on: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let cli = match cli::parse(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("flotilla: {e}\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    if cli.help {
        println!("{}", cli::USAGE);
        return ExitCode::SUCCESS;
    }
    if cli.version {
        println!(
            "flotilla: v{} (nats-server v{NATS_VERSION} compatible)",
            env!("CARGO_PKG_VERSION")
        );
        return ExitCode::SUCCESS;
    }

    if let Some(signal) = &cli.signal {
        // Whatever name this binary runs under (nats-server, in client
        // test suites) is the name of the processes to signal.
        let argv0 = std::env::args().next().unwrap_or_default();
        let process = Path::new(&argv0)
            .file_name()
            .map_or("flotilla".into(), |n| n.to_string_lossy().into_owned());
        return match signals::send(signal, &process) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("flotilla: {e}");
                ExitCode::from(1)
            }
        };
    }

    let (opts, warnings) = match load_options(&cli) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("flotilla: {e:#}");
            return ExitCode::from(1);
        }
    };
    if cli.test_config {
        for w in &warnings {
            eprintln!("flotilla: {w}");
        }
        println!(
            "flotilla: configuration file {} test is successful",
            cli.config
                .as_deref()
                .map(Path::display)
                .map(|d| d.to_string())
                .unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }

    let log = match logging::init(
        opts.debug,
        opts.trace,
        opts.logtime,
        opts.logfile.as_deref(),
    ) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("flotilla: cannot open log file: {e}");
            return ExitCode::from(1);
        }
    };
    for w in &warnings {
        warn!("{w}");
    }

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("flotilla")
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            error!("cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(opts, cli, log)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            ExitCode::from(1)
        }
    }
}

/// Options from the config file (if any) with the flags laid over them.
fn load_options(cli: &cli::Cli) -> Result<(Options, Vec<String>)> {
    let (mut opts, warnings) = match &cli.config {
        Some(path) => config::load(path)?,
        None => (Options::default(), Vec::new()),
    };
    cli.apply(&mut opts);
    opts.apply_baseline();
    opts.validate().map_err(anyhow::Error::msg)?;
    auth::check_options(&opts).map_err(anyhow::Error::msg)?;
    Ok((opts, warnings))
}

/// JetStream with a cluster: replicated through Raft (`jscluster`).
fn js_clustered(opts: &Options) -> bool {
    opts.jetstream.enabled && opts.cluster.enabled()
}

/// The accounts JetStream serves, with their limits: the config's, or
/// in operator mode each account JWT's that enables it.
fn js_accounts(server: &Server, opts: &Options) -> Vec<(String, jetstream::api::AccountTiers)> {
    use auth::operator::JwtJetStream;
    let Some(trust) = server.trust() else {
        // Validated: names accounts, or none (`$G`). The config file's
        // limits are flat (nats-server's has no tiers).
        let accounts = opts.jetstream_accounts().unwrap_or_default();
        return accounts
            .into_iter()
            .map(|(name, limits)| (name, jetstream::api::AccountTiers::Flat(limits)))
            .collect();
    };
    trust
        .jetstream()
        .into_iter()
        .filter_map(|(key, js)| match js {
            JwtJetStream::Enabled(limits) => Some((key, limits)),
            JwtJetStream::Disabled => None,
        })
        .collect()
}

/// The settings of each account's JetStream, sharing one `Shared`.
fn js_settings(
    opts: &Options,
    trust: Option<&auth::operator::Trust>,
    accounts: Vec<(String, jetstream::api::AccountTiers)>,
) -> Vec<jsdriver::js::Settings> {
    let j = &opts.jetstream;
    let shared = Arc::new(jsdriver::js::Shared::default());
    accounts
        .into_iter()
        .map(|(account, account_limits)| jsdriver::js::Settings {
            name_tag: trust.and_then(|t| t.name_tag(&account)),
            account,
            account_limits,
            domain: j.domain.clone(),
            store_dir: j
                .store_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(options::DEFAULT_STORE_DIR)),
            max_memory: j.max_memory.unwrap_or(-1),
            max_store: j.max_file.unwrap_or(-1),
            sync: match j.sync_interval {
                None => jsdriver::js::SyncPolicy::Always,
                Some(d) => jsdriver::js::SyncPolicy::Interval(d),
            },
            clustered: opts.cluster.enabled(),
            shared: shared.clone(),
        })
        .collect()
}

/// Host to put in URLs: a wildcard bind is reachable on loopback.
fn url_host(host: &str) -> &str {
    match host {
        "0.0.0.0" | "" => "127.0.0.1",
        "::" => "::1",
        h => h,
    }
}

/// The server's life: start every surface in nats-server's order, serve
/// until a signal stops it, then clean up.
async fn run(opts: Options, cli: cli::Cli, log: logging::LogHandle) -> Result<()> {
    let server = Server::new(opts.clone());
    server.load_tls().map_err(anyhow::Error::msg)?;
    server.load_trust().map_err(anyhow::Error::msg)?;
    announce(&server, &opts);
    if let Some(pid_file) = &opts.pid_file {
        std::fs::write(pid_file, std::process::id().to_string())
            .with_context(|| format!("could not write pid file {}", pid_file.display()))?;
    }
    // Monitoring's state is there before any connection (it keeps the
    // closed ones), whether or not monitoring is served.
    let services = monitor::Services::install(&server);
    let monitoring_url = serve_monitoring(&server, &services, &opts).await?;
    let js_cluster = start_jetstream(&server, &services, &opts)?;
    let (listener, port) = bind_clients(&server, &opts).await?;
    let websocket = match opts.websocket.enabled() {
        true => Some(bind_websocket(&server).await?),
        false => None,
    };
    let leafnodes = match opts.leafnodes.accepts() {
        true => Some(bind_leafnodes(&server).await?),
        false => None,
    };
    let cluster_url = start_routes(&server, &opts, js_cluster.as_ref()).await?;
    // The system account's requests and statsz: once JetStream's view is
    // in monitoring's services (statsz and JSZ read it), and once routes
    // listen, so that its subscriptions are told to them.
    let _system = system::start(&server, &services);
    let ports_file = match &opts.ports_file_dir {
        Some(dir) => Some(write_ports_file(
            dir,
            &opts.host,
            port,
            monitoring_url.as_deref(),
            cluster_url.as_deref(),
            websocket.as_ref().map(|(_, url)| url.as_str()),
        )?),
        None => None,
    };

    let accept = tokio::spawn(flotilla_core::conn::accept_clients(
        server.clone(),
        listener,
    ));
    if let Some((listener, _)) = websocket {
        tokio::spawn(websocket::accept_all(server.clone(), listener));
    }
    if let Some(listener) = leafnodes {
        tokio::spawn(leafnodes::accept_all(server.clone(), listener));
    }
    for remote in &opts.leafnodes.remotes {
        tokio::spawn(leafnodes::solicit(server.clone(), remote.clone()));
    }
    info!("Server is ready");

    {
        let (weak, cli, log) = (Arc::downgrade(&server), cli.clone(), log.clone());
        let _ = server.reloader.set(Box::new(move || match weak.upgrade() {
            Some(server) => signals::reload(&server, &cli, &log),
            None => Err("server shutting down".into()),
        }));
    }
    signals::run(server.clone(), cli, log).await;

    let _ = accept.await;
    // Give writers a moment to flush what the shutdown queued.
    wait_for_clients(&server).await;
    if let Some(f) = ports_file {
        let _ = std::fs::remove_file(f);
    }
    if let Some(f) = &opts.pid_file {
        let _ = std::fs::remove_file(f);
    }
    info!("Server Exiting..");
    Ok(())
}

/// nats-server's start-up banner, which operators and tools grep for.
fn announce(server: &Server, opts: &Options) {
    info!("Starting nats-server");
    info!(
        "  Version:  {NATS_VERSION} (flotilla {})",
        env!("CARGO_PKG_VERSION")
    );
    info!("  Git:      [not set]");
    info!("  Name:     {}", server.name);
    info!("  ID:       {}", server.id);
    if let Some(path) = &opts.config_file {
        info!("Using configuration file: {}", path.display());
    }
}

/// Serves HTTP(S) monitoring when a port is set; returns its URL for the
/// ports file.
async fn serve_monitoring(
    server: &Arc<Server>,
    services: &Arc<monitor::Services>,
    opts: &Options,
) -> Result<Option<String>> {
    // validate() allows one of the two, and https only with TLS.
    let (scheme, monitor_port) = match opts.https_port {
        0 => ("http", opts.http_port),
        https => ("https", https),
    };
    if monitor_port == 0 {
        return Ok(None);
    }
    let host = opts.http_host.clone().unwrap_or_else(|| opts.host.clone());
    let port = u16::try_from(monitor_port).unwrap_or(0);
    let listener = tokio::net::TcpListener::bind((host.as_str(), port))
        .await
        .with_context(|| format!("can't listen to the monitor port {host}:{port}"))?;
    let bound = listener.local_addr()?.port();
    info!("Starting {scheme} monitor on {host}:{bound}");
    info!("Listening for monitoring traffic on {host}:{bound}");
    let secure = scheme == "https";
    tokio::spawn(monitor::serve(
        server.clone(),
        services.clone(),
        listener,
        secure,
    ));
    Ok(Some(format!("{scheme}://{}:{bound}", url_host(&host))))
}

/// Starts JetStream when enabled, and its cluster when clustered, and
/// shows it to monitoring; returns the cluster (its control loop starts
/// with the routes).
fn start_jetstream(
    server: &Arc<Server>,
    services: &monitor::Services,
    opts: &Options,
) -> Result<Option<Arc<jsdriver::jscluster::JsCluster>>> {
    if !opts.jetstream.enabled {
        return Ok(None);
    }
    let enabled = js_accounts(server, opts);
    let names: Vec<String> = enabled.iter().map(|(name, _)| name.clone()).collect();
    server.set_js_accounts(&names);
    let mode = match js_clustered(opts) {
        true => jsservice::request::Mode::Clustered,
        false => jsservice::request::Mode::Single,
    };
    if enabled.is_empty() {
        // Operator mode: no account JWT enables it.
        tracing::warn!("JetStream is enabled, but no account JWT enables it: none has JetStream");
        jsdriver::js::not_enabled::start(server, mode);
        return Ok(None);
    }
    let mut accounts = Vec::new();
    let trust = server.trust();
    for settings in js_settings(opts, trust.as_deref(), enabled) {
        let bus = flotilla_core::bus::Bus::named(server.clone(), &settings.account);
        accounts.push(jsdriver::js::JetStream::start(bus, settings)?);
    }
    let mut js_cluster = None;
    if js_clustered(opts) {
        js_cluster = Some(jsdriver::jscluster::JsCluster::start(
            jsdriver::jscluster::ClusterView::new(server.clone()),
            &accounts,
        )?);
    }
    jsdriver::js::not_enabled::start(server, mode);
    let view = jsmonitor::View::new(accounts, js_cluster.clone());
    let _ = services.js.set(Arc::new(view));
    Ok(js_cluster)
}

/// Binds the client port; returns the listener and the port it got.
async fn bind_clients(server: &Server, opts: &Options) -> Result<(tokio::net::TcpListener, u16)> {
    let listener = server
        .bind()
        .await
        .with_context(|| format!("Error listening on port: {}:{}", opts.host, opts.port))?;
    let port = listener.local_addr()?.port();
    info!("Listening for client connections on {}:{port}", opts.host);
    if let Some(tls) = &opts.tls {
        info!("TLS required for client connections");
        if tls.handshake_first && tls.handshake_first_fallback.is_none() {
            tracing::warn!(
                "Clients that are not using \"TLS Handshake First\" option will fail to connect"
            );
        }
    }
    Ok((listener, port))
}

/// Starts the route port when clustering is on, and with it the
/// JetStream cluster's control loop; returns the route URL for the ports
/// file.
async fn start_routes(
    server: &Arc<Server>,
    opts: &Options,
    js_cluster: Option<&Arc<jsdriver::jscluster::JsCluster>>,
) -> Result<Option<String>> {
    if !opts.cluster.enabled() {
        return Ok(None);
    }
    routes::start(server.clone()).await.with_context(|| {
        format!(
            "Error listening on router port: {}",
            opts.cluster.port.unwrap_or(0)
        )
    })?;
    let host = opts.cluster.host.as_deref().unwrap_or("0.0.0.0");
    let port = server
        .routes
        .port
        .load(std::sync::atomic::Ordering::Relaxed);
    if let Some(jc) = js_cluster {
        tokio::spawn(jc.clone().run());
    }
    Ok(Some(format!("nats://{}:{port}", url_host(host))))
}

/// Binds the WebSocket port and logs it as nats-server does; returns the
/// listener and its URL for the ports file.
async fn bind_websocket(server: &Server) -> Result<(tokio::net::TcpListener, String)> {
    let opts = server.opts();
    let ws = &opts.websocket;
    let (listener, host, bound) = bind_port(
        ws.host.as_deref(),
        ws.port,
        &server.websocket_port,
        "Unable to listen for websocket connections",
    )
    .await?;
    let scheme = if ws.tls.is_some() { "wss" } else { "ws" };
    info!("Listening for websocket clients on {scheme}://{host}:{bound}");
    if ws.tls.is_none() {
        tracing::warn!("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!");
    }
    Ok((listener, format!("{scheme}://{}:{bound}", url_host(&host))))
}

/// Binds the leaf node port and logs it as nats-server does.
async fn bind_leafnodes(server: &Server) -> Result<tokio::net::TcpListener> {
    let opts = server.opts();
    let leafnodes = &opts.leafnodes;
    let (listener, host, bound) = bind_port(
        leafnodes.host.as_deref(),
        leafnodes.port,
        &server.leafs.port,
        "Error listening on leafnode port",
    )
    .await?;
    info!("Listening for leafnode connections on {host}:{bound}");
    Ok(listener)
}

/// Binds a second port (WebSocket, leaf nodes) on `host` (default
/// [`options::DEFAULT_HOST`]), `port` (-1 or 0: any free one), and
/// records the port bound in `bound_port`. Returns the listener, the
/// host and the port; an error names the address after `what`.
async fn bind_port(
    host: Option<&str>,
    port: i64,
    bound_port: &std::sync::atomic::AtomicU64,
    what: &str,
) -> Result<(tokio::net::TcpListener, String, u16)> {
    let host = host.unwrap_or(options::DEFAULT_HOST).to_string();
    let port = u16::try_from(port).unwrap_or(0);
    let listener = tokio::net::TcpListener::bind((host.as_str(), port))
        .await
        .with_context(|| format!("{what}: {host}:{port}"))?;
    let bound = listener.local_addr()?.port();
    bound_port.store(u64::from(bound), std::sync::atomic::Ordering::Relaxed);
    Ok((listener, host, bound))
}

async fn wait_for_clients(server: &Arc<Server>) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while !server.clients.lock().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// `<dir>/flotilla_<pid>.ports` with the URLs this server answers on, as
/// nats-server writes it for harnesses that start it with `-p -1`.
fn write_ports_file(
    dir: &Path,
    host: &str,
    port: u16,
    monitoring: Option<&str>,
    cluster: Option<&str>,
    websocket: Option<&str>,
) -> Result<PathBuf> {
    let exe = std::env::args()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "flotilla".to_string());
    let path = dir.join(format!("{exe}_{}.ports", std::process::id()));
    let mut ports = serde_json::json!({ "nats": [format!("nats://{}:{port}", url_host(host))] });
    if let Some(m) = monitoring {
        ports["monitoring"] = serde_json::json!([m]);
    }
    if let Some(c) = cluster {
        ports["cluster"] = serde_json::json!([c]);
    }
    if let Some(w) = websocket {
        ports["websocket"] = serde_json::json!([w]);
    }
    std::fs::write(&path, serde_json::to_vec(&ports)?)
        .with_context(|| format!("could not write ports file {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod allocator_tests {
    /// One test, since tuning changes what the first check reads.
    #[test]
    fn tuning_sets_the_purge_delay_and_turns_huge_pages_off() {
        // Guards MI_OPTION_PURGE_DELAY against a renumbering: no other
        // mimalloc 3 option defaults to 1000.
        let v = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(v, 1000);
        // Another value first, so that the check below sees tuning set it
        // (the delay it sets is mimalloc 3's default).
        // SAFETY: setting an option is allowed at any time.
        unsafe { libmimalloc_sys::mi_option_set(super::MI_OPTION_PURGE_DELAY, 7) };
        super::tune_allocator();
        let v = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(v, super::PURGE_DELAY_MS);
        // SAFETY: plain integers in, the flag out.
        let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(disabled, 1);
    }
}
