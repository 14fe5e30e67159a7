"""Text in: files and their text, chunks, the words the keyword signal counts, entity mentions."""
