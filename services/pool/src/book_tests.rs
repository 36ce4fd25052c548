use std::time::Duration;

use cursor_runner_domain::error::Reason;
use cursor_runner_domain::state::{ProfileHealth, SlotState};
use tokio::time::Instant;

use super::*;
use crate::intensity::RestartIntensity;
use crate::test_support::{Book, config};

use SlotState::{Draining, Idle, Leased, Stopped, Warming};

/// Three failures within ten seconds quarantine a profile.
const INTENSITY: RestartIntensity = RestartIntensity {
    max_failures: 3,
    window: Duration::from_secs(10),
};

/// What a lease decision was, in a word (and the reason of a refusal).
fn decided(plan: &Result<LeasePlan, EngineError>) -> String {
    match plan {
        Ok(LeasePlan::Handoff(_)) => "handoff".into(),
        Ok(LeasePlan::Start(_)) => "start".into(),
        Ok(LeasePlan::Wait) => "wait".into(),
        Err(e) => format!("refused {}", e.reason.as_str()),
    }
}

fn lease(book: &mut Book, tenant: &str, own_home: bool, now: Instant) -> Result<LeasePlan, EngineError> {
    let (key, id) = book.key(tenant);
    book.state
        .plan_lease(&key, &id, &LaunchAs::default(), own_home, &config(), now)
}

#[test]
fn capacity_counts_warming_idle_and_leased_slots_per_profile_and_on_the_node() {
    // (the caller's slots, another profile's slots, capacity for the caller): at most
    // two per profile and three on the node.
    let cases: [(&[SlotState], &[SlotState], bool); 8] = [
        (&[], &[], true),
        (&[Warming], &[], true),
        (&[Idle, Leased], &[], false),
        (&[Warming, Leased], &[], false),
        (&[Draining, Draining], &[], true),
        (&[Leased], &[Idle, Warming], false),
        (&[Leased], &[Idle, Draining], true),
        (&[], &[Leased, Leased], true),
    ];
    for (mine, others, expected) in cases {
        let mut book = Book::new();
        let me = book.profile("acme", false, 0);
        let other = book.profile("globex", false, 0);
        for state in mine {
            book.slot(&me, *state);
        }
        for state in others {
            book.slot(&other, *state);
        }
        assert_eq!(
            book.state.has_capacity(&me, &config()),
            expected,
            "mine {mine:?}, others {others:?}"
        );
    }
}

#[test]
fn a_full_node_evicts_the_oldest_idle_slot_of_another_profile_and_nothing_else() {
    /// Another profile's slot and its age in seconds.
    type Aged = (SlotState, u64);
    // (the caller's slots, another profile's slots, which of the other's is evicted)
    let cases: [(&[SlotState], &[Aged], Option<usize>); 6] = [
        (&[Leased], &[(Idle, 5), (Idle, 9)], Some(1)),
        (&[Leased], &[(Idle, 9), (Idle, 5)], Some(0)),
        (&[Leased], &[(Leased, 9), (Idle, 5)], Some(1)),
        (&[Leased], &[(Leased, 9), (Warming, 5)], None),
        (&[Idle], &[(Leased, 9), (Leased, 5)], None),
        (&[Idle, Leased], &[(Idle, 9)], None),
    ];
    for (mine, others, evicted) in cases {
        let mut book = Book::new();
        let me = book.profile("acme", false, 0);
        let other = book.profile("globex", false, 0);
        let mine: Vec<String> = mine.iter().map(|state| book.slot(&me, *state)).collect();
        let base = Instant::now();
        let theirs: Vec<String> = others
            .iter()
            .map(|(state, age)| {
                let id = book.slot(&other, *state);
                book.state.slots.get_mut(&id).unwrap().since = base + Duration::from_secs(100 - age);
                id
            })
            .collect();
        let before: Vec<_> = mine.iter().chain(&theirs).map(|id| book.state_of(id)).collect();

        assert_eq!(book.state.evict_for(&me, &config()), evicted.is_some(), "{others:?}");
        let after: Vec<_> = mine.iter().chain(&theirs).map(|id| book.state_of(id)).collect();
        let mut expected = before.clone();
        if let Some(i) = evicted {
            expected[mine.len() + i] = Some(Draining);
        }
        assert_eq!(after, expected, "{others:?}");
    }
}

