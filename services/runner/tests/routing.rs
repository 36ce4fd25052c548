//! Any replica answers any call (`docs/scale-out.md` §4, stage 5): real `serve` replicas
//! on one PostgreSQL, each with an internal listener and the fleet's token. A call for an
//! execution another replica owns is forwarded to that owner, one hop, and the owner's own
//! handler answers: the caller gets what a call to the owner gets, refusals included, and
//! an answer returns only once the owner wrote it to the agent's stdin.

use std::net::SocketAddr;

use cursor_runner_e2e::*;
use proto as pb;
use serde_json::Value;

/// Long enough that nothing here waits one out (but the test that kills an owner).
const LONG_LEASE_MS: u64 = 60_000;
/// For the test that waits out a dead owner's lease: long enough that a call sent right
/// after the owner died still finds its lease live.
const SHORT_LEASE_MS: u64 = 5_000;
/// The start of the fleets' shared secrets in these tests.
const FLEET_TOKEN: &str = "fleet-token-0123456789abcdef0123456789";

/// The shared secret of the fleet on `database_url`: each test's own, so that a replica of
/// another test running at the same time, which took over a port a replica here let go
/// of, refuses the calls forwarded to that port as the hop's failure.
fn fleet_token(database_url: &str) -> String {
    use sha2::Digest;
    format!(
        "{FLEET_TOKEN}-{}",
        &hex::encode(sha2::Sha256::digest(database_url.as_bytes()))[..16]
    )
}

/// One replica of a fleet: its process (with an internal listener and `/metrics`) and its
/// directories.
struct Replica {
    process: ServiceProcess,
    dirs: ServiceDirs,
}

impl Replica {
    fn internal(&self) -> SocketAddr {
        self.process.internal_address()
    }

    /// The calls this replica forwarded whose outcome was `outcome`, from its `/metrics`.
    fn forwarded(&self, outcome: &str) -> u64 {
        let series = format!("cursor_runner_forwarded_calls_total{{outcome=\"{outcome}\"}} ");
        scrape_metrics(self.process.metrics_address())
            .lines()
            .find_map(|line| line.strip_prefix(series.as_str()))
            .map_or(0, |value| value.trim().parse().expect("a count"))
    }
}

/// `serve` as replica `name` of a fleet forwarding calls, with an ownership lease of
/// `lease_ms`.
fn fleet_replica(database_url: &str, name: &str, lease_ms: u64) -> Replica {
    fleet_replica_with(database_url, name, lease_ms, Vec::new())
}

/// [`fleet_replica`] with more of the service's environment (a later value of a variable
/// replaces an earlier one).
fn fleet_replica_with(database_url: &str, name: &str, lease_ms: u64, more_env: Vec<(String, String)>) -> Replica {
    fleet_replica_playing(database_url, name, lease_ms, more_env, "demo.json")
}

/// [`fleet_replica_with`], its agents playing `scenario`.
fn fleet_replica_playing(
    database_url: &str,
    name: &str,
    lease_ms: u64,
    more_env: Vec<(String, String)>,
    scenario: &str,
) -> Replica {
    let dirs = ServiceDirs::new();
    let mut env = fleet_replica_env(name, lease_ms, &dirs, &fleet_token(database_url));
    env.extend(more_env);
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner"));
    let process = ServiceProcess::serve_in(binary, database_url, &dirs, scenario, env);
    Replica { process, dirs }
}

/// Three replicas of one fleet on a new database: `replica-a` owns what the tests create.
struct Fleet {
    database: TestDatabase,
    a: Replica,
    b: Replica,
    c: Replica,
    a_client: Client,
    b_client: Client,
    c_client: Client,
}

impl Fleet {
    async fn start(lease_ms: u64) -> Self {
        let database = TestDatabase::create(Backend::Postgres).await;
        let a = fleet_replica(&database.url, "replica-a", lease_ms);
        let b = fleet_replica(&database.url, "replica-b", lease_ms);
        let c = fleet_replica(&database.url, "replica-c", lease_ms);
        let (a_client, b_client, c_client) = (
            a.process.client().await,
            b.process.client().await,
            c.process.client().await,
        );
        Self {
            database,
            a,
            b,
            c,
            a_client,
            b_client,
            c_client,
        }
    }

    /// Closes `execution_id` (so no drain waits on its turn), then stops every replica.
    async fn close_and_stop(mut self, execution_id: &str) {
        self.a_client
            .close_execution(pb::CloseExecutionRequest {
                request_id: format!("close-{execution_id}"),
                execution_id: execution_id.to_owned(),
            })
            .await
            .expect("CloseExecution");
        self.stop().await;
    }

    async fn stop(self) {
        for replica in [self.a, self.b, self.c] {
            replica.process.stop();
        }
        self.database.drop_database().await;
    }
}

/// `replica-a` and `replica-b` of a fleet on a new database, each with its own environment
/// added, and their clients.
struct Pair {
    database: TestDatabase,
    a: Replica,
    b: Replica,
    a_client: Client,
    b_client: Client,
}

impl Pair {
    async fn start(a_env: Vec<(String, String)>, b_env: Vec<(String, String)>) -> Self {
        Self::playing(a_env, b_env, "demo.json").await
    }

    /// [`Pair::start`], the agents playing `scenario`.
    async fn playing(a_env: Vec<(String, String)>, b_env: Vec<(String, String)>, scenario: &str) -> Self {
        let database = TestDatabase::create(Backend::Postgres).await;
        let a = fleet_replica_playing(&database.url, "replica-a", LONG_LEASE_MS, a_env, scenario);
        let b = fleet_replica_playing(&database.url, "replica-b", LONG_LEASE_MS, b_env, scenario);
        let (a_client, b_client) = (a.process.client().await, b.process.client().await);
        Self {
            database,
            a,
            b,
            a_client,
            b_client,
        }
    }
}

