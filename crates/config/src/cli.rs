//! The command line, parsed the way nats-server's (Go `flag` package)
//! does: `-flag` and `--flag` alike, `-flag value` or `-flag=value`, and
//! booleans as `-flag` or `-flag=false`. clap cannot accept single-dash
//! long flags such as `-js` or `-DV`, hence this small parser.

use std::path::PathBuf;

use crate::options::{Options, TlsOptions};

pub const USAGE: &str = "
Usage: flotilla [options]

Server Options:
    -a, --addr, --net <host>         Bind to host address (default: 0.0.0.0)
    -p, --port <port>                Use port for clients (default: 4222)
    -n, --name
        --server_name <server_name>  Server name (default: auto)
    -P, --pid <file>                 File to store PID
    -m, --http_port <port>           Use port for http monitoring
    -ms,--https_port <port>          Use port for https monitoring
    -c, --config <file>              Configuration file
    -t                               Test configuration and exit
        --ports_file_dir <dir>       Creates a ports file in the specified directory (<executable_name>_<pid>.ports).

Logging Options:
    -l, --log <file>                 File to redirect log output
    -T, --logtime                    Timestamp log entries (default: true)
    -D, --debug                      Enable debugging output
    -V, --trace                      Trace the raw protocol
    -DV                              Debug and trace

JetStream Options:
    -js, --jetstream                 Enable JetStream functionality
    -sd, --store_dir <dir>           Set the storage directory

Authorization Options:
        --user <user>                User required for connections
        --pass <password>            Password required for connections
        --auth <token>               Authorization token required for connections

TLS Options:
        --tls                        Enable TLS, do not verify clients (default: false)
        --tlscert <file>             Server certificate file
        --tlskey <file>              Private key for server certificate
        --tlsverify                  Enable TLS, verify client certificates
        --tlscacert <file>           Client certificate CA for verification

Cluster Options:
        --routes <rurl-1, rurl-2>    Routes to solicit and connect
        --cluster <cluster-url>      Cluster URL for solicited routes
        --cluster_name <string>      Cluster Name, if not set one will be dynamically generated

Common Options:
    -h, --help                       Show this message
    -v, --version                    Show version
    -sl,--signal <signal>[=<pid>]    Send signal to flotilla process (ldm, stop, quit, term, reopen, reload)
                                     <pid> can be either a PID (e.g. 1) or the path to a PID file (e.g. /var/run/flotilla.pid)
";

/// What the command line asked for.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Cli {
    pub host: Option<String>,
    pub port: Option<i64>,
    pub server_name: Option<String>,
    pub pid_file: Option<PathBuf>,
    pub http_port: Option<i64>,
    pub https_port: Option<i64>,
    pub config: Option<PathBuf>,
    pub test_config: bool,
    pub ports_file_dir: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    pub logtime: Option<bool>,
    pub debug: Option<bool>,
    pub trace: Option<bool>,
    pub jetstream: Option<bool>,
    pub store_dir: Option<PathBuf>,
    pub user: Option<String>,
    pub pass: Option<String>,
    pub auth: Option<String>,
    pub routes: Option<String>,
    pub cluster: Option<String>,
    pub cluster_name: Option<String>,
    pub cluster_advertise: Option<String>,
    pub no_advertise: Option<bool>,
    pub connect_retries: Option<i64>,
    pub help: bool,
    pub version: bool,
    /// `--signal <command>[=<pid>]`: send a signal and exit.
    pub signal: Option<String>,
    pub tls: Option<bool>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca_cert: Option<PathBuf>,
    pub tls_verify: Option<bool>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CliError {
    #[error("flag provided but not defined: -{0}")]
    Unknown(String),
    #[error("flag needs an argument: -{0}")]
    MissingValue(String),
    #[error("invalid boolean value {value:?} for -{flag}: parse error")]
    BadBool { flag: String, value: String },
    #[error("invalid value {value:?} for flag -{flag}: parse error")]
    BadInt { flag: String, value: String },
    #[error("flag -{0} is a nats-server option flotilla does not support")]
    Unsupported(String),
    #[error("unexpected argument {0:?}")]
    Positional(String),
}

enum Kind {
    Bool(fn(&mut Cli, bool)),
    Str(fn(&mut Cli, String)),
    Int(fn(&mut Cli, i64)),
}

