//! Newline-delimited frames with a hard size bound that never breaks the framing:
//! an oversized line is skipped up to its newline and reported, and the next line
//! is read normally.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest NDJSON line accepted from an agent. Cursor puts whole files, plan markdown
/// and task text on one line (hundreds of KiB are normal), so the bound is far above
/// that; a line beyond it is dropped as a whole and reported, never truncated.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

const READ_CHUNK: usize = 64 * 1024;

/// One result of [`FrameReader::next_frame`].
#[derive(Debug, PartialEq, Eq)]
pub enum ReadFrame {
    /// A complete line without its trailing `\n` (and `\r`).
    Line(Vec<u8>),
    /// A line longer than the bound was skipped; `bytes` is its full length.
    Oversized { bytes: usize },
    /// End of stream. `partial` holds bytes of a last line that had no newline.
    Eof { partial: Option<Vec<u8>> },
}

/// Splits a byte stream into lines of at most `max` bytes.
pub struct FrameReader<R> {
    inner: R,
    max: usize,
    buf: Vec<u8>,
    start: usize,
    current: Vec<u8>,
    skipping: Option<usize>,
    eof: bool,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        Self::with_limit(inner, MAX_FRAME_BYTES)
    }

    pub fn with_limit(inner: R, max: usize) -> Self {
        Self {
            inner,
            max,
            buf: Vec::with_capacity(READ_CHUNK),
            start: 0,
            current: Vec::new(),
            skipping: None,
            eof: false,
        }
    }

    pub async fn next_frame(&mut self) -> std::io::Result<ReadFrame> {
        loop {
            if let Some(frame) = self.take_buffered() {
                return Ok(frame);
            }
            if self.eof {
                let partial = std::mem::take(&mut self.current);
                return Ok(ReadFrame::Eof {
                    partial: (!partial.is_empty() && self.skipping.is_none()).then_some(partial),
                });
            }
            self.buf.clear();
            self.start = 0;
            self.buf.resize(READ_CHUNK, 0);
            let n = self.inner.read(&mut self.buf).await?;
            self.buf.truncate(n);
            if n == 0 {
                self.eof = true;
            }
        }
    }

    fn take_buffered(&mut self) -> Option<ReadFrame> {
        while self.start < self.buf.len() {
            let rest = &self.buf[self.start..];
            match memchr::memchr(b'\n', rest) {
                Some(pos) => {
                    let piece = &rest[..pos];
                    self.start += pos + 1;
                    if let Some(skipped) = self.skipping.take() {
                        return Some(ReadFrame::Oversized {
                            bytes: skipped + piece.len(),
                        });
                    }
                    if self.current.len() + piece.len() > self.max {
                        let bytes = self.current.len() + piece.len();
                        self.current.clear();
                        return Some(ReadFrame::Oversized { bytes });
                    }
                    let mut line = std::mem::take(&mut self.current);
                    line.extend_from_slice(piece);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    return Some(ReadFrame::Line(line));
                }
                None => {
                    let len = rest.len();
                    match self.skipping.as_mut() {
                        Some(skipped) => *skipped += len,
                        None if self.current.len() + len > self.max => {
                            self.skipping = Some(self.current.len() + len);
                            self.current.clear();
                        }
                        None => self.current.extend_from_slice(rest),
                    }
                    self.start = self.buf.len();
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8], max: usize) -> Vec<ReadFrame> {
        let mut reader = FrameReader::with_limit(input, max);
        let mut out = Vec::new();
        loop {
            let frame = reader.next_frame().await.unwrap();
            let done = matches!(frame, ReadFrame::Eof { .. });
            out.push(frame);
            if done {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn splits_lines_and_strips_carriage_returns() {
        let got = frames(b"a\r\nbc\n", 10).await;
        assert_eq!(
            got,
            vec![
                ReadFrame::Line(b"a".to_vec()),
                ReadFrame::Line(b"bc".to_vec()),
                ReadFrame::Eof { partial: None }
            ]
        );
    }

    #[tokio::test]
    async fn a_line_exactly_at_the_bound_is_accepted() {
        let mut input = vec![b'x'; 8];
        input.push(b'\n');
        let got = frames(&input, 8).await;
        assert_eq!(got[0], ReadFrame::Line(vec![b'x'; 8]));
    }

    #[tokio::test]
    async fn a_line_one_byte_over_the_bound_is_skipped_and_the_next_line_survives() {
        let mut input = vec![b'x'; 9];
        input.extend_from_slice(b"\nok\n");
        let got = frames(&input, 8).await;
        assert_eq!(got[0], ReadFrame::Oversized { bytes: 9 });
        assert_eq!(got[1], ReadFrame::Line(b"ok".to_vec()));
    }

    #[tokio::test]
    async fn a_truncated_last_line_is_reported_at_eof() {
        let got = frames(b"one\ntw", 8).await;
        assert_eq!(
            got[1],
            ReadFrame::Eof {
                partial: Some(b"tw".to_vec())
            }
        );
    }

    #[tokio::test]
    async fn the_default_bound_is_far_above_cursor_sized_lines() {
        const { assert!(MAX_FRAME_BYTES >= 4 * 1024 * 1024) };
    }
}
