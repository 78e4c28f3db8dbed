"""Planners: pure functions of (lengths, config, seed, epoch) that return a BatchPlan."""