/// Stops `replicas`, then drops `database`.
async fn stop_all(database: TestDatabase, replicas: impl IntoIterator<Item = Replica>) {
    for replica in replicas {
        replica.process.stop();
    }
    database.drop_database().await;
}

/// What a caller can tell of a refusal: code, message, `ErrorInfo` reason and metadata.
fn refusal(status: tonic::Status) -> (tonic::Code, String, String, Vec<(String, String)>) {
    use tonic_types::StatusExt;
    let metadata = status
        .get_error_details()
        .error_info()
        .map(|info| info.metadata.clone().into_iter().collect())
        .unwrap_or_default();
    (status.code(), status.message().to_owned(), reason(&status), metadata)
}

/// The answers the agent read (its `--record`): JSON-RPC responses to its request id 0.
fn answers_read(record: &std::path::Path) -> usize {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m.get("method").is_none() && m["id"] == 0)
        .count()
}

/// Every refusal through a replica that does not own the execution is the owner's own,
/// word for word: the same code, message, reason and metadata as the same call sent to the
/// owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_through_replicas_that_do_not_own_the_execution_are_the_owners_own() {
    let mut fleet = Fleet::start(LONG_LEASE_MS).await;
    let (execution, _, created) = question_asked(&mut fleet.a_client, &fleet.a.dirs.workspace, "a").await;
    let id = execution.execution_id.clone();
    let turn_id = created["turnId"].as_str().unwrap().to_owned();
    let mut stale = one_question_answer(&created, "stale", "option-1");
    stale.etag = "a-stale-etag".into();
    let invalid = one_question_answer(&created, "invalid", "not-an-option");
    let mut seen = Vec::new();
    for (through, client) in [
        ("replica-a", &mut fleet.a_client),
        ("replica-b", &mut fleet.b_client),
        ("replica-c", &mut fleet.c_client),
    ] {
        let tag = |name: &str| format!("{name}-through-{through}");
        let refused = [
            start_turn(client, &id, &tag("turn")).await.map(drop),
            client
                .cancel_turn(pb::CancelTurnRequest {
                    request_id: tag("cancel"),
                    execution_id: id.clone(),
                    turn_id: format!("{turn_id}-not"),
                })
                .await
                .map(drop),
            client
                .answer_interaction(pb::AnswerInteractionRequest {
                    request_id: tag("stale"),
                    ..stale.clone()
                })
                .await
                .map(drop),
            client
                .answer_interaction(pb::AnswerInteractionRequest {
                    request_id: tag("invalid"),
                    ..invalid.clone()
                })
                .await
                .map(drop),
            client
                .set_mode(pb::SetModeRequest {
                    request_id: tag("mode"),
                    execution_id: id.clone(),
                    mode: "plan".into(),
                })
                .await
                .map(drop),
            client
                .recover_execution(pb::RecoverExecutionRequest {
                    request_id: tag("recover"),
                    execution_id: id.clone(),
                    ..Default::default()
                })
                .await
                .map(drop),
        ]
        .map(|result| refusal(result.expect_err("refused")));
        seen.push((through, refused));
    }
    let reasons: Vec<&str> = seen[0].1.iter().map(|(_, _, reason, _)| reason.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "TURN_ACTIVE",
            "TURN_NOT_FOUND",
            "STALE_ETAG",
            "ANSWER_INVALID",
            "TURN_ACTIVE",
            "EXECUTION_NOT_RECOVERABLE"
        ],
        "the owner's refusals: {:?}",
        seen[0]
    );
    for (through, refused) in &seen[1..] {
        assert_eq!(refused, &seen[0].1, "through {through}");
    }
    let interaction = get_interaction(&mut fleet.c_client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(
        interaction.state,
        pb::InteractionState::Pending as i32,
        "nothing was answered"
    );
    fleet.close_and_stop(&id).await;
}

/// An execution created on one replica lives its whole life through the others: a turn
/// started through one, its question answered through another (returning only once the
/// answer is on the agent's stdin) and retried through a third (one delivery), its models
/// listed, and the execution closed, each with the owner's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_lives_its_whole_life_through_replicas_that_do_not_own_it() {
    let mut fleet = Fleet::start(LONG_LEASE_MS).await;
    let execution = create_execution_in(&mut fleet.a_client, &fleet.a.dirs.workspace, "create").await;
    let id = execution.execution_id.clone();
    let mut events = Subscriber::open(&mut fleet.c_client, &id, 0).await.unwrap();
    let turn = start_turn(&mut fleet.b_client, &id, "turn-through-b")
        .await
        .expect("StartTurn through replica-b");
    assert_eq!(turn.execution_id, id);
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    assert_eq!(created["turnId"], turn.turn_id.as_str(), "the turn began on its owner");

    let answer = one_question_answer(&created, "answer-through-c", "option-1");
    let delivered = fleet
        .c_client
        .answer_interaction(answer.clone())
        .await
        .expect("AnswerInteraction through replica-c")
        .into_inner()
        .interaction
        .unwrap();
    assert_eq!(delivered.state, pb::InteractionState::Delivered as i32);
    assert_eq!(
        answers_read(&fleet.a.dirs.record),
        1,
        "the owner's agent read the answer before the call returned"
    );
    let retried = fleet
        .b_client
        .answer_interaction(answer)
        .await
        .expect("the retry through replica-b")
        .into_inner()
        .interaction
        .unwrap();
    assert_eq!(retried, delivered, "a retry gets what the first call got");
    let settled = events.until_turn_settles().await;
    assert_eq!(
        settled.last().unwrap().event_type,
        "turn.completed",
        "{:?}",
        types(&settled)
    );
    assert_eq!(answers_read(&fleet.a.dirs.record), 1, "one delivery");

    let list = |client: &mut Client| {
        let mut client = client.clone();
        let id = id.clone();
        async move {
            client
                .list_models(pb::ListModelsRequest { execution_id: id })
                .await
                .expect("ListModels")
                .into_inner()
        }
    };
    assert_eq!(list(&mut fleet.b_client).await, list(&mut fleet.a_client).await);

    let closed = fleet
        .b_client
        .close_execution(pb::CloseExecutionRequest {
            request_id: "close-through-b".into(),
            execution_id: id.clone(),
        })
        .await
        .expect("CloseExecution through replica-b")
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(closed.state, pb::ExecutionState::Closed as i32);
    assert_eq!(
        get_execution(&mut fleet.a_client, &id).await.state,
        pb::ExecutionState::Closed as i32
    );
    let forwarded = |replica: &Replica| (replica.forwarded("answered"), replica.forwarded("unreachable"));
    assert_eq!(
        forwarded(&fleet.b),
        (4, 0),
        "StartTurn, the retried answer, ListModels, CloseExecution"
    );
    assert_eq!(forwarded(&fleet.c), (1, 0), "the answer");
    assert_eq!(forwarded(&fleet.a), (0, 0), "the owner forwards nothing");
    fleet.stop().await;
}

