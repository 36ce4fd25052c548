//! Attempt attribution: every turn is one attempt (a prompt is never retried on its own)
//! and records the credential's name, the configuration in effect and the usage the
//! agent reported. Cursor reports none, so its turns say `unavailable`; a sum over an
//! execution keeps unknown unknown — it is never a sum of zeros.

use cursor_runner_activity::{ReportedCost, UsageReported};
use cursor_runner_store::TurnRecord;

/// What a turn records as its usage: the agent's report, only if it sent one.
pub fn usage_column(reported: Option<&UsageReported>) -> Option<UsageReported> {
    reported.filter(|u| u.usage_source.is_some()).cloned()
}

/// An execution's usage over all its turns.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageTotal {
    pub turns: u64,
    pub turns_without_usage: u64,
    /// The summed cost, only when every turn reported one in a single currency.
    pub cost: Option<ReportedCost>,
}

impl UsageTotal {
    pub fn of<'a>(turns: impl IntoIterator<Item = &'a TurnRecord>) -> Self {
        let mut total = Self {
            turns: 0,
            turns_without_usage: 0,
            cost: None,
        };
        let mut cost: Option<Option<ReportedCost>> = None;
        for turn in turns {
            total.turns += 1;
            let usage = turn.usage.as_ref();
            if usage.is_none() {
                total.turns_without_usage += 1;
            }
            let this = usage.and_then(|u| u.cost.clone());
            cost = Some(match (cost, this) {
                (None, this) => this,
                (Some(Some(sum)), Some(this)) if sum.currency == this.currency => Some(ReportedCost {
                    amount: sum.amount + this.amount,
                    currency: sum.currency,
                }),
                // One unknown (or another currency) makes the sum unknown.
                _ => None,
            })
            // So does a sum past what a float holds: an infinite total is no cost.
            .map(|sum| sum.filter(|sum| sum.amount.is_finite()));
        }
        total.cost = cost.flatten();
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cursor_runner_domain::state::TurnState;

    fn turn(usage: Option<(&str, Option<(f64, &str)>)>) -> TurnRecord {
        let report = usage.map(|(source, cost)| UsageReported {
            turn_id: "t".into(),
            request_count_source: "unavailable".into(),
            provider_cost_status: if cost.is_some() { "reported" } else { "unpriced" }.into(),
            provider_cost_unavailable_reason: None,
            usage_source: Some(source.into()),
            used: Some(10),
            size: Some(100),
            cost: cost.map(|(amount, currency)| ReportedCost {
                amount,
                currency: currency.into(),
            }),
        });
        TurnRecord {
            id: "t".into(),
            execution_id: "e".into(),
            tenant_id: "a".into(),
            generation: cursor_runner_store::Generation::FIRST,
            turn_number: 1,
            state: TurnState::Completed,
            stop_reason: None,
            failure_reason: None,
            failure_message: None,
            started_at_ms: 0,
            ended_at_ms: Some(1),
            credential_name: None,
            session_config: None,
            usage: usage_column(report.as_ref()),
        }
    }

    #[test]
    fn a_sum_past_what_a_float_holds_is_unknown_not_infinite() {
        let huge = || turn(Some(("agent", Some((1.5e308, "USD")))));
        assert_eq!(UsageTotal::of(&[huge(), huge()]).cost, None);
        assert!(
            UsageTotal::of(&[huge()]).cost.is_some(),
            "one such turn is still its own cost"
        );
    }

    #[test]
    fn unknown_usage_stays_unknown_in_the_sum() {
        let reported = |amount| turn(Some(("acp_usage_update", Some((amount, "USD")))));
        let unpriced = turn(Some(("acp_usage_update", None)));
        let cursor = turn(None);
        let cases: Vec<(Vec<TurnRecord>, u64, Option<f64>)> = vec![
            (vec![], 0, None),
            (vec![cursor.clone(), cursor.clone()], 2, None),
            (vec![reported(0.5), reported(0.25)], 0, Some(0.75)),
            (vec![reported(0.5), cursor.clone()], 1, None),
            (vec![reported(0.5), unpriced.clone()], 0, None),
            (
                vec![reported(0.5), turn(Some(("acp_usage_update", Some((1.0, "EUR")))))],
                0,
                None,
            ),
        ];
        for (turns, without, cost) in cases {
            let total = UsageTotal::of(&turns);
            assert_eq!(total.turns, turns.len() as u64);
            assert_eq!(total.turns_without_usage, without);
            assert_eq!(total.cost.map(|c| c.amount), cost, "{turns:?}");
        }
    }

    #[test]
    fn only_a_report_the_agent_sent_is_recorded() {
        let nothing_sent = UsageReported {
            turn_id: "t".into(),
            request_count_source: "unavailable".into(),
            provider_cost_status: "unpriced".into(),
            provider_cost_unavailable_reason: Some("the agent reports no usage".into()),
            usage_source: None,
            used: None,
            size: None,
            cost: None,
        };
        assert_eq!(usage_column(Some(&nothing_sent)), None);
        assert_eq!(usage_column(None), None);
    }
}
