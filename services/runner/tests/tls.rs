//! TLS on the listener, as `cursor-runner serve` runs it: a client that trusts the CA
//! connects and one that does not fails the handshake, a verified client certificate
//! stands for its tenant, certificates rotate without a restart, and tokens never cross
//! a non-loopback plaintext listener unless the operator says so.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cursor_runner_e2e::pki::TestCa;
use cursor_runner_e2e::*;
use serde_json::json;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

fn start(dirs: &ServiceDirs, database: &TestDatabase, args: Vec<String>) -> ServiceProcess {
    ServiceProcess::start(ServiceSettings {
        binary: Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario: "demo.json",
        record: &dirs.record,
        env: Vec::new(),
        args,
    })
}

fn tls_args(cert: &Path, key: &Path) -> Vec<String> {
    vec![
        "--tls-cert".into(),
        cert.display().to_string(),
        "--tls-key".into(),
        key.display().to_string(),
    ]
}

/// Connects over TLS trusting `ca_pem`, presenting `identity` if given.
async fn tls_channel(
    service: &ServiceProcess,
    ca_pem: &str,
    identity: Option<(&str, &str)>,
) -> Result<Channel, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let endpoint = Endpoint::from_shared(format!("https://{}", service.address()))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .tls_config(tls)
        .unwrap();
    for _ in 0..200 {
        if std::net::TcpStream::connect(service.address()).is_ok() {
            return endpoint.connect().await.map_err(|e| format!("{e:?}"));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the service never listened on {}", service.address());
}

async fn health(channel: Channel) -> Result<i32, tonic::Status> {
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .map(|r| r.into_inner().status)
}

fn healthcheck(service: &ServiceProcess, ca: Option<&Path>) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cursor-runner"));
    command.args([
        "healthcheck",
        "--addr",
        &format!("localhost:{}", service.address().port()),
        "--timeout-secs",
        "5",
    ]);
    if let Some(ca) = ca {
        command.arg("--ca").arg(ca);
    }
    command.output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_trusts_the_ca_connects_and_one_that_does_not_fails_the_handshake() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let ca = TestCa::new("runner-ca");
    let (ca_file, cert, key) = ca.write_server_files(dirs.root.path());
    let service = start(&dirs, &database, tls_args(&cert, &key));
    let trusted = tls_channel(&service, &ca.pem(), None)
        .await
        .expect("the CA's client connects");
    assert_eq!(health(trusted).await.unwrap(), 1, "SERVING");

    let stranger = TestCa::new("someone-else");
    let refused = tls_channel(&service, &stranger.pem(), None).await;
    assert!(
        refused.is_err(),
        "a client that does not trust the CA fails the handshake"
    );
    let plaintext = connect_plain(&service).await;
    assert!(
        health(plaintext).await.is_err(),
        "plaintext gRPC is not served on a TLS port"
    );

    let probe = healthcheck(&service, Some(&ca_file));
    assert!(probe.status.success(), "{}", String::from_utf8_lossy(&probe.stderr));
    // As a Kubernetes exec probe runs it: dialling 127.0.0.1, checking the certificate's name.
    let probe = Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
        .args([
            "healthcheck",
            "--addr",
            &service.address().to_string(),
            "--tls-domain",
            "localhost",
            "--ca",
        ])
        .arg(&ca_file)
        .output()
        .unwrap();
    assert!(probe.status.success(), "{}", String::from_utf8_lossy(&probe.stderr));
    assert!(!healthcheck(&service, None).status.success());
    service.stop();
    database.drop_database().await;
}

async fn connect_plain(service: &ServiceProcess) -> Channel {
    Endpoint::from_shared(format!("http://{}", service.address()))
        .unwrap()
        .connect_lazy()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_client_certificate_stands_for_its_tenant() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let ca = TestCa::new("runner-ca");
    let (ca_file, cert, key) = ca.write_server_files(dirs.root.path());
    let acme = ca.client("acme-control-plane");
    let unknown = ca.client("nobody");
    let tokens = dirs.root.path().join("tokens.json");
    std::fs::write(
        &tokens,
        json!({"tokens": [{"tenant_id": "acme", "client_cert_sha256": acme.der_sha256}]}).to_string(),
    )
    .unwrap();
    let mut args = tls_args(&cert, &key);
    args.extend([
        "--tls-client-ca".into(),
        ca_file.display().to_string(),
        "--tokens-file".into(),
        tokens.display().to_string(),
    ]);
    let service = start(&dirs, &database, args);

    let channel = tls_channel(&service, &ca.pem(), Some((&acme.cert_pem, &acme.key_pem)))
        .await
        .unwrap();
    let mut acme_client = proto::runner_service_client::RunnerServiceClient::new(channel);
    let created = acme_client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "c1".into(),
            workspace: dirs.workspace.display().to_string(),
            ..Default::default()
        })
        .await
        .expect("the certificate authenticates")
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(created.tenant_id, "acme", "the tenant is the certificate's");

    let channel = tls_channel(&service, &ca.pem(), Some((&unknown.cert_pem, &unknown.key_pem)))
        .await
        .unwrap();
    let refused = proto::runner_service_client::RunnerServiceClient::new(channel)
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::Unauthenticated,
        "a valid certificate naming nobody"
    );

    let anonymous = tls_channel(&service, &ca.pem(), None).await.unwrap();
    let refused = proto::runner_service_client::RunnerServiceClient::new(anonymous)
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);

    let foreign = TestCa::new("forger").client("acme-control-plane");
    let forged = tls_channel(&service, &ca.pem(), Some((&foreign.cert_pem, &foreign.key_pem))).await;
    let refused = match forged {
        Err(_) => true,
        Ok(channel) => proto::runner_service_client::RunnerServiceClient::new(channel)
            .list_executions(proto::ListExecutionsRequest::default())
            .await
            .is_err(),
    };
    assert!(refused, "a certificate from another CA is never accepted");
    service.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let old = TestCa::new("old-ca");
    let (_, cert, key) = old.write_server_files(dirs.root.path());
    let service = start(&dirs, &database, tls_args(&cert, &key));
    assert!(tls_channel(&service, &old.pem(), None).await.is_ok());

    let renewed = TestCa::new("new-ca");
    renewed.write_server_files(dirs.root.path());
    let served = tls_channel(&service, &renewed.pem(), None).await;
    assert!(
        served.is_ok(),
        "the next connection gets the new certificate: {served:?}"
    );
    assert!(
        tls_channel(&service, &old.pem(), None).await.is_err(),
        "the old certificate is no longer served"
    );
    service.stop();
    database.drop_database().await;
}

#[test]
fn plaintext_off_loopback_refuses_to_start_without_the_explicit_flag() {
    let dirs = ServiceDirs::new();
    let serve = |extra: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cursor-runner"));
        command
            .args(["serve", "--listen", "0.0.0.0:0", "--agent-command", "/bin/true"])
            .arg("--state-dir")
            .arg(dirs.root.path())
            .args(extra)
            .env("CURSOR_RUNNER_LOG", "warn");
        command
    };
    let refused = serve(&[]).output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("refusing to serve plaintext on 0.0.0.0"), "{stderr}");

    let mut allowed = serve(&["--allow-plaintext"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = allowed.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let warning = lines
        .find_map(|line| line.ok().filter(|l| l.contains("PLAINTEXT")))
        .expect("a start-up warning");
    assert!(warning.contains("--allow-plaintext"), "{warning}");
    let _ = allowed.kill();
    let _ = allowed.wait();
}
