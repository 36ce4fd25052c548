//! Newline-delimited frames with a hard size bound that never breaks the framing:
//! an oversized line is skipped up to its newline and reported, and the next line
//! is read normally.

use std::ops::Range;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest NDJSON line accepted from an agent. Cursor puts whole files, plan markdown
/// and task text on one line (hundreds of KiB are normal), so the bound is far above
/// that; a line beyond it is dropped as a whole and reported, never truncated.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

const READ_CHUNK: usize = 64 * 1024;

/// One result of [`FrameReader::next_frame`]: lines borrowed from the reader's buffer
/// (a flood of small lines is framed without copying or allocating each), or owned
/// ([`ReadFrame::to_owned`]).
#[derive(Debug, PartialEq, Eq)]
pub enum ReadFrame<B = Vec<u8>> {
    /// A complete line without its trailing `\n` (and `\r`).
    Line(B),
    /// A line longer than the bound was skipped; `bytes` is its full length.
    Oversized { bytes: usize },
    /// End of stream. `partial` holds bytes of a last line that had no newline.
    Eof { partial: Option<B> },
}

impl ReadFrame<&[u8]> {
    /// This frame with its bytes copied out of the reader.
    pub fn to_owned(&self) -> ReadFrame {
        match self {
            ReadFrame::Line(line) => ReadFrame::Line(line.to_vec()),
            ReadFrame::Oversized { bytes } => ReadFrame::Oversized { bytes: *bytes },
            ReadFrame::Eof { partial } => ReadFrame::Eof {
                partial: partial.map(<[u8]>::to_vec),
            },
        }
    }
}

/// Where [`FrameReader::take_buffered`] found the next frame.
enum Taken {
    /// A line wholly inside the read buffer.
    InBuffer(Range<usize>),
    /// A line that began in an earlier read, gathered in `current`.
    Gathered,
    Oversized(usize),
}

/// Splits a byte stream into lines of at most `max` bytes.
pub struct FrameReader<R> {
    inner: R,
    max: usize,
    buf: Vec<u8>,
    start: usize,
    current: Vec<u8>,
    /// `current` was handed out as the last frame: it is emptied before the next.
    current_handed_out: bool,
    /// Where [`Self::has_buffered_frame`] found the end of the next line in `buf`, so that
    /// taking the line does not search for it again.
    next_newline: Option<usize>,
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
            current_handed_out: false,
            next_newline: None,
            skipping: None,
            eof: false,
        }
    }

    pub async fn next_frame(&mut self) -> std::io::Result<ReadFrame<&[u8]>> {
        if std::mem::take(&mut self.current_handed_out) {
            self.current.clear();
        }
        loop {
            if let Some(taken) = self.take_buffered() {
                return Ok(match taken {
                    Taken::InBuffer(range) => ReadFrame::Line(&self.buf[range]),
                    Taken::Gathered => {
                        self.current_handed_out = true;
                        ReadFrame::Line(&self.current)
                    }
                    Taken::Oversized(bytes) => ReadFrame::Oversized { bytes },
                });
            }
            if self.eof {
                self.current_handed_out = true;
                let partial = !self.current.is_empty() && self.skipping.is_none();
                return Ok(ReadFrame::Eof {
                    partial: partial.then_some(&self.current[..]),
                });
            }
            self.buf.clear();
            self.start = 0;
            // Into the buffer's spare room: nothing is zeroed first.
            let n = self.inner.read_buf(&mut self.buf).await?;
            if n == 0 {
                self.eof = true;
            }
        }
    }

    /// Whether a whole frame is already buffered: [`Self::next_frame`] would return it
    /// without reading.
    pub fn has_buffered_frame(&mut self) -> bool {
        if self.next_newline.is_none() {
            self.next_newline = memchr::memchr(b'\n', &self.buf[self.start..]).map(|pos| self.start + pos);
        }
        self.next_newline.is_some()
    }

    fn take_buffered(&mut self) -> Option<Taken> {
        while self.start < self.buf.len() {
            let rest = &self.buf[self.start..];
            let newline = match self.next_newline.take() {
                Some(at) => Some(at - self.start),
                None => memchr::memchr(b'\n', rest),
            };
            match newline {
                Some(pos) => {
                    let line = self.start..self.start + pos;
                    self.start += pos + 1;
                    if let Some(skipped) = self.skipping.take() {
                        return Some(Taken::Oversized(skipped + pos));
                    }
                    if self.current.len() + pos > self.max {
                        let bytes = self.current.len() + pos;
                        self.current.clear();
                        return Some(Taken::Oversized(bytes));
                    }
                    if self.current.is_empty() {
                        let end = match self.buf[line.clone()].last() {
                            Some(b'\r') => line.end - 1,
                            _ => line.end,
                        };
                        return Some(Taken::InBuffer(line.start..end));
                    }
                    self.current.extend_from_slice(&self.buf[line]);
                    if self.current.last() == Some(&b'\r') {
                        self.current.pop();
                    }
                    return Some(Taken::Gathered);
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
            let frame = reader.next_frame().await.unwrap().to_owned();
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
