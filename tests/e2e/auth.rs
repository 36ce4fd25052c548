//! Token authentication: with a tokens file, every runner call needs a valid bearer
//! token, the tenant comes from the token (never from metadata), and tokens rotate
//! without a restart. Health stays open for probes.

use std::path::{Path, PathBuf};

use cursor_runner_e2e::*;
use serde_json::json;
use sha2::{Digest, Sha256};
use tonic::Code;

on_both_backends!(
    every_runner_call_without_a_valid_token_is_unauthenticated,
    the_tenant_comes_from_the_token_and_another_tenants_resources_are_not_found,
    tokens_rotate_without_a_restart,
    admin_calls_need_an_admin_token,
    every_method_of_every_service_but_health_is_behind_authentication,
);

fn write_tokens(path: &Path, tokens: &[(&str, &str)]) {
    let entries: Vec<_> = tokens
        .iter()
        .map(|(tenant, token)| json!({"tenant_id": tenant, "sha256": hex_digest(token)}))
        .collect();
    // Write then rename, as an operator's tooling would, so a reader never sees half a file.
    let staged = path.with_extension("new");
    std::fs::write(&staged, json!({"tokens": entries}).to_string()).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

fn hex_digest(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn authenticated(backend: Backend, tokens: &[(&str, &str)]) -> (TestService, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.json");
    write_tokens(&path, tokens);
    let options = Options {
        tokens_file: Some(path.clone()),
        ..Options::default()
    };
    (TestService::start_with(backend, "demo.json", options).await, path, dir)
}

async fn every_runner_call_without_a_valid_token_is_unauthenticated(backend: Backend) {
    let (service, _, _dir) = authenticated(backend, &[("tenant-a", "tok-a")]).await;
    for token in [None, Some("wrong-token")] {
        let mut client = connect_with_token(service.address, token, Some(TENANT)).await;
        let results: Vec<(&str, Result<(), tonic::Status>)> = vec![
            (
                "CreateExecution",
                client
                    .create_execution(proto::CreateExecutionRequest::default())
                    .await
                    .map(drop),
            ),
            (
                "GetExecution",
                client
                    .get_execution(proto::GetExecutionRequest::default())
                    .await
                    .map(drop),
            ),
            (
                "ListExecutions",
                client
                    .list_executions(proto::ListExecutionsRequest::default())
                    .await
                    .map(drop),
            ),
            (
                "CloseExecution",
                client
                    .close_execution(proto::CloseExecutionRequest::default())
                    .await
                    .map(drop),
            ),
            (
                "StartTurn",
                client.start_turn(proto::StartTurnRequest::default()).await.map(drop),
            ),
            (
                "CancelTurn",
                client.cancel_turn(proto::CancelTurnRequest::default()).await.map(drop),
            ),
            (
                "StreamEvents",
                client
                    .stream_events(proto::StreamEventsRequest::default())
                    .await
                    .map(drop),
            ),
            (
                "AckEvents",
                client.ack_events(proto::AckEventsRequest::default()).await.map(drop),
            ),
            (
                "ListInteractions",
                client
                    .list_interactions(proto::ListInteractionsRequest::default())
                    .await
                    .map(drop),
            ),
            (
                "GetInteraction",
                client
                    .get_interaction(proto::GetInteractionRequest::default())
                    .await
                    .map(drop),
            ),
            (
                "AnswerInteraction",
                client
                    .answer_interaction(proto::AnswerInteractionRequest::default())
                    .await
                    .map(drop),
            ),
            (
                "GetCapabilities",
                client
                    .get_capabilities(proto::GetCapabilitiesRequest {})
                    .await
                    .map(drop),
            ),
        ];
        for (rpc, result) in results {
            let status = result.expect_err(rpc);
            assert_eq!(
                (status.code(), reason(&status).as_str()),
                (Code::Unauthenticated, "UNAUTHENTICATED"),
                "{rpc}"
            );
        }
    }
    let mut health = tonic_health::pb::health_client::HealthClient::new(service.channel().await);
    let open = health
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await;
    assert!(open.is_ok(), "health stays open for probes");
    service.shutdown().await;
}

async fn the_tenant_comes_from_the_token_and_another_tenants_resources_are_not_found(backend: Backend) {
    let (service, _, _dir) = authenticated(backend, &[("tenant-a", "tok-a"), ("tenant-b", "tok-b")]).await;
    let mut owner = connect_with_token(service.address, Some("tok-a"), None).await;
    let execution = create_execution(&mut owner, &service, "create-1").await;
    assert_eq!(execution.tenant_id, "tenant-a", "the tenant is the token's");
    // Tenant B's token with tenant A's name in the metadata: the metadata is ignored.
    let mut stranger = connect_with_token(service.address, Some("tok-b"), Some("tenant-a")).await;
    let result = stranger
        .get_execution(proto::GetExecutionRequest {
            execution_id: execution.execution_id.clone(),
        })
        .await;
    assert_refused(result, Code::NotFound, "EXECUTION_NOT_FOUND");
    service.shutdown().await;
}

async fn tokens_rotate_without_a_restart(backend: Backend) {
    let (service, path, _dir) = authenticated(backend, &[("tenant-a", "old-token")]).await;
    let mut old = connect_with_token(service.address, Some("old-token"), None).await;
    assert!(
        old.list_executions(proto::ListExecutionsRequest::default())
            .await
            .is_ok()
    );
    // A different size guarantees the file looks changed even within one mtime tick.
    write_tokens(&path, &[("tenant-a", "the-new-token")]);
    let refused = old.list_executions(proto::ListExecutionsRequest::default()).await;
    assert_refused(refused, Code::Unauthenticated, "UNAUTHENTICATED");
    let mut new = connect_with_token(service.address, Some("the-new-token"), None).await;
    assert!(
        new.list_executions(proto::ListExecutionsRequest::default())
            .await
            .is_ok()
    );
    service.shutdown().await;
}

async fn admin_calls_need_an_admin_token(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.json");
    let tokens = json!({"tokens": [
        {"tenant_id": "tenant-a", "sha256": hex_digest("tok-a")},
        {"tenant_id": "ops", "sha256": hex_digest("tok-admin"), "role": "admin"},
    ]});
    std::fs::write(&path, tokens.to_string()).unwrap();
    let options = Options {
        tokens_file: Some(path),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "demo.json", options).await;
    for (token, code) in [
        (None, Code::Unauthenticated),
        (Some("wrong-token"), Code::Unauthenticated),
        (Some("tok-a"), Code::PermissionDenied),
    ] {
        let mut admin = service.admin(token).await;
        let status = admin.get_pool_status(proto::GetPoolStatusRequest {}).await;
        assert_eq!(status.unwrap_err().code(), code, "GetPoolStatus with {token:?}");
        let drain = admin.drain(proto::DrainRequest::default()).await;
        assert_eq!(drain.unwrap_err().code(), code, "Drain with {token:?}");
    }
    let mut admin = service.admin(Some("tok-admin")).await;
    let status = admin
        .get_pool_status(proto::GetPoolStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!status.draining, "the refused drains changed nothing");
    service.shutdown().await;
}

/// Every method the service serves, named by its gRPC path, from the embedded
/// descriptors (a method added later is covered without touching this test).
fn served_methods() -> Vec<String> {
    use prost::Message;
    let mut paths = Vec::new();
    for set in [proto::FILE_DESCRIPTOR_SET, tonic_health::pb::FILE_DESCRIPTOR_SET] {
        let set = prost_types::FileDescriptorSet::decode(set).unwrap();
        for file in set.file {
            for service in &file.service {
                for method in &service.method {
                    paths.push(format!("/{}.{}/{}", file.package(), service.name(), method.name()));
                }
            }
        }
    }
    paths.push("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo".into());
    paths
}

/// One call with an empty message: authentication decides before anything is decoded.
async fn raw_call(service: &TestService, path: &str, token: Option<&str>) -> Result<(), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(service.channel().await);
    grpc.ready().await.unwrap();
    let mut request = tonic::Request::new(());
    request.metadata_mut().insert("x-tenant-id", TENANT.parse().unwrap());
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    grpc.unary(request, path.parse().unwrap(), codec).await.map(drop)
}

async fn every_method_of_every_service_but_health_is_behind_authentication(backend: Backend) {
    let (service, path, _dir) = authenticated(backend, &[("tenant-a", "tok-a")]).await;
    let tokens = std::fs::read_to_string(&path).unwrap();
    let mut with_admin: serde_json::Value = serde_json::from_str(&tokens).unwrap();
    with_admin["tokens"]
        .as_array_mut()
        .unwrap()
        .push(json!({"tenant_id": "ops", "sha256": hex_digest("tok-admin"), "role": "admin"}));
    std::fs::write(&path, with_admin.to_string()).unwrap();
    let methods = served_methods();
    assert!(methods.len() >= 24, "{methods:?}");
    for method in &methods {
        if method.starts_with("/grpc.health.v1.Health/") {
            // Open for probes (Watch streams forever: Check stands for both).
            if method.ends_with("/Check") {
                raw_call(&service, method, None).await.expect("health needs no token");
            }
            continue;
        }
        for token in [None, Some("wrong-token")] {
            let status = raw_call(&service, method, token).await.expect_err(method);
            assert_eq!(status.code(), Code::Unauthenticated, "{method} with {token:?}");
            assert_eq!(reason(&status), "UNAUTHENTICATED", "{method}");
        }
        if method.starts_with("/cursor_runner.v1.AdminService/") {
            let status = raw_call(&service, method, Some("tok-a")).await.expect_err(method);
            assert_eq!(status.code(), Code::PermissionDenied, "{method} with a tenant token");
        } else {
            let outcome = raw_call(&service, method, Some("tok-a")).await;
            assert!(
                outcome
                    .as_ref()
                    .err()
                    .is_none_or(|s| !matches!(s.code(), Code::Unauthenticated | Code::PermissionDenied)),
                "{method} admits a valid tenant token: {outcome:?}"
            );
        }
    }
    raw_call(
        &service,
        "/cursor_runner.v1.AdminService/GetPoolStatus",
        Some("tok-admin"),
    )
    .await
    .expect("an admin token passes");
    service.shutdown().await;
}
