"""The workspace of a conversation: its branch's worktree, sandboxed commands, ``repo.*``."""
