//! sea-orm entities of Tollgate's database. Money columns are integer
//! nano-units (`*_nanos`); times are Unix milliseconds (`*_ms`), with the
//! UTC `day` and `period` (month) stored beside them so reports group the same
//! way on SQLite and PostgreSQL.

pub mod api_key;
pub mod audit_payload;
pub mod bill_line;
pub mod closed_invoice;
pub mod credit;
pub mod credit_breakage;
pub mod end_user_limit;
pub mod export_delivered;
pub mod export_outbox;
pub mod export_sink;
pub mod feature_budget;
pub mod period_close;
pub mod prelude;
pub mod report_delivery;
pub mod reprice_adjustment;
pub mod stored_response;
pub mod stored_response_item;
pub mod tenant;
pub mod usage;
pub mod usage_daily;
pub mod usage_total;
