//! The one place upstream results are classified, per DESIGN's table. The
//! class drives failover, the breaker and the ledger row's status.

use actix_web::http::StatusCode;

use super::call::CallError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Success,
    /// Timeout, connection error, 5xx, 429: retry or fail over.
    Retryable,
    /// Any other 4xx: the request itself is wrong; return it, no failover.
    GiveBack,
    /// The request never left because a setting is wrong; 500, no failover.
    Local,
}

pub fn classify_status(status: StatusCode) -> Class {
    if status.is_success() {
        Class::Success
    } else if status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || status.is_server_error()
        // The provider refused the gateway's own key or account, not the
        // caller's request: a provider failure (the breaker counts it, the
        // route fails over), never the tenant's 401.
        || is_provider_refusal(status)
    {
        Class::Retryable
    } else if status.is_client_error() {
        Class::GiveBack
    } else {
        // 1xx/3xx from an API endpoint means something in between is broken.
        Class::Retryable
    }
}

/// 401 and 403 from a provider speak of the gateway's key or account.
pub fn is_provider_refusal(status: StatusCode) -> bool {
    status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN
}

pub fn classify_error(error: &CallError) -> Class {
    match error {
        CallError::Local(_) => Class::Local,
        CallError::Timeout(_)
        | CallError::ConnectTimeout(_)
        | CallError::FirstByteTimeout(_)
        | CallError::Connect(_)
        | CallError::Broken(_)
        | CallError::Body(_)
        | CallError::FirstTokenTimeout(_)
        | CallError::Deadline(_) => Class::Retryable,
    }
}

/// Whether a failed call may still have been billed: any byte of its
/// request was written and no answer said otherwise (a timeout after sending,
/// a garbled answer, a reset stream, an unreadable body mid-response). Only a
/// failure before anything was written (no connection) or a 429/5xx answer is
/// known to be free.
pub fn may_have_billed(error: &CallError) -> bool {
    match error {
        CallError::Local(_) | CallError::ConnectTimeout(_) | CallError::Connect(_) => false,
        CallError::Timeout(_)
        | CallError::FirstByteTimeout(_)
        | CallError::Broken(_)
        | CallError::Body(_)
        | CallError::FirstTokenTimeout(_)
        | CallError::Deadline(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_design_table() {
        assert_eq!(classify_status(StatusCode::OK), Class::Success);
        for s in [429, 500, 502, 503, 504, 408, 401, 403] {
            assert_eq!(
                classify_status(StatusCode::from_u16(s).unwrap()),
                Class::Retryable,
                "{s}"
            );
        }
        for s in [400, 404, 413, 422] {
            assert_eq!(
                classify_status(StatusCode::from_u16(s).unwrap()),
                Class::GiveBack,
                "{s}"
            );
        }
        assert_eq!(classify_error(&CallError::Local("x".into())), Class::Local);
        assert_eq!(classify_error(&CallError::Timeout(1)), Class::Retryable);
    }

    #[test]
    fn only_calls_that_reached_the_provider_may_have_been_billed() {
        assert!(!may_have_billed(&CallError::Connect("refused".into())));
        assert!(!may_have_billed(&CallError::ConnectTimeout(1)));
        assert!(!may_have_billed(&CallError::Local("x".into())));
        assert!(may_have_billed(&CallError::FirstByteTimeout(1)));
        assert!(may_have_billed(&CallError::Timeout(1)));
        assert!(may_have_billed(&CallError::Body("reset".into())));
        assert!(may_have_billed(&CallError::Broken("garbled answer".into())));
        assert!(may_have_billed(&CallError::Deadline(1)));
    }
}
