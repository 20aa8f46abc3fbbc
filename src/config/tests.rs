use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

use super::storage::{POSTGRES_POOL, SQLITE_POOL};
use super::*;
use crate::money::{Nanos, PricePerMTok};

const BASE: &str = r#"
        [providers.deepseek]
        kind = "openai"
        base_url = "https://api.deepseek.com"
        api_key_env = "DEEPSEEK_API_KEY"
        [providers.qwen]
        kind = "openai"
        base_url = "https://dashscope.example/compatible-mode/v1/"
        api_key_env = "DASHSCOPE_API_KEY"
        [routes.fast]
        targets = ["deepseek/deepseek-flash", "qwen/qwen-flash"]
        [tiers.free]
        routes = ["fast"]
        rpm = 60
        default_max_tokens = 1024
        [[prices]]
        provider = "deepseek"
        model = "deepseek-flash"
        input = "2.0"
        cached_input = "0.04"
        output = "8.0"
        [[prices]]
        provider = "qwen"
        model = "qwen-flash"
        input = "3"
        output = "6"
"#;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn pepper() -> HashMap<String, String> {
    env(&[(KEY_PEPPER_ENV, "pepper"), ("DEEPSEEK_API_KEY", "sk-1")])
}

#[test]
fn the_pool_is_sized_for_its_backend_unless_set() {
    let pool = |storage: &str, extra: &[(&str, &str)]| {
        let mut vars = pepper();
        vars.extend(env(extra));
        Config::from_toml(&format!("[storage]\n{storage}\n{BASE}"), &vars)
            .map(|c| c.storage.pool_size())
    };
    assert_eq!(pool("", &[]).unwrap(), SQLITE_POOL);
    let postgres = "database_url = \"postgres://db/tollgate\"";
    assert_eq!(pool(postgres, &[]).unwrap(), POSTGRES_POOL);
    assert_eq!(
        pool("", &[(DATABASE_URL_ENV, "postgres://db/tollgate")]).unwrap(),
        POSTGRES_POOL,
        "the URL from the environment decides"
    );
    assert_eq!(pool("max_connections = 2", &[]).unwrap(), 2);
    let zero = pool("max_connections = 0", &[]).unwrap_err().to_string();
    assert!(zero.contains("storage.max_connections"), "{zero}");
}

#[test]
fn dated_prices_are_kept_in_order_and_checked() {
    let dated = |from: &str| {
        format!(
            "[[prices]]\nprovider = \"qwen\"\nmodel = \"qwen-flash\"\ninput = \"9\"\noutput = \"9\"\neffective_from = \"{from}\"\n"
        )
    };
    let text = format!("{BASE}\n{}{}", dated("2027-03-01"), dated("2027-01-01"));
    let config = Config::from_toml(&text, &pepper()).unwrap();
    let key = ("qwen".to_owned(), "qwen-flash".to_owned());
    let changes = &config.price_changes[&key];
    assert!(changes[0].0 < changes[1].0, "sorted by date");
    let at = |ms| price_at(&config.prices, &config.price_changes, &key, ms).unwrap();
    assert_eq!(
        at(0).input,
        config.prices[&key].input,
        "undated before the first date"
    );
    assert_eq!(at(changes[0].0).input.nanos_per_mtok().to_string(), "9");
    let twice = format!("{BASE}\n{}{}", dated("2027-01-01"), dated("2027-01-01"));
    let error = Config::from_toml(&twice, &pepper())
        .unwrap_err()
        .to_string();
    assert!(error.contains("from 2027-01-01"), "{error}");
    let bad = format!("{BASE}\n{}", dated("2027-13-01"));
    let error = Config::from_toml(&bad, &pepper()).unwrap_err().to_string();
    assert!(error.contains("effective_from"), "{error}");
}

