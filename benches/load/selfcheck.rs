//! What runs when the bench binary is started without `--bench`, i.e. by
//! `cargo test --all-targets`: checks of the pure parts (HTTP parsing, percentiles,
//! configuration text, Redis replies, the report's end-user rows and bare-proxy target) and of the generator against
//! a loopback listener, never a load run.

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
    cycling_template()?;
    end_user_wave()?;
    redis_replies()?;
    end_user_report()?;
    reference_targets()?;
    relay_cost_target()?;
    shape_checks()?;
    Ok(())
}

/// The isolation verdict, the marked header, the faults' configuration and the capacity block.
fn shape_checks() -> Result<()> {
    isolation_verdict()?;
    marked_answers()?;
    capacity_block()?;
    Ok(())
}

/// A small tenant moved when the flood's median added p99 differs from the calm one by more
/// than either phase's spread over the runs; one run is not judged.
fn isolation_verdict() -> Result<()> {
    use crate::isolation::{Phase, PhaseRun, TenantRun, verdict};
    let p99 = |us| stats::Percentiles {
        p50: us,
        p95: us,
        p99: us,
        p999: us,
        max: us,
        count: 100,
    };
    let phase = |number, phase, us| PhaseRun {
        number,
        phase,
        tenants: vec![TenantRun {
            tenant: "small",
            rate: 60,
            ok: 100,
            rate_limited: 0,
            errors: 0,
            first_error: None,
            latency_us: Some(p99(us)),
        }],
    };
    // Direct 10 ms; calm adds 1.0 and 1.4 ms; the flood adds 1.2 and 1.3 ms: within noise.
    let calm = [
        phase(1, Phase::Direct, 10_000),
        phase(1, Phase::Calm, 11_000),
        phase(1, Phase::Flood, 11_200),
        phase(2, Phase::Direct, 10_000),
        phase(2, Phase::Calm, 11_400),
        phase(2, Phase::Flood, 11_300),
    ];
    let v = verdict("small", &calm);
    ensure!(v.calm_added_p99_us == [1_000, 1_400], "{v:?}");
    ensure!(v.noise_us == Some(400) && v.moved == Some(false), "{v:?}");
    // The flood adds 5 ms: moved.
    let flooded = [
        phase(1, Phase::Direct, 10_000),
        phase(1, Phase::Calm, 11_000),
        phase(1, Phase::Flood, 15_000),
        phase(2, Phase::Direct, 10_000),
        phase(2, Phase::Calm, 11_400),
        phase(2, Phase::Flood, 15_200),
    ];
    ensure!(verdict("small", &flooded).moved == Some(true));
    ensure!(verdict("small", &flooded[..3]).moved.is_none());
    Ok(())
}

/// An answer whose head carries the template's mark, in any case, is counted apart.
fn marked_answers() -> Result<()> {
    use crate::http::Template;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    let template = Template::post(addr, "/", &[], b"{}").marking("x-tollgate-provider: fake0");
    let mut conn = crate::http::Conn::new(addr, &template);
    let raw = b"HTTP/1.1 200 OK\r\nX-Tollgate-Provider: fake0\r\ncontent-length: 2\r\n\r\nok";
    let Ok(Parsed::Complete(response)) = parse(raw) else {
        anyhow::bail!("the marked answer did not parse");
    };
    conn.load_for_check(raw);
    ensure!(conn.marked(&response));
    let other = b"HTTP/1.1 200 OK\r\nX-Tollgate-Provider: faulty\r\ncontent-length: 2\r\n\r\nok";
    let Ok(Parsed::Complete(response)) = parse(other) else {
        anyhow::bail!("the unmarked answer did not parse");
    };
    conn.load_for_check(other);
    ensure!(!conn.marked(&response));
    Ok(())
}

