//! The memory store's `replicas` rows: one process, so like SQLite every earlier
//! incarnation is a predecessor; like PostgreSQL its lease is finite, measured on this
//! store's clock (the "database's").

use std::collections::BTreeMap;

use crate::contract::{StoreError, StoreResult};
use crate::records::now_ms;
use crate::replica::*;
use cursor_runner_domain::placement::WarmKey;

#[derive(Clone, Default)]
pub(super) struct Replicas {
    rows: BTreeMap<String, Row>,
    /// This store's registration: its incarnation and terms.
    me: Option<(String, LeaseTerms)>,
}

#[derive(Clone)]
struct Row {
    name: String,
    address: Option<String>,
    draining: bool,
    ended: bool,
    lease_until_ms: i64,
    /// The warm keys it published last.
    warm: Vec<WarmKey>,
}

pub(super) fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Replicas {
    pub(super) fn register(
        &mut self,
        name: &str,
        address: Option<&str>,
        terms: LeaseTerms,
    ) -> StoreResult<Registration> {
        if self.me.is_some() {
            return Err(StoreError::Database("this store registered its replica already".into()));
        }
        let now = now_ms();
        let mut predecessors = vec![LEGACY_INCARNATION.to_owned()];
        for (incarnation, row) in self.rows.iter_mut().filter(|(_, row)| !row.ended) {
            row.ended = true;
            row.lease_until_ms = row.lease_until_ms.min(now);
            predecessors.push(incarnation.clone());
        }
        let incarnation = uuid::Uuid::now_v7().to_string();
        let lease_until_ms = now.saturating_add(millis(terms.length));
        self.rows.insert(
            incarnation.clone(),
            Row {
                name: name.to_owned(),
                address: address.map(str::to_owned),
                draining: false,
                ended: false,
                lease_until_ms,
                warm: Vec::new(),
            },
        );
        self.me = Some((incarnation.clone(), terms));
        Ok(Registration {
            incarnation,
            name: name.to_owned(),
            lease_until_ms,
            predecessors,
        })
    }

    pub(super) fn renew(&mut self) -> StoreResult<Renewal> {
        let Some((incarnation, terms)) = &self.me else {
            return Err(StoreError::Database("no replica registered to renew".into()));
        };
        let now = now_ms();
        let row = self.rows.get_mut(incarnation).expect("registered");
        if row.ended || row.lease_until_ms <= now {
            return Ok(Renewal::Lost);
        }
        row.lease_until_ms = now.saturating_add(millis(terms.length));
        Ok(Renewal::Held {
            lease_until_ms: row.lease_until_ms,
        })
    }

    /// This store's lease terms, once registered.
    pub(super) fn terms(&self) -> Option<LeaseTerms> {
        self.me.as_ref().map(|(_, terms)| *terms)
    }

    /// Whether `incarnation`'s lease is live now.
    pub(super) fn lease_live(&self, incarnation: &str) -> bool {
        self.rows
            .get(incarnation)
            .is_some_and(|row| !row.ended && row.lease_until_ms > now_ms())
    }

    /// Incarnations other than this one and the pre-scale-out one whose lease has ended
    /// and under whose name no live incarnation serves (the SQL candidates of a takeover).
    pub(super) fn ended_elsewhere(&self) -> Vec<String> {
        let me = self.me.as_ref().map(|(incarnation, _)| incarnation.as_str());
        let live_names: Vec<&str> = self
            .rows
            .iter()
            .filter(|(incarnation, _)| self.lease_live(incarnation))
            .map(|(_, row)| row.name.as_str())
            .collect();
        self.rows
            .iter()
            .filter(|(incarnation, row)| {
                Some(incarnation.as_str()) != me
                    && incarnation.as_str() != LEGACY_INCARNATION
                    && !self.lease_live(incarnation)
                    && !live_names.contains(&row.name.as_str())
            })
            .map(|(incarnation, _)| incarnation.clone())
            .collect()
    }

    /// The incarnations other than this one that serve (a live lease) and take forwarded
    /// calls, whether each published the `wanted` warm key, and where; none until this
    /// store registers.
    pub(super) fn serving_elsewhere(&self, wanted: Option<&WarmKey>) -> Vec<(String, bool, ReplicaAddress)> {
        let Some((me, _)) = &self.me else { return Vec::new() };
        self.rows
            .iter()
            .filter(|(incarnation, row)| *incarnation != me && !row.draining && self.lease_live(incarnation))
            .filter_map(|(incarnation, row)| {
                let address = row.address.clone()?;
                Some((
                    incarnation.clone(),
                    wanted.is_some_and(|key| row.warm.contains(key)),
                    ReplicaAddress {
                        name: row.name.clone(),
                        address,
                    },
                ))
            })
            .collect()
    }

    /// Replaces the warm keys this store's replica published.
    pub(super) fn publish_warm(&mut self, warm: &[WarmKey]) {
        if let Some((incarnation, _)) = &self.me
            && let Some(row) = self.rows.get_mut(incarnation)
            && !row.ended
        {
            row.warm = warm.to_vec();
        }
    }

    /// Marks this store's replica draining (no new executions are placed on it).
    pub(super) fn drain(&mut self) {
        if let Some((incarnation, _)) = &self.me
            && let Some(row) = self.rows.get_mut(incarnation)
        {
            row.draining = true;
        }
    }

    pub(super) fn end(&mut self) {
        if let Some((incarnation, _)) = &self.me
            && let Some(row) = self.rows.get_mut(incarnation)
        {
            row.ended = true;
            row.lease_until_ms = row.lease_until_ms.min(now_ms());
        }
    }

    /// The replica that is `incarnation` (named `pre-scale-out` for [`LEGACY_INCARNATION`]).
    pub(super) fn owner(&self, incarnation: &str) -> ExecutionOwner {
        let row = self.rows.get(incarnation);
        ExecutionOwner {
            incarnation: incarnation.to_owned(),
            name: match row {
                Some(row) => row.name.clone(),
                None if incarnation == LEGACY_INCARNATION => "pre-scale-out".into(),
                None => String::new(),
            },
            address: row.and_then(|row| row.address.clone()),
            serving: self.lease_live(incarnation),
        }
    }
}
