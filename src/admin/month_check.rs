//! Numbers finance checks: for one month, what each source says (the
//! invoices' lines, the FOCUS export read back, export sinks) against the
//! ledger's own sums, per tenant and in total, to the nano-unit.
//!
//! The ledger is read on two bases, since a month's rows and its invoices
//! differ by the late rows: `booked` is what the month's invoices must show
//! (its rows up to its close, the late rows and reprice adjustments booked in
//! it), `stamped` every row stamped in the month's days whenever written
//! (what a day's export holds). Each source is compared with the ledger on
//! its own basis; the ledger's sums are read with queries of their own, so a
//! row changed behind a kept invoice's back shows.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend,
    IsolationLevel, TransactionTrait,
};
use serde::Serialize;

use super::invoice::{lines_of, lines_sides};
use super::{AdminError, invalid};
use crate::calendar::{Calendar, Window};
use crate::ids::TenantId;
use crate::ledger::focus;
use crate::ledger::invoice::{self, Span};
use crate::ledger::periods::{self, Standing};
use crate::ledger::reprice_adjustments::{self, Sides};
use crate::money::Nanos;
use crate::storage::StorageError;

/// Which of the ledger's sums a source is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// As the month's invoices book it.
    Booked,
    /// The rows stamped in the month's days, whenever written.
    Stamped,
    /// Their charge only: an export sink carries the rows with a charge or
    /// usage, so its count of rows is its own.
    Exported,
}

/// One source of the month's numbers.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    pub name: String,
    pub basis: Basis,
    /// Per tenant, where the source knows its tenants.
    #[serde(skip)]
    pub tenants: Option<BTreeMap<String, Sides>>,
    pub total: Sides,
}

impl Source {
    fn agrees_with(&self, ledger: &Sides) -> bool {
        match self.basis {
            Basis::Exported => {
                (self.total.debit, self.total.credit) == (ledger.debit, ledger.credit)
            }
            Basis::Booked | Basis::Stamped => self.total == *ledger,
        }
    }

    /// A source that knows only its month's total, such as an export sink's
    /// delivered rows and amount.
    pub fn total_only(name: impl Into<String>, basis: Basis, rows: u64, charged: Nanos) -> Source {
        Source {
            name: name.into(),
            basis,
            tenants: None,
            total: Sides {
                rows,
                debit: charged,
                credit: Nanos::ZERO,
            },
        }
    }

    fn per_tenant(name: &str, basis: Basis, tenants: BTreeMap<String, Sides>) -> Source {
        let total = tenants
            .values()
            .fold(Sides::default(), |sum, s| add(sum, *s));
        Source {
            name: name.to_owned(),
            basis,
            tenants: Some(tenants),
            total,
        }
    }
}

/// A source that does not say what the ledger says.
#[derive(Debug, Clone, Serialize)]
pub struct Difference {
    pub source: String,
    pub basis: Basis,
    /// `None`: the month's total.
    pub tenant: Option<String>,
    pub says: Sides,
    pub ledger: Sides,
}