/// Metadata added to every call of a client.
#[derive(Clone)]
struct Metadata(Vec<(&'static str, String)>);

impl tonic::service::Interceptor for Metadata {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        for (key, value) in &self.0 {
            request.metadata_mut().insert(*key, value.parse().unwrap());
        }
        Ok(request)
    }
}

type MetadataClient = pb::runner_service_client::RunnerServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Metadata>,
>;

/// A client over `channel` whose calls carry each of `metadata`.
fn client_with(channel: tonic::transport::Channel, metadata: Vec<(&'static str, String)>) -> MetadataClient {
    pb::runner_service_client::RunnerServiceClient::with_interceptor(channel, Metadata(metadata))
}

/// The metadata a replica forwards a call for `tenant` to replica `owner` with.
fn forwarded_as(owner: &str, tenant: &str) -> Vec<(&'static str, String)> {
    vec![
        (cursor_runner_api::auth::FORWARDED_OWNER_METADATA, owner.to_owned()),
        (
            cursor_runner_api::auth::FORWARDED_TENANT_METADATA,
            hex::encode(tenant.as_bytes()),
        ),
    ]
}

/// A plaintext client of `address` whose calls carry `authorization` (if any) and `more`.
async fn internal_client(
    address: SocketAddr,
    authorization: Option<String>,
    more: Vec<(&'static str, String)>,
) -> MetadataClient {
    let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .expect("the internal listener");
    let mut metadata = more;
    if let Some(authorization) = authorization {
        metadata.push(("authorization", authorization));
    }
    client_with(channel, metadata)
}

/// The internal listener takes only calls with the fleet's token and the tenant they are
/// for, and answers them itself: a call for an execution another replica owns is refused
/// there naming the owner, never forwarded a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_internal_listener_takes_only_the_fleets_calls_and_never_forwards_them_again() {
    let mut fleet = Fleet::start(LONG_LEASE_MS).await;
    let (execution, _, _created) = question_asked(&mut fleet.a_client, &fleet.a.dirs.workspace, "a").await;
    let get = |execution_id: &str| pb::GetExecutionRequest {
        execution_id: execution_id.to_owned(),
    };
    let token = fleet_token(&fleet.database.url);
    let bearer = |token: &str| Some(format!("Bearer {token}"));
    let for_b = || forwarded_as("replica-b", TENANT);
    let no_tenant = || {
        vec![(
            cursor_runner_api::auth::FORWARDED_OWNER_METADATA,
            "replica-b".to_owned(),
        )]
    };
    for (authorization, metadata, reason_expected) in [
        (None, for_b(), "UNAUTHENTICATED"),
        (
            bearer("not-the-fleet-token-0123456789abcdef"),
            for_b(),
            "UNAUTHENTICATED",
        ),
        (bearer(&token), no_tenant(), "TENANT_REQUIRED"),
        // For another replica: its address now leads here.
        (bearer(&token), forwarded_as("replica-c", TENANT), "OWNER_UNREACHABLE"),
    ] {
        let described = format!("{authorization:?} {metadata:?}");
        let mut client = internal_client(fleet.b.internal(), authorization, metadata).await;
        let refused = client.get_execution(get(&execution.execution_id)).await.unwrap_err();
        assert_eq!(reason(&refused), reason_expected, "{described}: {refused:?}");
    }
    let mut fleet_client = internal_client(fleet.b.internal(), bearer(&token), for_b()).await;
    let seen = fleet_client
        .get_execution(get(&execution.execution_id))
        .await
        .expect("the fleet's call is taken")
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(seen.owner_replica, "replica-a");
    let refused = fleet_client
        .start_turn(pb::StartTurnRequest {
            request_id: "turn-at-b-internal".into(),
            execution_id: execution.execution_id.clone(),
            prompt: vec![pb::PromptBlock {
                content: Some(pb::prompt_block::Content::Text("do the work".into())),
            }],
            ..Default::default()
        })
        .await
        .expect_err("replica-b does not own it and does not forward it again");
    assert_eq!(reason(&refused), "EXECUTION_NOT_READY", "{refused:?}");
    assert_eq!(error_metadata(&refused, "owner_replica").as_deref(), Some("replica-a"));
    fleet.close_and_stop(&execution.execution_id).await;
}

/// A call forwarded to an owner that died is `OWNER_UNREACHABLE` with `RetryInfo`, not a
/// hang; once a survivor took the execution over, the same call gets what a local call
/// gets for a lost execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_for_an_execution_whose_owner_died_is_owner_unreachable_until_it_is_taken_over() {
    let mut fleet = Fleet::start(SHORT_LEASE_MS).await;
    let (execution, _, created) = question_asked(&mut fleet.a_client, &fleet.a.dirs.workspace, "a").await;
    let id = execution.execution_id.clone();
    let Fleet {
        database,
        a,
        b,
        c,
        mut b_client,
        mut c_client,
        ..
    } = fleet;
    a.process.kill();
    let refused = b_client
        .answer_interaction(one_question_answer(&created, "answer-after-death", "option-1"))
        .await
        .expect_err("the owner is dead");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(reason(&refused), "OWNER_UNREACHABLE", "{refused:?}");
    assert_eq!(error_metadata(&refused, "owner_replica").as_deref(), Some("replica-a"));
    assert!(retry_delay(&refused).is_some(), "{refused:?}");
    assert_eq!(b.forwarded("unreachable"), 1);

    execution_in_state(&mut c_client, &id, pb::ExecutionState::Lost).await;
    let retried = b_client
        .answer_interaction(one_question_answer(&created, "answer-after-death", "option-1"))
        .await
        .expect_err("the question expired in the takeover");
    assert_eq!(reason(&retried), "INTERACTION_NOT_PENDING", "{retried:?}");
    assert_eq!(answers_read(&a.dirs.record), 0, "never delivered");
    let refused = start_turn(&mut c_client, &id, "turn-after-takeover")
        .await
        .expect_err("the execution is lost");
    assert_eq!(reason(&refused), "EXECUTION_NOT_READY", "{refused:?}");
    b.process.stop();
    c.process.stop();
    database.drop_database().await;
}

/// `serve` refuses a fleet it cannot be part of, before it serves: on the embedded SQLite
/// store, with a token under its minimum, listening on every interface without the address
/// other replicas reach it at, or serving TLS without the CA to verify the others by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_fleet_setup_it_cannot_serve() {
    let sqlite = TestDatabase::create(Backend::Sqlite).await;
    let postgres = TestDatabase::create(Backend::Postgres).await;
    let short_token = "t".repeat(cursor_runner_api::auth::MIN_FLEET_TOKEN_CHARS - 1);
    let cases = [
        (
            &sqlite.url,
            "127.0.0.1:0",
            FLEET_TOKEN.to_owned(),
            "MULTI_REPLICA_UNSUPPORTED",
        ),
        (&postgres.url, "127.0.0.1:0", short_token, "fewer than 32 characters"),
        (
            &postgres.url,
            "0.0.0.0:0",
            FLEET_TOKEN.to_owned(),
            "give --advertise-address",
        ),
        (
            &postgres.url,
            "127.0.0.1:0",
            FLEET_TOKEN.to_owned(),
            "give --internal-tls-ca",
        ),
    ];
    let ca = cursor_runner_e2e::pki::TestCa::new("fleet-ca");
    let pki = tempfile::tempdir().unwrap();
    let (_, cert, key) = ca.write_server_files(pki.path());
    for (url, listen, token, words) in cases {
        let dirs = ServiceDirs::new();
        let token_file = dirs.root.path().join("fleet-token");
        std::fs::write(&token_file, token).unwrap();
        let binary = std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner"));
        let env = vec![
            ("CURSOR_RUNNER_INTERNAL_LISTEN".to_owned(), listen.to_owned()),
            (
                "CURSOR_RUNNER_FLEET_TOKEN_FILE".to_owned(),
                token_file.display().to_string(),
            ),
            ("CURSOR_RUNNER_ALLOW_PLAINTEXT".to_owned(), "true".to_owned()),
        ];
        // The last case serves TLS but names no CA to verify the other replicas by.
        let env = if words.contains("internal-tls-ca") {
            [
                env,
                vec![
                    ("CURSOR_RUNNER_TLS_CERT".to_owned(), cert.display().to_string()),
                    ("CURSOR_RUNNER_TLS_KEY".to_owned(), key.display().to_string()),
                ],
            ]
            .concat()
        } else {
            env
        };
        let mut refused = ServiceProcess::serve_in(binary, url, &dirs, "demo.json", env);
        refused.wait_for_stderr(words);
        assert_eq!(refused.exit_status().await.code(), Some(1), "{words}");
    }
    sqlite.drop_database().await;
    postgres.drop_database().await;
}

