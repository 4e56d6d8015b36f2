//! A network of its own for each server, so that partitions can cut it
//! off: one network namespace per server (`ip netns`), joined by a veth
//! pair to a bridge in the campaign's namespace, and an nftables table in
//! each server's namespace that drops what a partition says it must not
//! hear. Needs root, iproute2 and Debian's nftables; without them the
//! servers run on loopback and partitions are left out.

use std::io::Write;
use std::process::{Command, Stdio};

/// The namespaces, bridge and addresses of one campaign's servers.
pub struct Net {
    /// Distinguishes this campaign's interfaces and namespaces from
    /// another's running at the same time.
    tag: u32,
    servers: usize,
}

/// Why partitions cannot be made here, if they cannot.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("network namespaces need root".into());
    }
    for tool in ["ip", "nft"] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Some(format!(
                "`{tool}` is missing (Debian's iproute2 and nftables)"
            ));
        }
    }
    // Root may still lack the capability (a container): try one.
    let probe = format!("chaos-probe-{}", std::process::id());
    if let Err(e) = run(&["ip", "netns", "add", &probe]) {
        return Some(format!("cannot make a network namespace: {e}"));
    }
    let made = run(&["ip", "netns", "exec", &probe, "nft", "list", "ruleset"]);
    let _ = run(&["ip", "netns", "del", &probe]);
    made.err()
        .map(|e| format!("nftables does not run in a namespace: {e}"))
}

fn run(args: &[&str]) -> std::io::Result<()> {
    let out = Command::new(args[0]).args(&args[1..]).output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

impl Net {
    /// Makes the bridge and one namespace per server.
    pub fn create(servers: usize) -> std::io::Result<Net> {
        let tag = std::process::id() % 200 + 20;
        let net = Net { tag, servers };
        // Left over from a campaign that died with this tag.
        net.remove();
        let bridge = net.bridge();
        run(&["ip", "link", "add", &bridge, "type", "bridge"])?;
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", net.gateway()),
            "dev",
            &bridge,
        ])?;
        run(&["ip", "link", "set", &bridge, "up"])?;
        for i in 0..servers {
            let ns = net.namespace(i);
            let veth = format!("chv{tag}s{i}");
            run(&["ip", "netns", "add", &ns])?;
            run(&[
                "ip", "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            run(&["ip", "link", "set", &veth, "master", &bridge, "up"])?;
            let addr = format!("{}/24", net.host(i));
            run(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn bridge(&self) -> String {
        format!("chbr{}", self.tag)
    }

    fn gateway(&self) -> String {
        format!("10.77.{}.1", self.tag)
    }

    /// Server `i`'s namespace.
    pub fn namespace(&self, i: usize) -> String {
        format!("chaos{}-s{i}", self.tag)
    }

    /// Server `i`'s address.
    pub fn host(&self, i: usize) -> String {
        format!("10.77.{}.{}", self.tag, 10 + i)
    }

    /// Server `i` hears nothing from the servers in `from` (one way: what
    /// `i` sends still arrives). Replaces what `i` was cut off from.
    pub fn deafen(&self, i: usize, from: &[usize]) -> std::io::Result<()> {
        let ns = self.namespace(i);
        let _ = run(&[
            "ip", "netns", "exec", &ns, "nft", "delete", "table", "inet", "chaos",
        ]);
        if from.is_empty() {
            return Ok(());
        }
        let sources: Vec<String> = from.iter().map(|&j| self.host(j)).collect();
        let rules = format!(
            "table inet chaos {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    ip saddr {{ {} }} drop\n  }}\n}}\n",
            sources.join(", ")
        );
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        nft.stdin
            .take()
            .expect("stdin")
            .write_all(rules.as_bytes())?;
        let out = nft.wait_with_output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "nft in {ns}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Every server hears every other again.
    pub fn heal(&self) {
        for i in 0..self.servers {
            let _ = self.deafen(i, &[]);
        }
    }

    fn remove(&self) {
        for i in 0..5 {
            let _ = run(&["ip", "netns", "del", &self.namespace(i)]);
        }
        let _ = run(&["ip", "link", "del", &self.bridge()]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A partition: for each server, the servers it does not hear.
pub type Cut = Vec<Vec<usize>>;

/// The shapes of partition a campaign makes, as Jepsen's nemesis does.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// A minority and a majority that do not hear each other.
    Halves,
    /// Two sides that do not hear each other, and one server that hears
    /// both.
    Bridge,
    /// One server hears nobody, while everybody hears it.
    Deaf,
}

impl Shape {
    pub const ALL: [Shape; 3] = [Shape::Halves, Shape::Bridge, Shape::Deaf];

    pub fn name(self) -> &'static str {
        match self {
            Shape::Halves => "majority/minority",
            Shape::Bridge => "bridge",
            Shape::Deaf => "asymmetric",
        }
    }

    /// The cut for servers in the order `order` (a seeded shuffle of
    /// `0..n`).
    pub fn cut(self, order: &[usize]) -> Cut {
        let n = order.len();
        let mut cut = vec![Vec::new(); n];
        let mut apart = |a: &[usize], b: &[usize]| {
            for &x in a {
                for &y in b {
                    cut[x].push(y);
                    cut[y].push(x);
                }
            }
        };
        match self {
            Shape::Halves => {
                let (minority, majority) = order.split_at((n - 1) / 2);
                apart(minority, majority);
            }
            Shape::Bridge => {
                // order[0] bridges; the rest split in two.
                let rest = &order[1..];
                let (left, right) = rest.split_at(rest.len() / 2);
                apart(left, right);
            }
            Shape::Deaf => {
                cut[order[0]] = order[1..].to_vec();
            }
        }
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_cut_as_named() {
        let order = [2, 0, 1];
        // Halves of three: {2} against {0, 1}.
        assert_eq!(
            Shape::Halves.cut(&order),
            vec![vec![2], vec![2], vec![0, 1]]
        );
        // Bridge of three: 2 hears both, 0 and 1 not each other.
        assert_eq!(Shape::Bridge.cut(&order), vec![vec![1], vec![0], vec![]]);
        assert_eq!(Shape::Deaf.cut(&order), vec![vec![], vec![], vec![0, 1]]);
        let five = [4, 3, 2, 1, 0];
        let halves = Shape::Halves.cut(&five);
        assert_eq!(halves[4], vec![2, 1, 0]);
        assert_eq!(halves[0], vec![4, 3]);
        let bridge = Shape::Bridge.cut(&five);
        assert!(bridge[4].is_empty());
        assert_eq!(bridge[3], vec![1, 0]);
    }
}
