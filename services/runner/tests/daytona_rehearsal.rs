//! A local rehearsal of the Daytona deployment (deploy/daytona/README.md). The snapshot's
//! entry point, `deploy/daytona/entrypoint.sh`, starts the service in its own network
//! namespace, the "sandbox": the fixed port 9051, the embedded SQLite store, plaintext
//! behind the ingress, bearer tokens from the environment. A veth pair joins the sandbox to
//! a second namespace, the "ingress network", which only the reverse proxy's upstream
//! connections use. The proxy listens in the root namespace, speaks HTTP/1.1 and nothing
//! else to its clients, wants the preview token, and forwards to the service; the
//! TypeScript gRPC-Web client drives the demo flow through it. From the root namespace
//! there is no direct path to the service (a guard route makes the probe fail on this
//! machine rather than leave it by the default route), and gRPC over HTTP/2 does not pass
//! the proxy.
//!
//! Needs root (network namespaces), `ip` (iproute2), `node` and `npm ci --prefix
//! deploy/clients/typescript`. It fails, never skips, when one is missing. Names carry
//! this process's id, and whatever it creates is removed on the way out, also on failure;
//! leftovers of a killed run are swept at the next start.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use cursor_runner_e2e::typescript::installed_client;
use cursor_runner_e2e::{ServiceDirs, TENANT, fake_agent, scenario};
use sha2::Digest;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The service's fixed port in the sandbox (deploy/daytona documents the same).
const SERVICE_PORT: u16 = 9051;
const TOKEN: &str = "rehearsal-bearer-token-81c2";
/// What the ingress wants in `x-daytona-preview-token`, as Daytona's preview proxy does.
const PREVIEW_TOKEN: &str = "rehearsal-preview-token-5e07";
/// Every name this test gives a namespace starts so: `crr-<pid>-<x>-<y>-<role>`.
const NETNS_PREFIX: &str = "crr-";
const CLIENT_LIMIT: Duration = Duration::from_secs(120);

// ---- the network --------------------------------------------------------------------------

fn ip(args: &[&str]) -> Output {
    Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("`ip` (iproute2) is required for the rehearsal: {e}"))
}

fn ip_ok(args: &[&str]) {
    let output = ip(args);
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The /30 a rehearsal uses in 198.18.0.0/15 (RFC 2544, for network tests): `.1` the
/// ingress end, `.2` the sandbox.
fn subnet(x: u8, y: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, x, y & 0xfc)
}

/// The sandbox and ingress namespaces, the veth pair between them, and the guard route.
/// Dropping it removes them all.
struct Topology {
    sandbox: String,
    ingress: String,
    net: Ipv4Addr,
    guard_route: bool,
}

impl Topology {
    fn create() -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the Daytona rehearsal creates network namespaces: run it as root (CI does)"
        );
        let version = Command::new("ip").arg("-V").output();
        assert!(
            version.as_ref().is_ok_and(|o| o.status.success()),
            "`ip` (iproute2) is required for the Daytona rehearsal: {version:?}; \
             install it with `apt-get install iproute2`"
        );
        sweep_leftovers();

        let pid = std::process::id();
        let random = uuid::Uuid::new_v4();
        let (x, y) = (random.as_bytes()[0], random.as_bytes()[1] & 0xfc);
        let mut topology = Self {
            sandbox: format!("{NETNS_PREFIX}{pid}-{x}-{y}-sbx"),
            ingress: format!("{NETNS_PREFIX}{pid}-{x}-{y}-ing"),
            net: subnet(x, y),
            guard_route: false,
        };
        let (veth_ingress, veth_sandbox) = (format!("crv{pid:x}i"), format!("crv{pid:x}s"));
        let octets = topology.net.octets();
        let host = |n: u8| format!("{}.{}.{}.{}/30", octets[0], octets[1], octets[2], octets[3] + n);

        ip_ok(&["netns", "add", &topology.sandbox]);
        ip_ok(&["netns", "add", &topology.ingress]);
        ip_ok(&[
            "link",
            "add",
            &veth_ingress,
            "type",
            "veth",
            "peer",
            "name",
            &veth_sandbox,
        ]);
        ip_ok(&["link", "set", &veth_ingress, "netns", &topology.ingress]);
        ip_ok(&["link", "set", &veth_sandbox, "netns", &topology.sandbox]);
        for (ns, dev, addr) in [
            (&topology.ingress, &veth_ingress, host(1)),
            (&topology.sandbox, &veth_sandbox, host(2)),
        ] {
            ip_ok(&["-n", ns, "addr", "add", &addr, "dev", dev]);
            ip_ok(&["-n", ns, "link", "set", dev, "up"]);
            ip_ok(&["-n", ns, "link", "set", "lo", "up"]);
        }
        // The root namespace has no interface on the sandbox network, so a connection to it
        // would follow the default route off this machine. This route makes such a probe
        // fail here instead: no packet for the rehearsal ever leaves the machine.
        ip_ok(&["route", "add", "unreachable", &topology.cidr()]);
        topology.guard_route = true;
        topology
    }

    fn cidr(&self) -> String {
        format!("{}/30", self.net)
    }

    fn service_address(&self) -> SocketAddr {
        let o = self.net.octets();
        SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::new(o[0], o[1], o[2], o[3] + 2),
            SERVICE_PORT,
        ))
    }

    /// `ip netns exec <ns> program args…`.
    fn exec_in(ns: &str, program: &Path) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", ns]).arg(program);
        command
    }
}

