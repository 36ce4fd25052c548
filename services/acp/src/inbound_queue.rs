//! The queue between an agent's stdout reader and whoever consumes what the agent sent,
//! bounded twice: by messages ([`INBOUND_QUEUE`]) and by the bytes of the lines they were
//! read from ([`MAX_INBOUND_QUEUE_BYTES`]). When either is full the reader waits, so it
//! stops reading stdout and the pipe pushes back on the agent, instead of memory growing:
//! by count alone, 1024 lines of up to `MAX_FRAME_BYTES` each could have queued 16 GiB.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

pub use tokio::sync::mpsc::error::TryRecvError;

/// How many decoded inbound messages may wait for the consumer.
pub const INBOUND_QUEUE: usize = 1024;
/// How many bytes of stdout the waiting messages may have been read from: room for one
/// line of the largest size read ([`crate::MAX_FRAME_BYTES`]), so any line can pass.
pub const MAX_INBOUND_QUEUE_BYTES: usize = crate::framing::MAX_FRAME_BYTES;

/// A queue of at most `messages` messages read from at most `bytes` bytes.
pub fn channel<T>(messages: usize, bytes: usize) -> (Sender<T>, Receiver<T>) {
    let (tx, rx) = mpsc::channel(messages);
    let room = Arc::new(Semaphore::new(bytes));
    (
        Sender {
            tx,
            room: room.clone(),
            bytes,
        },
        Receiver { rx, room, bytes },
    )
}

/// A message with the bytes it holds of the queue's room, given back once it is taken.
type Queued<T> = (T, Option<OwnedSemaphorePermit>);

pub struct Sender<T> {
    tx: mpsc::Sender<Queued<T>>,
    room: Arc<Semaphore>,
    bytes: usize,
}

impl<T> Sender<T> {
    /// Queues `message`, read from a line of `line_bytes` bytes (0: not read from a line),
    /// once both bounds have room for it. `Err` gives it back: nobody takes messages any more.
    pub async fn send(&self, message: T, line_bytes: usize) -> Result<(), T> {
        let permit = match line_bytes {
            0 => None,
            n => {
                let weight = u32::try_from(n.min(self.bytes)).unwrap_or(u32::MAX);
                // The semaphore is never closed.
                self.room.clone().acquire_many_owned(weight).await.ok()
            }
        };
        self.tx.send((message, permit)).await.map_err(|refused| refused.0.0)
    }
}

/// What the agent sent, in wire order.
pub struct Receiver<T> {
    rx: mpsc::Receiver<Queued<T>>,
    room: Arc<Semaphore>,
    bytes: usize,
}

impl<T> Receiver<T> {
    /// The next message; `None` once the reader has ended and everything was taken.
    pub async fn recv(&mut self) -> Option<T> {
        self.rx.recv().await.map(|(message, _room)| message)
    }

    /// The next message if one waits.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        self.rx.try_recv().map(|(message, _room)| message)
    }

    /// [`Self::recv`], with the bytes of stdout the message was read from (0: none; a line
    /// over the byte bound counts as the bound).
    pub async fn recv_weighed(&mut self) -> Option<(T, usize)> {
        self.rx.recv().await.map(weighed)
    }

    /// [`Self::try_recv`], with the bytes the message was read from.
    pub fn try_recv_weighed(&mut self) -> Result<(T, usize), TryRecvError> {
        self.rx.try_recv().map(weighed)
    }

    /// How many bytes of stdout the waiting messages were read from.
    pub fn queued_bytes(&self) -> usize {
        self.bytes - self.room.available_permits()
    }
}

fn weighed<T>((message, room): Queued<T>) -> (T, usize) {
    (message, room.map_or(0, |room| room.num_permits()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_message_waits_for_room_once_the_queued_bytes_would_pass_the_bound() {
        let (tx, mut rx) = channel::<u32>(16, 1000);
        for n in 0..3 {
            tx.send(n, 300).await.unwrap();
        }
        assert_eq!(rx.queued_bytes(), 900);
        let fourth = tx.send(3, 300);
        tokio::pin!(fourth);
        assert!(
            futures_poll_once(fourth.as_mut()).await.is_none(),
            "1200 bytes would pass the bound"
        );
        assert_eq!(rx.recv().await, Some(0));
        fourth.await.unwrap();
        assert_eq!(rx.queued_bytes(), 900);
        assert_eq!(
            [rx.try_recv(), rx.try_recv(), rx.try_recv()].map(Result::ok),
            [Some(1), Some(2), Some(3)]
        );
        assert_eq!(rx.queued_bytes(), 0);
    }

    #[tokio::test]
    async fn a_line_at_the_bound_passes_alone_and_a_larger_one_counts_as_the_bound() {
        let (tx, mut rx) = channel::<u32>(16, 1000);
        tx.send(0, 1000).await.unwrap();
        assert_eq!(rx.queued_bytes(), 1000);
        assert_eq!(rx.recv().await, Some(0));
        tx.send(1, 5000).await.unwrap();
        assert_eq!(
            rx.queued_bytes(),
            1000,
            "a line over the bound would otherwise wait for ever"
        );
        assert_eq!(rx.try_recv_weighed().ok(), Some((1, 1000)));
        let control = tx.send(2, 0);
        tokio::pin!(control);
        assert!(
            futures_poll_once(control.as_mut()).await.is_some(),
            "what was read from no line takes no room"
        );
    }

    #[tokio::test]
    async fn the_count_bounds_the_queue_too() {
        let (tx, _rx) = channel::<u32>(2, 1000);
        tx.send(0, 1).await.unwrap();
        tx.send(1, 1).await.unwrap();
        let third = tx.send(2, 1);
        tokio::pin!(third);
        assert!(futures_poll_once(third.as_mut()).await.is_none());
    }

    /// Polls `future` once: `Some` with its output if it was ready.
    async fn futures_poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
        let mut future = future;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(cx) {
                std::task::Poll::Ready(output) => Some(output),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
