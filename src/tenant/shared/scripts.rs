//! The Lua scripts behind every shared quota decision. Each runs atomically
//! in Redis, so replicas never decide on the same remaining budget twice.
//! They are the budget rule of `tenant/book.rs` (the in-memory store) written
//! again for Redis; `tests/api/differential.rs` pairs the two, answer for answer.
//! All keys of one tenant carry its `{tenant}` hash tag (one Cluster slot).
//!
//! Money and token counts are integers; Lua reads them as doubles, exact
//! below 2^53 (9,007,199 currency units in nanos), and every update goes
//! through `HINCRBY` with an integer string, so stored values stay exact.
//!
//! Months, days and weeks are the billing time zone's.
//!
//! Month hash fields: `seeded`, `c`/`r` (tenant committed/reserved),
//! `k:<key>:c|r`, `f:<feature>:c|r`, `tm` (tokens this month, held
//! included), `td:<day>` (tokens that day), `a:<percent>` (alert fired).
//! A held reservation is `amount|tokens|month|day|key|feature|end user|meta`,
//! its end user `hex id:window:period:local day` (empty without one), then
//! `#` and its session's hash where its tier caps a session; a `C` before it
//! marks one counted in the credit hash's `r`.
//!
//! A closed hold leaves a key `<held>:x:<id>` for five minutes (a settle
//! arrives well within that, a retried one too), so a settle can tell a hold
//! closed before (`closed`) from one the store never had (`lost`).
//!
//! The credit hash (`…:c`, no expiry) holds prepaid balances: `seeded`, the
//! tenant's top-ups `b`, its lifetime spend `c` and what calls in flight hold
//! `r`, the same per key (`k:<key>:b|c|r`), and `t:<ledger row>` for each
//! top-up added, so one is never added twice. Once seeded, every reservation
//! of the tenant is counted in it, whether or not it draws on a balance, so
//! a tenant or key moved onto credits finds its spend and calls in flight there.
//!
//! A window hash (`…:w:<day, week or lifetime key>`) holds what the tenant
//! (`c`), each key (`k:<key>:c`) and each feature (`f:<feature>:c`) spent in
//! that day, ISO week or lifetime, for budgets that run over one, and `seeded`;
//! every close adds to each window hash that is seeded. Reservations stay in
//! the month hash's `r` fields, and a decision counts last month's too (calls
//! held across the month's end), so no boundary drops a call in flight.
//!
//! An end user's hash (`…:u:<hex id>:<window>`, one per budget period) holds
//! `seeded`, `c`/`r`, the request bucket `ru`/`rat`, the tokens bucket `tu`/`tat`
//! and `td:<local day>`
//! (tokens that day, held included); it expires a margin
//! after its period ends, so Redis keeps only the end users active in it.
//!
//! A session's hash (`…:s:<hex id>`) holds what one agent run spent (`c`)
//! and holds (`r`); each reservation pushes its expiry to the session's idle
//! time (`tenant/sessions.rs` keeps the same rule in memory).

