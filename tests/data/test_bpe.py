"""Byte-level BPE: merges learned in order, exact round trip on any Unicode string (hypothesis), clear errors."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from minima.bpe import BPETokenizer

ENGLISH = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
           "First Citizen:\nYou are all resolved rather to die than to famish?\n") * 20


@pytest.fixture(scope='module')
def tok(): return BPETokenizer.train(ENGLISH, 320)


def test_textbook_example():
    t = BPETokenizer.train('aaabdaaabac', 259)
    assert list(t.merges) == [(97, 97), (256, 97), (257, 98)]
    assert t.encode('aaabdaaabac') == [258, 100, 258, 97, 99]


def test_training_compresses_and_stops(tok):
    assert len(tok) == 320 and len(tok.encode(ENGLISH)) < len(ENGLISH.encode()) / 3
    assert len(BPETokenizer.train('abcdef', 300)) == 256          # no pair occurs twice: no merges
    with pytest.raises(ValueError, match='vocab_size'): BPETokenizer.train('abc', 100)


def test_ids_in_range_and_vocab_consistent(tok):
    ids = tok.encode('Speak, citizen! 🙂')
    assert all(0 <= i < len(tok) for i in ids)
    for (a, b), i in tok.merges.items(): assert tok.vocab[i] == tok.vocab[a] + tok.vocab[b]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_round_trip_any_unicode(tok, s):
    assert tok.decode(tok.encode(s)) == s


@settings(max_examples=25, deadline=None)
@given(st.text(min_size=1, max_size=300), st.text(max_size=100))
def test_round_trip_trained_on_random_text(corpus, s):
    t = BPETokenizer.train(corpus, 280)
    assert t.decode(t.encode(s)) == s and t.decode(t.encode(corpus)) == corpus


def test_decode_accepts_numpy_and_replaces_invalid(tok):
    assert tok.decode(np.array(tok.encode('hear me'))) == 'hear me'
    assert tok.decode([0xE6, 0x97]) == '\ufffd'          # a cut multi-byte character
