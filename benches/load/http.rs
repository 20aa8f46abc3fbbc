//! A minimal HTTP/1.1 client over one keep-alive TCP connection, written for the load
//! generator: the request bytes are built once per connection and only a fixed-width decimal
//! counter is patched in per request (so every prompt is distinct and no content-hash cache can
//! hide the tokenizer's cost), plus, in a cycling template, a second numbered slot that names one
//! of a fixed number of end users; the response is parsed just far enough to know its status and
//! where it ends (`Content-Length` or chunked). A streaming template also notes when the first
//! SSE `data:` line of the body arrived (time to first token).

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::clock::now;

/// Put this marker in a request body; its ten zeros are replaced by each request's number.
pub const COUNTER_MARK: &str = "REQ-0000000000";
const COUNTER_DIGITS: usize = 10;
/// Put this marker in a header value of a cycling template; its six zeros are replaced by each
/// request's number modulo the cycle (so up to a million distinct values).
pub const SLOT_MARK: &str = "EU-000000";
const SLOT_DIGITS: usize = 6;
const READ_RESERVE: usize = 16 * 1024;
const SSE_DATA: &[u8] = b"data:";

/// The bytes of one request, with the position of its counter digits.
#[derive(Debug, Clone)]
pub struct Template {
    bytes: Vec<u8>,
    counter_at: Option<usize>,
    /// A cycling template's second slot.
    slot: Option<Slot>,
    /// Watch the body for its first SSE event.
    stream: bool,
    /// A header line whose answers the generator counts apart (`marking`).
    mark: Option<Vec<u8>>,
}

/// Digits in the request head that take the request's number modulo `cycle`: consecutive
/// requests name `cycle` distinct values in turn.
#[derive(Debug, Clone, Copy)]
struct Slot {
    at: usize,
    cycle: u64,
}

impl Template {
    pub fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Self {
        let mut bytes = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        )
        .into_bytes();
        for (name, value) in headers {
            bytes.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        bytes.extend_from_slice(b"\r\n");
        bytes.extend_from_slice(body);
        let counter_at = find(&bytes, COUNTER_MARK.as_bytes(), 0)
            .map(|at| at + COUNTER_MARK.len() - COUNTER_DIGITS);
        Self {
            bytes,
            counter_at,
            slot: None,
            stream: false,
            mark: None,
        }
    }

    /// The same request with the `SLOT_MARK` of its head (a header value) cycling through
    /// `cycle` values; `None` when the head has no mark or the cycle needs more digits than it has.
    pub fn cycling(mut self, cycle: u64) -> Option<Self> {
        let head_end = find(&self.bytes, b"\r\n\r\n", 0)?;
        let at = find(self.bytes.get(..head_end)?, SLOT_MARK.as_bytes(), 0)?;
        let fits = u32::try_from(SLOT_DIGITS)
            .ok()
            .and_then(|digits| 10_u64.checked_pow(digits))
            .is_some_and(|values| (1..=values).contains(&cycle));
        if !fits {
            return None;
        }
        self.slot = Some(Slot {
            at: at + SLOT_MARK.len() - SLOT_DIGITS,
            cycle,
        });
        Some(self)
    }

    /// Writes request number `id` into the counter and, in a cycling template, the slot.
    pub fn number(&mut self, id: u64) {
        if let Some(at) = self.counter_at
            && let Some(digits) = self.bytes.get_mut(at..at + COUNTER_DIGITS)
        {
            write_counter(digits, id);
        }
        // Fixed templates (every cell but the end users') pay this one branch.
        if let Some(slot) = self.slot
            && let Some(digits) = self.bytes.get_mut(slot.at..slot.at + SLOT_DIGITS)
        {
            write_counter(digits, id % slot.cycle);
        }
    }

    /// The request's bytes as they stand.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The same request, answered with an SSE stream whose first event is timed.
    pub fn streaming(mut self) -> Self {
        self.stream = true;
        self
    }

    /// The same request; answers whose head carries `line` (`x-tollgate-provider: b`, say)
    /// are counted apart by the generator.
    pub fn marking(mut self, line: &str) -> Self {
        self.mark = Some(line.as_bytes().to_vec());
        self
    }

    pub fn get(addr: SocketAddr, path: &str) -> Self {
        let bytes = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes();
        Self {
            bytes,
            counter_at: None,
            slot: None,
            stream: false,
            mark: None,
        }
    }
}

/// Where one response sits in the connection's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The server will close the connection after this response.
    pub close: bool,
    pub chunked: bool,
    pub head_len: usize,
    /// Head and body.
    pub len: usize,
    /// Streaming templates only: when the first SSE `data:` line of the body arrived.
    pub first_data: Option<Instant>,
}

