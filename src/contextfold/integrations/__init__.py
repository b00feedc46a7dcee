"""Integrations with agent frameworks; each module imports its framework and needs its extra."""
