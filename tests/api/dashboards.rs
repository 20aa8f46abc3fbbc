//! The Grafana dashboards and Prometheus alert rules in `dashboards/` against a
//! live scrape: every metric a panel or rule queries is exported (with the
//! labels it selects on, and of the type its functions need), the scrape
//! passes `promtool check metrics`, the rules pass `promtool check rules`, and
//! every panel's PromQL parses.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::redis::RedisServer;
use crate::support::{TestApp, TestSetup, chat_body, spawn_app};

const DASHBOARDS: [&str; 3] = ["overview.json", "tenants.json", "providers.json"];
const ALERTS: &str = "alerts.yaml";
const DATASOURCE: &str = "${DS_PROMETHEUS}";

fn dashboards_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards")
}

fn read(name: &str) -> String {
    let path = dashboards_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn dashboard(name: &str) -> Value {
    serde_json::from_str(&read(name)).unwrap_or_else(|e| panic!("{name} is not valid JSON: {e}"))
}

// ---------------------------------------------------------------- promtool

/// Runs promtool; a missing promtool fails the test rather than skipping it.
fn promtool(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(dashboards_dir())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run promtool ({e}): install Debian's `prometheus` package \
                 (apt-get install prometheus), which ships promtool; scripts/test.sh does"
            )
        });
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn assert_promtool_ok(args: &[&str], stdin: Option<&str>) -> String {
    let output = promtool(args, stdin);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {} failed ({}):\n{text}",
        args.join(" "),
        output.status
    );
    text
}

// ---------------------------------------------------------------- the scrape

#[derive(Debug, Default)]
struct Family {
    kind: String,
    labels: BTreeSet<String>,
    samples: usize,
}

/// Metric families of a Prometheus text exposition, by name.
fn families(scrape: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                panic!("bad TYPE line: {line}");
            };
            kind.clone_into(&mut families.entry(name.to_owned()).or_default().kind);
        }
    }
    for line in scrape
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..end];
        let base = strip_series_suffix(name)
            .filter(|base| families.contains_key(*base))
            .unwrap_or(name);
        let family = families.entry(base.to_owned()).or_default();
        family.samples += 1;
        if line[end..].starts_with('{') {
            family.labels.extend(selector_labels(&line[end..]));
        }
    }
    families
}

/// `x` for `x_bucket`, `x_sum`, `x_count`.
fn strip_series_suffix(name: &str) -> Option<&str> {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
}

/// Label names of a `{a="x", b=~"y|z"}` selector (text starting at `{`).
fn selector_labels(text: &str) -> Vec<String> {
    let mut labels = Vec::new();
    let mut chars = text.chars().skip(1).peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        let name: String =
            std::iter::from_fn(|| chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_'))
                .collect();
        if name.is_empty() {
            return labels;
        }
        labels.push(name);
        // The operator, then the quoted value.
        while chars.next_if(|c| *c != '"').is_some() {}
        chars.next();
        let mut escaped = false;
        for c in chars.by_ref() {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => break,
                _ => escaped = false,
            }
        }
    }
}

// ---------------------------------------------------------------- metric references

/// One use of a `tollgate_*` name in a dashboard or rule.
#[derive(Debug)]
struct Reference {
    name: String,
    /// The function applied directly to it (`rate`, `deriv`, ...), if any.
    function: Option<String>,
    /// Label names its selector filters on.
    labels: Vec<String>,
    source: String,
}

fn references(text: &str, source: &str) -> Vec<Reference> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = text[from..].find("tollgate_") {
        let start = from + offset;
        let before = text[..start].chars().next_back();
        let rest = &text[start..];
        let len = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        from = start + len;
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let head = text[..start].trim_end();
        let function = head.strip_suffix('(').map(|head| {
            let ident: String = head
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            ident.chars().rev().collect()
        });
        let labels = if rest[len..].starts_with('{') {
            selector_labels(&rest[len..])
        } else {
            Vec::new()
        };
        found.push(Reference {
            name: rest[..len].to_owned(),
            function,
            labels,
            source: source.to_owned(),
        });
    }
    found
}

