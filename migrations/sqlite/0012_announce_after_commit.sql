-- PostgreSQL moves its event-head announcements out of the commit here. An embedded SQLite
-- database announces nothing: nothing to change.
SELECT 1;