/// Kills whatever still runs in namespace `ns`, then deletes it (which deletes the veth
/// end in it, and with it the pair).
fn delete_netns(ns: &str) {
    let pids = ip(&["netns", "pids", ns]);
    for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
        if let Ok(pid) = pid.parse::<i32>() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
    let _ = ip(&["netns", "del", ns]);
}

impl Drop for Topology {
    fn drop(&mut self) {
        delete_netns(&self.sandbox);
        delete_netns(&self.ingress);
        if self.guard_route {
            let _ = ip(&["route", "del", "unreachable", &self.cidr()]);
        }
    }
}

/// Removes what a killed earlier run left: namespaces named by a process that is gone,
/// and their guard routes.
fn sweep_leftovers() {
    let list = ip(&["netns", "list"]);
    for line in String::from_utf8_lossy(&list.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix(NETNS_PREFIX) else {
            continue;
        };
        let parts: Vec<&str> = rest.split('-').collect();
        let [pid, x, y, _role] = parts[..] else { continue };
        let (Ok(pid), Ok(x), Ok(y)) = (pid.parse::<u32>(), x.parse::<u8>(), y.parse::<u8>()) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        delete_netns(name);
        let _ = ip(&["route", "del", "unreachable", &format!("{}/30", subnet(x, y))]);
    }
}

// ---- the service in the sandbox ------------------------------------------------------------

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn entrypoint() -> PathBuf {
    repository().join("deploy/daytona/entrypoint.sh")
}

/// `cursor-runner serve` inside the sandbox namespace; SIGTERM, then SIGKILL, when dropped.
struct SandboxService {
    child: Child,
    log: PathBuf,
}

