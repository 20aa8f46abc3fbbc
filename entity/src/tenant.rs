use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "tenants")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub name: String,
    pub tier: String,
    /// Overrides the tier's requests per minute.
    pub rpm_limit: Option<i32>,
    /// `None`: no monthly cost cap.
    pub monthly_budget_nanos: Option<i64>,
    /// `strict`, `clamp` or `alert`.
    pub budget_mode: String,
    /// Overrides the tier's default `max_tokens`.
    pub default_max_tokens: Option<i32>,
    /// Comma-separated route names narrowing the tier's routes; `None`: all of them.
    pub allowed_routes: Option<String>,
    pub created_at_ms: i64,
    /// Overrides of the tier's tokens per minute, daily and monthly token limits.
    pub tpm_limit: Option<i64>,
    pub daily_token_limit: Option<i64>,
    pub monthly_token_limit: Option<i64>,
    pub updated_at_ms: i64,
    /// Overrides the tier's `on_store_error` (`fail_closed`, `local`).
    pub on_store_error: Option<String>,
    /// The tenant spends its prepaid balance (see `credit`) instead of a monthly budget.
    pub on_credits: bool,
    /// What `monthly_budget_nanos` runs over: `day`, `week`, `month` or `lifetime` (`None`: a month).
    pub budget_period: Option<String>,
    /// The tenant's prompts as a JSON object: route name (or `*`, every route) to text.
    pub prompts: Option<String>,
    /// Cache breakpoints after the placed prompts: `auto`, `on` or `off` (`None`: auto).
    pub prompt_breakpoints: Option<String>,
    /// The `[[plans]]` entry the tenant is billed under (`None`: at cost).
    pub plan: Option<String>,
    /// Request and response bodies of its calls are kept for audit (`audit_payloads`).
    pub audit_payloads: bool,
    /// Comma-separated route names granted beyond the tier's routes.
    pub granted_routes: Option<String>,
    /// The tenant's route pins as a JSON object: route name to the route that answers it.
    pub route_pins: Option<String>,
    /// An `http`/`https` URL that receives the tenant's alerts (beside the global webhook).
    pub alert_webhook_url: Option<String>,
    /// Comma-separated percents of its budget that alert, in place of `[alerts] thresholds_percent` (`None`: those).
    pub alert_thresholds_percent: Option<String>,
    /// Overrides the tier's `rate_mode`: `enforce` or `alert` (`None`: the tier's).
    pub rate_mode: Option<String>,
    /// Calls in flight at once; `None`: the tier's cap.
    pub max_in_flight: Option<i32>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
