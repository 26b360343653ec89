//! Whether there is a cluster to talk to, decided before any client is built: kube's own
//! error when there is none lists every place it tried, with doubled quotes, and says
//! "cannot reach" of a cluster nobody named.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KubeconfigError {
    #[error("no kubeconfig found (KUBECONFIG unset, ~/.kube/config missing)")]
    None,
    #[error("no kubeconfig found: KUBECONFIG is {value}, and no such file exists")]
    Missing { value: String },
}

/// Where the cluster's configuration comes from, as kubectl and kube look for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `KUBECONFIG`: one or more files, of which at least one exists.
    Env,
    /// `~/.kube/config`.
    Home(PathBuf),
    /// The ServiceAccount of the Pod this runs in.
    InCluster,
}

/// The cluster configuration this process would use, from its environment.
pub fn find() -> Result<Source, KubeconfigError> {
    find_in(
        std::env::var_os("KUBECONFIG"),
        std::env::var_os("HOME").map(PathBuf::from),
        std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() && std::env::var_os("KUBERNETES_SERVICE_PORT").is_some(),
    )
}

fn find_in(kubeconfig: Option<OsString>, home: Option<PathBuf>, in_cluster: bool) -> Result<Source, KubeconfigError> {
    if let Some(value) = kubeconfig.filter(|v| !v.is_empty()) {
        // A list, as for PATH; kubectl skips the entries that do not exist.
        if std::env::split_paths(&value).any(|path| path.is_file()) {
            return Ok(Source::Env);
        }
        return Err(KubeconfigError::Missing {
            value: value.to_string_lossy().into_owned(),
        });
    }
    if let Some(config) = home.map(|home| home.join(".kube").join("config"))
        && Path::is_file(&config)
    {
        return Ok(Source::Home(config));
    }
    if in_cluster {
        return Ok(Source::InCluster);
    }
    Err(KubeconfigError::None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_any_the_error_is_one_line_naming_where_it_looked() {
        let empty = tempfile::tempdir().unwrap();
        let err = find_in(None, Some(empty.path().to_path_buf()), false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no kubeconfig found (KUBECONFIG unset, ~/.kube/config missing)"
        );
        // An empty KUBECONFIG is unset, as for kubectl.
        assert_eq!(find_in(Some(OsString::new()), None, false), Err(KubeconfigError::None));
    }

    #[test]
    fn kubeconfig_then_home_then_in_cluster() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(find_in(None, Some(home.path().into()), true), Ok(Source::InCluster));
        let config = home.path().join(".kube/config");
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(&config, "apiVersion: v1\n").unwrap();
        assert_eq!(
            find_in(None, Some(home.path().into()), true),
            Ok(Source::Home(config.clone()))
        );
        let listed = std::env::join_paths([home.path().join("absent"), config]).unwrap();
        assert_eq!(find_in(Some(listed), None, false), Ok(Source::Env));
        let absent = home.path().join("absent").into_os_string();
        let err = find_in(Some(absent), Some(home.path().into()), true).unwrap_err();
        assert!(matches!(err, KubeconfigError::Missing { .. }), "{err}");
        assert!(err.to_string().contains("absent, and no such file exists"), "{err}");
    }
}