/// The block replaces what lies between the markers and nothing else; a results file without
/// a figure says so instead of keeping an old one.
fn capacity_block() -> Result<()> {
    use crate::capacity::{BEGIN, END, render, replace_block};
    let readme = format!("# Ops\n\n{BEGIN}\n38 commands, not yet flat\n{END}\n\nAfter.\n");
    let replaced = replace_block(&readme, "New figures.")?;
    ensure!(replaced == format!("# Ops\n\n{BEGIN}\nNew figures.\n{END}\n\nAfter.\n"));
    ensure!(replace_block("no markers", "x").is_err());
    // A full run ends by writing deploy/README's block: its markers must be there.
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/README.md");
    replace_block(&std::fs::read_to_string(deploy)?, "x")?;
    let empty = render(&serde_json::json!({"machine": {"date": "2026-12-07", "cpus": 2}}));
    ensure!(empty.contains("2026-12-07") && empty.contains("n/a: not measured in that run"));
    ensure!(
        empty.lines().all(|line| line.chars().count() <= 76),
        "{empty}"
    );
    ensure!(!empty.contains("38 commands"));
    let results = serde_json::json!({
        "machine": {"date": "d", "cpus": 2},
        "cells": [{"mode": {"kind": "plain"}, "shape": {"kind": "closed", "conns": 64},
                   "scenario": "short", "delay_ms": 0,
                   "summary": [{"target": "gateway", "rps": 4000,
                                "cpu_us_per_request": {"gateway": 250}}]}],
        "redis_commands": {"requests": 10, "commands": [["hincrby", 150, 1], ["evalsha", 20, 30]]},
        "shape": {"scale": {"calls": 10000, "kib_per_call": 18, "kib_per_call_beyond_bare": 9,
                            "peak_fds": 20100, "flat": false, "late_flat": true,
                            "gateway": {"seconds": 600, "ok": 5, "errors": 0, "incomplete": 0, "unfinished": 0},
                            "open_files": {"too_low": null}}},
    });
    let block = render(&results);
    ensure!(block.contains("**250 µs of CPU per call**"), "{block}");
    ensure!(
        block.contains("**4,000 calls/s flat out, 2,800 calls/s"),
        "{block}"
    );
    ensure!(block.contains("**17 commands per call**"), "{block}");
    let unwrapped = block.replace('\n', " ");
    ensure!(
        unwrapped.contains("**18 KiB per call in flight**"),
        "{block}"
    );
    ensure!(
        unwrapped.contains("9 KiB of it beyond what the bare actix-web proxy needs"),
        "{block}"
    );
    ensure!(
        unwrapped.contains("every stream completed; memory rising in the first minutes, then flat"),
        "{block}"
    );
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
        settings: None,
        price_lines: None,
        fallback: None,
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
    // Every end user's template: a budget and an rpm that run on every call and never refuse.
    let end_user = parsed
        .get("tiers")
        .and_then(|t| t.get(crate::config::TIER))
        .and_then(|t| t.get("end_user"))
        .ok_or_else(|| anyhow::anyhow!("no end_user template:\n{toml}"))?;
    ensure!(
        end_user.get("budget").and_then(toml::Value::as_str)
            == Some(crate::config::END_USER_BUDGET)
    );
    ensure!(
        end_user.get("rpm").and_then(toml::Value::as_integer)
            == Some(i64::from(crate::config::RPM))
    );
    Ok(())
}

/// A cycling template names `cycle` values in turn in its header slot, beside the body's
/// request number; a fixed one is numbered as before.
fn cycling_template() -> Result<()> {
    use crate::http::{SLOT_MARK, Template};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    let body = format!("{{\"n\":\"{}\"}}", crate::http::COUNTER_MARK);
    let headers = [("X-Tollgate-End-User", SLOT_MARK)];
    let mut cycling = Template::post(addr, "/", &headers, body.as_bytes())
        .cycling(3)
        .ok_or_else(|| anyhow::anyhow!("the slot was not found"))?;
    cycling.number(7);
    let text = String::from_utf8_lossy(cycling.bytes()).into_owned();
    ensure!(
        text.contains("X-Tollgate-End-User: EU-000001\r\n"),
        "{text}"
    );
    ensure!(text.contains("REQ-0000000007"), "{text}");
    let mut fixed = Template::post(addr, "/", &headers, body.as_bytes());
    fixed.number(7);
    let text = String::from_utf8_lossy(fixed.bytes()).into_owned();
    ensure!(text.contains(&format!(": {SLOT_MARK}\r\n")) && text.contains("REQ-0000000007"));
    // The slot is a header's: a mark in the body is not one, and a cycle must fit six digits.
    let in_body = Template::post(addr, "/", &[], SLOT_MARK.as_bytes());
    ensure!(in_body.cycling(2).is_none());
    let template = || Template::post(addr, "/", &headers, b"{}");
    ensure!(template().cycling(0).is_none() && template().cycling(1_000_001).is_none());
    ensure!(template().cycling(1_000_000).is_some());
    Ok(())
}

