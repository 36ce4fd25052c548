//! A session's open claimed in the store for the whole fleet (`docs/scale-out.md` R8b):
//! kept alive while the open runs, however long its steps take, and let go when it ends.
//! A claim whose replica dies lapses with its lease; one whose keep-alive stopped (a
//! store outage) lapses after [`SESSION_OPEN_HOLD`].

use std::sync::Arc;
use std::time::Duration;

use cursor_runner_store::{Store, StoreResult};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a claim holds past its last renewal.
pub const SESSION_OPEN_HOLD: Duration = Duration::from_secs(60);

/// How often a held claim is renewed: three renewals fit in one hold.
pub const SESSION_OPEN_RENEW_EVERY: Duration = Duration::from_secs(20);

/// The store's claim of one session's open, held by this process; let go by
/// [`FleetClaim::release`], or in the background when dropped.
pub(super) struct FleetClaim {
    held: Option<Held>,
}

struct Held {
    store: Arc<dyn Store>,
    tenant_id: String,
    session_id: String,
    claim_id: String,
    /// Dropped to stop the keep-alive.
    stop: oneshot::Sender<()>,
    keep_alive: JoinHandle<()>,
}

impl FleetClaim {
    /// Claims the tenant's session for an open here; `None` while another replica's claim
    /// is live.
    pub(super) async fn take(store: &Arc<dyn Store>, tenant_id: &str, session_id: &str) -> StoreResult<Option<Self>> {
        let claim_id = uuid::Uuid::now_v7().to_string();
        if !store
            .claim_session_open(tenant_id, session_id, &claim_id, SESSION_OPEN_HOLD)
            .await?
        {
            return Ok(None);
        }
        let (stop, stopped) = oneshot::channel();
        let keep_alive = tokio::spawn(keep_alive(
            store.clone(),
            (tenant_id.to_owned(), session_id.to_owned(), claim_id.clone()),
            stopped,
        ));
        Ok(Some(Self {
            held: Some(Held {
                store: store.clone(),
                tenant_id: tenant_id.to_owned(),
                session_id: session_id.to_owned(),
                claim_id,
                stop,
                keep_alive,
            }),
        }))
    }

    /// Stops the keep-alive (its last renewal done), then lets the claim go.
    pub(super) async fn release(mut self) {
        if let Some(held) = self.held.take() {
            held.let_go().await;
        }
    }
}

impl Drop for FleetClaim {
    fn drop(&mut self) {
        if let Some(held) = self.held.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(held.let_go());
        }
    }
}

impl Held {
    async fn let_go(self) {
        drop(self.stop);
        // A renewal in flight lands before the release, never after it.
        let _ = self.keep_alive.await;
        if let Err(e) = self
            .store
            .release_session_open(&self.tenant_id, &self.session_id, &self.claim_id)
            .await
        {
            tracing::warn!(error = %e, "letting a session's open claim go failed; it lapses with its hold");
        }
    }
}

/// Renews the claim every [`SESSION_OPEN_RENEW_EVERY`] until stopped or no longer held.
async fn keep_alive(
    store: Arc<dyn Store>,
    (tenant_id, session_id, claim_id): (String, String, String),
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            () = tokio::time::sleep(SESSION_OPEN_RENEW_EVERY) => {}
        }
        match store
            .renew_session_open(&tenant_id, &session_id, &claim_id, SESSION_OPEN_HOLD)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(session_id = %session_id, "a session's open claim lapsed before its open ended");
                return;
            }
            Err(e) => tracing::warn!(error = %e, "renewing a session's open claim failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cursor_runner_store::MemoryStore;

    /// Whether the claim `claim_id` of session `s` is still held (renewing it says).
    async fn held(store: &Arc<dyn Store>, claim_id: &str) -> bool {
        store
            .renew_session_open("t", "s", claim_id, SESSION_OPEN_HOLD)
            .await
            .unwrap()
    }

    fn claim_id(claim: &FleetClaim) -> String {
        claim.held.as_ref().expect("held").claim_id.clone()
    }

    #[tokio::test]
    async fn a_released_claim_is_no_longer_held() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let claim = FleetClaim::take(&store, "t", "s").await.unwrap().expect("free");
        let id = claim_id(&claim);
        assert!(held(&store, &id).await);
        claim.release().await;
        assert!(!held(&store, &id).await);
    }

    #[tokio::test]
    async fn a_claim_dropped_without_its_release_is_let_go_in_the_background() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let claim = FleetClaim::take(&store, "t", "s").await.unwrap().expect("free");
        let id = claim_id(&claim);
        drop(claim);
        tokio::time::timeout(Duration::from_secs(5), async {
            while held(&store, &id).await {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("let go");
    }

    #[tokio::test(start_paused = true)]
    async fn a_keep_alive_stops_once_its_claim_was_taken_over_and_its_release_leaves_the_new_one() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let claim = FleetClaim::take(&store, "t", "s").await.unwrap().expect("free");
        let id = claim_id(&claim);
        // Another holder's claim would make the renewal fail: take it over and watch the
        // keep-alive stop renewing (it no longer holds anything).
        assert!(
            store
                .claim_session_open("t", "s", "other", SESSION_OPEN_HOLD)
                .await
                .unwrap()
        );
        tokio::time::sleep(SESSION_OPEN_RENEW_EVERY * 2).await;
        assert!(
            claim.held.as_ref().unwrap().keep_alive.is_finished(),
            "a keep-alive that lost its claim stops"
        );
        assert!(!held(&store, &id).await);
        claim.release().await;
        assert!(held(&store, "other").await, "its release leaves the other claim alone");
    }
}
