//! The decisions: rate, reserve (the typed `RESERVE` call and its reply),
//! settle, and what a tenant, end user or balance has left.

use super::args::{self, ReserveReply, SettleArgs, SettleReply, Threshold};
use super::{
    BudgetMode, Closed, EndUserArgs, EndUserHold, EndUserRateLimited, EndUserTokensLimited,
    Granted, Limits, MONTH_TTL_MS, Nanos, Period, RateDecision, Refusal, Refused, ReservationId,
    ReserveArgs, ReserveRequest, Reserved, Scope, SessionArgs, Settled, SharedQuota, StoreFailure,
    TokenLimitKind, UNITS_PER_REQUEST, Unseeded, amount, bucket_capacity, clamped_max_tokens,
    count, daily_refusal, end_user_ttl_ms, field, keys, monthly_refusal, nanos, number,
    per_minute_refusal, threshold_amount, window, worst_case,
};
use crate::directory::RateMode;
use crate::tenant::book::PassedOver;
use crate::tenant::tokens::TokenRefusal;

impl SharedQuota {
    pub async fn check_rate(
        &self,
        limits: &Limits,
        now_ms: u64,
    ) -> Result<RateDecision, StoreFailure> {
        let reply = self
            .store
            .run(
                &self.store.scripts.rate,
                &[self.keys.buckets()],
                &rate_args(limits, now_ms),
            )
            .await?;
        rate_decision(&reply, limits)
    }

    /// `check_rate`, then `reserve` if the rate allows: one script for both
    /// on the first attempt. `None` when the rate refused.
    pub async fn check_rate_and_reserve(
        &self,
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        meta: &str,
        now_ms: u64,
    ) -> Result<(RateDecision, Option<Reserved>), StoreFailure> {
        let full = worst_case(request, request.max_tokens);
        let call = self.attempt_call(id, request, limits, request.max_tokens, full, meta, now_ms);
        let mut args = rate_args(limits, now_ms);
        args.extend(call.args);
        let reply = self
            .store
            .run(&self.store.scripts.rate_reserve, &call.keys, &args)
            .await?;
        let rate = rate_decision(&reply, limits)?;
        if !rate.allowed {
            return Ok((rate, None));
        }
        let first = self.parse_attempt(
            reply.get(2..).unwrap_or_default(),
            id,
            request,
            limits,
            request.max_tokens,
            full,
            now_ms,
        )?;
        let reserved = self
            .after_first(first, id, request, limits, meta, now_ms)
            .await?;
        self.track(&reserved);
        Ok((rate, Some(reserved)))
    }

    /// Holds the worst case against every scope in one script; `clamp` mode
    /// retries once with what the tightest scope affords.
    /// `id` is the caller's: a refused attempt holds nothing, so the clamped
    /// retry reuses it, and a reply lost to a timeout can be released by it.
    pub async fn reserve(
        &self,
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        meta: &str,
        now_ms: u64,
    ) -> Result<Reserved, StoreFailure> {
        let full = worst_case(request, request.max_tokens);
        let first = self
            .attempt(id, request, limits, request.max_tokens, full, meta, now_ms)
            .await?;
        let reserved = self
            .after_first(first, id, request, limits, meta, now_ms)
            .await?;
        self.track(&reserved);
        Ok(reserved)
    }

    /// A hold Redis took is this replica's until it closes (see `epoch.rs`).
    fn track(&self, reserved: &Reserved) {
        if let Reserved::Granted(granted) = reserved {
            self.store.epochs.opened(granted.id.0);
        }
    }