/// One tenant's sums on both bases, and what each source says of it.
#[derive(Debug, Clone, Serialize)]
pub struct TenantSums {
    pub tenant: String,
    pub booked: Sides,
    pub stamped: Sides,
    pub sources: BTreeMap<String, Sides>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MonthCheck {
    pub month: String,
    /// `closed`, `first_open` (late rows of closed months are booked in it) or `open`.
    pub standing: &'static str,
    pub booked: Sides,
    pub stamped: Sides,
    pub sources: Vec<Source>,
    pub tenants: Vec<TenantSums>,
    pub differences: Vec<Difference>,
    pub agrees: bool,
}

/// Checks `month` (`YYYY-MM` of `calendar`), with what each export sink in
/// `sinks` has delivered of it.
pub async fn check(
    db: &DatabaseConnection,
    calendar: &Calendar,
    currency: &str,
    month: &str,
    sinks: &[String],
) -> Result<MonthCheck, AdminError> {
    let window = calendar
        .month(month)
        .ok_or_else(|| invalid("month", format!("`{month}` is not a YYYY-MM month")))?;
    let snapshot = snapshot(db).await?;
    let db = &snapshot;
    let closes = periods::closes(db).await?;
    let standing = periods::standing(calendar, &closes, &window.key);
    let booking = Booking::of(&closes, &window, &standing);
    let mut ledger = BTreeMap::new();
    let mut invoices = BTreeMap::new();
    for tenant in tenants(db, &window).await? {
        let id = TenantId::new(tenant.as_str());
        let lines = lines_of(db, calendar, &id, &window).await?;
        invoices.insert(tenant.clone(), lines_sides(&lines));
        ledger.insert(tenant, booking.sums(db, &id, &window).await?);
    }
    let exported = focus::month_totals(db, calendar, currency, &window).await?;
    let exported = exported
        .into_iter()
        .map(|(tenant, tally)| {
            let sides = Sides {
                rows: tally.rows,
                debit: tally.billed,
                credit: Nanos::ZERO,
            };
            (tenant, sides)
        })
        .collect();
    let mut sources = vec![
        Source::per_tenant("invoices", Basis::Booked, invoices),
        Source::per_tenant("focus_export", Basis::Stamped, exported),
    ];
    for sink in sinks {
        let delivered = crate::export::delivered_totals(db, sink, &window.key).await?;
        let name = format!("export sink `{sink}`");
        sources.push(Source::total_only(
            name,
            Basis::Exported,
            delivered.rows,
            delivered.nanos,
        ));
    }
    Ok(compare(window.key, &standing, &ledger, sources))
}

/// A read-only transaction that sees the database as it was when it began,
/// so rows written while the sources are read cannot show as differences
/// (SQLite's WAL gives every read transaction its snapshot).
async fn snapshot(db: &DatabaseConnection) -> Result<DatabaseTransaction, StorageError> {
    let txn = if db.get_database_backend() == DbBackend::Postgres {
        let isolation = Some(IsolationLevel::RepeatableRead);
        db.begin_with_config(isolation, Some(AccessMode::ReadOnly))
            .await?
    } else {
        db.begin().await?
    };
    Ok(txn)
}

/// How the ledger books the month: the ids of its own rows that count, and
/// the late rows it holds.
struct Booking {
    /// Its rows up to this id (a closed month's watermark).
    through: Option<i64>,
    /// Rows stamped before it and written after this id are booked in it.
    late_after: Option<i64>,
}

impl Booking {
    fn of(closes: &[entity::period_close::Model], window: &Window, standing: &Standing) -> Booking {
        match standing {
            Standing::Closed => {
                let key = window.key.as_str();
                // The close that covered it (a month before the ledger's
                // first has no close of its own) and the one before that.
                let own = closes.iter().find(|c| c.month.as_str() >= key);
                let before = closes.iter().rev().find(|c| c.month.as_str() < key);
                let own = own.map(|c| c.watermark);
                Booking {
                    through: own,
                    // A month closed with the one before it books no late rows.
                    late_after: before.map(|c| c.watermark).filter(|b| Some(*b) < own),
                }
            }
            Standing::FirstOpen { after } => Booking {
                through: None,
                late_after: Some(*after),
            },
            Standing::Open => Booking {
                through: None,
                late_after: None,
            },
        }
    }

