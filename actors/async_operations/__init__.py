"""Async tool calls: the runner that executes them outside their conversation actor."""
