//! Secrets hygiene, tested rather than promised: a canary bearer token and a canary bound
//! credential go through a full turn with a question — and through error paths — with
//! every log at trace level, and appear nowhere: not in the service's logs, the event
//! stream, error messages, anywhere in the database's files, nor in the session
//! checkpoints (unpacked), though the agent cached the credential in its own home.

use std::path::Path;

use cursor_runner_e2e::*;
use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::Connection;

const TOKEN_CANARY: &str = "tok-canary-31337-never-log-me";
const SECRET_CANARY: &str = "sk-canary-27182-never-log-me";

fn binding(session: &str) -> proto::CredentialBinding {
    proto::CredentialBinding {
        provider: "cursor".into(),
        session_id: session.into(),
        credential_name: "CURSOR_API_KEY".into(),
        secret: SECRET_CANARY.into(),
        expire_time: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_secrets_appear_in_no_log_event_error_or_database_file() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let database_dir = database
        .url
        .strip_prefix("sqlite:")
        .map(|p| Path::new(p).parent().unwrap().to_owned());
    let dirs = ServiceDirs::new();
    let tokens = dirs.root.path().join("tokens.json");
    std::fs::write(
        &tokens,
        json!({"tokens": [{"tenant_id": TENANT, "sha256": hex::encode(Sha256::digest(TOKEN_CANARY))}]}).to_string(),
    )
    .unwrap();
    let service = ServiceProcess::start(ServiceSettings {
        binary: Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario: "credential_in_home.json",
        record: &dirs.record,
        env: vec![("CURSOR_RUNNER_LOG".into(), "trace".into())],
        args: vec!["--tokens-file".into(), tokens.display().to_string()],
    });
    service.client().await; // waits until it listens
    let mut client = connect_with_token(service.address(), Some(TOKEN_CANARY), None).await;
    let mut seen = Vec::new();

    // Error paths first: a binding for another session, a wrong token, an invalid answer.
    let refused = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "bad-binding".into(),
            workspace: dirs.workspace.display().to_string(),
            control_session_id: "run-1".into(),
            credential: Some(binding("run-2")),
            ..Default::default()
        })
        .await
        .unwrap_err();
    seen.push(format!("{refused:?}"));
    let mut impostor = connect_with_token(service.address(), Some(&format!("{TOKEN_CANARY}x")), None).await;
    seen.push(format!(
        "{:?}",
        impostor
            .list_executions(proto::ListExecutionsRequest::default())
            .await
            .unwrap_err()
    ));

    // A full turn with the credential bound and a question answered.
    let execution = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-1".into(),
            workspace: dirs.workspace.display().to_string(),
            control_session_id: "run-1".into(),
            credential: Some(binding("run-1")),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    let asked = events.events_until("runtime_request.created").await;
    let created = payload(asked.last().unwrap());
    let wrong = client
        .answer_interaction(one_question_answer(&created, "a0", "option-99"))
        .await
        .unwrap_err();
    seen.push(format!("{wrong:?}"));
    client
        .answer_interaction(one_question_answer(&created, "a1", "option-1"))
        .await
        .unwrap();
    let rest = events.until_turn_settles().await;
    // The checkpoint after the turn names the file it left out (by name only).
    let left_out = events
        .events_until("provider.notice.recorded")
        .await
        .into_iter()
        .map(|e| payload(&e))
        .find(|notice| notice["category"] == "session_checkpoint_left_out")
        .expect("the checkpoint's notice");
    assert!(
        left_out["summary"]
            .as_str()
            .unwrap()
            .contains(".cursor-data/env-cache.json (holds_secret)"),
        "{left_out}"
    );
    seen.extend(asked.iter().chain(&rest).map(|e| format!("{e:?}")));
    seen.push(format!(
        "{:?}",
        get_execution(&mut client, &execution.execution_id).await
    ));

    let logs = service.stop_and_collect_stderr();
    assert!(
        logs.iter().any(|l| l.contains("TRACE")),
        "the service really logged at trace level"
    );
    seen.extend(logs);
    let mut files = Vec::new();
    for entry in std::fs::read_dir(database_dir.expect("a SQLite database")).unwrap() {
        let path = entry.unwrap().path();
        files.push(String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned());
    }
    assert!(!files.is_empty());
    seen.extend(files);
    seen.extend(checkpoints_unpacked(&database.url).await);
    for canary in [TOKEN_CANARY, SECRET_CANARY] {
        for text in &seen {
            assert!(
                !text.contains(canary),
                "`{canary}` leaked into: {}",
                &text[..text.len().min(2000)]
            );
        }
    }
    database.drop_database().await;
}

/// Every file of every session checkpoint in the database, unpacked.
async fn checkpoints_unpacked(database_url: &str) -> Vec<String> {
    let mut db = sqlx::SqliteConnection::connect(database_url).await.unwrap();
    let rows: Vec<(String, Vec<u8>, String)> = sqlx::query_as("SELECT format, body, sha256 FROM session_checkpoints")
        .fetch_all(&mut db)
        .await
        .unwrap();
    db.close().await.unwrap();
    assert!(!rows.is_empty(), "the session was checkpointed");
    let mut files = Vec::new();
    for (format, body, sha256) in rows {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        cursor_runner_supervisor::checkpoint::unpack(&format, &body, &sha256, &home).unwrap();
        assert!(
            home.join(".cursor-data/sessions").is_dir(),
            "the session itself is kept"
        );
        assert!(
            !home.join(".cursor-data/env-cache.json").exists(),
            "the cache is left out"
        );
        let mut pending = vec![home];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                match entry.file_type().unwrap().is_dir() {
                    true => pending.push(entry.path()),
                    false => files.push(String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap()).into_owned()),
                }
            }
        }
    }
    files
}
