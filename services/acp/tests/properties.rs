//! Property tests for the NDJSON frame reader and the raw JSON-RPC classifier, with
//! seeded pseudo-random inputs (`fastrand`): every failure prints its seed, and a run
//! with the same seed reproduces it.
//!
//! - Arbitrary bytes, split at arbitrary chunk boundaries (with `Pending` reads in
//!   between), never panic the reader, and it yields exactly what a simple model of the
//!   framing says, whatever the chunking.
//! - A line of exactly [`MAX_FRAME_BYTES`] is read whole; one byte more is skipped whole
//!   (reported with its full length) and the next line is still read.
//! - Every line goes through [`classify`] without a panic, and well-formed messages
//!   (including ones carrying lone UTF-16 surrogate escapes) keep their shape.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use cursor_runner_acp::{Classified, FrameReader, MAX_FRAME_BYTES, ReadFrame, RequestId, classify};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};

/// Serves `data` in the chunk sizes given (cycled), returning `Pending` (and waking at
/// once) before a read whenever the schedule says so.
struct ChunkedReader {
    data: Vec<u8>,
    pos: usize,
    chunks: Vec<usize>,
    next_chunk: usize,
    pending: Vec<bool>,
    next_pending: usize,
}

impl ChunkedReader {
    fn new(data: Vec<u8>, chunks: Vec<usize>, pending: Vec<bool>) -> Self {
        assert!(!chunks.is_empty() && chunks.iter().all(|c| *c > 0));
        assert!(
            pending.is_empty() || pending.contains(&false),
            "a reader that is never ready"
        );
        Self {
            data,
            pos: 0,
            chunks,
            next_chunk: 0,
            pending,
            next_pending: 0,
        }
    }
}

