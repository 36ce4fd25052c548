//! Traces that continue the caller's: an in-process OTLP collector receives the spans of
//! a turn whose trace is the one the client sent in `traceparent`, the agent's prompt
//! carries that trace on in `_meta.traceparent`, and a canary credential appears in no
//! span nor log line at trace level. With no OTLP endpoint configured, nothing is
//! exported (the other tests run that way).

use std::path::Path;
use std::sync::{Arc, Mutex};

use cursor_runner_e2e::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::trace::v1::Span;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";
const CANARY: &str = "sk-canary-trace-1618-never-log";

#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
    /// The resource attributes of every export, `key=value`.
    resources: Arc<Mutex<Vec<Vec<String>>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            if let Some(attributes) = &resource.resource {
                let attributes = attributes
                    .attributes
                    .iter()
                    .map(|a| format!("{}={}", a.key, any_value(a.value.as_ref())))
                    .collect();
                self.resources.lock().unwrap().push(attributes);
            }
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .filter(|a| a.value.as_ref().is_some_and(|v| v.value.is_some()))
        .map(|a| any_value(a.value.as_ref()))
}

fn any_value(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// Starts the service exporting to an in-process collector with `env` besides the
/// endpoint, makes one call, stops it (which flushes), and returns what was exported.
async fn export_one_call(env: &[(&str, &str)]) -> Collector {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector_address = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    // `grpc.request` is an info span: the harness's default filter (warn) would drop it.
    let mut settings = vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
            format!("http://{collector_address}"),
        ),
        ("CURSOR_RUNNER_LOG".to_owned(), "info".to_owned()),
    ];
    settings.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let service = ServiceProcess::start(ServiceSettings {
        binary: Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario: "demo.json",
        record: &dirs.record,
        env: settings,
        args: Vec::new(),
    });
    let mut client = service.client().await;
    client
        .get_capabilities(proto::GetCapabilitiesRequest::default())
        .await
        .expect("GetCapabilities");
    drop(client);
    service.stop();
    server.abort();
    collector
}

/// The standard `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name the exported
/// spans' resource (the SDK's precedence: the service name variable over the attribute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_service_name_and_resource_attributes_reach_exported_spans() {
    let collector = export_one_call(&[
        ("OTEL_SERVICE_NAME", "runner-eu-1"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment.name=staging,service.name=overridden",
        ),
    ])
    .await;
    let resources = collector.resources.lock().unwrap().clone();
    assert!(!collector.spans.lock().unwrap().is_empty(), "no span exported");
    for attributes in &resources {
        assert!(
            attributes.contains(&"service.name=runner-eu-1".to_owned()),
            "{attributes:?}"
        );
        assert!(
            attributes.contains(&"deployment.environment.name=staging".to_owned()),
            "{attributes:?}"
        );
        assert!(
            attributes.iter().any(|a| a.starts_with("service.version=")),
            "{attributes:?}"
        );
    }
}

