"""The default library: YAML personas, tools, tasks and model profiles, plus Python callables."""
