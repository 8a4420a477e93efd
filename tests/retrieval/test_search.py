"""Encoding and search (condenser_lite/retrieval/search.py): the XLA branch of encode, exact top-k
search with FAISS, the memory budget, and shard-by-shard search over embeddings on disk."""

import contextlib

import numpy as np
import pytest

from condenser_lite.retrieval.biencoder import BiEncoder
from condenser_lite.retrieval.search import (
    SHARD_ROWS,
    FaissIndex,
    encode,
    encode_corpus,
    search,
    search_indices,
    shard_rows,
)


def test_encode_on_xla_pads_every_batch_to_one_shape(ckpt, tokenizer, monkeypatch, tmp_path):
    """The XLA branch (checked on a CPU with the device check forced): one batch width, bf16
    autocast, the same vectors; and encode_corpus writes a float16 memmap instead of RAM."""
    import condenser_lite.retrieval.search as search_module

    model = BiEncoder.from_pretrained(ckpt)
    texts = ["cat", "the cat sat on a mat", "dogs chase cats in park", "jazz", "volcano lava magma erupts ice"]
    widths, autocasts = [], []
    real_embed, real_autocast = search_module.embed, search_module._autocast

    def spy(encoder, ids, mask, pooling):
        widths.append(ids.shape[1])
        return real_embed(encoder, ids, mask, pooling)

    def spy_autocast(device, amp):
        ctx = real_autocast(device, amp)
        autocasts.append(getattr(ctx, "device", None))
        return contextlib.nullcontext()  # the CPU cannot run XLA's autocast; record that it was asked for

    monkeypatch.setattr(search_module, "embed", spy)
    plain = encode(model, texts, tokenizer, max_len=24, batch_size=2)
    assert len(set(widths)) > 1  # sorted by length, padded per batch
    widths.clear()
    monkeypatch.setattr(search_module, "is_xla", lambda device: True)
    monkeypatch.setattr(search_module, "_autocast", spy_autocast)
    on_xla = encode(model, texts, tokenizer, max_len=24, batch_size=2)
    assert set(widths) == {24} and set(autocasts) == {"xla"}
    np.testing.assert_allclose(on_xla, plain, atol=1e-5)
    monkeypatch.undo()

    corpus = {f"d{i}": t for i, t in enumerate(texts)}
    embs, ids = encode_corpus(model, corpus, tokenizer, 24, path=tmp_path / "c.npy", dtype="float16", batch_size=2)
    assert isinstance(embs, np.memmap) and embs.dtype == np.float16 and ids == list(corpus)
    np.testing.assert_allclose(embs.astype(np.float32), plain, atol=2e-2)


def test_search_is_exact_top_k():
    rng = np.random.default_rng(0)
    p = rng.standard_normal((300, 16)).astype(np.float32)
    q = rng.standard_normal((7, 16)).astype(np.float32)
    pids, qids = [f"d{i}" for i in range(300)], [f"q{i}" for i in range(7)]
    run = search(p, pids, q, qids, k=10)
    scores = q @ p.T
    for i, qid in enumerate(qids):
        top = np.argsort(-scores[i])[:10]
        got = sorted(run[qid].items(), key=lambda x: -x[1])
        assert [d for d, _ in got] == [pids[j] for j in top]
        np.testing.assert_allclose([s for _, s in got], scores[i, top], rtol=1e-5)
    assert all(len(v) == 300 for v in search(p, pids, q, qids, k=1000).values())  # k > N: all of them


def test_search_memory_budget_and_approximate_indexes():
    rng = np.random.default_rng(1)
    p = rng.standard_normal((2000, 8)).astype(np.float32)
    pids = [str(i) for i in range(2000)]
    # the check counts the embeddings held in memory and FAISS's copy, not only the index:
    # 2000 x 8 float32 = 64 KB each, so 150 KB fits an index but not embeddings + copy + index
    FaissIndex(p, pids, memory_budget=200_000)
    with pytest.raises(MemoryError, match="search_indices"):
        FaissIndex(p.astype(np.float16), pids, memory_budget=150_000)
    for kind in ("hnsw", "ivf"):
        run = search(p, pids, p[:3], ["a", "b", "c"], k=5, index_type=kind)
        assert all(len(docs) == 5 for docs in run.values())
        assert max(run["a"], key=run["a"].get) in pids
    with pytest.raises(MemoryError, match="ivf"):
        search(p, pids, p[:2], ["a", "b"], k=5, memory_budget=1000, index_type="ivf")


def test_exact_search_shard_by_shard_matches_one_flat_index(tmp_path):
    """MS MARCO / NQ scale: embeddings in a float16 memmap on disk, searched in shards that fit the
    memory budget, merged into the same top-k as one IndexFlatIP over everything."""
    rng = np.random.default_rng(2)
    p = rng.standard_normal((1000, 16)).astype(np.float32)
    q = rng.standard_normal((7, 16)).astype(np.float32)
    flat_scores, flat_idx = FaissIndex(p, [str(i) for i in range(1000)]).search_indices(q, 50)
    for rows in (1000, 333, 64, 7):
        scores, idx = search_indices(p, q, 50, rows=rows)
        np.testing.assert_array_equal(idx, flat_idx)
        np.testing.assert_allclose(scores, flat_scores, rtol=1e-6)
    # a budget that holds about 100 float32 rows besides the queries and heaps -> shards of ~100
    rows = shard_rows(1000, 16, 7, 50, memory_budget=7 * 16 * 4 + 2 * 7 * 50 * 12 + 100 * (16 * 4 + 8 * 50))
    assert rows == 100
    np.testing.assert_array_equal(search_indices(p, q, 50, memory_budget=60_000)[1], flat_idx)
    with pytest.raises(MemoryError, match="before any passage"):
        shard_rows(1000, 16, 7, 50, memory_budget=1000)
    # float16 on disk: same ranking up to float16 rounding (well separated random scores here)
    mm = np.lib.format.open_memmap(tmp_path / "e.npy", mode="w+", dtype=np.float16, shape=p.shape)
    mm[:] = p
    mm.flush()
    on_disk = np.load(tmp_path / "e.npy", mmap_mode="r")
    _, idx16 = search_indices(on_disk, q, 10, rows=128)
    assert (idx16 == flat_idx[:, :10]).mean() > 0.95
    # NQ's 21M x 768 passages: shards of at most SHARD_ROWS rows whatever the RAM
    assert shard_rows(21_015_324, 768, 3_610, 100, memory_budget=24 * 2**30) == SHARD_ROWS
