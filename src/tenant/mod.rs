//! One TenantActor per active tenant serializes every quota decision of that
//! tenant, so two concurrent requests can never both pass on the same
//! remaining budget. Handlers talk to it through `TenantHandle`.

pub mod actor;
pub mod alerts;
pub mod book;
pub mod credits;
mod decision;
pub mod end_users;
pub mod grants;
pub mod handle;
pub mod in_flight;
pub mod messages;
pub mod registry;
pub(crate) mod seed;
pub mod sessions;
mod share;
pub mod shared;
pub mod spent;
pub mod store;
pub mod tokens;

pub use book::{BudgetStatus, Granted, Limits, RateDecision, Refusal, Refused, ReserveRequest};
pub use handle::{CallSlot, QuotaError, RateAndHold, ReservationGuard, TenantHandle};
pub use messages::ReservationMeta;
pub use registry::TenantRegistry;
pub use shared::SharedStore;
pub use tokens::{TokenLimits, TokenRefusal, TokenWindow};
