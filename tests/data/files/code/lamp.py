def trim_wick(length: float) -> float:
    """Trim the wick of the albatross lamp to ``length`` millimetres."""
    return max(0.0, length - 2.5)
