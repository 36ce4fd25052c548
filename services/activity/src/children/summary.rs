//! A child's activity summary: the tail of its text, reasoning, tool and plan events.

use super::delegation::shown;
use crate::bounds::*;
use crate::event::*;

/// A child's activity as short lines — its text, reasoning, tool and plan events —
/// keeping the tail within [`MAX_ACTIVITY_SUMMARY_CHARS`].
#[derive(Debug, Default)]
pub(super) struct SummaryTail {
    text: String,
    chars: usize,
    /// The head was dropped (the buffer keeps up to twice the bound between trims).
    dropped: bool,
    tool_calls: u32,
    tools_failed: u32,
}

impl SummaryTail {
    pub(super) fn observe(&mut self, event: &ActivityPayload) {
        match event {
            ActivityPayload::ItemStarted(item) => {
                self.new_line();
                if item.kind == ItemKind::Reasoning {
                    self.push("(reasoning) ");
                }
            }
            ActivityPayload::ItemDelta(delta) => self.push(&delta.text),
            ActivityPayload::ToolStarted(tool) => {
                self.tool_calls += 1;
                self.line(&format!("[tool] {}", tool_label(tool)));
            }
            ActivityPayload::ToolCompleted(tool) => {
                let status = match tool.status {
                    ToolStatus::Failed => {
                        self.tools_failed += 1;
                        "failed"
                    }
                    ToolStatus::Completed => "completed",
                    ToolStatus::Cancelled => "cancelled",
                    ToolStatus::Interrupted => "interrupted",
                    ToolStatus::Running => "running",
                };
                self.line(&format!("[tool] {}: {status}", tool_label(tool)));
            }
            ActivityPayload::PlanUpdated(plan) => {
                let done = plan.steps.iter().filter(|s| s.status == StepStatus::Completed).count();
                self.line(&format!("[plan] {done}/{} steps completed", plan.steps.len()));
            }
            _ => {}
        }
    }

    pub(super) fn new_line(&mut self) {
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.push("\n");
        }
    }

    pub(super) fn line(&mut self, line: &str) {
        self.new_line();
        self.push(line);
        self.push("\n");
    }

    pub(super) fn push(&mut self, text: &str) {
        self.text.push_str(text);
        self.chars += text.chars().count();
        if self.chars > 2 * MAX_ACTIVITY_SUMMARY_CHARS {
            let cut = self.chars - MAX_ACTIVITY_SUMMARY_CHARS;
            let at = self.text.char_indices().nth(cut).map_or(self.text.len(), |(i, _)| i);
            self.text.drain(..at);
            self.chars = MAX_ACTIVITY_SUMMARY_CHARS;
            self.dropped = true;
        }
    }

    pub(super) fn snapshot(&self) -> ActivitySummary {
        let (text, truncated) = if self.chars <= MAX_ACTIVITY_SUMMARY_CHARS && !self.dropped {
            (self.text.clone(), false)
        } else {
            let skip = self.chars - (MAX_ACTIVITY_SUMMARY_CHARS - 1).min(self.chars);
            let at = self.text.char_indices().nth(skip).map_or(self.text.len(), |(i, _)| i);
            (format!("…{}", &self.text[at..]), true)
        };
        ActivitySummary {
            text,
            truncated,
            tool_calls: self.tool_calls,
            tools_failed: self.tools_failed,
        }
    }
}

/// The tool's title (already display-safe), else its id made display-safe.
fn tool_label(tool: &ToolExecution) -> String {
    if tool.name.is_empty() {
        shown(&tool.tool_call_id)
    } else {
        tool.name.clone()
    }
}
