"""Vectors: the Ollama and in-process embedders, their pinned model files, the vector cache."""
