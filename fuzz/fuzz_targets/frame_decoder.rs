//! Arbitrary bytes through the acp crate's NDJSON `FrameReader`, then every line (and a
//! last partial line) through the raw JSON-RPC classifier.
//!
//! The first input byte picks how the stream is split into reads (1..=64 bytes, cycled
//! with a stride of whole reads); the second picks the frame bound: `MAX_FRAME_BYTES`
//! itself, or a small bound (1..=255) so that the oversized-line path is exercised by
//! inputs of fuzzer size. The rest is the stream. Checked:
//! - the reader never panics and reaches `Eof` (no endless loop);
//! - its frames are exactly those of a simple model of the framing, whatever the split;
//! - `classify` never panics, and what it classifies survives a round trip: the
//!   message written back as JSON classifies to the same thing.

#![no_main]

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use cursor_runner_acp::{Classified, FrameReader, MAX_FRAME_BYTES, ReadFrame, classify, methods};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};

/// Serves the stream in reads of the given sizes.
struct Chunked<'a> {
    data: &'a [u8],
    sizes: [usize; 4],
    reads: usize,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let size = self.sizes[self.reads % self.sizes.len()];
        self.reads += 1;
        let n = size.min(buf.remaining()).min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = rest;
        Poll::Ready(Ok(()))
    }
}

/// Drives a future whose reads are always ready.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000 {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
    panic!("a frame read stayed pending on an always-ready reader");
}

/// The framing as documented (see `services/acp/tests/properties.rs`).
fn model(input: &[u8], max: usize) -> Vec<ReadFrame> {
    let mut out = Vec::new();
    let mut pieces: Vec<&[u8]> = input.split(|b| *b == b'\n').collect();
    let tail = pieces.pop().unwrap_or_default();
    for line in pieces {
        if line.len() > max {
            out.push(ReadFrame::Oversized { bytes: line.len() });
        } else {
            out.push(ReadFrame::Line(line.strip_suffix(b"\r").unwrap_or(line).to_vec()));
        }
    }
    let partial = (!tail.is_empty() && tail.len() <= max).then(|| tail.to_vec());
    out.push(ReadFrame::Eof { partial });
    out
}

/// The classified message written back as one JSON-RPC line.
fn written_back(classified: &Classified) -> Option<Vec<u8>> {
    let value = match classified {
        Classified::Request { id, method, params } => {
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        }
        Classified::Notification { method, params } => json!({"jsonrpc": "2.0", "method": method, "params": params}),
        Classified::TextChunk(chunk) => {
            json!({"jsonrpc": "2.0", "method": methods::SESSION_UPDATE, "params": chunk.clone().into_params()})
        }
        Classified::Response { id, result: Ok(result) } => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Classified::Response { id, result: Err(error) } => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        Classified::Unanswerable { .. } | Classified::Invalid { .. } => return None,
    };
    Some(serde_json::to_vec(&value).expect("a classified message serializes"))
}

fn check_line(line: &[u8]) {
    let classified = classify(line);
    if let Some(again) = written_back(&classified) {
        let reclassified = classify(&again);
        assert_eq!(
            reclassified,
            classified,
            "classification is not stable when written back: {}",
            String::from_utf8_lossy(&again)
        );
    } else if serde_json::from_slice::<Value>(line).is_ok_and(|v| v.is_object()) {
        // An object that parses is invalid (or unanswerable) only for a reason about its keys.
        let (Classified::Invalid { reason } | Classified::Unanswerable { reason, .. }) = &classified else {
            unreachable!()
        };
        assert!(!reason.starts_with("not JSON"), "{reason}");
    }
}

fuzz_target!(|data: &[u8]| {
    let [split, bound, stream @ ..] = data else {
        return;
    };
    let first = usize::from(split % 64) + 1;
    let sizes = [first, first * 3 + 1, 1, 64 * 1024];
    let max = match bound {
        0 => MAX_FRAME_BYTES,
        n => usize::from(*n),
    };
    let mut reader = FrameReader::with_limit(
        Chunked {
            data: stream,
            sizes,
            reads: 0,
        },
        max,
    );
    let mut frames = Vec::new();
    loop {
        let frame = ready(reader.next_frame()).expect("an in-memory read never fails").to_owned();
        assert!(frames.len() <= stream.len() + 1, "more frames than bytes");
        let done = matches!(frame, ReadFrame::Eof { .. });
        frames.push(frame);
        if done {
            break;
        }
    }
    assert_eq!(frames, model(stream, max), "split {sizes:?}, bound {max}");
    for frame in &frames {
        match frame {
            ReadFrame::Line(line) | ReadFrame::Eof { partial: Some(line) } => check_line(line),
            ReadFrame::Oversized { bytes } => assert!(*bytes > max),
            ReadFrame::Eof { partial: None } => {}
        }
    }
});