#[test]
fn plans_price_only_priced_models_and_enter_the_price_version() {
    let plan = "[[plans]]\nname = \"resale\"\nmarkup_percent = 20\n";
    let with_plan = Config::from_toml(&format!("{BASE}\n{plan}"), &pepper()).unwrap();
    let without = Config::from_toml(BASE, &pepper()).unwrap();
    assert_eq!(with_plan.plans["resale"].markup_ppm, 200_000);
    assert_ne!(with_plan.price_version, without.price_version);
    let typo = format!(
        "{BASE}\n{plan}[[plans.prices]]\nprovider = \"deepseek\"\nmodel = \"nowhere\"\ninput = \"1\"\noutput = \"1\"\n"
    );
    let error = Config::from_toml(&typo, &pepper()).unwrap_err().to_string();
    assert!(error.contains("plans[0].prices[0]"), "{error}");
    let cost = format!("{BASE}\n[[plans]]\nname = \"cost\"\n");
    assert!(Config::from_toml(&cost, &pepper()).is_err());
}

#[test]
fn loads_the_contract_shape_and_takes_worst_prices_over_targets() {
    let config = Config::from_toml(BASE, &pepper()).unwrap();
    let route = config.route("fast").unwrap();
    assert_eq!(
        crate::routing::worst_prices(route, 1000),
        (
            PricePerMTok::parse_decimal("3").unwrap(),
            PricePerMTok::parse_decimal("8").unwrap()
        )
    );
    let qwen = &config.providers[&ProviderName::new("qwen")];
    assert_eq!(
        qwen.chat_url,
        "https://dashscope.example/compatible-mode/v1/chat/completions"
    );
    assert_eq!(qwen.missing_key_env(), Some("DASHSCOPE_API_KEY"));
    let deepseek = &config.providers[&ProviderName::new("deepseek")];
    assert_eq!(deepseek.missing_key_env(), None);
    assert_eq!(format!("{:?}", deepseek.api_key), "Some(*****)");
}