/// A TLS channel to `address`, trusting `ca_pem` for the name `localhost`, once it listens.
async fn tls_channel(address: SocketAddr, ca_pem: &str) -> tonic::transport::Channel {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    let endpoint = Endpoint::from_shared(format!("https://{address}"))
        .unwrap()
        .tls_config(tls)
        .unwrap();
    for _ in 0..200 {
        if std::net::TcpStream::connect(address).is_ok() {
            return endpoint.connect().await.expect("a TLS connection");
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("nothing listened on {address}");
}

/// When the gRPC listeners serve TLS, so do the internal ones: a call through a replica
/// that does not own the execution reaches its owner over TLS, verified against the fleet's
/// CA and name; a replica trusting another CA finds the owner unreachable, and a plaintext
/// client finds no way in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_calls_travel_over_tls_when_the_listeners_serve_it() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let ca = cursor_runner_e2e::pki::TestCa::new("fleet-ca");
    let pki = tempfile::tempdir().unwrap();
    let (ca_file, cert, key) = ca.write_server_files(pki.path());
    let tls_env = || {
        vec![
            ("CURSOR_RUNNER_TLS_CERT".to_owned(), cert.display().to_string()),
            ("CURSOR_RUNNER_TLS_KEY".to_owned(), key.display().to_string()),
            (
                "CURSOR_RUNNER_INTERNAL_TLS_CA".to_owned(),
                ca_file.display().to_string(),
            ),
            ("CURSOR_RUNNER_INTERNAL_TLS_DOMAIN".to_owned(), "localhost".to_owned()),
        ]
    };
    let a = fleet_replica_with(&database.url, "replica-a", LONG_LEASE_MS, tls_env());
    let b = fleet_replica_with(&database.url, "replica-b", LONG_LEASE_MS, tls_env());
    let stranger_ca = tempfile::tempdir().unwrap();
    let (stranger_ca_file, _, _) =
        cursor_runner_e2e::pki::TestCa::new("another-ca").write_server_files(stranger_ca.path());
    let mut trusting_another_ca = tls_env();
    trusting_another_ca.push((
        "CURSOR_RUNNER_INTERNAL_TLS_CA".to_owned(),
        stranger_ca_file.display().to_string(),
    ));
    let c = fleet_replica_with(&database.url, "replica-c", LONG_LEASE_MS, trusting_another_ca);
    let tenant = || vec![(cursor_runner_api::TENANT_METADATA, TENANT.to_owned())];
    let mut a_client = client_with(tls_channel(a.process.address(), &ca.pem()).await, tenant());
    let mut b_client = client_with(tls_channel(b.process.address(), &ca.pem()).await, tenant());
    let execution = a_client
        .create_execution(pb::CreateExecutionRequest {
            request_id: "create".into(),
            workspace: a.dirs.workspace.display().to_string(),
            ..Default::default()
        })
        .await
        .expect("CreateExecution")
        .into_inner()
        .execution
        .unwrap();
    let turn = b_client
        .start_turn(pb::StartTurnRequest {
            request_id: "turn-through-b".into(),
            execution_id: execution.execution_id.clone(),
            prompt: vec![pb::PromptBlock {
                content: Some(pb::prompt_block::Content::Text("do the work".into())),
            }],
            ..Default::default()
        })
        .await
        .expect("StartTurn through replica-b, forwarded over TLS")
        .into_inner()
        .turn
        .unwrap();
    assert_eq!(turn.execution_id, execution.execution_id);
    assert_eq!(b.forwarded("answered"), 1);
    let mut c_client = client_with(tls_channel(c.process.address(), &ca.pem()).await, tenant());
    let refused = c_client
        .list_models(pb::ListModelsRequest {
            execution_id: execution.execution_id.clone(),
        })
        .await
        .expect_err("replica-c cannot verify the owner");
    assert_eq!(reason(&refused), "OWNER_UNREACHABLE", "{refused:?}");
    let plaintext = tonic::transport::Endpoint::from_shared(format!("http://{}", a.internal()))
        .unwrap()
        .connect_lazy();
    let mut client = client_with(
        plaintext,
        [
            vec![("authorization", format!("Bearer {}", fleet_token(&database.url)))],
            forwarded_as("replica-a", TENANT),
        ]
        .concat(),
    );
    let refused = client
        .get_execution(pb::GetExecutionRequest {
            execution_id: execution.execution_id.clone(),
        })
        .await
        .expect_err("the internal listener speaks TLS only");
    assert!(
        reason(&refused).is_empty(),
        "a transport failure, not an answer: {refused:?}"
    );
    a_client
        .close_execution(pb::CloseExecutionRequest {
            request_id: "close".into(),
            execution_id: execution.execution_id.clone(),
        })
        .await
        .expect("CloseExecution");
    a.process.stop();
    b.process.stop();
    database.drop_database().await;
}

/// One agent process per replica, so one execution fills it.
fn one_process() -> Vec<(String, String)> {
    vec![("CURSOR_RUNNER_POOL_MAX_PROCESSES".to_owned(), "1".to_owned())]
}

/// `CreateExecution` of `request_id` in `dirs`' workspace through `client`.
async fn create(client: &mut Client, dirs: &ServiceDirs, request_id: &str) -> Result<pb::Execution, tonic::Status> {
    client
        .create_execution(pb::CreateExecutionRequest {
            request_id: request_id.into(),
            workspace: dirs.workspace.display().to_string(),
            ..Default::default()
        })
        .await
        .map(|response| response.into_inner().execution.expect("execution"))
}

/// Closes each of `executions` through `client`.
async fn close_all(client: &mut Client, executions: &[&pb::Execution]) {
    for execution in executions {
        client
            .close_execution(pb::CloseExecutionRequest {
                request_id: format!("close-{}", execution.execution_id),
                execution_id: execution.execution_id.clone(),
            })
            .await
            .expect("CloseExecution");
    }
}

/// A `CreateExecution` on a replica with no room is placed on one that has room; the
/// execution is that replica's, and a retry of the call through the first finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_on_a_full_replica_is_placed_on_one_with_room_and_its_retry_finds_it() {
    let Pair {
        database,
        a,
        b,
        mut a_client,
        mut b_client,
    } = Pair::start(one_process(), Vec::new()).await;
    let first = create(&mut a_client, &a.dirs, "create-first").await.expect("room on A");
    let placed = create(&mut a_client, &a.dirs, "create-second")
        .await
        .expect("placed on B");
    assert_eq!(
        get_execution(&mut a_client, &first.execution_id).await.owner_replica,
        "replica-a"
    );
    assert_eq!(
        get_execution(&mut a_client, &placed.execution_id).await.owner_replica,
        "replica-b"
    );
    assert_eq!(placed.state, pb::ExecutionState::Ready as i32, "{placed:?}");
    let retried = create(&mut a_client, &a.dirs, "create-second")
        .await
        .expect("the retry");
    assert_eq!(
        retried.execution_id, placed.execution_id,
        "one execution per request_id"
    );
    assert_eq!(a.forwarded("answered"), 1, "placed once");
    close_all(&mut b_client, &[&first, &placed]).await;
    stop_all(database, [a, b]).await;
}