    /// What follows a first attempt at the full worst case: in `clamp` mode a
    /// budget refusal is retried once with what the tightest scope affords.
    async fn after_first(
        &self,
        first: Attempt,
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        meta: &str,
        now_ms: u64,
    ) -> Result<Reserved, StoreFailure> {
        let full = worst_case(request, request.max_tokens);
        let (scope, remaining) = match first {
            Attempt::Ok(granted) => return Ok(Reserved::Granted(granted)),
            Attempt::Refused(refusal) => return Ok(Reserved::Refused(refusal)),
            Attempt::NeedSeed => return Ok(Reserved::NeedSeed),
            Attempt::NeedEndUser => return Ok(Reserved::NeedEndUser),
            Attempt::NeedCredit => return Ok(Reserved::NeedCredit),
            Attempt::NeedWindow(period) => return Ok(Reserved::NeedWindow(period)),
            Attempt::Budget(scope, remaining) => (scope, remaining),
        };
        // A refused balance says why in its grants' words: one more read, on refusals only.
        let note = match &scope {
            Scope::Credits => self.grants_note(None, now_ms).await,
            Scope::KeyCredits(key) => self.grants_note(Some(key), now_ms).await,
            _ => None,
        };
        let refused = |scope, remaining, needed| {
            Reserved::Refused(Refusal::Budget(Refused {
                scope,
                remaining,
                needed,
                note: note.clone(),
            }))
        };
        if limits.mode != BudgetMode::Clamp {
            return Ok(refused(scope, remaining, full));
        }
        let Some(max_tokens) = clamped_max_tokens(request, remaining, limits.clamp_floor_tokens)
        else {
            return Ok(refused(scope, remaining, full));
        };
        let amount = worst_case(request, max_tokens);
        Ok(
            match self
                .attempt(id, request, limits, max_tokens, amount, meta, now_ms)
                .await?
            {
                Attempt::Ok(granted) => Reserved::Granted(Granted {
                    clamped: true,
                    ..granted
                }),
                Attempt::Refused(refusal) => Reserved::Refused(refusal),
                Attempt::NeedSeed => Reserved::NeedSeed,
                Attempt::NeedEndUser => Reserved::NeedEndUser,
                Attempt::NeedCredit => Reserved::NeedCredit,
                Attempt::NeedWindow(period) => Reserved::NeedWindow(period),
                Attempt::Budget(scope, remaining) => refused(scope, remaining, amount),
            },
        )
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one script call with everything it decides on"
    )]
    async fn attempt(
        &self,
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        max_tokens: u32,
        amount: Nanos,
        meta: &str,
        now_ms: u64,
    ) -> Result<Attempt, StoreFailure> {
        let call = self.attempt_call(id, request, limits, max_tokens, amount, meta, now_ms);
        let reply = self
            .store
            .run(&self.store.scripts.reserve, &call.keys, &call.args)
            .await?;
        self.parse_attempt(&reply, id, request, limits, max_tokens, amount, now_ms)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one script call with everything it decides on"
    )]
    fn attempt_call(
        &self,
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        max_tokens: u32,
        amount: Nanos,
        meta: &str,
        now_ms: u64,
    ) -> ScriptCall {
        let (mut keys, month) = self.book_keys(now_ms);
        let tokens = request
            .input_tokens
            .saturating_add(request.output_tokens(max_tokens));
        let budget = |b: Option<Nanos>| b.map_or_else(|| "-1".to_owned(), |b| b.get().to_string());
        let limit = |l: Option<u64>| l.map_or_else(|| "-1".to_owned(), |l| l.to_string());
        let end_user = request.end_user.as_ref().map(|hold| {
            let window = self.store.calendar.window(hold.limits.period, now_ms);
            keys.push(self.keys.end_user(&hold.id, &window.key));
            let previous = self.previous_window(hold, &window);
            keys.push(self.keys.end_user(&hold.id, &previous.key));
            EndUserArgs {
                field: format!(
                    "{}:{}:{}:{}",
                    keys::hex_id(&hold.id),
                    window.key,
                    hold.limits.period,
                    self.local_day(now_ms)
                ),
                budget: budget(hold.limits.budget),
                rpm: limit(hold.limits.rpm.map(u64::from)),
                ttl: end_user_ttl_ms(&window, now_ms).to_string(),
                daily_tokens: limit(hold.limits.daily_tokens),
                tpm: limit(hold.limits.tpm),
            }
        });
        // Kept while a call of the run may still be open, and its idle time after.
        let session = request.session.as_ref().map(|session| SessionArgs {
            key: self.keys.session(&session.id),
            budget: session.budget.get().to_string(),
            ttl: session
                .idle_ms
                .saturating_add(request.expires_at_ms.saturating_sub(now_ms))
                .max(1)
                .to_string(),
        });
        let args = ReserveArgs {
            now: now_ms.to_string(),
            day: self.today(now_ms),
            month,
            expires_at: request.expires_at_ms.to_string(),
            amount: amount.get().to_string(),
            alert: limits.mode == BudgetMode::Alert,
            tpm_alert: limits.rate_mode == RateMode::Alert,
            minute: (now_ms / 60_000).to_string(),
            tenant_budget: budget(limits.budget),
            key: request.key.as_str(),
            key_budget: budget(request.key_budget),
            feature: &request.feature,
            feature_budget: budget(limits.feature_budgets.get(&request.feature).copied()),
            tokens: tokens.to_string(),
            tpm: limit(limits.tokens.tpm),
            daily: limit(limits.tokens.daily),
            monthly: limit(limits.tokens.monthly),
            meta,
            ttl: MONTH_TTL_MS.to_string(),
            id: id.0.to_string(),
            local_day: self.local_day(now_ms),
            end_user,
            tenant_credits: limits.credits,
            key_credits: request.key_credits,
            periods: [
                limits.period,
                request.key_period,
                limits.feature_period(&request.feature),
            ],
            session,
        };
        ScriptCall {
            keys,
            args: vec![args::json(&args)],
        }
    }

    /// Reads a `RESERVE` reply.
    #[expect(
        clippy::too_many_arguments,
        reason = "a reply is read against everything its script decided on"
    )]
    fn parse_attempt(
        &self,
        reply: &[String],
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        max_tokens: u32,
        amount: Nanos,
        now_ms: u64,
    ) -> Result<Attempt, StoreFailure> {
        let text = field(reply, 0)?;
        let reply = args::reply::<ReserveReply>(text)
            .ok_or_else(|| StoreFailure(format!("unexpected reserve reply `{text}`")))?;
        let tokens = request
            .input_tokens
            .saturating_add(request.output_tokens(max_tokens));
        let end_user = || {
            request
                .end_user
                .as_ref()
                .ok_or_else(|| StoreFailure("an end user's limit without an end user".to_owned()))
        };
        Ok(match reply {
            ReserveReply::Seed => Attempt::NeedSeed,
            ReserveReply::SeedEu => Attempt::NeedEndUser,
            ReserveReply::SeedCredit => Attempt::NeedCredit,
            ReserveReply::SeedW { period } => Attempt::NeedWindow(period),
            ReserveReply::EuRate { units } => {
                let hold = end_user()?;
                let rpm = hold.limits.rpm.unwrap_or(1).max(1);
                let units = u64::try_from(count(&units)?).unwrap_or(0);
                Attempt::Refused(Refusal::EndUserRate(EndUserRateLimited {
                    id: hold.id.clone(),
                    rpm,
                    retry_after_ms: UNITS_PER_REQUEST
                        .saturating_sub(units)
                        .div_ceil(u64::from(rpm)),
                }))
            }
            ReserveReply::EuTokens { .. } => {
                let hold = end_user()?;
                let day_end = self.store.calendar.window(Period::Day, now_ms).end_ms;
                Attempt::Refused(Refusal::EndUserTokens(EndUserTokensLimited {
                    id: hold.id.clone(),
                    kind: TokenLimitKind::Daily,
                    limit: hold.limits.daily_tokens.unwrap_or(0),
                    needed: tokens,
                    retry_after_ms: day_end.saturating_sub(now_ms),
                }))
            }
            ReserveReply::EuTpm { units } => {
                let hold = end_user()?;
                let tpm = hold.limits.tpm.unwrap_or(1).max(1);
                let missing = (i128::from(tokens) * 60_000 - i128::from(count(&units)?)).max(0);
                Attempt::Refused(Refusal::EndUserTokens(EndUserTokensLimited {
                    id: hold.id.clone(),
                    kind: TokenLimitKind::PerMinute,
                    limit: tpm,
                    needed: tokens,
                    retry_after_ms: u64::try_from(missing / i128::from(tpm)).unwrap_or(u64::MAX),
                }))
            }
            ReserveReply::Budget { scope, remaining } => {
                let remaining = Nanos::new(u64::try_from(count(&remaining)?).unwrap_or(0));
                Attempt::Budget(refusing_scope(&scope, request), remaining)
            }
            ReserveReply::Tokens { limit, value } => {
                let value = count(&value)?;
                let refusal = self.tokens_refusal(&limit, value, limits, tokens, now_ms);
                Attempt::Refused(Refusal::Tokens(refusal))
            }
            ok @ ReserveReply::Ok { .. } => {
                Attempt::Ok(granted(&ok, id, limits, max_tokens, amount)?)
            }
        })
    }

    /// The refusal for the tenant's token limit a `RESERVE` reply names,
    /// built as the book builds its own, so an answer does not depend on
    /// which store gave it. Only the per-minute wait needs the script's count
    /// (`value`, the bucket's units); a day's or month's runs to its end.
    fn tokens_refusal(
        &self,
        limit: &str,
        value: i64,
        limits: &Limits,
        tokens: u64,
        now_ms: u64,
    ) -> TokenRefusal {
        let calendar = &self.store.calendar;
        let counts = &limits.tokens;
        match limit {
            "monthly" => monthly_refusal(counts.monthly.unwrap_or(0), tokens, calendar, now_ms),
            "daily" => daily_refusal(counts.daily.unwrap_or(0), tokens, calendar, now_ms),
            _ => per_minute_refusal(counts.tpm.unwrap_or(0), tokens, i128::from(value)),
        }
    }

    /// Commits `charged`, releases the rest; a second settle of the same id is a no-op.
    pub async fn settle(
        &self,
        id: ReservationId,
        charged: Nanos,
        used_tokens: u64,
        limits: &Limits,
        thresholds: &[u32],
        now_ms: u64,
    ) -> Result<Closed, StoreFailure> {
        let (keys, month) = self.book_keys(now_ms);
        let args = SettleArgs {
            now: now_ms.to_string(),
            id: id.0.to_string(),
            charged: charged.get().to_string(),
            used_tokens: used_tokens.to_string(),
            month,
            day: self.today(now_ms),
            tpm: limits
                .tokens
                .tpm
                .map_or_else(|| "-1".to_owned(), |t| t.to_string()),
            end_users: self.end_user_windows(now_ms),
            period: limits.period,
            thresholds: limits.budget.map_or_else(Vec::new, |budget| {
                thresholds
                    .iter()
                    .map(|percent| Threshold {
                        percent: percent.to_string(),
                        amount: threshold_amount(budget, *percent).get().to_string(),
                    })
                    .collect()
            }),
        };
        let reply = self
            .store
            .run_for(&self.store.scripts.settle, &keys, &args)
            .await?;
        self.store.epochs.closed(id.0);
        let (held, committed, reserved, fired) = match reply {
            SettleReply::Closed => return Ok(Closed::unchanged(Settled::AlreadyClosed)),
            SettleReply::Lost => return Ok(Closed::unchanged(Settled::Lost)),
            SettleReply::Ok {
                held,
                committed,
                reserved,
                fired,
            } => (held, committed, reserved, fired),
        };
        Ok(Closed {
            settled: Settled::Committed {
                reserved: amount(&held)?,
            },
            committed: amount(&committed)?,
            reserved: amount(&reserved)?,
            fired: fired.iter().filter_map(|p| p.parse().ok()).collect(),
        })
    }

    /// Committed and reserved this month (`None`: not seeded yet).
    /// The tenant's committed spend in its budget's `period` and what calls
    /// in flight hold, or which hash must be seeded first.
    pub async fn status(
        &self,
        period: Period,
        now_ms: u64,
    ) -> Result<Result<(Nanos, Nanos), Unseeded>, StoreFailure> {
        let (month_key, previous_key, _) = self.month_keys(now_ms);
        let committed_in = match period {
            Period::Month => month_key.clone(),
            other => self
                .keys
                .window(&self.store.calendar.window(other, now_ms).key),
        };
        let reply = self
            .store
            .run(
                &self.store.scripts.status,
                &[month_key, previous_key, committed_in],
                &[],
            )
            .await?;
        Ok(match field(&reply, 0)? {
            "seed" => Err(Unseeded::Month),
            "seed_w" => Err(Unseeded::Window(period)),
            _ => Ok((nanos(&reply, 1)?, nanos(&reply, 2)?)),
        })
    }

    /// An end user's committed in their current window (`None`: not seeded,
    /// the ledger has it) and what their calls hold, in this window or the one before.
    pub async fn end_user_status(
        &self,
        hold: &EndUserHold,
        now_ms: u64,
    ) -> Result<(Option<Nanos>, Nanos), StoreFailure> {
        let window = self.store.calendar.window(hold.limits.period, now_ms);
        let key = self.keys.end_user(&hold.id, &window.key);
        let previous = self.previous_window(hold, &window);
        let before = self.keys.end_user(&hold.id, &previous.key);
        let reply = self
            .store
            .run(&self.store.scripts.end_user_status, &[key, before], &[])
            .await?;
        if field(&reply, 0)? == "seed" {
            return Ok((None, nanos(&reply, 1)?));
        }
        Ok((Some(nanos(&reply, 1)?), nanos(&reply, 2)?))
    }
}

