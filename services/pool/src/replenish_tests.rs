use std::time::Duration;

use cursor_runner_domain::error::Reason;
use cursor_runner_domain::state::{ProfileHealth, SlotState};
use tokio::time::Instant;

use crate::intensity::BACKOFF_BASE;
use crate::test_support::{Book, config};

use SlotState::{Draining, Idle, Leased, Warming};

#[test]
fn warm_ups_bring_each_profile_up_to_its_idle_minimum_within_capacity() {
    // (the profile's idle minimum, its slots, another profile's slots, warm-ups planned):
    // at most two per profile and three on the node.
    let cases: [(usize, &[SlotState], &[SlotState], usize); 9] = [
        (0, &[], &[], 0),
        (1, &[], &[], 1),
        (2, &[], &[], 2),
        (2, &[Idle], &[], 1),
        (2, &[Warming, Idle], &[], 0),
        (2, &[Draining], &[], 2),
        (2, &[Leased], &[], 1),
        (2, &[], &[Leased, Leased], 1),
        (1, &[], &[Leased, Idle, Warming], 0),
    ];
    for (min_idle, mine, others, expected) in cases {
        let mut book = Book::new();
        let me = book.profile("acme", true, min_idle);
        let other = book.profile("globex", false, 0);
        for state in mine {
            book.slot(&me, *state);
        }
        for state in others {
            book.slot(&other, *state);
        }

        let (starts, backoff_ends) = book.state.plan_warmups(&config(), Instant::now());

        assert_eq!(
            starts.len(),
            expected,
            "min {min_idle}, mine {mine:?}, others {others:?}"
        );
        assert!(backoff_ends.is_none());
        for start in &starts {
            assert_eq!(start.profile_id, me);
            assert_eq!(book.state_of(&start.slot_id), Some(Warming));
        }
    }
}

#[test]
fn a_profile_backing_off_or_quarantined_gets_no_warm_up_and_the_earliest_backoff_end_is_returned() {
    let mut book = Book::new();
    let now = Instant::now();
    let later = book.profile("acme", true, 1);
    let sooner = book.profile("globex", true, 1);
    let quarantined = book.profile("initech", true, 1);
    book.state.profiles.get_mut(&later).unwrap().next_start_at = now + Duration::from_secs(5);
    book.state.profiles.get_mut(&sooner).unwrap().next_start_at = now + Duration::from_secs(2);
    for _ in 0..config().intensity.max_failures {
        book.state
            .record_failure(&quarantined, Reason::AgentExited, "exit 1", config().intensity, now);
    }

    let (starts, backoff_ends) = book.state.plan_warmups(&config(), now);

    assert!(starts.is_empty());
    assert_eq!(backoff_ends, Some(now + Duration::from_secs(2)));
}

#[test]
fn a_quarantine_whose_window_passed_is_lifted_and_its_profile_warmed_again() {
    let mut book = Book::new();
    let me = book.profile("acme", true, 1);
    let intensity = config().intensity;
    let t0 = Instant::now();
    for _ in 0..intensity.max_failures {
        book.state
            .record_failure(&me, Reason::AgentExited, "exit 1", intensity, t0);
    }

    let (starts, _) = book.state.plan_warmups(&config(), t0 + intensity.window);

    assert_eq!(starts.len(), 1);
    assert_eq!(book.state.profiles[&me].health, ProfileHealth::Healthy);
}

#[test]
fn a_learned_profile_unused_past_its_ttl_with_only_idle_slots_is_forgotten_with_them() {
    let ttl = Duration::from_secs(60);
    // (configured by the operator, seconds since its last lease, its slots, forgotten)
    let cases: [(bool, u64, &[SlotState], bool); 7] = [
        (false, 61, &[Idle], true),
        (false, 60, &[], true),
        (false, 59, &[Idle], false),
        (true, 600, &[Idle], false),
        (false, 61, &[Idle, Leased], false),
        (false, 61, &[Warming], false),
        (false, 61, &[Draining], false),
    ];
    for (configured, unused, slots, forgotten) in cases {
        let mut book = Book::new();
        let me = book.profile("acme", configured, 0);
        let ids: Vec<String> = slots.iter().map(|state| book.slot(&me, *state)).collect();
        let last_lease = book.state.profiles[&me].last_lease;

        let gone = book.state.forget_unused(ttl, last_lease + Duration::from_secs(unused));

        let case = format!("configured {configured}, unused {unused} s, {slots:?}");
        assert_eq!(gone == [me.clone()], forgotten, "{case}");
        assert_eq!(book.state.profiles.contains_key(&me), !forgotten, "{case}");
        if forgotten {
            assert!(ids.iter().all(|id| book.state_of(id) == Some(Draining)), "{case}");
        }
    }
}

#[test]
fn each_failed_background_start_in_a_row_doubles_the_wait_before_the_next() {
    let mut book = Book::new();
    let me = book.profile("acme", true, 1);
    let profile = book.state.profiles.get_mut(&me).unwrap();
    let now = Instant::now();
    let waits: Vec<Duration> = (0..3)
        .map(|_| {
            // The middle of the jitter range: no jitter.
            profile.start_failed(now, 0.5);
            profile.next_start_at - now
        })
        .collect();
    assert_eq!(waits, [BACKOFF_BASE, BACKOFF_BASE * 2, BACKOFF_BASE * 4]);
}