#[test]
fn admin_listen_is_optional_and_an_address_that_is_not_one_is_named() {
    let with_server =
        |server: &str| Config::from_toml(&format!("[server]\n{server}\n{BASE}"), &pepper());
    assert_eq!(
        Config::from_toml(BASE, &pepper())
            .unwrap()
            .server
            .admin_listen,
        None
    );
    assert_eq!(
        with_server("admin_listen = \"127.0.0.1:9091\"")
            .unwrap()
            .server
            .admin_listen,
        Some(SocketAddr::from(([127, 0, 0, 1], 9091)))
    );
    for bad in ["\"localhost\"", "\"127.0.0.1\"", "\":9091\"", "9091"] {
        let error = with_server(&format!("admin_listen = {bad}"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("server.admin_listen"), "{bad}: {error}");
    }
    let error = with_server("listen = \"127.0.0.1:9091\"\nadmin_listen = \"127.0.0.1:9091\"")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("server.admin_listen: must differ"),
        "{error}"
    );
    assert!(with_server("listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"").is_ok());
}

#[test]
fn the_shutdown_grace_covers_the_longest_upstream_call_unless_set() {
    let load = |server: &str, base: &str| {
        Config::from_toml(&format!("[server]\n{server}\n{base}"), &pepper()).unwrap()
    };
    // Providers' default timeout is 60 s: a stop waits for it and the settle.
    let default = load("", BASE);
    assert_eq!(default.shutdown_grace_ms(), 60_000 + SETTLE_AFTER_CALL_MS);
    assert_eq!(default.grace_shorter_than_calls(), None);
    let slow = BASE.replace(
        "api_key_env = \"DEEPSEEK_API_KEY\"",
        "api_key_env = \"DEEPSEEK_API_KEY\"\ntimeout_ms = 90000",
    );
    assert_eq!(load("", &slow).shutdown_grace_ms(), 95_000);
    // The request's own deadline cuts a longer provider timeout.
    let cut = load("request_timeout_ms = 70000", &slow);
    assert_eq!(cut.shutdown_grace_ms(), 75_000);
    let set = load("shutdown_grace_ms = 30000", &slow);
    assert_eq!(set.shutdown_grace_ms(), 30_000);
    assert_eq!(set.grace_shorter_than_calls(), Some((30_000, 90_000)));
}

#[test]
fn the_journal_lives_next_to_a_sqlite_file_unless_configured() {
    let with_db = |url: &str| {
        let env = env(&[(KEY_PEPPER_ENV, "pepper"), (DATABASE_URL_ENV, url)]);
        Config::from_toml(BASE, &env).unwrap().journal_dir()
    };
    assert_eq!(
        with_db("sqlite:///var/lib/tollgate/t.db?mode=rwc"),
        Some(std::path::PathBuf::from("/var/lib/tollgate/journal"))
    );
    assert_eq!(
        with_db("sqlite://t.db?mode=rwc"),
        Some(std::path::PathBuf::from("journal"))
    );
    assert_eq!(with_db("sqlite::memory:"), None);
    assert_eq!(
        with_db("postgres://u@db/tollgate"),
        Some(std::path::PathBuf::from("tollgate-journal"))
    );
    let text = format!("{BASE}\n[ledger]\njournal_dir = \"/srv/j\"\nfsync = \"interval\"\n");
    let config = Config::from_toml(&text, &pepper()).unwrap();
    assert_eq!(
        config.journal_dir(),
        Some(std::path::PathBuf::from("/srv/j"))
    );
    assert_eq!(config.ledger.fsync, FsyncMode::Interval);
    let text = format!("{BASE}\n[ledger]\nfsync = \"sometimes\"\n");
    assert!(Config::from_toml(&text, &pepper()).is_err());
}

#[test]
fn a_file_without_include_keeps_the_price_version_its_rows_carry() {
    // The version ledgers already hold for BASE's two prices.
    let config = Config::from_toml(BASE, &pepper()).unwrap();
    assert_eq!(config.price_version, "92dd298202cb");
    assert!(config.catalogs.is_empty());
}

#[test]
fn a_target_without_a_price_names_the_entry() {
    let text = BASE.replace("qwen-flash\"\n        input", "qwen-other\"\n        input");
    let error = Config::from_toml(&text, &pepper()).unwrap_err().to_string();
    assert_eq!(
        error,
        "routes.fast.targets[1]: no price for qwen/qwen-flash"
    );
}

#[test]
fn an_unknown_provider_names_the_entry() {
    let text = BASE.replace("\"qwen/qwen-flash\"", "\"kimi/k2\"");
    let error = Config::from_toml(&text, &pepper()).unwrap_err().to_string();
    assert_eq!(error, "routes.fast.targets[1]: unknown provider `kimi`");
}

#[test]
fn unknown_fields_and_bad_prices_are_refused() {
    let text = BASE.replace("rpm = 60", "rpm = 60\nrmp = 3");
    assert!(Config::from_toml(&text, &pepper()).is_err());
    let text = BASE.replace("\"8.0\"", "\"8,0\"");
    let error = Config::from_toml(&text, &pepper()).unwrap_err().to_string();
    assert!(error.starts_with("prices[0].output:"), "{error}");
}

#[test]
fn a_route_lets_search_leave_only_where_every_target_has_its_fee() {
    let tools = "[routes.fast.server_tools]\nweb_search = { max_uses = 4, input_tokens_per_use = 5000 }\n[tiers.free]";
    let with_tools = BASE.replace("[tiers.free]", tools);
    let error = Config::from_toml(&with_tools, &pepper()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "routes.fast.server_tools.web_search: target `deepseek/deepseek-flash` has no `web_search` fee in its [[prices]] entry; give it one, or the route cannot hold what a search costs"
    );
    let priced = with_tools
        .replace(
            "output = \"8.0\"",
            "output = \"8.0\"\nweb_search = \"0.01\"",
        )
        .replace("output = \"6\"", "output = \"6\"\nweb_search = \"0.025\"");
    let config = Config::from_toml(&priced, &pepper()).unwrap();
    let route = &config.routes[&RouteName::new("fast")];
    let search = route.server_tools.web_search.unwrap();
    assert_eq!((search.max_uses, search.input_tokens_per_use), (4, 5000));
    assert_eq!(route.server_tools.web_fetch, None);
    let fees: Vec<_> = route.targets.iter().map(|t| t.price.web_search).collect();
    assert_eq!(
        fees,
        [Some(Nanos::new(10_000_000)), Some(Nanos::new(25_000_000))]
    );
    let zero = priced.replace("max_uses = 4", "max_uses = 0");
    let error = Config::from_toml(&zero, &pepper()).unwrap_err().to_string();
    assert!(
        error.starts_with("routes.fast.server_tools.web_search.max_uses:"),
        "{error}"
    );
}

#[test]
fn provider_options_are_checked_and_name_the_entry() {
    let with = |extra: &str| {
        let text = BASE.replace(
            "api_key_env = \"DEEPSEEK_API_KEY\"",
            &format!("api_key_env = \"DEEPSEEK_API_KEY\"\n{extra}"),
        );
        Config::from_toml(&text, &pepper()).map(|c| {
            let p = &c.providers[&ProviderName::new("deepseek")];
            (
                p.tenant_id_as,
                p.extra_headers.clone(),
                p.max_tokens_ceiling,
            )
        })
    };
    let (field, headers, ceiling) = with(
        "tenant_id_as = \"user_id\"\nmax_tokens_ceiling = 8\nextra_headers = { X-Org = \"a\" }",
    )
    .unwrap();
    assert_eq!(field, Some(TenantIdField::UserId));
    assert_eq!(headers, vec![("x-org".to_owned(), "a".to_owned())]);
    assert_eq!(ceiling, Some(8));
    let error = with("extra_headers = { Authorization = \"x\" }").unwrap_err();
    assert_eq!(
        error.to_string(),
        "providers.deepseek.extra_headers.Authorization: is set by the gateway itself"
    );
    let error = with("extra_headers = { \"a b\" = \"x\" }").unwrap_err();
    assert!(
        error.to_string().contains("not a valid header name"),
        "{error}"
    );
    let error = with("max_tokens_ceiling = 0").unwrap_err();
    assert_eq!(
        error.to_string(),
        "providers.deepseek.max_tokens_ceiling: must be positive"
    );
}

#[test]
fn responses_is_for_openai_providers_only_and_takes_the_tenant_as_user() {
    let with = |provider: &str, extra: &str| {
        let text = format!(
            "{BASE}\n[providers.{provider}]\nbase_url = \"https://api.example/v1/\"\n{extra}\n"
        );
        Config::from_toml(&text, &pepper())
            .map(|c| {
                let p = &c.providers[&ProviderName::new(provider)];
                (p.responses, p.responses_url.clone())
            })
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        with("direct", "kind = \"openai\"\nresponses = true"),
        Ok((true, "https://api.example/v1/responses".to_owned()))
    );
    assert_eq!(
        with("plain", "kind = \"openai\"").map(|(on, _)| on),
        Ok(false)
    );
    assert_eq!(
        with("claude", "kind = \"anthropic\"\nresponses = true"),
        Err(
            "providers.claude.responses: only a kind = \"openai\" provider speaks OpenAI's Responses API"
                .to_owned()
        )
    );
    let error = with(
        "direct",
        "kind = \"openai\"\nresponses = true\ntenant_id_as = \"user_id\"",
    )
    .unwrap_err();
    assert!(
        error.starts_with(
            "providers.direct.tenant_id_as: the Responses API takes the tenant as `user`"
        ),
        "{error}"
    );
    assert!(
        with(
            "direct",
            "kind = \"openai\"\nresponses = true\ntenant_id_as = \"user\""
        )
        .is_ok()
    );
}

#[test]
fn the_route_ceiling_is_the_largest_when_every_target_has_one() {
    let text = BASE.replace(
        "api_key_env = \"DEEPSEEK_API_KEY\"",
        "api_key_env = \"DEEPSEEK_API_KEY\"\nmax_tokens_ceiling = 100",
    );
    let config = Config::from_toml(&text, &pepper()).unwrap();
    assert_eq!(config.route("fast").unwrap().max_tokens_ceiling, None);
    let text = text.replace(
        "api_key_env = \"DASHSCOPE_API_KEY\"",
        "api_key_env = \"DASHSCOPE_API_KEY\"\nmax_tokens_ceiling = 300",
    );
    let config = Config::from_toml(&text, &pepper()).unwrap();
    assert_eq!(config.route("fast").unwrap().max_tokens_ceiling, Some(300));
}

#[test]
fn weighted_targets_sort_by_rank_and_complexity_routes_are_checked() {
    let text = BASE.replace(
        "targets = [\"deepseek/deepseek-flash\", \"qwen/qwen-flash\"]",
        "targets = [\"qwen/qwen-flash\", { target = \"deepseek/deepseek-flash\", rank = 0, weight = 3 }]\n[routes.auto]\ncomplexity = { simple = \"fast\", moderate = \"fast\", complex = \"fast\" }",
    );
    let config = Config::from_toml(&text, &pepper()).unwrap();
    let fast = config.route("fast").unwrap();
    let order: Vec<(&str, u32, u32)> = fast
        .targets
        .iter()
        .map(|t| (t.provider.as_str(), t.rank, t.weight))
        .collect();
    assert_eq!(order, [("qwen", 0, 1), ("deepseek", 0, 3)]);
    assert!(config.route("auto").unwrap().complexity.is_some());

    let error = Config::from_toml(&text.replace("weight = 3", "weight = 0"), &pepper())
        .unwrap_err()
        .to_string();
    assert_eq!(error, "routes.fast.targets[1].weight: must be positive");
    let error = Config::from_toml(
        &text.replace("complex = \"fast\"", "complex = \"slow\""),
        &pepper(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        error,
        "routes.auto.complexity.complex: unknown route `slow`"
    );
    let error = Config::from_toml(
        &text.replace("simple = \"fast\"", "simple = \"auto\""),
        &pepper(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        error,
        "routes.auto.complexity.simple: `auto` is a complexity route itself"
    );
}

#[test]
fn the_pepper_comes_from_env_only() {
    assert!(
        Config::from_toml(BASE, &env(&[]))
            .unwrap()
            .key_pepper
            .is_none()
    );
    assert!(
        Config::from_toml(BASE, &pepper())
            .unwrap()
            .key_pepper
            .is_some()
    );
}

#[test]
fn the_example_config_is_valid() {
    let text = include_str!("../../tollgate.example.toml");
    let config = Config::from_toml(text, &env(&[])).unwrap();
    for tier in ["free", "standard", "enterprise"] {
        assert!(config.tiers.contains_key(tier), "{tier}");
    }
    assert_eq!(config.tiers["free"].routes, vec![RouteName::new("fast")]);
}

#[test]
fn every_shipped_catalog_loads_and_claude_s_images_are_held_at_their_own_bound() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = [
        "anthropic",
        "deepseek",
        "google",
        "mistral",
        "openai",
        "qwen",
    ]
    .map(|name| format!("\"prices/{name}.toml\""))
    .join(", ");
    let claude = "[providers.anthropic]\nkind = \"anthropic\"\nbase_url = \"https://api.anthropic.com\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n[routes.claude]\ntargets = [\"anthropic/claude-sonnet-5-5\", \"anthropic/claude-haiku-4-5\"]\n";
    let text = format!("include = [{files}]\n[billing]\ncurrency = \"USD\"\n{claude}{BASE}");
    let config = Config::from_toml_in(&text, dir, &pepper()).unwrap();
    assert_eq!(config.catalogs.len(), 6);
    let route = &config.routes[&RouteName::new("claude")];
    let images: Vec<u64> = route
        .targets
        .iter()
        .map(|t| t.counting.image_tokens)
        .collect();
    assert_eq!(images, [4_800, 1_600]);
}

#[test]
fn the_example_include_line_loads_once_the_example_bills_in_usd() {
    let text = include_str!("../../tollgate.example.toml");
    let line = "# include = [\"prices/deepseek.toml\", \"prices/qwen.toml\"]";
    assert!(text.contains(line));
    let text = text
        .replace(line, &line[2..])
        .replace("currency = \"CNY\"", "currency = \"USD\"");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = Config::from_toml_in(&text, dir, &env(&[])).unwrap();
    assert_eq!(config.catalogs.len(), 2);
    // The example's own deepseek-flash price replaces the catalog's.
    assert_eq!(config.catalogs[0].overridden, 1);
    let flash = &config.prices[&("deepseek".to_owned(), "deepseek-flash".to_owned())];
    assert_eq!(flash.input, PricePerMTok::parse_decimal("2.0").unwrap());
}

#[test]
fn every_problem_is_named_at_its_path_in_one_load() {
    let text = BASE
        .replace(
            "api_key_env = \"DEEPSEEK_API_KEY\"",
            "api_key_env = \"DEEPSEEK_API_KEY\"\nmax_tokens_ceiling = 0",
        )
        .replace("\"qwen/qwen-flash\"", "\"kimi/k2\"")
        .replace("routes = [\"fast\"]", "routes = [\"fast\", \"slow\"]")
        .replace("[tiers.free]", "[ledger]\nmax_batch_rows = 0\n[tiers.free]");
    let errors = Config::from_toml(&text, &pepper()).unwrap_err();
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "ledger.max_batch_rows: must be at least 1",
            "providers.deepseek.max_tokens_ceiling: must be positive",
            "routes.fast.targets[1]: unknown provider `kimi`",
            "tiers.free.routes[1]: unknown route `slow`",
        ]
    );
    assert_eq!(errors.to_string(), lines.join("\n"), "one per line");
}

#[test]
fn a_file_that_is_not_toml_is_one_problem_with_its_line() {
    let errors = Config::from_toml("[server\nlisten = 1", &pepper()).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert!(errors.to_string().contains("line 1"), "{errors}");
}

#[test]
fn several_replicas_without_a_shared_store_are_refused() {
    let config = |storage: &str, vars: &HashMap<String, String>| {
        Config::from_toml(&format!("[storage]\n{storage}\n{BASE}"), vars)
    };
    let error = config("replicas = 3", &pepper()).unwrap_err().to_string();
    assert!(
        error.starts_with("storage.replicas: 3 replicas need a shared quota store"),
        "{error}"
    );
    assert!(config("replicas = 1", &pepper()).is_ok());
    assert!(
        config(
            "replicas = 3\nredis_url = \"redis://127.0.0.1:6379/0\"",
            &pepper()
        )
        .is_ok()
    );
    let mut with_env = pepper();
    with_env.insert(
        "TOLLGATE_REDIS_URL".to_owned(),
        "redis://127.0.0.1:6379/0".to_owned(),
    );
    assert!(config("replicas = 3", &with_env).is_ok());
}

#[test]
fn reconcile_names_configured_providers_and_takes_a_percentage() {
    let good = format!(
        "{BASE}\n[reconcile]\nmax_drift_percent = 2.5\nkey_ids = {{ deepseek = \"key_abc\" }}\n"
    );
    let config = Config::from_toml(&good, &pepper()).unwrap();
    assert_eq!(
        config.reconcile.key_ids.get("deepseek").map(String::as_str),
        Some("key_abc")
    );
    assert_eq!(
        Config::from_toml(BASE, &pepper())
            .unwrap()
            .reconcile
            .max_drift_percent
            .to_bits(),
        2.0f64.to_bits()
    );
    let bad = format!(
        "{BASE}\n[reconcile]\nmax_drift_percent = 120\nkey_ids = {{ kimi = \"key_x\", qwen = \" \" }}\n"
    );
    let errors = Config::from_toml(&bad, &pepper()).unwrap_err();
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "reconcile.max_drift_percent: 120 is not a percentage from 0 to 100",
            "reconcile.key_ids.kimi: names no configured provider",
            "reconcile.key_ids.qwen: is empty",
        ]
    );
}

