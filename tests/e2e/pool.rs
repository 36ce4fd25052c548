//! The supervised pool through the gRPC API: warm leases, profiles that never cross
//! tenants or credentials, restart intensity and quarantine, idle-slot health, limits,
//! process reuse, and the admin role.

use std::time::Duration;

use cursor_runner_e2e::*;
use cursor_runner_pool::{PoolConfig, RestartIntensity, WarmProfile};
use cursor_runner_supervisor::{BoundCredential, CredentialName, Secret};
use tonic::Code;

on_both_backends!(
    a_warm_slot_serves_the_next_execution_of_its_profile_and_is_replaced,
    leases_never_cross_tenants_or_credentials,
    an_agent_failing_at_start_quarantines_its_profile_which_then_fails_fast_until_cleared,
    a_quarantine_ends_when_its_window_passes,
    an_idle_slot_that_dies_is_detected_and_replaced,
    an_idle_slot_that_stops_answering_the_probe_is_replaced_as_a_failure,
    an_idle_slot_past_its_ttl_is_recycled_and_replaced_without_counting_a_failure,
    a_full_pool_refuses_with_a_retry_hint_or_waits_when_asked,
    a_process_serves_another_session_of_its_profile_when_reuse_is_allowed,
    writes_of_a_superseded_generation_are_refused_counted_and_stop_its_agent,
    an_update_from_a_superseded_agent_mid_turn_never_reaches_the_outbox,
    an_answer_after_a_takeover_is_refused_and_never_reaches_the_superseded_agent,
);

fn pool_options(pool: PoolConfig) -> Options {
    Options {
        pool,
        ..Options::default()
    }
}

fn warm(min_idle: usize) -> PoolConfig {
    PoolConfig {
        min_idle,
        ..PoolConfig::default()
    }
}

async fn pool_status(service: &TestService) -> proto::GetPoolStatusResponse {
    service
        .admin(None)
        .await
        .get_pool_status(proto::GetPoolStatusRequest {})
        .await
        .expect("GetPoolStatus")
        .into_inner()
}

