//! The ledger's local journal: every attempt leaves an `intent` record before
//! it is sent upstream and a `settle` record (its ledger row) when it ends,
//! each reaching the OS before the gateway moves on. The database is written
//! from memory; the journal is what a restart replays, so a killed process or
//! an unreachable database loses no row and replay never writes one twice.

pub mod cursor;
pub mod frame;
pub mod record;
pub mod replay;
pub mod sync;
pub mod writer;

pub use cursor::Cursor;
pub use replay::Recovered;
pub use writer::{Journal, JournalError, JournalOptions};