impl SandboxService {
    /// The snapshot's entry point, `deploy/daytona/entrypoint.sh`, as the image runs it:
    /// its defaults (port 9051, plaintext behind the ingress, the tokens file written from
    /// `CURSOR_RUNNER_TOKENS_JSON`) and the embedded SQLite store in the state dir.
    fn start(topology: &Topology, dirs: &ServiceDirs) -> Self {
        let digest = hex::encode(sha2::Sha256::digest(TOKEN.as_bytes()));
        let tokens = serde_json::json!({"tokens": [{"tenant_id": TENANT, "sha256": digest}]});
        let agent = format!(
            "{} --scenario {} --record {}",
            fake_agent().display(),
            scenario("demo.json").display(),
            dirs.record.display()
        );
        let log = dirs.root.path().join("service.log");
        let mut command = Topology::exec_in(&topology.sandbox, &entrypoint());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("CURSOR_RUNNER_") {
                command.env_remove(name);
            }
        }
        // Should this test be killed outright, the service (and with it its agents) goes too.
        // SAFETY: prctl(2) is async-signal-safe and nothing else runs between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let child = command
            .env("CURSOR_RUNNER_BIN", env!("CARGO_BIN_EXE_cursor-runner"))
            .env("CURSOR_RUNNER_TOKENS_JSON", tokens.to_string())
            .env("CURSOR_RUNNER_TOKENS_FILE", dirs.root.path().join("etc/tokens.json"))
            .env("CURSOR_RUNNER_STATE_DIR", dirs.root.path().join("state"))
            .env("CURSOR_RUNNER_AGENT_COMMAND", agent)
            .env("CURSOR_RUNNER_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("ip netns exec … deploy/daytona/entrypoint.sh");
        Self { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Until `healthcheck`, run from the ingress network, says SERVING.
    fn wait_serving(&mut self, topology: &Topology) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("the service exited ({status}):\n{}", self.log());
            }
            let probe = Topology::exec_in(&topology.ingress, Path::new(env!("CARGO_BIN_EXE_cursor-runner")))
                .args(["healthcheck", "--addr", &topology.service_address().to_string()])
                .args(["--timeout-secs", "2"])
                .output()
                .expect("healthcheck");
            if probe.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the service never served on {} (seen from the ingress network):\n{}{}",
                topology.service_address(),
                String::from_utf8_lossy(&probe.stderr),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM (a drain) and its exit status, SIGKILL past 30 s.
    fn stop(&mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return self.child.wait().expect("wait");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SandboxService {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

// ---- the ingress: an HTTP/1.1-only reverse proxy -------------------------------------------

/// A request line the proxy saw and the status line it answered.
#[derive(Debug, Clone)]
struct Exchange {
    request: String,
    status: String,
}

type Dial = (
    SocketAddr,
    tokio::sync::oneshot::Sender<std::io::Result<std::net::TcpStream>>,
);

/// One thread that has joined the ingress network namespace: sockets it opens belong to
/// that namespace, so the proxy (everything else in the root namespace) reaches the
/// sandbox through the veth pair while nothing else in the root namespace can.
fn spawn_dialer(ingress_ns: &str) -> mpsc::Sender<Dial> {
    let namespace = std::fs::File::open(format!("/run/netns/{ingress_ns}")).expect("the ingress namespace");
    let (tx, rx) = mpsc::channel::<Dial>();
    std::thread::spawn(move || {
        let joined = nix::sched::setns(&namespace, nix::sched::CloneFlags::CLONE_NEWNET);
        for (address, reply) in rx {
            let stream = match joined {
                Ok(()) => std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5)),
                Err(e) => Err(std::io::Error::other(format!("setns: {e}"))),
            };
            let _ = reply.send(stream);
        }
    });
    tx
}

struct Proxy {
    address: SocketAddr,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(ingress_ns: &str, upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let address = listener.local_addr().expect("address");
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let dialer = spawn_dialer(ingress_ns);
        let log = exchanges.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (dialer, log) = (dialer.clone(), log.clone());
                tokio::spawn(async move {
                    let _ = forward(client, dialer, upstream, log).await;
                });
            }
        });
        Self {
            address,
            exchanges,
            task,
        }
    }

    fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges.lock().unwrap().clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Head = (String, Vec<(String, String)>);

