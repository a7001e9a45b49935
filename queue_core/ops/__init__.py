"""What operators run beside the queue: Prometheus metrics and their HTTP server."""