/// Without `OTEL_SERVICE_NAME` (nor `service.name` in `OTEL_RESOURCE_ATTRIBUTES`), the
/// service is `cursor-runner`, not the SDK's `unknown_service`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_otel_service_name_spans_are_cursor_runners() {
    let collector = export_one_call(&[]).await;
    let resources = collector.resources.lock().unwrap().clone();
    assert!(!resources.is_empty(), "no span exported");
    for attributes in &resources {
        assert!(
            attributes.contains(&"service.name=cursor-runner".to_owned()),
            "{attributes:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_traced_under_the_callers_trace_and_the_agent_gets_it_too() {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector_address = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );

    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let service = ServiceProcess::start(ServiceSettings {
        binary: Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario: "demo.json",
        record: &dirs.record,
        env: vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
                format!("http://{collector_address}"),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
            ("CURSOR_RUNNER_LOG".into(), "trace".into()),
        ],
        args: Vec::new(),
    });
    let mut client = service.client().await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01");
    let mut create = tonic::Request::new(proto::CreateExecutionRequest {
        request_id: "create-1".into(),
        workspace: dirs.workspace.display().to_string(),
        control_session_id: "run-1".into(),
        credential: Some(proto::CredentialBinding {
            provider: "cursor".into(),
            session_id: "run-1".into(),
            credential_name: "CURSOR_API_KEY".into(),
            secret: CANARY.into(),
            expire_time: None,
        }),
        ..Default::default()
    });
    create
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    let execution = client
        .create_execution(create)
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let mut start = tonic::Request::new(proto::StartTurnRequest {
        request_id: "turn-1".into(),
        execution_id: execution.execution_id.clone(),
        prompt: vec![proto::PromptBlock {
            content: Some(proto::prompt_block::Content::Text("Set it up.".into())),
        }],
        ..Default::default()
    });
    start.metadata_mut().insert("traceparent", traceparent.parse().unwrap());
    client.start_turn(start).await.unwrap();
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    // An error path too: a forged option.
    let refused = client
        .answer_interaction(one_question_answer(&created, "a0", "option-99"))
        .await;
    assert!(refused.is_err());
    client
        .answer_interaction(one_question_answer(&created, "a1", "option-1"))
        .await
        .unwrap();
    events.until_turn_settles().await;
    let logs = service.stop_and_collect_stderr();
    server.abort();

    let spans = collector.spans.lock().unwrap().clone();
    let ours: Vec<&Span> = spans.iter().filter(|s| hex::encode(&s.trace_id) == TRACE_ID).collect();
    let names: Vec<&str> = ours.iter().map(|s| s.name.as_str()).collect();
    let request = ours
        .iter()
        .find(|s| {
            s.name == "grpc.request"
                && attribute(s, "rpc.method").as_deref() == Some("/cursor_runner.v1.RunnerService/StartTurn")
        })
        .unwrap_or_else(|| panic!("the StartTurn call continues the caller's trace: {names:?}"));
    assert_eq!(
        hex::encode(&request.parent_span_id),
        PARENT_SPAN_ID,
        "a child of the caller's span"
    );
    let turn = ours
        .iter()
        .find(|s| s.name == "turn")
        .unwrap_or_else(|| panic!("the turn's span is in the caller's trace: {names:?}"));
    assert_eq!(
        turn.parent_span_id, request.span_id,
        "the turn is a child of its StartTurn call"
    );
    assert_eq!(
        attribute(turn, "execution_id").as_deref(),
        Some(execution.execution_id.as_str())
    );
    assert_eq!(attribute(turn, "generation").as_deref(), Some("1"));
    assert!(
        ours.iter()
            .any(|s| s.name == "execution.start" && attribute(s, "slot_id").is_some()),
        "the lease is traced: {names:?}"
    );
    assert!(
        spans.iter().any(|s| s.name == "interaction.deliver"
            && attribute(s, "interaction_id").as_deref() == created["interactionId"].as_str()),
        "the answer's way to the agent is traced"
    );

    let prompt = std::fs::read_to_string(&dirs.record)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|m| m["method"] == "session/prompt")
        .unwrap();
    let carried = prompt["params"]["_meta"]["traceparent"]
        .as_str()
        .expect("_meta.traceparent");
    assert!(carried.starts_with(&format!("00-{TRACE_ID}-")), "{carried}");
    assert_eq!(
        prompt["params"]["_meta"].get("tracestate"),
        None,
        "no empty tracestate (the trace carries no vendor state)"
    );
    assert!(
        carried.contains(&hex::encode(&turn.span_id)),
        "the agent continues the turn's span"
    );

    assert!(logs.iter().any(|l| l.contains("TRACE")));
    for text in logs.iter().cloned().chain(spans.iter().map(|s| format!("{s:?}"))) {
        assert!(!text.contains(CANARY), "the credential leaked into: {text}");
    }
    database.drop_database().await;
}

/// `OTEL_TRACES_SAMPLER` is the SDK's: `always_off` exports no span at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_traces_sampler_always_off_exports_nothing() {
    let collector = export_one_call(&[("OTEL_TRACES_SAMPLER", "always_off")]).await;
    assert!(collector.spans.lock().unwrap().is_empty(), "sampled out, yet exported");
}
