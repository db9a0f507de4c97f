//! `Status` bodies, as the API server sends them for failed requests.
//!
//! Written from `staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go` (kubernetes/kubernetes):
//! `NewNotFound` (404, reason `NotFound`, message `<resource> "<name>" not found`),
//! `NewAlreadyExists` (409, `AlreadyExists`, `<resource> "<name>" already exists`), `NewInvalid`
//! (422, `Invalid`, `<Kind> "<name>" is invalid: <field>: <detail>`, one cause per field error)
//! and `NewBadRequest` (400, `BadRequest`). The envelope (`kind: Status`, `apiVersion: v1`,
//! `metadata: {}`, `status: Failure`, `code`) is `metav1.Status` from
//! `staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go`.

use serde_json::{Value, json};

/// A failed request's body and its HTTP status code.
#[derive(Debug, Clone)]
pub(crate) struct StatusError {
    pub(crate) code: u16,
    pub(crate) body: Value,
}

impl StatusError {
    fn new(code: u16, reason: &str, message: String, details: Option<Value>) -> StatusError {
        let mut body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        });
        if let Some(details) = details {
            body["details"] = details;
        }
        StatusError { code, body }
    }

    /// `NewNotFound(qualifiedResource, name)`.
    pub(crate) fn not_found(resource: &str, name: &str) -> StatusError {
        StatusError::new(
            404,
            "NotFound",
            format!("{resource} \"{name}\" not found"),
            Some(json!({"name": name, "kind": resource})),
        )
    }

    /// `NewAlreadyExists(qualifiedResource, name)`.
    pub(crate) fn already_exists(resource: &str, name: &str) -> StatusError {
        StatusError::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
            Some(json!({"name": name, "kind": resource})),
        )
    }

    /// `NewInvalid(qualifiedKind, name, errs)` with one `FieldValueRequired` or
    /// `FieldValueInvalid` cause per `(field, detail, cause type)`.
    pub(crate) fn invalid(
        kind: &str,
        name: &str,
        errors: &[(String, String, &str)],
    ) -> StatusError {
        let summary: Vec<String> = errors
            .iter()
            .map(|(field, detail, _)| format!("{field}: {detail}"))
            .collect();
        // errors.go: one error is shown as is, several as "[a, b]" (utilerrors.NewAggregate).
        let message = if summary.len() == 1 {
            format!("{kind} \"{name}\" is invalid: {}", summary[0])
        } else {
            format!("{kind} \"{name}\" is invalid: [{}]", summary.join(", "))
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|(field, detail, cause)| json!({"reason": cause, "message": detail, "field": field}))
            .collect();
        StatusError::new(
            422,
            "Invalid",
            message,
            Some(json!({"name": name, "kind": kind, "causes": causes})),
        )
    }

    /// `NewBadRequest(reason)`.
    pub(crate) fn bad_request(message: impl Into<String>) -> StatusError {
        StatusError::new(400, "BadRequest", message.into(), None)
    }

    /// 405 for a verb the fake does not serve on a path it knows
    /// (`NewMethodNotSupported`).
    pub(crate) fn method_not_supported(resource: &str, action: &str) -> StatusError {
        StatusError::new(
            405,
            "MethodNotAllowed",
            format!("{action} is not supported on resources of kind \"{resource}\""),
            Some(json!({"kind": resource})),
        )
    }

    /// 404 for a path the fake does not serve: the API server's plain `404 page not found`
    /// comes as a `Status` with reason `NotFound` and no details.
    pub(crate) fn no_route() -> StatusError {
        StatusError::new(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
            None,
        )
    }

    /// 500 for a failure of the Docker engine behind the fake (`NewInternalError`).
    pub(crate) fn internal(message: impl std::fmt::Display) -> StatusError {
        StatusError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
            None,
        )
    }
}

/// The `Status` the exec error channel carries when the command ended: `Success`, or
/// `NonZeroExitCode` with the code in a cause of type `ExitCode` — as the kubelet writes it in
/// `staging/src/k8s.io/kubelet/pkg/cri/streaming/remotecommand/exec.go` (`ServeExec`), with the
/// reason and cause type from `staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go`.
pub(crate) fn exec_status(exit_code: i64) -> Value {
    if exit_code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: exit status {exit_code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": exit_code.to_string()}]},
    })
}
