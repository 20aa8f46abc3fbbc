//! What runs when the bench binary is started without `--bench`, i.e. by
//! `cargo test --all-targets`: checks of the pure parts (HTTP parsing, percentiles,
//! configuration text), never a load run.

use anyhow::{Result, ensure};

use crate::http::{Parsed, dechunk, parse, write_counter};
use crate::stats::{self, median, percentiles};

pub fn run() -> Result<()> {
    http_parsing()?;
    statistics()?;
    configuration()?;
    memory_trend()?;
    redis_commands()?;
    first_event()?;
    profile_components()?;
    Ok(())
}

/// Samples go to the most specific component anywhere in their stack: a `write(2)` under a
/// journal append is the journal's, though the handler and the HTTP server are on the stack too.
fn profile_components() -> Result<()> {
    let script = "actix-rt|system\n\tffffffff81baefe0 _copy_from_iter\n\t10aba4 __libc_pwrite\n\
        \t170c570 tollgate::journal::writer::Inner::write_frame\n\
        \te69abb tollgate::pipeline::chat::Dispatch::run::{{closure}}\n\
        \te62001 actix_http::h1::dispatcher::InnerDispatcher<T>::poll_response\n\n\
        actix-rt|system\n\t10aba4 __send\n\te628f5 actix_http::h1::dispatcher::InnerDispatcher<T>::poll_flush\n\
        \te1b0c6 tokio::runtime::task::core::Core<T,S>::poll\n\n\
        tollgate-log\n\tffffffffffffffff [unknown]\n\n\
        actix-rt|system\n\t10aba5 __send\n\te628f5 actix_http::h1::dispatcher::InnerDispatcher<T>::poll_flush\n";
    let components = crate::profile::classify(script);
    let shares: Vec<(&str, u64, u64)> = components
        .iter()
        .map(|c| (c.name.as_str(), c.basis_points, c.kernel_basis_points))
        .collect();
    ensure!(
        shares
            == [
                ("HTTP server (actix-web, its socket I/O)", 5_000, 0),
                ("journal: records (encode, write(2))", 2_500, 2_500),
                // A stack perf could not unwind: its thread says what it is.
                ("logs: JSON lines (format, write)", 2_500, 0),
            ],
        "{shares:?}"
    );
    Ok(())
}

fn redis_commands() -> Result<()> {
    let info = "# Commandstats\r\ncmdstat_evalsha:calls=6,usec=1404,usec_per_call=234.00,rejected_calls=0\r\n\
                cmdstat_ping:calls=18,usec=46,usec_per_call=2.56\r\ncmdstat_info:calls=1,usec=9\r\n";
    let parsed = crate::report::RedisCommands::parse(2, info);
    ensure!(parsed.requests == 2);
    ensure!(
        parsed.commands == [("ping".to_owned(), 18, 2), ("evalsha".to_owned(), 6, 234)],
        "{:?}",
        parsed.commands
    );
    Ok(())
}

/// An SSE answer whose first event comes 30 ms after its head: the stamp must be that late,
/// and the end of the chunked body must still be found.
fn first_event() -> Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await?;
            let mut request = vec![0_u8; 4096];
            let _ = socket.read(&mut request).await?;
            socket
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await?;
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            socket.write_all(b"9\r\ndata: x\n\n\r\n").await?;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            socket.write_all(b"0\r\n\r\n").await?;
            Ok::<_, std::io::Error>(socket)
        });
        let template = crate::http::Template::post(addr, "/", &[], b"{}").streaming();
        let mut conn = crate::http::Conn::new(addr, &template);
        let sent = crate::clock::now();
        let response = conn.exchange(1).await?;
        let done = crate::clock::now();
        let first = response
            .first_data
            .ok_or_else(|| anyhow::anyhow!("the first event was not stamped"))?;
        let first_ms = crate::clock::micros_between(sent, first) / 1000;
        ensure!(
            (30..40).contains(&first_ms),
            "first event after {first_ms} ms"
        );
        ensure!(crate::clock::micros_between(first, done) >= 5_000);
        ensure!(conn.body(&response) == b"data: x\n\n");
        let _ = server.await;
        Ok(())
    })
}

fn memory_trend() -> Result<()> {
    use crate::inflight::slope_per_minute;
    // 1 KiB per second is 60 KiB per minute, whatever the offset.
    let rising: Vec<(u64, u64)> = (0..10).map(|s| (s * 5, 100_000 + s * 5)).collect();
    ensure!(slope_per_minute(&rising) == Some(60));
    let flat: Vec<(u64, u64)> = (0..10).map(|s| (s * 5, 100_000 + s % 2)).collect();
    ensure!(slope_per_minute(&flat) == Some(0));
    ensure!(slope_per_minute(&[(0, 5)]).is_none());
    ensure!(slope_per_minute(&[(3, 5), (3, 9)]).is_none());
    ensure!(crate::inflight::TARGET_KIB == 146_484);
    Ok(())
}