/// Every string in a JSON document, with the key it is stored under.
fn strings<'a>(value: &'a Value, key: &'a str, out: &mut Vec<(&'a str, &'a str)>) {
    match value {
        Value::String(s) => out.push((key, s)),
        Value::Array(items) => items.iter().for_each(|v| strings(v, key, out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| strings(v, k, out)),
        _ => {}
    }
}

/// The PromQL of a dashboard: panel targets and template variable queries.
fn exprs(board: &Value) -> Vec<String> {
    let mut all = Vec::new();
    strings(board, "", &mut all);
    all.into_iter()
        .filter(|(key, _)| *key == "expr")
        .map(|(_, s)| s.to_owned())
        .collect()
}

/// Every reference in the dashboards (any string: queries, variables,
/// descriptions) and in the rules file.
fn all_references() -> Vec<Reference> {
    let mut refs = Vec::new();
    for name in DASHBOARDS {
        let board = dashboard(name);
        let mut all = Vec::new();
        strings(&board, "", &mut all);
        for (key, text) in all {
            refs.extend(references(text, &format!("{name} ({key}): {text}")));
        }
    }
    for (n, line) in read(ALERTS).lines().enumerate() {
        refs.extend(references(line, &format!("{ALERTS}:{}: {line}", n + 1)));
    }
    refs
}

/// What is wrong with one reference against the scrape, if anything.
fn check_reference(reference: &Reference, families: &BTreeMap<String, Family>) -> Option<String> {
    let used = reference.name.as_str();
    let suffixed = strip_series_suffix(used);
    let base = suffixed.unwrap_or(used);
    let Some(family) = families.get(base).filter(|f| f.samples > 0) else {
        return Some(format!("{base} is not in the scrape"));
    };
    let kind = family.kind.as_str();
    if used.ends_with("_bucket") && kind != "histogram" {
        return Some(format!("{used}: {base} is a {kind}, it has no buckets"));
    }
    if suffixed.is_some() && !matches!(kind, "histogram" | "summary") {
        return Some(format!("{used}: {base} is a {kind}"));
    }
    let needs = match reference.function.as_deref() {
        Some("rate" | "irate" | "increase") if suffixed.is_none() => Some("counter"),
        Some("deriv" | "predict_linear" | "delta" | "idelta") => Some("gauge"),
        _ => None,
    };
    if let Some(needs) = needs.filter(|needs| *needs != kind) {
        let function = reference.function.as_deref().unwrap_or_default();
        return Some(format!(
            "{function}({used}) needs a {needs}; {base} is a {kind}"
        ));
    }
    let unknown: Vec<&String> = reference
        .labels
        .iter()
        .filter(|l| !family.labels.contains(*l))
        .collect();
    if !unknown.is_empty() {
        return Some(format!(
            "{used} has no label {unknown:?} (it has {:?})",
            family.labels
        ));
    }
    None
}

