//! The demo: the real service, in-process, on the embedded store, driving the fake
//! agent through a scripted turn whose question is answered through the gRPC API.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use cursor_runner_api::pb::runner_service_client::RunnerServiceClient;
use cursor_runner_api::pb::{self, stream_events_response::Frame};
use cursor_runner_executions::{Engine, EngineConfig};
use cursor_runner_supervisor::AgentCommand;
use serde_json::Value;
use tokio::sync::mpsc;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

const DEMO_TENANT: &str = "demo-tenant";
/// The option the demo picks, by its label in the scenario.
const DEMO_CHOICE: &str = "PostgreSQL";
/// Bound on each wait of the demo, so it can never hang.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Scenario file for the fake agent.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/scenarios/demo.json"))]
    scenario: PathBuf,
    /// The fake agent binary; by default the one built next to this binary.
    #[arg(long)]
    fake_agent: Option<PathBuf>,
}

type Client = RunnerServiceClient<
    InterceptedService<Channel, fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>>,
>;

fn with_tenant(mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    request.metadata_mut().insert(
        cursor_runner_api::TENANT_METADATA,
        tonic::metadata::MetadataValue::from_static(DEMO_TENANT),
    );
    Ok(request)
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let fake_agent = match args.fake_agent {
        Some(path) => path,
        None => locate_fake_agent()?,
    };
    let scenario =
        std::fs::canonicalize(&args.scenario).with_context(|| format!("scenario {}", args.scenario.display()))?;
    let state = std::env::temp_dir().join(format!("cursor-runner-demo-{}", std::process::id()));
    let workspace = state.join("workspace");
    std::fs::create_dir_all(&workspace)?;
    let store = cursor_runner_store::connect(&format!("sqlite:{}", state.join("demo.db").display())).await?;
    let command = AgentCommand::parse(&format!("{} --scenario {}", fake_agent.display(), scenario.display()))?;
    let mut config = EngineConfig::new(command, state.clone());
    // The same lifetime guardian as `serve`: each agent under this binary's agent-init.
    config.agent_init = std::env::current_exe().ok();
    let engine = Engine::start(store, config).await?;
    let listener = cursor_runner_api::bind("127.0.0.1:0".parse()?).await?;
    let address = listener.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(cursor_runner_api::serve(engine.clone(), listener, async {
        let _ = stop_rx.await;
    }));
    println!(
        "cursor-runner demo: serving on {address} (embedded store), fake agent {}",
        fake_agent.display()
    );

    let channel = Channel::from_shared(format!("http://{address}"))?.connect().await?;
    let mut client: Client = RunnerServiceClient::with_interceptor(channel, with_tenant as _);
    let result = drive(&mut client, &workspace).await;

    let _ = stop_tx.send(());
    let _ = server.await;
    engine.shutdown().await;
    let _ = std::fs::remove_dir_all(&state);
    result
}

async fn drive(client: &mut Client, workspace: &Path) -> anyhow::Result<()> {
    let execution = client
        .create_execution(pb::CreateExecutionRequest {
            request_id: "demo-create".into(),
            workspace: workspace.display().to_string(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .execution
        .context("no execution")?;
    println!(
        "created execution {} (session {})",
        execution.execution_id, execution.session_id
    );

    let mut stream = client
        .stream_events(pb::StreamEventsRequest {
            execution_id: execution.execution_id.clone(),
            after_sequence: 0,
        })
        .await?
        .into_inner();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(frame)) = stream.message().await {
            if let Some(Frame::Event(event)) = frame.frame {
                print_event(&event);
                if events_tx.send(event).is_err() {
                    break;
                }
            }
        }
    });

    let turn = client
        .start_turn(pb::StartTurnRequest {
            request_id: "demo-turn-1".into(),
            execution_id: execution.execution_id.clone(),
            prompt: vec![pb::PromptBlock {
                content: Some(pb::prompt_block::Content::Text("Set up the database layer.".into())),
            }],
            ..Default::default()
        })
        .await?
        .into_inner()
        .turn
        .context("no turn")?;
    println!("started turn {}", turn.turn_id);

    let created = wait_for(&mut events, "runtime_request.created").await?;
    let payload = created
        .payload
        .as_ref()
        .map(cursor_runner_api::struct_to_json)
        .unwrap_or_default();
    let (question_id, option_id) = pick(&payload["request"], DEMO_CHOICE)?;
    let interaction_id = payload["interactionId"].as_str().unwrap_or_default().to_owned();
    println!("answering {interaction_id}: {question_id} -> {option_id} ({DEMO_CHOICE})");
    let answered = client
        .answer_interaction(pb::AnswerInteractionRequest {
            request_id: "demo-answer-1".into(),
            interaction_id,
            etag: payload["etag"].as_str().unwrap_or_default().to_owned(),
            answer: Some(pb::answer_interaction_request::Answer::Questions(pb::QuestionAnswer {
                selections: vec![pb::QuestionSelection {
                    question_id,
                    option_ids: vec![option_id],
                }],
            })),
        })
        .await?
        .into_inner()
        .interaction
        .context("no interaction")?;
    println!(
        "interaction is {} (delivery: {})",
        state_name(answered.state),
        answered.delivery
    );

    let settled = wait_for(&mut events, "turn.").await?;
    if settled.event_type != "turn.completed" {
        bail!("the turn ended {} instead of completing", settled.event_type);
    }
    let closed = client
        .close_execution(pb::CloseExecutionRequest {
            request_id: "demo-close".into(),
            execution_id: execution.execution_id.clone(),
        })
        .await?
        .into_inner()
        .execution
        .context("no execution")?;
    wait_for(&mut events, "process.exited").await?;
    println!(
        "closed execution {}: the agent process is gone; demo complete",
        closed.execution_id
    );
    Ok(())
}

