//! The API server's syntax rules for names and keys (apimachinery's `IsDNS1123Label`,
//! `IsValidPortName`, `IsEnvVarName`, ...), each as a predicate that says what was
//! expected when the text does not pass.

/// What each rule expects, in the words of an error.
pub const DNS_LABEL: &str =
    "a lowercase RFC 1123 label: at most 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit";
pub const DNS_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain: at most 253 characters of a-z, 0-9, '-' and '.', each dot-separated part starting and ending with a letter or digit";
pub const PORT_NAME: &str = "a port name: at most 15 characters of a-z, 0-9 and '-', with at least one letter, no '--', not starting or ending with '-'";
pub const ENV_NAME_STRICT: &str =
    "an environment variable name: letters, digits, '_', '-' and '.', not starting with a digit";
pub const ENV_NAME_RELAXED: &str = "an environment variable name: printable ASCII characters other than '='";
pub const CONFIG_MAP_KEY: &str =
    "a key: at most 253 characters of letters, digits, '-', '_' and '.', not '.' or '..' or starting with '..'";
pub const QUALIFIED_NAME: &str = "a qualified name: an optional DNS subdomain prefix and '/', then at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit";
pub const HTTP_HEADER_NAME: &str = "an HTTP header name: letters, digits and '-'";

fn label_ok(text: &str, max: usize) -> bool {
    let bytes = text.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    !bytes.is_empty() && bytes.len() <= max && edge(bytes.first()) && edge(bytes.last()) && bytes.iter().all(inner)
}

pub fn is_dns_label(text: &str) -> bool {
    label_ok(text, 63)
}

pub fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(|part| label_ok(part, 253))
}

/// IANA_SVC_NAME, as a container port's name and a probe's named port.
pub fn is_port_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 15
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.iter().any(u8::is_ascii_lowercase)
        && !text.contains("--")
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// `relaxed`: the rule of Kubernetes 1.32 and later.
pub fn is_env_name(text: &str, relaxed: bool) -> bool {
    if relaxed {
        return !text.is_empty() && text.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'=');
    }
    let bytes = text.as_bytes();
    let body = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    bytes.first().is_some_and(|b| body(b) && !b.is_ascii_digit()) && bytes.iter().all(body)
}

pub fn env_name_rule(relaxed: bool) -> &'static str {
    if relaxed { ENV_NAME_RELAXED } else { ENV_NAME_STRICT }
}

pub fn is_config_map_key(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && text != "."
        && !text.starts_with("..")
}

/// A label key or a resource name: `[prefix/]name`.
pub fn is_qualified_name(text: &str) -> bool {
    let (prefix, name) = match text.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, text),
    };
    let bytes = name.as_bytes();
    let body = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    let name_ok = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.iter().all(body);
    name_ok && prefix.is_none_or(is_dns_subdomain)
}

pub fn is_http_header_name(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A path that stays inside where it is put: not absolute, no `..` element.
pub fn descending_path_fault(path: &str) -> Option<&'static str> {
    if path.starts_with('/') {
        Some("a relative path")
    } else if path.split('/').any(|part| part == "..") {
        Some("a path without '..'")
    } else {
        None
    }
}

/// A file a volume writes: a descending path that does not start with `..` either.
pub fn local_path_fault(path: &str) -> Option<&'static str> {
    descending_path_fault(path).or_else(|| path.starts_with("..").then_some("a path not starting with '..'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        for good in ["a", "app", "a-1", "0", "x".repeat(63).as_str()] {
            assert!(is_dns_label(good), "{good}");
        }
        for bad in ["", "App", "-a", "a-", "a_b", "a.b", "x".repeat(64).as_str()] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        assert!(is_dns_subdomain("example.com") && is_dns_subdomain("a"));
        assert!(
            !is_dns_subdomain("") && !is_dns_subdomain("a..b") && !is_dns_subdomain(".a") && !is_dns_subdomain("A.b")
        );
    }

    #[test]
    fn port_names_follow_iana() {
        for good in ["http", "envoy-ready", "h2c", "a1"] {
            assert!(is_port_name(good), "{good}");
        }
        for bad in ["", "HTTP", "80", "a--b", "-a", "a-", "abcdefghijklmnop", "a_b"] {
            assert!(!is_port_name(bad), "{bad}");
        }
    }

    #[test]
    fn env_names_strict_before_1_32_relaxed_after() {
        assert!(is_env_name("LOG_LEVEL", false) && is_env_name("a.b-c", false) && is_env_name("_x", false));
        assert!(!is_env_name("1abc", false) && !is_env_name("a b", false) && !is_env_name("", false));
        assert!(is_env_name("1abc", true) && is_env_name("a b", true));
        assert!(!is_env_name("a=b", true) && !is_env_name("é", true) && !is_env_name("", true));
    }

    #[test]
    fn keys_qualified_names_headers_and_paths() {
        assert!(is_config_map_key("a.conf") && !is_config_map_key("..a") && !is_config_map_key("a/b"));
        assert!(is_qualified_name("cpu") && is_qualified_name("example.com/gpu"));
        assert!(
            !is_qualified_name("/gpu") && !is_qualified_name("example.com/") && !is_qualified_name("Ex_ample.com/gpu")
        );
        assert!(is_http_header_name("X-Trace") && !is_http_header_name("a b"));
        assert_eq!(descending_path_fault("/a"), Some("a relative path"));
        assert_eq!(descending_path_fault("a/../b"), Some("a path without '..'"));
        assert_eq!(local_path_fault("..a"), Some("a path not starting with '..'"));
        assert_eq!(local_path_fault("a/b"), None);
    }
}