/// Reads a message head: the start line and the header fields. `None` at a clean EOF.
async fn read_head<R: AsyncBufReadExt + Unpin>(reader: &mut R) -> std::io::Result<Option<Head>> {
    let mut start = String::new();
    if reader.read_line(&mut start).await? == 0 {
        return Ok(None);
    }
    let mut fields = Vec::new();
    let mut size = start.len();
    loop {
        let mut line = String::new();
        let read = reader.read_line(&mut line).await?;
        size += read;
        if read == 0 || size > 64 * 1024 {
            return Err(std::io::Error::other("a truncated or oversized head"));
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| std::io::Error::other("a malformed header field"))?;
        fields.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    Ok(Some((start.trim_end().to_owned(), fields)))
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// Hop-by-hop fields a proxy never forwards, and the ingress's own credential.
const NOT_FORWARDED: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "host",
    "x-daytona-preview-token",
];

async fn refuse<W: AsyncWrite + Unpin>(client: &mut W, status: &str) -> std::io::Result<()> {
    client
        .write_all(format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").as_bytes())
        .await?;
    client.shutdown().await
}

/// Copies one request body, framed as its head says, verbatim.
async fn copy_body<R, W>(client: &mut R, upstream: &mut W, fields: &[(String, String)]) -> std::io::Result<()>
where
    R: AsyncBufReadExt + Unpin,
    W: AsyncWrite + Unpin,
{
    let exactly = |n: u64, copied: u64| {
        if copied == n {
            Ok(())
        } else {
            Err(std::io::Error::other("a truncated body"))
        }
    };
    if field(fields, "transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size_line = String::new();
            client.read_line(&mut size_line).await?;
            upstream.write_all(size_line.as_bytes()).await?;
            let hex = size_line.split(';').next().unwrap_or_default().trim();
            let size = u64::from_str_radix(hex, 16).map_err(|_| std::io::Error::other("a bad chunk size"))?;
            if size == 0 {
                // Trailer fields, then the empty line.
                loop {
                    let mut line = String::new();
                    if client.read_line(&mut line).await? == 0 {
                        return Err(std::io::Error::other("a truncated trailer"));
                    }
                    upstream.write_all(line.as_bytes()).await?;
                    if line == "\r\n" {
                        return Ok(());
                    }
                }
            }
            let copied = tokio::io::copy(&mut (&mut *client).take(size + 2), upstream).await?;
            exactly(size + 2, copied)?;
        }
    } else if let Some(length) = field(fields, "content-length") {
        let length: u64 = length
            .parse()
            .map_err(|_| std::io::Error::other("a bad content-length"))?;
        let copied = tokio::io::copy(&mut (&mut *client).take(length), upstream).await?;
        exactly(length, copied)
    } else {
        Ok(())
    }
}

/// One client connection, one request: HTTP/1.1 only, the preview token checked and
/// stripped, forwarded with `connection: close`, the response relayed as it streams.
async fn forward(
    client: TcpStream,
    dialer: mpsc::Sender<Dial>,
    upstream_address: SocketAddr,
    log: Arc<Mutex<Vec<Exchange>>>,
) -> std::io::Result<()> {
    let (client_read, mut client_write) = client.into_split();
    let mut client_read = BufReader::new(client_read);
    let Some((request, fields)) = read_head(&mut client_read).await? else {
        return Ok(());
    };
    let record = |status: &str| {
        log.lock().unwrap().push(Exchange {
            request: request.clone(),
            status: status.to_owned(),
        })
    };
    let mut parts = request.splitn(3, ' ');
    let (method, target, version) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if version != "HTTP/1.1" {
        // HTTP/2's preface (`PRI * HTTP/2.0`) and anything else: this ingress speaks HTTP/1.1.
        record("HTTP/1.1 505");
        return refuse(&mut client_write, "505 HTTP Version Not Supported").await;
    }
    if field(&fields, "x-daytona-preview-token") != Some(PREVIEW_TOKEN) {
        record("HTTP/1.1 401");
        // Read the body first, so the client sees the answer rather than a reset.
        copy_body(&mut client_read, &mut tokio::io::sink(), &fields).await?;
        return refuse(&mut client_write, "401 Unauthorized").await;
    }

    let (reply, dialed) = tokio::sync::oneshot::channel();
    let upstream = match dialer.send((upstream_address, reply)) {
        Ok(()) => dialed
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("the dialer is gone"))),
        Err(_) => Err(std::io::Error::other("the dialer is gone")),
    };
    let upstream = match upstream.and_then(|s| s.set_nonblocking(true).map(|()| s)) {
        Ok(stream) => TcpStream::from_std(stream)?,
        Err(_) => {
            record("HTTP/1.1 502");
            return refuse(&mut client_write, "502 Bad Gateway").await;
        }
    };
    let (upstream_read, mut upstream_write) = upstream.into_split();

    let mut head = format!("{method} {target} HTTP/1.1\r\nhost: {upstream_address}\r\n");
    for (name, value) in &fields {
        if !NOT_FORWARDED.contains(&name.as_str()) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    if let Some(host) = field(&fields, "host") {
        head.push_str(&format!("x-forwarded-host: {host}\r\n"));
    }
    head.push_str("x-forwarded-proto: http\r\nconnection: close\r\n\r\n");
    upstream_write.write_all(head.as_bytes()).await?;

    // The body goes up while the response comes down (an early answer, e.g. a refused
    // token, may come before the body is read). After the body, the client's EOF means it
    // left — a dropped stream — and the exchange, upstream connection included, ends.
    let body_then_client_gone = async move {
        if copy_body(&mut client_read, &mut upstream_write, &fields).await.is_err() {
            std::future::pending::<()>().await;
        }
        let mut rest = [0u8; 1024];
        while matches!(client_read.read(&mut rest).await, Ok(n) if n > 0) {}
        drop(upstream_write);
    };
    let relay = async {
        let mut upstream_read = BufReader::new(upstream_read);
        let Some((status, response_fields)) = read_head(&mut upstream_read).await? else {
            return Err(std::io::Error::other("no response"));
        };
        record(&status);
        if !status.starts_with("HTTP/1.1 ") {
            return Err(std::io::Error::other(format!("upstream answered {status}")));
        }
        let mut head = format!("{status}\r\n");
        for (name, value) in &response_fields {
            if name != "connection" && name != "keep-alive" {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        head.push_str("connection: close\r\n\r\n");
        client_write.write_all(head.as_bytes()).await?;
        tokio::io::copy_buf(&mut upstream_read, &mut client_write).await?;
        client_write.shutdown().await
    };
    tokio::select! {
        relayed = relay => relayed,
        () = body_then_client_gone => Ok(()),
    }
}

/// A raw HTTP/1.1 request to the proxy; the status line it answers.
fn raw_status(proxy: SocketAddr, extra_header: &str) -> String {
    let mut stream = std::net::TcpStream::connect(proxy).expect("connect to the proxy");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        stream,
        "POST /cursor_runner.v1.RunnerService/ListExecutions HTTP/1.1\r\nhost: preview\r\n\
         content-type: application/grpc-web+proto\r\nx-grpc-web: 1\r\n\
         authorization: Bearer {TOKEN}\r\n{extra_header}content-length: 5\r\n\r\n\0\0\0\0\0"
    )
    .unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

// ---- the client -------------------------------------------------------------------------

fn run_grpc_web_client(url: &str, workspace: &Path) -> Output {
    let mut child = Command::new("node")
        .current_dir(installed_client())
        .args([
            "--import",
            "tsx",
            "src/grpc-web.ts",
            "--addr",
            url,
            "--timeout-secs",
            "60",
        ])
        .arg("--workspace")
        .arg(workspace)
        .env("RUNNER_TENANT", TENANT)
        .env("RUNNER_TOKEN", TOKEN)
        .env("DAYTONA_PREVIEW_TOKEN", PREVIEW_TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node");
    let deadline = Instant::now() + CLIENT_LIMIT;
    while child.try_wait().expect("try_wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child.wait_with_output().expect("output")
}

// ---- the rehearsal ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_web_client_drives_the_demo_through_an_http1_ingress_to_a_sandboxed_service() {
    installed_client();
    let topology = Topology::create();
    let dirs = ServiceDirs::new();
    let mut service = SandboxService::start(&topology, &dirs);
    tokio::task::block_in_place(|| service.wait_serving(&topology));
    let proxy = Proxy::start(&topology.ingress, topology.service_address()).await;
    let sandbox = topology.service_address();
    let tokens_file = std::fs::metadata(dirs.root.path().join("etc/tokens.json")).expect("the tokens file");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&tokens_file.permissions()) & 0o777,
        0o600,
        "the entry point writes the tokens file for root only"
    );

    // The ingress network reaches the service (the health check above); the root namespace
    // does not: no interface of it is on the sandbox network, and a connection fails.
    let root_addresses = String::from_utf8_lossy(&ip(&["-o", "addr", "show"]).stdout).into_owned();
    let o = topology.net.octets();
    for host in 0..4 {
        let address = Ipv4Addr::new(o[0], o[1], o[2], o[3] + host);
        assert!(
            !root_addresses.contains(&format!("inet {address}/")),
            "the root namespace has {address}, on the sandbox network:\n{root_addresses}"
        );
    }
    let direct = tokio::task::block_in_place(|| std::net::TcpStream::connect_timeout(&sandbox, Duration::from_secs(3)));
    assert!(
        direct.is_err(),
        "a direct connection from the root namespace to {sandbox} must not exist"
    );
    eprintln!("direct connection to {sandbox} from the root namespace: {direct:?}");

    // gRPC proper (HTTP/2) does not pass an HTTP/1.1 ingress…
    let h2 = tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
            .args([
                "healthcheck",
                "--addr",
                &proxy.address.to_string(),
                "--timeout-secs",
                "3",
            ])
            .output()
            .expect("healthcheck")
    });
    assert_eq!(
        h2.status.code(),
        Some(1),
        "gRPC over HTTP/2 passed the HTTP/1.1 ingress"
    );
    // …nor does a request without the preview token.
    let unauthorized = tokio::task::block_in_place(|| raw_status(proxy.address, ""));
    assert!(unauthorized.starts_with("HTTP/1.1 401"), "{unauthorized}");
    // With it, a gRPC-Web call goes through (and reaches the service's own auth).
    let through = tokio::task::block_in_place(|| {
        raw_status(proxy.address, &format!("x-daytona-preview-token: {PREVIEW_TOKEN}\r\n"))
    });
    assert!(through.starts_with("HTTP/1.1 200"), "{through}");

    // The demo flow, over gRPC-Web, through the ingress.
    let started = Instant::now();
    let url = format!("http://{}", proxy.address);
    let output = tokio::task::block_in_place(|| run_grpc_web_client(&url, &dirs.workspace));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!(
        "--- grpc-web client through the ingress ({:.1} s, {}) ---\n{stdout}{}",
        started.elapsed().as_secs_f64(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the client failed through the ingress:\n{stdout}{}\nservice:\n{}",
        String::from_utf8_lossy(&output.stderr),
        service.log()
    );
    let sequences: Vec<i64> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("event #"))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        sequences,
        (1..=sequences.len() as i64).collect::<Vec<_>>(),
        "every event once, in order:\n{stdout}"
    );
    for wanted in [
        "turn.started",
        "runtime_request.created",
        "runtime_request.resolved",
        "turn.completed",
        "process.exited",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("event #") && l.ends_with(&format!(" {wanted}"))),
            "no {wanted}:\n{stdout}"
        );
    }
    assert!(stdout.contains("resumed after #") && stdout.contains("with no gap and no duplicate"));

    // Everything the client sent crossed the ingress as HTTP/1.1 gRPC-Web calls.
    let exchanges = proxy.exchanges();
    let forwarded: Vec<&Exchange> = exchanges
        .iter()
        .filter(|e| e.request.contains("/cursor_runner.v1.RunnerService/"))
        .collect();
    for exchange in &forwarded {
        assert!(
            exchange.request.starts_with("POST /cursor_runner.v1.RunnerService/")
                && exchange.request.ends_with(" HTTP/1.1"),
            "{exchange:?}"
        );
    }
    let methods: BTreeSet<&str> = forwarded
        .iter()
        .filter(|e| e.status.starts_with("HTTP/1.1 200"))
        .filter_map(|e| e.request.split(['/', ' ']).nth(3))
        .collect();
    for method in [
        "CreateExecution",
        "StartTurn",
        "StreamEvents",
        "AckEvents",
        "AnswerInteraction",
        "CloseExecution",
    ] {
        assert!(
            methods.contains(method),
            "{method} did not pass the ingress: {exchanges:?}"
        );
    }
    let streams = forwarded
        .iter()
        .filter(|e| e.request.contains("/StreamEvents "))
        .count();
    assert_eq!(streams, 2, "one stream, dropped, then one resume: {exchanges:?}");
    assert!(
        exchanges
            .iter()
            .any(|e| e.request.starts_with("PRI * HTTP/2.0") && e.status.contains("505")),
        "the HTTP/2 attempt was refused by the ingress: {exchanges:?}"
    );

    drop(proxy);
    let status = tokio::task::block_in_place(|| service.stop());
    assert!(
        status.success(),
        "the service drains and exits 0: {status}\n{}",
        service.log()
    );
    drop(topology);
}