/// Waits for the next event whose type starts with `prefix`, skipping turn.started.
async fn wait_for(
    events: &mut mpsc::UnboundedReceiver<pb::ActivityEvent>,
    prefix: &str,
) -> anyhow::Result<pb::ActivityEvent> {
    loop {
        let event = tokio::time::timeout(STEP_TIMEOUT, events.recv())
            .await
            .with_context(|| format!("waiting for {prefix}"))?
            .context("the event stream ended")?;
        if event.event_type.starts_with(prefix) && event.event_type != "turn.started" {
            return Ok(event);
        }
    }
}

fn pick(request: &Value, label: &str) -> anyhow::Result<(String, String)> {
    let question = &request["questions"][0];
    let option = question["options"]
        .as_array()
        .and_then(|options| options.iter().find(|o| o["label"] == label))
        .context("the demo option is not offered")?;
    Ok((
        question["questionId"].as_str().unwrap_or_default().to_owned(),
        option["optionId"].as_str().unwrap_or_default().to_owned(),
    ))
}

fn state_name(state: i32) -> String {
    pb::InteractionState::try_from(state)
        .map(|s| s.as_str_name().trim_start_matches("INTERACTION_STATE_").to_lowercase())
        .unwrap_or_else(|_| state.to_string())
}

fn print_event(event: &pb::ActivityEvent) {
    let payload = event
        .payload
        .as_ref()
        .map(cursor_runner_api::struct_to_json)
        .unwrap_or_default();
    let summary = match event.event_type.as_str() {
        "item.delta" => format!("{:?}", payload["text"].as_str().unwrap_or_default()),
        "tool.execution.started" | "tool.execution.completed" | "tool.execution.progressed" => {
            format!(
                "{} [{}] {}",
                payload["name"].as_str().unwrap_or_default(),
                payload["status"].as_str().unwrap_or_default(),
                payload["output"]
                    .as_str()
                    .map(|o| format!("{:?}", o.trim_end()))
                    .unwrap_or_default()
            )
        }
        "runtime_request.created" => format!(
            "{} {:?}",
            payload["kind"].as_str().unwrap_or_default(),
            payload["request"]["questions"][0]["prompt"]
                .as_str()
                .unwrap_or_default()
        ),
        "runtime_request.resolved" => format!(
            "outcome={} delivery={}",
            payload["outcome"],
            payload["delivery"].as_str().unwrap_or_default()
        ),
        _ => payload.to_string(),
    };
    println!("  #{:<3} {:<28} {summary}", event.sequence, event.event_type);
}

/// Finds the fake agent next to this binary, building it when run through cargo.
fn locate_fake_agent() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let candidate = exe.with_file_name("fake-cursor");
    if candidate.is_file() {
        return Ok(candidate);
    }
    if let Some(cargo) = std::env::var_os("CARGO") {
        println!("building the fake agent (cargo build -p fake-cursor)…");
        let status = std::process::Command::new(cargo)
            .args(["build", "-q", "-p", "fake-cursor"])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .status()?;
        if status.success() && candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "the fake agent was not found at {}; build it with `cargo build -p fake-cursor` or pass --fake-agent",
        candidate.display()
    )
}