fn problems(refs: &[Reference], scrape: &str) -> Vec<String> {
    let families = families(scrape);
    refs.iter()
        .filter_map(|r| check_reference(r, &families).map(|p| format!("{p}\n    in {}", r.source)))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

// ---------------------------------------------------------------- traffic

fn setup() -> TestSetup {
    TestSetup::new()
        // The cost counter gets its `feature` label.
        .set("telemetry.feature_labels", true)
        .route("fast", &["primary/usage-10-0-5"])
        .route("cached", &["primary/usage-10-0-5"])
        .cached_route("cached", 60_000)
        .route("failover", &["secondary/status-503", "primary/usage-10-0-5"])
        .route("pricey", &["primary/usage-0-0-500000"])
        .route("stream", &["primary/usage-100-20-30+chunks-3"])
        .route("cut", &["primary/chunks-8+cut-after-3"])
        .route("semantic", &["primary/usage-10-0-5"])
        .set("routes.semantic.semantic_cache.threshold", 0.9)
        .set("routes.semantic.semantic_cache.ttl_ms", 60_000)
        .set("routes.semantic.semantic_cache.embedding_route", "embed")
        .route("embed", &["primary/usage-50-0-0"])
        .tier(
            "free",
            &["fast", "cached", "failover", "pricey", "stream", "cut", "semantic", "embed"],
            1000,
            100,
        )
        // The export's series, per sink, exist from the start.
        .push(
            "export.sinks",
            crate::support::entry([
                ("name", "warehouse".into()),
                ("kind", "cloudevents".into()),
                ("url", "http://127.0.0.1:9/events".into()),
            ]),
        )
}

/// ok, a cache miss and hit, a fallback, a normal stream, a cut stream, a 402 and a 429.
/// The shared-quota metrics: a gateway on Redis reconciles with the ledger,
/// then loses Redis, and its tenants fall back (metrics are process-wide, so
/// the other gateway's scrape shows them).
async fn drive_shared_store() {
    let mut redis = RedisServer::start().await;
    let shared = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-10-0-5"])
            .tier("closed", &["fast"], 1000, 100)
            .tier("shared_out", &["fast"], 1000, 100)
            .set("tiers.shared_out.on_store_error", "local")
            .redis(&redis.url(), 2)
            .set("storage.reconcile_interval_ms", 100),
    )
    .await;
    let (closed, closed_key) = shared
        .tenant_with_key("closed", json!({"monthly_budget": "5"}))
        .await;
    let (_local, local_key) = shared.tenant_with_key("shared_out", json!({})).await;
    assert_eq!(
        shared.chat(&closed_key, &chat_body("fast")).await.status,
        200
    );
    // A sweep after the reconcile interval publishes the drift.
    crate::support::wait_until(
        Duration::from_secs(5),
        "the closed tenant's quota drift",
        async || {
            let scrape = shared.gateway.metrics.render();
            let published = scrape.lines().any(|line| {
                line.starts_with("tollgate_quota_drift_nanos{")
                    && line.contains(&format!("tenant=\"{closed}\""))
            });
            crate::support::done_if(published, "not in the scrape")
        },
    )
    .await;
    redis.kill();
    assert_eq!(
        shared.chat(&closed_key, &chat_body("fast")).await.status,
        503
    );
    assert_eq!(
        shared.chat(&local_key, &chat_body("fast")).await.status,
        200
    );
}

async fn drive_traffic(app: &TestApp) {
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    for cache in ["miss", "hit"] {
        let reply = app.chat(&key, &chat_body("cached")).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        assert_eq!(reply.header("x-tollgate-cache"), Some(cache));
    }
    // A semantic-cache miss: the lookup's histogram gets its series.
    let mut semantic = chat_body("semantic");
    semantic["temperature"] = json!(0);
    let looked_up = app.chat(&key, &semantic).await;
    assert_eq!(
        looked_up.header("x-tollgate-cache"),
        Some("miss"),
        "{}",
        looked_up.raw
    );
    let ok = app
        .chat_with(
            &key,
            &chat_body("fast"),
            &[("x-tollgate-feature", "search")],
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.raw);
    let fallback = app.chat(&key, &chat_body("failover")).await;
    assert_eq!(fallback.status, 200, "{}", fallback.raw);
    assert_eq!(fallback.header("x-tollgate-provider"), Some("primary"));
    let mut stream = chat_body("stream");
    stream["stream"] = json!(true);
    let streamed = app.chat(&key, &stream).await;
    assert_eq!(streamed.status, 200, "{}", streamed.raw);
    assert!(streamed.raw.contains("data: [DONE]"), "{}", streamed.raw);
    let mut cut = chat_body("cut");
    cut["stream"] = json!(true);
    let interrupted = app.chat(&key, &cut).await;
    assert!(
        interrupted.raw.contains("stream_interrupted"),
        "{}",
        interrupted.raw
    );

    // A field the table refuses: its refusal is counted by door and field.
    let mut predicted = chat_body("fast");
    predicted["prediction"] = json!({"type": "content", "content": "x"});
    let refused_field = app.chat(&key, &predicted).await;
    assert_eq!(refused_field.status, 400, "{}", refused_field.raw);

    let (_budgeted, budgeted_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "5"}))
        .await;
    let mut pricey = chat_body("pricey");
    pricey["max_tokens"] = json!(200_000);
    assert_eq!(app.chat(&budgeted_key, &pricey).await.status, 200);
    let refused = app.chat(&budgeted_key, &pricey).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);

    // An imported bill: its drift gauge gets the provider's series.
    let bill = json!({"object": "page", "has_more": false, "data": [{
        "object": "bucket", "start_time": 1_796_083_200, "end_time": 1_796_169_600,
        "results": [{"object": "organization.costs.result",
            "amount": {"value": 0.5, "currency": "cny"}, "line_item": "m, input"}]}]});
    let imported = app
        .admin("POST", "/bills/import?provider=primary", Some(bill))
        .await;
    assert_eq!(imported.status, 200, "{}", imported.raw);

    let (_limited, limited_key) = app.tenant_with_key("free", json!({"rpm_limit": 1})).await;
    assert_eq!(app.chat(&limited_key, &chat_body("fast")).await.status, 200);
    let limited = app.chat(&limited_key, &chat_body("fast")).await;
    assert_eq!(limited.status, 429, "{}", limited.raw);

    // An alert-only rate: the second call passes over it, and is counted.
    let (_alerted, alerted_key) = app
        .tenant_with_key("free", json!({"rpm_limit": 1, "rate_mode": "alert"}))
        .await;
    for _ in 0..2 {
        assert_eq!(app.chat(&alerted_key, &chat_body("fast")).await.status, 200);
    }
}

