//! A real Redis Cluster for one test: six `redis-server`s with
//! `cluster-enabled yes` on free loopback ports (three primaries, a replica
//! each), joined by `redis-cli --cluster create`. Each server runs under
//! the same watchdog as `RedisServer`, so none outlives the test.

use std::process::Command;
use std::time::Duration;

use super::redis::RedisServer;

/// How long a primary may be silent before its replica takes over.
pub const NODE_TIMEOUT_MS: u64 = 1_000;

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    pub port: u16,
    pub primary: bool,
    pub failed: bool,
    /// Slot ranges, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    pub async fn start() -> RedisCluster {
        let mut nodes = Vec::new();
        for _ in 0..6 {
            nodes.push(
                RedisServer::start_cluster_node(&[
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    &NODE_TIMEOUT_MS.to_string(),
                ])
                .await,
            );
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("redis-cli (scripts/test.sh installs it): {e}"));
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok().await;
        cluster.wait_until_replicated().await;
        cluster
    }

    /// Every replica has synced with its primary: one that never did cannot
    /// be promoted, so a failover test needs them all linked.
    async fn wait_until_replicated(&self) {
        super::wait_until(
            Duration::from_secs(20),
            "the cluster's replicas to sync with their primaries",
            async || {
                let unlinked: Vec<u16> = self
                    .nodes
                    .iter()
                    .filter(|n| {
                        let info = Self::cli(n.port(), &["info", "replication"]);
                        !info.contains("role:master") && !info.contains("master_link_status:up")
                    })
                    .map(RedisServer::port)
                    .collect();
                super::done_if(unlinked.is_empty(), unlinked)
            },
        )
        .await;
    }

    /// `redis+cluster://` and every node, the form `storage.redis_url` takes.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// `redis-cli -p <port> <args>` on one live node; its output.
    pub fn cli(port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn live_port(&self) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .map(RedisServer::port)
            .unwrap()
    }

    pub fn topology(&self) -> Vec<Node> {
        Self::cli(self.live_port(), &["cluster", "nodes"])
            .lines()
            .filter_map(parse_node)
            .collect()
    }

    /// Every live node agrees the cluster is up, every slot served.
    pub async fn wait_until_ok(&self) {
        super::wait_until(
            Duration::from_secs(20),
            "the cluster to reach cluster_state:ok",
            async || {
                let not_ok: Vec<u16> = self
                    .nodes
                    .iter()
                    .filter(|n| n.is_running())
                    .filter(|n| {
                        !Self::cli(n.port(), &["cluster", "info"]).contains("cluster_state:ok")
                    })
                    .map(RedisServer::port)
                    .collect();
                super::done_if(not_ok.is_empty(), not_ok)
            },
        )
        .await;
    }

    /// The primary serving `slot`.
    pub fn primary_of(&self, slot: u16) -> Node {
        self.topology()
            .into_iter()
            .find(|n| {
                n.primary && !n.failed && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
            })
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
    }

    /// The server process listening on `port`.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes.iter_mut().find(|n| n.port() == port).unwrap()
    }

    /// Moves one slot, keys and all, from its primary to another: the
    /// resharding step `redis-cli --cluster reshard` takes for each slot.
    pub fn move_slot(&self, slot: u16) -> (Node, Node) {
        let from = self.primary_of(slot);
        let to = self
            .topology()
            .into_iter()
            .find(|n| n.primary && !n.failed && n.id != from.id)
            .unwrap();
        let slot_text = slot.to_string();
        Self::cli(
            to.port,
            &["cluster", "setslot", &slot_text, "importing", &from.id],
        );
        Self::cli(
            from.port,
            &["cluster", "setslot", &slot_text, "migrating", &to.id],
        );
        loop {
            let keys = Self::cli(from.port, &["cluster", "getkeysinslot", &slot_text, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = to.port.to_string();
            let mut args = vec!["migrate", "127.0.0.1", &port, "", "0", "5000", "keys"];
            args.extend(keys);
            let out = Self::cli(from.port, &args);
            assert!(out.contains("OK"), "migrate: {out}");
        }
        for node in self.topology().iter().filter(|n| n.primary && !n.failed) {
            Self::cli(
                node.port,
                &["cluster", "setslot", &slot_text, "node", &to.id],
            );
        }
        (from, to)
    }
}

fn parse_node(line: &str) -> Option<Node> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let address = fields.get(1)?;
    let port = address
        .split(['@', ','])
        .next()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()?;
    let flags = fields.get(2)?;
    let slots = fields
        .iter()
        .skip(8)
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|a| (a, a)),
        })
        .collect();
    Some(Node {
        id: (*fields.first()?).to_owned(),
        port,
        primary: flags.contains("master"),
        failed: flags.contains("fail"),
        slots,
    })
}

/// The Cluster slot of a key: CRC16 of its hash tag (or the whole key) mod 16384.
pub fn slot_of(key: &str) -> u16 {
    let tagged = key
        .find('{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.find('}')
                .filter(|close| *close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16_xmodem(tagged.as_bytes()) % 16_384
}

fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in bytes {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}
