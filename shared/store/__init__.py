"""Where memories live: FalkorDB's connection (graphstore.py), the Cypher by area
(cypher_schema.py says how it is laid out), stored-shape migrations, replication, deletes and
access events."""
