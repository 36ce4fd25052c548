//! `cursor-runner distribution pin | verify | materialize`: operator commands for a
//! pinned Cursor distribution (see `cursor_runner_supervisor::distribution`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use cursor_runner_supervisor::distribution::{self, Manifest, Platform, Progress, VerifyMode};

#[derive(clap::Subcommand)]
pub enum DistributionCommand {
    /// Pin an archive the operator trusts: print (or write) its manifest entry.
    Pin {
        #[arg(long)]
        archive: PathBuf,
        #[arg(long)]
        version: String,
        /// `linux-x64`, `darwin-arm64` or `darwin-x64`.
        #[arg(long)]
        platform: String,
        /// Write the manifest here instead of printing it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Check an installed closure against its pin.
    Verify {
        #[arg(long)]
        manifest: PathBuf,
        #[arg(long)]
        dir: PathBuf,
        /// Default: this machine's platform.
        #[arg(long)]
        platform: Option<String>,
        /// Re-hash every file (default: file set, sizes, modes only).
        #[arg(long)]
        full: bool,
    },
    /// Install a pinned archive into a new, read-only directory.
    Materialize {
        #[arg(long)]
        manifest: PathBuf,
        #[arg(long)]
        archive: PathBuf,
        #[arg(long)]
        into: PathBuf,
        #[arg(long)]
        platform: Option<String>,
    },
}

pub fn platform(name: Option<&str>) -> anyhow::Result<Platform> {
    Ok(match name {
        Some(name) => Platform::parse(name)?,
        None => Platform::current()?,
    })
}

/// The pin of `platform` in the manifest at `path`.
pub fn load_pin(path: &Path, platform: Platform) -> anyhow::Result<distribution::PlatformPin> {
    let manifest = Manifest::load(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(manifest.platform(platform)?.clone())
}

pub fn run(command: DistributionCommand) -> anyhow::Result<()> {
    match command {
        DistributionCommand::Pin {
            archive,
            version,
            platform: name,
            out,
        } => {
            let manifest = distribution::pin(&archive, &version, platform(Some(&name))?)?;
            let json = manifest.to_json();
            match out {
                Some(path) => std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?,
                None => println!("{json}"),
            }
        }
        DistributionCommand::Verify {
            manifest,
            dir,
            platform: name,
            full,
        } => {
            let pin = load_pin(&manifest, platform(name.as_deref())?)?;
            let mode = if full { VerifyMode::Full } else { VerifyMode::Quick };
            distribution::verify(&dir, &pin, mode)?;
            println!(
                "verified: {} files, closure sha256:{}",
                pin.files.len(),
                pin.closure_sha256
            );
        }
        DistributionCommand::Materialize {
            manifest,
            archive,
            into,
            platform: name,
        } => {
            let pin = load_pin(&manifest, platform(name.as_deref())?)?;
            let mut last_percent = None;
            let result = distribution::materialize(&archive, &into, &pin, |p: Progress| {
                let percent = (p.done * 100).checked_div(p.total).unwrap_or(100);
                if last_percent != Some((p.phase, percent / 10)) {
                    last_percent = Some((p.phase, percent / 10));
                    eprintln!("{:?}: {percent}%", p.phase);
                }
            });
            if let Err(e) = result {
                bail!("materializing {} failed: {e}", archive.display());
            }
            println!(
                "materialized into {} (closure sha256:{})",
                into.display(),
                pin.closure_sha256
            );
        }
    }
    Ok(())
}
