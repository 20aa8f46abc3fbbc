//! The bare Rust proxy: actix-web in front, awc behind, as in the gateway, and nothing else (no
//! auth, no governance, no logging), so the gateway's gap to it is what governance costs. The
//! harness runs it as a child process (this binary again, with `SERVE_ARG`) so its CPU time is
//! read from `/proc` like every other side's.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use actix_web::body::{BodyStream, SizedStream};
use actix_web::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use tollgate::config::UpstreamTls;

/// `<this binary> --serve-bare-proxy <listen port> <upstream port> [<CA file>]`: with a CA
/// file the upstream is called over HTTPS trusting it, HTTP/2 offered first as the gateway does.
pub const SERVE_ARG: &str = "--serve-bare-proxy";
/// Like nginx's two workers.
const WORKERS: usize = 2;
/// The gateway's upstream connector settings, so the pools behave alike.
const MAX_CONNECTIONS: usize = 4096;
const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// As nginx's `client_max_body_size`.
const MAX_BODY: usize = 16 << 20;

/// The worker's client and where it sends everything.
struct Upstream {
    client: awc::Client,
    origin: String,
}

/// Serves until SIGTERM when `args` (without the program name) ask for the proxy; `None`
/// otherwise.
pub fn serve_if_asked(args: &[String]) -> Option<ExitCode> {
    let (flag, listen, upstream, ca_file) = match args {
        [flag, listen, upstream] => (flag, listen, upstream, None),
        [flag, listen, upstream, ca_file] => (flag, listen, upstream, Some(ca_file)),
        _ => return None,
    };
    if flag != SERVE_ARG {
        return None;
    }
    let (Ok(listen), Ok(upstream)) = (listen.parse::<u16>(), upstream.parse::<u16>()) else {
        eprintln!("usage: {SERVE_ARG} <listen port> <upstream port> [<CA file>]");
        return Some(ExitCode::FAILURE);
    };
    let tls = match ca_file.map(|ca_file| UpstreamTls::load(ca_file, Path::new(""))) {
        None => None,
        Some(Ok(tls)) => Some(tls),
        Some(Err(error)) => {
            eprintln!("the bare proxy's CA file: {error}");
            return Some(ExitCode::FAILURE);
        }
    };
    let served = actix_web::rt::System::new().block_on(serve(listen, upstream, tls));
    Some(match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("the bare proxy failed: {error}");
            ExitCode::FAILURE
        }
    })
}

async fn serve(listen: u16, upstream: u16, tls: Option<UpstreamTls>) -> std::io::Result<()> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let origin = format!("{scheme}://127.0.0.1:{upstream}");
    HttpServer::new(move || {
        // awc is `!Send`: each worker builds its own client, as the gateway's workers do.
        let mut connector = awc::Connector::new()
            .limit(MAX_CONNECTIONS)
            .conn_keep_alive(KEEP_ALIVE);
        if let Some(tls) = &tls {
            connector = connector.rustls_0_23(tls.config.clone());
        }
        let client = awc::Client::builder()
            .connector(connector)
            .disable_timeout()
            .disable_redirects()
            .finish();
        App::new()
            .app_data(web::Data::new(Upstream {
                client,
                origin: origin.clone(),
            }))
            .app_data(web::PayloadConfig::new(MAX_BODY))
            .default_service(web::to(forward))
    })
    .workers(WORKERS)
    // As in the gateway: an SSE head and its first event are separate writes.
    .tcp_nodelay(true)
    // Nothing is worth waiting for at exit.
    .shutdown_timeout(1)
    .bind(SocketAddr::from(([127, 0, 0, 1], listen)))?
    .run()
    .await
}

/// The request's method, path, content type and body upstream; the answer's status, content
/// type and body back, relayed as it arrives.
async fn forward(
    request: HttpRequest,
    body: web::Bytes,
    upstream: web::Data<Upstream>,
) -> HttpResponse {
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str());
    let mut call = upstream.client.request(
        request.method().clone(),
        format!("{}{path}", upstream.origin),
    );
    if let Some(content_type) = request.headers().get(CONTENT_TYPE) {
        call = call.insert_header((CONTENT_TYPE, content_type.clone()));
    }
    let answer = match call.send_body(body).await {
        Ok(answer) => answer,
        Err(error) => return HttpResponse::BadGateway().body(error.to_string()),
    };
    let mut response = HttpResponse::build(answer.status());
    if let Some(content_type) = answer.headers().get(CONTENT_TYPE) {
        response.insert_header((CONTENT_TYPE, content_type.clone()));
    }
    let length = answer
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    // A known length is passed on (as nginx does), so only streams are sent chunked.
    match length {
        Some(length) => response.body(SizedStream::new(length, answer)),
        None => response.body(BodyStream::new(answer)),
    }
}