/// One keep-alive connection that reconnects lazily (after `Connection: close`, an error, or a
/// server that closed it while idle).
pub struct Conn {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    /// This connection's own copy, numbered in place for each request.
    request: Template,
    buf: Vec<u8>,
    served: u64,
}

impl Conn {
    pub fn new(addr: SocketAddr, template: &Template) -> Self {
        Self {
            addr,
            stream: None,
            request: template.clone(),
            buf: Vec::with_capacity(READ_RESERVE),
            served: 0,
        }
    }

    /// Opens the TCP connection now rather than on the first request.
    pub async fn connect(&mut self) -> io::Result<()> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.addr).await?;
            stream.set_nodelay(true)?;
            self.stream = Some(stream);
            self.served = 0;
        }
        Ok(())
    }

    /// Sends the request numbered `id` and reads its whole response. A reused connection that
    /// the server closed while it was idle is retried once on a fresh one, like any HTTP client.
    pub async fn exchange(&mut self, id: u64) -> io::Result<Response> {
        self.request.number(id);
        let reused = self.stream.is_some() && self.served > 0;
        match self.attempt().await {
            Ok(response) => Ok(response),
            Err(error) if reused && self.buf.is_empty() && is_stale(&error) => {
                self.stream = None;
                self.attempt().await.inspect_err(|_| self.stream = None)
            }
            Err(error) => {
                self.stream = None;
                Err(error)
            }
        }
    }

    async fn attempt(&mut self) -> io::Result<Response> {
        self.connect().await?;
        self.buf.clear();
        let stream = self
            .stream
            .as_mut()
            .ok_or_else(|| io::Error::other("no connection after connect"))?;
        stream.write_all(&self.request.bytes).await?;
        let response = read_response(stream, &mut self.buf, self.request.stream).await?;
        self.served += 1;
        if response.close {
            self.stream = None;
        }
        Ok(response)
    }

    /// The response head as text (status line and headers).
    pub fn head(&self, response: &Response) -> String {
        String::from_utf8_lossy(self.buf.get(..response.head_len).unwrap_or_default()).into_owned()
    }

    /// Whether the response head carries `line` (a `name: value` header line, compared
    /// without regard to case).
    pub fn head_has(&self, response: &Response, line: &[u8]) -> bool {
        self.buf
            .get(..response.head_len)
            .is_some_and(|head| contains_ignore_case(head, line))
    }

    /// Whether the last bytes of the raw body (the chunked framing included) hold `needle`:
    /// a stream that ended with its `[DONE]` event, say.
    pub fn body_ends_with(&self, response: &Response, needle: &[u8]) -> bool {
        let end = response.len;
        let start = end.saturating_sub(needle.len() + 64).max(response.head_len);
        self.buf
            .get(start..end)
            .is_some_and(|tail| find(tail, needle, 0).is_some())
    }

    /// Puts `raw` in the buffer as if it had been read (the self-checks' answers).
    pub fn load_for_check(&mut self, raw: &[u8]) {
        self.buf.clear();
        self.buf.extend_from_slice(raw);
    }

    /// Whether the answer carries the template's mark (`Template::marking`).
    pub fn marked(&self, response: &Response) -> bool {
        self.request
            .mark
            .as_deref()
            .is_some_and(|line| self.head_has(response, line))
    }

    /// The response body, de-chunked.
    pub fn body(&self, response: &Response) -> Vec<u8> {
        let raw = self
            .buf
            .get(response.head_len..response.len)
            .unwrap_or_default();
        if response.chunked {
            dechunk(raw)
        } else {
            raw.to_vec()
        }
    }
}

fn is_stale(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
    )
}

/// Writes `value` as zero-padded decimal into `digits` (the lowest digits when it is too long).
pub fn write_counter(digits: &mut [u8], mut value: u64) {
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + u8::try_from(value % 10).unwrap_or(0);
        value /= 10;
    }
}

async fn read_response(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    watch_data: bool,
) -> io::Result<Response> {
    let mut first_data = None;
    // Where the search for `data:` resumes: everything before it has been searched already.
    let mut searched = None;
    loop {
        buf.reserve(READ_RESERVE);
        let read = stream.read_buf(buf).await?;
        // Stamped right after the read that brought it, before any parsing.
        if watch_data && first_data.is_none() && read > 0 {
            let arrived = now();
            let from = searched.or_else(|| find(buf, b"\r\n\r\n", 0).map(|end| end + 4));
            if let Some(from) = from {
                if find(buf, SSE_DATA, from).is_some() {
                    first_data = Some(arrived);
                } else {
                    searched = Some(buf.len().saturating_sub(SSE_DATA.len()).max(from));
                }
            }
        }
        if read == 0 {
            if let Ok(Parsed::UntilClose { status, head_len }) = parse(buf) {
                return Ok(Response {
                    status,
                    close: true,
                    chunked: false,
                    head_len,
                    len: buf.len(),
                    first_data,
                });
            }
            let what = if buf.is_empty() {
                "the server closed the connection before answering"
            } else {
                "the server closed the connection mid-response"
            };
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, what));
        }
        match parse(buf) {
            Ok(Parsed::Complete(response)) => {
                return Ok(Response {
                    first_data,
                    ..response
                });
            }
            Ok(Parsed::Partial | Parsed::UntilClose { .. }) => {}
            Err(reason) => return Err(io::Error::new(io::ErrorKind::InvalidData, reason)),
        }
    }
}