/// The wave sends exactly its count, and through a template cycling over that count it names
/// every value once, however its connections interleave.
fn end_user_wave() -> Result<()> {
    use std::collections::BTreeMap;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::<String, u32>::new()));
        let tally = std::sync::Arc::clone(&seen);
        let server = tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let tally = std::sync::Arc::clone(&tally);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        // Requests without a body: each ends at its blank line.
                        while let Some(end) = crate::http::find(&buf, b"\r\n\r\n", 0) {
                            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                            buf.drain(..end + 4);
                            if let Some(id) = head
                                .lines()
                                .find_map(|line| line.strip_prefix("X-Tollgate-End-User: "))
                                && let Ok(mut tally) = tally.lock()
                            {
                                *tally.entry(id.to_owned()).or_default() += 1;
                            }
                            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                            if socket.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                        if matches!(socket.read_buf(&mut buf).await, Ok(0) | Err(_)) {
                            return;
                        }
                    }
                });
            }
        });
        let headers = [("X-Tollgate-End-User", crate::http::SLOT_MARK)];
        let target = crate::generator::Target {
            addr,
            template: crate::http::Template::post(addr, "/", &headers, b"")
                .cycling(5)
                .ok_or_else(|| anyhow::anyhow!("no slot"))?,
        };
        let outcome =
            crate::generator::fill(&target, 3, 5, std::time::Duration::from_secs(5)).await;
        server.abort();
        ensure!(outcome.ok == 5 && outcome.errors == 0 && outcome.unfinished == 0);
        let seen = seen
            .lock()
            .map_err(|_| anyhow::anyhow!("the tally's lock is poisoned"))?
            .clone();
        let wanted: BTreeMap<String, u32> = (0..5).map(|i| (format!("EU-{i:06}"), 1)).collect();
        ensure!(seen == wanted, "{seen:?}");
        Ok(())
    })
}

fn redis_replies() -> Result<()> {
    use crate::resp::{Reply, encode, info_field, parse};
    ensure!(encode(&["SCAN", "0"]) == b"*2\r\n$4\r\nSCAN\r\n$1\r\n0\r\n");
    let scan = b"*2\r\n$2\r\n17\r\n*2\r\n$3\r\nk:1\r\n$3\r\nk:2\r\n";
    let parsed = parse(scan).map_err(anyhow::Error::msg)?;
    let wanted = Reply::Array(vec![
        Reply::Bulk(Some(b"17".to_vec())),
        Reply::Array(vec![
            Reply::Bulk(Some(b"k:1".to_vec())),
            Reply::Bulk(Some(b"k:2".to_vec())),
        ]),
    ]);
    ensure!(parsed == Some((wanted, scan.len())), "{parsed:?}");
    // Every prefix is incomplete, never an error.
    for cut in 0..scan.len() {
        ensure!(parse(&scan[..cut]) == Ok(None), "cut at {cut}");
    }
    ensure!(parse(b":42\r\n") == Ok(Some((Reply::Integer(42), 5))));
    ensure!(parse(b"$-1\r\n") == Ok(Some((Reply::Bulk(None), 5))));
    ensure!(parse(b"-ERR no\r\n") == Ok(Some((Reply::Error("ERR no".to_owned()), 9))));
    ensure!(parse(b"?x\r\n").is_err());
    let info = "# Memory\r\nused_memory:1234567\r\nused_memory_human:1.18M\r\n";
    ensure!(info_field(info, "used_memory") == Some(1_234_567));
    ensure!(info_field(info, "used_memory_rss").is_none());
    Ok(())
}

