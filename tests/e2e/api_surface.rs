use cursor_runner_e2e::*;
use cursor_runner_executions::capabilities::AGENT_ISOLATION;
use cursor_runner_supervisor::isolation::IsolationLayer;
use tonic::Code;

on_both_backends!(
    a_call_without_a_tenant_is_refused,
    another_tenants_execution_is_not_found,
    another_tenants_interaction_can_be_neither_read_nor_answered,
    executions_are_listed_in_pages,
    a_page_token_no_list_returned_is_refused_not_read_as_the_end,
    an_id_holding_a_control_character_is_refused_as_invalid_and_nothing_is_stored,
    interactions_are_listed_in_pages_and_filtered_by_state,
    reflection_lists_every_served_service,
    grpc_web_over_http1_reaches_the_same_services,
    health_reports_the_runner_service_serving,
    get_capabilities_serves_the_list_the_docs_table_is_rendered_from,
    get_capabilities_says_agents_are_not_isolated_when_the_service_cannot_separate_their_uids,
    health_says_agents_are_not_isolated_while_the_runner_service_serves,
    an_oversized_request_id_is_refused_naming_the_field_and_nothing_is_stored,
    an_oversized_decline_reason_is_refused_and_the_question_stays_pending,
    a_request_message_at_the_transport_bound_is_read_and_one_byte_over_is_refused_typed,
);

async fn an_oversized_request_id_is_refused_naming_the_field_and_nothing_is_stored(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let huge = "r".repeat(1024 * 1024);
    let refusal = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: huge.clone(),
            workspace: service.workspace.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (refusal.code(), reason(&refusal).as_str()),
        (tonic::Code::InvalidArgument, "FIELD_TOO_LONG")
    );
    assert!(refusal.message().contains("request_id"), "{}", refusal.message());
    assert!(!service.database().dump().contains(&huge[..1024]), "not stored");
    assert!(service.agent_received().is_empty(), "nothing was launched");
    service.shutdown().await;
}

async fn an_oversized_decline_reason_is_refused_and_the_question_stays_pending(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    let decline = |reason: String| proto::AnswerInteractionRequest {
        request_id: "decline-1".into(),
        interaction_id: created["interactionId"].as_str().unwrap().into(),
        etag: created["etag"].as_str().unwrap().into(),
        answer: Some(proto::answer_interaction_request::Answer::Decline(
            proto::DeclineAnswer { reason },
        )),
    };
    let refusal = client
        .answer_interaction(decline("x".repeat(100 * 1024)))
        .await
        .unwrap_err();
    assert_eq!(reason(&refusal), "FIELD_TOO_LONG");
    assert!(refusal.message().contains("decline.reason"), "{}", refusal.message());
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(interaction.state, proto::InteractionState::Pending as i32);
    assert!(
        !service
            .agent_received()
            .iter()
            .any(|m| m["id"] == 0 && m.get("method").is_none()),
        "nothing reached the agent"
    );
    service.shutdown().await;
}

async fn get_capabilities_serves_the_list_the_docs_table_is_rendered_from(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let served = client
        .get_capabilities(proto::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    let list: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(workspace_root().join("docs/capabilities.json")).unwrap())
            .unwrap();
    let table = std::fs::read_to_string(workspace_root().join("docs/capabilities.md")).unwrap();
    assert_eq!(served.len(), list.len());
    for (capability, entry) in served.iter().zip(&list) {
        assert_eq!(capability.name, entry["row"].as_str().unwrap());
        if capability.name == AGENT_ISOLATION {
            // This host's, not the list's: its own test below.
            continue;
        }
        let (availability, detail) = (
            entry["availability"].as_str().unwrap(),
            entry["detail"].as_str().unwrap(),
        );
        assert!(
            table.contains(&format!(
                "| {} | {availability} | {detail} | unverified |",
                capability.name
            )),
            "{}",
            capability.name
        );
        let served_detail = match detail {
            "summary" => proto::CapabilityDetailLevel::Summary,
            _ => proto::CapabilityDetailLevel::Structured,
        };
        assert_eq!(capability.detail_level, served_detail as i32, "{}", capability.name);
        assert_ne!(
            capability.availability,
            proto::CapabilityAvailability::Partial as i32,
            "partial is available with summary detail"
        );
        assert_eq!(
            capability.qualification,
            proto::CapabilityQualification::Unverified as i32,
            "implemented is not qualified"
        );
    }
    for unsupported in [
        "True active-turn steering",
        "Fork/resume methods",
        "Usage/cost",
        "Subagent questions",
        "Typed action_required errors",
        "Audio and embedded-context prompts",
    ] {
        let capability = served
            .iter()
            .find(|c| c.name == unsupported)
            .unwrap_or_else(|| panic!("{unsupported}"));
        assert_eq!(
            capability.availability,
            proto::CapabilityAvailability::Unsupported as i32,
            "{unsupported}"
        );
    }
    let protection = served
        .iter()
        .find(|c| c.name == "Continuous workspace protection")
        .unwrap();
    assert!(protection.reason.contains("narrows but does not close"));
    service.shutdown().await;
}