/// Shared by every script: number parsing and integer formatting.
macro_rules! prelude {
    () => {
        r"
local function n(x) return tonumber(x) or 0 end
local function s(x) return string.format('%d', x) end
local function parse(rec)
  local c, rest = string.match(rec, '^(C?)(.*)$')
  local a, est, mo, day, key, feat, eu = string.match(rest, '^(%d+)|(%d+)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|')
  return a, est, mo, day, key, feat, eu, c == 'C'
end
-- A closed hold leaves a mark for a while, in the tenant's slot: a settle
-- that finds neither the hold nor its mark knows the store lost its state
-- (a restart), not that the hold was closed before.
local function closed_mark(held, id) return held .. ':x:' .. id end
-- Sets a counter to `v` where that raises it: a start from the ledger never
-- counts twice what a settle already added.
local function raise(h, f, v)
  if tonumber(v) > n(redis.call('HGET', h, f)) then redis.call('HSET', h, f, v) end
end
-- A record's end-user field, and its session's hash after a `#` (if any).
local function split_session(eu)
  local at = string.find(eu, '#', 1, true)
  if not at then return eu, nil end
  return string.sub(eu, 1, at - 1), string.sub(eu, at + 1)
end
local function mark_closed(held, id) redis.call('SET', closed_mark(held, id), '1', 'PX', 300000) end
-- A balance's grants (`tenant/grants.rs`): the field `gl` (the tenant's) or
-- `k:<key>:gl` holds a JSON list, in drawing order, of `id|priority|kind|
-- starts|expires|closes|amount` (kind 0 promotional, 1 paid; -1: never),
-- `gp` the list of those fields; `gd:<id>` what a grant drew, `gx:<id>` set
-- once its breakage is booked.
local function pool_field(key)
  if key == '' then return 'gl' end
  return 'k:' .. key .. ':gl'
end
local function grant(rec)
  local id, p, k, st, e, c, a = string.match(rec, '^(%d+)|(-?%d+)|(%d)|(%d+)|(-?%d+)|(-?%d+)|(%d+)$')
  return {id = id, p = tonumber(p), k = tonumber(k), s = tonumber(st), e = tonumber(e), c = tonumber(c), a = tonumber(a), rec = rec}
end
local function grants(cr, f)
  local raw = redis.call('HGET', cr, f)
  local out = {}
  if not raw then return out end
  for _, rec in ipairs(cjson.decode(raw)) do out[#out + 1] = grant(rec) end
  return out
end
local function expired(g, now) return g.e >= 0 and g.e <= now end
local function closed(g, now) return expired(g, now) and (g.c < 0 or g.c <= now) end
-- Every started grant's amount, less what expired ones left.
local function grant_limit(cr, f, now)
  local sum = 0
  for _, g in ipairs(grants(cr, f)) do
    if g.s <= now then
      if expired(g, now) then sum = sum + n(redis.call('HGET', cr, 'gd:' .. g.id))
      else sum = sum + g.a end
    end
  end
  return sum
end
-- A charge drawn from the valid grants in order, then from expired ones not closed.
local function draw(cr, f, charge, now)
  local left = tonumber(charge)
  if left <= 0 then return end
  local list = grants(cr, f)
  for pass = 1, 2 do
    for _, g in ipairs(list) do
      if left <= 0 then return end
      local open = g.s <= now and not closed(g, now)
      if open and expired(g, now) == (pass == 2) then
        local take = math.min(left, g.a - n(redis.call('HGET', cr, 'gd:' .. g.id)))
        if take > 0 then
          redis.call('HINCRBY', cr, 'gd:' .. g.id, s(take))
          left = left - take
        end
      end
    end
  end
end
local function before(x, y)
  if x.p ~= y.p then return x.p < y.p end
  if x.k ~= y.k then return x.k < y.k end
  local xe, ye = x.e, y.e
  if xe < 0 then xe = math.huge end
  if ye < 0 then ye = math.huge end
  if xe ~= ye then return xe < ye end
  return tonumber(x.id) < tonumber(y.id)
end
local function add_grant(cr, key, rec)
  local f = pool_field(key)
  local list = grants(cr, f)
  local new = grant(rec)
  for _, g in ipairs(list) do if g.id == new.id then return end end
  list[#list + 1] = new
  table.sort(list, before)
  local recs = {}
  for i, g in ipairs(list) do recs[i] = g.rec end
  redis.call('HSET', cr, f, cjson.encode(recs))
  local pools = cjson.decode(redis.call('HGET', cr, 'gp') or '[]')
  for _, p in ipairs(pools) do if p == f then return end end
  pools[#pools + 1] = f
  redis.call('HSET', cr, 'gp', cjson.encode(pools))
end
local function add_top_up(cr, t)
  add_grant(cr, t.key, t.grant)
  if redis.call('HSETNX', cr, 't:' .. t.row, '1') == 0 then return end
  local f = 'b'
  if t.key ~= '' then f = 'k:' .. t.key .. ':b' end
  redis.call('HINCRBY', cr, f, t.amount)
end
-- The end users' windows now (`EndUserWindows`): a lifetime's key is itself.
local function euctx(E)
  E.lifetime = 'lifetime'
  return E
end
-- Applies `set(field, amount)` to each scope of a `ScopeSpend`.
local function each_scope(C, set)
  set('c', C.tenant)
  for key, amount in pairs(C.keys) do set('k:' .. key .. ':c', amount) end
  for feature, amount in pairs(C.features) do set('f:' .. feature .. ':c', amount) end
end
"
    };
}

/// The request bucket. KEYS: buckets. ARGV: now, rpm, capacity units, units
/// per request, alert only (`1`: `rate_mode = "alert"`), the clock minute.
/// Returns {verdict, units left}: `0` refused, `1` allowed, `2` passed over
/// an alert-only limit (taking nothing: the bucket is empty), `3` the first
/// passed over it in its minute (`xr` keeps the minute; `tenant/book.rs`
/// keeps the same rule in `check_rate`).
macro_rules! rate_fn {
    () => {
        r"
local function rate(KEYS, ARGV)
local now, rpm, cap, per = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local b = redis.call('HMGET', KEYS[1], 'ru', 'rat')
local units, at = tonumber(b[1]) or cap, tonumber(b[2]) or now
if now > at then units = units + (now - at) * rpm; at = now end
if units > cap then units = cap end
local allowed = 0
if units >= per then
  units = units - per; allowed = 1
elseif ARGV[5] == '1' then
  allowed = 2
  if redis.call('HGET', KEYS[1], 'xr') ~= ARGV[6] then
    redis.call('HSET', KEYS[1], 'xr', ARGV[6]); allowed = 3
  end
end
redis.call('HSET', KEYS[1], 'ru', s(units), 'rat', s(at))
redis.call('PEXPIRE', KEYS[1], 86400000)
return {s(allowed), s(units)}
end
"
    };
}

/// See `rate_fn`.
pub const RATE: &str = concat!(prelude!(), rate_fn!(), "return rate(KEYS, ARGV)\n");

/// A reservation. KEYS: month, buckets, held, expiry, credit, previous month,
/// the day, week and lifetime window hashes, and when the request has an end
/// user, their hashes for the current window and the one before it: calls
/// held across the end of an end user's period are still in the previous
/// window's `r`, and count, as the book carries them (`tenant/book.rs`,
/// paired by `tests/api/differential.rs`).
/// ARGV: one JSON object, `ReserveArgs` in `shared/args.rs` (each field is
/// read here by its name; money and counts are decimal strings, `-1` for no
/// limit): `now`, `day`, `month`, `expires_at`, `amount`, `alert` (over the
/// budget is allowed), `tpm_alert` (over the tokens per minute is allowed,
/// and charged; the first of each clock `minute` is flagged, `xt` in the
/// buckets hash keeps it), `minute`, `tenant_budget`, `key`, `key_budget`, `feature`,
/// `feature_budget`, `tokens`, `tpm`, `daily`, `monthly`, `meta`, `ttl`,
/// `id` (chosen by the caller, so a reservation whose reply was lost can
/// still be released), `local_day`, `end_user` (absent without one: `field`,
/// `budget`, `rpm`, `ttl`, `daily_tokens`, `tpm`), `tenant_credits`,
/// `key_credits`, `periods` (the tenant's, key's and feature's budgets' `day`,
/// `week`, `month` or `lifetime`) and `session` (absent without one: `key`,
/// `budget`, `ttl`).
/// Returns one JSON object, `ReserveReply` in `args.rs`, named by its `kind`:
/// `seed`, `seed_w` (`period`), `seed_eu`, `seed_credit`, `eu_rate` (`units`),
/// `eu_tokens` (`used` today), `eu_tpm` (`units`), `budget` (`scope`,
/// `remaining`), `tokens` (`limit`: `monthly`, `daily` or `tpm`; `value`), or
/// `ok` (`over`, `committed`, `reserved`, `units` of tpm or -1, `balance` of
/// the tenant's credits or -1, `over_tpm` and `tpm_alert`: passed over an
/// alert-only tokens per minute, the first time in its minute).
macro_rules! reserve_fn {
    () => {
        r"
local function reserve(KEYS, A)
local m, b, h, x = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('HEXISTS', m, 'seeded') == 0 then return cjson.encode({kind = 'seed'}) end
local W = {day = KEYS[7], week = KEYS[8], lifetime = KEYS[9]}
local periods = A.periods
local budgets = {tonumber(A.tenant_budget), tonumber(A.key_budget), tonumber(A.feature_budget)}
for i, per in ipairs(periods) do
  if per ~= 'month' and budgets[i] >= 0 and redis.call('HEXISTS', W[per], 'seeded') == 0 then
    return cjson.encode({kind = 'seed_w', period = per})
  end
end
local now, amount = tonumber(A.now), tonumber(A.amount)
local kc, kr = 'k:' .. A.key .. ':c', 'k:' .. A.key .. ':r'
local fc, fr = 'f:' .. A.feature .. ':c', 'f:' .. A.feature .. ':r'
local td = 'td:' .. A.day
local v = redis.call('HMGET', m, 'c', 'r', kc, kr, fc, fr, 'tm', td)
local E = A.end_user or {}
local eu, ev, eurpm = KEYS[10], nil, -1
if eu then
  if redis.call('HEXISTS', eu, 'seeded') == 0 then return cjson.encode({kind = 'seed_eu'}) end
  ev = redis.call('HMGET', eu, 'c', 'r', 'ru', 'rat')
  eurpm = tonumber(E.rpm)
  if eurpm >= 0 then
    local cap = eurpm * 60000
    local units, at = tonumber(ev[3]) or cap, tonumber(ev[4]) or now
    if now > at then units = units + (now - at) * eurpm; at = now end
    if units > cap then units = cap end
    if units < 60000 then return cjson.encode({kind = 'eu_rate', units = s(units)}) end
    ev[3], ev[4] = units - 60000, at
  end
end
local scope, left
local function consider(name, budget, c, r)
  if budget < 0 then return end
  local l = budget - c - r
  if l < 0 then l = 0 end
  if left == nil or l < left then scope, left = name, l end
end
-- Calls held across the month's end are still in last month's reserved.
local pv = redis.call('HMGET', KEYS[6], 'r', kr, fr)
local function spent(per, field, month)
  if per == 'month' then return month end
  return n(redis.call('HGET', W[per], field))
end
-- Likewise an end user's calls held across the end of their window.
local evp = 0
if eu and KEYS[11] and KEYS[11] ~= eu then evp = n(redis.call('HGET', KEYS[11], 'r')) end
consider('tenant', budgets[1], spent(periods[1], 'c', n(v[1])), n(v[2]) + n(pv[1]))
consider('key', budgets[2], spent(periods[2], kc, n(v[3])), n(v[4]) + n(pv[2]))
consider('feature', budgets[3], spent(periods[3], fc, n(v[5])), n(v[6]) + n(pv[3]))
if eu then consider('end_user', tonumber(E.budget), n(ev[1]), n(ev[2]) + evp) end
local S = A.session or {}
local sk = S.key or ''
if sk ~= '' then
  local sv = redis.call('HMGET', sk, 'c', 'r')
  consider('session', tonumber(S.budget), n(sv[1]), n(sv[2]))
end
local cr, tcred, kcred = KEYS[5], A.tenant_credits, A.key_credits
local counted = redis.call('HEXISTS', cr, 'seeded') == 1
local graded = redis.call('HEXISTS', cr, 'gv') == 1
if (tcred or kcred) and not (counted and graded) then return cjson.encode({kind = 'seed_credit'}) end
if tcred or kcred then
  local now = tonumber(A.now)
  local cv = redis.call('HMGET', cr, 'c', 'r', 'k:' .. A.key .. ':c', kr)
  if tcred then consider('credits', grant_limit(cr, 'gl', now), n(cv[1]), n(cv[2])) end
  if kcred then consider('key_credits', grant_limit(cr, pool_field(A.key), now), n(cv[3]), n(cv[4])) end
end
local over = '0'
if left ~= nil and amount > left then
  if not A.alert then return cjson.encode({kind = 'budget', scope = scope, remaining = s(left)}) end
  over = '1'
end
local est, tpm, daily, monthly = tonumber(A.tokens), tonumber(A.tpm), tonumber(A.daily), tonumber(A.monthly)
if eu and tonumber(E.daily_tokens) >= 0 then
  local used = n(redis.call('HGET', eu, 'td:' .. A.local_day))
  if used + est > tonumber(E.daily_tokens) then return cjson.encode({kind = 'eu_tokens', used = s(used)}) end
end
local eutpm, eutu = -1, nil
if eu then eutpm = tonumber(E.tpm) end
if eutpm >= 0 then
  local cap = eutpm * 60000
  local t = redis.call('HMGET', eu, 'tu', 'tat')
  eutu = tonumber(t[1]) or cap
  local at = tonumber(t[2]) or now
  if now > at then eutu = eutu + (now - at) * eutpm end
  if eutu > cap then eutu = cap end
  if est * 60000 > eutu then return cjson.encode({kind = 'eu_tpm', units = s(eutu)}) end
  eutu = eutu - est * 60000
end
if monthly >= 0 and n(v[7]) + est > monthly then return cjson.encode({kind = 'tokens', limit = 'monthly', value = s(n(v[7]))}) end
if daily >= 0 and n(v[8]) + est > daily then return cjson.encode({kind = 'tokens', limit = 'daily', value = s(n(v[8]))}) end
local units, over_tpm, tpm_alert = -1, false, false
if tpm >= 0 then
  local cap = tpm * 60000
  local t = redis.call('HMGET', b, 'tu', 'tat')
  units = tonumber(t[1]) or cap
  local at = tonumber(t[2]) or now
  if now > at then units = units + (now - at) * tpm; at = now end
  if units > cap then units = cap end
  redis.call('HSET', b, 'tu', s(units), 'tat', s(at))
  if est * 60000 > units then
    if not A.tpm_alert then return cjson.encode({kind = 'tokens', limit = 'tpm', value = s(units)}) end
    -- Alert only: charged all the same (the bucket may go below zero), and
    -- the first of its minute alerts (`xt`). Nothing below refuses.
    over_tpm = true
    if redis.call('HGET', b, 'xt') ~= A.minute then redis.call('HSET', b, 'xt', A.minute); tpm_alert = true end
  end
  units = units - est * 60000
  redis.call('HSET', b, 'tu', s(units))
end
local id = A.id
redis.call('HINCRBY', m, 'r', A.amount)
redis.call('HINCRBY', m, kr, A.amount)
redis.call('HINCRBY', m, fr, A.amount)
redis.call('HINCRBY', m, 'tm', A.tokens)
redis.call('HINCRBY', m, td, A.tokens)
if eu then
  redis.call('HINCRBY', eu, 'r', A.amount)
  redis.call('HINCRBY', eu, 'td:' .. A.local_day, A.tokens)
  if eutu then redis.call('HSET', eu, 'tu', s(eutu), 'tat', A.now) end
  if eurpm >= 0 then redis.call('HSET', eu, 'ru', s(ev[3]), 'rat', s(ev[4])) end
  redis.call('PEXPIRE', eu, E.ttl)
end
if sk ~= '' then
  redis.call('HINCRBY', sk, 'r', A.amount)
  redis.call('PEXPIRE', sk, S.ttl)
end
local euf = E.field or ''
if sk ~= '' then euf = euf .. '#' .. sk end
local flag = ''
if counted then
  redis.call('HINCRBY', cr, 'r', A.amount)
  redis.call('HINCRBY', cr, kr, A.amount)
  flag = 'C'
end
redis.call('HSET', h, id, flag .. table.concat({A.amount, A.tokens, A.month, A.day, A.key, A.feature, euf, A.meta}, '|'))
redis.call('ZADD', x, A.expires_at, id)
for _, key in ipairs({m, b, h, x}) do redis.call('PEXPIRE', key, A.ttl) end
local totals = redis.call('HMGET', m, 'c', 'r')
totals = {spent(periods[1], 'c', n(totals[1])), n(totals[2]) + n(pv[1])}
local balance = -1
if tcred then
  local cv = redis.call('HMGET', cr, 'b', 'c', 'r')
  balance = n(cv[1]) - n(cv[2]) - n(cv[3])
  if balance < 0 then balance = 0 end
end
return cjson.encode({kind = 'ok', over = over == '1', committed = s(n(totals[1])), reserved = s(n(totals[2])), units = s(units), balance = s(balance), over_tpm = over_tpm, tpm_alert = tpm_alert})
end
"
    };
}

/// See `reserve_fn`.
pub const RESERVE: &str = concat!(
    prelude!(),
    reserve_fn!(),
    "return {reserve(KEYS, cjson.decode(ARGV[1]))}\n"
);

/// `RATE`, then `RESERVE` if the rate allows: one script where a request
/// would otherwise take two. KEYS: those of `RESERVE` (its buckets are the
/// rate's). ARGV: the six of `RATE`, then the one of `RESERVE`.
/// Returns {'0', units left} when the rate refuses, else {`RATE`'s verdict,
/// units left, the reply of `RESERVE`}.
pub const RATE_RESERVE: &str = concat!(
    prelude!(),
    rate_fn!(),
    reserve_fn!(),
    r"
local r = rate({KEYS[2]}, {ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]})
if r[1] == '0' then return r end
return {r[1], r[2], reserve(KEYS, cjson.decode(ARGV[7]))}
"
);

/// Closes one held reservation: out of `reserved` in its own month, `charged`
/// into `committed` of the current one, its token estimate replaced by `used`;
/// for its end user (`E`: see `euctx`) likewise, in their own windows.
macro_rules! close {
    () => {
        r"
local function close_end_user(eu, a, est, charged, used, E)
  local hex, win, per, day = string.match(eu, '^([^:]*):([^:]*):(%a+):([^:]*)$')
  if not hex or not E then return end
  local held = E.prefix .. hex .. ':' .. win
  if redis.call('EXISTS', held) == 1 then
    redis.call('HINCRBY', held, 'r', s(-tonumber(a)))
    redis.call('HINCRBY', held, 'td:' .. day, s(-tonumber(est)))
  end
  local now = E.prefix .. hex .. ':' .. E[per]
  -- Into a window not started yet too: its seed takes the larger of this and
  -- the ledger's sum (`SEED_END_USER`).
  redis.call('HINCRBY', now, 'c', charged)
  redis.call('HINCRBY', now, 'td:' .. E.today, used)
  -- Tokens held and not used go back to the bucket; the next reserve caps it at full.
  if redis.call('HEXISTS', now, 'tu') == 1 then
    redis.call('HINCRBY', now, 'tu', s((tonumber(est) - tonumber(used)) * 60000))
  end
  redis.call('PEXPIRE', now, E.ttl[per])
end
local function close_session(sk, a, charged)
  if redis.call('EXISTS', sk) == 0 then return end
  redis.call('HINCRBY', sk, 'r', s(-tonumber(a)))
  redis.call('HINCRBY', sk, 'c', charged)
end
local function close_credit(cr, a, key, charged, counted, now)
  if redis.call('HEXISTS', cr, 'seeded') == 0 then return end
  redis.call('HINCRBY', cr, 'c', charged)
  redis.call('HINCRBY', cr, 'k:' .. key .. ':c', charged)
  draw(cr, 'gl', charged, now)
  draw(cr, pool_field(key), charged, now)
  if counted then
    redis.call('HINCRBY', cr, 'r', s(-tonumber(a)))
    redis.call('HINCRBY', cr, 'k:' .. key .. ':r', s(-tonumber(a)))
  end
end
local function close_windows(windows, key, feat, charged)
  for _, w in ipairs(windows) do
    if redis.call('HEXISTS', w, 'seeded') == 1 then
      redis.call('HINCRBY', w, 'c', charged)
      redis.call('HINCRBY', w, 'k:' .. key .. ':c', charged)
      redis.call('HINCRBY', w, 'f:' .. feat .. ':c', charged)
    end
  end
end
local function close(rec, charged, used, cur, prev, curmonth, today, b, tpm, E, cr, windows, now)
  local a, est, mo, day, key, feat, eu, counted = parse(rec)
  local sess
  eu, sess = split_session(eu)
  if sess then close_session(sess, a, charged) end
  if eu ~= '' then close_end_user(eu, a, est, charged, used, E) end
  close_credit(cr, a, key, charged, counted, now)
  close_windows(windows, key, feat, charged)
  local hm = cur
  if mo ~= curmonth then hm = prev end
  for _, f in ipairs({'r', 'k:' .. key .. ':r', 'f:' .. feat .. ':r'}) do
    redis.call('HINCRBY', hm, f, s(-tonumber(a)))
  end
  for _, f in ipairs({'c', 'k:' .. key .. ':c', 'f:' .. feat .. ':c'}) do
    redis.call('HINCRBY', cur, f, charged)
  end
  redis.call('HINCRBY', hm, 'tm', s(-tonumber(est)))
  redis.call('HINCRBY', hm, 'td:' .. day, s(-tonumber(est)))
  redis.call('HINCRBY', cur, 'tm', used)
  redis.call('HINCRBY', cur, 'td:' .. today, used)
  if tpm >= 0 then
    local cap = tpm * 60000
    local units = n(redis.call('HGET', b, 'tu')) + (tonumber(est) - tonumber(used)) * 60000
    if units > cap then units = cap end
    redis.call('HSET', b, 'tu', s(units))
  end
  return a, est
end
"
    };
}

/// KEYS: month, buckets, held, expiry, credit, previous month, the day, week
/// and lifetime window hashes.
/// ARGV: one JSON object, `SettleArgs` in `args.rs`: `id`, `charged`,
/// `used_tokens`, `month`, `day`, `tpm` (-1: none), `end_users` (see
/// `euctx`), `period` (of the tenant's budget) and `thresholds` (`percent`,
/// the committed `amount` that reaches it, in that period).
/// Returns one JSON object, `SettleReply`: `closed` (closed before: settled,
/// or committed as an orphan), `lost` (neither held nor closed here: the
/// store lost its state) or `ok` (`held`, `committed`, `reserved`, `fired`
/// percents, absent when none).
pub const SETTLE: &str = concat!(
    prelude!(),
    close!(),
    r"
local A = cjson.decode(ARGV[1])
local rec = redis.call('HGET', KEYS[3], A.id)
if not rec then
  if redis.call('EXISTS', closed_mark(KEYS[3], A.id)) == 1 then return {cjson.encode({kind = 'closed'})} end
  -- Redis lost the hold (a restart): the call happened, so its charge counts
  -- where it can without the hold's record, the tenant's month and windows;
  -- the mark keeps a retried settle from counting it twice.
  redis.call('HINCRBY', KEYS[1], 'c', A.charged)
  redis.call('HINCRBY', KEYS[1], 'tm', A.used_tokens)
  redis.call('HINCRBY', KEYS[1], 'td:' .. A.day, A.used_tokens)
  for _, w in ipairs({KEYS[7], KEYS[8], KEYS[9]}) do
    if redis.call('HEXISTS', w, 'seeded') == 1 then redis.call('HINCRBY', w, 'c', A.charged) end
  end
  mark_closed(KEYS[3], A.id)
  return {cjson.encode({kind = 'lost'})}
end
redis.call('HDEL', KEYS[3], A.id)
redis.call('ZREM', KEYS[4], A.id)
mark_closed(KEYS[3], A.id)
local a = close(rec, A.charged, A.used_tokens, KEYS[1], KEYS[6], A.month, A.day, KEYS[2], tonumber(A.tpm), euctx(A.end_users), KEYS[5], {KEYS[7], KEYS[8], KEYS[9]}, tonumber(A.now))
local th = ({day = KEYS[7], week = KEYS[8], lifetime = KEYS[9]})[A.period] or KEYS[1]
local committed = n(redis.call('HGET', th, 'c'))
local reserved = n(redis.call('HGET', KEYS[1], 'r')) + n(redis.call('HGET', KEYS[6], 'r'))
local out = {kind = 'ok', held = a, committed = s(committed), reserved = s(reserved)}
local fired = {}
for _, t in ipairs(A.thresholds) do
  if committed >= tonumber(t.amount) and redis.call('HSETNX', th, 'a:' .. t.percent, '1') == 1 then
    fired[#fired + 1] = t.percent
  end
end
-- Lua's JSON cannot tell an empty list from an empty object: none is absent.
if #fired > 0 then out.fired = fired end
return {cjson.encode(out)}
"
);

/// Lists reservations past their expiry without closing them: the sweeping
/// replica first asks the ledger how each request ended (`CLOSE_REQUEST`).
/// KEYS: expiry, held. ARGV: now, limit. Returns {id, record, ...}.
pub const EXPIRED: &str = r"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local rec = redis.call('HGET', KEYS[2], id)
  if rec then
    out[#out + 1] = id
    out[#out + 1] = rec
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
";

/// Starts a tenant's month from the ledger, once: a concurrent seed from
/// another replica wins and this one changes nothing. Settles may have
/// arrived first (of last month's reservations, or of holds a restarted Redis
/// lost); the ledger has their rows once written (the seeding replica flushes
/// its own first), so each counter starts from the larger of the two sums:
/// never below either, and a call counted in both is not counted twice.
/// KEYS: month. ARGV: one JSON object, `SeedArgs` in `args.rs`: `ttl`,
/// `committed` (a `ScopeSpend`), `tokens_month`, `day`, `tokens_today`,
/// `reached` (alert percents already reached).
pub const SEED: &str = concat!(
    prelude!(),
    r"
local A = cjson.decode(ARGV[1])
local m = KEYS[1]
if redis.call('HSETNX', m, 'seeded', '1') == 0 then return {'already'} end
each_scope(A.committed, function(f, v) raise(m, f, v) end)
raise(m, 'tm', A.tokens_month)
raise(m, 'td:' .. A.day, A.tokens_today)
for _, percent in ipairs(A.reached) do redis.call('HSETNX', m, 'a:' .. percent, '1') end
redis.call('PEXPIRE', m, A.ttl)
return {'seeded'}
"
);

/// Raises committed counters to the ledger's where the ledger is higher
/// (Redis lost writes, or spend happened on local stores during an outage);
/// never lowers them, since the ledger lags by its unflushed batches.
/// KEYS: month. ARGV: one JSON object, `RaiseArgs` in `args.rs`:
/// `committed` (a `ScopeSpend`), `tokens_month`, `day`, `tokens_today`.
/// Returns one JSON object, `RaiseReply`: `unseeded` | `ok` (`before`: the
/// committed spend before).
pub const RAISE: &str = concat!(
    prelude!(),
    r"
local A = cjson.decode(ARGV[1])
local m = KEYS[1]
if redis.call('HEXISTS', m, 'seeded') == 0 then return {cjson.encode({kind = 'unseeded'})} end
local before = n(redis.call('HGET', m, 'c'))
each_scope(A.committed, function(f, v) raise(m, f, v) end)
raise(m, 'tm', A.tokens_month)
raise(m, 'td:' .. A.day, A.tokens_today)
return {cjson.encode({kind = 'ok', before = s(before)})}
"
);

/// Adds spend settled on a local store after the shared one came back.
/// KEYS: month, then the day, week and lifetime window hashes (those seeded
/// take it too). ARGV: one JSON object, `AbsorbArgs` in `args.rs`:
/// `charged`, `key`, `feature`, `tokens`, `day`.
pub const ABSORB: &str = r"
local A = cjson.decode(ARGV[1])
for i, hash in ipairs(KEYS) do
  if i == 1 or redis.call('HEXISTS', hash, 'seeded') == 1 then
    for _, f in ipairs({'c', 'k:' .. A.key .. ':c', 'f:' .. A.feature .. ':c'}) do
      redis.call('HINCRBY', hash, f, A.charged)
    end
  end
end
redis.call('HINCRBY', KEYS[1], 'tm', A.tokens)
redis.call('HINCRBY', KEYS[1], 'td:' .. A.day, A.tokens)
return {'ok'}
";

/// KEYS: month, previous month, and the hash of the tenant's budget period
/// (the month again for a month). Returns {'seed'} | {'seed_w'} | {'ok',
/// committed in that period, reserved}.
pub const STATUS: &str = concat!(
    prelude!(),
    r"
local v = redis.call('HMGET', KEYS[1], 'seeded', 'c', 'r')
if not v[1] then return {'seed'} end
local c = n(v[2])
if KEYS[3] ~= KEYS[1] then
  local w = redis.call('HMGET', KEYS[3], 'seeded', 'c')
  if not w[1] then return {'seed_w'} end
  c = n(w[2])
end
return {'ok', s(c), s(n(v[3]) + n(redis.call('HGET', KEYS[2], 'r')))}
"
);

/// Starts a window hash from the ledger, once (as `SEED` does a month).
/// KEYS: the window hash. ARGV: one JSON object, `SeedWindowArgs` in
/// `args.rs`: `ttl` (ms) and `committed` (a `ScopeSpend`).
pub const SEED_WINDOW: &str = concat!(
    prelude!(),
    r"
local A = cjson.decode(ARGV[1])
local w = KEYS[1]
if redis.call('HSETNX', w, 'seeded', '1') == 0 then return {'already'} end
each_scope(A.committed, function(f, v) redis.call('HINCRBY', w, f, v) end)
redis.call('PEXPIRE', w, A.ttl)
return {'seeded'}
"
);

/// Closes the held reservation of one request, found by the request id in
/// its meta, after a journal replay: at `charged` (a settle the replica wrote
/// to its journal but not to Redis before it died) or, with `-1`, at its
/// reserved amount (an orphan). Held reservations are few (in flight only).
/// KEYS: those of `SETTLE`.
/// ARGV: one JSON object, `CloseRequestArgs` in `args.rs`: `request` (its
/// id), `charged` and `used_tokens` (-1: the hold's), `month`, `day`,
/// `end_users` (see `SETTLE`).
/// Returns one JSON object, `CloseRequestReply`: `closed` (`id`) | `none`.
pub const CLOSE_REQUEST: &str = concat!(
    prelude!(),
    close!(),
    r#"
local A = cjson.decode(ARGV[1])
local needle = '"request_id":"' .. A.request .. '"'
local all = redis.call('HGETALL', KEYS[3])
for i = 1, #all, 2 do
  local id, rec = all[i], all[i + 1]
  if string.find(rec, needle, 1, true) then
    redis.call('HDEL', KEYS[3], id)
    redis.call('ZREM', KEYS[4], id)
    mark_closed(KEYS[3], id)
    local a, est = parse(rec)
    local charged, used = A.charged, A.used_tokens
    if charged == '-1' then charged = a end
    if used == '-1' then used = est end
    close(rec, charged, used, KEYS[1], KEYS[6], A.month, A.day, KEYS[2], -1, euctx(A.end_users), KEYS[5], {KEYS[7], KEYS[8], KEYS[9]}, tonumber(A.now))
    return {cjson.encode({kind = 'closed', id = id})}
  end
end
return {cjson.encode({kind = 'none'})}
"#
);

/// Starts an end user's window from the ledger, once (as `SEED` does a month).
/// Settles may have landed in the window before it started; the ledger has
/// their rows too once they are written (the seeding replica flushes its own
/// first), so the window starts from the larger of the two sums: never below
/// either, and not the double of a call counted in both.
/// KEYS: the end user's hash. ARGV: one JSON object, `SeedEndUserArgs` in
/// `args.rs`: `committed`, `ttl` (ms), `day` (local), `tokens_today`.
pub const SEED_END_USER: &str = concat!(
    prelude!(),
    r"
local A = cjson.decode(ARGV[1])
if redis.call('HSETNX', KEYS[1], 'seeded', '1') == 1 then
  raise(KEYS[1], 'c', A.committed)
  raise(KEYS[1], 'td:' .. A.day, A.tokens_today)
end
redis.call('PEXPIRE', KEYS[1], A.ttl)
return {'seeded'}
"
);

/// KEYS: the end user's hash, and the one of their previous window (whose
/// calls still held count as reserved). Returns {'seed', reserved} (the
/// window is not started: its spend is the ledger's) | {'ok', committed, reserved}.
pub const END_USER_STATUS: &str = r"
local v = redis.call('HMGET', KEYS[1], 'seeded', 'c', 'r')
local r = tonumber(v[3] or '0')
if KEYS[2] ~= KEYS[1] then r = r + tonumber(redis.call('HGET', KEYS[2], 'r') or '0') end
r = string.format('%.0f', r)
if not v[1] then return {'seed', r} end
return {'ok', v[2] or '0', r}
";

/// Starts the credit hash from the ledger, once: the tenant's and keys'
/// lifetime spend, every grant not added yet (by its row) with what the
/// ledger says it drew, and what the reservations held now amount to, which
/// are marked as counted. A hash seeded before grants were kept (no `gv`)
/// takes the grants and their draws only.
/// KEYS: credit, held. ARGV: one JSON object, `SeedCreditArgs` in `args.rs`:
/// `tenant_spent`, `keys_spent` (key: lifetime spend), `top_ups` (`TopUp`s
/// with `drawn` and `closed`).
pub const SEED_CREDIT: &str = concat!(
    prelude!(),
    r"
local A = cjson.decode(ARGV[1])
local cr, h = KEYS[1], KEYS[2]
local function grade()
  for _, t in ipairs(A.top_ups) do
    add_top_up(cr, t)
    raise(cr, 'gd:' .. t.row, t.drawn)
    if t.booked then redis.call('HSET', cr, 'gx:' .. t.row, '1') end
  end
  redis.call('HSET', cr, 'gv', '1')
end
if redis.call('HSETNX', cr, 'seeded', '1') == 0 then
  if redis.call('HEXISTS', cr, 'gv') == 1 then return {'already'} end
  grade()
  return {'seeded'}
end
redis.call('HINCRBY', cr, 'c', A.tenant_spent)
for key, spent in pairs(A.keys_spent) do redis.call('HINCRBY', cr, 'k:' .. key .. ':c', spent) end
grade()
local all = redis.call('HGETALL', h)
for j = 1, #all, 2 do
  local rec = all[j + 1]
  local a, _, _, _, key, _, _, counted = parse(rec)
  if a and not counted then
    redis.call('HINCRBY', cr, 'r', a)
    redis.call('HINCRBY', cr, 'k:' .. key .. ':r', a)
    redis.call('HSET', h, all[j], 'C' .. rec)
  end
end
return {'seeded'}
"
);

/// Adds one grant the ledger has written, once by its row, seeded or not (a
/// later seed skips it). KEYS: credit. ARGV: one JSON object, a `TopUp` in
/// `args.rs`: `row`, `key` or '', `amount`, `grant`.
pub const CREDIT: &str = concat!(
    prelude!(),
    r"
local T = cjson.decode(ARGV[1])
add_top_up(KEYS[1], T)
return {'ok'}
"
);

/// KEYS: credit. ARGV: key (or ''), now. Returns {'seed'} | {'ok', the
/// tenant's limit, c, r, the key's limit, c, r, the asked pool's grants as
/// a JSON list of `<grant>|<drawn>|<breakage booked 0/1>`}.
pub const CREDIT_STATUS: &str = concat!(
    prelude!(),
    r"
local cr, key, now = KEYS[1], ARGV[1], tonumber(ARGV[2])
local v = redis.call('HMGET', cr, 'seeded', 'gv', 'c', 'r', 'k:' .. key .. ':c', 'k:' .. key .. ':r')
if not v[1] or not v[2] then return {'seed'} end
local pool = {}
for i, g in ipairs(grants(cr, pool_field(key))) do
  local booked = redis.call('HEXISTS', cr, 'gx:' .. g.id)
  pool[i] = g.rec .. '|' .. s(n(redis.call('HGET', cr, 'gd:' .. g.id))) .. '|' .. booked
end
local listed = '[]'
if #pool > 0 then listed = cjson.encode(pool) end
return {'ok', s(grant_limit(cr, 'gl', now)), s(n(v[3])), s(n(v[4])),
  s(grant_limit(cr, pool_field(key), now)), s(n(v[5])), s(n(v[6])), listed}
"
);

/// Grants closed by now whose breakage is not booked, in every pool.
/// KEYS: credit. ARGV: now. Returns {key or '', grant id, left, ...}.
pub const DUE_BREAKAGE: &str = concat!(
    prelude!(),
    r"
local cr, now = KEYS[1], tonumber(ARGV[1])
local out = {}
for _, f in ipairs(cjson.decode(redis.call('HGET', cr, 'gp') or '[]')) do
  local key = string.match(f, '^k:(.*):gl$') or ''
  for _, g in ipairs(grants(cr, f)) do
    if closed(g, now) and redis.call('HEXISTS', cr, 'gx:' .. g.id) == 0 then
      local left = g.a - n(redis.call('HGET', cr, 'gd:' .. g.id))
      if left < 0 then left = 0 end
      out[#out + 1] = key; out[#out + 1] = g.id; out[#out + 1] = s(left)
    end
  end
end
return out
"
);

/// A grant's breakage is booked. KEYS: credit. ARGV: grant id.
pub const MARK_BOOKED: &str = r"
redis.call('HSET', KEYS[1], 'gx:' .. ARGV[1], '1')
return {'ok'}
";
