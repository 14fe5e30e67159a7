"""The graph store: its Cypher, by area (cypher_schema.py says how they are laid out)."""
