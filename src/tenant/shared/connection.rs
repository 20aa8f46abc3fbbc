//! Where the shared store's calls go: one Redis server, through the pool's
//! multiplexed connections, or a Redis Cluster (`redis+cluster://host:port,
//! host:port,…`), through one cluster connection that routes each call by
//! its first key's slot, follows `MOVED` and `ASK`, and reloads the slot map
//! when a node fails or a slot moves. Every key of a tenant carries the
//! tenant's hash tag, so each script's keys are in one slot.

use std::time::Duration;

use deadpool_redis::{Pool, PoolConfig, Runtime, Timeouts};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo, SingleNodeRoutingInfo,
};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// The scheme of a cluster's `storage.redis_url`: its nodes follow, comma-separated.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

pub enum Backend {
    Single(Pool),
    Cluster(Box<ClusterClient>),
}

/// One connection of either kind; clones share it.
#[derive(Clone)]
pub enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Backend {
    /// Reads the URL; nothing connects until the first call.
    pub fn open(url: &str, pool_size: usize, timeout: Duration) -> Result<Backend, String> {
        if let Some(nodes) = url.strip_prefix(CLUSTER_SCHEME) {
            return cluster(nodes, timeout).map(|client| Backend::Cluster(Box::new(client)));
        }
        let mut config = deadpool_redis::Config::from_url(url);
        let mut pool = PoolConfig::new(pool_size.max(1));
        pool.timeouts = Timeouts {
            wait: Some(timeout),
            create: Some(timeout),
            recycle: Some(timeout),
        };
        config.pool = Some(pool);
        config
            .create_pool(Some(Runtime::Tokio1))
            .map(Backend::Single)
            .map_err(|e| format!("storage.redis_url: {e}"))
    }

    /// A connection: the pool's, or a new cluster connection (which learns the slot map).
    pub async fn connect(&self) -> Result<Conn, String> {
        match self {
            Backend::Single(pool) => {
                let pooled = pool.get().await.map_err(|e| e.to_string())?;
                Ok(Conn::Single(deadpool_redis::Connection::take(pooled)))
            }
            Backend::Cluster(client) => client
                .get_async_connection()
                .await
                .map(Conn::Cluster)
                .map_err(|e| e.to_string()),
        }
    }
}

fn cluster(nodes: &str, timeout: Duration) -> Result<ClusterClient, String> {
    let nodes: Vec<String> = nodes
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| format!("redis://{n}"))
        .collect();
    if nodes.is_empty() {
        return Err(format!(
            "storage.redis_url: `{CLUSTER_SCHEME}` names no node (host:port,host:port,…)"
        ));
    }
    ClusterClient::builder(nodes)
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .build()
        .map_err(|e| format!("storage.redis_url: {e}"))
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// A primary of a cluster, by address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Primary {
    pub host: String,
    pub port: u16,
}

impl Conn {
    /// PING: on a cluster, every primary serving slots must answer (a dead
    /// replica does not matter; a primary not yet replaced does).
    pub async fn ping(&mut self) -> RedisResult<()> {
        let ping = redis::cmd("PING");
        match self {
            Conn::Single(conn) => ping.query_async::<()>(conn).await,
            Conn::Cluster(conn) => {
                let routing = RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::AllSucceeded),
                ));
                conn.route_command(&ping, routing).await.map(|_| ())
            }
        }
    }

    /// The primaries serving slots now (none on a single server): where a
    /// keyspace-wide command (`SCAN`) must run, each on its own.
    pub async fn primaries(&mut self) -> RedisResult<Vec<Primary>> {
        let Conn::Cluster(conn) = self else {
            return Ok(Vec::new());
        };
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let nodes = conn
            .route_command(redis::cmd("CLUSTER").arg("NODES"), routing)
            .await?;
        let text: String = redis::from_redis_value(&nodes)?;
        Ok(parse_primaries(&text))
    }

    /// `cmd` on one node (a cluster's primary), or on the server.
    pub async fn on_node<T: redis::FromRedisValue>(
        &mut self,
        node: Option<&Primary>,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match (self, node) {
            (Conn::Cluster(conn), Some(node)) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: node.host.clone(),
                    port: node.port,
                });
                let value = conn.route_command(cmd, routing).await?;
                redis::from_redis_value(&value)
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }
}

/// The primaries of `CLUSTER NODES` that serve slots and are not failing.
fn parse_primaries(text: &str) -> Vec<Primary> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let serves_slots = fields.len() > 8;
            if !flags.contains("master") || flags.contains("fail") || !serves_slots {
                return None;
            }
            let address = fields.get(1)?.split(['@', ',']).next()?;
            let (host, port) = address.rsplit_once(':')?;
            Some(Primary {
                host: host.to_owned(),
                port: port.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primaries_serving_slots_are_read_from_cluster_nodes() {
        let nodes = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1 4 connected
67ed 127.0.0.1:30002@40002 master - 0 1 2 connected 5461-10922
292f 127.0.0.1:30003@40003 master,fail - 0 1 3 disconnected
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460
9a11 127.0.0.1:30006@40006 master - 0 1 7 connected 10923-16383 [5000->-e7d1]
";
        let ports: Vec<u16> = parse_primaries(nodes).iter().map(|p| p.port).collect();
        assert_eq!(ports, [30002, 30001, 30006]);
    }

    #[test]
    fn a_cluster_url_names_its_nodes() {
        let timeout = Duration::from_millis(100);
        assert!(matches!(
            Backend::open("redis+cluster://127.0.0.1:7000,127.0.0.1:7001", 1, timeout),
            Ok(Backend::Cluster(_))
        ));
        let empty = Backend::open("redis+cluster://", 1, timeout).err().unwrap();
        assert!(empty.contains("names no node"), "{empty}");
    }
}