/// A scrape once every referenced family is in it (stream and ledger metrics
/// are recorded after the caller's response); the test fails after 5 s without one.
async fn scrape_when_complete(app: &TestApp, refs: &[Reference]) -> String {
    crate::support::wait_until(
        Duration::from_secs(5),
        "every referenced family in a scrape",
        async || {
            let reply = app.get("/metrics", "").await;
            assert_eq!(reply.status, 200, "{}", reply.raw);
            let missing = problems(refs, &reply.raw);
            if missing.is_empty() {
                Ok(reply.raw)
            } else {
                Err(missing)
            }
        },
    )
    .await
}

// ---------------------------------------------------------------- tests

#[actix_web::test]
async fn every_metric_in_the_dashboards_and_rules_is_exported_and_the_scrape_passes_promtool() {
    let refs = all_references();
    let names: BTreeSet<&str> = refs.iter().map(|r| r.name.as_str()).collect();
    assert!(names.len() >= 20, "too few metric names found: {names:?}");

    let app = spawn_app(setup()).await;
    drive_traffic(&app).await;
    drive_shared_store().await;
    let scrape = scrape_when_complete(&app, &refs).await;

    let problems = problems(&refs, &scrape);
    assert!(
        problems.is_empty(),
        "dashboards/rules query what the gateway does not export:\n{}\n\nscrape:\n{scrape}",
        problems.join("\n")
    );
    // And the other way round: every family the gateway exports is on a dashboard or rule.
    let used: BTreeSet<&str> = refs
        .iter()
        .map(|r| strip_series_suffix(&r.name).unwrap_or(&r.name))
        .collect();
    let unused: Vec<String> = tollgate::telemetry::metrics::Metric::ALL
        .iter()
        .map(|m| m.as_str())
        .filter(|m| !used.contains(m))
        .map(str::to_owned)
        .collect();
    assert!(
        unused.is_empty(),
        "exported but on no dashboard: {unused:?}"
    );

    let lint = assert_promtool_ok(&["check", "metrics"], Some(&scrape));
    assert!(
        lint.trim().is_empty(),
        "promtool check metrics reported:\n{lint}"
    );
}

#[test]
fn the_alert_rules_pass_promtool_and_define_the_documented_alerts() {
    let text = assert_promtool_ok(&["check", "rules", ALERTS], None);
    assert!(text.contains("SUCCESS"), "{text}");
    let rules = read(ALERTS);
    for alert in [
        "TenantBudget80",
        "TenantBudgetExhausted",
        "FallbackRatioHigh",
        "BreakerOpen",
        "UpstreamServerErrorsHigh",
        "LedgerBacklogHigh",
        "LedgerLagHigh",
        "GatewayOverheadP95High",
        "ReservationsOrphaned",
        "TollgateExportStalled",
    ] {
        assert!(
            rules
                .lines()
                .any(|l| l.trim() == format!("- alert: {alert}")),
            "{ALERTS} has no alert {alert}"
        );
    }
}

