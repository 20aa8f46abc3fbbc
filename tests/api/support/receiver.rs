//! A usage receiver on a loopback port that misbehaves on a script: it
//! drops the connection, records a request and then answers too late or
//! with a 500, and answers some in time. What it recorded is every request
//! it may have acted on, duplicates included, as a billing system would
//! have seen them before de-duplicating by key.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the receiver does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Closes the connection once the request's headers are in: nothing recorded.
    Drop,
    /// Records the request, then answers 200 after this long (past the
    /// sender's timeout it never reads the answer: a slow receiver otherwise).
    RecordThenDelay(Duration),
    /// Records the request and answers 500.
    RecordThen500,
    /// Records the request and answers 200.
    Ok,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub content_type: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    requests: usize,
    recorded: Vec<Received>,
}

pub struct FlakyReceiver {
    pub url: String,
    state: Arc<Mutex<State>>,
    task: actix_rt::task::JoinHandle<()>,
}

impl Drop for FlakyReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FlakyReceiver {
    /// Listens on a free loopback port; the n-th request gets `script[n % len]`.
    pub async fn start(script: Vec<Answer>) -> FlakyReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/ingest", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = actix_rt::spawn(async move {
            let script: Arc<[Answer]> = script.into();
            while let Ok((stream, _)) = listener.accept().await {
                actix_rt::spawn(serve(stream, shared.clone(), script.clone()));
            }
        });
        FlakyReceiver { url, state, task }
    }

    /// Every request recorded so far, in arrival order.
    pub fn recorded(&self) -> Vec<Received> {
        self.state.lock().unwrap().recorded.clone()
    }
}

/// Serves one connection's requests (the sender keeps connections alive).
async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>, script: Arc<[Answer]>) {
    while let Some(request) = read_request(&mut stream).await {
        let answer = {
            let mut state = state.lock().unwrap();
            let answer = script[state.requests % script.len()];
            state.requests += 1;
            if answer != Answer::Drop {
                state.recorded.push(request);
            }
            answer
        };
        let status = match answer {
            Answer::Drop => return,
            Answer::RecordThenDelay(delay) => {
                actix_rt::time::sleep(delay).await;
                "200 OK"
            }
            Answer::RecordThen500 => "500 Internal Server Error",
            Answer::Ok => "200 OK",
        };
        let reply = format!("HTTP/1.1 {status}\r\ncontent-length: 2\r\n\r\n{{}}");
        if stream.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let mut buffer = Vec::new();
    let mut chunk = [0_u8; 8192];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let headers: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let content_type = headers
        .iter()
        .find(|(n, _)| n == "content-type")
        .map_or_else(String::new, |(_, v)| v.clone());
    Some(Received {
        content_type,
        headers,
        body,
    })
}

/// A form body's fields, decoded (`+` and `%XX`).
pub fn form_fields(body: &[u8]) -> Vec<(String, String)> {
    let decode = |text: &str| {
        let bytes = text.replace('+', " ").into_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' && i + 2 < bytes.len() {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    };
    std::str::from_utf8(body)
        .unwrap()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect()
}
