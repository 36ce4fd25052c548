//! The drain machine, table-style: every state × input with its effect.

use std::time::Duration;

use tokio::time::Instant;

use super::drain::*;

fn at(base: Instant, secs: u64) -> Instant {
    base + Duration::from_secs(secs)
}

/// The three states a drain is in: none, before its deadline, past it.
fn states(base: Instant) -> [(&'static str, Drain); 3] {
    let mut before = Drain::default();
    before.handle(DrainInput::Asked {
        deadline: at(base, 30),
        force: false,
    });
    let mut past = before.clone();
    past.handle(DrainInput::DeadlinePassed { turn_running: true });
    [("idle", Drain::default()), ("before", before), ("past", past)]
}

#[test]
fn every_state_answers_every_input_as_the_table_says() {
    let base = Instant::now();
    use DrainEffect::*;
    let inputs = [
        (
            "asked",
            DrainInput::Asked {
                deadline: at(base, 60),
                force: false,
            },
        ),
        (
            "forced",
            DrainInput::Asked {
                deadline: at(base, 60),
                force: true,
            },
        ),
        (
            "deadline, turn running",
            DrainInput::DeadlinePassed { turn_running: true },
        ),
        ("deadline, no turn", DrainInput::DeadlinePassed { turn_running: false }),
        (
            "step, turn live",
            DrainInput::Stepped {
                turn_live: true,
                start_queued: false,
            },
        ),
        (
            "step, start queued",
            DrainInput::Stepped {
                turn_live: false,
                start_queued: true,
            },
        ),
        (
            "step, nothing live",
            DrainInput::Stepped {
                turn_live: false,
                start_queued: false,
            },
        ),
    ];
    // (state, input) → (effect, draining after, deadline armed after)
    let expected = |state: &str, input: &str| -> (Option<DrainEffect>, bool, Option<Instant>) {
        match (state, input) {
            ("idle", "asked") => (None, true, Some(at(base, 60))),
            ("idle", "forced") => (Some(End), true, Some(at(base, 60))),
            ("idle", _) => (None, false, None),
            ("before", "asked") => (None, true, Some(at(base, 30))),
            ("before", "forced") => (Some(End), true, Some(at(base, 30))),
            ("before", "deadline, turn running") => (Some(CancelTurn), true, None),
            ("before", "deadline, no turn") => (None, true, None),
            ("before", "step, nothing live") => (Some(End), true, Some(at(base, 30))),
            ("before", _) => (None, true, Some(at(base, 30))),
            ("past", "forced") => (Some(End), true, None),
            ("past", "step, nothing live") => (Some(End), true, None),
            ("past", _) => (None, true, None),
            other => unreachable!("{other:?}"),
        }
    };
    for (state, drain) in states(base) {
        for (input_name, input) in inputs {
            let mut drain = drain.clone();
            let effect = drain.handle(input);
            let got = (effect, drain.is_draining(), drain.deadline());
            assert_eq!(got, expected(state, input_name), "{state} × {input_name}");
        }
    }
}

#[test]
fn a_second_drain_only_brings_the_deadline_forward() {
    let base = Instant::now();
    let mut drain = Drain::default();
    for (deadline, armed) in [(30, 30), (60, 30), (10, 10)] {
        drain.handle(DrainInput::Asked {
            deadline: at(base, deadline),
            force: false,
        });
        assert_eq!(drain.deadline(), Some(at(base, armed)));
    }
}
