//! A door's field table: every top-level field of its body is *counted*
//! (the hold covers its worst case), *neutral* (it cannot change what the
//! provider bills) or *refused* (a 400 naming it and what would allow it),
//! and some are decided by their value (`service_tier: "flex"` passes,
//! `"priority"` is refused). A field no table names is refused too, unless
//! the route forwards unknown fields at its operator's risk: the gateway does
//! not forward what it cannot price. The tables themselves live with their
//! wire formats (`openai::fields`, `anthropic::fields`); this module is the
//! vocabulary and the one check every door runs.

use serde_json::{Map, Value};

use crate::config::server_tools::{Allowance, ServerTool};
use crate::error::ApiError;
use crate::telemetry::metrics::{Metric, counter_add};

/// What one field is to the hold.
#[derive(Clone, Copy)]
pub enum Class {
    /// The hold covers its worst case (its text is estimated, or it is an output limit).
    Counted,
    /// It cannot change what the provider bills.
    Neutral,
    /// It can change the bill in a way no hold covers; the text says what would allow it.
    Refused(&'static str),
    /// Its value decides: `Err` refuses it, naming the part and why.
    Values(fn(&Value) -> Result<(), Refused>),
}

impl std::fmt::Debug for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Class::Counted => f.write_str("Counted"),
            Class::Neutral => f.write_str("Neutral"),
            Class::Refused(why) => write!(f, "Refused({why:?})"),
            Class::Values(_) => f.write_str("Values"),
        }
    }
}

/// A value a `Values` rule refuses: where under the field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Appended to the field's name (`[2].type`, `.format`); empty for the value itself.
    pub at: String,
    pub why: String,
}

impl Refused {
    pub fn new(at: impl Into<String>, why: impl Into<String>) -> Refused {
        Refused {
            at: at.into(),
            why: why.into(),
        }
    }
}

/// One door's table.
#[derive(Debug)]
pub struct Table {
    /// The door's name in metrics (`chat`, `responses`, `messages`, …).
    pub door: &'static str,
    pub fields: &'static [(&'static str, Class)],
}

/// What a route says of fields no table names.
pub use crate::config::UnknownFields as Unknown;

/// The route setting a refusal of an unknown field names.
pub const FORWARD_SETTING: &str = "forward_unknown_fields = true";

impl Table {
    pub fn class(&self, field: &str) -> Option<Class> {
        self.fields
            .iter()
            .find(|(name, _)| *name == field)
            .map(|(_, class)| *class)
    }

    /// The body's first field this table refuses, as the door's 400. A
    /// known field sent as `null` is as good as absent; an unknown one is
    /// refused whatever its value.
    pub fn check(
        &'static self,
        body: &Map<String, Value>,
        unknown: Unknown,
    ) -> Result<(), ApiError> {
        match self.screen(body)? {
            Some(unpriced) if unknown == Unknown::Refuse => Err(unpriced.refusal()),
            _ => Ok(()),
        }
    }

    /// The door's half of `check`, before the route is known: a known field
    /// refused is the 400 now; the first unknown one is kept for the route
    /// to decide (`Unpriced::refusal`).
    pub fn screen(&'static self, body: &Map<String, Value>) -> Result<Option<Unpriced>, ApiError> {
        let mut unpriced = None;
        for (field, value) in body {
            let refusal = match self.class(field) {
                None => {
                    unpriced.get_or_insert_with(|| Unpriced {
                        table: self,
                        field: field.clone(),
                    });
                    None
                }
                Some(_) if value.is_null() => None,
                Some(Class::Counted | Class::Neutral) => None,
                Some(Class::Refused(why)) => {
                    Some((field.clone(), self.label(field), (*why).to_owned()))
                }
                Some(Class::Values(rule)) => rule(value).err().map(|refused| {
                    (
                        format!("{field}{}", refused.at),
                        self.label(field),
                        refused.why,
                    )
                }),
            };
            if let Some((param, label, why)) = refusal {
                return Err(self.refuse(label, param, &why));
            }
        }
        Ok(unpriced)
    }

    /// The refusal of `param`, counted under `label` (a field the table names,
    /// or `unknown`: a caller's field names must not become label values).
    /// The message names `param` too: Anthropic's envelope has no `param`.
    pub fn refuse(&self, label: &str, param: String, why: &str) -> ApiError {
        counter_add(
            Metric::FieldRefusalsTotal,
            &[("door", self.door), ("field", label)],
            1,
        );
        let message = format!("`{param}`: {why}");
        ApiError::invalid_request(param, message)
    }

    /// `field` as the table spells it (a `'static` label), else `unknown`.
    fn label(&self, field: &str) -> &'static str {
        self.fields
            .iter()
            .find(|(name, _)| *name == field)
            .map_or("unknown", |(name, _)| name)
    }
}

/// A field no table names: refused unless the route forwards unknown fields.
#[derive(Debug, Clone)]
pub struct Unpriced {
    table: &'static Table,
    field: String,
}

impl Unpriced {
    /// The 400 for it, naming the route setting that would let it through.
    pub fn refusal(&self) -> ApiError {
        let field = &self.field;
        self.table.refuse(
            "unknown",
            field.clone(),
            &format!(
                "not a field this gateway knows how to price, so it is not forwarded; a \
                 route may forward unknown fields with `{FORWARD_SETTING}`, at its \
                 operator's risk"
            ),
        )
    }
}

