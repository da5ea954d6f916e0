//! How a Kubernetes API call failed, as callers act on it: a leaf module, so that the
//! lifecycle's observation and the ports can both carry it.

use serde::Serialize;

/// A Kubernetes API call that failed: what callers act on, each with the message for
/// people. The adapter builds it once, from the HTTP status and the API server's `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
pub enum ApiError {
    /// The object is not there (404).
    #[error("{0}")]
    NotFound(String),
    /// The object exists already, belongs to someone else, or changed since it was read
    /// (409: `AlreadyExists`, or a `resourceVersion` precondition that failed).
    #[error("{0}")]
    Conflict(String),
    /// The caller may not do this (401, 403), or this replica's leader fence refused the
    /// write.
    #[error("{0}")]
    Forbidden(String),
    /// The API server's validation or admission rejected the request (400, 422), with the
    /// server's message.
    #[error("{0}")]
    Invalid(String),
    /// The API server could not be reached or could not answer in time (transport,
    /// timeout, 429, 5xx): a later try may succeed.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// What kind of failure a Kubernetes API call met: the [`ApiError`] without its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ApiErrorKind {
    /// The object is not there.
    NotFound,
    /// Exists already, owned by another, or changed since it was read.
    Conflict,
    /// Not allowed, or refused by this replica's leader fence.
    Forbidden,
    /// Rejected by validation or admission.
    Invalid,
    /// Not reached or not answered in time: a later try may succeed.
    Unavailable,
    /// Anything else.
    Other,
}

impl ApiErrorKind {
    /// A stable snake_case name, for metric labels and logs.
    pub fn metric_label(self) -> &'static str {
        match self {
            ApiErrorKind::NotFound => "not_found",
            ApiErrorKind::Conflict => "conflict",
            ApiErrorKind::Forbidden => "forbidden",
            ApiErrorKind::Invalid => "invalid",
            ApiErrorKind::Unavailable => "unavailable",
            ApiErrorKind::Other => "other",
        }
    }
}

impl ApiError {
    /// Its kind, without the message.
    pub fn kind(&self) -> ApiErrorKind {
        match self {
            ApiError::NotFound(_) => ApiErrorKind::NotFound,
            ApiError::Conflict(_) => ApiErrorKind::Conflict,
            ApiError::Forbidden(_) => ApiErrorKind::Forbidden,
            ApiError::Invalid(_) => ApiErrorKind::Invalid,
            ApiError::Unavailable(_) => ApiErrorKind::Unavailable,
            ApiError::Other(_) => ApiErrorKind::Other,
        }
    }

    /// What failed, for people.
    pub fn message(&self) -> &str {
        match self {
            ApiError::NotFound(m)
            | ApiError::Conflict(m)
            | ApiError::Forbidden(m)
            | ApiError::Invalid(m)
            | ApiError::Unavailable(m)
            | ApiError::Other(m) => m,
        }
    }

    /// A stable snake_case name of the variant, for metric labels.
    pub fn metric_label(&self) -> &'static str {
        self.kind().metric_label()
    }
}