/// The warm keys `name` publishes for placement, once it published one: its `replicas`
/// row read until it names a key.
async fn published_warm_keys(database_url: &str, name: &str) -> String {
    use sqlx::Connection;
    let mut db = sqlx::PgConnection::connect(database_url).await.unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (capacity,): (String,) =
            sqlx::query_as("SELECT capacity FROM replicas WHERE name = $1 AND state = 'serving'")
                .bind(name)
                .fetch_one(&mut db)
                .await
                .expect("its replicas row");
        if capacity.contains("warm-") {
            return capacity;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} never published a warm key"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A `CreateExecution` a full replica places elsewhere goes first to a replica holding a
/// warm process for the tenant, though another is as loaded and would come first by load
/// alone (it registered earlier); the execution leases that warm process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_on_a_full_replica_is_placed_first_where_a_process_of_its_profile_is_warm() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let a = fleet_replica_with(&database.url, "replica-a", LONG_LEASE_MS, one_process());
    let b = fleet_replica(&database.url, "replica-b", LONG_LEASE_MS);
    let mut b_client = b.process.client().await;
    let warm_env = vec![("CURSOR_RUNNER_POOL_MIN_IDLE".to_owned(), "1".to_owned())];
    let c = fleet_replica_with(&database.url, "replica-c", LONG_LEASE_MS, warm_env);
    let (mut a_client, mut c_client) = (a.process.client().await, c.process.client().await);
    // C learns the tenant's profile from one execution and keeps a process of it warm.
    let learned = create(&mut c_client, &c.dirs, "create-on-c").await.expect("room on C");
    close_all(&mut c_client, &[&learned]).await;
    let published = published_warm_keys(&database.url, "replica-c").await;
    assert!(
        !published.contains(TENANT),
        "a warm key names no tenant, only its digest: {published}"
    );

    let first = create(&mut a_client, &a.dirs, "create-first").await.expect("room on A");
    let placed = create(&mut a_client, &a.dirs, "create-second")
        .await
        .expect("placed elsewhere");
    let owner = get_execution(&mut a_client, &placed.execution_id).await.owner_replica;
    assert_eq!(owner, "replica-c", "where the tenant's process is warm");
    assert!(
        placed.lease.as_ref().is_some_and(|lease| lease.warm),
        "it leased the warm process: {placed:?}"
    );
    close_all(&mut b_client, &[&first, &placed]).await;
    stop_all(database, [a, b, c]).await;
}

