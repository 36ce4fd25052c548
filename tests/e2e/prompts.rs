//! Prompt media: images go to an agent that advertises them (checked against their
//! bytes, bounded); audio and embedded context are refused with a typed reason when the
//! agent does not advertise them; resource links pass through.

use cursor_runner_e2e::*;
use serde_json::Value;
use tonic::Code;

on_both_backends!(
    an_image_and_a_resource_link_reach_an_agent_that_advertises_images,
    content_the_agent_does_not_advertise_is_refused_before_anything_is_sent,
    an_image_that_is_not_what_it_claims_is_refused,
    a_replacement_with_content_the_agent_does_not_take_is_refused_and_leaves_the_running_turn_running,
);

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR";

fn block(content: proto::prompt_block::Content) -> proto::PromptBlock {
    proto::PromptBlock { content: Some(content) }
}

fn text(t: &str) -> proto::PromptBlock {
    block(proto::prompt_block::Content::Text(t.into()))
}

fn png(mime: &str) -> proto::PromptBlock {
    block(proto::prompt_block::Content::Image(proto::PromptImage {
        data: PNG.to_vec(),
        mime_type: mime.into(),
        uri: String::new(),
    }))
}

async fn prompt(
    client: &mut Client,
    execution_id: &str,
    request_id: &str,
    blocks: Vec<proto::PromptBlock>,
) -> Result<proto::Turn, tonic::Status> {
    client
        .start_turn(proto::StartTurnRequest {
            request_id: request_id.into(),
            execution_id: execution_id.into(),
            prompt: blocks,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().turn.unwrap())
}

fn prompts_sent(service: &TestService) -> Vec<Value> {
    service
        .agent_received()
        .into_iter()
        .filter(|m| m["method"] == "session/prompt")
        .collect()
}

async fn an_image_and_a_resource_link_reach_an_agent_that_advertises_images(backend: Backend) {
    let service = TestService::start(backend, "two_turns.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let link = block(proto::prompt_block::Content::ResourceLink(proto::PromptResourceLink {
        uri: format!("file://{}/src/main.rs", service.workspace.display()),
        name: "main.rs".into(),
        mime_type: "text/x-rust".into(),
        ..Default::default()
    }));
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    prompt(
        &mut client,
        &execution.execution_id,
        "turn-1",
        vec![text("What is this?"), png("image/png"), link],
    )
    .await
    .unwrap();
    events.until_turn_settles().await;
    let sent = prompts_sent(&service);
    let blocks = sent[0]["params"]["prompt"].as_array().unwrap();
    let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "image", "resource_link"]);
    assert_eq!(blocks[1]["mimeType"], "image/png");
    assert!(!blocks[1]["data"].as_str().unwrap().is_empty(), "base64 bytes");
    assert_eq!(blocks[2]["name"], "main.rs");
    service.shutdown().await;
}

async fn content_the_agent_does_not_advertise_is_refused_before_anything_is_sent(backend: Backend) {
    let service = TestService::start(backend, "no_images.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let audio = block(proto::prompt_block::Content::Audio(proto::PromptAudio {
        data: vec![0u8; 8],
        mime_type: "audio/wav".into(),
    }));
    let embedded = block(proto::prompt_block::Content::EmbeddedResource(
        proto::PromptEmbeddedResource {
            uri: "file:///x".into(),
            text: "x".into(),
            mime_type: "text/plain".into(),
        },
    ));
    for (n, (content, kind)) in [
        (png("image/png"), "image"),
        (audio, "audio"),
        (embedded, "embedded_context"),
    ]
    .into_iter()
    .enumerate()
    {
        let refused = prompt(
            &mut client,
            &execution.execution_id,
            &format!("turn-{n}"),
            vec![text("look"), content],
        )
        .await
        .unwrap_err();
        assert_eq!(refused.code(), Code::FailedPrecondition, "{kind}");
        assert_eq!(reason(&refused), "PROMPT_CONTENT_UNSUPPORTED");
        let details = tonic_types::StatusExt::get_error_details(&refused);
        assert_eq!(details.error_info().unwrap().metadata["content"], kind);
    }
    assert!(prompts_sent(&service).is_empty(), "nothing reached the agent");
    // Text alone still works.
    prompt(&mut client, &execution.execution_id, "turn-text", vec![text("hello")])
        .await
        .unwrap();
    service.shutdown().await;
}

async fn an_image_that_is_not_what_it_claims_is_refused(backend: Backend) {
    let service = TestService::start(backend, "two_turns.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    for (n, mime) in ["image/jpeg", "image/svg+xml"].into_iter().enumerate() {
        assert_refused(
            prompt(
                &mut client,
                &execution.execution_id,
                &format!("turn-{n}"),
                vec![png(mime)],
            )
            .await,
            Code::InvalidArgument,
            "PROMPT_INVALID",
        );
    }
    // A block with no content at all is as malformed.
    let empty_block = proto::PromptBlock { content: None };
    assert_refused(
        prompt(
            &mut client,
            &execution.execution_id,
            "turn-empty",
            vec![text("look"), empty_block],
        )
        .await,
        Code::InvalidArgument,
        "PROMPT_INVALID",
    );
    assert!(prompts_sent(&service).is_empty());
    service.shutdown().await;
}

async fn a_replacement_with_content_the_agent_does_not_take_is_refused_and_leaves_the_running_turn_running(
    backend: Backend,
) {
    let service = TestService::start(backend, "no_images_long_turn.json").await;
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("item.delta").await;
    let refused = client
        .start_turn(proto::StartTurnRequest {
            request_id: "turn-2".into(),
            execution_id: execution.execution_id.clone(),
            prompt: vec![text("look instead"), png("image/png")],
            replace_active: true,
        })
        .await;
    assert_refused(refused, Code::FailedPrecondition, "PROMPT_CONTENT_UNSUPPORTED");
    // A refused call has no side effects: the turn still runs and was never cancelled.
    let record = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(record.active_turn_id, turn.turn_id, "the turn still runs");
    let cancels = service
        .agent_received()
        .iter()
        .filter(|m| m["method"] == "session/cancel")
        .count();
    assert_eq!(cancels, 0, "no session/cancel reached the agent");
    assert_eq!(prompts_sent(&service).len(), 1, "only the running turn's prompt");
    service.shutdown().await;
}
