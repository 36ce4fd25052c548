//! `/metrics` over plain HTTP on its own port, off unless `serve --metrics-listen` is
//! given. The format follows the scraper's `Accept`: OpenMetrics text when it names
//! `application/openmetrics-text` at least as high as anything else (Prometheus does),
//! otherwise the Prometheus text format 0.0.4 (`text/plain`, no `Accept`, `*/*`: curl,
//! older scrapers and `promtool check metrics`).

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use cursor_runner_executions::Metrics;
use tokio::net::TcpListener;

pub const CONTENT_TYPE_OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The two expositions `/metrics` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    /// The Prometheus text format, version 0.0.4.
    Text,
}

/// Serves `GET /metrics` on `listener` until `shutdown` resolves.
pub async fn serve(
    metrics: Arc<Metrics>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let metrics = metrics.clone();
            async move {
                let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok());
                match negotiate(accept) {
                    Format::OpenMetrics => ([(CONTENT_TYPE, CONTENT_TYPE_OPENMETRICS)], metrics.encode()),
                    Format::Text => ([(CONTENT_TYPE, CONTENT_TYPE_TEXT)], to_text_format(&metrics.encode())),
                }
                .into_response()
            }
        }),
    );
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

/// The format an `Accept` header prefers: OpenMetrics when its quality is positive and
/// not below that of `text/plain`, `text/*` or `*/*`; the text format otherwise.
pub fn negotiate(accept: Option<&str>) -> Format {
    let (mut openmetrics, mut text) = (0.0_f32, 0.0_f32);
    for range in accept.unwrap_or_default().split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let quality = parts
            .filter_map(|p| p.split_once('='))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, q)| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(quality),
            "text/plain" | "text/*" | "*/*" => text = text.max(quality),
            _ => {}
        }
    }
    if openmetrics > 0.0 && openmetrics >= text {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// Rewrites `prometheus-client`'s OpenMetrics exposition as the Prometheus text format
/// 0.0.4: a counter's `# HELP` / `# TYPE` name its samples' `_total` name, `unknown` is
/// `untyped`, and there is no `# UNIT`, `_created` sample, exemplar or `# EOF`.
pub fn to_text_format(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<(&str, &str)> = None;
    let mut counter = None::<&str>;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, kind) = match kind {
                "counter" => (format!("{family}_total"), "counter"),
                "gauge" | "histogram" | "summary" => (family.to_owned(), kind),
                _ => (family.to_owned(), "untyped"),
            };
            counter = (kind == "counter").then_some(family);
            if let Some((_, text)) = help.take().filter(|(named, _)| *named == family) {
                out.push_str(&format!("# HELP {name} {}\n", text.replace("\\\"", "\"")));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
        } else if line.starts_with('#') || line.is_empty() {
            // `# UNIT`, `# EOF`: not part of the text format.
        } else {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            if counter.is_some_and(|family| line[..name_end] == format!("{family}_created")) {
                continue;
            }
            // An exemplar follows ` # ` after the value: not in the text format.
            let value_start = labels_end(line, name_end);
            let sample = match line[value_start..].find(" # ") {
                Some(at) => &line[..value_start + at],
                None => line,
            };
            out.push_str(sample);
            out.push('\n');
        }
    }
    out
}

/// The index just past a sample's `{…}` label set starting at `at` (quoted values may
/// hold `}` or `#`), or `at` when it has none.
fn labels_end(line: &str, at: usize) -> usize {
    if !line[at..].starts_with('{') {
        return at;
    }
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in line[at..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return at + i + 1,
            _ => {}
        }
    }
    line.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_is_served_when_the_scraper_prefers_it() {
        let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(negotiate(Some("application/openmetrics-text")), Format::OpenMetrics);
    }

    #[test]
    fn the_text_format_is_served_for_text_plain_anything_or_no_accept() {
        assert_eq!(negotiate(None), Format::Text);
        assert_eq!(negotiate(Some("text/plain")), Format::Text);
        assert_eq!(negotiate(Some("text/plain;version=0.0.4")), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0.2, text/plain;q=0.9")),
            Format::Text
        );
        assert_eq!(negotiate(Some("application/openmetrics-text;q=0")), Format::Text);
    }

    #[test]
    fn the_text_format_names_counters_by_their_samples_and_has_no_eof() {
        let openmetrics = "# HELP a_turns Turns.\n# TYPE a_turns counter\na_turns_total 3\na_turns_created 1.5\n\
                           # HELP a_live Live.\n# TYPE a_live gauge\n# UNIT a_live executions\na_live 1\n\
                           # HELP a_x Unknown \\\"thing\\\".\n# TYPE a_x unknown\na_x{k=\"v # }\"} 2 # {trace_id=\"1\"} 1.0\n# EOF\n";
        assert_eq!(
            to_text_format(openmetrics),
            "# HELP a_turns_total Turns.\n# TYPE a_turns_total counter\na_turns_total 3\n\
             # HELP a_live Live.\n# TYPE a_live gauge\na_live 1\n\
             # HELP a_x Unknown \"thing\".\n# TYPE a_x untyped\na_x{k=\"v # }\"} 2\n"
        );
    }

    #[test]
    fn histograms_keep_their_samples_in_the_text_format() {
        let metrics = Metrics::new();
        let text = to_text_format(&metrics.encode());
        assert!(
            text.contains("# TYPE cursor_runner_outbox_lag_events histogram\n"),
            "{text}"
        );
        assert!(
            text.contains("cursor_runner_outbox_lag_events_bucket{le=\"+Inf\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE cursor_runner_turns_started_total counter\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
    }
}
