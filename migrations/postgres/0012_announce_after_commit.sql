-- Event heads are announced by the writing replica after its commit (`store::sql::announce`),
-- no longer by a trigger inside it: a transaction that notifies holds a database-wide lock
-- from its pre-commit until its commit record is flushed (PostgreSQL keeps the notification
-- queue in commit order), so every append of every execution waited for the fsync of the
-- one before it.
DROP TRIGGER events_announce_heads ON events;
DROP FUNCTION cr_announce_event_heads();
