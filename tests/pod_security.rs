//! The Pod Security rules on the cases of `tests/fixtures/pod-security.yaml`, without a
//! cluster: for each template and `LEVEL:VERSION`, the injector names exactly the controls
//! the fixture expects (the e2e tier `pod_security` holds the same cases against a real
//! API server's Pod Security admission).

// The tier `pod_security` of tests/e2e also builds the cases' Pods and reads the API
// server's words, which this file does not need.
#[allow(dead_code)]
#[path = "common/pod_security.rs"]
mod pod_security;

#[test]
fn the_injector_names_exactly_the_controls_expected() {
    let cases = pod_security::cases();
    assert!(cases.len() >= 8, "expected at least 8 cases, found {}", cases.len());
    let mut wrong = Vec::new();
    for case in &cases {
        for (at, expected) in &case.expect {
            let ours = case.ours(at);
            if &ours != expected {
                wrong.push(format!("{} at {at}: expected {expected:?}, found {ours:?}", case.name));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} disagreement(s):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_api_server_s_words_are_read_as_controls() {
    let message = r#"pods "p" is forbidden: violates PodSecurity "restricted:latest": hostPort (container "envoy" uses hostPort 8080), allowPrivilegeEscalation != false (containers "i", "envoy" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (containers "i", "envoy" must set securityContext.capabilities.drop=["ALL"]), restricted volume types (volumes "hp" use restricted volume types "hostPath"), runAsUser=0 (container "i" must not set runAsUser=0)"#;
    assert_eq!(
        pod_security::controls_in(message).into_iter().collect::<Vec<_>>(),
        [
            "allowPrivilegeEscalation",
            "capabilities",
            "hostPorts",
            "runAsUser",
            "volumeTypes"
        ]
    );
}
