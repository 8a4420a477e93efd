"""Each loss against a brute-force, one-term-at-a-time reading of its equation."""

from __future__ import annotations

import math

import pytest
import torch

from condenser_lite.modeling.losses import (
    cosine_regression_loss,
    retrieval_loss,
    span_contrastive_accuracy,
    span_contrastive_loss,
    span_contrastive_loss_local,
)


def dot(a, b):
    return sum(float(x) * float(y) for x, y in zip(a, b))


def eq6_term(h, i, j, temperature=1.0):
    """coCondenser eq. 6 for span s_ij (document i, span j in {0, 1}), written as printed."""
    n = len(h) // 2
    hij = h[2 * i + j]
    num = math.exp(dot(h[2 * i], h[2 * i + 1]) / temperature)
    den = sum(math.exp(dot(hij, h[2 * k + l]) / temperature)
              for k in range(n) for l in range(2) if (k, l) != (i, j))
    return -math.log(num / den)


@pytest.mark.parametrize("temperature", [None, 0.5])
def test_span_contrastive_loss_matches_equation_6(temperature):
    torch.manual_seed(0)
    h = torch.randn(10, 6)
    t = 1.0 if temperature is None else temperature
    terms = [eq6_term(h, i, j, t) for i in range(5) for j in range(2)]
    per_row = span_contrastive_loss(h, temperature=temperature, reduction="none")
    assert per_row.tolist() == pytest.approx(terms, rel=1e-5)
    assert float(span_contrastive_loss(h, temperature=temperature)) == pytest.approx(sum(terms) / 10, rel=1e-5)
    assert float(span_contrastive_loss(h, temperature=temperature, reduction="sum")) == pytest.approx(sum(terms), rel=1e-5)


def test_self_similarity_is_excluded_and_partner_is_the_target():
    # Span vectors with large norms: if the diagonal were kept, <h, h> would dominate every row.
    h = torch.tensor([[10.0, 0.0], [9.0, 1.0], [0.0, 10.0], [1.0, 9.0]])
    loss = span_contrastive_loss(h, reduction="none")
    assert (loss < 1e-3).all()  # each span's best *other* span is its partner
    assert span_contrastive_accuracy(h) == 1.0
    # Swap partners (pair span 0 with span 2): now every target is wrong and the loss is large.
    swapped = h[[0, 2, 1, 3]]
    assert (span_contrastive_loss(swapped, reduction="none") > 5).all()
    assert span_contrastive_accuracy(swapped) == 0.0


def test_gradient_matches_brute_force_autograd():
    torch.manual_seed(1)
    h = torch.randn(8, 4, dtype=torch.float64, requires_grad=True)
    span_contrastive_loss(h).backward()
    h2 = h.detach().clone().requires_grad_()
    terms = []
    for r in range(8):
        partner = r ^ 1
        scores = torch.stack([h2[r] @ h2[k] for k in range(8) if k != r])
        terms.append(torch.logsumexp(scores, 0) - h2[r] @ h2[partner])
    torch.stack(terms).mean().backward()
    assert torch.allclose(h.grad, h2.grad, atol=1e-6)


def test_local_variant_scores_local_rows_against_all_rows():
    torch.manual_seed(2)
    h = torch.randn(12, 5)
    full = span_contrastive_loss(h, reduction="none")
    for offset, m in [(0, 12), (4, 4), (5, 5), (11, 1)]:  # odd offsets split a pair
        local = span_contrastive_loss_local(h[offset:offset + m], h, offset, reduction="none")
        assert torch.allclose(local, full[offset:offset + m], atol=1e-6)
    with pytest.raises(ValueError, match="offset"):
        span_contrastive_loss_local(h[:4], h, 10)


def test_span_loss_rejects_odd_batches_and_bad_reduction():
    with pytest.raises(ValueError, match="even"):
        span_contrastive_loss(torch.randn(5, 3))
    with pytest.raises(ValueError, match="reduction"):
        span_contrastive_loss(torch.randn(4, 3), reduction="avg")
    with pytest.raises(ValueError, match="temperature"):
        span_contrastive_loss(torch.randn(4, 3), temperature=0.0)


@pytest.mark.parametrize("train_n_passages", [1, 3])
def test_retrieval_loss_matches_equation_14_with_in_batch_negatives(train_n_passages):
    torch.manual_seed(3)
    B = 4
    q, p = torch.randn(B, 6), torch.randn(B * train_n_passages, 6)
    expected = []
    for i in range(B):
        pos = math.exp(dot(q[i], p[i * train_n_passages]))
        negs = sum(math.exp(dot(q[i], p[k])) for k in range(B * train_n_passages) if k != i * train_n_passages)
        expected.append(-math.log(pos / (pos + negs)))
    got = retrieval_loss(q, p, train_n_passages, reduction="none")
    assert got.tolist() == pytest.approx(expected, rel=1e-5)
    assert float(retrieval_loss(q, p, train_n_passages)) == pytest.approx(sum(expected) / B, rel=1e-5)
    assert float(retrieval_loss(q, p, train_n_passages, temperature=2.0)) == pytest.approx(
        float(retrieval_loss(q / 2, p, train_n_passages)), rel=1e-5)


def test_retrieval_loss_checks_shapes():
    with pytest.raises(ValueError, match="expected 8 passages"):
        retrieval_loss(torch.randn(4, 3), torch.randn(7, 3), 2)
    with pytest.raises(ValueError, match="train_n_passages"):
        retrieval_loss(torch.randn(4, 3), torch.randn(4, 3), 0)


def test_cosine_regression_loss_is_mse_of_cosine():
    torch.manual_seed(4)
    a, b = torch.randn(5, 7), torch.randn(5, 7)
    score = torch.rand(5)
    expected = sum(
        (dot(a[i], b[i]) / math.sqrt(dot(a[i], a[i]) * dot(b[i], b[i])) - float(score[i])) ** 2 for i in range(5)
    ) / 5
    assert float(cosine_regression_loss(a, b, score)) == pytest.approx(expected, rel=1e-5)
    assert float(cosine_regression_loss(a, 3 * a, torch.ones(5))) == pytest.approx(0.0, abs=1e-10)
    with pytest.raises(ValueError, match="scores"):
        cosine_regression_loss(a, b, torch.rand(4))