#[test]
fn every_dashboard_query_is_valid_promql() {
    // promtool parses recording rules: one per panel query, with Grafana's
    // variables replaced by what they expand to.
    let mut rules = String::from("groups:\n  - name: dashboards\n    rules:\n");
    let mut n = 0;
    for name in DASHBOARDS {
        for expr in exprs(&dashboard(name)) {
            n += 1;
            let expanded = expr
                .replace("$__rate_interval", "5m")
                .replace("$__range", "6h")
                .replace("$__interval", "1m")
                .replace("$tenant", ".*")
                .replace("$provider", ".*")
                .replace("$route", ".*");
            assert!(
                !expanded.contains('$'),
                "unknown variable in {name}: {expr}"
            );
            let quoted = serde_json::to_string(&expanded).unwrap();
            writeln!(
                rules,
                "      - record: dashboard:query_{n}\n        expr: {quoted}"
            )
            .unwrap();
        }
    }
    assert!(n >= 40, "only {n} panel queries");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard-queries.yaml");
    std::fs::write(&path, &rules).unwrap();
    let text = assert_promtool_ok(&["check", "rules", path.to_str().unwrap()], None);
    assert!(
        text.contains(&format!("SUCCESS: {n} rules found")),
        "{text}"
    );
}

#[test]
fn the_dashboards_are_provisionable_grafana_json_with_their_variables() {
    let mut uids = BTreeSet::new();
    for name in DASHBOARDS {
        let board = dashboard(name);
        let uid = board["uid"].as_str().unwrap_or_default();
        assert!(
            !uid.is_empty() && uids.insert(uid.to_owned()),
            "{name}: uid {uid:?}"
        );
        assert!(
            board["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{name}"
        );
        assert!(
            board["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
            "{name}"
        );
        assert!(
            board["tags"]
                .as_array()
                .unwrap()
                .contains(&json!("tollgate")),
            "{name}"
        );

        let variables = board["templating"]["list"].as_array().unwrap();
        assert!(
            variables.iter().any(|v| v["name"] == "DS_PROMETHEUS"
                && v["type"] == "datasource"
                && v["query"] == "prometheus"),
            "{name}: no DS_PROMETHEUS datasource variable"
        );
        let queries = exprs(&board).join("\n");
        for variable in variables.iter().filter(|v| v["type"] == "query") {
            assert_eq!(variable["datasource"]["uid"], DATASOURCE, "{name}");
            let var = variable["name"].as_str().unwrap();
            assert!(
                queries.contains(&format!("${var}")),
                "{name}: variable {var} is used by no panel"
            );
        }

        let mut ids = BTreeSet::new();
        for panel in board["panels"].as_array().unwrap() {
            let title = panel["title"].as_str().unwrap_or_default();
            assert!(
                ids.insert(panel["id"].as_u64().unwrap()),
                "{name}: duplicate id at {title}"
            );
            if panel["type"] == "row" {
                continue;
            }
            assert_eq!(panel["datasource"]["uid"], DATASOURCE, "{name}: {title}");
            let targets = panel["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{name}: {title} has no query");
            for target in targets {
                assert_eq!(target["datasource"]["uid"], DATASOURCE, "{name}: {title}");
                assert!(
                    target["expr"].as_str().is_some_and(|e| !e.is_empty()),
                    "{name}: {title}"
                );
            }
        }
    }
}

#[test]
fn the_dashboards_variables_and_provisioning_point_at_tollgate_s_series() {
    let variable = |board: &str, var: &str| {
        dashboard(board)["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == var)
            .map(|v| {
                v["definition"]
                    .as_str()
                    .unwrap_or_default()
                    .replace(' ', "")
            })
    };
    assert_eq!(
        variable("tenants.json", "tenant").as_deref(),
        Some("label_values(tollgate_tokens_total,tenant)")
    );
    assert_eq!(
        variable("providers.json", "provider").as_deref(),
        Some("label_values(tollgate_upstream_attempts_total,provider)")
    );

    let provisioning = read("provisioning.yaml");
    assert!(provisioning.contains("apiVersion: 1"), "{provisioning}");
    assert!(provisioning.contains("type: file"), "{provisioning}");
    assert!(
        provisioning.contains("path: /var/lib/grafana/dashboards/tollgate"),
        "{provisioning}"
    );
}