/// When every replica is full, a `CreateExecution` is refused `RESOURCE_EXHAUSTED` /
/// `POOL_EXHAUSTED` for the whole fleet, with `RetryInfo`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_when_every_replica_is_full_is_resource_exhausted_for_the_fleet_with_retry_info() {
    let Pair {
        database,
        a,
        b,
        mut a_client,
        mut b_client,
    } = Pair::start(one_process(), one_process()).await;
    let on_a = create(&mut a_client, &a.dirs, "create-on-a").await.expect("room on A");
    let on_b = create(&mut b_client, &b.dirs, "create-on-b").await.expect("room on B");
    let refused = create(&mut a_client, &a.dirs, "create-third")
        .await
        .expect_err("the fleet is full");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "POOL_EXHAUSTED", "{refused:?}");
    assert_eq!(error_metadata(&refused, "scope").as_deref(), Some("fleet"));
    assert_eq!(error_metadata(&refused, "replicas_tried").as_deref(), Some("2"));
    assert!(retry_delay(&refused).is_some(), "{refused:?}");
    close_all(&mut a_client, &[&on_a, &on_b]).await;
    stop_all(database, [a, b]).await;
}

/// A draining replica takes no new execution itself but places it on another replica; it
/// still answers the calls forwarded to it for its own executions, so its last turn is
/// answered through another replica, and it then ends its drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_replica_places_new_executions_elsewhere_and_still_answers_forwarded_calls() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let mut a = fleet_replica(&database.url, "replica-a", LONG_LEASE_MS);
    let b = fleet_replica(&database.url, "replica-b", LONG_LEASE_MS);
    let mut a_client = a.process.client().await;
    let mut b_client = b.process.client().await;
    let (execution, _, created) = question_asked(&mut a_client, &a.dirs.workspace, "a").await;
    a.process.signal(nix::sys::signal::Signal::SIGTERM);
    a.process.wait_for_stderr("draining: no new executions or turns");
    let placed = create(&mut a_client, &a.dirs, "create-while-draining")
        .await
        .expect("placed on B");
    assert_eq!(
        get_execution(&mut b_client, &placed.execution_id).await.owner_replica,
        "replica-b"
    );
    let answered = b_client
        .answer_interaction(one_question_answer(&created, "answer-through-b", "option-1"))
        .await
        .expect("the draining owner answers the forwarded call")
        .into_inner()
        .interaction
        .unwrap();
    assert_eq!(answered.state, pb::InteractionState::Delivered as i32);
    assert!(
        a.process.exit_status().await.success(),
        "the drain ended once its turn did"
    );
    assert_eq!(
        get_execution(&mut b_client, &execution.execution_id).await.state,
        pb::ExecutionState::Lost as i32,
        "drained: recoverable on any replica"
    );
    close_all(&mut b_client, &[&placed]).await;
    b.process.stop();
    database.drop_database().await;
}

