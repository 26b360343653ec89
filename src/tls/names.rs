//! The names a serving certificate is for: the Service's DNS names, the checks on
//! Service, namespace and extra SAN values, and whether a certificate's SANs cover a name.

use std::net::IpAddr;

use rcgen::SanType;

use super::CertError;

/// The DNS names the API server may use for Service `service` in `namespace`.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// Checks that `value` (the value of `flag`) is a DNS label, as Service and namespace
/// names are.
pub fn check_dns_label(flag: &'static str, value: &str) -> Result<(), CertError> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(CertError::InvalidName {
            flag,
            found: value.to_string(),
        })
    }
}

/// An extra `--san`: an IP literal becomes an IP SAN, anything else must be a DNS name.
pub(super) fn parse_san(value: &str) -> Result<SanType, CertError> {
    match value.parse::<IpAddr>() {
        Ok(ip) => Ok(SanType::IpAddress(ip)),
        Err(_) => dns_san(value),
    }
}

pub(super) fn dns_san(name: &str) -> Result<SanType, CertError> {
    let invalid = || CertError::InvalidSan {
        found: name.to_string(),
    };
    let body = name.strip_prefix("*.").unwrap_or(name);
    let labels_ok = !body.is_empty()
        && name.len() <= 253
        && body.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !labels_ok {
        return Err(invalid());
    }
    name.try_into().map(SanType::DnsName).map_err(|_| invalid())
}

/// The names in `required` that no SAN in `sans` covers (DNS names compare without case;
/// a `*.` SAN covers exactly one leftmost label).
pub fn missing_names(sans: &[String], required: &[String]) -> Vec<String> {
    let covers = |san: &str, name: &str| {
        let (san, name) = (san.to_ascii_lowercase(), name.to_ascii_lowercase());
        match san.strip_prefix("*.") {
            Some(parent) => name
                .split_once('.')
                .is_some_and(|(label, rest)| !label.is_empty() && rest == parent),
            None => san == name,
        }
    };
    required
        .iter()
        .filter(|name| !sans.iter().any(|san| covers(san, name)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_names_compares_without_case_and_honours_single_label_wildcards() {
        let required: Vec<String> = service_dns_names("injector", "mesh");
        let all = required.clone();
        assert!(missing_names(&all, &required).is_empty());
        let upper: Vec<String> = all.iter().map(|n| n.to_uppercase()).collect();
        assert!(missing_names(&upper, &required).is_empty());
        let partial = vec!["injector".to_string(), "injector.mesh.svc".to_string()];
        assert_eq!(
            missing_names(&partial, &required),
            vec![
                "injector.mesh".to_string(),
                "injector.mesh.svc.cluster.local".to_string()
            ]
        );
        let wildcard = vec!["*.mesh.svc".to_string()];
        assert_eq!(
            missing_names(&wildcard, &["injector.mesh.svc".to_string()]),
            Vec::<String>::new()
        );
        // One label only, never the parent itself nor two labels down.
        assert_eq!(missing_names(&wildcard, &["mesh.svc".to_string()]).len(), 1);
        assert_eq!(missing_names(&wildcard, &["a.injector.mesh.svc".to_string()]).len(), 1);
        assert_eq!(missing_names(&[], &required), required);
    }
}
