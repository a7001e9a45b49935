"""The worker runtime: supervisor, processors, monitors, settlers, signals, service loop."""
