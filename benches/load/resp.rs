//! A minimal Redis client for the harness's readings of its Redis server (`INFO`, `DBSIZE`,
//! `SCAN`): commands go out as RESP arrays over one connection, replies are parsed as RESP2
//! values. It runs between measurements only, never while a cell is timed.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::http::find;

/// One command's answer may take this long; `SCAN` is asked for pages, so none takes long.
const REPLY_LIMIT: Duration = Duration::from_secs(2);
/// Keys asked for per `SCAN` page: about a hundred round trips for 100,000 end users.
const SCAN_PAGE: &str = "1000";

/// A RESP2 value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Error(String),
    Integer(i64),
    /// `None`: the null bulk string.
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

pub struct RedisConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RedisConn {
    pub async fn connect(addr: SocketAddr) -> Result<Self> {
        let stream = tokio::time::timeout(REPLY_LIMIT, TcpStream::connect(addr))
            .await
            .with_context(|| format!("connecting to Redis at {addr} took over {REPLY_LIMIT:?}"))?
            .with_context(|| format!("connecting to Redis at {addr}"))?;
        Ok(Self {
            stream,
            buf: Vec::new(),
        })
    }

    /// Sends one command and reads its reply; an error reply is an error.
    pub async fn call(&mut self, args: &[&str]) -> Result<Reply> {
        let exchange = async {
            self.stream.write_all(&encode(args)).await?;
            self.buf.clear();
            loop {
                match parse(&self.buf) {
                    Ok(Some((reply, _))) => return Ok(reply),
                    Ok(None) => {}
                    Err(reason) => {
                        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, reason));
                    }
                }
                if self.stream.read_buf(&mut self.buf).await? == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "Redis closed the connection mid-reply",
                    ));
                }
            }
        };
        let reply = tokio::time::timeout(REPLY_LIMIT, exchange)
            .await
            .with_context(|| format!("{} took over {REPLY_LIMIT:?}", command_name(args)))?
            .with_context(|| command_name(args))?;
        if let Reply::Error(message) = reply {
            bail!("{} failed: {message}", command_name(args));
        }
        Ok(reply)
    }

    /// The text of `INFO <section>`.
    pub async fn info(&mut self, section: &str) -> Result<String> {
        match self.call(&["INFO", section]).await? {
            Reply::Bulk(Some(text)) => Ok(String::from_utf8_lossy(&text).into_owned()),
            other => bail!("INFO {section} answered {other:?}"),
        }
    }

    /// Keys in the selected database.
    pub async fn dbsize(&mut self) -> Result<u64> {
        match self.call(&["DBSIZE"]).await? {
            Reply::Integer(keys) => u64::try_from(keys).context("DBSIZE was negative"),
            other => bail!("DBSIZE answered {other:?}"),
        }
    }

    /// Distinct keys matching a glob `pattern`, by `SCAN`: it may return a key twice while
    /// Redis rehashes, so the names are counted in a set.
    pub async fn count_keys(&mut self, pattern: &str) -> Result<u64> {
        let mut keys = HashSet::new();
        let mut cursor = "0".to_owned();
        loop {
            let reply = self
                .call(&["SCAN", &cursor, "MATCH", pattern, "COUNT", SCAN_PAGE])
                .await?;
            let (next, page) = scan_page(reply)?;
            keys.extend(page);
            if next == "0" {
                return u64::try_from(keys.len()).context("too many keys");
            }
            cursor = next;
        }
    }
}

fn command_name(args: &[&str]) -> String {
    args.first()
        .copied()
        .unwrap_or("an empty command")
        .to_owned()
}

/// `SCAN`'s reply: the next cursor and the page's keys.
fn scan_page(reply: Reply) -> Result<(String, Vec<Vec<u8>>)> {
    let Reply::Array(parts) = reply else {
        bail!("SCAN answered {reply:?}");
    };
    let mut parts = parts.into_iter();
    let (Some(Reply::Bulk(Some(cursor))), Some(Reply::Array(found))) = (parts.next(), parts.next())
    else {
        bail!("SCAN answered an unexpected shape");
    };
    let keys = found
        .into_iter()
        .filter_map(|key| match key {
            Reply::Bulk(Some(name)) => Some(name),
            _ => None,
        })
        .collect();
    Ok((String::from_utf8_lossy(&cursor).into_owned(), keys))
}

/// A command as a RESP array of bulk strings (any byte may appear in an argument).
pub fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One RESP2 value from the start of `buf` and the bytes it took; `None` until it has all arrived.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(line_end) = find(buf, b"\r\n", 0) else {
        return Ok(None);
    };
    let (Some(kind), Some(line)) = (buf.first(), buf.get(1..line_end)) else {
        return Err("an empty RESP line".to_owned());
    };
    let text = std::str::from_utf8(line).map_err(|_| "a RESP line that is not UTF-8".to_owned())?;
    let number = || {
        text.parse::<i64>()
            .map_err(|_| format!("a bad RESP number {text:?}"))
    };
    let next = line_end + 2;
    match kind {
        b'+' => Ok(Some((Reply::Status(text.to_owned()), next))),
        b'-' => Ok(Some((Reply::Error(text.to_owned()), next))),
        b':' => Ok(Some((Reply::Integer(number()?), next))),
        b'$' => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Some((Reply::Bulk(None), next)));
            };
            Ok(buf
                .get(next..next + len)
                .filter(|_| buf.len() >= next + len + 2)
                .map(|data| (Reply::Bulk(Some(data.to_vec())), next + len + 2)))
        }
        b'*' => {
            let Ok(count) = usize::try_from(number()?) else {
                return Ok(Some((Reply::Array(Vec::new()), next)));
            };
            let mut items = Vec::with_capacity(count.min(1024));
            let mut pos = next;
            for _ in 0..count {
                let Some((item, used)) = parse(buf.get(pos..).unwrap_or_default())? else {
                    return Ok(None);
                };
                items.push(item);
                pos += used;
            }
            Ok(Some((Reply::Array(items), pos)))
        }
        other => Err(format!("an unknown RESP type byte {other:#04x}")),
    }
}

/// A numeric field of an `INFO` text (`used_memory:1234`).
pub fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines().find_map(|line| {
        let (key, value) = line.trim().split_once(':')?;
        (key == name).then(|| value.parse().ok())?
    })
}

/// `INFO <section>` on a connection of its own.
pub async fn info(addr: SocketAddr, section: &str) -> Result<String> {
    RedisConn::connect(addr).await?.info(section).await
}
