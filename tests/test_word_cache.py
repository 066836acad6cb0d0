"""The word cache's growth (csrc/cache.c): it doubles its capacity, up to 4 times the capacity
asked for, when the pieces it emptied out keep coming back (the same text encoded again), and
stays at its capacity on text whose pieces do not return.  Its ids are checked against a
tokenizer without a cache, and against tiktoken on real text where the vocabularies are."""
import random

import pytest

from bpe_cffi import Tokenizer

from conftest import read_corpus, tiktoken_encoding, vocab_path

GROWTH = 4           # BPE_CACHE_GROWTH in csrc/cache.h


def letter_tokenizer(cache_capacity):
    """Bytes, and the pairs of the letters a-h merged: a piece of letters is rarely a token,
    so nearly every word of random letters is merged and cached."""
    vocab = {b: bytes([b]) for b in range(256)}
    merges = []
    for x in b"abcdefgh":
        for y in b"abcdefgh":
            pair = bytes([x, y])
            vocab[len(vocab)] = pair
            merges.append((bytes([x]), bytes([y])))
    return Tokenizer(vocab, merges, cache_capacity=cache_capacity)


def random_words(rng, n):
    """n distinct words of 6 to 12 random letters, each after a space."""
    words = set()
    while len(words) < n:
        words.add(" " + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                                for _ in range(rng.randint(6, 12))))
    return list(words)


def test_cache_grows_when_a_text_comes_round_again():
    rng = random.Random(7)
    text = "".join(random_words(rng, 2500))
    tok = letter_tokenizer(1024)
    plain = letter_tokenizer(0)
    expect = plain.encode_ordinary(text)
    assert tok._cache_size() == (0, 0)           # made on first use
    assert tok.encode_ordinary(text) == expect
    assert tok._cache_size()[1] == 1024          # first pass: nothing came back yet
    for _ in range(3):
        assert tok.encode_ordinary(text) == expect
    count, capacity = tok._cache_size()
    assert 1024 < capacity <= GROWTH * 1024
    assert count >= 2400                          # every word held: the last passes hit
    assert plain._cache_size() == (0, 0)


def test_cache_growth_is_bounded():
    rng = random.Random(8)
    text = "".join(random_words(rng, 2000))      # more words than 2 x 512, fewer than 4 x
    tok = letter_tokenizer(512)
    expect = letter_tokenizer(0).encode_ordinary(text)
    for _ in range(6):
        assert tok.encode_ordinary(text) == expect
        assert tok._cache_size()[1] <= GROWTH * 512
    assert tok._cache_size()[1] == GROWTH * 512


def test_cache_does_not_grow_for_text_that_no_growth_would_hold():
    # the same text again, but with more words than 4 x 512: a larger cache would still
    # empty itself before they came back, so it keeps its capacity
    rng = random.Random(11)
    text = "".join(random_words(rng, 6000))
    tok = letter_tokenizer(512)
    for _ in range(3):
        tok.encode_ordinary(text)
        assert tok._cache_size()[1] == 512


def test_cache_keeps_its_capacity_on_new_text():
    rng = random.Random(9)
    tok = letter_tokenizer(1024)
    plain = letter_tokenizer(0)
    seen = set()
    for _ in range(12):                            # ~9 times the capacity, each word once
        words = [w for w in random_words(rng, 800) if w not in seen]
        seen.update(words)
        text = "".join(words)
        assert tok.encode_ordinary(text) == plain.encode_ordinary(text)
        assert tok._cache_size()[1] == 1024


def test_a_grown_cache_is_copied_to_the_batch_workers():
    rng = random.Random(10)
    words = random_words(rng, 2500)
    text = "".join(words)
    docs = ["".join(words[i:i + 50]) for i in range(0, len(words), 50)] * 2
    tok = letter_tokenizer(1024)
    plain = letter_tokenizer(0)
    for _ in range(3):
        tok.encode_ordinary(text)
    grown = tok._cache_size()[1]
    assert grown > 1024
    assert tok.encode_batch(docs, num_threads=2) == [plain.encode_ordinary(d) for d in docs]
    others = [tok._cache_size(slot)[1] for slot in range(1, 64)]
    assert max(others) in (0, grown)             # a worker that started copied the grown cache


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_grown_cache_gives_tiktoken_ids_on_real_text(name):
    enc = tiktoken_encoding(name)
    text = read_corpus("multilingual", 300_000, offset=2_000_000)
    # 300 KB of this text hold ~9K pieces that are not tokens: more than 4096, fewer than 4 x
    tok = Tokenizer.from_tiktoken(vocab_path(f"{name}.tiktoken"),
                                  pattern=name.split("_")[0], cache_capacity=4096)
    expect = enc.encode_ordinary(text)
    for _ in range(3):
        assert tok.encode_ordinary(text) == expect
    assert tok._cache_size()[1] > 4096
