//! `certs`: writes `ca.crt`, `tls.crt` and `tls.key` for the webhook Service.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::CertsArgs;
use envoy_injector::tls::{self, CertError};

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error(transparent)]
    Generate(#[from] CertError),
    #[error("cannot create --out-dir {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

pub fn run(args: &CertsArgs) -> Result<(), CertsError> {
    let generated = tls::generate(&args.service, &args.namespace, &args.sans, args.days)?;
    fs::create_dir_all(&args.out_dir).map_err(|source| CertsError::CreateDir {
        path: args.out_dir.clone(),
        source,
    })?;
    for (name, contents, private) in [
        ("ca.crt", &generated.ca.cert_pem, false),
        ("tls.crt", &generated.serving.cert_pem, false),
        ("tls.key", &generated.serving.key_pem, true),
    ] {
        let path = args.out_dir.join(name);
        write_file(&path, contents.as_bytes(), private).map_err(|source| CertsError::Write {
            path: path.clone(),
            source,
        })?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn write_file(path: &Path, contents: &[u8], private: bool) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(if private { 0o600 } else { 0o644 });
        let file = options.open(path)?;
        // `mode` only applies to new files; an existing key file may be more open.
        if private {
            file.set_permissions(fs::Permissions::from_mode(0o600))?;
        }
        write_all(file, contents)
    }
    #[cfg(not(unix))]
    {
        let _ = private;
        write_all(options.open(path)?, contents)
    }
}

fn write_all(mut file: fs::File, contents: &[u8]) -> std::io::Result<()> {
    file.write_all(contents)?;
    file.sync_all()
}
