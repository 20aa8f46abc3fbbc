//! Reconciliation with the providers' bills: their usage and cost exports
//! imported as lines (`parse`, `store`), and the drift between those lines
//! and the ledger per billing day, model and provider key (`drift`).

pub mod amount;
pub mod drift;
mod ledger_side;
pub mod parse;
mod shapes;
pub mod store;
