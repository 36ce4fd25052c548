//! Where the database URL comes from. Its password is a secret, and a command line is
//! readable by every process on the host (`/proc/<pid>/cmdline`), agents included, so a URL
//! that carries one is taken from the environment or a file, and refused on the command line.

use std::path::PathBuf;

use anyhow::Context;
use clap::ArgMatches;
use clap::parser::ValueSource;

/// The clap id of `--database-url`, as derived from the field's name.
const DATABASE_URL_ID: &str = "database_url";

#[derive(clap::Args)]
pub struct DatabaseArgs {
    /// `postgres://…` (production) or `sqlite:PATH` (single node). A URL with a password is
    /// refused on the command line (every process on the host can read it there): give it in
    /// the environment variable or `--database-url-file`.
    #[arg(long, env = "CURSOR_RUNNER_DATABASE_URL", conflicts_with = "database_url_file")]
    database_url: Option<String>,
    /// A file holding the database URL (e.g. a mounted secret); a trailing newline is ignored.
    #[arg(long, env = "CURSOR_RUNNER_DATABASE_URL_FILE")]
    database_url_file: Option<PathBuf>,
}

impl DatabaseArgs {
    /// The URL, if one was given; `on_command_line` says whether `--database-url` came from
    /// argv (see [`url_given_on_command_line`]).
    pub fn url(&self, on_command_line: bool) -> anyhow::Result<Option<String>> {
        if let Some(path) = &self.database_url_file {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let url = text.trim_end_matches(['\n', '\r']);
            anyhow::ensure!(!url.is_empty(), "{} is empty", path.display());
            return Ok(Some(url.to_owned()));
        }
        match &self.database_url {
            Some(url) if on_command_line && has_password(url) => anyhow::bail!(
                "--database-url carries a password, and a command line is readable by every process on the host: \
                 give the URL in CURSOR_RUNNER_DATABASE_URL or in a file named by --database-url-file"
            ),
            url => Ok(url.clone()),
        }
    }
}

/// Whether the subcommand's `--database-url` was written on the command line (not taken
/// from the environment).
pub fn url_given_on_command_line(matches: &ArgMatches) -> bool {
    matches.subcommand().is_some_and(|(_, sub)| {
        sub.ids().any(|id| id == DATABASE_URL_ID) && sub.value_source(DATABASE_URL_ID) == Some(ValueSource::CommandLine)
    })
}

/// Whether a database URL carries a password: in its user info (`user:pw@host`) or as a
/// `password` query parameter.
pub fn has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = before_query.split('/').next().unwrap_or_default();
    let in_user_info = authority
        .rsplit_once('@')
        .is_some_and(|(credentials, _)| credentials.contains(':'));
    let in_query = query.split('&').any(|pair| {
        pair.split_once('=')
            .is_some_and(|(key, value)| key.eq_ignore_ascii_case("password") && !value.is_empty())
    });
    in_user_info || in_query
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_the_user_info_is_found() {
        assert!(has_password("postgres://runner:s3cret@db.internal:5432/runner"));
    }

    #[test]
    fn a_password_in_the_query_is_found() {
        assert!(has_password(
            "postgres://runner@db.internal/runner?sslmode=require&password=s3cret"
        ));
        assert!(has_password("postgres://db.internal/runner?PASSWORD=s3cret"));
    }

    #[test]
    fn a_url_without_a_password_has_none() {
        assert!(!has_password("postgres://postgres@127.0.0.1:5432/postgres"));
        assert!(!has_password("postgres://runner@db.internal/runner?sslmode=require"));
        assert!(!has_password("sqlite:/var/lib/cursor-runner/cursor-runner.db"));
        assert!(
            !has_password("postgres://runner@db.internal/a:b@c"),
            "a path is not user info"
        );
    }

    #[test]
    fn an_empty_password_parameter_is_no_password() {
        assert!(!has_password("postgres://runner@db.internal/runner?password="));
    }
}
