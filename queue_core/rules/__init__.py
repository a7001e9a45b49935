"""The queue's rules as pure functions and checks: no I/O, no SQL, no clock."""