/// Polls `GetPoolStatus` until `check` holds (or `WAIT` runs out).
async fn pool_until(
    service: &TestService,
    what: &str,
    check: impl Fn(&proto::GetPoolStatusResponse) -> bool,
) -> proto::GetPoolStatusResponse {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status = pool_status(service).await;
        if check(&status) {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {status:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn idle_slots(status: &proto::GetPoolStatusResponse) -> Vec<proto::PoolSlot> {
    status
        .profiles
        .iter()
        .flat_map(|p| p.slots.iter())
        .filter(|s| s.state == proto::SlotState::Idle as i32)
        .cloned()
        .collect()
}

fn credential_request(service: &TestService, request_id: &str, secret: Option<&str>) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        request_id: request_id.into(),
        workspace: service.workspace.display().to_string(),
        control_session_id: "run-1".into(),
        credential: secret.map(|secret| proto::CredentialBinding {
            provider: "cursor".into(),
            session_id: "run-1".into(),
            credential_name: "CURSOR_API_KEY".into(),
            secret: secret.into(),
            expire_time: None,
        }),
        ..Default::default()
    }
}

async fn create(client: &mut Client, request: proto::CreateExecutionRequest) -> proto::Execution {
    client
        .create_execution(request)
        .await
        .expect("CreateExecution")
        .into_inner()
        .execution
        .expect("execution")
}

async fn close(client: &mut Client, execution_id: &str, request_id: &str) {
    client
        .close_execution(proto::CloseExecutionRequest {
            request_id: request_id.into(),
            execution_id: execution_id.into(),
        })
        .await
        .expect("CloseExecution");
}

fn lease(execution: &proto::Execution) -> &proto::ExecutionLease {
    execution.lease.as_ref().expect("a ready execution has a lease")
}

async fn a_warm_slot_serves_the_next_execution_of_its_profile_and_is_replaced(backend: Backend) {
    let service = TestService::start_with(backend, "demo.json", pool_options(warm(1))).await;
    let mut client = service.client().await;
    // The first execution teaches the pool the profile: a cold start.
    let first = create_execution(&mut client, &service, "create-1").await;
    assert!(!lease(&first).warm);
    let status = pool_until(&service, "a warm slot", |s| idle_slots(s).len() == 1).await;
    let idle = idle_slots(&status).remove(0);
    // The next one takes that warm slot: same process, no spawn, no initialize.
    let initializes = || {
        service
            .agent_received()
            .iter()
            .filter(|m| m["method"] == "initialize")
            .count()
    };
    let before = initializes();
    let second = create_execution(&mut client, &service, "create-2").await;
    let second_lease = lease(&second);
    assert!(second_lease.warm);
    assert_eq!(second_lease.slot_id, idle.slot_id);
    assert_eq!(second.pid.map(|p| p as u32), idle.pid);
    assert!(
        second_lease.session_new_duration.is_some(),
        "the agent's own session/new time is shown"
    );
    // The pool replaces what was taken.
    let status = pool_until(&service, "a replacement", |s| {
        idle_slots(s).iter().any(|slot| slot.slot_id != idle.slot_id)
    })
    .await;
    assert_eq!(status.profiles.len(), 1);
    assert_eq!(status.profiles[0].leased, 2);
    assert!(initializes() > before, "the replacement was initialized ahead of time");
    let metrics = service.metrics();
    assert!(
        metrics.contains("cursor_runner_pool_leases_total{kind=\"warm\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("cursor_runner_pool_leases_total{kind=\"cold\"} 1"),
        "{metrics}"
    );
    service.shutdown().await;
}

async fn leases_never_cross_tenants_or_credentials(backend: Backend) {
    let pool = PoolConfig {
        warm_profiles: vec![WarmProfile {
            tenant_id: TENANT.into(),
            credential: Some(BoundCredential {
                name: CredentialName::CursorApiKey,
                secret: Secret::new("key-x-0123456789"),
            }),
            min_idle: 1,
        }],
        ..PoolConfig::default()
    };
    let service = TestService::start_with(backend, "env_report.json", pool_options(pool)).await;
    let status = pool_until(&service, "the configured warm slot", |s| idle_slots(s).len() == 1).await;
    let warm_slot = idle_slots(&status).remove(0);
    assert!(status.profiles[0].configured);
    assert_eq!(status.profiles[0].credential_name, "CURSOR_API_KEY");
    assert!(!status.profiles[0].credential_fingerprint.is_empty());
    let mut client = service.client().await;
    // Another credential, no credential, another tenant: each gets a process of its own.
    let other_key = create(
        &mut client,
        credential_request(&service, "create-y", Some("key-y-0123456789")),
    )
    .await;
    let no_key = create(&mut client, credential_request(&service, "create-none", None)).await;
    let mut tenant_b = service.client_for(Some("tenant-b")).await;
    let other_tenant = create(
        &mut tenant_b,
        credential_request(&service, "create-b", Some("key-x-0123456789")),
    )
    .await;
    for execution in [&other_key, &no_key, &other_tenant] {
        assert!(!lease(execution).warm, "{execution:?}");
        assert_ne!(lease(execution).slot_id, warm_slot.slot_id);
    }
    let status = pool_status(&service).await;
    assert!(
        idle_slots(&status).iter().any(|s| s.slot_id == warm_slot.slot_id),
        "the warm slot is still waiting for its own profile"
    );
    // Only the matching tenant and credential get it, and its agent holds that credential.
    let matching = create(
        &mut client,
        credential_request(&service, "create-x", Some("key-x-0123456789")),
    )
    .await;
    assert!(lease(&matching).warm);
    assert_eq!(lease(&matching).slot_id, warm_slot.slot_id);
    let mut events = Subscriber::open(&mut client, &matching.execution_id, 0).await.unwrap();
    start_turn(&mut client, &matching.execution_id, "turn-x").await.unwrap();
    events.until_turn_settles().await;
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(service.workspace.join("env.json")).unwrap()).unwrap();
    assert_eq!(report["env"]["CURSOR_API_KEY"], "key-x-0123456789");
    assert_eq!(
        report["env"]["HOME"].as_str().map(std::path::PathBuf::from),
        Some(service.state_dir().join("homes").join(&warm_slot.slot_id)),
        "the agent that ran the turn is the warm slot's"
    );
    service.shutdown().await;
}

fn failing_pool(window: Duration) -> PoolConfig {
    PoolConfig {
        intensity: RestartIntensity {
            max_failures: 3,
            window,
        },
        ..PoolConfig::default()
    }
}

fn launches(service: &TestService) -> usize {
    service
        .agent_received()
        .iter()
        .filter(|m| m["method"] == "initialize")
        .count()
}

async fn an_agent_failing_at_start_quarantines_its_profile_which_then_fails_fast_until_cleared(backend: Backend) {
    let service = TestService::start_with(
        backend,
        "probe_unauthenticated.json",
        pool_options(failing_pool(Duration::from_secs(600))),
    )
    .await;
    let mut client = service.client().await;
    for n in 0..3 {
        let status = client
            .create_execution(credential_request(&service, &format!("create-{n}"), None))
            .await
            .unwrap_err();
        assert_eq!(reason(&status), "AUTH_REQUIRED", "attempt {n}");
    }
    let launched = launches(&service);
    assert_eq!(launched, 3);
    // Past the intensity: fail fast with the agent's own reason, launching nothing.
    let refused = client
        .create_execution(credential_request(&service, "create-3", None))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable);
    assert_eq!(reason(&refused), "PROFILE_QUARANTINED");
    let details = tonic_types::StatusExt::get_error_details(&refused);
    assert_eq!(details.error_info().unwrap().metadata["cause"], "AUTH_REQUIRED");
    assert!(details.retry_info().and_then(|r| r.retry_delay).is_some());
    assert_eq!(launches(&service), launched, "nothing was launched");
    let status = pool_status(&service).await;
    let profile = &status.profiles[0];
    assert!(profile.quarantined);
    assert_eq!(profile.quarantine_reason, "AUTH_REQUIRED");
    assert_eq!(profile.restarts_in_window, 3);
    assert!(service.metrics().contains("cursor_runner_pool_quarantines_total 1"));
    // Its only profile quarantined, the service is not ready (it still answers calls).
    use tonic_health::pb::health_check_response::ServingStatus;
    let mut health = tonic_health::pb::health_client::HealthClient::new(service.channel().await);
    health_becomes(&mut health, ServingStatus::NotServing).await;
    // An operator clears it: ready again, and the next execution launches again.
    service
        .admin(None)
        .await
        .clear_quarantine(proto::ClearQuarantineRequest {
            profile_id: profile.profile_id.clone(),
        })
        .await
        .unwrap();
    health_becomes(&mut health, ServingStatus::Serving).await;
    let status = client
        .create_execution(credential_request(&service, "create-4", None))
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "AUTH_REQUIRED");
    assert_eq!(launches(&service), launched + 1);
    let unknown = service
        .admin(None)
        .await
        .clear_quarantine(proto::ClearQuarantineRequest {
            profile_id: "profile-nope".into(),
        })
        .await;
    assert_refused(unknown, Code::NotFound, "PROFILE_NOT_FOUND");
    service.shutdown().await;
}