/// The end-user rows put each end-user cell beside the tenant-only cell of the same load, and
/// the memory figures divide the growth by the end users.
fn end_user_report() -> Result<()> {
    use crate::end_users::{EndUserRun, Reading, Wave};
    use crate::plan::{Cell, Cpu, Kind, Mode, Shape, Summary};
    let p = |p50: u64, p99: u64| crate::stats::Percentiles {
        p50,
        p95: p99,
        p99,
        p999: p99,
        max: p99,
        count: 100,
    };
    let summary = |target, latency, redis_cpu| Summary {
        target,
        runs: 1,
        latency_us: Some(latency),
        first_event_us: None,
        rps: Some(1_000),
        errors: 0,
        unfinished: 0,
        cpu_us_per_request: Cpu {
            gateway: Some(600),
            redis: redis_cpu,
            ..Cpu::default()
        },
    };
    let cell = |mode, gateway| Cell {
        mode,
        shape: Shape::Open { rate: 1_000 },
        scenario: "short",
        delay_ms: 0,
        summary: vec![
            summary(Kind::Direct, p(200, 400), None),
            summary(Kind::Gateway, gateway, Some(250)),
        ],
        runs: Vec::new(),
    };
    let cells = [
        cell(Mode::Redis, p(1_000, 3_000)),
        cell(Mode::EndUsers { users: 100_000 }, p(1_100, 3_600)),
    ];
    let reading = |memory, keys, rss| Reading {
        redis_used_memory: Some(memory),
        end_user_keys: Some(keys),
        redis_keys: Some(keys + 4),
        gateway_rss_kib: Some(rss),
        end_user_loads: Some(keys),
        requests: Some(keys * 2),
        ..Reading::default()
    };
    let run = EndUserRun {
        users: 100_000,
        wave: Wave {
            requests: 100_000,
            ok: 100_000,
            errors: 0,
            unfinished: 0,
            first_error: None,
            millis: 40_000,
            rps: 2_500,
        },
        before: reading(1_000_000, 0, 100_000),
        seeded: reading(10_000_000, 100_000, 108_000),
        after: reading(11_000_000, 100_000, 110_000),
        wave_commands: None,
        cell_commands: None,
    };
    ensure!(run.redis_bytes_per_key() == Some(100));
    ensure!(run.gateway_bytes_per_user() == Some(102));
    let text = crate::report::end_users_section(&cells, Some(&run), None);
    let row = "| open 1,000/s | 1.000 / 3.000 | 1.100 / 3.600 | +0.800 / +2.600 | +0.900 / +3.200 \
               | +0.100 / +0.600 | p50 1.10 ×, p99 1.20 × | 600 / 250 | 600 / 250 | 0; 0 |";
    ensure!(text.contains(row), "{text}");
    ensure!(
        text.contains("grew by 100 bytes per end-user key"),
        "{text}"
    );
    ensure!(text.contains("| keys in Redis (`DBSIZE`) | 4 | 100,004 | 100,004 |"));
    let skipped = crate::report::end_users_section(&cells, None, Some("no keys"));
    ensure!(skipped.contains("not measured (no keys)"));
    Ok(())
}

