"""The queue API: Queue and its parts, tasks, transactions, handlers, tracing."""