/// Writes `lines` as a fleet token file under `dirs`; its path, as the environment names it.
fn token_file(dirs: &ServiceDirs, lines: &[&str]) -> (String, String) {
    let path = dirs.root.path().join("fleet-tokens-rotating");
    std::fs::write(&path, lines.join("\n")).unwrap();
    ("CURSOR_RUNNER_FLEET_TOKEN_FILE".to_owned(), path.display().to_string())
}

/// A fleet token is rotated without replicas refusing each other: a replica whose file
/// holds the new token first and the old one after accepts both. A replica whose token
/// the owner does not accept gets `OWNER_UNREACHABLE` for the hop (logged there), never
/// `UNAUTHENTICATED`, which would tell the authenticated caller its credential is bad.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_token_in_rotation_is_taken_both_ways_and_a_mismatch_is_the_owners_unreachability() {
    const OLD: &str = "old-fleet-token-0123456789abcdef0123456789";
    const NEW: &str = "new-fleet-token-0123456789abcdef0123456789";
    let database = TestDatabase::create(Backend::Postgres).await;
    let scratch = ServiceDirs::new();
    let a = fleet_replica_with(
        &database.url,
        "replica-a",
        LONG_LEASE_MS,
        vec![token_file(&scratch, &[NEW, OLD])],
    );
    let b_dirs = ServiceDirs::new();
    let b = fleet_replica_with(
        &database.url,
        "replica-b",
        LONG_LEASE_MS,
        vec![token_file(&b_dirs, &[OLD])],
    );
    let mut a_client = a.process.client().await;
    let mut b_client = b.process.client().await;
    let on_a = create(&mut a_client, &a.dirs, "create-on-a").await.expect("on A");
    let on_b = create(&mut b_client, &b.dirs, "create-on-b").await.expect("on B");
    let models = |execution: &pb::Execution| pb::ListModelsRequest {
        execution_id: execution.execution_id.clone(),
    };
    b_client
        .list_models(models(&on_a))
        .await
        .expect("B sends the old token, which A still takes");
    let refused = a_client
        .list_models(models(&on_b))
        .await
        .expect_err("A sends the new token, which B does not take yet");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(reason(&refused), "OWNER_UNREACHABLE", "{refused:?}");
    assert_eq!(error_metadata(&refused, "owner_replica").as_deref(), Some("replica-b"));
    assert_eq!(a.forwarded("unreachable"), 1);
    close_all(&mut a_client, &[&on_a]).await;
    close_all(&mut b_client, &[&on_b]).await;
    a.process.stop();
    b.process.stop();
    database.drop_database().await;
}

/// A tenant a token names keeps its exact name through another replica, whatever
/// characters the tokens file gives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_a_token_names_keeps_its_exact_name_through_another_replica() {
    use sha2::Digest;
    const TOKEN: &str = "tenant-token-acme";
    let database = TestDatabase::create(Backend::Postgres).await;
    let scratch = ServiceDirs::new();
    let tokens = scratch.root.path().join("tokens.json");
    let digest = hex::encode(sha2::Sha256::digest(TOKEN.as_bytes()));
    std::fs::write(
        &tokens,
        serde_json::json!({"tokens": [{"tenant_id": "acmé ü", "sha256": digest}]}).to_string(),
    )
    .unwrap();
    let tokens_env = || vec![("CURSOR_RUNNER_TOKENS_FILE".to_owned(), tokens.display().to_string())];
    let a = fleet_replica_with(&database.url, "replica-a", LONG_LEASE_MS, tokens_env());
    let b = fleet_replica_with(&database.url, "replica-b", LONG_LEASE_MS, tokens_env());
    // Both listen before the token clients connect (they do not wait for it).
    a.process.client().await;
    b.process.client().await;
    let mut a_client = connect_with_token(a.process.address(), Some(TOKEN), None).await;
    let mut b_client = connect_with_token(b.process.address(), Some(TOKEN), None).await;
    let execution = create(&mut a_client, &a.dirs, "create").await.expect("on A");
    let listed = |client: &mut Client| {
        let mut client = client.clone();
        let id = execution.execution_id.clone();
        async move {
            client
                .list_models(pb::ListModelsRequest { execution_id: id })
                .await
                .map(tonic::Response::into_inner)
        }
    };
    assert_eq!(
        listed(&mut b_client).await.expect("the same tenant on the owner"),
        listed(&mut a_client).await.unwrap()
    );
    close_all(&mut a_client, &[&execution]).await;
    a.process.stop();
    b.process.stop();
    database.drop_database().await;
}

/// An owner's answer past tonic's default 4 MiB bound (a model catalog of 5 MiB) reaches
/// the caller through another replica as it does from the owner: the hop bounds nothing
/// the owner's own listener would send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owners_answer_past_four_mebibytes_reaches_the_caller_through_another_replica() {
    const LARGE: usize = 64 * 1024 * 1024;
    let Pair {
        database,
        a,
        b,
        a_client,
        b_client,
    } = Pair::playing(Vec::new(), Vec::new(), "big_model_catalog.json").await;
    let mut a_client = a_client.max_decoding_message_size(LARGE);
    let mut b_client = b_client.max_decoding_message_size(LARGE);
    let execution = create(&mut a_client, &a.dirs, "create").await.expect("on A");
    let list = |client: &mut Client| {
        let mut client = client.clone();
        let id = execution.execution_id.clone();
        async move {
            client
                .list_models(pb::ListModelsRequest { execution_id: id })
                .await
                .map(tonic::Response::into_inner)
        }
    };
    let direct = list(&mut a_client).await.expect("from the owner");
    assert!(
        direct.models.iter().map(|m| m.name.len()).sum::<usize>() > 4 * 1024 * 1024,
        "the answer is past the default bound"
    );
    assert_eq!(list(&mut b_client).await.expect("through replica-b"), direct);
    close_all(&mut a_client, &[&execution]).await;
    stop_all(database, [a, b]).await;
}