impl AsyncRead for ChunkedReader {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.pending.is_empty() {
            let go_pending = self.pending[self.next_pending % self.pending.len()];
            self.next_pending += 1;
            if go_pending {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        let chunk = self.chunks[self.next_chunk % self.chunks.len()];
        self.next_chunk += 1;
        let n = chunk.min(buf.remaining()).min(self.data.len() - self.pos);
        let start = self.pos;
        buf.put_slice(&self.data[start..start + n]);
        self.pos += n;
        Poll::Ready(Ok(()))
    }
}

/// Every frame up to and including `Eof`; fails if the reader does not reach `Eof`
/// within a generous number of frames (a reader that loops would otherwise hang).
async fn read_all(reader: ChunkedReader, max: usize) -> Vec<ReadFrame> {
    read_all_peeking(reader, max, false).await
}

/// [`read_all`], asking before each frame whether one is buffered when `peek` (as the
/// connection's reader does before it waits for more bytes): one said to be buffered is
/// never the end of the stream.
async fn read_all_peeking(reader: ChunkedReader, max: usize, peek: bool) -> Vec<ReadFrame> {
    let limit = reader.data.len() + 2;
    let mut frames = FrameReader::with_limit(reader, max);
    let mut out = Vec::new();
    for _ in 0..=limit {
        let buffered = peek && frames.has_buffered_frame();
        let frame = frames
            .next_frame()
            .await
            .expect("an in-memory reader never fails")
            .to_owned();
        let done = matches!(frame, ReadFrame::Eof { .. });
        assert!(
            !(buffered && done),
            "a frame was said to be buffered, then the stream ended"
        );
        out.push(frame);
        if done {
            // Eof is sticky and carries nothing more.
            assert_eq!(frames.next_frame().await.unwrap(), ReadFrame::Eof { partial: None });
            return out;
        }
    }
    panic!("no Eof after {limit} frames: {out:?}");
}

/// The framing as documented, written independently of the reader: lines end at `\n`;
/// a line longer than `max` (counting a trailing `\r`) is reported as `Oversized` with
/// its full length; an accepted line loses one trailing `\r`; bytes after the last
/// newline are the `Eof` partial when non-empty and within the bound.
fn model(input: &[u8], max: usize) -> Vec<ReadFrame> {
    let mut out = Vec::new();
    let mut pieces: Vec<&[u8]> = input.split(|b| *b == b'\n').collect();
    let tail = pieces.pop().expect("split yields at least one piece");
    for line in pieces {
        if line.len() > max {
            out.push(ReadFrame::Oversized { bytes: line.len() });
        } else {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            out.push(ReadFrame::Line(line.to_vec()));
        }
    }
    let partial = (!tail.is_empty() && tail.len() <= max).then(|| tail.to_vec());
    out.push(ReadFrame::Eof { partial });
    out
}

fn random_bytes(rng: &mut fastrand::Rng, len: usize) -> Vec<u8> {
    // Biased towards the bytes the framing cares about, so that lines of every length
    // (around the small bound) and CR/LF pairs are common.
    (0..len)
        .map(|_| match rng.u8(0..10) {
            0 | 1 => b'\n',
            2 => b'\r',
            3 => rng.u8(..),
            _ => rng.u8(b'a'..=b'z'),
        })
        .collect()
}

/// Read sizes for a stream of `len` bytes: one byte at a time for short streams, else
/// at most about 64 reads (each read costs the reader a 64 KiB buffer reset, which
/// dominates an unoptimized test build).
fn random_chunking(rng: &mut fastrand::Rng, len: usize) -> (Vec<usize>, Vec<bool>) {
    let least = (len / 64).max(1);
    let chunks = match rng.u8(0..4) {
        0 => vec![least],
        1 => vec![len.max(1)],
        _ => (0..rng.usize(1..8))
            .map(|_| rng.usize(least..=(len / 2).max(least)))
            .collect(),
    };
    // `Pending` now and then, but never forever: the schedule always holds a read.
    let mut pending: Vec<bool> = (0..rng.usize(0..5)).map(|_| rng.bool()).collect();
    pending.push(false);
    (chunks, pending)
}

#[tokio::test]
async fn arbitrary_bytes_at_arbitrary_chunk_boundaries_frame_exactly_as_the_model_says() {
    for seed in 0..200u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let len = rng.usize(0..400);
        let input = random_bytes(&mut rng, len);
        let max = rng.usize(1..40);
        let expected = model(&input, max);
        for _ in 0..3 {
            let (chunks, pending) = random_chunking(&mut rng, len);
            for peek in [false, true] {
                let reader = ChunkedReader::new(input.clone(), chunks.clone(), pending.clone());
                let got = read_all_peeking(reader, max, peek).await;
                assert_eq!(
                    got,
                    expected,
                    "seed {seed}, max {max}, chunks {chunks:?}, peek {peek}, input {:?}",
                    String::from_utf8_lossy(&input)
                );
            }
        }
    }
}

#[tokio::test]
async fn lines_longer_than_one_read_buffer_are_bounded_across_reads() {
    // The reader fills a 64 KiB buffer per read; lines around that size and around a
    // bound above it cross several reads.
    for seed in 0..12u64 {
        let mut rng = fastrand::Rng::with_seed(1000 + seed);
        let max = 64 * 1024 + rng.usize(0..3) * 40_000 - 1;
        let lengths = [max - 1, max, max + 1, rng.usize(0..3 * max), 0, 3];
        let mut input = Vec::new();
        for len in lengths {
            input.extend(std::iter::repeat_n(b'y', len));
            input.push(b'\n');
        }
        input.extend_from_slice(b"tail");
        let expected = model(&input, max);
        let (chunks, pending) = random_chunking(&mut rng, input.len());
        let got = read_all(ChunkedReader::new(input, chunks.clone(), pending), max).await;
        assert_eq!(got, expected, "seed {seed}, max {max}, chunks {chunks:?}");
    }
}

