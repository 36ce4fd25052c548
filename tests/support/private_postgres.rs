//! A PostgreSQL cluster of one test's own, which the test stops, starts and restarts as a
//! database outage would (never the shared server other tests use). Its data lives in a
//! temporary directory; as root, the server runs as the `postgres` account (it refuses root).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The account the server runs as when the test runs as root.
const SERVER_ACCOUNT: &str = "postgres";

pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl PrivatePostgres {
    /// A fresh cluster on a free loopback port, trusting local connections, started.
    pub fn start() -> Self {
        let bin = server_binaries();
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let cluster = Self { dir, bin, port };
        if nix::unistd::geteuid().is_root() {
            let account = nix::unistd::User::from_name(SERVER_ACCOUNT)
                .expect("user lookup")
                .expect("a `postgres` account (the postgresql package makes one)");
            std::os::unix::fs::chown(
                cluster.dir.path(),
                Some(account.uid.as_raw()),
                Some(account.gid.as_raw()),
            )
            .expect("hand the cluster's directory to postgres");
        }
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data().display().to_string(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        let settings = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nfsync = off\n",
            cluster.dir.path().display()
        );
        let conf = cluster.data().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("postgresql.conf");
        text.push_str(&settings);
        std::fs::write(&conf, text).expect("postgresql.conf");
        cluster.start_server();
        cluster
    }

    /// The URL of its `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl restart -m fast`: open connections are terminated, the server comes back.
    pub fn restart(&self) {
        self.pg_ctl(&["restart", "-m", "fast"]);
    }

    /// `pg_ctl stop -m fast`: the database is gone until [`PrivatePostgres::start_server`].
    pub fn stop(&self) {
        self.pg_ctl(&["stop", "-m", "fast"]);
    }

    pub fn start_server(&self) {
        self.pg_ctl(&["start"]);
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data().display().to_string();
        let log = self.dir.path().join("server.log").display().to_string();
        let mut all = vec!["-D", &data, "-l", &log, "-w"];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all);
    }

    fn run(&self, program: &str, args: &[&str]) {
        let program = self.bin.join(program);
        let mut command = if nix::unistd::geteuid().is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", SERVER_ACCOUNT, "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        let output = command
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        assert!(
            output.status.success(),
            "{} {args:?}: {}\n{}",
            program.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let program = self.bin.join("pg_ctl");
        let _ = if nix::unistd::geteuid().is_root() {
            Command::new("runuser")
                .args(["-u", SERVER_ACCOUNT, "--"])
                .arg(&program)
                .args(["-D", &data, "stop", "-m", "immediate"])
                .output()
        } else {
            Command::new(&program)
                .args(["-D", &data, "stop", "-m", "immediate"])
                .output()
        };
    }
}

/// The newest installed server's `bin` directory (`/usr/lib/postgresql/<major>/bin`).
fn server_binaries() -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    let mut majors: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e} (install the postgresql package)", root.display()))
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("pg_ctl").exists())
        .collect();
    majors.sort();
    majors.pop().expect("a PostgreSQL server under /usr/lib/postgresql").1
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}
