//! `fake-cursor`: a scripted stand-in for Cursor's `agent acp`.
//!
//! ```text
//! fake-cursor --scenario <FILE.json> [--record <FILE.ndjson>] [--check]
//! fake-cursor --transcript <FILE.ndjson> [--record <FILE.ndjson>] [--check]
//! ```
//!
//! Speaks ACP (NDJSON JSON-RPC 2.0) on stdin/stdout, logs to stderr, and plays
//! the turn scripts of the scenario file, or a normalizer transcript as one turn.
//! See README.md for the format.
//! Arguments it does not know (e.g. an `acp` subcommand or `--api-key K`
//! appended by the launcher) are logged and ignored.

mod agent;
mod models;
mod probes;
mod scenario;
mod sessions;
mod stdio;
mod step;
mod substitute;

use std::fs::OpenOptions;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nix::sys::signal::{SigHandler, Signal};

use crate::agent::Agent;
use crate::scenario::Scenario;
use crate::stdio::{log, spawn_reader};

/// Exit code for bad arguments or an invalid scenario file.
const EXIT_USAGE: i32 = 2;

const USAGE: &str =
    "usage: fake-cursor (--scenario <FILE.json> | --transcript <FILE.ndjson>) [--record <FILE.ndjson>] [--check]";

/// What the agent plays.
enum Script {
    Scenario(String),
    Transcript(String),
}

impl Script {
    fn path(&self) -> &str {
        match self {
            Self::Scenario(path) | Self::Transcript(path) => path,
        }
    }

    fn load(&self) -> Result<Scenario> {
        match self {
            Self::Scenario(path) => Scenario::load(path),
            Self::Transcript(path) => Scenario::load_transcript(path),
        }
    }
}

struct Args {
    script: Script,
    record: Option<String>,
    check: bool,
}

fn parse_args() -> Result<Option<Args>> {
    let mut script = None;
    let mut record = None;
    let mut check = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        match name.as_str() {
            "--scenario" | "--transcript" | "--record" => {
                let value = match inline {
                    Some(v) => v,
                    None => args.next().with_context(|| format!("{name} needs a value"))?,
                };
                match name.as_str() {
                    "--record" => record = Some(value),
                    _ if script.is_some() => bail!("give one --scenario or --transcript\n{USAGE}"),
                    "--scenario" => script = Some(Script::Scenario(value)),
                    _ => script = Some(Script::Transcript(value)),
                }
            }
            "--check" => check = true,
            "--sleep-forever" => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            _ => log(&format!("ignoring argument {arg:?}")),
        }
    }
    let Some(script) = script else {
        bail!("--scenario or --transcript is required\n{USAGE}");
    };
    Ok(Some(Args { script, record, check }))
}

fn main() {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => return,
        Err(e) => {
            log(&format!("{e:#}"));
            std::process::exit(EXIT_USAGE);
        }
    };
    let sc = match args.script.load() {
        Ok(sc) => sc,
        Err(e) => {
            log(&format!("{e:#}"));
            std::process::exit(EXIT_USAGE);
        }
    };
    if args.check {
        println!("{}: ok ({} turn(s))", args.script.path(), sc.turns.len());
        return;
    }
    if let Some(code) = sc.startup_exit_code {
        if let Some(text) = &sc.startup_stderr {
            use std::io::Write;
            let _ = std::io::stderr().write_all(substitute::with_env_values(text).as_bytes());
        }
        log(&format!("exiting with {code} on start, as scripted"));
        std::process::exit(code);
    }
    if sc.ignore_sigterm {
        // SAFETY: installing SIG_IGN runs no handler code.
        if let Err(e) = unsafe { nix::sys::signal::signal(Signal::SIGTERM, SigHandler::SigIgn) } {
            log(&format!("cannot ignore SIGTERM: {e}"));
        }
    }
    let record = match args.record.as_deref() {
        None => None,
        Some(path) => match OpenOptions::new().create(true).append(true).open(path) {
            Ok(f) => Some(f),
            Err(e) => {
                log(&format!("cannot open the record file {path}: {e}"));
                std::process::exit(EXIT_USAGE);
            }
        },
    };
    log(&format!(
        "pid {} playing {} ({} turn(s))",
        std::process::id(),
        args.script.path(),
        sc.turns.len()
    ));
    let rx = spawn_reader(record);
    Agent::new(sc, rx).run()
}