#[tokio::test]
async fn a_line_of_exactly_max_frame_bytes_passes_and_one_byte_more_is_skipped_whole() {
    let mut rng = fastrand::Rng::with_seed(7);
    let at = vec![b'a'; MAX_FRAME_BYTES];
    let over = vec![b'b'; MAX_FRAME_BYTES + 1];
    let mut input = Vec::with_capacity(2 * MAX_FRAME_BYTES + 64);
    input.extend_from_slice(b"{\"first\":1}\n");
    input.extend_from_slice(&at);
    input.push(b'\n');
    input.extend_from_slice(&over);
    input.push(b'\n');
    input.extend_from_slice(b"{\"next\":2}\n");
    for round in 0..3 {
        let chunks: Vec<usize> = match round {
            0 => vec![64 * 1024],
            1 => vec![1 + rng.usize(0..4096), 1 + rng.usize(0..100_000), 7],
            _ => vec![MAX_FRAME_BYTES / 3 + 1],
        };
        let reader = ChunkedReader::new(input.clone(), chunks.clone(), vec![false, true, false]);
        let mut frames = FrameReader::new(reader);
        let mut next = async || frames.next_frame().await.unwrap().to_owned();
        assert_eq!(
            next().await,
            ReadFrame::Line(b"{\"first\":1}".to_vec()),
            "chunks {chunks:?}"
        );
        match next().await {
            ReadFrame::Line(line) => assert!(line == at, "the line at the bound must come back whole"),
            other => panic!("chunks {chunks:?}: a line at the bound was not read: {other:?}"),
        }
        assert_eq!(
            next().await,
            ReadFrame::Oversized {
                bytes: MAX_FRAME_BYTES + 1
            },
            "chunks {chunks:?}"
        );
        assert_eq!(
            next().await,
            ReadFrame::Line(b"{\"next\":2}".to_vec()),
            "chunks {chunks:?}"
        );
        assert_eq!(next().await, ReadFrame::Eof { partial: None }, "chunks {chunks:?}");
    }
}

/// A JSON-RPC message of a random shape, with strings that may hold lone surrogate
/// escapes (as JavaScript writes them), written as one line.
fn random_message(rng: &mut fastrand::Rng) -> (String, &'static str) {
    let text = |rng: &mut fastrand::Rng| -> String {
        let parts = [
            "a",
            "é",
            "\\n",
            "\\\"",
            "\\ud800",
            "\\udfff",
            "\\ud83d\\ude00",
            "\\\\ud800",
            " ",
            "🎉",
        ];
        (0..rng.usize(0..6)).map(|_| parts[rng.usize(..parts.len())]).collect()
    };
    let id = match rng.u8(0..3) {
        0 => rng.i64(-5..1_000_000).to_string(),
        1 => format!("\"{}\"", text(rng)),
        _ => "null".to_owned(),
    };
    let params = format!("{{\"t\":\"{}\",\"n\":[1,{{\"u\":\"{}\"}}]}}", text(rng), text(rng));
    match rng.u8(0..4) {
        0 => (
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"cursor/ask_question\",\"params\":{params}}}"),
            "request",
        ),
        1 => (
            format!("{{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{params}}}"),
            "notification",
        ),
        2 => (
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{params}}}"),
            "response",
        ),
        _ => (
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32000,\"message\":\"{}\"}}}}",
                text(rng)
            ),
            "response",
        ),
    }
}

fn shape(classified: &Classified) -> &'static str {
    match classified {
        Classified::Request { .. } => "request",
        Classified::Notification { .. } | Classified::TextChunk(_) => "notification",
        Classified::Response { .. } => "response",
        Classified::Unanswerable { .. } => "unanswerable",
        Classified::Invalid { .. } => "invalid",
    }
}

#[test]
fn well_formed_messages_keep_their_shape_even_with_lone_surrogates() {
    for seed in 0..2000u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let (line, expected) = random_message(&mut rng);
        let got = classify(line.as_bytes());
        assert_eq!(shape(&got), expected, "seed {seed}: {line} → {got:?}");
        if let Classified::Request { id, .. } | Classified::Response { id, .. } = &got {
            let sent: Value = serde_json::from_str(&line)
                .ok()
                .and_then(|v: Value| v.get("id").cloned())
                .unwrap_or(Value::Null);
            if sent.is_number() {
                assert_eq!(*id, RequestId::Number(sent.as_i64().unwrap()), "seed {seed}: {line}");
            }
        }
    }
}