enum Attempt {
    Ok(Granted),
    Budget(Scope, Nanos),
    Refused(Refusal),
    NeedSeed,
    NeedEndUser,
    NeedCredit,
    NeedWindow(Period),
}

/// A held reservation, from `RESERVE`'s `ok` reply.
fn granted(
    reply: &ReserveReply,
    id: ReservationId,
    limits: &Limits,
    max_tokens: u32,
    amount: Nanos,
) -> Result<Granted, StoreFailure> {
    let ReserveReply::Ok {
        over,
        committed,
        reserved,
        units,
        balance,
        over_tpm,
        tpm_alert,
    } = reply
    else {
        return Err(StoreFailure("not a hold".to_owned()));
    };
    // `amount` names the hold here; the script's decimals are read by `super::amount`.
    let money = super::amount;
    let (committed, reserved) = (money(committed)?, money(reserved)?);
    let units = count(units)?;
    let remaining = if limits.credits {
        Some(money(balance)?)
    } else {
        limits
            .budget
            .map(|b| b.saturating_sub(committed.saturating_add(reserved)))
    };
    Ok(Granted {
        id,
        amount,
        max_tokens,
        clamped: false,
        remaining,
        over_budget: *over,
        over_tpm: over_tpm.then_some(PassedOver {
            first_in_minute: *tpm_alert,
        }),
        tokens: limits.tokens.tpm.map(|tpm| window(tpm, i128::from(units))),
    })
}