fn http_parsing() -> Result<()> {
    let full = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
    let Ok(Parsed::Complete(response)) = parse(full) else {
        anyhow::bail!("a complete Content-Length response was not recognized");
    };
    ensure!(response.status == 200 && response.len == full.len() && !response.close);
    ensure!(parse(&full[..full.len() - 1]) == Ok(Parsed::Partial));
    ensure!(parse(b"HTTP/1.1 200 OK\r\nContent-Le") == Ok(Parsed::Partial));

    let chunked = b"HTTP/1.1 402 Payment Required\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n";
    let Ok(Parsed::Complete(response)) = parse(chunked) else {
        anyhow::bail!("a complete chunked response was not recognized");
    };
    ensure!(response.status == 402 && response.close && response.chunked);
    ensure!(response.len == chunked.len());
    ensure!(parse(&chunked[..chunked.len() - 2]) == Ok(Parsed::Partial));
    ensure!(dechunk(&chunked[response.head_len..]) == b"hello world");

    ensure!(matches!(
        parse(b"HTTP/1.0 200 OK\r\n\r\nbody"),
        Ok(Parsed::UntilClose { status: 200, .. })
    ));
    ensure!(parse(b"SSH-2.0-x\r\n\r\n").is_err());

    let mut digits = *b"0000000000";
    write_counter(&mut digits, 42);
    ensure!(&digits == b"0000000042");
    Ok(())
}

fn statistics() -> Result<()> {
    let mut samples: Vec<u64> = (1..=1000).rev().collect();
    let p = percentiles(&mut samples).ok_or_else(|| anyhow::anyhow!("no percentiles"))?;
    ensure!((p.p50, p.p95, p.p99, p.p999, p.max) == (500, 950, 990, 999, 1000));
    ensure!(percentiles(&mut []).is_none());
    let one = percentiles(&mut [7]).ok_or_else(|| anyhow::anyhow!("no percentiles"))?;
    ensure!(one.p50 == 7 && one.p999 == 7);
    ensure!(median(&[3, 1, 2]) == Some(2) && median(&[4, 1]) == Some(2) && median(&[]).is_none());
    ensure!(stats::ms(1234) == "1.234" && stats::signed_ms(-50) == "-0.050");
    ensure!(stats::ratio(1, 3).as_deref() == Some("0.33") && stats::ratio(1, 0).is_none());
    ensure!(stats::grouped(48_213) == "48,213" && stats::grouped(999) == "999");
    Ok(())
}

fn configuration() -> Result<()> {
    let upstreams = [crate::config::Upstream {
        provider: "fake0".to_owned(),
        route: "fast".to_owned(),
        port: 9,
    }];
    let extra = [crate::config::ModelRoute {
        route: "stream20x2ms".to_owned(),
        provider: "fake0".to_owned(),
        model: "bench-model+chunks-20+chunk-delay-2ms".to_owned(),
    }];
    let toml = crate::config::gateway_toml(
        8,
        std::path::Path::new("/tmp/x"),
        &upstreams,
        &[],
        None,
        None,
    );
    ensure!(!toml.contains("redis_url"));
    ensure!(!toml.contains("[ledger]"));
    ensure!(toml.contains("database_url = \"sqlite:///tmp/x/tollgate.db?mode=rwc\""));
    ensure!(toml.contains("targets = [\"fake0/bench-model\"]"));
    ensure!(toml.contains("routes = [\"fast\"]"));
    ensure!(!toml.contains("api_key_env"));
    ensure!(toml.contains("\ntpm = ") && toml.contains("\nmonthly_tokens = "));

    let toml = crate::config::gateway_toml(
        8,
        std::path::Path::new("/tmp/x"),
        &upstreams,
        &extra,
        Some("redis://127.0.0.1:7/0"),
        Some("interval"),
    );
    ensure!(toml.contains("[storage]\ndatabase_url = \"sqlite:///tmp/x/tollgate.db?mode=rwc\"\nredis_url = \"redis://127.0.0.1:7/0\"\n"));
    ensure!(toml.contains(
        "[routes.\"stream20x2ms\"]\ntargets = [\"fake0/bench-model+chunks-20+chunk-delay-2ms\"]"
    ));
    ensure!(toml.contains("model = \"bench-model+chunks-20+chunk-delay-2ms\""));
    ensure!(toml.contains("routes = [\"fast\", \"stream20x2ms\"]"));
    let parsed: toml::Value = toml::from_str(&toml)?;
    ensure!(
        parsed
            .get("storage")
            .and_then(|s| s.get("redis_url"))
            .is_some()
    );
    ensure!(
        parsed
            .get("ledger")
            .and_then(|l| l.get("fsync"))
            .and_then(toml::Value::as_str)
            == Some("interval")
    );
    Ok(())
}
