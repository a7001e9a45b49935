"""Fault and load scenarios for pq: prove that nothing is lost and nothing is doubled.

Each scenario (``reliability.scenarios``) starts real worker, scheduler and submitter
processes against a real database, injects faults (SIGKILLs, database server kills, restart
signals, contention, simulated time), then checks the guarantees from the database and from
append-only ledgers the handlers and submitters write. ``python -m reliability`` runs them and
records their figures; ``tests/reliability`` runs reduced versions in CI. See
docs/reliability.md.
"""
