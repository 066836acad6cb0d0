"""The rest of tiktoken's Encoding interface, so that code written for tiktoken runs on a
Tokenizer unchanged: eot_token, max_token_value, is_special_token, encode_single_token,
encode_ordinary_batch, encode_to_numpy, decode_batch, decode_bytes_batch, token_byte_values.
(Encoding.name is Tokenizer's name attribute: the loaded file's name without extension.)

Also its attributes _mergeable_ranks, _special_tokens and _pat_str, which converters read.
Not provided: encode_with_unstable (AttributeError).

Tokenizer's own encode, encode_ordinary, encode_batch, decode, decode_bytes,
decode_single_token_bytes, decode_tokens_bytes, decode_with_offsets, n_vocab and
special_tokens_set already take tiktoken's arguments.  One difference is
deliberate: encode's default is allowed_special="all" (special tokens in the text become
their ids, as the CS336 tokenizer and HF do), where tiktoken's default raises on them; pass
allowed_special=set(), disallowed_special="all" for tiktoken's behaviour.

These are methods of Tokenizer (a mixin): they use its public methods, its _special dict
{str: id} and its _vocab dict {id: bytes} of ordinary tokens.
"""
__all__ = ["TiktokenMethods"]


class TiktokenMethods:
    """Mixin of tiktoken.Encoding's remaining methods (see the module docstring)."""

    @property
    def eot_token(self) -> int:
        """The id of "<|endoftext|>"; KeyError when the tokenizer has no such special token
        (as tiktoken)."""
        return self._special["<|endoftext|>"]

    @property
    def max_token_value(self) -> int:
        """The largest id, ordinary or special."""
        return self.n_vocab - 1

    def is_special_token(self, token: int) -> bool:
        """True when the id is one of the special tokens'."""
        return token in self._special.values()

    def encode_single_token(self, text_or_bytes) -> int:
        """The id of the one token whose bytes these are (an ordinary token, else a special
        one); KeyError(bytes) when there is none, as tiktoken."""
        b = text_or_bytes.encode("utf-8") if isinstance(text_or_bytes, str) \
            else bytes(text_or_bytes)
        i = self.token_to_id(b)
        if i is not None:
            return i
        for s, j in self._special.items():
            if s.encode("utf-8") == b:
                return j
        raise KeyError(b)

    def encode_ordinary_batch(self, text, *, num_threads=None) -> list:
        """[encode_ordinary(t) for t in text], in parallel (encode_batch's threads)."""
        return self.encode_batch(text, num_threads=num_threads, allowed_special=set(),
                                 disallowed_special=())

    def encode_to_numpy(self, text, *, allowed_special="all", disallowed_special=()):
        """encode's ids as a numpy uint32 array."""
        import numpy as np
        return np.array(self.encode(text, allowed_special=allowed_special,
                                    disallowed_special=disallowed_special), dtype=np.uint32)

    def decode_batch(self, batch, *, errors: str = "replace", num_threads=None) -> list:
        """[decode(ids, errors=errors) for ids in batch].  num_threads is accepted for
        tiktoken's signature; decoding runs on this thread (it is a copy of bytes)."""
        return [self.decode(ids, errors=errors) for ids in batch]

    def decode_bytes_batch(self, batch, *, num_threads=None) -> list:
        """[decode_bytes(ids) for ids in batch] (num_threads: as decode_batch)."""
        return [self.decode_bytes(ids) for ids in batch]

    # tiktoken's private attributes, which code converting an Encoding to other formats
    # reads (a tokenizer.json exporter: ranks, specials and pattern); copies, as read-only.
    @property
    def _mergeable_ranks(self) -> dict:
        """{bytes: id} of the ordinary tokens."""
        return {b: i for i, b in self._vocab.items()}

    @property
    def _special_tokens(self) -> dict:
        """{str: id} of the special tokens."""
        return dict(self._special)

    @property
    def _pat_str(self) -> str:
        """The split pattern's regex (the regex module's dialect, as tiktoken's)."""
        return self._pattern_regex

    def token_byte_values(self) -> list:
        """The bytes of every ordinary token, sorted (tiktoken's order)."""
        return sorted(self._vocab.values())
