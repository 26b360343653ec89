//! Tier `validate`: the ValidatingWebhookConfiguration of `manifests/` at `kubectl apply`
//! time. `serve --standalone` runs on loopback (`/validate` needs no cluster) behind the
//! shipped configuration, sent by `url:` to it and narrowed to this tier's namespace. A
//! ConfigMap whose template does not parse is refused with the reload path's message (field
//! and line), with `--dry-run=server` too; a good one is admitted; an update to a broken one
//! is refused and the good one stays; another ConfigMap is none of the webhook's business;
//! with the webhook down the apply goes through (`failurePolicy: Ignore`: the reload path is
//! the safety net). Then `serve` in cluster mode behind the same configuration: a ConfigMap
//! holding `classic` is admitted, and `kubectl apply` prints the warning that it breaks the
//! Pod Security level a namespace of the cluster enforces, naming it.

use envoy_injector::template::TemplateSet;
use envoy_injector::tls;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::core::ApiResource;

use crate::support::*;

pub const TIER: Tier = Tier {
    name: "validate",
    run: |suite| Box::pin(run(suite)),
};

/// A template with a misspelt field on line 3.
const BROKEN: &str = "containers:\n- name: envoy\n  imag: envoy:v1\n";

async fn run(suite: &Suite) -> TierResult {
    suite.loopback_webhooks()?;
    require_kubectl()?;
    // Declared first, so it is dropped last: after the process has stopped.
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(&suite.client, &scope, "validate", &[]).await;
    let certs = tls::generate(INJECTOR_NAME, &ns.name, &["127.0.0.1".to_string()], 1).expect("test certificates");
    let (serve, webhook) = serve_on_loopback("validate", &certs, &["--standalone"]).await;
    serve.wait_ready().await;
    let config_name = format!("envoy-injector-{}", ns.name);
    scope.delete_later(
        ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        None,
        &config_name,
    );
    kubectl_apply(&[shipped_webhooks_at(
        "manifests/validating-webhook.yaml",
        &config_name,
        &format!("https://{webhook}/validate"),
        certs.ca.cert_pem.as_bytes(),
        &[&ns.name],
    )])
    .await;

    let broken = in_namespace(&configmap_object(INJECTOR_NAME, BROKEN), &ns.name).to_string();
    let expected = TemplateSet::from_data(
        &format!("{}/{INJECTOR_NAME}", ns.name),
        &[("config".to_string(), BROKEN.to_string())].into(),
        envoy_injector::template::KubeVersion::NEWEST,
    )
    .expect_err("the broken template does not parse")
    .to_string();
    assert!(
        expected.contains("unknown field `containers[0].imag` at line 3"),
        "{expected}"
    );
    let dry_run = ["apply", "--dry-run=server", "--validate=false", "-f", "-"];
    let for_real = ["apply", "--validate=false", "-f", "-"];
    // The API server picks the configuration up within moments.
    let refused = wait_for(
        "the webhook to refuse a broken template (dry run)",
        PATIENCE * 2,
        async || {
            let out = kubectl(&dry_run, Some(&broken)).await;
            if out.status.success() {
                Err(format!("admitted: {}", describe_output(&out)))
            } else {
                Ok(out)
            }
        },
    )
    .await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("denied the request") && stderr.contains(&expected),
        "expected the refusal to carry `{expected}`, found: {}",
        describe_output(&refused)
    );
    step!("a broken template is refused at apply time (dry run): {expected}");

    let out = kubectl(&for_real, Some(&broken)).await;
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains(&expected),
        "expected a broken template to be refused with `{expected}`, found: {}",
        describe_output(&out)
    );
    let stored = kubectl(&["get", "configmap", INJECTOR_NAME, "-n", &ns.name], None).await;
    assert!(
        !stored.status.success(),
        "expected nothing stored, found: {}",
        describe_output(&stored)
    );

    let good_template = template("envoy", DEFAULT_IMAGE);
    let good = in_namespace(&configmap_object(INJECTOR_NAME, &good_template), &ns.name).to_string();
    for args in [&dry_run[..], &for_real[..]] {
        let out = kubectl(args, Some(&good)).await;
        assert!(
            out.status.success(),
            "expected a good template to be admitted ({args:?}), found: {}",
            describe_output(&out)
        );
    }
    // An UPDATE to a broken template is refused too, and the good one stays.
    let out = kubectl(&for_real, Some(&broken)).await;
    assert!(
        !out.status.success(),
        "expected an update to a broken template to be refused, found: {}",
        describe_output(&out)
    );
    let data = kubectl(
        &[
            "get",
            "configmap",
            INJECTOR_NAME,
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.data.config}",
        ],
        None,
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&data.stdout), good_template);
    step!("a good template is admitted; an update to a broken one is refused");

    // Another ConfigMap is none of the webhook's business.
    let other = in_namespace(&configmap_object("something-else", BROKEN), &ns.name).to_string();
    let out = kubectl(&for_real, Some(&other)).await;
    assert!(
        out.status.success(),
        "expected another ConfigMap to go unchecked, found: {}",
        describe_output(&out)
    );

    pod_security_warning(suite, &scope, &ns, &config_name).await;

    // Webhook down: failurePolicy Ignore lets the apply through.
    serve.terminate().await;
    let out = kubectl(&for_real, Some(&broken)).await;
    assert!(
        out.status.success(),
        "expected the apply to go through with the webhook down, found: {}",
        describe_output(&out)
    );
    step!("with the webhook down, a broken template is applied (failurePolicy Ignore)");
    Ok(String::new())
}

