//! `nodemem crds`: print the CRDs, write them to a directory, or check a directory for
//! drift from the Rust types (CI runs the check).

use std::path::{Path, PathBuf};

use nodemem_api::crdgen::{crds, render, render_all};

use nodemem_plumbing::CliError;

#[derive(Clone, Debug, clap::Args)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory instead of printing.
    #[arg(long, conflicts_with = "check")]
    pub output_dir: Option<PathBuf>,
    /// Fail if the files in this directory differ from the generated CRDs.
    #[arg(long)]
    pub check: Option<PathBuf>,
}

pub fn run(args: &CrdsArgs) -> Result<String, CliError> {
    if let Some(dir) = &args.output_dir {
        write_dir(dir)?;
        return Ok(String::new());
    }
    if let Some(dir) = &args.check {
        check_dir(dir)?;
        return Ok(format!("{}: CRDs are up to date\n", dir.display()));
    }
    Ok(render_all())
}

fn write_dir(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(|e| CliError::one(format!("{}: {e}", dir.display())))?;
    for (file, crd) in crds() {
        let path = dir.join(file);
        // Write to a temporary file and rename, so a failure never leaves half a CRD.
        let tmp = dir.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, render(&crd))
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(|e| CliError::one(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

/// Every file that is missing or differs, one line each.
pub fn check_dir(dir: &Path) -> Result<(), CliError> {
    let mut problems = Vec::new();
    for (file, crd) in crds() {
        let path = dir.join(file);
        match std::fs::read_to_string(&path) {
            Ok(text) if text == render(&crd) => {}
            Ok(_) => problems.push(format!(
                "{}: differs from the Rust types; run `nodemem crds --output-dir {}`",
                path.display(),
                dir.display()
            )),
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::many(problems))
    }
}
