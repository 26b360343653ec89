//! The value rules on the cases of `tests/fixtures/template-values.yaml`, without a
//! cluster: the injector refuses exactly the templates their author expects refused (the
//! e2e tier `values` holds the same verdicts against a real API server), and each refusal
//! names a field and its line.

// The tier `values` of tests/e2e also builds the cases' Pods, which this file does not need.
#[allow(dead_code)]
#[path = "common/template_values.rs"]
mod template_values;

use envoy_injector::template::KubeVersion;

#[test]
fn the_injector_refuses_exactly_the_templates_expected_refused() {
    let cases = template_values::cases();
    assert!(cases.len() >= 60, "expected at least 60 cases, found {}", cases.len());
    let mut wrong = Vec::new();
    for case in &cases {
        let verdict = case.verdict(KubeVersion::NEWEST);
        if verdict.is_err() != case.expects_refusal() {
            wrong.push(format!("{}: expected {}, found {verdict:?}", case.name, case.expect));
        }
        if let Err(message) = &verdict
            && !message.contains(" at line ")
            && !message.contains("two ")
        {
            wrong.push(format!(
                "{}: expected the refusal to name a line, found {message}",
                case.name
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}
