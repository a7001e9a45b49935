"""pqweb: the web dashboard of pq (queue_core, perfectsched, pqflow), server-rendered.

The top layer: it reads through the public APIs of the packages below it, and nothing below
imports it. Start it with ``pqweb --listen 127.0.0.1:8080`` (:mod:`pqweb.cli`), or build the
application with :func:`pqweb.app.create_app`.
"""
