//! The usage ledger: every upstream attempt becomes one row. Requests hand
//! events to the LedgerActor and move on; the actor batches them into the
//! database by size and by age, and keeps them while the database is away.

pub mod actor;
pub mod analysis;
pub mod batch;
pub mod credits;
mod daily;
mod draws;
pub mod event;
pub mod focus;
mod insert;
pub mod invoice;
mod partitions;
pub mod periods;
pub mod repo;
pub mod reprice_adjustments;
pub mod retention;
mod rollup;
pub mod settle;
pub mod settlements;

pub use actor::{Journaled, LedgerActor, LedgerHandle};
pub use event::{Api, AttemptStatus, CacheSource, UsageEvent, UsageKind};
