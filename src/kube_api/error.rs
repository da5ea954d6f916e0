//! The one place a kube-rs error becomes an [`ApiError`]: by the HTTP status of the API
//! server's answer and, for a status that says nothing by itself, its `reason`; failures
//! below HTTP (connect, read timeouts, broken streams) are `Unavailable`. The leader
//! fence's refusal is `Forbidden`, whether met inside a request or checked before one.

use etcd_operator_actors::ports::ApiError;

use crate::controller::fence::Fenced;
use crate::error::with_causes;
use kube::core::Status;

/// `error`, met while `what`, as a value callers act on.
pub(crate) fn api_error(what: &str, error: &kube::Error) -> ApiError {
    match error {
        kube::Error::Api(status) => from_status(what, status),
        kube::Error::Service(cause) if cause.is::<Fenced>() => {
            ApiError::Forbidden(format!("{what}: {cause}"))
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            ApiError::Unavailable(format!(
                "{what}: {}",
                with_causes(&error.to_string(), error)
            ))
        }
        other => ApiError::Other(format!(
            "{what}: {}",
            with_causes(&other.to_string(), other)
        )),
    }
}

impl From<Fenced> for ApiError {
    /// A write the fence refused, checked before any request: `Forbidden`, in the fence's
    /// words.
    fn from(refusal: Fenced) -> Self {
        ApiError::Forbidden(refusal.to_string())
    }
}

/// An answer of the API server; the message keeps what the server said, then its code and
/// reason.
fn from_status(what: &str, status: &Status) -> ApiError {
    let said = if status.message.is_empty() {
        &status.reason
    } else {
        &status.message
    };
    let message = format!("{what}: {said} ({} {})", status.code, status.reason);
    match status.code {
        404 => ApiError::NotFound(message),
        409 => ApiError::Conflict(message),
        401 | 403 => ApiError::Forbidden(message),
        400 | 422 => ApiError::Invalid(message),
        429 | 500..=599 => ApiError::Unavailable(message),
        _ => from_reason(&status.reason, message),
    }
}

/// A status whose code does not say what happened (none, or one no caller acts on).
fn from_reason(reason: &str, message: String) -> ApiError {
    match reason {
        "NotFound" => ApiError::NotFound(message),
        "AlreadyExists" | "Conflict" => ApiError::Conflict(message),
        "Unauthorized" | "Forbidden" => ApiError::Forbidden(message),
        "Invalid" | "BadRequest" => ApiError::Invalid(message),
        "ServerTimeout" | "Timeout" | "TooManyRequests" | "ServiceUnavailable"
        | "InternalError" => ApiError::Unavailable(message),
        _ => ApiError::Other(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the API server answers with `code` and `reason`, as kube-rs returns it.
    fn answer(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
    }

    fn classified(code: u16, reason: &str, message: &str) -> ApiError {
        api_error("patching pod foo-abcde", &answer(code, reason, message))
    }

    #[test]
    fn each_status_the_api_server_answers_becomes_what_callers_act_on() {
        let cases = [
            (404, "NotFound", "not_found"),
            (409, "AlreadyExists", "conflict"),
            (409, "Conflict", "conflict"),
            (403, "Forbidden", "forbidden"),
            (401, "Unauthorized", "forbidden"),
            (422, "Invalid", "invalid"),
            (400, "BadRequest", "invalid"),
            (500, "InternalError", "unavailable"),
            (503, "ServiceUnavailable", "unavailable"),
            (504, "Timeout", "unavailable"),
            (429, "TooManyRequests", "unavailable"),
            (410, "Expired", "other"),
        ];
        for (code, reason, label) in cases {
            let error = classified(code, reason, "what the server said");
            assert_eq!(error.metric_label(), label, "{code} {reason}: {error:?}");
        }
    }

    #[test]
    fn the_status_code_decides_over_the_reason() {
        // A reason clarifies a code but does not override it.
        let error = classified(422, "Conflict", "spec.containers: Invalid value");
        assert!(matches!(error, ApiError::Invalid(_)), "{error:?}");
    }

    #[test]
    fn a_status_without_a_code_is_classified_by_its_reason() {
        assert!(matches!(
            classified(0, "NotFound", "pods \"x\" not found"),
            ApiError::NotFound(_)
        ));
        assert!(matches!(
            classified(0, "AlreadyExists", "exists"),
            ApiError::Conflict(_)
        ));
        assert!(matches!(
            classified(0, "ServerTimeout", "try again"),
            ApiError::Unavailable(_)
        ));
        assert!(matches!(classified(0, "", "?"), ApiError::Other(_)));
    }

    #[test]
    fn the_fences_refusal_is_forbidden_in_the_fences_words() {
        let refusal = Fenced {
            write: "take a backup".into(),
            reason: "this replica does not hold the leader Lease".into(),
        };
        let error = ApiError::from(refusal);
        assert!(matches!(error, ApiError::Forbidden(_)), "{error:?}");
        assert_eq!(
            error.message(),
            "refusing to take a backup: this replica does not hold the leader Lease"
        );
    }

    #[test]
    fn a_rejection_keeps_the_servers_message_for_people() {
        let said = "admission webhook \"policy.example.com\" denied the request: no hostPath";
        let error = classified(422, "Invalid", said);
        let ApiError::Invalid(message) = &error else {
            panic!("not Invalid: {error:?}");
        };
        assert_eq!(
            message,
            &format!("patching pod foo-abcde: {said} (422 Invalid)")
        );
    }

    #[tokio::test]
    async fn an_api_server_that_cannot_be_reached_is_unavailable() {
        // Port 1 on loopback: nothing listens there.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client, "default");
        let error = pods.get("foo").await.expect_err("nothing listens");
        let classified = api_error("reading pod foo", &error);
        let ApiError::Unavailable(message) = &classified else {
            panic!("not Unavailable: {classified:?} from {error:?}");
        };
        assert!(message.starts_with("reading pod foo: "), "{message}");
    }
}