fn flag(name: &str) -> Option<Kind> {
    use Kind::*;
    Some(match name {
        "a" | "addr" | "net" => Str(|c, v| c.host = Some(v)),
        "p" | "port" => Int(|c, v| c.port = Some(v)),
        "n" | "name" | "server_name" => Str(|c, v| c.server_name = Some(v)),
        "P" | "pid" => Str(|c, v| c.pid_file = Some(v.into())),
        "m" | "http_port" => Int(|c, v| c.http_port = Some(v)),
        "ms" | "https_port" => Int(|c, v| c.https_port = Some(v)),
        "c" | "config" => Str(|c, v| c.config = Some(v.into())),
        "t" => Bool(|c, v| c.test_config = v),
        "ports_file_dir" => Str(|c, v| c.ports_file_dir = Some(v.into())),
        "l" | "log" => Str(|c, v| c.log_file = Some(v.into())),
        "T" | "logtime" => Bool(|c, v| c.logtime = Some(v)),
        "D" | "debug" => Bool(|c, v| c.debug = Some(v)),
        "V" | "trace" => Bool(|c, v| c.trace = Some(v)),
        "DV" => Bool(|c, v| {
            c.debug = Some(v);
            c.trace = Some(v);
        }),
        "js" | "jetstream" => Bool(|c, v| c.jetstream = Some(v)),
        "sd" | "store_dir" => Str(|c, v| c.store_dir = Some(v.into())),
        "user" => Str(|c, v| c.user = Some(v)),
        "pass" => Str(|c, v| c.pass = Some(v)),
        "auth" => Str(|c, v| c.auth = Some(v)),
        "routes" => Str(|c, v| c.routes = Some(v)),
        "cluster" | "cluster_listen" => Str(|c, v| c.cluster = Some(v)),
        "cluster_name" => Str(|c, v| c.cluster_name = Some(v)),
        "cluster_advertise" => Str(|c, v| c.cluster_advertise = Some(v)),
        "no_advertise" => Bool(|c, v| c.no_advertise = Some(v)),
        "connect_retries" => Int(|c, v| c.connect_retries = Some(v)),
        "h" | "help" => Bool(|c, v| c.help = v),
        "v" | "version" => Bool(|c, v| c.version = v),
        "sl" | "signal" => Str(|c, v| c.signal = Some(v)),
        "tls" => Bool(|c, v| c.tls = Some(v)),
        "tlscert" => Str(|c, v| c.tls_cert = Some(v.into())),
        "tlskey" => Str(|c, v| c.tls_key = Some(v.into())),
        "tlscacert" => Str(|c, v| c.tls_ca_cert = Some(v.into())),
        "tlsverify" => Bool(|c, v| c.tls_verify = Some(v)),
        _ => return None,
    })
}

/// nats-server flags flotilla knows of but does not implement; refused by
/// name rather than as unknown.
const UNSUPPORTED: &[&str] = &[
    "client_advertise",
    "s",
    "syslog",
    "r",
    "remote_syslog",
    "VV",
    "DVV",
    "log_size_limit",
    "max_traced_msg_len",
    "profile",
    "help_tls",
];

impl Cli {
    /// Any `--tls*` flag replaces the config file's `tls` block with what
    /// the flags say, and `--tls=false` turns TLS off, as in nats-server.
    fn apply_tls(&self, o: &mut Options) {
        if self.tls == Some(false) {
            o.tls = None;
            return;
        }
        let any = self.tls.is_some()
            || self.tls_cert.is_some()
            || self.tls_key.is_some()
            || self.tls_ca_cert.is_some()
            || self.tls_verify.is_some();
        if any {
            o.tls = Some(TlsOptions {
                cert_file: self.tls_cert.clone(),
                key_file: self.tls_key.clone(),
                ca_file: self.tls_ca_cert.clone(),
                verify: self.tls_verify.unwrap_or(false),
                ..TlsOptions::default()
            });
        }
    }
}

fn parse_bool(flag: &str, v: &str) -> Result<bool, CliError> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(CliError::BadBool {
            flag: flag.to_string(),
            value: v.to_string(),
        }),
    }
}

/// Parses arguments (without the program name).
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Cli, CliError> {
    let mut cli = Cli::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            if let Some(extra) = args.next() {
                return Err(CliError::Positional(extra));
            }
            break;
        }
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(CliError::Positional(arg));
        };
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(CliError::Unknown(body.to_string()));
        }
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let Some(kind) = flag(name) else {
            if UNSUPPORTED.contains(&name) {
                return Err(CliError::Unsupported(name.to_string()));
            }
            return Err(CliError::Unknown(name.to_string()));
        };
        match kind {
            Kind::Bool(set) => {
                let v = match inline {
                    Some(v) => parse_bool(name, &v)?,
                    None => true,
                };
                set(&mut cli, v);
            }
            Kind::Str(set) => {
                let v = inline
                    .or_else(|| args.next())
                    .ok_or_else(|| CliError::MissingValue(name.to_string()))?;
                set(&mut cli, v);
            }
            Kind::Int(set) => {
                let v = inline
                    .or_else(|| args.next())
                    .ok_or_else(|| CliError::MissingValue(name.to_string()))?;
                let n = v.parse().map_err(|_| CliError::BadInt {
                    flag: name.to_string(),
                    value: v.clone(),
                })?;
                set(&mut cli, n);
            }
        }
    }
    Ok(cli)
}