/// The entry point never serves the ingress unauthenticated, and the image, the script and
/// this rehearsal agree on the port.
#[test]
fn the_daytona_entrypoint_refuses_to_serve_without_tokens_and_keeps_the_documented_port() {
    let dir = tempfile::tempdir().unwrap();
    let refused = Command::new(entrypoint())
        .env("CURSOR_RUNNER_BIN", env!("CARGO_BIN_EXE_cursor-runner"))
        .env("CURSOR_RUNNER_TOKENS_FILE", dir.path().join("absent.json"))
        .env_remove("CURSOR_RUNNER_TOKENS_JSON")
        .env("CURSOR_RUNNER_STATE_DIR", dir.path())
        .env("CURSOR_RUNNER_AGENT_COMMAND", "/bin/false")
        .output()
        .expect("deploy/daytona/entrypoint.sh");
    assert_eq!(refused.status.code(), Some(64), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("refusing to serve"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let listen = format!("0.0.0.0:{SERVICE_PORT}");
    let dockerfile = std::fs::read_to_string(repository().join("deploy/daytona/Dockerfile")).unwrap();
    let script = std::fs::read_to_string(entrypoint()).unwrap();
    assert!(
        dockerfile.contains(&format!("CURSOR_RUNNER_LISTEN={listen}"))
            && dockerfile.contains(&format!("EXPOSE {SERVICE_PORT}"))
            && script.contains(&format!("${{CURSOR_RUNNER_LISTEN:-{listen}}}")),
        "deploy/daytona/Dockerfile, entrypoint.sh and this test name one port, {SERVICE_PORT}"
    );
}
