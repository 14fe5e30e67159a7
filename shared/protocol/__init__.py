"""Every value that crosses a process or storage boundary (shared/protocol/base.py says
how the modules divide them)."""
