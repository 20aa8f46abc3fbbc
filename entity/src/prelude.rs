pub use super::api_key::Entity as ApiKey;
pub use super::end_user_limit::Entity as EndUserLimit;
pub use super::feature_budget::Entity as FeatureBudget;
pub use super::tenant::Entity as Tenant;
pub use super::usage::Entity as Usage;
pub use super::usage_total::Entity as UsageTotal;
