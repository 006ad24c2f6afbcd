//! How errors from below become the [`ApiError`]s the daemon replies with.

use crate::adapters::AdapterError;
use crate::protocol::ApiError;

/// Through `?`: scrubbed of every secret the daemon knows (see
/// [`crate::secrets`]), since the error does not carry its slice. Prefer
/// `adapter_error` in the world code, which also names the service and
/// masks the slice's `admin_url` whether registered or not.
impl From<AdapterError> for ApiError {
    fn from(e: AdapterError) -> Self {
        ApiError::new(crate::secrets::scrub(&e.message).into_owned())
    }
}

/// An error from inside the daemon (the registry, the filesystem) as the
/// reply: its text, scrubbed as every reply is at the server boundary. The
/// one such conversion for every verb.
pub(crate) fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adapter_error_converted_by_question_mark_is_scrubbed() {
        crate::secrets::register_url("postgresql://app:Q9uestionMarkPw@db:5432/x");
        let quoted =
            AdapterError::new("cannot connect with postgresql://app:Q9uestionMarkPw@db:5432/x");
        let api: ApiError = quoted.into();
        assert!(!api.message.contains("Q9uestionMarkPw"), "{}", api.message);
        assert!(api.message.contains("***"), "{}", api.message);
    }
}
