import pytest

from zapomni.shared.text.chunking import Chunker

# short sentences: the splitter overlaps by whole units that fit the overlap budget
TEXT = "Zapomni remembers. Über-long notes stay. Naïve café owners smile. 日本語です。 " * 80


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    return Chunker(chunk_tokens=64, overlap=16)


def test_offsets_point_at_the_chunk_text(chunker):
    chunks = chunker.split(TEXT)
    assert len(chunks) > 5
    for i, chunk in enumerate(chunks):
        assert chunk.idx == i
        assert TEXT[chunk.char_start:chunk.char_end] == chunk.text


def test_chunks_fit_the_token_budget_and_overlap(chunker):
    chunks = chunker.split(TEXT)
    assert all(0 < c.tokens <= chunker.capacity for c in chunks)
    assert chunker.capacity == 62  # room for [CLS] and [SEP]
    overlapping = sum(1 for a, b in zip(chunks, chunks[1:], strict=False)
                      if b.char_start < a.char_end)
    assert overlapping >= len(chunks) // 2
    covered = chunks[-1].char_end - chunks[0].char_start
    assert covered >= len(TEXT.strip()) - 1


def test_tokenizer_truncation_is_off_so_large_texts_split():
    """The vendored tokenizer.json truncates at 128 tokens; left on, the splitter would see
    every text as short and return one chunk for a whole document."""
    chunker = Chunker(chunk_tokens=256, overlap=32)
    text = "A sentence about retrieval and memory. " * 5000
    chunks = chunker.split(text)
    assert len(chunks) > 100
    assert max(c.tokens for c in chunks) <= 254


def test_short_text_is_one_chunk(chunker):
    chunks = chunker.split("just a note")
    assert [(c.text, c.char_start, c.char_end) for c in chunks] == [("just a note", 0, 11)]


def test_chunks_never_exceed_what_the_in_process_model_reads():
    from zapomni.shared.settings import Settings
    from zapomni.shared.text.chunking import chunk_budget

    assert chunk_budget(Settings(chunk_tokens=512)) == 256
    assert chunk_budget(Settings(chunk_tokens=128)) == 128
    assert chunk_budget(Settings(chunk_tokens=512, ollama_url="http://o:11434")) == 512


def test_small_chunk_sizes_keep_overlap_below_the_minimum():
    chunks = Chunker(chunk_tokens=48, overlap=32).split(TEXT)
    assert len(chunks) > 10 and all(c.tokens <= 46 for c in chunks)
