"""Wonder's pure core: domain models, planning, stores and the LLM/embedding protocols.

Nothing under ``core`` imports Ray: it is the part of the system that can be reasoned about and
tested without a cluster.
"""