/// How far a response has arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    Partial,
    Complete(Response),
    /// No length given: the body ends when the server closes the connection.
    UntilClose {
        status: u16,
        head_len: usize,
    },
}

pub fn parse(buf: &[u8]) -> Result<Parsed, String> {
    let Some(head_end) = find(buf, b"\r\n\r\n", 0) else {
        return Ok(Parsed::Partial);
    };
    let head_len = head_end + 4;
    let mut lines = buf[..head_end].split(|byte| *byte == b'\n').map(trim);
    let status_line = lines.next().unwrap_or_default();
    if !status_line.starts_with(b"HTTP/1.") {
        return Err(format!(
            "not an HTTP/1.x response: {:?}",
            String::from_utf8_lossy(status_line)
        ));
    }
    let status = status_line
        .get(9..12)
        .and_then(|digits| std::str::from_utf8(digits).ok())
        .and_then(|digits| digits.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {:?}", String::from_utf8_lossy(status_line)))?;
    let mut close = status_line.starts_with(b"HTTP/1.0");
    let mut content_length = None;
    let mut chunked = false;
    for line in lines {
        let Some(colon) = line.iter().position(|byte| *byte == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
        if name.eq_ignore_ascii_case(b"content-length") {
            let length = std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.parse::<usize>().ok())
                .ok_or("bad Content-Length")?;
            content_length = Some(length);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = contains_ignore_case(value, b"chunked");
        } else if name.eq_ignore_ascii_case(b"connection") {
            if contains_ignore_case(value, b"close") {
                close = true;
            } else if contains_ignore_case(value, b"keep-alive") {
                close = false;
            }
        }
    }
    let response = |len| Response {
        status,
        close,
        chunked,
        head_len,
        len,
        first_data: None,
    };
    if status / 100 == 1 || status == 204 || status == 304 {
        return Ok(Parsed::Complete(response(head_len)));
    }
    if chunked {
        return Ok(chunked_end(buf, head_len)?
            .map_or(Parsed::Partial, |end| Parsed::Complete(response(end))));
    }
    match content_length {
        Some(length) if buf.len() >= head_len + length => {
            Ok(Parsed::Complete(response(head_len + length)))
        }
        Some(_) => Ok(Parsed::Partial),
        None => Ok(Parsed::UntilClose { status, head_len }),
    }
}

/// The end of a chunked body that starts at `pos`, once it has fully arrived.
fn chunked_end(buf: &[u8], mut pos: usize) -> Result<Option<usize>, String> {
    loop {
        let Some(line_end) = find(buf, b"\r\n", pos) else {
            return Ok(None);
        };
        let size = chunk_size(&buf[pos..line_end])?;
        pos = line_end + 2;
        if size == 0 {
            // Optional trailers, then an empty line.
            loop {
                let Some(end) = find(buf, b"\r\n", pos) else {
                    return Ok(None);
                };
                if end == pos {
                    return Ok(Some(pos + 2));
                }
                pos = end + 2;
            }
        }
        let next = pos + size + 2;
        if buf.len() < next {
            return Ok(None);
        }
        pos = next;
    }
}

fn chunk_size(line: &[u8]) -> Result<usize, String> {
    let digits = line.split(|byte| *byte == b';').next().unwrap_or_default();
    std::str::from_utf8(trim(digits))
        .ok()
        .and_then(|text| usize::from_str_radix(text, 16).ok())
        .ok_or_else(|| format!("bad chunk size {:?}", String::from_utf8_lossy(line)))
}

/// The data of a complete chunked body.
pub fn dechunk(raw: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    let mut pos = 0;
    while let Some(line_end) = find(raw, b"\r\n", pos) {
        let Ok(size) = chunk_size(&raw[pos..line_end]) else {
            break;
        };
        let start = line_end + 2;
        if size == 0 || raw.len() < start + size {
            break;
        }
        data.extend_from_slice(&raw[start..start + size]);
        pos = start + size + 2;
    }
    data
}

pub fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|window| window == needle)
        .map(|at| at + from)
}

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window.eq_ignore_ascii_case(needle))
}