#[test]
fn an_alert_webhook_is_an_http_url_and_a_tier_may_alert_on_its_rates() {
    let load = |extra: &str| Config::from_toml(&format!("{extra}\n{BASE}"), &pepper());
    for bad in ["ftp://hooks.example/x", "hooks.example/x", "http://"] {
        let error = load(&format!("[alerts]\nwebhook_url = \"{bad}\""))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("alerts.webhook_url: must be an http:// or https:// URL"),
            "{bad}: {error}"
        );
    }
    let config = load("[alerts]\nwebhook_url = \"https://hooks.example/x\"").unwrap();
    assert_eq!(
        config.alerts.webhook_url.as_deref(),
        Some("https://hooks.example/x")
    );
    let alerting = BASE.replace("rpm = 60", "rpm = 60\nrate_mode = \"alert\"");
    let config = Config::from_toml(&alerting, &pepper()).unwrap();
    assert_eq!(
        config.tiers["free"].rate_mode,
        crate::directory::RateMode::Alert
    );
    let loose = BASE.replace("rpm = 60", "rpm = 60\nrate_mode = \"loose\"");
    assert!(Config::from_toml(&loose, &pepper()).is_err());
}

#[test]
fn a_fleet_cap_without_a_shared_store_is_said_to_apply_per_replica_and_zero_caps_are_refused() {
    let text = BASE.replace(
        "api_key_env = \"DEEPSEEK_API_KEY\"",
        "api_key_env = \"DEEPSEEK_API_KEY\"\nfleet_max_concurrency = 20",
    );
    let config = Config::from_toml(&text, &pepper()).unwrap();
    let deepseek = &config.providers[&ProviderName::new("deepseek")];
    assert_eq!(deepseek.fleet_max_concurrency, Some(20));
    let note = deepseek.per_replica_fleet_note(false).unwrap();
    assert!(note.contains("providers.deepseek.fleet_max_concurrency = 20 applies per replica"));
    assert_eq!(deepseek.per_replica_fleet_note(true), None);
    let qwen = &config.providers[&ProviderName::new("qwen")];
    assert_eq!(qwen.per_replica_fleet_note(false), None);

    let zero = BASE
        .replace(
            "api_key_env = \"DEEPSEEK_API_KEY\"",
            "api_key_env = \"DEEPSEEK_API_KEY\"\nfleet_max_concurrency = 0",
        )
        .replace(
            "default_max_tokens = 1024",
            "default_max_tokens = 1024\nmax_in_flight = 0",
        );
    let error = Config::from_toml(&zero, &pepper()).unwrap_err().to_string();
    assert!(
        error.contains("providers.deepseek.fleet_max_concurrency: must be positive"),
        "{error}"
    );
    assert!(
        error.contains("tiers.free.max_in_flight: must be positive"),
        "{error}"
    );
}