/// What a door's screening of a body left for the pipeline: an unknown
/// field for the route to decide on, and the provider-run tools it took out
/// of the offer (named to the caller in `X-Tollgate-Removed-Tools`).
#[derive(Debug, Clone, Default)]
pub struct Screen {
    pub unpriced: Option<Unpriced>,
    pub removed_tools: Vec<String>,
    /// The provider-run tools the route let leave, at the bounds set on them.
    pub admitted: Vec<Admitted>,
}

/// A door's sorting of the provider-run tools a body offers.
#[derive(Debug, Default)]
pub struct ToolScreen {
    /// Taken out of the offer: their types, in order.
    pub removed: Vec<String>,
    pub admitted: Vec<Admitted>,
}

/// A provider-run tool that leaves, at the most uses the gateway set on it:
/// the hold covers each use's fee and its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub tool: ServerTool,
    pub uses: u32,
    pub input_tokens_per_use: u64,
}

impl Admitted {
    /// At `allowance`, a caller's own lower limit kept (`asked`: what it sent).
    pub fn at(tool: ServerTool, allowance: Allowance, asked: Option<&Value>) -> Admitted {
        let uses = bounded(asked, u64::from(allowance.max_uses));
        Admitted {
            tool,
            uses: u32::try_from(uses).unwrap_or(allowance.max_uses),
            input_tokens_per_use: allowance.input_tokens_per_use,
        }
    }

    /// The input its uses may add.
    pub fn input_tokens(&self) -> u64 {
        u64::from(self.uses).saturating_mul(self.input_tokens_per_use)
    }
}

impl Screen {
    /// The refusal the route's setting leaves, if any.
    pub fn check(&self, unknown: Unknown) -> Result<(), ApiError> {
        match &self.unpriced {
            Some(unpriced) if unknown == Unknown::Refuse => Err(unpriced.refusal()),
            _ => Ok(()),
        }
    }
}

/// A caller's own positive limit where it is below `most`; else `most`.
pub fn bounded(asked: Option<&Value>, most: u64) -> u64 {
    asked
        .and_then(Value::as_u64)
        .filter(|&n| n > 0)
        .map_or(most, |n| n.min(most))
}

/// The `param` a table's check refuses `body` with, if it does (tests).
#[cfg(test)]
pub fn refused_param(table: &'static Table, body: Value, unknown: Unknown) -> Option<String> {
    let Value::Object(body) = body else {
        return Some("(not an object)".to_owned());
    };
    table.check(&body, unknown).err().map(|e| {
        let envelope: Value = serde_json::from_slice(&e.envelope_json()).unwrap_or_default();
        envelope["error"]["param"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    })
}

/// Each element of an array field, checked by `rule` (`[i]` prefixed to
/// what it refuses); anything but an array passes to the door's own parser.
pub fn each(value: &Value, rule: impl Fn(&Value) -> Result<(), Refused>) -> Result<(), Refused> {
    let Value::Array(items) = value else {
        return Ok(());
    };
    for (i, item) in items.iter().enumerate() {
        rule(item).map_err(|refused| Refused::new(format!("[{i}]{}", refused.at), refused.why))?;
    }
    Ok(())
}

/// A string field whose listed values pass; any other string is refused with `why`.
pub fn one_of(value: &Value, allowed: &[&str], why: &str) -> Result<(), Refused> {
    match value.as_str() {
        Some(v) if !allowed.contains(&v) => {
            Err(Refused::new("", format!("`{v}` is refused: {why}")))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tier(value: &Value) -> Result<(), Refused> {
        one_of(value, &["default", "flex"], "not priced")
    }

    static TABLE: Table = Table {
        door: "test",
        fields: &[
            ("model", Class::Counted),
            ("user", Class::Neutral),
            ("audio", Class::Refused("audio output is not priced")),
            ("service_tier", Class::Values(tier)),
        ],
    };

    fn param(body: Value, unknown: Unknown) -> Option<String> {
        refused_param(&TABLE, body, unknown)
    }

    #[test]
    fn each_class_answers_as_its_table_says() {
        let ok = json!({"model": "m", "user": "u", "service_tier": "flex", "audio": null});
        assert_eq!(param(ok, Unknown::Refuse), None);
        assert_eq!(
            param(json!({"model": "m", "audio": {}}), Unknown::Refuse),
            Some("audio".into())
        );
        assert_eq!(
            param(json!({"service_tier": "priority"}), Unknown::Refuse),
            Some("service_tier".into())
        );
    }

    #[test]
    fn an_unknown_field_is_refused_even_as_null_unless_the_route_forwards_it() {
        assert_eq!(
            param(json!({"model": "m", "messages": null}), Unknown::Refuse),
            Some("messages".into())
        );
        assert_eq!(
            param(json!({"model": "m", "messages": null}), Unknown::Forward),
            None
        );
        // Forwarding the unknown never lets a known refusal through.
        assert_eq!(
            param(json!({"audio": {"voice": "x"}}), Unknown::Forward),
            Some("audio".into())
        );
    }

    #[test]
    fn each_names_the_element_it_refuses() {
        let rule = |v: &Value| {
            each(v, |item| {
                one_of(&item["type"], &["function"], "no").map_err(|r| Refused::new(".type", r.why))
            })
        };
        assert_eq!(rule(&json!([{"type": "function"}])), Ok(()));
        assert_eq!(
            rule(&json!([{"type": "function"}, {"type": "web_search"}]))
                .unwrap_err()
                .at,
            "[1].type"
        );
    }
}
