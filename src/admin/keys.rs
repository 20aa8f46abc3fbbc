//! Issuing, listing and revoking API keys.

use sea_orm::{DatabaseConnection, Set};
use serde::Serialize;

use super::{AdminError, tenants};
use crate::auth;
use crate::config::Secret;
use crate::directory::{KeyRecord, repo};
use crate::ids::{KeyId, TenantId};

/// A key as listed (never its secret).
#[derive(Debug, Serialize)]
pub struct KeyView {
    pub id: String,
    pub tenant_id: String,
    pub name: Option<String>,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

/// The one time a key's secret is shown.
#[derive(Debug, Serialize)]
pub struct IssuedKeyView {
    pub id: String,
    pub tenant_id: String,
    pub key: String,
}

pub async fn issue(
    db: &DatabaseConnection,
    pepper: &Secret,
    tenant: &str,
    name: Option<String>,
    now_ms: i64,
) -> Result<(KeyRecord, IssuedKeyView), AdminError> {
    let tenant = tenants::get(db, tenant).await?;
    let issued = auth::issue_key(pepper);
    let model = entity::api_key::ActiveModel {
        id: Set(issued.key_id.to_string()),
        tenant_id: Set(tenant.id.to_string()),
        name: Set(name),
        secret_hash: Set(issued.secret_hash.clone()),
        created_at_ms: Set(now_ms),
        revoked_at_ms: Set(None),
    };
    repo::insert_key(db, model).await?;
    let record = KeyRecord {
        id: issued.key_id.clone(),
        tenant: tenant.id.clone(),
        secret_hash: issued.secret_hash,
    };
    let view = IssuedKeyView {
        id: issued.key_id.to_string(),
        tenant_id: tenant.id.to_string(),
        key: issued.token.expose().to_owned(),
    };
    Ok((record, view))
}

pub async fn list(db: &DatabaseConnection, tenant: &str) -> Result<Vec<KeyView>, AdminError> {
    let tenant = tenants::get(db, tenant).await?;
    let rows = repo::tenant_keys(db, &TenantId::new(tenant.id.as_str())).await?;
    Ok(rows
        .into_iter()
        .map(|k| KeyView {
            id: k.id,
            tenant_id: k.tenant_id,
            name: k.name,
            created_at_ms: k.created_at_ms,
            revoked_at_ms: k.revoked_at_ms,
        })
        .collect())
}

pub async fn revoke(
    db: &DatabaseConnection,
    key_id: &str,
    now_ms: i64,
) -> Result<KeyId, AdminError> {
    let id = KeyId::new(key_id);
    if repo::revoke_key(db, &id, now_ms).await? {
        Ok(id)
    } else {
        Err(AdminError::NotFound(format!("no key `{key_id}`")))
    }
}
