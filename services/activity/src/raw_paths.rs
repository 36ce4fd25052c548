//! Path-only strings in a tool's raw input and raw output, held to the same rule as its
//! locations: what is provably inside the workspace becomes workspace-relative, anything
//! else is replaced by [`OUTSIDE_WORKSPACE_MARKER`], and both are counted on the event
//! (`rawPathsRewritten`, `rawPathsOmitted`). Without this, `rawInput` would carry
//! verbatim the private paths that `locations` omits.
//!
//! A string counts as a path only when it is one *wholly*: a `file://` URI, or a single
//! line that is absolute (`/…`) or has a `..` component (which [`crate::paths`] never
//! places inside). That is lexical, so it errs towards privacy: `/compact` or
//! `/bin/ls -la` is taken for a path and, not being inside, replaced. Paths inside
//! longer text (a shell command, tool output) and in object keys pass as sent.

use std::path::Path;

use serde_json::Value;

use crate::bounds::{MAX_RAW_VALUE_DEPTH, MAX_RAW_VALUE_NODES};
use crate::paths::{file_uri_path, workspace_relative};

/// What replaces a path-only string that is not provably inside the workspace (the
/// counterpart of `[redacted:NAME]`): it says a path was there, never which.
pub const OUTSIDE_WORKSPACE_MARKER: &str = "[outside-workspace]";

/// Path-only strings changed in one raw value.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathRewrites {
    /// Made workspace-relative.
    pub rewritten: u32,
    /// Replaced by [`OUTSIDE_WORKSPACE_MARKER`].
    pub omitted: u32,
}

impl PathRewrites {
    /// Rewrites `text` in place when it is wholly a path.
    pub fn apply(&mut self, text: &mut String, workspace: Option<&Path>) {
        if !wholly_a_path(text) {
            return;
        }
        let relative = if text.starts_with("file://") {
            file_uri_path(text).and_then(|path| workspace_relative(workspace, &path))
        } else {
            workspace_relative(workspace, text)
        };
        match relative {
            Some(relative) => {
                *text = relative;
                self.rewritten += 1;
            }
            None => {
                *text = OUTSIDE_WORKSPACE_MARKER.to_owned();
                self.omitted += 1;
            }
        }
    }
}

/// The walk met more than [`MAX_RAW_VALUE_DEPTH`] nested containers or more than
/// [`MAX_RAW_VALUE_NODES`] values: what it did not reach cannot be vouched for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BeyondWalk;

/// Rewrites every path-only string value of `value` in place. On `Err` the value is
/// partly rewritten and must be dropped.
pub(crate) fn rewrite_paths(value: &mut Value, workspace: Option<&Path>) -> Result<PathRewrites, BeyondWalk> {
    let mut walk = Walk {
        workspace,
        nodes: 0,
        rewrites: PathRewrites::default(),
    };
    walk.visit(value, 0)?;
    Ok(walk.rewrites)
}

struct Walk<'a> {
    workspace: Option<&'a Path>,
    nodes: usize,
    rewrites: PathRewrites,
}

impl Walk<'_> {
    /// `depth`: the containers around `value`.
    fn visit(&mut self, value: &mut Value, depth: usize) -> Result<(), BeyondWalk> {
        self.nodes += 1;
        if self.nodes > MAX_RAW_VALUE_NODES {
            return Err(BeyondWalk);
        }
        match value {
            Value::String(text) => self.rewrites.apply(text, self.workspace),
            Value::Array(items) => self.visit_all(items.iter_mut(), depth)?,
            Value::Object(map) => self.visit_all(map.values_mut(), depth)?,
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
        Ok(())
    }

    /// The values of a container that has `depth` containers around it.
    fn visit_all<'v>(&mut self, values: impl Iterator<Item = &'v mut Value>, depth: usize) -> Result<(), BeyondWalk> {
        if depth >= MAX_RAW_VALUE_DEPTH {
            return Err(BeyondWalk);
        }
        for value in values {
            self.visit(value, depth + 1)?;
        }
        Ok(())
    }
}

