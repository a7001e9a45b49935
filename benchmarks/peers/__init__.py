"""The queues pq is compared with, side by side in the same run (issue 5).

Each is skipped (and reported as such) when its packages are missing — they come with the
``bench`` extra only — and each run of each peer is wrapped so that a failure is recorded as
``failed: <reason>`` instead of ending the benchmark.

The registry is :mod:`benchmarks.peers.registry`; this package itself imports nothing, so a
peer's worker importing its task module (RQ does it in every forked work horse) loads only
that small module.
"""
