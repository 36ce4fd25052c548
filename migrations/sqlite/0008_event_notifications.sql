-- PostgreSQL announces event heads to other replicas here (`cr_events`). An embedded
-- SQLite database serves one replica, whose own writers move every head: nothing to add.
SELECT 1;
