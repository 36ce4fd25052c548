//! `cursor/ask_question`: the persisted request with opaque UI ids, and validation of
//! an answer against it.

use std::collections::HashSet;

use cursor_runner_acp::cursor::{AskQuestionOutcome, AskQuestionParams, NativeAnswer};
use serde::{Deserialize, Serialize};

use super::answer::InteractionAnswer;
use super::bounds::{RequestRefused, check_chars, durable_json};
use crate::error::{EngineError, Reason};
use cursor_runner_activity::InteractionKind;

/// Questions in one request (PRP question sets).
pub const MAX_QUESTIONS: usize = 64;
/// Options in one question (PRP question sets).
pub const MAX_OPTIONS: usize = 128;

/// The request as persisted and shown to the control plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuestionRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    pub questions: Vec<Question>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    /// Opaque UI id (`question-N`).
    pub question_id: String,
    pub native_id: String,
    pub prompt: String,
    pub allow_multiple: bool,
    pub options: Vec<QuestionOption>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuestionOption {
    /// Opaque UI id (`option-N`), unique within its question.
    pub option_id: String,
    pub native_id: String,
    pub label: String,
}

impl QuestionRequest {
    pub fn from_native(params: AskQuestionParams) -> Result<Self, RequestRefused> {
        if params.questions.is_empty() {
            return Err(RequestRefused("a question request without questions".into()));
        }
        if params.questions.len() > MAX_QUESTIONS {
            return Err(RequestRefused(format!("more than {MAX_QUESTIONS} questions")));
        }
        check_chars("title", params.title.as_deref().unwrap_or(""))?;
        let mut native_question_ids = HashSet::new();
        let mut questions = Vec::with_capacity(params.questions.len());
        for (qi, q) in params.questions.into_iter().enumerate() {
            if !native_question_ids.insert(q.id.clone()) {
                return Err(RequestRefused(format!("duplicate question id `{}`", q.id)));
            }
            if q.options.is_empty() || q.options.len() > MAX_OPTIONS {
                return Err(RequestRefused(format!(
                    "question `{}` needs 1..={MAX_OPTIONS} options",
                    q.id
                )));
            }
            check_chars("prompt", &q.prompt)?;
            let mut native_option_ids = HashSet::new();
            let mut options = Vec::with_capacity(q.options.len());
            for (oi, o) in q.options.into_iter().enumerate() {
                if !native_option_ids.insert(o.id.clone()) {
                    return Err(RequestRefused(format!("duplicate option id `{}` in `{}`", o.id, q.id)));
                }
                check_chars("label", &o.label)?;
                options.push(QuestionOption {
                    option_id: format!("option-{}", oi + 1),
                    native_id: o.id,
                    label: o.label,
                });
            }
            questions.push(Question {
                question_id: format!("question-{}", qi + 1),
                native_id: q.id,
                prompt: q.prompt,
                allow_multiple: q.allow_multiple,
                options,
            });
        }
        let request = Self {
            title: params.title,
            tool_call_id: params.tool_call_id,
            questions,
        };
        durable_json(InteractionKind::Question, &request)?;
        Ok(request)
    }