/// When the owner died and another replica took its internal address while the owner's
/// lease still runs, a call forwarded there is that replica's to turn away: the caller gets
/// `OWNER_UNREACHABLE` naming the owner, as while nothing listened there, not a refusal
/// telling it to send its calls to the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_forwarded_to_an_address_another_replica_took_over_is_the_owners_unreachability() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let a = fleet_replica(&database.url, "replica-a", LONG_LEASE_MS);
    let b = fleet_replica(&database.url, "replica-b", LONG_LEASE_MS);
    let mut a_client = a.process.client().await;
    let mut b_client = b.process.client().await;
    let (execution, _, created) = question_asked(&mut a_client, &a.dirs.workspace, "a").await;
    let address = a.internal();
    a.process.kill();
    let z = fleet_replica_with(
        &database.url,
        "replica-z",
        LONG_LEASE_MS,
        vec![("CURSOR_RUNNER_INTERNAL_LISTEN".to_owned(), address.to_string())],
    );
    z.process.client().await;
    let refused = b_client
        .answer_interaction(one_question_answer(&created, "answer-through-b", "option-1"))
        .await
        .expect_err("the owner is dead");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(reason(&refused), "OWNER_UNREACHABLE", "{refused:?}");
    assert_eq!(error_metadata(&refused, "owner_replica").as_deref(), Some("replica-a"));
    assert_eq!(answers_read(&a.dirs.record), 0);
    assert_eq!(b.forwarded("unreachable"), 1, "counted as the hop's failure");
    let _ = execution;
    b.process.stop();
    z.process.stop();
    database.drop_database().await;
}

/// A `CreateExecution` that loads a recorded session through any replica runs on the
/// replica that ran the session (its history lives in a home on that node), forwarded
/// there, and loads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_loaded_through_any_replica_opens_on_the_replica_that_ran_it() {
    let Pair {
        database,
        a,
        b,
        mut a_client,
        mut b_client,
    } = Pair::start(Vec::new(), Vec::new()).await;
    let first = create(&mut a_client, &a.dirs, "create-first").await.expect("on A");
    let session_id = get_execution(&mut a_client, &first.execution_id).await.session_id;
    assert!(!session_id.is_empty(), "the execution recorded its session");
    close_all(&mut a_client, &[&first]).await;
    let loaded = b_client
        .create_execution(pb::CreateExecutionRequest {
            request_id: "load-through-b".into(),
            workspace: a.dirs.workspace.display().to_string(),
            load_session_id: session_id.clone(),
            ..Default::default()
        })
        .await
        .expect("the session is loaded where it ran")
        .into_inner()
        .execution
        .unwrap();
    let seen = get_execution(&mut b_client, &loaded.execution_id).await;
    assert_eq!(seen.owner_replica, "replica-a");
    assert_eq!(seen.session_id, session_id);
    close_all(&mut b_client, &[&loaded]).await;
    stop_all(database, [a, b]).await;
}

/// A `CreateExecution` placed on a replica that does not answer may have run there: the
/// search ends and its caller is told to retry under the same `request_id`
/// (`OWNER_UNREACHABLE`), never that the fleet is full and nothing was created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_placed_on_a_replica_that_does_not_answer_is_retried_not_refused_as_fleet_full() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let a = fleet_replica_with(&database.url, "replica-a", LONG_LEASE_MS, one_process());
    let b = fleet_replica(&database.url, "replica-b", LONG_LEASE_MS);
    let mut a_client = a.process.client().await;
    b.process.client().await;
    let first = create(&mut a_client, &a.dirs, "create-first").await.expect("room on A");
    b.process.kill();
    let refused = create(&mut a_client, &a.dirs, "create-second")
        .await
        .expect_err("A is full and B does not answer");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(reason(&refused), "OWNER_UNREACHABLE", "{refused:?}");
    assert_eq!(error_metadata(&refused, "owner_replica").as_deref(), Some("replica-b"));
    close_all(&mut a_client, &[&first]).await;
    a.process.stop();
    database.drop_database().await;
}

/// A session's load refused for want of room on the replica that holds the session is
/// that replica's refusal: it is not placed on a replica without the session's history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_load_refused_for_room_where_the_session_lives_is_not_placed_elsewhere() {
    let Pair {
        database,
        a,
        b,
        mut a_client,
        ..
    } = Pair::start(one_process(), Vec::new()).await;
    let first = create(&mut a_client, &a.dirs, "create-first").await.expect("on A");
    let session_id = get_execution(&mut a_client, &first.execution_id).await.session_id;
    close_all(&mut a_client, &[&first]).await;
    // Another tenant's execution takes A's one process (its session, named as every fresh
    // fake agent names its first one, is that tenant's: no conflict with the load).
    let mut other_tenant = connect(a.process.address(), Some("tenant-b")).await;
    let filling = create(&mut other_tenant, &a.dirs, "create-filling")
        .await
        .expect("on A");
    let refused = a_client
        .create_execution(pb::CreateExecutionRequest {
            request_id: "load-on-a-full-replica".into(),
            workspace: a.dirs.workspace.display().to_string(),
            load_session_id: session_id,
            ..Default::default()
        })
        .await
        .expect_err("the replica with the session has no room");
    assert_eq!(reason(&refused), "POOL_EXHAUSTED", "{refused:?}");
    assert_eq!(error_metadata(&refused, "scope"), None, "this replica's own refusal");
    assert_eq!(
        a.forwarded("answered") + a.forwarded("unreachable"),
        0,
        "nothing was placed"
    );
    close_all(&mut other_tenant, &[&filling]).await;
    stop_all(database, [a, b]).await;
}