/// The reference targets divide the gateway's closed-loop req/s by crabllm's (the issue's
/// target) and by the bare proxy's in the same cell, each judged only when both were measured.
fn reference_targets() -> Result<()> {
    use crate::plan::{Cell, Cpu, Kind, Mode, Shape, Summary};
    let summary = |target, rps| Summary {
        target,
        runs: 1,
        latency_us: None,
        first_event_us: None,
        rps: Some(rps),
        errors: 0,
        unfinished: 0,
        cpu_us_per_request: Cpu::default(),
    };
    let cell = |crabllm_rps, bare_rps| Cell {
        mode: Mode::Plain,
        shape: Shape::Closed { conns: 64 },
        scenario: "short",
        delay_ms: 0,
        summary: vec![
            summary(Kind::Gateway, 9_000),
            summary(Kind::Crabllm, crabllm_rps),
            summary(Kind::Bare, bare_rps),
        ],
        runs: Vec::new(),
    };
    let target = |cells: &[Cell], wanted: &str| {
        crate::report::checks(
            cells,
            "--skip-crabllm was given",
            "--skip-bare was given",
            None,
        )
        .into_iter()
        .find(|check| check.target.contains(wanted))
    };
    let slower = target(&[cell(8_000, 12_000)], "bare actix-web");
    ensure!(
        slower.as_ref().is_some_and(|c| c.met == Some(false)
            && c.measured == "gateway 9,000 req/s = 0.75 × bare proxy 12,000 req/s"),
        "{:?}",
        slower.map(|c| c.measured)
    );
    let faster = target(&[cell(8_000, 12_000)], "crabllm's");
    ensure!(
        faster.as_ref().is_some_and(|c| c.met == Some(true)
            && c.measured == "gateway 9,000 req/s = 1.12 × crabllm 8,000 req/s"),
        "{:?}",
        faster.map(|c| c.measured)
    );
    ensure!(target(&[cell(10_000, 8_000)], "crabllm's").is_some_and(|c| c.met == Some(false)));
    ensure!(target(&[cell(10_000, 8_000)], "bare actix-web").is_some_and(|c| c.met == Some(true)));
    ensure!(target(&[], "crabllm's").is_some_and(
        |c| c.met.is_none() && c.measured == "not measured (--skip-crabllm was given)"
    ));
    ensure!(
        target(&[], "bare actix-web").is_some_and(
            |c| c.met.is_none() && c.measured == "not measured (--skip-bare was given)"
        )
    );
    let table = crate::report::closed_table(&[cell(8_000, 12_000)]);
    ensure!(
        table.contains("| short | 0 ms | — | 9,000 | 8,000 | 12,000 | — | 1.12 | 0.75 | — | — |"),
        "{table}"
    );
    Ok(())
}

/// The relay's cost per chunk: the streamed call's CPU less the plain call's at the same rate,
/// over the chunks; not judged without the plain cell.
fn relay_cost_target() -> Result<()> {
    use crate::plan::{Cell, Cpu, Door, Kind, Mode, Shape, Summary};
    let cell = |mode, gateway_cpu| Cell {
        mode,
        shape: Shape::Open { rate: 1_000 },
        scenario: "short",
        delay_ms: 0,
        summary: vec![Summary {
            target: Kind::Gateway,
            runs: 1,
            latency_us: None,
            first_event_us: None,
            rps: None,
            errors: 0,
            unfinished: 0,
            cpu_us_per_request: Cpu {
                gateway: Some(gateway_cpu),
                ..Cpu::default()
            },
        }],
        runs: Vec::new(),
    };
    let stream = |cpu| {
        cell(
            Mode::Stream {
                chunks: 20,
                chunk_delay_ms: 2,
                door: Door::Chat,
            },
            cpu,
        )
    };
    let target = |cells: &[Cell]| {
        crate::report::checks(cells, "", "", None)
            .into_iter()
            .find(|check| check.target.contains("relay's CPU per chunk"))
    };
    let met = target(&[cell(Mode::Plain, 257), stream(575)]);
    ensure!(
        met.as_ref().is_some_and(|c| c.met == Some(true)
            && c.measured
                == "15 µs (gateway CPU per call: streamed 575, plain 257; the difference ÷ 20)"),
        "{met:?}"
    );
    let missed = target(&[cell(Mode::Plain, 257), stream(700)]);
    ensure!(missed.is_some_and(|c| c.met == Some(false)));
    let alone = target(&[stream(575)]);
    ensure!(alone.is_some_and(|c| c.met.is_none()));
    Ok(())
}
