//! Idle connections with subscriptions, for measuring what a server
//! spends on clients that do nothing. Raw sockets rather than `async-nats`
//! clients, since ten thousand clients each with its own tasks would
//! measure this process instead of the server.

use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::progress::Progress;
use crate::{Error, Params, Report, Result};

fn host_port(url: &str) -> String {
    let first = url.split(',').next().unwrap_or(url);
    let rest = first.split_once("://").map_or(first, |(_, r)| r);
    rest.rsplit('@').next().unwrap_or(rest).to_string()
}

/// Opens one connection, subscribes, and waits for the PONG that says the
/// server has processed every SUB.
async fn open(addr: &str, conn: usize, subs: usize) -> std::io::Result<BufReader<TcpStream>> {
    let s = TcpStream::connect(addr).await?;
    let mut s = BufReader::new(s);
    let mut line = String::new();
    s.read_line(&mut line).await?; // INFO
    let mut out = String::from("CONNECT {\"verbose\":false,\"pedantic\":false}\r\n");
    for i in 0..subs {
        out.push_str(&format!("SUB idle.{conn}.{i} {i}\r\n"));
    }
    out.push_str("PING\r\n");
    s.get_mut().write_all(out.as_bytes()).await?;
    loop {
        line.clear();
        if s.read_line(&mut line).await? == 0 {
            return Err(std::io::Error::other("closed before PONG"));
        }
        if line.starts_with("PONG") {
            return Ok(s);
        }
        if line.starts_with("-ERR") {
            return Err(std::io::Error::other(line.trim().to_string()));
        }
    }
}

/// Answers the server's PINGs until the connection closes.
async fn idle(mut s: BufReader<TcpStream>) {
    let mut line = String::new();
    loop {
        line.clear();
        match s.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) if line.starts_with("PING") => {
                if s.get_mut().write_all(b"PONG\r\n").await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
        }
    }
}

/// Opens `p.conns` connections with `p.subs_per_conn` subscriptions each,
/// 100 at a time, and holds them for `p.hold`. The report's rate is
/// connections established per second.
pub async fn hold(p: &Params) -> Result<Report> {
    let addr = host_port(&p.url);
    let progress = Progress::start("idle", p.conns as u64, p.progress);
    let start = Instant::now();
    let mut held = Vec::with_capacity(p.conns);
    for batch in (0..p.conns).collect::<Vec<_>>().chunks(100) {
        let opened =
            futures::future::join_all(batch.iter().map(|&c| open(&addr, c, p.subs_per_conn))).await;
        for s in opened {
            let s = s.map_err(|e| Error::Wrong {
                scenario: "idle",
                detail: format!("connection {} of {}: {e}", held.len() + 1, p.conns),
            })?;
            held.push(tokio::spawn(idle(s)));
            progress.add(1);
        }
    }
    let elapsed = start.elapsed();
    progress.finish();
    // Scripts sample the server while this line is the last one printed.
    eprintln!(
        "holding {} connections with {} subscriptions for {:?}",
        p.conns,
        p.conns * p.subs_per_conn,
        p.hold
    );
    tokio::time::sleep(p.hold).await;
    let alive = held.iter().filter(|h| !h.is_finished()).count();
    for h in &held {
        h.abort();
    }
    if alive != p.conns {
        return Err(Error::Wrong {
            scenario: "idle",
            detail: format!(
                "{} of {} connections closed while idle",
                p.conns - alive,
                p.conns
            ),
        });
    }
    let secs = elapsed.as_secs_f64().max(1e-9);
    Ok(Report {
        scenario: "idle".into(),
        url: p.url.clone(),
        server: String::new(),
        msg_size: 0,
        msgs: (p.conns * p.subs_per_conn) as u64,
        pubs: 0,
        subs: p.conns,
        in_flight: 0,
        replicas: 0,
        elapsed_s: secs,
        msgs_per_sec: p.conns as f64 / secs,
        delivered_per_sec: 0.0,
        mb_per_sec: 0.0,
        latency: None,
    })
}

/// Core pub/sub 1:1 (as `pubsub`) while connections come and go: in
/// turn, `p.conns` connections are opened (CONNECT, then PING answered)
/// and closed again, 100 at a time, for as long as the pub/sub runs,
/// and at least once. What the server does for each client that
/// arrives and leaves (system account events, say) is then paid during
/// the run. The report is the pub/sub's; its `subs` is how many
/// connections came and went.
pub async fn churn(p: &Params) -> Result<Report> {
    let addr = host_port(&p.url);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churner = {
        let (addr, stop, conns) = (addr.clone(), stop.clone(), p.conns.max(100));
        tokio::spawn(async move {
            let mut churned = 0usize;
            while churned < conns || !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let opened = futures::future::join_all((0..100).map(|c| open(&addr, c, 0))).await;
                for s in opened {
                    s?;
                    churned += 1;
                }
            }
            Ok::<usize, std::io::Error>(churned)
        })
    };
    let report = crate::core::pubsub(p).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let churned = churner
        .await
        .map_err(|e| Error::Wrong {
            scenario: "churn",
            detail: e.to_string(),
        })?
        .map_err(|e| Error::Wrong {
            scenario: "churn",
            detail: format!("a connection that came and went: {e}"),
        })?;
    let mut report = report?;
    report.scenario = "churn".into();
    report.subs = churned;
    Ok(report)
}

/// Core pub/sub 1:1 (as `pubsub`) while the system account's user
/// asks every server's statsz (`$SYS.REQ.SERVER.PING`) over and over,
/// 16 requests in flight, for the whole run: what answering system
/// requests costs client traffic. The report is the pub/sub's; its
/// `subs` is how many answers came.
pub async fn ping_flood(p: &Params) -> Result<Report> {
    let url = p.flood_url.clone().ok_or_else(|| Error::Wrong {
        scenario: "ping-flood",
        detail: "--flood-url names the system account's user".into(),
    })?;
    let flooder = crate::connect_to(p, &url).await?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (c, stop, answered) = (flooder.clone(), stop.clone(), answered.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let asked = c.request("$SYS.REQ.SERVER.PING", "{}".into());
                    if let Ok(Ok(_)) =
                        tokio::time::timeout(std::time::Duration::from_secs(5), asked).await
                    {
                        answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let report = crate::core::pubsub(p).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    let answered = answered.load(std::sync::atomic::Ordering::Relaxed);
    if answered == 0 {
        return Err(Error::Wrong {
            scenario: "ping-flood",
            detail: "no PING was answered".into(),
        });
    }
    let mut report = report?;
    report.scenario = "ping-flood".into();
    report.subs = answered;
    Ok(report)
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_port_from_urls() {
        assert_eq!(super::host_port("nats://127.0.0.1:4222"), "127.0.0.1:4222");
        assert_eq!(super::host_port("nats://u:p@h:1,nats://h:2"), "h:1");
        assert_eq!(super::host_port("localhost:4222"), "localhost:4222");
    }
}
