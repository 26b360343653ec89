//! Every shell script passes shellcheck (reported not run without shellcheck, but under
//! CI, where that fails: `.ci/run` installs it).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::kubectl::in_ci;
use crate::support::*;

fn shell_scripts(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules") {
                shell_scripts(&path, out);
            }
        } else if name.ends_with(".sh") {
            out.push(path);
        }
    }
}

pub fn shell_scripts_pass_shellcheck() -> Outcome {
    let root = repo("");
    let mut scripts = vec![root.join(".ci/run")];
    shell_scripts(&root, &mut scripts);
    scripts.sort();
    for script in &scripts {
        assert!(script.is_file(), "expected {} to exist", script.display());
    }
    if !have("shellcheck") {
        let why = format!(
            "expected shellcheck on PATH to check {} scripts, found none: `apt-get install shellcheck`",
            scripts.len()
        );
        assert!(!in_ci(), "shellcheck is required when CI is set: {why}");
        return Err(Skip(why));
    }
    let output = Command::new("shellcheck")
        .args(["--severity=style", "--external-sources"])
        .args(&scripts)
        .current_dir(&root)
        .output()
        .expect("run shellcheck");
    assert!(
        output.status.success(),
        "expected shellcheck to pass on {:?}, found {}:\n{}{}",
        scripts,
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}