#[test]
fn export_sinks_are_checked_at_their_paths_and_their_secrets_read_from_env() {
    let sinks = r#"
[export]
lease_ms = 10000

[[export.sinks]]
name = "meter"
kind = "cloudevents"
url = "https://meter.example/api/v1/events"
auth_env = "METER_TOKEN"

[[export.sinks]]
name = "stripe"
kind = "stripe"
url = "https://api.stripe.com/v1/billing/meter_events"
event_name = "llm_charge"
value = "tokens"
customers = { acme = "cus_1" }
"#;
    let vars = env(&[("TOLLGATE_KEY_PEPPER", "p"), ("METER_TOKEN", "t0ken")]);
    let config = Config::from_toml(&format!("{BASE}\n{sinks}"), &vars).unwrap();
    assert_eq!(config.export.sink_names(), ["meter", "stripe"]);
    assert_eq!(
        config.export.sinks[0].token.as_ref().map(Secret::expose),
        Some("t0ken")
    );
    assert!(matches!(
        &config.export.sinks[1].kind,
        SinkKind::Stripe { value: StripeValue::Tokens, customers, .. } if customers["acme"] == "cus_1"
    ));

    let bad = r#"
[[export.sinks]]
name = "a b"
kind = "kafka"
url = "ftp://x"
auth_env = "UNSET_TOKEN"
timeout_ms = 20000

[[export.sinks]]
name = "s"
kind = "stripe"
url = "http://127.0.0.1:9"
source = "x"
"#;
    let error = Config::from_toml(&format!("{BASE}\n{bad}"), &pepper())
        .unwrap_err()
        .to_string();
    for expected in [
        "export.sinks[0].timeout_ms: must be shorter than export.lease_ms",
        "export.sinks[0].name: must be letters",
        "export.sinks[0].url: must be an http:// or https:// URL",
        "export.sinks[0].auth_env: `UNSET_TOKEN` is not set",
        "export.sinks[0].kind: `kafka` is not `cloudevents` or `stripe`",
        "export.sinks[1].source: is not a setting of kind `stripe`",
        "export.sinks[1].event_name: is required for kind `stripe`",
    ] {
        assert!(error.contains(expected), "{expected}\nin:\n{error}");
    }
}

#[test]
fn a_providers_ca_file_is_read_at_load_relative_to_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("empty.pem"), "not a certificate\n").unwrap();
    for (ca_file, expected) in [
        (
            "missing.pem",
            "providers.deepseek.ca_file: cannot read certificates from",
        ),
        ("empty.pem", "empty.pem holds no PEM certificate"),
    ] {
        let text = BASE.replace(
            "api_key_env = \"DEEPSEEK_API_KEY\"",
            &format!("api_key_env = \"DEEPSEEK_API_KEY\"\nca_file = \"{ca_file}\""),
        );
        let error = Config::from_toml_in(&text, dir.path(), &pepper())
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{expected}\nin:\n{error}");
        assert!(
            error.contains(&dir.path().join(ca_file).display().to_string()),
            "{error}"
        );
    }
}