#[test]
fn a_lease_takes_an_idle_slot_else_starts_one_within_capacity_else_waits_or_is_refused() {
    type Setup = fn(&mut Book, &str, &str);
    // (situation, setup given the caller's and another profile, the lease brings its
    // own home, decision)
    let cases: [(&str, Setup, bool, &str); 10] = [
        ("an empty pool", |_, _, _| {}, false, "start"),
        (
            "an idle slot of its own",
            |b, me, _| {
                b.slot(me, Idle);
            },
            false,
            "handoff",
        ),
        (
            "an idle slot of its own, but a recorded session's home",
            |b, me, _| {
                b.slot(me, Idle);
            },
            true,
            "start",
        ),
        (
            "an idle slot whose hand-off another lease took",
            |b, me, _| {
                let id = b.slot(me, Idle);
                b.state.slots.get_mut(&id).unwrap().handoff = None;
            },
            false,
            "start",
        ),
        (
            "only another profile's idle slot",
            |b, _, other| {
                b.slot(other, Idle);
            },
            false,
            "start",
        ),
        (
            "its own limit reached",
            |b, me, _| {
                b.slot(me, Leased);
                b.slot(me, Warming);
            },
            false,
            "wait",
        ),
        (
            "the node full, another profile's slot idle",
            |b, me, other| {
                b.slot(me, Leased);
                b.slot(other, Leased);
                b.slot(other, Idle);
            },
            false,
            "start",
        ),
        (
            "the node full, nothing idle",
            |b, me, other| {
                b.slot(me, Leased);
                b.slot(other, Leased);
                b.slot(other, Warming);
            },
            false,
            "wait",
        ),
        ("draining", |b, _, _| b.state.drain(), false, "refused DRAINING"),
        (
            "quarantined",
            |b, me, _| {
                for _ in 0..INTENSITY.max_failures {
                    b.state
                        .record_failure(me, Reason::AgentExited, "exit 3", INTENSITY, Instant::now());
                }
            },
            false,
            "refused PROFILE_QUARANTINED",
        ),
    ];
    for (situation, setup, own_home, expected) in cases {
        let mut book = Book::new();
        let me = book.profile("acme", false, 0);
        let other = book.profile("globex", false, 0);
        setup(&mut book, &me, &other);
        let slots_before = book.state.slots.len();

        let plan = lease(&mut book, "acme", own_home, Instant::now());

        assert_eq!(decided(&plan), expected, "{situation}");
        match plan {
            Ok(LeasePlan::Start(id)) => assert_eq!(book.state_of(&id), Some(Warming), "{situation}"),
            Ok(LeasePlan::Handoff(_)) => assert_eq!(book.state.slots.len(), slots_before, "{situation}"),
            Ok(LeasePlan::Wait) | Err(_) => {
                assert_eq!(book.state.slots.len(), slots_before, "{situation}: nothing reserved");
            }
        }
    }
}

#[test]
fn a_lease_takes_the_oldest_idle_slot_of_its_profile_and_leaves_the_rest_idle() {
    let mut book = Book::new();
    let me = book.profile("acme", false, 0);
    let oldest = book.slot(&me, Idle);
    let newer = book.slot(&me, Idle);
    book.seen.take();

    let plan = lease(&mut book, "acme", false, Instant::now());

    assert_eq!(decided(&plan), "handoff");
    assert_eq!(book.state_of(&oldest), Some(Leased));
    assert_eq!(book.state_of(&newer), Some(Idle));
    assert_eq!(book.state.profiles[&me].idle, [newer]);
    assert_eq!(book.seen.take(), ["learned idle->leased"]);
}

#[test]
fn a_lease_of_an_unknown_profile_learns_it_with_the_pools_idle_minimum() {
    let mut book = Book::new();
    let plan = lease(&mut book, "acme", false, Instant::now());
    assert_eq!(decided(&plan), "start");
    let (_, id) = book.key("acme");
    let profile = &book.state.profiles[&id];
    assert!(!profile.configured);
    assert_eq!(profile.min_idle, config().min_idle);
    assert_eq!(book.seen.take(), ["learned new->warming"]);
}