/// A `file://` URI, or one line that is absolute or has a `..` component.
fn wholly_a_path(text: &str) -> bool {
    if text.starts_with("file://") {
        return true;
    }
    (text.starts_with('/') || text.split('/').any(|part| part == "..")) && !text.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_events::{last_tool, notices};
    use crate::{ActivityPayload, MAX_RAW_INPUT_BYTES, TurnNormalizer};
    use serde_json::json;

    const WORKSPACE: &str = "/work/repo";

    fn rewritten(text: &str, workspace: Option<&str>) -> (String, PathRewrites) {
        let mut text = text.to_owned();
        let mut rewrites = PathRewrites::default();
        rewrites.apply(&mut text, workspace.map(Path::new));
        (text, rewrites)
    }

    const REWRITTEN: PathRewrites = PathRewrites {
        rewritten: 1,
        omitted: 0,
    };
    const OMITTED: PathRewrites = PathRewrites {
        rewritten: 0,
        omitted: 1,
    };

    #[test]
    fn a_path_inside_the_workspace_becomes_workspace_relative() {
        for (raw, relative) in [
            ("/work/repo/src/main.rs", "src/main.rs"),
            ("/work/repo", "."),
            ("file:///work/repo/a%20b.rs", "a b.rs"),
            ("file://localhost/work/repo/x", "x"),
        ] {
            assert_eq!(
                rewritten(raw, Some(WORKSPACE)),
                (relative.to_owned(), REWRITTEN),
                "{raw}"
            );
        }
    }

    #[test]
    fn a_path_not_provably_inside_the_workspace_becomes_the_marker() {
        for raw in [
            "/home/agent/.cursor/cli-config.json",
            "/work/repo2/secret",
            "/work/repo/../other/x",
            "/bin/ls -la",
            "..",
            "../outside.txt",
            "./src/../../x",
            "src/../lib.rs",
            "file:///etc/passwd",
            "file://evil.example/work/repo/x",
            "file:///work/repo/%zz",
            "file:///work/repo/a%0Ab",
        ] {
            assert_eq!(
                rewritten(raw, Some(WORKSPACE)),
                (OUTSIDE_WORKSPACE_MARKER.to_owned(), OMITTED),
                "{raw}"
            );
        }
    }

    #[test]
    fn a_string_that_is_not_wholly_a_path_passes_as_sent() {
        for raw in [
            "cat /etc/passwd",
            "src/lib.rs",
            "~/.ssh/id_rsa",
            "/etc/passwd\nroot:x:0:0",
            "https://example.com/a",
            "..foo",
            "wait.. what",
            "",
        ] {
            assert_eq!(
                rewritten(raw, Some(WORKSPACE)),
                (raw.to_owned(), PathRewrites::default()),
                "{raw}"
            );
        }
    }

    #[test]
    fn without_a_workspace_every_absolute_path_becomes_the_marker() {
        assert_eq!(
            rewritten("/work/repo/a.rs", None),
            (OUTSIDE_WORKSPACE_MARKER.to_owned(), OMITTED)
        );
    }

    #[test]
    fn the_walk_rewrites_string_values_at_any_depth_and_leaves_keys_and_other_values() {
        let mut value = json!({
            "path": "/work/repo/a.rs",
            "/home/agent/key": [1, true, null, {"paths": ["/tmp/x", "b.rs"]}],
        });
        let rewrites = rewrite_paths(&mut value, Some(Path::new(WORKSPACE)));
        assert_eq!(
            value,
            json!({
                "path": "a.rs",
                "/home/agent/key": [1, true, null, {"paths": [OUTSIDE_WORKSPACE_MARKER, "b.rs"]}],
            })
        );
        assert_eq!(
            rewrites,
            Ok(PathRewrites {
                rewritten: 1,
                omitted: 1
            })
        );
    }

    /// `containers` arrays nested around one path.
    fn nested(containers: usize) -> Value {
        (0..containers).fold(json!("/tmp/x"), |inner, _| json!([inner]))
    }

    #[test]
    fn a_value_nested_to_the_depth_bound_is_walked_and_one_level_deeper_is_refused() {
        let mut at = nested(MAX_RAW_VALUE_DEPTH);
        assert_eq!(rewrite_paths(&mut at, None), Ok(OMITTED));
        let mut over = nested(MAX_RAW_VALUE_DEPTH + 1);
        assert_eq!(rewrite_paths(&mut over, None), Err(BeyondWalk));
    }

    #[test]
    fn a_value_of_exactly_the_node_bound_is_walked_and_one_node_more_is_refused() {
        // The array itself is one node.
        let mut at = json!(vec![0; MAX_RAW_VALUE_NODES - 1]);
        assert_eq!(rewrite_paths(&mut at, None), Ok(PathRewrites::default()));
        let mut over = json!(vec![0; MAX_RAW_VALUE_NODES]);
        assert_eq!(rewrite_paths(&mut over, None), Err(BeyondWalk));
    }

    #[test]
    fn the_node_bound_refuses_only_what_the_byte_bound_drops_anyway() {
        // The densest JSON there is: one byte and one separator per value.
        let densest_kept = json!(vec![0; MAX_RAW_VALUE_NODES - 1]);
        assert!(densest_kept.to_string().len() <= MAX_RAW_INPUT_BYTES);
        let densest_refused = json!(vec![0; MAX_RAW_VALUE_NODES]);
        assert!(densest_refused.to_string().len() > MAX_RAW_INPUT_BYTES);
    }

    fn tool_call_with_input(raw_input: Value) -> Vec<ActivityPayload> {
        let mut n = TurnNormalizer::new("t1").with_workspace(WORKSPACE);
        n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"Read","rawInput":raw_input}))
    }

    #[test]
    fn an_absolute_path_outside_the_workspace_in_raw_input_is_replaced_by_the_marker() {
        let events = tool_call_with_input(json!({"path":"/home/agent/.cursor/cli-config.json"}));
        let tool = last_tool(&events);
        assert_eq!(tool.raw_input, Some(json!({"path": OUTSIDE_WORKSPACE_MARKER})));
        assert_eq!((tool.raw_paths_rewritten, tool.raw_paths_omitted), (0, 1));
    }

    #[test]
    fn a_path_inside_the_workspace_in_raw_input_becomes_relative_and_is_counted() {
        let events = tool_call_with_input(json!({"path":"/work/repo/src/lib.rs","limit":10}));
        let tool = last_tool(&events);
        assert_eq!(tool.raw_input, Some(json!({"path":"src/lib.rs","limit":10})));
        assert_eq!((tool.raw_paths_rewritten, tool.raw_paths_omitted), (1, 0));
        assert!(notices(&events).is_empty());
    }

    #[test]
    fn a_raw_input_path_outside_the_workspace_is_warned_about_like_a_location() {
        let events = tool_call_with_input(json!({"path":"/home/agent/secret"}));
        let warned = notices(&events);
        assert_eq!(warned.len(), 1);
        assert_eq!(warned[0].category, "tool_path_outside_workspace");
        assert!(warned[0].summary.contains("1 path(s)"), "{}", warned[0].summary);
    }

    #[test]
    fn raw_input_past_the_walk_bounds_is_dropped_and_flagged() {
        let events = tool_call_with_input(nested(MAX_RAW_VALUE_DEPTH + 1));
        let tool = last_tool(&events);
        assert_eq!(tool.raw_input, None);
        assert!(tool.raw_input_truncated);
    }

    #[test]
    fn raw_input_the_marker_pushes_over_its_byte_bound_is_dropped_and_flagged() {
        let wrapper = json!({"path": "/a", "pad": ""}).to_string().len();
        let padded = json!({"path": "/a", "pad": "x".repeat(MAX_RAW_INPUT_BYTES - wrapper)});
        assert_eq!(padded.to_string().len(), MAX_RAW_INPUT_BYTES, "fits as sent");
        let tool = last_tool(&tool_call_with_input(padded)).clone();
        assert_eq!(tool.raw_input, None);
        assert!(tool.raw_input_truncated);
        assert_eq!(tool.raw_paths_omitted, 0, "nothing dropped is counted");
    }

    #[test]
    fn a_path_only_raw_output_text_is_rewritten_and_counted() {
        let mut n = TurnNormalizer::new("t1").with_workspace(WORKSPACE);
        let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"pwd",
            "status":"completed","rawOutput":{"stdout":"/home/agent","stderr":"/work/repo/x"}}));
        let tool = last_tool(&events);
        let output = tool.output.as_ref().expect("output");
        assert_eq!(output.output, format!("{OUTSIDE_WORKSPACE_MARKER}x"));
        assert_eq!((tool.raw_paths_rewritten, tool.raw_paths_omitted), (1, 1));
    }

    #[test]
    fn a_child_agents_raw_input_paths_are_rewritten_too() {
        let mut n = TurnNormalizer::new("t1")
            .with_workspace(WORKSPACE)
            .with_root_session("root");
        n.on_session_update(&json!({"sessionId":"root","update":{"sessionUpdate":"subagent_spawned",
            "subagentSessionId":"c1","name":"Explore","task":"look","capabilities":{},
            "_meta":{"cursor":{"toolCallId":"task-1","agentId":"ag-1"}}}}));
        let events = n.on_session_update(&json!({"sessionId":"c1","update":{"sessionUpdate":"tool_call",
            "toolCallId":"b","title":"Read","rawInput":{"path":"/home/agent/secret","file":"/work/repo/a.rs"}}}));
        let tool = last_tool(&events);
        assert_eq!(tool.child_id.as_deref(), Some("c1"));
        assert_eq!(
            tool.raw_input,
            Some(json!({"path": OUTSIDE_WORKSPACE_MARKER, "file": "a.rs"}))
        );
        assert_eq!((tool.raw_paths_rewritten, tool.raw_paths_omitted), (1, 1));
    }
}
