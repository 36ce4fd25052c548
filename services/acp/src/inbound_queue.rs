//! The queue between an agent's stdout reader and whoever consumes what the agent sent,
//! bounded twice: by messages ([`INBOUND_QUEUE`]) and by the bytes of the lines they were
//! read from ([`MAX_INBOUND_QUEUE_BYTES`]). When either is full the reader waits, so it
//! stops reading stdout and the pipe pushes back on the agent, instead of memory growing:
//! by count alone, 1024 lines of up to `MAX_FRAME_BYTES` each could have queued 16 GiB.
//!
//! The reader hands over what it decoded from one read of stdout as one batch (at most
//! [`MAX_INBOUND_BATCH`] messages): a flood of small lines then costs one hand-over, and
//! at most one wake-up of the consumer, per read instead of per line. The consumer still
//! takes them one at a time; a batch's room is given back when its last message is taken.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

pub use tokio::sync::mpsc::error::TryRecvError;

/// How many decoded inbound messages may wait for the consumer.
pub const INBOUND_QUEUE: usize = 4096;
/// How many bytes of stdout the waiting messages may have been read from: room for one
/// line of the largest size read ([`crate::MAX_FRAME_BYTES`]), so any line can pass.
pub const MAX_INBOUND_QUEUE_BYTES: usize = crate::framing::MAX_FRAME_BYTES;
/// How many messages one batch carries at most: far below [`INBOUND_QUEUE`], so a batch
/// always fits and the consumer sees the first lines of a large read early.
pub const MAX_INBOUND_BATCH: usize = 128;

const _: () = assert!(MAX_INBOUND_BATCH <= INBOUND_QUEUE);

/// A queue of at most `messages` messages read from at most `bytes` bytes.
pub fn channel<T>(messages: usize, bytes: usize) -> (Sender<T>, Receiver<T>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let room = Room {
        messages: Arc::new(Semaphore::new(messages)),
        bytes: Arc::new(Semaphore::new(bytes)),
    };
    (
        Sender {
            tx,
            room: room.clone(),
            messages,
            bytes,
        },
        Receiver {
            rx,
            taking: None,
            room,
            bytes,
        },
    )
}

/// A message with the bytes of the line it was read from (0: not read from a line).
pub type Weighed<T> = (T, usize);

#[derive(Clone)]
struct Room {
    messages: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
}

/// Messages sent together, holding their room of the queue until the last is taken.
struct Batch<T> {
    messages: std::vec::IntoIter<Weighed<T>>,
    _room: (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>),
}

pub struct Sender<T> {
    tx: mpsc::UnboundedSender<Batch<T>>,
    room: Room,
    messages: usize,
    bytes: usize,
}

impl<T> Sender<T> {
    /// Queues `messages` as one batch once both bounds have room for all of them (more
    /// than a bound counts as the bound, so it passes once the queue is empty). `Err`
    /// gives them back: nobody takes messages any more.
    pub async fn send_all(&self, messages: Vec<Weighed<T>>) -> Result<(), Vec<Weighed<T>>> {
        if messages.is_empty() {
            return Ok(());
        }
        let weight = messages.iter().map(|(_, bytes)| bytes).sum::<usize>().min(self.bytes);
        let permits = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        // Neither semaphore is ever closed.
        let Ok(count) = self
            .room
            .messages
            .clone()
            .acquire_many_owned(permits(messages.len().min(self.messages)))
            .await
        else {
            return Err(messages);
        };
        let bytes = match weight {
            0 => None,
            n => self.room.bytes.clone().acquire_many_owned(permits(n)).await.ok(),
        };
        let batch = Batch {
            messages: messages.into_iter(),
            _room: (count, bytes),
        };
        self.tx.send(batch).map_err(|refused| refused.0.messages.collect())
    }
}

/// Gathers what one read decoded into batches of at most [`MAX_INBOUND_BATCH`].
pub struct Batcher<T> {
    pending: Vec<Weighed<T>>,
}

impl<T> Default for Batcher<T> {
    fn default() -> Self {
        Self { pending: Vec::new() }
    }
}

impl<T> Batcher<T> {
    /// Adds a message; `true` once the batch is full and must be sent before the next.
    pub fn push(&mut self, message: T, line_bytes: usize) -> bool {
        self.pending.push((message, line_bytes));
        self.pending.len() >= MAX_INBOUND_BATCH
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The batch gathered so far, leaving this one empty.
    pub fn take(&mut self) -> Vec<Weighed<T>> {
        std::mem::take(&mut self.pending)
    }
}

/// What the agent sent, in wire order.
pub struct Receiver<T> {
    rx: mpsc::UnboundedReceiver<Batch<T>>,
    /// The batch whose messages are being taken.
    taking: Option<Batch<T>>,
    room: Room,
    bytes: usize,
}

impl<T> Receiver<T> {
    /// The next message; `None` once the reader has ended and everything was taken.
    pub async fn recv(&mut self) -> Option<T> {
        self.recv_weighed().await.map(|(message, _)| message)
    }

    /// The next message if one waits.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        self.try_recv_weighed().map(|(message, _)| message)
    }

    /// [`Self::recv`], with the bytes of stdout the message was read from (0: none; a line
    /// over the byte bound counts as the bound). Cancel-safe: nothing is taken unless it
    /// is returned.
    pub async fn recv_weighed(&mut self) -> Option<Weighed<T>> {
        if let Some(message) = self.take_from_batch() {
            return Some(message);
        }
        self.taking = Some(self.rx.recv().await?);
        self.take_from_batch()
    }