#[test]
fn a_process_goes_back_to_idle_only_within_its_session_budget_while_its_profile_is_healthy() {
    // (sessions a process may serve, sessions it served before this one, draining, its
    // profile's health (`None`: forgotten), taken back)
    let cases = [
        (2, 0, false, Some(ProfileHealth::Healthy), true),
        (2, 1, false, Some(ProfileHealth::Healthy), false),
        (1, 0, false, Some(ProfileHealth::Healthy), false),
        (3, 1, false, Some(ProfileHealth::Healthy), true),
        (2, 0, true, Some(ProfileHealth::Healthy), false),
        (2, 0, false, Some(ProfileHealth::Quarantined), false),
        (2, 0, false, None, false),
    ];
    for (sessions_per_process, served, draining, health, expected) in cases {
        let mut book = Book::new();
        let me = book.profile("acme", false, 0);
        match health {
            Some(health) => book.state.profiles.get_mut(&me).unwrap().health = health,
            None => {
                book.state.profiles.remove(&me);
            }
        }
        book.state.draining = draining;
        let config = PoolConfig {
            sessions_per_process,
            ..config()
        };
        assert_eq!(
            book.state.accepts_return(&me, served, &config),
            expected,
            "{sessions_per_process} per process, {served} served, draining {draining}, {health:?}"
        );
    }
}

#[test]
fn draining_stops_idle_slots_and_leaves_warming_and_leased_ones_to_finish() {
    let mut book = Book::new();
    let me = book.profile("acme", true, 1);
    let other = book.profile("globex", false, 0);
    let idle = [book.slot(&me, Idle), book.slot(&other, Idle)];
    let leased = book.slot(&me, Leased);
    let warming = book.slot(&other, Warming);

    book.state.drain();

    assert!(book.state.draining);
    for id in &idle {
        assert_eq!(book.state_of(id), Some(Draining));
    }
    assert_eq!(book.state_of(&leased), Some(Leased));
    assert_eq!(book.state_of(&warming), Some(Warming));
    assert!(book.state.profiles.values().all(|p| p.idle.is_empty()));
}

#[test]
fn the_failure_that_reaches_the_restart_intensity_quarantines_the_profile_and_stops_its_idle_slots() {
    let mut book = Book::new();
    let me = book.profile("acme", false, 0);
    let other = book.profile("globex", false, 0);
    let idle = book.slot(&me, Idle);
    let leased = book.slot(&me, Leased);
    let others_idle = book.slot(&other, Idle);
    book.seen.take();
    let t0 = Instant::now();

    let tripped: Vec<bool> = [(0, "exit 1"), (4, "exit 2"), (9, "exit 3")]
        .into_iter()
        .map(|(at, message)| {
            let at = t0 + Duration::from_secs(at);
            book.state
                .record_failure(&me, Reason::AgentExited, message, INTENSITY, at)
        })
        .collect();

    assert_eq!(tripped, [false, false, true]);
    let profile = &book.state.profiles[&me];
    assert_eq!(profile.health, ProfileHealth::Quarantined);
    let quarantine = profile.quarantine.as_ref().unwrap();
    assert_eq!(
        (quarantine.cause, quarantine.message.as_str(), quarantine.until),
        (
            Reason::AgentExited,
            "exit 3",
            t0 + Duration::from_secs(9) + INTENSITY.window
        )
    );
    assert_eq!(book.state_of(&idle), Some(Draining));
    assert_eq!(book.state_of(&leased), Some(Leased));
    assert_eq!(book.state_of(&others_idle), Some(Idle));
    assert_eq!(
        book.seen.take(),
        [
            "failed AGENT_EXITED",
            "failed AGENT_EXITED",
            "failed AGENT_EXITED",
            "quarantined",
            "learned idle->draining",
        ]
    );
}

#[test]
fn failures_spread_wider_than_the_window_never_quarantine() {
    let mut book = Book::new();
    let me = book.profile("acme", false, 0);
    let t0 = Instant::now();
    for second in [0, 6, 12, 18, 24] {
        let at = t0 + Duration::from_secs(second);
        assert!(
            !book
                .state
                .record_failure(&me, Reason::AgentUnresponsive, "no answer", INTENSITY, at)
        );
    }
    assert_eq!(book.state.profiles[&me].health, ProfileHealth::Healthy);
}

#[test]
fn only_the_agents_own_failures_count_against_the_restart_intensity() {
    let one_strike = RestartIntensity {
        max_failures: 1,
        window: Duration::from_secs(10),
    };
    let cases = [
        (Reason::AgentExited, true),
        (Reason::AgentUnresponsive, true),
        (Reason::AuthRequired, true),
        (Reason::ProtocolError, true),
        (Reason::AgentLaunchFailed, true),
        (Reason::Draining, false),
        (Reason::PoolExhausted, false),
        (Reason::WorkspacePolicy, false),
        (Reason::DistributionUnverified, false),
        (Reason::StoreUnavailable, false),
    ];
    for (reason, counts) in cases {
        let mut book = Book::new();
        let me = book.profile("acme", false, 0);
        let quarantined = book
            .state
            .record_failure(&me, reason, "why", one_strike, Instant::now());
        assert_eq!(quarantined, counts, "{reason:?}");
        assert_eq!(counts_as_failure(reason), counts, "{reason:?}");
        let reported = book.seen.take();
        assert_eq!(
            reported.contains(&format!("failed {}", reason.as_str())),
            counts,
            "{reason:?}"
        );
    }
}