    /// Validates an answer and returns the native outcome to send to the agent.
    pub fn outcome_for(&self, answer: &InteractionAnswer) -> Result<AskQuestionOutcome, EngineError> {
        let selections = match answer {
            InteractionAnswer::Cancel => return Ok(AskQuestionOutcome::Cancelled),
            InteractionAnswer::Decline { reason } => {
                return Ok(AskQuestionOutcome::Skipped { reason: reason.clone() });
            }
            InteractionAnswer::Questions(selections) => selections,
            _ => {
                return Err(EngineError::invalid(
                    Reason::AnswerInvalid,
                    "a question takes selections, a decline or a cancel",
                ));
            }
        };
        let invalid = |m: String| EngineError::invalid(Reason::AnswerInvalid, m);
        let mut answered = HashSet::new();
        for selection in selections {
            if !self.questions.iter().any(|q| q.question_id == selection.question_id) {
                return Err(invalid(format!("unknown question `{}`", selection.question_id)));
            }
            if !answered.insert(selection.question_id.as_str()) {
                return Err(invalid(format!("question `{}` answered twice", selection.question_id)));
            }
        }
        let mut answers = Vec::with_capacity(self.questions.len());
        for question in &self.questions {
            let selection = selections
                .iter()
                .find(|s| s.question_id == question.question_id)
                .ok_or_else(|| invalid(format!("question `{}` is not answered", question.question_id)))?;
            if selection.option_ids.is_empty() {
                return Err(invalid(format!("question `{}` has no selection", question.question_id)));
            }
            if !question.allow_multiple && selection.option_ids.len() > 1 {
                return Err(invalid(format!(
                    "question `{}` allows one selection",
                    question.question_id
                )));
            }
            let mut seen = HashSet::new();
            let mut native = Vec::with_capacity(selection.option_ids.len());
            for option_id in &selection.option_ids {
                if !seen.insert(option_id.as_str()) {
                    return Err(invalid(format!("option `{option_id}` selected twice")));
                }
                let option = question
                    .options
                    .iter()
                    .find(|o| &o.option_id == option_id)
                    .ok_or_else(|| invalid(format!("`{option_id}` is not an option of `{}`", question.question_id)))?;
                native.push(option.native_id.clone());
            }
            answers.push(NativeAnswer {
                question_id: question.native_id.clone(),
                selected_option_ids: native,
            });
        }
        Ok(AskQuestionOutcome::Answered { answers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interaction::{MAX_DESCRIPTION_CHARS, MAX_DURABLE_PAYLOAD_BYTES, PersistedRequest, Selection};
    use serde_json::json;

    fn request() -> QuestionRequest {
        QuestionRequest::from_native(
            serde_json::from_value(json!({
                "toolCallId":"tq","questions":[
                    {"id":"db","prompt":"Which?","options":[{"id":"pg","label":"PG"},{"id":"sq","label":"SQ"}]},
                    {"id":"langs","prompt":"Which?","allowMultiple":true,"options":[{"id":"rs","label":"Rust"},{"id":"go","label":"Go"}]}
                ]})).unwrap(),
        )
        .unwrap()
    }

    fn sel(q: &str, o: &[&str]) -> Selection {
        Selection {
            question_id: q.into(),
            option_ids: o.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn ui_ids_are_opaque_and_round_trip_to_native_ids() {
        let r = request();
        assert_eq!(r.questions[0].question_id, "question-1");
        assert_eq!(r.questions[1].options[1].option_id, "option-2");
        let outcome = r
            .outcome_for(&InteractionAnswer::Questions(vec![
                sel("question-1", &["option-1"]),
                sel("question-2", &["option-2", "option-1"]),
            ]))
            .unwrap();
        assert_eq!(
            outcome.to_result(),
            json!({"outcome":{"outcome":"answered","answers":[
                {"questionId":"db","selectedOptionIds":["pg"]},
                {"questionId":"langs","selectedOptionIds":["go","rs"]}]}})
        );
    }

    #[test]
    fn invalid_answers_are_refused() {
        let r = request();
        let cases = vec![
            vec![sel("question-1", &["option-1"])],
            vec![sel("question-1", &["pg"]), sel("question-2", &["option-1"])],
            vec![
                sel("question-1", &["option-1", "option-2"]),
                sel("question-2", &["option-1"]),
            ],
            vec![
                sel("question-1", &["option-1"]),
                sel("question-2", &["option-1", "option-1"]),
            ],
            vec![sel("question-1", &[]), sel("question-2", &["option-1"])],
            vec![
                sel("question-1", &["option-1"]),
                sel("question-1", &["option-1"]),
                sel("question-2", &["option-1"]),
            ],
            vec![
                sel("question-9", &["option-1"]),
                sel("question-1", &["option-1"]),
                sel("question-2", &["option-1"]),
            ],
        ];
        for answer in cases {
            let err = r
                .outcome_for(&InteractionAnswer::Questions(answer.clone()))
                .unwrap_err();
            assert_eq!(err.reason, Reason::AnswerInvalid, "{answer:?}");
        }
    }

    #[test]
    fn decline_is_skipped_and_cancel_is_cancelled() {
        let r = request();
        assert_eq!(
            r.outcome_for(&InteractionAnswer::Decline { reason: None }).unwrap(),
            AskQuestionOutcome::Skipped { reason: None }
        );
        assert_eq!(
            r.outcome_for(&InteractionAnswer::Cancel).unwrap(),
            AskQuestionOutcome::Cancelled
        );
    }

    fn one_question(prompt: String) -> AskQuestionParams {
        serde_json::from_value(json!({"questions":[{"id":"q","prompt":prompt,"options":[{"id":"a","label":"A"}]}]}))
            .unwrap()
    }

    #[test]
    fn a_description_exactly_at_the_bound_passes_and_one_char_over_is_refused() {
        assert!(QuestionRequest::from_native(one_question("é".repeat(MAX_DESCRIPTION_CHARS))).is_ok());
        assert!(QuestionRequest::from_native(one_question("é".repeat(MAX_DESCRIPTION_CHARS + 1))).is_err());
    }

    #[test]
    fn the_durable_payload_bound_is_exact() {
        // Spread over three questions so that no description reaches its own bound.
        const PER_QUESTION: usize = 70_000;
        let three = |extra: usize| -> AskQuestionParams {
            serde_json::from_value(json!({"questions":[
                {"id":"q","prompt":"a".repeat(PER_QUESTION),"options":[{"id":"a","label":"A"}]},
                {"id":"r","prompt":"b".repeat(PER_QUESTION),"options":[{"id":"a","label":"A"}]},
                {"id":"s","prompt":"c".repeat(extra),"options":[{"id":"a","label":"A"}]}
            ]}))
            .unwrap()
        };
        let durable = |r: QuestionRequest| PersistedRequest::Question(r).to_durable_json().unwrap().len();
        let base = durable(QuestionRequest::from_native(three(0)).unwrap());
        let room = MAX_DURABLE_PAYLOAD_BYTES - base;
        assert!(room < MAX_DESCRIPTION_CHARS);
        let at_bound = QuestionRequest::from_native(three(room)).unwrap();
        assert_eq!(durable(at_bound), MAX_DURABLE_PAYLOAD_BYTES);
        assert!(QuestionRequest::from_native(three(room + 1)).is_err());
    }

    #[test]
    fn duplicate_native_ids_are_refused() {
        let p: AskQuestionParams = serde_json::from_value(json!({"questions":[
            {"id":"q","prompt":"?","options":[{"id":"a","label":"A"},{"id":"a","label":"B"}]}]}))
        .unwrap();
        assert!(QuestionRequest::from_native(p).is_err());
    }
}
