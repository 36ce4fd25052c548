//! The agent's stdio: a reader thread turning stdin lines into [`Inbound`] items (each
//! line recorded first when asked), closing stdin on request, writing frames to stdout,
//! and diagnostics on stderr.

use std::fs::File;
use std::io::{self, BufRead, Write};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::Duration;

use serde_json::Value;

/// Exit code when stdout is closed under us.
pub const EXIT_STDOUT_CLOSED: i32 = 1;

/// One item from the stdin reader thread.
pub enum Inbound {
    /// A line that parsed as JSON.
    Msg(Value),
    /// A line that did not parse as JSON.
    Bad(String),
    /// stdin reached end of file (or failed).
    Eof,
}

/// Starts the stdin reader thread. Each line is appended verbatim to `record`
/// (if any) before it is parsed; blank lines are recorded but not delivered.
pub fn spawn_reader(mut record: Option<File>) -> Receiver<Inbound> {
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("stdin-reader".into())
        .spawn(move || {
            // SAFETY: fd 0 is this process's stdin, owned by this thread alone from here on.
            let mut input = io::BufReader::new(unsafe { File::from_raw_fd(0) });
            let mut buf = Vec::new();
            loop {
                buf.clear();
                if input.buffer().is_empty() && !wait_readable(&input) {
                    // `close_stdin`: dropping the reader closes fd 0, so the client's next
                    // write fails (EPIPE) while stdout stays open.
                    drop(input);
                    STDIN_CLOSED.store(true, Ordering::SeqCst);
                    log("stdin closed on request");
                    return;
                }
                match input.read_until(b'\n', &mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        log(&format!("stdin read error: {e}"));
                        break;
                    }
                }
                if !buf.ends_with(b"\n") {
                    buf.push(b'\n');
                }
                if let Some(file) = record.as_mut() {
                    // One write per line: every agent of a service appends to the same record
                    // file, and two writes (line, then newline) let another agent's line land
                    // between them.
                    let written = file.write_all(&buf).and_then(|()| file.flush());
                    if let Err(e) = written {
                        log(&format!("cannot write the record file, recording stops: {e}"));
                        record = None;
                    }
                }
                let line = &buf[..buf.len() - 1];
                if line.trim_ascii().is_empty() {
                    continue;
                }
                let item = match serde_json::from_slice::<Value>(line) {
                    Ok(v) => Inbound::Msg(v),
                    Err(e) => {
                        log(&format!(
                            "unparsable input line ({e}): {}",
                            String::from_utf8_lossy(line)
                        ));
                        Inbound::Bad(e.to_string())
                    }
                };
                if tx.send(item).is_err() {
                    return;
                }
            }
            let _ = tx.send(Inbound::Eof);
        })
        .expect("spawn the stdin reader thread");
    rx
}

/// Set by the `close_stdin` step; the reader thread then closes stdin.
static STDIN_CLOSE_REQUESTED: AtomicBool = AtomicBool::new(false);
/// Set by [`stop_reading_stdin`]; the reader thread then reads nothing more.
static STDIN_READING_STOPPED: AtomicBool = AtomicBool::new(false);
/// Set by the reader thread once stdin is closed.
static STDIN_CLOSED: AtomicBool = AtomicBool::new(false);

/// Written to when a flag above is set, so the reader thread, blocked in `poll` on stdin and
/// this pipe, wakes to read it. It never polls on a timer: hundreds of idle agents (the
/// benches run 500) waking every few milliseconds would load the machine they measure.
static WAKE_READER: std::sync::OnceLock<(io::PipeReader, io::PipeWriter)> = std::sync::OnceLock::new();

fn wake_pipe() -> &'static (io::PipeReader, io::PipeWriter) {
    WAKE_READER.get_or_init(|| io::pipe().expect("create the reader's wake pipe"))
}

/// Sets `flag` and wakes the reader thread to see it.
fn tell_reader(flag: &AtomicBool) {
    flag.store(true, Ordering::SeqCst);
    // One byte is enough: the reader checks every flag whenever it wakes.
    let _ = (&wake_pipe().1).write_all(b"!");
}

/// Waits until stdin has input (or EOF). `false`: a `close_stdin` was requested first.
fn wait_readable(input: &io::BufReader<File>) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let wake = &wake_pipe().0;
    loop {
        if STDIN_CLOSE_REQUESTED.load(Ordering::SeqCst) {
            return false;
        }
        let mut fds = [
            PollFd::new(input.get_ref().as_fd(), PollFlags::POLLIN),
            PollFd::new(wake.as_fd(), PollFlags::POLLIN),
        ];
        let ready = match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => fds[0].any().unwrap_or(true),
            Err(nix::errno::Errno::EINTR) => false,
            Err(_) => true,
        };
        // Checked after the poll too: input arriving after the stop is never read.
        while STDIN_READING_STOPPED.load(Ordering::SeqCst) {
            // fd 0 stays open and unread: the client's writes fill the pipe and block.
            thread::sleep(Duration::from_secs(3600));
        }
        if ready {
            return true;
        }
    }
}

/// Writes a diagnostic line to stderr.
pub fn log(msg: &str) {
    eprintln!("fake-cursor: {msg}");
}

/// Closes stdin (the client's next write fails) and returns once the reader thread did.
pub fn close_stdin() {
    tell_reader(&STDIN_CLOSE_REQUESTED);
    while !STDIN_CLOSED.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(10));
    }
}

/// When `asked`, stops the reader thread reading stdin, leaving fd 0 open (a hung event loop).
pub fn stop_reading_stdin_if(asked: bool) {
    if asked {
        log("no longer reading stdin");
        tell_reader(&STDIN_READING_STOPPED);
    }
}

/// Writes one frame (plus `\n` when asked) and flushes it; exits when stdout is gone.
pub fn write_frame(bytes: &[u8], newline: bool) {
    let mut out = io::stdout().lock();
    let res = out
        .write_all(bytes)
        .and_then(|()| if newline { out.write_all(b"\n") } else { Ok(()) })
        .and_then(|()| out.flush());
    if let Err(e) = res {
        log(&format!("stdout closed ({e}); exiting"));
        std::process::exit(EXIT_STDOUT_CLOSED);
    }
}
