"""Rollback of failed (or, forced, the latest completed) writes: plan, planner, executor, policy.

It lives in the table layer, not services/, because the writer itself rolls back: its own instant
when an error is raised after the instant exists, and (policy EAGER) failed writes before it starts.
"""
