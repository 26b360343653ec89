//! A webhook's CEL `matchConditions`, evaluated here as the API server evaluates them:
//! the deployed expressions themselves, never a copy. Pure.
//!
//! The engine is kube's (`kube::core::cel`: the `cel` interpreter plus the Kubernetes
//! extension functions such as `lowerAscii` and `trim`). Variables are bound as the API
//! server binds them for a native object: `object` is the object's JSON with its keys as
//! they are. kube's `VapEvaluator` would escape every key the way CRD *property names* are
//! escaped (`.` → `__dot__`, `/` → `__slash__`, ...), map keys included, so
//! `object.metadata.annotations['sidecar.samplecrd.k8s.io/inject']` would never find the
//! annotation there; the API server escapes no map key (annotations and labels are maps).
//! Not available here: `authorizer` (it asks the API server); an expression using it is
//! reported as not evaluable.

use k8s_openapi::api::admissionregistration::v1::MatchCondition;
use kube::core::cel::KubeCelExt;
use kube::core::cel::cel::{Context, Program, Value as CelValue, to_value};
use serde_json::{Value, json};

/// The admission request a Pod CREATE in `namespace` would carry, as the `request`
/// variable.
pub fn pod_create_request(namespace: &str, name: &str) -> Value {
    json!({
        "operation": "CREATE",
        "namespace": namespace,
        "name": name,
        "dryRun": false,
        "kind": { "group": "", "version": "v1", "kind": "Pod" },
        "resource": { "group": "", "version": "v1", "resource": "pods" },
        "requestKind": { "group": "", "version": "v1", "kind": "Pod" },
        "requestResource": { "group": "", "version": "v1", "resource": "pods" },
        "userInfo": { "username": "", "groups": [] },
    })
}

/// One matchCondition's result: `Ok(value)`, or why it cannot be evaluated (the API
/// server then applies the webhook's `failurePolicy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionResult {
    pub name: String,
    pub value: Result<bool, String>,
}

/// Evaluates each condition against `object` (and `request`), in order. For one object;
/// many are evaluated against a [`Compiled`] set, which compiles each expression once.
pub fn evaluate(conditions: &[MatchCondition], object: &Value, request: &Value) -> Vec<ConditionResult> {
    Compiled::new(conditions).evaluate(object, request)
}

/// A webhook's matchConditions, compiled: an expression that does not compile keeps why.
#[derive(Debug)]
pub struct Compiled {
    conditions: Vec<(String, Result<Program, String>)>,
}

impl Compiled {
    pub fn new(conditions: &[MatchCondition]) -> Compiled {
        let conditions = conditions
            .iter()
            .map(|condition| {
                let program = Program::compile(&condition.expression).map_err(|e| format!("does not compile: {e}"));
                (condition.name.clone(), program)
            })
            .collect();
        Compiled { conditions }
    }

    /// Each condition's result against `object` (and `request`), in order.
    pub fn evaluate(&self, object: &Value, request: &Value) -> Vec<ConditionResult> {
        // A binding error is every condition's answer, whether or not it compiled.
        let context = bind(object, request);
        self.conditions
            .iter()
            .map(|(name, program)| ConditionResult {
                name: name.clone(),
                value: match (&context, program) {
                    (Err(err), _) | (Ok(_), Err(err)) => Err(err.clone()),
                    (Ok(context), Ok(program)) => run(context, program),
                },
            })
            .collect()
    }
}

fn bind(object: &Value, request: &Value) -> Result<Context<'static>, String> {
    let mut context = Context::default().with_all();
    let convert = |what: &str, value: &Value| {
        to_value(value).map_err(|e| format!("cannot bind `{what}` for CEL: expected JSON, found {e}"))
    };
    context.add_variable_from_value("object", convert("object", object)?);
    context.add_variable_from_value("oldObject", CelValue::Null);
    context.add_variable_from_value("request", convert("request", request)?);
    Ok(context)
}

fn run(context: &Context<'_>, program: &Program) -> Result<bool, String> {
    match program.execute(context) {
        Ok(CelValue::Bool(value)) => Ok(value),
        Ok(other) => Err(format!("expected a boolean, found {:?}", other.type_of())),
        Err(err) => Err(format!("evaluation error: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(name: &str, expression: &str) -> MatchCondition {
        MatchCondition {
            name: name.into(),
            expression: expression.into(),
        }
    }

    #[test]
    fn annotation_keys_are_found_as_the_api_server_finds_them() {
        let pod = json!({"metadata": {"name": "p", "annotations": {"sidecar.samplecrd.k8s.io/inject": " TRUE "}}});
        let results = evaluate(
            &[
                condition(
                    "opted-in",
                    "object.metadata.annotations['sidecar.samplecrd.k8s.io/inject'].trim().lowerAscii() == 'true'",
                ),
                condition("absent", "'other/key' in object.metadata.annotations"),
                condition(
                    "namespace",
                    "request.namespace == 'apps' && request.operation == 'CREATE'",
                ),
            ],
            &pod,
            &pod_create_request("apps", "p"),
        );
        let values: Vec<_> = results.iter().map(|r| (r.name.as_str(), r.value.clone())).collect();
        assert_eq!(
            values,
            [("opted-in", Ok(true)), ("absent", Ok(false)), ("namespace", Ok(true))]
        );
    }

    #[test]
    fn errors_and_non_booleans_say_what_they_are() {
        let pod = json!({"metadata": {"name": "p"}});
        let results = evaluate(
            &[
                condition("missing", "object.metadata.annotations['a'] == 'b'"),
                condition("number", "1 + 1"),
                condition("syntax", "object.metadata.name ==="),
            ],
            &pod,
            &pod_create_request("apps", "p"),
        );
        assert!(
            results[0].value.as_ref().unwrap_err().starts_with("evaluation error"),
            "{results:?}"
        );
        assert!(
            results[1].value.as_ref().unwrap_err().contains("expected a boolean"),
            "{results:?}"
        );
        assert!(
            results[2].value.as_ref().unwrap_err().contains("does not compile"),
            "{results:?}"
        );
    }
}
