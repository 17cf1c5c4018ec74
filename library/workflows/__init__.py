"""Workflow graphs of the default library (``*.yaml``) and the Python steps their tasks call."""
