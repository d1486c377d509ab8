"""Execution: sweeps, their local and Ray executors, and seed-parallel training."""
