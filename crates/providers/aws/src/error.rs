//! A failed AWS call, as the provider sees it.

use crate::retry::ErrorClass;
use flotilla_fleet::FleetError;

/// An AWS API call that failed for good (after the retries its class allows).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{api} failed{}: {message}", .code.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
pub struct ApiError {
    /// The API action (`SetDesiredCapacity`, ...).
    pub api: &'static str,
    /// The AWS error code, when AWS answered with one.
    pub code: Option<String>,
    /// What went wrong, as the SDK tells it.
    pub message: String,
    /// How the failure was classified.
    pub class: ErrorClass,
    /// How many attempts were made.
    pub attempts: u32,
}

impl ApiError {
    /// This error as a [`FleetError`] of the operation `op`.
    pub fn into_fleet(self, op: &'static str) -> FleetError {
        let attempts = if self.attempts > 1 {
            format!(" after {} attempts", self.attempts)
        } else {
            String::new()
        };
        FleetError::provider(op, format!("{self}{attempts}"))
    }

    /// Whether AWS said the thing asked about does not exist (an instance id it does not
    /// know): EC2's `InvalidInstanceID.NotFound`, Auto Scaling's `ValidationError` naming an
    /// instance it does not know.
    pub fn is_not_found(&self) -> bool {
        match self.code.as_deref() {
            Some("InvalidInstanceID.NotFound" | "InvalidInstanceID.Malformed") => true,
            Some("ValidationError") => self.message.contains("not found"),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_which_call_failed_how_and_how_often() {
        let e = ApiError {
            api: "SetDesiredCapacity",
            code: Some("Throttling".into()),
            message: "Rate exceeded".into(),
            class: ErrorClass::Throttling,
            attempts: 8,
        };
        assert_eq!(
            e.clone().into_fleet("increase").to_string(),
            "increase failed: SetDesiredCapacity failed (Throttling): Rate exceeded after 8 attempts"
        );
        assert!(!e.is_not_found());
    }
}
