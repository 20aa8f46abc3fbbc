//! Which routes a tenant may ask for beyond its tier's, and which route
//! answers one it asks for: the allow-list narrows the tier, a grant adds a
//! route the tier lacks (a pilot), a pin sends a route to another for this
//! tenant alone (a change rolled out tenant by tenant).

use std::collections::BTreeMap;

use sea_orm::Set;

use super::tenants::{NewTenant, TenantPatch};
use super::{AdminError, invalid};
use crate::config::Config;

/// More pins than routes a deployment configures is a mistake, not a rollout.
pub const MAX_PINS: usize = 64;

/// The stored form of a list of configured routes.
pub fn route_list(config: &Config, field: &str, routes: &[String]) -> Result<String, AdminError> {
    for route in routes {
        if config.route(route).is_none() {
            return Err(invalid(field, format!("unknown route `{route}`")));
        }
    }
    Ok(routes.join(","))
}

/// Routes granted beyond the tier's; an empty list is none.
pub fn granted(config: &Config, routes: Option<&[String]>) -> Result<Option<String>, AdminError> {
    match routes {
        Some(routes) if !routes.is_empty() => {
            route_list(config, "granted_routes", routes).map(Some)
        }
        _ => Ok(None),
    }
}

/// The stored form of a tenant's pins: each from a configured route to
/// another, never to itself, never to a route that is itself pinned (a chain
/// would make the answer depend on the order pins were read).
pub fn pins(
    config: &Config,
    pins: Option<&BTreeMap<String, String>>,
) -> Result<Option<String>, AdminError> {
    let Some(pins) = pins.filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    if pins.len() > MAX_PINS {
        return Err(invalid(
            "route_pins",
            format!("at most {MAX_PINS} pins per tenant"),
        ));
    }
    for (from, to) in pins {
        let field = format!("route_pins.{from}");
        for route in [from, to] {
            if config.route(route).is_none() {
                return Err(invalid(&field, format!("unknown route `{route}`")));
            }
        }
        if from == to {
            return Err(invalid(&field, "a route cannot be pinned to itself"));
        }
        if pins.contains_key(to) {
            return Err(invalid(
                &field,
                format!("`{to}` is pinned too: pin `{from}` to where `{to}` goes"),
            ));
        }
    }
    // A map of strings always serializes.
    Ok(serde_json::to_string(pins).ok())
}

/// A new tenant's route fields as stored: its allow-list, grants and pins.
pub fn of_new(config: &Config, new: &NewTenant) -> Result<Stored, AdminError> {
    let allowed = new
        .allowed_routes
        .as_deref()
        .map(|r| route_list(config, "allowed_routes", r))
        .transpose()?;
    let granted = granted(config, new.granted_routes.as_deref())?;
    Ok((allowed, granted, pins(config, new.route_pins.as_ref())?))
}

/// The stored allow-list, grants and pins.
type Stored = (Option<String>, Option<String>, Option<String>);

/// A PATCH's route fields onto the stored tenant.
pub fn apply(
    config: &Config,
    model: &mut entity::tenant::ActiveModel,
    patch: &TenantPatch,
) -> Result<(), AdminError> {
    if let Some(routes) = &patch.allowed_routes {
        model.allowed_routes = Set(routes
            .as_deref()
            .map(|r| route_list(config, "allowed_routes", r))
            .transpose()?);
    }
    if let Some(routes) = &patch.granted_routes {
        model.granted_routes = Set(granted(config, routes.as_deref())?);
    }
    if let Some(route_pins) = &patch.route_pins {
        model.route_pins = Set(pins(config, route_pins.as_ref())?);
    }
    Ok(())
}
