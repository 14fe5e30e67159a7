"""Operator commands of the ``zapomni`` console script that move a namespace: export,
import and reembed (docs/operations.md, "Move a namespace")."""