#[test]
fn arbitrary_and_mutated_lines_never_panic_the_classifier() {
    let seeds: Vec<Vec<u8>> = vec![
        json!({"jsonrpc":"2.0","id":1,"method":"session/update","params":{"sessionId":"s","update":{}}})
            .to_string()
            .into_bytes(),
        br#"{"jsonrpc":"2.0","id":0,"result":{"t":"\ud800\udc00\ud800"}}"#.to_vec(),
        br#"{"id":"\ud83d","error":{"code":1,"message":"\\u"}}"#.to_vec(),
        br#"{"method":"m","params":"\u"}"#.to_vec(),
    ];
    let alphabet: &[u8] = b"{}[]\":,\\u0123456789abcdefdD+-. \xff\xc3\xa9";
    for seed in 0..20_000u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let line: Vec<u8> = if rng.u8(0..4) == 0 {
            (0..rng.usize(0..64))
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect()
        } else {
            let mut line = seeds[rng.usize(..seeds.len())].clone();
            for _ in 0..rng.usize(1..6) {
                let at = rng.usize(..=line.len());
                match rng.u8(0..3) {
                    0 if at < line.len() => {
                        line.remove(at);
                    }
                    1 => line.insert(at, alphabet[rng.usize(..alphabet.len())]),
                    _ => line.truncate(at),
                }
            }
            line
        };
        // The property is the absence of a panic; the result must still be one of the
        // four shapes, and a message that is not JSON must say so.
        let got = classify(&line);
        if serde_json::from_slice::<Value>(&line).is_err() && !line.windows(2).any(|w| w == b"\\u") {
            assert_eq!(
                shape(&got),
                "invalid",
                "seed {seed}: {:?}",
                String::from_utf8_lossy(&line)
            );
        }
    }
}

#[tokio::test]
async fn frames_of_a_random_stream_of_messages_classify_one_for_one() {
    for seed in 0..200u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let messages: Vec<(String, &str)> = (0..rng.usize(0..20)).map(|_| random_message(&mut rng)).collect();
        let mut input = Vec::new();
        for (line, _) in &messages {
            input.extend_from_slice(line.as_bytes());
            input.extend_from_slice(if rng.bool() { b"\r\n" } else { b"\n" });
        }
        let (chunks, pending) = random_chunking(&mut rng, input.len());
        let frames = read_all(ChunkedReader::new(input, chunks, pending), MAX_FRAME_BYTES).await;
        assert_eq!(frames.len(), messages.len() + 1, "seed {seed}");
        for (frame, (line, expected)) in frames.iter().zip(&messages) {
            let ReadFrame::Line(bytes) = frame else {
                panic!("seed {seed}: {frame:?}");
            };
            assert_eq!(bytes, line.as_bytes(), "seed {seed}");
            assert_eq!(shape(&classify(bytes)), *expected, "seed {seed}: {line}");
        }
    }
}

/// A number with more digits than a double holds (the fuzz smoke's crash input) is read to
/// the nearest double, so the message means the same when it is written back and read
/// again; serde_json's fast float reader alone is off by one unit in the last place.
#[test]
fn a_long_decimal_reads_to_the_nearest_double_so_a_message_written_back_classifies_the_same() {
    let digits = format!("{}{}.070613", "1".repeat(28), "0".repeat(93));
    let line = format!(r#"{{"jsonrpc":"2.0","id":0,"method":"cursor/x","params":{{"content":{{"type":{digits}}}}}}}"#);
    let classified = classify(line.as_bytes());
    let Classified::Request { id, method, params } = &classified else {
        panic!("{classified:?}")
    };
    let again = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    assert_eq!(classify(again.as_bytes()), classified, "{again}");
    let nearest: f64 = digits.parse().unwrap();
    assert_eq!(params["content"]["type"].as_f64(), Some(nearest));
}
