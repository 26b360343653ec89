//! The two kinds of webhook configuration whose `caBundle` must carry the CA of what the
//! replicas serve, seen alike: their kind and each webhook's name and client config.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};

/// A Mutating- or ValidatingWebhookConfiguration.
pub trait WebhookConfig {
    /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
    const KIND: &'static str;

    /// Each webhook's name and client config, in order.
    fn clients(&self) -> Vec<(&str, &WebhookClientConfig)>;
}

/// Both kinds have the same shape (`webhooks[].name`, `webhooks[].clientConfig`).
macro_rules! webhook_config {
    ($($kind:ident),+) => {$(
        impl WebhookConfig for $kind {
            const KIND: &'static str = stringify!($kind);

            fn clients(&self) -> Vec<(&str, &WebhookClientConfig)> {
                self.webhooks
                    .iter()
                    .flatten()
                    .map(|w| (w.name.as_str(), &w.client_config))
                    .collect()
            }
        }
    )+};
}

webhook_config!(MutatingWebhookConfiguration, ValidatingWebhookConfiguration);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_the_api_names_them() {
        assert_eq!(MutatingWebhookConfiguration::KIND, "MutatingWebhookConfiguration");
        assert_eq!(ValidatingWebhookConfiguration::KIND, "ValidatingWebhookConfiguration");
    }
}