async fn a_quarantine_ends_when_its_window_passes(backend: Backend) {
    let window = Duration::from_secs(2);
    let service = TestService::start_with(backend, "crash_on_start.json", pool_options(failing_pool(window))).await;
    let mut client = service.client().await;
    for n in 0..3 {
        let status = client
            .create_execution(credential_request(&service, &format!("create-{n}"), None))
            .await
            .unwrap_err();
        assert_eq!(reason(&status), "AGENT_EXITED", "attempt {n}");
        assert!(status.message().contains("exit code 3"), "{}", status.message());
    }
    let refused = client
        .create_execution(credential_request(&service, "create-3", None))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "PROFILE_QUARANTINED");
    tokio::time::sleep(window).await;
    let status = client
        .create_execution(credential_request(&service, "create-4", None))
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "AGENT_EXITED", "healthy again: the agent was launched");
    service.shutdown().await;
}

async fn an_idle_slot_that_dies_is_detected_and_replaced(backend: Backend) {
    let pool = PoolConfig {
        warm_profiles: vec![WarmProfile {
            tenant_id: TENANT.into(),
            credential: None,
            min_idle: 1,
        }],
        ..PoolConfig::default()
    };
    let service = TestService::start_with(backend, "demo.json", pool_options(pool)).await;
    let status = pool_until(&service, "a warm slot", |s| idle_slots(s).len() == 1).await;
    let dead = idle_slots(&status).remove(0);
    let pid = dead.pid.expect("an idle slot has a pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let status = pool_until(&service, "a replacement", |s| {
        idle_slots(s).iter().any(|slot| slot.slot_id != dead.slot_id)
    })
    .await;
    assert!(status.profiles[0].slots.iter().all(|s| s.slot_id != dead.slot_id));
    assert_eq!(status.profiles[0].restarts_in_window, 1);
    assert!(!process_alive(i64::from(pid)), "the dead slot was reaped");
    service.shutdown().await;
}

