//! Which database failures are transient: they say nothing about the request, and the same
//! operation may succeed once the database is back.

use sqlx::postgres::PgDatabaseError;
use sqlx::sqlite::SqliteError;

/// PostgreSQL SQLSTATEs (or classes, by their first two characters) that pass.
const TRANSIENT_PG_CLASSES: [&str; 1] = [
    "08", // connection exception
];
const TRANSIENT_PG_CODES: [&str; 8] = [
    "57P01", // admin_shutdown: the server is stopping (a restart, `pg_ctl stop -m fast`)
    "57P02", // crash_shutdown
    "57P03", // cannot_connect_now: the server is starting up or shutting down
    "53300", // too_many_connections
    "40001", // serialization_failure
    "40P01", // deadlock_detected
    // A database that is up but refuses us for now: "not currently accepting connections"
    // (`ALLOW_CONNECTIONS false`, maintenance) is the only 55000 a connection attempt meets,
    // and a read-only transaction is what a fail-over that lands the pool on a standby
    // gives until it reconnects to the new primary.
    "55000", // object_not_in_prerequisite_state
    "25006", // read_only_sql_transaction
];
/// SQLite's primary result codes for a database another connection holds.
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;

/// Whether `e` is the server's word that it ended the connection's session (a restart, a
/// terminated backend): whatever the session was running was rolled back, and the next
/// connection may well serve. A link lost without that word is not one: what was sent may
/// have committed.
pub(crate) fn is_lost_session(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<PgDatabaseError>()
            .is_some_and(|pg| SESSION_ENDED_PG_CODES.contains(&pg.code())),
        _ => false,
    }
}

/// The SQLSTATEs with which the server ends a session it had accepted.
const SESSION_ENDED_PG_CODES: [&str; 2] = ["57P01", "57P02"];

pub(crate) fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
                let code = pg.code();
                TRANSIENT_PG_CODES.contains(&code) || TRANSIENT_PG_CLASSES.iter().any(|class| code.starts_with(class))
            } else if db.try_downcast_ref::<SqliteError>().is_some() {
                // Extended codes keep the primary code in their low byte.
                let primary = db.code().and_then(|c| c.parse::<i64>().ok()).map(|c| c & 0xff);
                matches!(primary, Some(SQLITE_BUSY | SQLITE_LOCKED))
            } else {
                false
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_or_an_exhausted_pool_is_transient() {
        assert!(is_transient(&sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused
        ))));
        assert!(is_transient(&sqlx::Error::PoolTimedOut));
    }

    #[test]
    fn a_link_lost_without_the_servers_word_is_not_a_lost_session() {
        use std::io::{Error, ErrorKind};
        for kind in [
            ErrorKind::ConnectionReset,
            ErrorKind::BrokenPipe,
            ErrorKind::UnexpectedEof,
        ] {
            assert!(!is_lost_session(&sqlx::Error::Io(Error::from(kind))), "{kind:?}");
        }
        assert!(!is_lost_session(&sqlx::Error::PoolTimedOut));
        assert!(!is_lost_session(&sqlx::Error::RowNotFound));
    }

    #[test]
    fn a_bad_request_or_a_missing_row_is_not() {
        assert!(!is_transient(&sqlx::Error::RowNotFound));
        assert!(!is_transient(&sqlx::Error::Protocol("unexpected message".into())));
        assert!(!is_transient(&sqlx::Error::PoolClosed));
    }
}