async fn a_call_without_a_tenant_is_refused(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut anonymous = service.client_for(None).await;
    let result = anonymous.list_executions(proto::ListExecutionsRequest::default()).await;
    assert_refused(result, Code::InvalidArgument, "TENANT_REQUIRED");
    service.shutdown().await;
}

async fn another_tenants_execution_is_not_found(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut owner = service.client().await;
    let execution = create_execution(&mut owner, &service, "create-1").await;
    let mut stranger = service.client_for(Some("tenant-b")).await;
    let result = stranger
        .get_execution(proto::GetExecutionRequest {
            execution_id: execution.execution_id.clone(),
        })
        .await;
    assert_refused(result, Code::NotFound, "EXECUTION_NOT_FOUND");
    assert_refused(
        start_turn(&mut stranger, &execution.execution_id, "turn-1").await,
        Code::NotFound,
        "EXECUTION_NOT_FOUND",
    );
    assert_refused(
        Subscriber::open(&mut stranger, &execution.execution_id, 0)
            .await
            .map(|_| ()),
        Code::NotFound,
        "EXECUTION_NOT_FOUND",
    );
    let id = || execution.execution_id.clone();
    let refusals: Vec<(&str, Result<(), tonic::Status>)> = vec![
        (
            "CloseExecution",
            stranger
                .close_execution(proto::CloseExecutionRequest {
                    request_id: "x1".into(),
                    execution_id: id(),
                })
                .await
                .map(drop),
        ),
        (
            "CancelTurn",
            stranger
                .cancel_turn(proto::CancelTurnRequest {
                    request_id: "x2".into(),
                    execution_id: id(),
                    turn_id: "t".into(),
                })
                .await
                .map(drop),
        ),
        (
            "AckEvents",
            stranger
                .ack_events(proto::AckEventsRequest {
                    execution_id: id(),
                    through_sequence: 1,
                })
                .await
                .map(drop),
        ),
        (
            "ListModels",
            stranger
                .list_models(proto::ListModelsRequest { execution_id: id() })
                .await
                .map(drop),
        ),
        (
            "SetModel",
            stranger
                .set_model(proto::SetModelRequest {
                    request_id: "x3".into(),
                    execution_id: id(),
                    model: "gpt-x".into(),
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        (
            "SetMode",
            stranger
                .set_mode(proto::SetModeRequest {
                    request_id: "x4".into(),
                    execution_id: id(),
                    mode: "ask".into(),
                })
                .await
                .map(drop),
        ),
        (
            "SetConfigOption",
            stranger
                .set_config_option(proto::SetConfigOptionRequest {
                    request_id: "x5".into(),
                    execution_id: id(),
                    config_id: "mode".into(),
                    value: "ask".into(),
                })
                .await
                .map(drop),
        ),
        (
            "RecoverExecution",
            stranger
                .recover_execution(proto::RecoverExecutionRequest {
                    request_id: "x6".into(),
                    execution_id: id(),
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        (
            "ListTurns",
            stranger
                .list_turns(proto::ListTurnsRequest {
                    execution_id: id(),
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
    ];
    for (method, result) in refusals {
        let status = result.expect_err(method);
        assert_eq!(
            (status.code(), reason(&status).as_str()),
            (Code::NotFound, "EXECUTION_NOT_FOUND"),
            "{method}: another tenant's execution does not exist for it"
        );
    }
    let listed = stranger
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.executions.is_empty());
    let interactions = stranger
        .list_interactions(proto::ListInteractionsRequest {
            execution_id: id(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(interactions.interactions.is_empty());
    let record = get_execution(&mut owner, &execution.execution_id).await;
    assert_eq!(
        record.state,
        proto::ExecutionState::Ready as i32,
        "nothing the stranger sent changed it"
    );
    service.shutdown().await;
}

async fn another_tenants_interaction_can_be_neither_read_nor_answered(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut owner = service.client().await;
    let (_, _, mut events) = begin_turn(&mut owner, &service).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    let id = created["interactionId"].as_str().unwrap().to_owned();
    let mut stranger = service.client_for(Some("tenant-b")).await;
    let read = stranger
        .get_interaction(proto::GetInteractionRequest {
            interaction_id: id.clone(),
        })
        .await;
    assert_refused(read, Code::NotFound, "INTERACTION_NOT_FOUND");
    let answered = stranger
        .answer_interaction(proto::AnswerInteractionRequest {
            request_id: "stranger".into(),
            interaction_id: id.clone(),
            etag: created["etag"].as_str().unwrap().into(),
            answer: Some(proto::answer_interaction_request::Answer::Cancel(Default::default())),
        })
        .await;
    assert_refused(answered, Code::NotFound, "INTERACTION_NOT_FOUND");
    let listed = stranger
        .list_interactions(proto::ListInteractionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.interactions.is_empty());
    let row = service
        .store
        .get_interaction(TENANT, &id.as_str().into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state.as_str(), "pending", "nothing changed");
    service.shutdown().await;
}

async fn executions_are_listed_in_pages(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let mut created = Vec::new();
    for n in 0..3 {
        created.push(
            create_execution(&mut client, &service, &format!("create-{n}"))
                .await
                .execution_id,
        );
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_executions(proto::ListExecutionsRequest {
                page_size: 2,
                page_token: token.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.executions.len() <= 2);
        seen.extend(page.executions.into_iter().map(|e| e.execution_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen, created);
    service.shutdown().await;
}

/// A page token is what a list call returned; anything else is refused, never answered
/// with an empty page that a client would read as the end of the list.
async fn a_page_token_no_list_returned_is_refused_not_read_as_the_end(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    for token in ["garbage", "00000000", "999", "'; DROP TABLE executions; --"] {
        assert_refused(
            client
                .list_executions(proto::ListExecutionsRequest {
                    page_size: 2,
                    page_token: token.into(),
                })
                .await,
            tonic::Code::InvalidArgument,
            "INVALID_ARGUMENT",
        );
        assert_refused(
            client
                .list_interactions(proto::ListInteractionsRequest {
                    page_token: token.into(),
                    ..Default::default()
                })
                .await,
            tonic::Code::InvalidArgument,
            "INVALID_ARGUMENT",
        );
        assert_refused(
            client
                .list_sessions(proto::ListSessionsRequest {
                    page_size: 2,
                    page_token: token.into(),
                })
                .await,
            tonic::Code::InvalidArgument,
            "INVALID_ARGUMENT",
        );
        assert_refused(
            client
                .list_turns(proto::ListTurnsRequest {
                    execution_id: execution.execution_id.clone(),
                    page_size: 2,
                    page_token: token.into(),
                })
                .await,
            tonic::Code::InvalidArgument,
            "INVALID_ARGUMENT",
        );
    }
    service.shutdown().await;
}

/// An id with a NUL (or any control character) is malformed: refused `INVALID_ARGUMENT`
/// naming the field, on every store — not `UNAVAILABLE` (which clients retry) because the
/// database cannot hold it, and never stored where it can.
async fn an_id_holding_a_control_character_is_refused_as_invalid_and_nothing_is_stored(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    for malformed in ["exec\0id", "exec\u{7}id", "exec\nid"] {
        let refused = client
            .create_execution(proto::CreateExecutionRequest {
                request_id: malformed.into(),
                workspace: service.workspace.display().to_string(),
                ..Default::default()
            })
            .await
            .expect_err("a request id with a control character");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert_eq!(error_metadata(&refused, "field").as_deref(), Some("request_id"));
        let refused = client
            .get_execution(proto::GetExecutionRequest {
                execution_id: malformed.into(),
            })
            .await
            .expect_err("an execution id with a control character");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert_refused(
            client
                .list_sessions(proto::ListSessionsRequest {
                    page_size: 2,
                    page_token: malformed.into(),
                })
                .await,
            tonic::Code::InvalidArgument,
            "INVALID_ARGUMENT",
        );
    }
    let listed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.executions.is_empty(), "nothing was created");
    service.shutdown().await;
}

/// A service whose agents share its uid and get no namespace: what the test harness
/// runs when told not to separate them (and what `serve` runs as an ordinary user).
fn unisolated() -> Options {
    Options {
        agent_uid_separation: false,
        pid_namespace: false,
        ..Options::default()
    }
}

async fn get_capabilities_says_agents_are_not_isolated_when_the_service_cannot_separate_their_uids(backend: Backend) {
    let service = TestService::start_with(backend, "demo.json", unisolated()).await;
    let mut client = service.client().await;
    let served = client
        .get_capabilities(proto::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    let isolation = served
        .iter()
        .find(|c| c.name == AGENT_ISOLATION)
        .expect("the agent isolation capability");
    assert_eq!(
        (isolation.availability, isolation.detail_level),
        (
            proto::CapabilityAvailability::Unsupported as i32,
            proto::CapabilityDetailLevel::Summary as i32
        )
    );
    for layer in [
        IsolationLayer::SeparateUids,
        IsolationLayer::PidNamespace,
        IsolationLayer::PrivateProc,
    ] {
        assert!(
            isolation.reason.contains(layer.name()),
            "{} missing from: {}",
            layer.name(),
            isolation.reason
        );
    }
    service.shutdown().await;
}

async fn health_says_agents_are_not_isolated_while_the_runner_service_serves(backend: Backend) {
    let service = TestService::start_with(backend, "demo.json", unisolated()).await;
    use tonic_health::pb::health_check_response::ServingStatus;
    assert_eq!(
        health_of(&service, cursor_runner_api::AGENT_ISOLATION_HEALTH_NAME).await,
        ServingStatus::NotServing as i32
    );
    assert_eq!(
        health_of(&service, cursor_runner_api::RUNNER_SERVICE_NAME).await,
        ServingStatus::Serving as i32,
        "an unisolated service is still ready: a development run serves"
    );
    service.shutdown().await;
}

async fn health_of(service: &TestService, name: &str) -> i32 {
    tonic_health::pb::health_client::HealthClient::new(service.channel().await)
        .check(tonic_health::pb::HealthCheckRequest { service: name.into() })
        .await
        .unwrap()
        .into_inner()
        .status
}

async fn health_reports_the_runner_service_serving(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(service.channel().await);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "cursor_runner.v1.RunnerService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    service.shutdown().await;
}

async fn interactions_are_listed_in_pages_and_filtered_by_state(backend: Backend) {
    let service = TestService::start(backend, "two_questions.json").await;
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn(&mut client, &service).await;
    let mut exposed = Vec::new();
    while exposed.len() < 2 {
        let event = events.next_event().await;
        if event.event_type == "runtime_request.created" {
            exposed.push(payload(&event)["interactionId"].as_str().unwrap().to_owned());
        }
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_interactions(proto::ListInteractionsRequest {
                execution_id: execution.execution_id.clone(),
                state: proto::InteractionState::Pending as i32,
                page_size: 1,
                page_token: token.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.interactions.len() <= 1);
        seen.extend(page.interactions.into_iter().map(|i| i.interaction_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    seen.sort();
    exposed.sort();
    assert_eq!(seen, exposed, "every pending interaction, each once");
    let delivered = client
        .list_interactions(proto::ListInteractionsRequest {
            execution_id: execution.execution_id.clone(),
            state: proto::InteractionState::Delivered as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(delivered.interactions.is_empty());
    cancel_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    service.shutdown().await;
}

async fn reflection_lists_every_served_service(backend: Backend) {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let service = TestService::start(backend, "demo.json").await;
    let mut reflection = ServerReflectionClient::new(service.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("expected a service list, got {response:?}");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cursor_runner.v1.AdminService",
            "cursor_runner.v1.RunnerService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
        ]
    );
    service.shutdown().await;
}

/// One gRPC-Web call over plain HTTP/1.1, as an HTTP proxy (Daytona's preview ingress)
/// forwards it; returns the response head and body.
fn grpc_web_call(address: std::net::SocketAddr, path: &str, tenant: &str, message: &[u8]) -> (String, Vec<u8>) {
    use std::io::{Read, Write};
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/grpc-web+proto\r\n\
         X-Grpc-Web: 1\r\nx-tenant-id: {tenant}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        frame.len()
    )
    .unwrap();
    stream.write_all(&frame).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP response");
    (
        String::from_utf8_lossy(&response[..split]).into_owned(),
        response[split + 4..].to_vec(),
    )
}

async fn grpc_web_over_http1_reaches_the_same_services(backend: Backend) {
    use prost::Message;
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let created = create_execution(&mut client, &service, "create-1").await;
    let address = service.address;
    let request = proto::GetExecutionRequest {
        execution_id: created.execution_id.clone(),
    }
    .encode_to_vec();
    let (head, body) = tokio::task::spawn_blocking(move || {
        grpc_web_call(
            address,
            "/cursor_runner.v1.RunnerService/GetExecution",
            TENANT,
            &request,
        )
    })
    .await
    .unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("content-type: application/grpc-web"),
        "{head}"
    );
    let body = dechunk(&head, body);
    assert_eq!(body[0], 0, "a data frame first");
    let length = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    let response = proto::GetExecutionResponse::decode(&body[5..5 + length]).unwrap();
    assert_eq!(response.execution.unwrap().execution_id, created.execution_id);
    let trailers = &body[5 + length..];
    assert_eq!(trailers[0], 0x80, "then the trailers frame");
    assert!(String::from_utf8_lossy(&trailers[5..]).contains("grpc-status:0"));
    service.shutdown().await;
}

/// The body of an HTTP/1.1 response, undoing chunked transfer encoding if used.
fn dechunk(head: &str, body: Vec<u8>) -> Vec<u8> {
    if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return body;
    }
    let mut out = Vec::new();
    let mut rest = &body[..];
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
        rest = &rest[line_end + 2 + size + 2..];
    }
}

/// A `CreateExecution` whose encoding is exactly `bytes` long (its request id fills it).
fn create_request_of_encoded_length(bytes: usize) -> proto::CreateExecutionRequest {
    use prost::Message;
    let mut request = proto::CreateExecutionRequest {
        request_id: String::new(),
        ..Default::default()
    };
    let mut id_len = bytes;
    loop {
        request.request_id = "r".repeat(id_len);
        match request.encoded_len() {
            len if len == bytes => return request,
            len if len > bytes => id_len -= len - bytes,
            _ => id_len += 1,
        }
    }
}

async fn a_request_message_at_the_transport_bound_is_read_and_one_byte_over_is_refused_typed(backend: Backend) {
    use cursor_runner_api::bounds::MAX_REQUEST_BYTES;
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let at_bound = client
        .create_execution(create_request_of_encoded_length(MAX_REQUEST_BYTES))
        .await
        .unwrap_err();
    assert_eq!(reason(&at_bound), "FIELD_TOO_LONG", "read, then its field refused");
    let over = client
        .create_execution(create_request_of_encoded_length(MAX_REQUEST_BYTES + 1))
        .await
        .unwrap_err();
    assert_eq!(
        (over.code(), reason(&over).as_str()),
        (Code::ResourceExhausted, "MESSAGE_TOO_LARGE"),
        "{over:?}"
    );
    assert_eq!(
        error_metadata(&over, "max_bytes").as_deref(),
        Some(MAX_REQUEST_BYTES.to_string().as_str())
    );
    assert!(service.agent_received().is_empty(), "nothing was launched");
    service.shutdown().await;
}
