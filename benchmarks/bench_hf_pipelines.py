"""tokenizer.json files whose pipeline runs partly in Python, against HF `tokenizers` on the
same file, in one run: encode of one text and encode_batch of its paragraphs, ratios printed.

    python benchmarks/bench_hf_pipelines.py [--mb 2] [--vocab-size 30000] [--reps 3]

Each layout is trained by HF on English prose from ../shared/corpora (the first 4 MB), saved,
and loaded by bpe_cffi.load; both then encode the next --mb MB (ids checked equal):
  quicktour   BPE + Whitespace pre-tokenizer (HF's quicktour)
  charbpe     HF's CharBPETokenizer layout: BertNormalizer, BertPreTokenizer, "</w>"
  metaspace   BPE + Metaspace (SentencePiece-like)
  qwen        Qwen2's: NFC normalizer, its split regex, byte-level
  roberta     GPT-2's byte-level split with RoBERTa's added tokens (<mask> takes the space
              before it: lstrip), so the tokens are found in Python and the rest in C
Times are the best of --reps calls (HF's batch uses its own threads; ours as encode_batch
decides).  This machine is shared and noisy: read the ratios.
"""
import argparse
import lzma
import warnings

from bench_encode import CORPORA, best_of

import tokenizers
from tokenizers import AddedToken, decoders as D, models, normalizers as N
from tokenizers import pre_tokenizers as P, trainers

import bpe_cffi


def quicktour():
    t = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    t.pre_tokenizer = P.Whitespace()
    return t, dict(special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"])


def charbpe():
    t = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    t.normalizer = N.BertNormalizer()
    t.pre_tokenizer = P.BertPreTokenizer()
    t.decoder = D.BPEDecoder()
    return t, dict(special_tokens=["<unk>"], end_of_word_suffix="</w>")


def metaspace():
    t = tokenizers.Tokenizer(models.BPE())
    t.pre_tokenizer = P.Metaspace()
    t.decoder = D.Metaspace()
    return t, {}


QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def qwen():
    """Qwen2's layout: NFC, then its own split regex (cl100k's with single digits) and a
    byte-level mapping."""
    t = tokenizers.Tokenizer(models.BPE())
    t.normalizer = N.NFC()
    t.pre_tokenizer = P.Sequence([P.Split(tokenizers.Regex(QWEN_SPLIT), "isolated"),
                                  P.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = D.ByteLevel()
    return t, dict(initial_alphabet=P.ByteLevel.alphabet())


def roberta():
    t = tokenizers.Tokenizer(models.BPE())
    t.pre_tokenizer = P.ByteLevel(add_prefix_space=False)
    t.decoder = D.ByteLevel()
    return t, dict(initial_alphabet=P.ByteLevel.alphabet(), special_tokens=[
        AddedToken(s, special=True, normalized=True) for s in ("<s>", "</s>", "<pad>",
                                                               "<unk>")] + [
        AddedToken("<mask>", lstrip=True, special=True, normalized=False)])


LAYOUTS = {"quicktour": quicktour, "charbpe": charbpe, "metaspace": metaspace,
           "qwen": qwen, "roberta": roberta}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=2.0, help="MB of prose encoded (default 2)")
    ap.add_argument("--vocab-size", type=int, default=30000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--layouts", nargs="*", default=list(LAYOUTS))
    a = ap.parse_args()
    with lzma.open(CORPORA / "en_books.txt.xz", "rb") as f:
        train = f.read(4_000_000).decode("utf-8", "ignore")
        text = f.read(int(a.mb * 1e6)).decode("utf-8", "ignore")
    docs = [d for d in text.split("\n\n") if d]
    import tempfile
    tmp = tempfile.mkdtemp()
    print(f"bench_hf_pipelines: {len(text.encode()) / 1e6:.1f} MB of en_books, "
          f"{len(docs)} paragraphs; best of {a.reps}")
    print("| layout | HF encode ms | ours ms | ratio | HF encode_batch ms | ours ms | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name in a.layouts:
        hf, opts = LAYOUTS[name]()
        hf.train_from_iterator(train.splitlines(), trainers.BpeTrainer(
            vocab_size=a.vocab_size, show_progress=False, **opts))
        path = f"{tmp}/{name}.json"
        hf.save(path)
        hf = tokenizers.Tokenizer.from_file(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = bpe_cffi.load(path)
        th, ih = best_of(lambda: hf.encode(text, add_special_tokens=False).ids, a.reps)
        to, io = best_of(lambda: ours.encode(text), a.reps)
        bh, jh = best_of(lambda: [e.ids for e in hf.encode_batch(docs,
                                                                  add_special_tokens=False)],
                         a.reps)
        bo, jo = best_of(lambda: ours.encode_batch(docs), a.reps)
        if ih != io or jh != jo:
            raise SystemExit(f"{name}: ids differ from HF's")
        print(f"| {name} | {th * 1e3:.0f} | {to * 1e3:.0f} | {th / to:.2f}x | {bh * 1e3:.0f} | "
              f"{bo * 1e3:.0f} | {bh / bo:.2f}x |")


if __name__ == "__main__":
    main()