    /// [`Self::try_recv`], with the bytes the message was read from.
    pub fn try_recv_weighed(&mut self) -> Result<Weighed<T>, TryRecvError> {
        if let Some(message) = self.take_from_batch() {
            return Ok(message);
        }
        self.taking = Some(self.rx.try_recv()?);
        self.take_from_batch().ok_or(TryRecvError::Empty)
    }

    /// How many bytes of stdout the waiting messages were read from.
    pub fn queued_bytes(&self) -> usize {
        self.bytes - self.room.bytes.available_permits()
    }

    /// The next message of the batch being taken; its room goes back with its last one.
    fn take_from_batch(&mut self) -> Option<Weighed<T>> {
        let batch = self.taking.as_mut()?;
        let (message, line_bytes) = batch.messages.next()?;
        if batch.messages.len() == 0 {
            self.taking = None;
        }
        Some((message, line_bytes.min(self.bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_message_waits_for_room_once_the_queued_bytes_would_pass_the_bound() {
        let (tx, mut rx) = channel::<u32>(16, 1000);
        for n in 0..3 {
            tx.send_all(vec![(n, 300)]).await.unwrap();
        }
        assert_eq!(rx.queued_bytes(), 900);
        let fourth = tx.send_all(vec![(3, 300)]);
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
        tx.send_all(vec![(0, 1000)]).await.unwrap();
        assert_eq!(rx.queued_bytes(), 1000);
        assert_eq!(rx.recv().await, Some(0));
        tx.send_all(vec![(1, 5000)]).await.unwrap();
        assert_eq!(
            rx.queued_bytes(),
            1000,
            "a line over the bound would otherwise wait for ever"
        );
        assert_eq!(rx.try_recv_weighed().ok(), Some((1, 1000)));
        let control = tx.send_all(vec![(2, 0)]);
        tokio::pin!(control);
        assert!(
            futures_poll_once(control.as_mut()).await.is_some(),
            "what was read from no line takes no room"
        );
    }

    #[tokio::test]
    async fn the_count_bounds_the_queue_too() {
        let (tx, _rx) = channel::<u32>(2, 1000);
        tx.send_all(vec![(0, 1)]).await.unwrap();
        tx.send_all(vec![(1, 1)]).await.unwrap();
        let third = tx.send_all(vec![(2, 1)]);
        tokio::pin!(third);
        assert!(futures_poll_once(third.as_mut()).await.is_none());
    }

    #[test]
    fn a_batch_is_full_at_its_bound_and_not_one_message_before() {
        let mut batch = Batcher::default();
        for n in 1..MAX_INBOUND_BATCH {
            assert!(!batch.push(n, 1), "{n} messages do not fill a batch");
        }
        assert!(batch.push(MAX_INBOUND_BATCH, 1), "the bound fills it");
        assert_eq!(batch.take().len(), MAX_INBOUND_BATCH);
        assert!(batch.is_empty());
    }

    #[tokio::test]
    async fn a_batch_comes_out_one_message_at_a_time_in_order_with_each_weight() {
        let (tx, mut rx) = channel::<u32>(16, 1000);
        tx.send_all(vec![(0, 10), (1, 0), (2, 30)]).await.unwrap();
        tx.send_all(vec![(3, 5)]).await.unwrap();
        assert_eq!(rx.try_recv_weighed().ok(), Some((0, 10)));
        assert_eq!(rx.recv_weighed().await, Some((1, 0)));
        assert_eq!(rx.try_recv_weighed().ok(), Some((2, 30)));
        assert_eq!(rx.try_recv_weighed().ok(), Some((3, 5)));
        assert!(matches!(rx.try_recv_weighed(), Err(TryRecvError::Empty)));
    }

    #[tokio::test]
    async fn a_batch_holds_its_room_until_its_last_message_is_taken() {
        let (tx, mut rx) = channel::<u32>(3, 1000);
        tx.send_all(vec![(0, 400), (1, 400)]).await.unwrap();
        assert_eq!(rx.queued_bytes(), 800);
        let next = tx.send_all(vec![(2, 100), (3, 100)]);
        tokio::pin!(next);
        assert!(
            futures_poll_once(next.as_mut()).await.is_none(),
            "4 messages would pass the count of 3"
        );
        assert_eq!(rx.recv().await, Some(0));
        assert!(
            futures_poll_once(next.as_mut()).await.is_none(),
            "the batch's room is still held"
        );
        assert_eq!(rx.recv().await, Some(1));
        assert_eq!(rx.queued_bytes(), 0);
        next.await.unwrap();
        assert_eq!(rx.queued_bytes(), 200);
    }

    #[tokio::test]
    async fn a_batch_heavier_than_the_byte_bound_passes_once_the_queue_is_empty() {
        let (tx, mut rx) = channel::<u32>(16, 1000);
        tx.send_all(vec![(0, 1)]).await.unwrap();
        let heavy = tx.send_all(vec![(1, 700), (2, 700)]);
        tokio::pin!(heavy);
        assert!(futures_poll_once(heavy.as_mut()).await.is_none());
        assert_eq!(rx.recv().await, Some(0));
        heavy.await.unwrap();
        assert_eq!(rx.queued_bytes(), 1000);
        assert_eq!([rx.try_recv(), rx.try_recv()].map(Result::ok), [Some(1), Some(2)]);
    }

    #[tokio::test]
    async fn messages_sent_to_nobody_come_back() {
        let (tx, rx) = channel::<u32>(16, 1000);
        drop(rx);
        assert_eq!(tx.send_all(vec![(7, 1), (8, 1)]).await, Err(vec![(7, 1), (8, 1)]));
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