fn one_warm_slot(pool: PoolConfig) -> PoolConfig {
    PoolConfig {
        warm_profiles: vec![WarmProfile {
            tenant_id: TENANT.into(),
            credential: None,
            min_idle: 1,
        }],
        ..pool
    }
}

/// Waits until the first idle slot is gone and another idle one serves; returns the
/// pool status then and the first slot.
async fn replaced_slot(service: &TestService) -> (proto::GetPoolStatusResponse, proto::PoolSlot) {
    let status = pool_until(service, "a warm slot", |s| idle_slots(s).len() == 1).await;
    let first = idle_slots(&status).remove(0);
    let status = pool_until(service, "a replacement", |s| {
        s.profiles[0].slots.iter().all(|slot| slot.slot_id != first.slot_id) && idle_slots(s).len() == 1
    })
    .await;
    (status, first)
}

async fn an_idle_slot_that_stops_answering_the_probe_is_replaced_as_a_failure(backend: Backend) {
    let pool = one_warm_slot(PoolConfig {
        probe_interval: Some(Duration::from_millis(200)),
        probe_timeout: Duration::from_millis(300),
        ..PoolConfig::default()
    });
    let service = TestService::start_with(backend, "silent_after_initialize.json", pool_options(pool)).await;
    let (status, silent) = replaced_slot(&service).await;
    assert!(
        status.profiles[0].restarts_in_window >= 1,
        "an unanswered probe is a failure"
    );
    let pid = i64::from(silent.pid.expect("an idle slot has a pid"));
    eventually("the silent agent to be stopped", || !process_alive(pid)).await;
    service.shutdown().await;
}

async fn an_idle_slot_past_its_ttl_is_recycled_and_replaced_without_counting_a_failure(backend: Backend) {
    let pool = one_warm_slot(PoolConfig {
        idle_ttl: Duration::from_millis(300),
        probe_interval: None,
        ..PoolConfig::default()
    });
    let service = TestService::start_with(backend, "demo.json", pool_options(pool)).await;
    let (status, old) = replaced_slot(&service).await;
    assert_eq!(status.profiles[0].restarts_in_window, 0, "recycling is not a failure");
    let pid = i64::from(old.pid.expect("an idle slot has a pid"));
    eventually("the recycled agent to be stopped", || !process_alive(pid)).await;
    service.shutdown().await;
}

