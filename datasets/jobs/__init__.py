"""Background work as people and agents follow it: a job's progress and log."""