/// The scope a `RESERVE` budget refusal names.
fn refusing_scope(name: &str, request: &ReserveRequest) -> Scope {
    match (name, &request.end_user) {
        ("key", _) => Scope::Key(request.key.clone()),
        ("feature", _) => Scope::Feature(request.feature.clone()),
        ("end_user", Some(hold)) => Scope::EndUser(hold.id.clone()),
        ("session", _) => request
            .session
            .as_ref()
            .map_or(Scope::Tenant, |session| Scope::Session(session.id.clone())),
        ("credits", _) => Scope::Credits,
        ("key_credits", _) => Scope::KeyCredits(request.key.clone()),
        _ => Scope::Tenant,
    }
}

/// A script's keys and arguments.
struct ScriptCall {
    keys: Vec<String>,
    args: Vec<String>,
}

/// `RATE`'s six arguments (see `rate_fn` in `scripts.rs`).
fn rate_args(limits: &Limits, now_ms: u64) -> Vec<String> {
    let alert_only = limits.rate_mode == RateMode::Alert;
    vec![
        now_ms.to_string(),
        limits.rpm.max(1).to_string(),
        bucket_capacity(limits).to_string(),
        UNITS_PER_REQUEST.to_string(),
        if alert_only { "1" } else { "0" }.to_owned(),
        (now_ms / 60_000).to_string(),
    ]
}

/// Reads a `RATE` reply (also the head of a `RATE_RESERVE` one): `0`
/// refused, `1` allowed, `2` passed over an alert-only limit, `3` the
/// first passed over it in its minute.
fn rate_decision(reply: &[String], limits: &Limits) -> Result<RateDecision, StoreFailure> {
    let verdict = field(reply, 0)?;
    let units = number(reply, 1)?;
    let decision =
        RateDecision::from_bucket(verdict == "1", u64::try_from(units).unwrap_or(0), limits);
    Ok(match verdict {
        "2" | "3" => decision.passed_over(PassedOver {
            first_in_minute: verdict == "3",
        }),
        _ => decision,
    })
}