async fn a_full_pool_refuses_with_a_retry_hint_or_waits_when_asked(backend: Backend) {
    let pool = PoolConfig {
        max_per_profile: 1,
        ..PoolConfig::default()
    };
    let service = TestService::start_with(backend, "demo.json", pool_options(pool)).await;
    let mut client = service.client().await;
    let first = create_execution(&mut client, &service, "create-1").await;
    let refused = client
        .create_execution(credential_request(&service, "create-2", None))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(reason(&refused), "POOL_EXHAUSTED");
    let details = tonic_types::StatusExt::get_error_details(&refused);
    assert!(details.retry_info().and_then(|r| r.retry_delay).is_some());
    // Refused before anything existed: the same request id may be sent again.
    let mut waiting = client.clone();
    let mut request = credential_request(&service, "create-2", None);
    request.lease_wait = Some(prost_types::Duration { seconds: 15, nanos: 0 });
    let waited = tokio::spawn(async move { waiting.create_execution(request).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waited.is_finished(), "it waits for capacity");
    close(&mut client, &first.execution_id, "close-1").await;
    let second = waited.await.unwrap().expect("leased once capacity was freed");
    assert!(second.into_inner().execution.unwrap().lease.is_some());
    let too_long = client
        .create_execution(proto::CreateExecutionRequest {
            lease_wait: Some(prost_types::Duration { seconds: 301, nanos: 0 }),
            ..credential_request(&service, "create-3", None)
        })
        .await;
    assert_refused(too_long, Code::InvalidArgument, "INVALID_ARGUMENT");
    service.shutdown().await;
}

async fn a_process_serves_another_session_of_its_profile_when_reuse_is_allowed(backend: Backend) {
    let pool = PoolConfig {
        sessions_per_process: 2,
        ..PoolConfig::default()
    };
    let service = TestService::start_with(backend, "two_turns.json", pool_options(pool)).await;
    let mut client = service.client().await;
    let first = create_execution(&mut client, &service, "create-1").await;
    let mut events = Subscriber::open(&mut client, &first.execution_id, 0).await.unwrap();
    close(&mut client, &first.execution_id, "close-1").await;
    let released = payload(events.events_until("process.released").await.last().unwrap());
    assert_eq!(released["sessionsServed"], 1);
    assert_eq!(released["pid"].as_i64(), first.pid);
    pool_until(&service, "the process back in the pool", |s| idle_slots(s).len() == 1).await;
    let second = create_execution(&mut client, &service, "create-2").await;
    assert!(lease(&second).warm);
    assert_eq!(lease(&second).sessions_served, 1);
    assert_eq!(second.pid, first.pid, "the same process");
    assert_ne!(second.session_id, first.session_id, "a new session");
    // The cap is reached: this time the process is stopped.
    let mut events = Subscriber::open(&mut client, &second.execution_id, 0).await.unwrap();
    close(&mut client, &second.execution_id, "close-2").await;
    events.events_until("process.exited").await;
    let status = pool_until(&service, "no slot left", |s| {
        s.profiles.iter().all(|p| p.slots.is_empty())
    })
    .await;
    assert!(idle_slots(&status).is_empty());
    assert!(!process_alive(first.pid.unwrap()));
    service.shutdown().await;
}

async fn writes_of_a_superseded_generation_are_refused_counted_and_stop_its_agent(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    assert_eq!(execution.generation, 1, "the first lease");
    // What the session sent on its own (its commands) is in before the takeover.
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    events.events_until("session.commands.updated").await;
    let head = service
        .store
        .head_sequence(&execution.execution_id.as_str().into())
        .await
        .unwrap();
    // Another lease takes the execution over (as recovery or another replica would).
    assert!(
        service
            .store
            .advance_generation(
                TENANT,
                &execution.execution_id.as_str().into(),
                cursor_runner_store::Generation::FIRST
            )
            .await
            .unwrap()
    );
    let refused = start_turn(&mut client, &execution.execution_id, "turn-1").await;
    assert_refused(refused, Code::FailedPrecondition, "EXECUTION_FENCED");
    let pid = execution.pid.unwrap();
    eventually("the superseded agent to be stopped", || !process_alive(pid)).await;
    assert_eq!(
        service
            .store
            .head_sequence(&execution.execution_id.as_str().into())
            .await
            .unwrap(),
        head,
        "nothing of the old generation reached the outbox"
    );
    let metrics = service.metrics();
    assert!(
        metrics.contains("cursor_runner_fenced_writes_total{what=\"turn\"} 1"),
        "{metrics}"
    );
    let record = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(record.generation, 2);
    service.shutdown().await;
}

/// Another lease takes `execution_id` over, as a recovery or another replica would.
async fn take_over(service: &TestService, execution_id: &str) {
    let current = service
        .store
        .get_execution(TENANT, &execution_id.into())
        .await
        .unwrap()
        .unwrap()
        .generation;
    assert!(
        service
            .store
            .advance_generation(TENANT, &execution_id.into(), current)
            .await
            .unwrap()
    );
}

async fn an_update_from_a_superseded_agent_mid_turn_never_reaches_the_outbox(backend: Backend) {
    let service = TestService::start(backend, "late_update.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("item.delta").await;
    take_over(&service, &execution.execution_id).await;
    let head = service
        .store
        .head_sequence(&execution.execution_id.as_str().into())
        .await
        .unwrap();
    let pid = execution.pid.unwrap();
    eventually("the superseded agent to be stopped", || !process_alive(pid)).await;
    assert_eq!(
        service
            .store
            .head_sequence(&execution.execution_id.as_str().into())
            .await
            .unwrap(),
        head,
        "the late update was not appended"
    );
    let metrics = service.metrics();
    assert!(
        metrics.contains("cursor_runner_fenced_writes_total{what=\"event\"} 1"),
        "{metrics}"
    );
    service.shutdown().await;
}

async fn an_answer_after_a_takeover_is_refused_and_never_reaches_the_superseded_agent(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    take_over(&service, &execution.execution_id).await;
    // The etag is the interaction's own: only the generation says the answer is stale.
    let refused = client
        .answer_interaction(one_question_answer(&created, "a1", "option-1"))
        .await;
    assert_refused(refused, Code::FailedPrecondition, "EXECUTION_FENCED");
    let pid = execution.pid.unwrap();
    eventually("the superseded agent to be stopped", || !process_alive(pid)).await;
    assert!(
        !service
            .agent_received()
            .iter()
            .any(|m| m.get("method").is_none() && m["result"]["outcome"]["outcome"] == "answered"),
        "no answer was written to the superseded agent"
    );
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(
        interaction.state,
        proto::InteractionState::Pending as i32,
        "nothing was recorded"
    );
    let metrics = service.metrics();
    assert!(
        metrics.contains("cursor_runner_fenced_writes_total{what=\"answer\"} 1"),
        "{metrics}"
    );
    service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_benchmark_runs_at_smoke_size() {
    use cursor_runner_e2e::lease_latency::{FakeStartup, LeaseAgent, measure};
    let startup = FakeStartup {
        initialize_delay_ms: 50,
        session_new_delay_ms: 10,
    };
    let report = measure(Backend::Sqlite, 3, LeaseAgent::Fake(startup)).await;
    assert_eq!(report.warm.warm_leases, 3, "every warm-run lease took an idle slot");
    assert_eq!(report.cold.warm_leases, 0);
    assert!(
        report.cold.session_new.p50_ms >= 10.0,
        "the agent's own session/new is measured apart"
    );
}