/// `serve` in cluster mode (it reads Namespaces from its cache) behind the configuration
/// `config_name`: a ConfigMap adding `classic` is admitted with `kubectl apply` printing the
/// warning that it breaks `restricted`, which a namespace of the cluster enforces.
async fn pod_security_warning(suite: &Suite, scope: &Scope, ns: &TestNs, config_name: &str) {
    suite.install_network_crd().await;
    let restricted = TestNs::create(
        &suite.client,
        scope,
        "validate-restricted",
        &[("pod-security.kubernetes.io/enforce", "restricted")],
    )
    .await;
    let certs = tls::generate(INJECTOR_NAME, &ns.name, &["127.0.0.1".to_string()], 1).expect("test certificates");
    let (serve, webhook) = serve_on_loopback(
        "validate-cluster",
        &certs,
        &[
            "--namespace",
            &ns.name,
            "--network-backend",
            "none",
            "--identity",
            "validate-test-replica",
            "--watch-uninjected=false",
        ],
    )
    .await;
    serve.wait_ready().await;
    kubectl_apply(&[shipped_webhooks_at(
        "manifests/validating-webhook.yaml",
        config_name,
        &format!("https://{webhook}/validate"),
        certs.ca.cert_pem.as_bytes(),
        &[&ns.name],
    )])
    .await;

    let mut both = in_namespace(&configmap_object(INJECTOR_NAME, envoy_injector::template::EMBEDDED_DEFAULT), &ns.name);
    both["data"]["classic"] = serde_json::json!(envoy_injector::template::EMBEDDED_CLASSIC);
    let both = both.to_string();
    let expected = "Warning: template `classic` breaks Pod Security restricted:latest, enforced in namespace";
    // The API server picks the new url up within moments.
    let warned = wait_for(
        "the cluster-mode webhook to warn of `classic` (dry run)",
        PATIENCE * 2,
        async || {
            let out = kubectl(&["apply", "--dry-run=server", "--validate=false", "-f", "-"], Some(&both)).await;
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            match out.status.success() && stderr.contains(expected) {
                true => Ok(stderr),
                false => Err(describe_output(&out)),
            }
        },
    )
    .await;
    let warning = warned.lines().find(|l| l.starts_with(expected)).unwrap_or_default().to_string();
    assert!(
        warning.contains(&format!("`{}`", restricted.name)) || warning.contains(" more: "),
        "expected the warning to name namespace {} (or say how many more), found: {warning}",
        restricted.name
    );
    let out = kubectl(&["apply", "--validate=false", "-f", "-"], Some(&both)).await;
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stderr).contains(expected),
        "expected `classic` admitted with the warning, found: {}",
        describe_output(&out)
    );
    step!("`classic` admitted by the cluster-mode webhook with: {warning}");
    serve.terminate().await;
}