#[test]
fn a_quarantined_profile_is_not_quarantined_again_by_more_failures() {
    let mut book = Book::new();
    let me = book.profile("acme", false, 0);
    let now = Instant::now();
    for _ in 0..INTENSITY.max_failures {
        book.state
            .record_failure(&me, Reason::AgentExited, "first", INTENSITY, now);
    }
    let until = book.state.profiles[&me].quarantine.as_ref().unwrap().until;
    book.seen.take();

    let again = book.state.record_failure(
        &me,
        Reason::ProtocolError,
        "later",
        INTENSITY,
        now + Duration::from_secs(1),
    );

    assert!(!again);
    let quarantine = book.state.profiles[&me].quarantine.as_ref().unwrap();
    assert_eq!((quarantine.cause, quarantine.until), (Reason::AgentExited, until));
    assert_eq!(book.seen.take(), ["failed PROTOCOL_ERROR"]);
}

#[test]
fn a_quarantine_refuses_leases_with_the_agents_reason_until_its_window_passes() {
    let mut book = Book::new();
    let me = book.profile("acme", false, 0);
    let t0 = Instant::now();
    for _ in 0..INTENSITY.max_failures {
        book.state
            .record_failure(&me, Reason::AuthRequired, "-32000", INTENSITY, t0);
    }

    let during = lease(&mut book, "acme", false, t0 + Duration::from_secs(4));
    let Err(refusal) = during else {
        panic!("leased while quarantined: {}", decided(&during));
    };
    assert_eq!(refusal.reason, Reason::ProfileQuarantined);
    assert!(refusal.metadata.contains(&("cause".into(), "AUTH_REQUIRED".into())));
    assert_eq!(refusal.retry_after, Some(Duration::from_secs(6)));

    let after = lease(&mut book, "acme", false, t0 + INTENSITY.window);
    assert_eq!(decided(&after), "start");
    let profile = book.state.profiles.get_mut(&me).unwrap();
    assert_eq!(profile.health, ProfileHealth::Healthy);
    assert!(profile.quarantine.is_none());
    assert_eq!(profile.failures.count(INTENSITY, t0), 0);
}

#[test]
fn every_slot_move_is_reported_with_where_its_profile_came_from() {
    let mut book = Book::new();
    let configured = book.profile("acme", true, 1);
    let learned = book.profile("globex", false, 0);
    let a = book.slot(&configured, Idle);
    let b = book.slot(&learned, Leased);
    book.state.transition(&a, Leased);
    book.state.transition(&b, Draining);
    book.state.transition(&b, Stopped);
    assert_eq!(
        book.seen.take(),
        [
            "configured new->warming",
            "configured warming->idle",
            "learned new->warming",
            "learned warming->leased",
            "configured idle->leased",
            "learned leased->draining",
            "learned draining->gone",
        ]
    );
    assert!(!book.state.slots.contains_key(&b), "a stopped slot leaves the book");
}

#[test]
fn the_warm_keys_published_are_those_of_healthy_profiles_holding_an_idle_slot_and_none_while_draining() {
    let mut book = Book::new();
    let idle = book.profile("acme", false, 0);
    book.slot(&idle, Idle);
    let busy = book.profile("globex", false, 0);
    book.slot(&busy, Leased);
    book.slot(&busy, Warming);
    let quarantined = book.profile("initech", false, 0);
    book.slot(&quarantined, Idle);
    book.state.profiles.get_mut(&quarantined).unwrap().health = ProfileHealth::Quarantined;

    let acme = book.key("acme").0.warm_key();
    assert_eq!(book.state.warm_keys(), vec![acme.clone()]);
    assert_eq!(acme, cursor_runner_domain::placement::WarmKey::of("acme", None, None));

    book.state.draining = true;
    assert!(
        book.state.warm_keys().is_empty(),
        "a draining replica takes nothing new"
    );
}