    /// `tenant`'s (booked, stamped) sums.
    async fn sums<C: ConnectionTrait>(
        &self,
        db: &C,
        tenant: &TenantId,
        window: &Window,
    ) -> Result<(Sides, Sides), AdminError> {
        let created = Span::created(window.start_ms, window.end_ms);
        let (rows, charged) = invoice::ledger_sum(db, tenant, created).await?;
        let stamped = Sides {
            rows,
            debit: charged,
            credit: Nanos::ZERO,
        };
        let own = Span {
            through_id: self.through,
            ..created
        };
        let (rows, charged) = invoice::ledger_sum(db, tenant, own).await?;
        let mut booked = Sides {
            rows,
            debit: charged,
            credit: Nanos::ZERO,
        };
        if let Some(after) = self.late_after {
            let late = Span {
                from_ms: 0,
                to_ms: window.start_ms,
                after_id: Some(after),
                through_id: self.through,
                rows_only: true,
            };
            let (rows, charged) = invoice::ledger_sum(db, tenant, late).await?;
            booked = add(
                booked,
                Sides {
                    rows,
                    debit: charged,
                    credit: Nanos::ZERO,
                },
            );
        }
        let repriced = reprice_adjustments::sum(db, tenant, &window.key).await?;
        Ok((add(booked, repriced), stamped))
    }
}

fn add(a: Sides, b: Sides) -> Sides {
    Sides {
        rows: a.rows + b.rows,
        debit: a.debit.saturating_add(b.debit),
        credit: a.credit.saturating_add(b.credit),
    }
}

/// Every tenant the month may hold: those with a row stamped before it ends
/// (late rows included) and those with adjustments booked in it.
async fn tenants<C: ConnectionTrait>(
    db: &C,
    window: &Window,
) -> Result<BTreeSet<String>, AdminError> {
    let mut tenants: BTreeSet<String> = periods::tenants_before(db, window.end_ms)
        .await?
        .into_iter()
        .map(|t| t.to_string())
        .collect();
    tenants.extend(reprice_adjustments::tenants_in(db, &window.key).await?);
    Ok(tenants)
}

fn compare(
    month: String,
    standing: &Standing,
    ledger: &BTreeMap<String, (Sides, Sides)>,
    sources: Vec<Source>,
) -> MonthCheck {
    let on = |basis: Basis, sums: (Sides, Sides)| match basis {
        Basis::Booked => sums.0,
        Basis::Stamped | Basis::Exported => sums.1,
    };
    let booked = ledger.values().fold(Sides::default(), |s, v| add(s, v.0));
    let stamped = ledger.values().fold(Sides::default(), |s, v| add(s, v.1));
    let mut differences = Vec::new();
    let mut tenants: BTreeMap<String, TenantSums> = BTreeMap::new();
    for source in &sources {
        let expected = on(source.basis, (booked, stamped));
        if !source.agrees_with(&expected) {
            differences.push(Difference {
                source: source.name.clone(),
                basis: source.basis,
                tenant: None,
                says: source.total,
                ledger: expected,
            });
        }
        let Some(by_tenant) = &source.tenants else {
            continue;
        };
        let names: BTreeSet<&String> = by_tenant.keys().chain(ledger.keys()).collect();
        for name in names {
            let sums = ledger.get(name).copied().unwrap_or_default();
            let says = by_tenant.get(name).copied().unwrap_or_default();
            if says != on(source.basis, sums) {
                differences.push(Difference {
                    source: source.name.clone(),
                    basis: source.basis,
                    tenant: Some(name.clone()),
                    says,
                    ledger: on(source.basis, sums),
                });
            }
            if says != Sides::default() || sums != Default::default() {
                let entry = tenants.entry(name.clone()).or_insert_with(|| TenantSums {
                    tenant: name.clone(),
                    booked: sums.0,
                    stamped: sums.1,
                    sources: BTreeMap::new(),
                });
                entry.sources.insert(source.name.clone(), says);
            }
        }
    }
    MonthCheck {
        month,
        standing: match standing {
            Standing::Closed => "closed",
            Standing::FirstOpen { .. } => "first_open",
            Standing::Open => "open",
        },
        booked,
        stamped,
        sources,
        tenants: tenants.into_values().collect(),
        agrees: differences.is_empty(),
        differences,
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let basis = match self.basis {
            Basis::Booked => "booked in the month",
            Basis::Stamped => "stamped in the month",
            Basis::Exported => "charged on rows stamped in the month",
        };
        match &self.tenant {
            Some(tenant) => write!(f, "{} of tenant {tenant}", self.source)?,
            None => write!(f, "{} in total", self.source)?,
        }
        write!(
            f,
            " says {}, the ledger's rows {basis} {}",
            Shown(self.says),
            Shown(self.ledger)
        )
    }
}

struct Shown(Sides);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {} rows", self.0.debit, self.0.rows)?;
        if self.0.credit != Nanos::ZERO {
            write!(f, " less {} credited", self.0.credit)?;
        }
        Ok(())
    }
}