impl Cli {
    /// Lays the flags over options read from the config file: flags win.
    pub fn apply(&self, o: &mut Options) {
        self.apply_tls(o);
        if let Some(v) = &self.host {
            o.host = v.clone();
        }
        if let Some(v) = self.port {
            o.port = v;
        }
        if let Some(v) = &self.server_name {
            o.server_name = Some(v.clone());
        }
        if let Some(v) = &self.pid_file {
            o.pid_file = Some(v.clone());
        }
        if let Some(v) = self.http_port {
            o.http_port = v;
        }
        if let Some(v) = self.https_port {
            o.https_port = v;
        }
        if let Some(v) = &self.ports_file_dir {
            o.ports_file_dir = Some(v.clone());
        }
        if let Some(v) = &self.log_file {
            o.logfile = Some(v.clone());
        }
        if let Some(v) = self.logtime {
            o.logtime = v;
        }
        if let Some(v) = self.debug {
            o.debug = v;
        }
        if let Some(v) = self.trace {
            o.trace = v;
        }
        if let Some(v) = self.jetstream {
            o.jetstream.enabled = v;
        }
        if let Some(v) = &self.store_dir {
            o.jetstream.store_dir = Some(v.clone());
        }
        if let Some(v) = &self.auth {
            o.authorization.token = Some(v.clone());
        }
        if let Some(v) = &self.user {
            o.authorization.user = Some(v.clone());
        }
        if let Some(v) = &self.pass {
            o.authorization.password = Some(v.clone());
        }
        if let Some(v) = &self.routes {
            o.cluster.routes = v
                .split(',')
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty())
                .collect();
        }
        if let Some(v) = &self.cluster {
            // A cluster URL like nats://user:pass@host:port sets where
            // routes listen, and the routes' credentials.
            let rest = v.split_once("://").map_or(v.as_str(), |(_, rest)| rest);
            let rest = rest.trim_end_matches('/');
            let hostport = match rest.rsplit_once('@') {
                Some((creds, hp)) => {
                    let (u, p) = creds.split_once(':').unwrap_or((creds, ""));
                    o.cluster.user = Some(u.to_string());
                    o.cluster.password = (!p.is_empty()).then(|| p.to_string());
                    hp
                }
                None => rest,
            };
            if let Some((h, p)) = hostport.rsplit_once(':') {
                o.cluster.host = Some(h.to_string());
                o.cluster.port = p.parse().ok();
            }
        }
        if let Some(v) = &self.cluster_advertise {
            o.cluster.advertise = Some(v.clone());
        }
        if let Some(v) = self.no_advertise {
            o.cluster.no_advertise = v;
        }
        if let Some(v) = self.connect_retries {
            o.cluster.connect_retries = v.clamp(0, u32::MAX as i64) as u32;
        }
        if let Some(v) = &self.cluster_name {
            o.cluster.name = Some(v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Cli, CliError> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn go_flag_forms() {
        let c = p(&[
            "-p",
            "-1",
            "--addr=127.0.0.1",
            "-js",
            "-sd",
            "/tmp/x",
            "-DV",
            "-m=8222",
        ])
        .unwrap();
        assert_eq!(c.port, Some(-1));
        assert_eq!(c.host.as_deref(), Some("127.0.0.1"));
        assert_eq!(c.jetstream, Some(true));
        assert_eq!(c.store_dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!((c.debug, c.trace), (Some(true), Some(true)));
        assert_eq!(c.http_port, Some(8222));
        let c = p(&[
            "--port",
            "4333",
            "-D=false",
            "-server_name",
            "a",
            "--name=b",
        ])
        .unwrap();
        assert_eq!(c.port, Some(4333));
        assert_eq!(c.debug, Some(false));
        assert_eq!(c.server_name.as_deref(), Some("b"));
    }

    #[test]
    fn errors() {
        assert_eq!(p(&["-x"]), Err(CliError::Unknown("x".into())));
        assert_eq!(
            p(&["--profile", "1"]),
            Err(CliError::Unsupported("profile".into()))
        );
        assert_eq!(p(&["-p"]), Err(CliError::MissingValue("p".into())));
        assert!(matches!(p(&["-p", "abc"]), Err(CliError::BadInt { .. })));
        assert!(matches!(p(&["-D=maybe"]), Err(CliError::BadBool { .. })));
        assert_eq!(p(&["stray"]), Err(CliError::Positional("stray".into())));
    }

    #[test]
    fn flags_override_config() {
        let mut o = Options {
            port: 1000,
            ..Default::default()
        };
        let c = p(&[
            "-p",
            "2000",
            "--user",
            "u",
            "--pass",
            "pw",
            "--routes",
            "nats://a:1, nats://b:2",
        ])
        .unwrap();
        c.apply(&mut o);
        assert_eq!(o.port, 2000);
        assert_eq!(o.authorization.user.as_deref(), Some("u"));
        assert_eq!(o.cluster.routes, vec!["nats://a:1", "nats://b:2"]);
    }
}
