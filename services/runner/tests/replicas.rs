//! One service per database until replicas can share one: a second `serve` on a database
//! another serves refuses to start, and the first goes on untouched (its pending question,
//! its agent, its event stream).

use cursor_runner_e2e::*;

fn service(database_url: &str, dirs: &ServiceDirs) -> ServiceProcess {
    ServiceProcess::start(ServiceSettings {
        binary: std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url,
        state_dir: dirs.root.path(),
        scenario: "demo.json",
        record: &dirs.record,
        env: Vec::new(),
        args: Vec::new(),
    })
}

async fn a_second_service_on_the_same_database_is_refused_and_the_first_goes_on(backend: Backend) {
    let database = TestDatabase::create(backend).await;
    let (first_dirs, second_dirs) = (ServiceDirs::new(), ServiceDirs::new());
    let first = service(&database.url, &first_dirs);
    let mut client = first.client().await;
    let (_execution, _turn, mut events) = begin_turn_at(&mut client, &first_dirs.workspace, Default::default()).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());

    let mut second = service(&database.url, &second_dirs);
    second.wait_for_stderr("another cursor-runner serves this database");
    assert_eq!(second.exit_status().await.code(), Some(1), "refused to start");

    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(
        interaction.state,
        proto::InteractionState::Pending as i32,
        "the first service's question was not expired by the second"
    );
    let answered = client
        .answer_interaction(one_question_answer(&created, "answer-1", "option-1"))
        .await
        .expect("the first service still answers")
        .into_inner()
        .interaction
        .unwrap();
    assert_eq!(answered.state, proto::InteractionState::Delivered as i32);
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.completed"
    );
    first.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_service_on_the_same_postgres_database_is_refused_and_the_first_goes_on() {
    a_second_service_on_the_same_database_is_refused_and_the_first_goes_on(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_service_on_the_same_sqlite_file_is_refused_and_the_first_goes_on() {
    a_second_service_on_the_same_database_is_refused_and_the_first_goes_on(Backend::Sqlite).await;
}
