"""Write chapters 1-3 of the book (notebooks/01_readiness, 02_condenser, 03_cocondenser) with nbformat.

The notebooks are generated from this readable script, then executed in place:

    python scripts/build_notebooks_01_03.py            # writes the three .ipynb files (no outputs)
    cd notebooks && jupyter nbconvert --to notebook --execute --inplace \
        --ExecutePreprocessor.kernel_name=python3 --ExecutePreprocessor.timeout=1800 01_readiness.ipynb

Each chapter follows the book's conventions: a title cell with a Colab badge, a Colab-only install
cell, a ``parameters`` cell for papermill, one cell that validates the parameters, one setup cell,
then short cells of prose, equation and code; every number the prose relies on is checked by an
``assert``; outputs that vary between machines start with ``# NBVAL_IGNORE_OUTPUT``.

    python scripts/build_notebooks_01_03.py 02         # only chapter 2
"""

from __future__ import annotations

import sys
from pathlib import Path
from textwrap import dedent

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
REPO = "condenser-lite/condenser-lite"


def md(text: str):
    return new_markdown_cell(dedent(text).strip("\n"))


def code(text: str, tags: list[str] | None = None):
    cell = new_code_cell(dedent(text).strip("\n"))
    if tags:
        cell.metadata["tags"] = tags
    return cell


def title(name: str, heading: str, paragraph: str):
    badge = (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
             f"(https://colab.research.google.com/github/{REPO}/blob/main/notebooks/{name}.ipynb)")
    return md(f"# {heading}\n\n{badge}\n\n{dedent(paragraph).strip()}")


def colab_install():
    return code(f'''
        # On Colab only: install condenser_lite and its requirements from GitHub (skipped elsewhere).
        import sys

        if "google.colab" in sys.modules:
            import subprocess

            subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                            "condenser_lite @ git+https://github.com/{REPO}"], check=True)
        ''', tags=["hide-input"])


# The `budget` parameter every chapter takes, and its check (chapters 4-8 add `workers`).
BUDGET_PARAM = 'budget = "tiny"        # scaled-down protocol of condenser_lite.experiments ("micro": seconds, a smoke test)\n'
BUDGET_CHECK = """budget = str(budget).strip().lower()
if budget not in ("tiny", "micro"):
    raise ValueError(f"parameter 'budget' must be 'tiny' or 'micro', got {budget!r} (full scale: -p full true)")
"""


def parameters(extra: str):
    common = '''
        full = False           # True: the papers' settings (bert-base-uncased, Hub data; needs a GPU)
        seed = 0
        cache_dir = None       # None: $CONDENSER_LITE_CACHE, else ~/.cache/condenser_lite
        data_dir = None        # None: $CONDENSER_LITE_DATA, else the Hugging Face Hub
        max_steps = None       # step limit of full-scale pre-training (None: the paper's epochs)
        figures_dir = "figures"
        '''
    return code(dedent(common).strip("\n") + "\n" + dedent(extra).strip("\n"), tags=["parameters"])


def validate(extra: str):
    common = '''
        # papermill passes "-p full true" as the string "true": parse every parameter, fail loudly.
        import os
        from pathlib import Path

        from condenser_lite.config import parse_bool, parse_int

        full = parse_bool(full, "full")
        seed = parse_int(seed, "seed", minimum=0)
        if max_steps is not None and str(max_steps).strip().lower() not in ("none", ""):
            max_steps = parse_int(max_steps, "max_steps", minimum=1)
        else:
            max_steps = None
        if cache_dir not in (None, "", "None"):
            os.environ["CONDENSER_LITE_CACHE"] = str(Path(cache_dir).expanduser())
        if data_dir not in (None, "", "None"):
            os.environ["CONDENSER_LITE_DATA"] = str(Path(data_dir).expanduser())
        figures = Path(figures_dir)
        figures.mkdir(parents=True, exist_ok=True)
        '''
    return code(dedent(common).strip("\n") + "\n" + dedent(extra).strip("\n"), tags=["hide-input"])


def setup(extra_imports: str = ""):
    text = '''
        # NBVAL_IGNORE_OUTPUT
        import logging
        import random
        import warnings

        # Importing transformers/datasets outside a full Jupyter install warns with a message that
        # holds the absolute path of the environment; silence it and other noise before importing.
        warnings.filterwarnings("ignore", message="IProgress not found")
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        from tqdm import TqdmWarning

        warnings.filterwarnings("ignore", category=TqdmWarning)

        import datasets
        import matplotlib.pyplot as plt
        import numpy as np
        import pandas as pd
        import torch
        import transformers

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        logging.getLogger("condenser_lite").setLevel(logging.ERROR)

        from condenser_lite.config import pick_device

        torch.set_num_threads(2)  # float sums depend on the thread count: fixed, so outputs repeat
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        device = pick_device()
        plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 120, "font.size": 10})
        '''
    text = dedent(text).strip("\n")
    if extra_imports:
        text += "\n\n" + dedent(extra_imports).strip("\n")
    text += '\nprint(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}")'
    return code(text, tags=["hide-input"])  # collapsed in the book: boilerplate


def notebook(cells) -> nbformat.NotebookNode:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


# =============================================================================================
# Chapter 1: readiness
# =============================================================================================

def chapter_01():
    name = "01_readiness"
    cells = [
        title(name, "1. Is BERT's [CLS] ready to be a dense representation?", '''
            A dense retriever represents a whole passage by one vector, usually the final hidden
            state of BERT's `[CLS]` token. This chapter asks whether a language model pre-trained
            with masked language modelling (MLM) gives that token anything to do. It introduces
            the data and the tokenizer the scaled-down book uses, defines the attention entropy of
            Clark et al. {cite}`clark2019does` and measures, layer by layer, how broadly `[CLS]`
            looks at its input, in a model trained with MLM and in a random one. **Cost:** at the
            default (scaled-down) scale the chapter trains a WordPiece vocabulary (about 20 s) and
            a 4-layer BERT for 1,200 steps (about 5 minutes on a quiet 2-core CPU; both are cached, so a
            second run takes under a minute). With `full = True` it reads `bert-base-uncased` and
            1,000 Wikipedia sections from the Hugging Face Hub instead; that takes a few minutes
            on a GPU, mostly downloading.
            '''),
        colab_install(),
        parameters(BUDGET_PARAM),
        validate(BUDGET_CHECK),
        setup(),
        md('''
            ## What a bi-encoder asks of `[CLS]`

            A Transformer encoder embeds the input and refines every token's vector through $L$
            self-attention blocks. With the `[CLS]` token prepended, in the notation of the
            Condenser paper {cite}`gao2021condenser`,

            $$[h^0_{cls}; h^0] = \\mathrm{Embed}([\\mathrm{CLS}; x]) \\tag{4}$$

            $$[h^l_{cls}; h^l] = \\mathrm{TF}_l([h^{l-1}_{cls}; h^{l-1}]), \\quad l = 1, \\dots, L \\tag{5}$$

            MLM pre-training {cite}`devlin2019bert` masks some input tokens and trains the model
            to recover each one from its own final vector,

            $$\\mathcal{L}_{mlm} = \\sum_{i \\in \\text{masked}} \\mathrm{CrossEntropy}(W h^L_i, x_i) \\tag{3}$$

            Nothing in eq. 3 involves $h^L_{cls}$. Yet a bi-encoder uses exactly that vector as
            the representation of the whole text, and fine-tuning must teach it to be one.

            Gao and Callan {cite}`gao2021readiness` split what a pre-trained model brings to
            fine-tuning into two kinds of *readiness*. **Knowledge readiness** is how well the
            model understands the language of the task, and MLM provides plenty of it.
            **Optimisation (or structural) readiness** is how little the model's internal
            computation has to change before it produces the output the task wants. For a
            cross-encoder or a token tagger, MLM's structure is already close to what is needed.
            For a bi-encoder it is not: squeezing a sequence into one vector was never part of
            pre-training. Clark et al. {cite}`clark2019does` found that in BERT's middle layers
            `[CLS]` attends much like an ordinary token and is barely attended to, and that it
            attends broadly over the sequence only in the last layer (where next-sentence
            prediction needs it). The Condenser paper {cite}`gao2021condenser` (section 3.2)
            reads this as `[CLS]` lying dormant through most of the network, and argues that a
            good dense encoder should gather information into `[CLS]` at every depth. The cost of
            the missing structure is paid at fine-tuning time, in labelled data.

            The rest of this chapter builds the tools that let us look at `[CLS]`: the data, the
            tokenizer, a small MLM-trained BERT, and the attention entropy.
            '''),
        md('''
            ## The text the models read

            At full scale the papers pre-train on English Wikipedia and BookCorpus. The
            scaled-down book pre-trains on three small real corpora (from the local mirror, or
            downloaded): a sample of a Wikipedia XML export, the WikiText-2 validation and test
            articles {cite}`merity2016wikitext`, and a collection of news articles. `load_pretraining_corpus` returns one row
            per *section* of an article, because sections are the unit the paper's attention
            analysis averages over and a natural boundary for packing text into training blocks.
            '''),
        code('''
            from condenser_lite.data import corpus_summary, load_pretraining_corpus

            if full:
                # Streamed from the Hub: keep the first 5,000 Wikipedia sections for the statistics below.
                stream = load_pretraining_corpus(["enwiki"], full=True)
                corpus = datasets.Dataset.from_list(list(stream.take(5000)))
            else:
                corpus = load_pretraining_corpus()
            summary = pd.DataFrame(corpus_summary(corpus)).T
            summary.loc["total"] = summary.sum()
            summary
            '''),
        code('''
            row = corpus[0]
            print(f"{row['source']} | {row['title']} | section {row['section']!r}")
            print(row["text"][:400], "...")
            '''),
        code('''
            if not full:
                assert 900_000 < summary.loc["total", "words"] < 1_000_000, summary
                assert set(summary.index) == {"enwiki", "news", "wikitext", "total"}
            '''),
        md('''
            About 0.93 million words in 3,183 sections, less than a thousandth of the 3.3 billion
            words BERT was pre-trained on, which is why the scaled-down models are small and why
            their absolute numbers are not the papers'.
            '''),
        md('''
            ## The tokenizer

            BERT reads WordPiece tokens: frequent words are single tokens, rarer words are split
            into a first piece and continuation pieces marked `##`. `bert-base-uncased` has
            30,522 of them. On a CPU the output layer of MLM costs one row per vocabulary entry at
            every predicted position, so the scaled-down book trains its own uncased WordPiece
            vocabulary of 8,192 tokens with the `tokenizers` library, on the pre-training corpus
            and the (unlabelled) SciFact abstracts that chapter 3 pre-trains on. It uses BERT's
            normaliser, pre-tokeniser, special tokens and `[CLS] ... [SEP]` template, so it is an
            ordinary `BertTokenizer`. It is trained once and then read from the cache.
            '''),
        code('''
            # NBVAL_IGNORE_OUTPUT
            from condenser_lite.tokenizer import load_tokenizer, tiny_tokenizer

            tokenizer = load_tokenizer("bert-base-uncased") if full else tiny_tokenizer()
            print(type(tokenizer).__name__, len(tokenizer), "tokens")
            '''),
        code('''
            examples = [
                "The Condenser conditions masked language modelling on the CLS vector.",
                "Dexamethasone reduced mortality in hospitalised COVID-19 patients.",
                "Gao and Callan pre-trained it on Wikipedia in 2021.",
            ]
            for text in examples:
                print(tokenizer.tokenize(text))
            print(tokenizer.convert_ids_to_tokens(tokenizer("Dense retrieval")["input_ids"]))
            '''),
        md('''
            Common words stay whole, rarer ones split into pieces (`##` marks a piece that continues
            a word), and the template wraps every input as `[CLS] ... [SEP]`. The special tokens
            have BERT's ids for `[PAD]`, `[UNK]`, `[CLS]`, `[SEP]` and `[MASK]` in our vocabulary,
            so padding is id 0 as the models expect. How many tokens does a word cost on average?
            '''),
        code('''
            sample = list(corpus.shuffle(seed=seed).select(range(500))["text"])
            n_words = sum(len(t.split()) for t in sample)
            n_tokens = sum(len(ids) for ids in tokenizer(sample, add_special_tokens=False)["input_ids"])
            tokens_per_word = n_tokens / n_words
            print(f"{tokens_per_word:.2f} tokens per whitespace word")
            '''),
        code('''
            if not full:
                assert len(tokenizer) == 8192
                assert [tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id,
                        tokenizer.sep_token_id, tokenizer.mask_token_id] == [0, 1, 2, 3, 4]
            assert 1.0 < tokens_per_word < 1.6, tokens_per_word
            '''),
        md('''
            A bit more than one token per word (punctuation counts as its own token): a 64-token
            block, the length the scaled-down models read, holds about 45 words, a few sentences
            (BERT-base reads 128-token blocks in the papers' pre-training, and up to 512 later).

            ## A BERT trained with MLM

            At full scale the model under study is `bert-base-uncased` itself. The scaled-down
            stand-in is a 4-layer BERT (hidden size 128, 4 heads, 0.8M parameters besides the
            embeddings) pre-trained from scratch with plain MLM on the corpus above: 1,200 updates
            of 32 blocks of at most 64 tokens. This is the *BERT* arm of the book's experiments
            (`condenser_lite.experiments`, the "tiny" budget), which chapter 2 continues with
            Condenser pre-training. `pretraining.pretrain` underneath packs the sections into
            blocks, masks 15% of the words and runs the training loop (chapter 2 opens all three
            up); the finished checkpoint is cached under a hash of its settings, so this cell
            trains only once and every later chapter reuses the result.
            '''),
        code('''
            # NBVAL_IGNORE_OUTPUT
            from transformers import BertForMaskedLM

            from condenser_lite import experiments
            from condenser_lite.pretraining import read_log

            budget = experiments.get_budget("full" if full else budget)   # the name becomes the settings
            bert_dir = experiments.pretrain_arm("bert", budget)["checkpoint"]  # full: "bert-base-uncased"
            if not full:
                log = read_log(bert_dir)
                print(f"{len(log)} steps; MLM loss {log[0]['loss']:.2f} -> {log[-1]['loss']:.2f}; "
                      f"{log[-1]['elapsed']:.0f} s of training")
            print(bert_dir)
            '''),
        md('''
            How good is that? A useful yardstick is the loss of a model that ignores the context
            altogether and always predicts the corpus's token frequencies: the entropy of the
            unigram distribution, $H_1 = -\\sum_w p(w) \\log p(w)$, with $p(w)$ counted over the
            corpus's tokens.
            '''),
        code('''
            all_ids = tokenizer(list(corpus["text"]), add_special_tokens=False, verbose=False)["input_ids"]
            counts = np.bincount(np.concatenate([np.asarray(ids, dtype=np.int64) for ids in all_ids]),
                                 minlength=len(tokenizer))
            counts[tokenizer.all_special_ids] = 0
            p_w = counts[counts > 0] / counts.sum()
            unigram_entropy = float(-(p_w * np.log(p_w)).sum())
            print(f"unigram entropy H_1 = {unigram_entropy:.3f} nats; uniform guessing log|V| = {np.log(len(tokenizer)):.3f}")
            '''),
        code('''
            check_claims = budget.name == "tiny"   # the prose describes the tiny budget's results
            if check_claims:
                assert (budget.s1_steps, budget.pretrain_batch, budget.max_len) == (1200, 32, 64)
                first = np.mean([r["loss"] for r in log[:5]])
                last = np.mean([r["loss"] for r in log[-20:]])
                assert abs(first - np.log(len(tokenizer))) < 0.2        # starts at uniform guessing
                assert last < first - 2.0, (first, last)                 # falls by over two nats ...
                assert unigram_entropy - 1.0 < last < unigram_entropy - 0.3, (last, unigram_entropy)  # ... to about half a nat below H_1
            '''),
        md('''
            A freshly initialised model guesses uniformly, a loss of $\\log |V| = \\log 8192 \\approx 9.01$
            nats. After 1,200 updates the loss has fallen by over two and a half nats, to about half a
            nat below $H_1$: in a few minutes the model has learnt mostly *which* words are frequent
            and only begun to use the context to tell them apart (a BERT-base ends pre-training
            near 1.5 nats). This is the main caveat of everything
            scaled-down: our "BERT" has had minutes, not days.

            For comparison we also build a randomly initialised BERT of the same shape, whose
            attention has not been trained at all.
            '''),
        code('''
            bert = BertForMaskedLM.from_pretrained(bert_dir).bert.to(device)   # the encoder, without the MLM head
            torch.manual_seed(seed)
            random_bert = BertForMaskedLM(bert.config).bert.to(device)
            n_layers = bert.config.num_hidden_layers
            print(f"{n_layers} layers, {bert.config.num_attention_heads} heads, hidden {bert.config.hidden_size}")
            '''),
        md('''
            ## Attention entropy

            In layer $l$, head $a$ turns the `[CLS]` position into a probability distribution over
            the $T$ positions of the input, its attention weights $\\alpha^{l,a}_{1}, \\dots,
            \\alpha^{l,a}_{T}$ (they are non-negative and sum to one). Clark et al.
            {cite}`clark2019does` summarise how spread out such a distribution is by its entropy,

            $$H^{l,a} = -\\sum_{j=1}^{T} \\alpha^{l,a}_j \\log \\alpha^{l,a}_j .$$

            It is $0$ when `[CLS]` looks at a single position and at most $\\log T$, reached when
            it looks at all positions equally. Averaging over the heads of a layer and over many
            texts gives one number per layer,

            $$\\bar H^{l} = \\frac{1}{N} \\sum_{n=1}^{N} \\frac{1}{A} \\sum_{a=1}^{A} H^{l,a}(x_n),$$

            the quantity the Condenser paper plots for BERT, ICT and Condenser
            {cite}`gao2021condenser` (section 5, figure 2). Let us compute it by hand for one text
            first. Attention weights are returned only by the "eager" attention implementation
            (the default "sdpa" kernel never materialises them).
            '''),
        code('''
            texts = experiments.entropy_texts(budget)                    # the sections chapter 5 uses too
            max_len = min(budget.entropy_max_len, budget.max_len)        # 64 tokens scaled-down, 128 at full scale

            enc = tokenizer(texts[0], truncation=True, max_length=max_len, return_tensors="pt").to(device)
            bert.set_attn_implementation("eager")
            bert.eval()
            with torch.no_grad():
                attentions = bert(**enc, output_attentions=True).attentions  # L tensors [1, heads, T, T]
            alpha = torch.stack([a[0, :, 0, :] for a in attentions])      # [L, heads, T]: row of [CLS]
            print("each row sums to 1:", bool(torch.allclose(alpha.sum(-1), torch.ones(()), atol=1e-5)))
            '''),
        code('''
            # NBVAL_IGNORE_OUTPUT
            H = torch.special.entr(alpha).sum(-1)   # entr(p) = -p log p, with entr(0) = 0
            H_layer = H.mean(-1)                     # average over heads
            T = enc["input_ids"].shape[1]
            print(f"T = {T} tokens, log T = {np.log(T):.3f}")
            print("entropy per layer:", np.round(H_layer.cpu().numpy(), 3))
            '''),
        md('''
            The library's `analysis.cls_attention_entropy` does the same over batches of texts
            (padding positions get zero weight, so they add nothing to the sum). On this one text
            it must agree with the hand computation:
            '''),
        code('''
            # NBVAL_IGNORE_OUTPUT
            from condenser_lite.analysis import cls_attention_entropy

            library_value = cls_attention_entropy(bert, tokenizer, texts[:1], max_len=max_len)
            assert np.allclose(library_value, H_layer.cpu().numpy(), atol=1e-5)
            print(np.round(library_value, 3))
            '''),
        md('''
            ## Where does `[CLS]` look?

            Now the average over all the sampled sections (256 of them, from all three sources,
            read up to 64 tokens), for the MLM-trained model and the random one. The reference
            line is $\\log T$ averaged over the texts: the entropy of perfectly even attention.
            '''),
        code('''
            # NBVAL_IGNORE_OUTPUT
            import time

            start = time.perf_counter()
            entropy = {
                "MLM-trained BERT": cls_attention_entropy(bert, tokenizer, texts, max_len=max_len),
                "random init": cls_attention_entropy(random_bert, tokenizer, texts, max_len=max_len),
            }
            lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]]
            log_T = float(np.mean(np.log(lengths)))
            print(f"{len(texts)} texts in {time.perf_counter() - start:.1f} s")
            '''),
        code('''
            # NBVAL_IGNORE_OUTPUT
            table = pd.DataFrame(entropy, index=pd.Index(range(1, n_layers + 1), name="layer")).round(3)
            table["log T"] = round(log_T, 3)
            table
            '''),
        code('''
            fig, ax = plt.subplots(figsize=(5.5, 3.5))
            layers = np.arange(1, n_layers + 1)
            for label, values in entropy.items():
                ax.plot(layers, values, marker="o", label=label)
            ax.axhline(log_T, color="grey", linestyle="--", label=r"$\\log T$ (even attention)")
            ax.set_xlabel("layer")
            ax.set_ylabel("CLS attention entropy (nats)")
            ax.set_xticks(layers)
            ax.legend()
            ax.set_title("How broadly [CLS] attends, per layer")
            fig.tight_layout()
            fig.savefig(figures / "01_cls_attention_entropy.png")
            plt.show()
            '''),
        md('''
            *Figure: mean entropy of the `[CLS]` attention distribution per layer, over the sampled
            sections. The random model sits on the dashed line (it attends evenly); the
            MLM-trained model's `[CLS]` attends more narrowly, by over half a nat in the
            narrowest layer; how much the other layers narrow varies from run to run.*
            '''),
        code('''
            random_H, mlm_H = entropy["random init"], entropy["MLM-trained BERT"]
            assert np.all(np.abs(random_H - log_T) < 0.02 * log_T)   # random init: even attention
            if check_claims:
                assert np.all(mlm_H < random_H + 0.01)               # no layer broader than random
                assert mlm_H.min() < random_H.min() - 0.5            # one of them narrower by over half a nat
            '''),
        md('''
            A random model's attention scores are all close to zero, so its softmax is close to
            uniform and its entropy close to the maximum $\\log T$: the dashed line is the
            "looks at everything equally" ceiling. Training makes `[CLS]` attention more selective,
            clearly so in one layer (the second, in the runs we made), though it stays far from
            looking at a single token (an entropy of $\\log 32 \\approx 3.5$ still means
            spreading over the equivalent of 30 tokens). With a model this small and this briefly
            trained the profile is a hint, not evidence: the exact
            profile varies between training runs at this scale (two runs of this very recipe that
            differed only in floating-point rounding gave visibly different curves), so only its
            coarse shape is worth reading. What a bi-encoder needs is not selectivity for its own sake but a `[CLS]`
            that actively collects the meaning of the text at every depth, and MLM gives `[CLS]` no
            reason to do that, because no loss term reads it. Chapter 5 repeats this measurement
            for the Condenser and coCondenser models before and after fine-tuning, which is where the
            paper's figure 2 makes its point: BERT's profile changes a lot during fine-tuning,
            Condenser's much less.
            '''),
        md('''
            ## Full scale

            With `full = True` the same cells read `bert-base-uncased` (tokenizer and weights) and
            Wikipedia sections streamed from the Hub; the entropy is then averaged over 1,000
            sections of at most 128 tokens, as in the paper. The only cost is the download and a
            forward pass per section.

            ## Summary

            * A bi-encoder represents a text by the final `[CLS]` vector, which MLM pre-training
              never trains (eq. 3): the model has knowledge readiness but not optimisation
              readiness for dense retrieval {cite}`gao2021readiness`.
            * The scaled-down book uses its own 8,192-token WordPiece vocabulary and about 0.93M
              words of Wikipedia, WikiText and news text, and a 4-layer BERT pre-trained on it
              for a few minutes.
            * The attention entropy $H^{l,a} = -\\sum_j \\alpha_j \\log \\alpha_j$ measures how
              broadly `[CLS]` attends; it is bounded by $\\log T$, which a random model nearly
              reaches. `analysis.cls_attention_entropy` computes its per-layer average and agrees
              with a direct computation.
            * Next, chapter 2 changes the pre-training *architecture* so that MLM itself needs a
              good `[CLS]`.
            '''),
    ]
    return name, notebook(cells)


# =============================================================================================
# Chapter 2: Condenser
# =============================================================================================

def chapter_02():
    name = "02_condenser"
    cells = [
        title(name, "2. Condenser: make MLM depend on [CLS]", """
            Chapter 1 found that MLM pre-training gives `[CLS]` no job. This chapter builds the
            Condenser {cite}`gao2021condenser`, an architecture that gives it one, piece by piece
            from `transformers` layers: the embeddings, the early and late halves of the encoder,
            the head that reads the late `[CLS]` next to the early token vectors, and the two MLM
            losses. The hand-built model is then checked against the library's `Condenser`, the
            masking collator is opened up, and the tiny BERT of chapter 1 is pre-trained further
            in two ways at equal compute, plain MLM and Condenser, to compare their loss curves.
            **Cost:** scaled-down, the two pre-training runs of 600 steps take about 3 and 5
            minutes on a quiet 2-core CPU the first time (they are cached; the rest of the chapter
            takes well under a minute). At full scale (`full = True`) the Condenser is pre-trained
            from `bert-base-uncased` on Wikipedia with the paper's settings: the authors report
            about a week on 4 RTX 2080 Ti GPUs, or 2 days on a v3-8 TPU; `max_steps` caps the run.
            """),
        colab_install(),
        parameters(BUDGET_PARAM),
        validate(BUDGET_CHECK),
        setup(),
        md("""
            ## The starting point

            The paper does not pre-train a Condenser from scratch: it starts from BERT's weights and
            adds a freshly initialised head (section 3.4). We do the same with the scaled-down BERT
            of chapter 1, the *BERT* arm of `condenser_lite.experiments` (read from the cache, or
            trained now if chapter 1 has not run). At full scale the starting point is
            `bert-base-uncased`, with 6 early and 6 late layers; our 4-layer model keeps the same
            even split, 2 and 2.
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            from transformers import BertForMaskedLM

            from condenser_lite import experiments
            from condenser_lite.pretraining import paper_condenser, pretrain, read_log
            from condenser_lite.tokenizer import load_tokenizer

            budget = experiments.get_budget("full" if full else budget)      # the name becomes the settings
            check_claims = budget.name == "tiny"                              # the prose describes the tiny budget
            bert_dir = experiments.pretrain_arm("bert", budget)["checkpoint"]  # full: "bert-base-uncased"
            tokenizer = load_tokenizer(bert_dir)
            backbone = BertForMaskedLM.from_pretrained(bert_dir).to(device)
            config = backbone.config
            print(bert_dir)
            """),
        code("""
            skip_from = config.num_hidden_layers // 2   # the head reads the output of this layer
            n_head_layers = 2
            print(f"{config.num_hidden_layers} backbone layers: early 1..{skip_from}, "
                  f"late {skip_from + 1}..{config.num_hidden_layers}; {n_head_layers} head layers")
            """),
        md("""
            A real batch to push through it: a few sections packed into blocks of at most 64 tokens
            (128 at full scale, as in the paper) and masked by the collator that pre-training uses
            (its details come later in this chapter).
            """),
        code("""
            from condenser_lite.data import load_pretraining_corpus
            from condenser_lite.pretrain_data import MLMCollator, pack_blocks

            if full:
                sections = datasets.Dataset.from_list(list(load_pretraining_corpus(full=True).take(200)))
            else:
                sections = load_pretraining_corpus().select(range(200))
            blocks = pack_blocks(sections, tokenizer, max_len=min(budget.max_len, 128), seed=seed)
            collator = MLMCollator(tokenizer)
            torch.manual_seed(seed)
            batch = {k: v.to(device) for k, v in collator([blocks[i] for i in range(8)]).items()}
            print({k: tuple(v.shape) for k, v in batch.items()}, f"{len(blocks)} blocks")
            """),
        md("""
            ## The backbone, split in two

            Condenser is an ordinary BERT whose layers are read in two groups. The embeddings
            give $[h^0_{cls}; h^0]$ (eq. 4 of chapter 1); the first $L^e$ layers, the *early*
            encoder, and the remaining $L^l$ layers, the *late* encoder, then give

            $$[h^{early}_{cls}; h^{early}] = \\mathrm{Encoder}_{early}([h^0_{cls}; h^0]) \\tag{6}$$

            $$[h^{late}_{cls}; h^{late}] = \\mathrm{Encoder}_{late}([h^{early}_{cls}; h^{early}]) \\tag{7}$$

            Nothing new so far: this is the usual forward pass, with one intermediate result kept.
            We run it layer by layer with the backbone's own modules. In `transformers` 5 a
            `BertLayer` takes the hidden states and an attention mask and returns a tensor; the
            mask is built by `create_bidirectional_mask` in whatever form the active attention
            implementation wants (it is `None` when no position is padding).
            """),
        code("""
            from transformers.masking_utils import create_bidirectional_mask

            backbone.eval()                  # no dropout, so the comparisons below are exact
            embed, layers = backbone.bert.embeddings, backbone.bert.encoder.layer

            h0 = embed(input_ids=batch["input_ids"])                                   # eq. 4
            mask = create_bidirectional_mask(config=config, inputs_embeds=h0,
                                             attention_mask=batch["attention_mask"])
            h = h0
            for layer in layers[:skip_from]:
                h = layer(h, mask)
            h_early = h                                                                # eq. 6
            for layer in layers[skip_from:]:
                h = layer(h, mask)
            h_late = h                                                                 # eq. 7
            print(tuple(h_early.shape), tuple(h_late.shape))
            """),
        code("""
            with torch.no_grad():
                ref = backbone.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                    output_hidden_states=True)
            # hidden_states[0] is the embedding output, so [skip_from] is the output of layer skip_from
            assert torch.allclose(h_early, ref.hidden_states[skip_from], atol=1e-6)
            assert torch.allclose(h_late, ref.last_hidden_state, atol=1e-6)
            """),
        md("""
            ## The head and its short circuit

            The Condenser head is $L^h$ more Transformer layers (two in the paper), and the whole
            idea is in what it reads: the **late** `[CLS]` vector followed by the **early** token
            vectors,

            $$[h^{cd}_{cls}; h^{cd}] = \\mathrm{Condenser}_{head}([h^{late}_{cls}; h^{early}]) \\tag{8}$$

            The head predicts the masked tokens from $h^{cd}$. Its token inputs come from the
            early layers, so whatever the late layers work out about the text can reach the head
            only through the one vector $h^{late}_{cls}$. To use the late layers at all, the
            model must learn to condense that information into `[CLS]`, in every late layer,
            which is exactly the structure a bi-encoder needs. The skip connection also relieves
            `[CLS]` of local, syntactic detail: the early token vectors already carry it. The head
            is a pre-training device only; afterwards it is dropped and what remains is a plain
            BERT, loaded like any other.

            The head layers are ordinary `BertLayer`s with BERT's initialisation (normal weights
            with standard deviation 0.02, zero biases), run with the same attention mask.
            """),
        code("""
            from transformers.models.bert.modeling_bert import BertLayer

            torch.manual_seed(seed)
            head = torch.nn.ModuleList([BertLayer(config) for _ in range(n_head_layers)]).to(device)
            head.apply(backbone._init_weights)       # BERT's own init for a fresh head
            head.eval()

            x = torch.cat([h_late[:, :1], h_early[:, 1:]], dim=1)   # [h_cls^late ; h^early]
            for layer in head:
                x = layer(x, mask)
            h_cd = x                                                   # eq. 8
            print(tuple(h_cd.shape))
            """),
        md("""
            ## Two MLM losses through one output layer

            The head is trained with MLM on its outputs,

            $$\\mathcal{L}_{mlm} = \\sum_{i \\in \\text{masked}} \\mathrm{CrossEntropy}(W h^{cd}_i, x_i) \\tag{9}$$

            A random head sitting on a pre-trained backbone would send noisy gradients into the
            backbone at first. The paper guards against that with a second MLM loss on the
            backbone's own late outputs, a "semantic constraint" that keeps $h^{late}$ a good
            token representation,

            $$\\mathcal{L}^c_{mlm} = \\sum_{i \\in \\text{masked}} \\mathrm{CrossEntropy}(W h^{late}_i, x_i) \\tag{10}$$

            $$\\mathcal{L} = \\mathcal{L}_{mlm} + \\mathcal{L}^c_{mlm} \\tag{11}$$

            The output projection $W$ is shared by both losses; in `BertForMaskedLM` it is
            `backbone.cls` (a dense layer with LayerNorm, then the decoder whose weights are tied
            to the word embeddings). Two implementation choices, both the authors' code's:
            each loss is the *mean* over the masked tokens of the batch (the equations write a
            sum; a mean keeps the learning rate independent of how many tokens are masked), and
            the logits are computed only at the masked positions. The second one matters on a CPU:
            about 15% of positions are masked, so projecting only those to the 8,192-word vocabulary
            costs about a seventh of projecting every position, for the same loss.
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            import torch.nn.functional as F

            W = backbone.cls
            labels = batch["labels"]
            masked = labels != -100
            loss_head = F.cross_entropy(W(h_cd[masked]), labels[masked])     # eq. 9, mean over masked tokens
            loss_late = F.cross_entropy(W(h_late[masked]), labels[masked])   # eq. 10
            loss = loss_head + loss_late                                     # eq. 11
            print(f"{int(masked.sum())} masked tokens of {int(batch['attention_mask'].sum())}; "
                  f"head {loss_head.item():.4f}  late {loss_late.item():.4f}  total {loss.item():.4f}")
            """),
        code("""
            # The cheap path equals the usual one (logits everywhere, -100 labels ignored).
            full_vocab = F.cross_entropy(W(h_cd).flatten(0, 1), labels.flatten(), ignore_index=-100)
            assert torch.allclose(full_vocab, loss_head, atol=1e-6)
            """),
        md("""
            ## The library's `Condenser`

            `condenser_lite.model.Condenser` packages exactly these steps: `forward` runs the
            backbone once with `output_hidden_states=True`, takes layer `skip_from`'s output as
            $h^{early}$, runs the head over $[h^{late}_{cls}; h^{early}]$ and returns both losses,
            their sum and the late `[CLS]` vector (the one fine-tuning and chapter 3 use). Load the
            same weights into it and compare:
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            from condenser_lite.model import Condenser

            model = Condenser(BertForMaskedLM(config), skip_from=skip_from, n_head_layers=n_head_layers).to(device)
            model.backbone.load_state_dict(backbone.state_dict())
            model.head.load_state_dict(head.state_dict())
            model.eval()
            with torch.no_grad():
                out = model(**batch)
            print(f"head {out.head_loss.item():.4f}  late {out.late_loss.item():.4f}  total {out.loss.item():.4f}")
            """),
        code("""
            assert abs(out.head_loss.item() - loss_head.item()) < 1e-6
            assert abs(out.late_loss.item() - loss_late.item()) < 1e-6
            assert abs(out.loss.item() - loss.item()) < 1e-6
            assert torch.allclose(out.cls, h_late[:, 0], atol=1e-6)
            """),
        code("""
            if check_claims:
                assert abs(out.head_loss.item() - out.late_loss.item()) < 0.3
                assert out.head_loss.item() < np.log(len(tokenizer)) - 1.0
            """),
        md("""
            The two agree to float precision. Note the size of the fresh head's loss: not the
            $\\log |V| \\approx 9$ nats of uniform guessing, but close to the backbone's own. A new
            head is not a blank slate: with BERT's small initialisation each of its layers adds
            only a small update to its input through the residual connection, so its output stays
            close to the early token vectors it was given, and the shared output layer $W$ reads
            those almost as well as the late ones. Still, the head's layers are random, and in
            the paper a random head sits on top of a carefully trained BERT-base: section 3.4 adds
            the late MLM loss of eq. 10 so that the backbone's own predictions stay in the
            objective while the head's early gradients are noise.

            ## Masking: whole words, 15%, 80/10/10

            BERT's masking recipe {cite}`devlin2019bert`, as the authors used it: in each block, words (a token plus its
            `##` continuations) are drawn in random order and selected while they fit a budget of
            15% of the block's tokens; `[CLS]`, `[SEP]` and padding are never selected. Each
            selected token then becomes `[MASK]` with probability 0.8, a random vocabulary token
            with probability 0.1, and stays unchanged with probability 0.1; the labels hold the
            original ids at the selected positions and -100 elsewhere. Masking whole words stops
            the model from reading a word off its other pieces, and the 10% random and 10% unchanged
            tokens keep it from learning that only `[MASK]` positions matter. Here is one block:
            """),
        code("""
            torch.manual_seed(seed)
            one = collator([blocks[0]])
            original = tokenizer.convert_ids_to_tokens(blocks[0]["input_ids"])
            seen = tokenizer.convert_ids_to_tokens(one["input_ids"][0].tolist())
            picked = (one["labels"][0] != -100).tolist()
            print("original:", " ".join(original[:40]))
            print("input:   ", " ".join(seen[:40]))
            pd.DataFrame([(i, original[i], seen[i]) for i in range(len(original)) if picked[i]],
                         columns=["position", "target", "model sees"]).head(12)
            """),
        md("""
            Over a thousand blocks the proportions come out as designed:
            """),
        code("""
            torch.manual_seed(seed)
            big = collator([blocks[i] for i in range(min(1024, len(blocks)))])
            ids, lab = big["input_ids"], big["labels"]
            originals = torch.where(lab != -100, lab, ids)
            maskable = (big["attention_mask"] == 1) & ~torch.isin(originals, torch.tensor(tokenizer.all_special_ids))
            sel = lab != -100
            share = {
                "selected / maskable tokens": (sel.sum() / maskable.sum()).item(),
                "[MASK] / selected": ((ids == tokenizer.mask_token_id) & sel).sum().item() / sel.sum().item(),
                "unchanged / selected": ((ids == lab) & sel).sum().item() / sel.sum().item(),
            }
            share["random / selected"] = 1 - share["[MASK] / selected"] - share["unchanged / selected"]
            pd.Series(share).round(3)
            """),
        code("""
            assert 0.13 < share["selected / maskable tokens"] < 0.16
            assert abs(share["[MASK] / selected"] - 0.8) < 0.02
            assert abs(share["unchanged / selected"] - 0.1) < 0.02
            assert abs(share["random / selected"] - 0.1) < 0.02
            # whole words: a selected "##" piece always has its preceding piece selected too (unless the
            # piece opens the block, right after [CLS], when a long sentence was cut mid-word)
            tokens = np.array(tokenizer.convert_ids_to_tokens(originals.flatten().tolist())).reshape(originals.shape)
            cont = torch.from_numpy(np.char.startswith(tokens, "##")) & sel
            rows, cols = cont.nonzero(as_tuple=True)
            opens_block = originals[rows, cols - 1] == tokenizer.cls_token_id
            assert bool((sel[rows, cols - 1] | opens_block).all())
            """),
        md("""
            (The budget is rounded per block and a whole word is skipped when it would overshoot
            it, so a single block can land a token or two away from 15%; over many blocks the
            share is 15%.)

            ## The training loop, briefly

            `training.train` is one loop for every stage of the book. Each update is AdamW (weight
            decay 0.01, none on biases and LayerNorm weights), with the learning rate rising
            linearly over the first 10% of steps and then decaying linearly to zero, and gradients
            clipped to norm 1. Its one unusual rule is about randomness: before building and
            running step $k$ it reseeds every generator from the pair (seed, $k$) with
            `set_step_seed`, and the collator draws its masks from that global generator. A step
            is therefore a pure function of the weights, the optimiser state and $k$, and a run
            resumed from a checkpoint (weights, optimiser, scheduler, step counter) continues
            exactly as if it had never stopped, without saving any generator state. It also means
            two runs with the same seed and data see the very same blocks with the very same
            masks at every step, which makes the comparison below a controlled one.
            """),
        code("""
            from condenser_lite.training import set_step_seed

            examples = [blocks[i] for i in range(4)]
            set_step_seed(seed, 7)
            a = collator(examples)
            set_step_seed(seed, 7)
            b = collator(examples)
            set_step_seed(seed, 8)
            c = collator(examples)
            assert torch.equal(a["labels"], b["labels"]) and not torch.equal(a["labels"], c["labels"])
            """),
        md("""
            ## Pre-training at equal compute

            Now the experiment of the paper in miniature. From the same BERT checkpoint we run
            two continuations with the same data, steps (600), batch size (32 blocks of at most
            64 tokens) and learning rate: *BERT-cont*, plain MLM (the control: what more MLM alone
            does), and *Condenser*, with the head and both losses (eq. 11). They are the
            `bert_cont` and `condenser` arms of `condenser_lite.experiments`, each a cached stage
            of `pretraining.pretrain`, which the fine-tuning chapters reuse. At full scale the
            same cells run `paper_condenser()`: from `bert-base-uncased`, `skip_from=6`, 2 head
            layers, AdamW with learning rate $10^{-4}$, 10% warm-up, 8 epochs of Wikipedia at
            about 1,024 sequences per update, and `max_steps` as the step limit.
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            if full:
                cont_dir = pretrain(paper_condenser(method="mlm", max_steps=max_steps), progress=False)
                condenser_dir = pretrain(paper_condenser(max_steps=max_steps), progress=False)
            else:
                cont_dir = experiments.pretrain_arm("bert_cont", budget, init=bert_dir)["checkpoint"]
                condenser_dir = experiments.pretrain_arm("condenser", budget, init=bert_dir)["checkpoint"]
            print(cont_dir, condenser_dir, sep="\\n")
            """),
        code("""
            def series(run_dir, key):
                log = read_log(run_dir)
                return pd.Series([r[key] for r in log], index=[r["step"] for r in log], name=key)

            curves = pd.DataFrame({
                "BERT-cont: MLM": series(cont_dir, "loss"),
                "Condenser: late MLM (eq. 10)": series(condenser_dir, "late_loss"),
                "Condenser: head MLM (eq. 9)": series(condenser_dir, "head_loss"),
            })
            smooth = curves.rolling(10, min_periods=1).mean()
            fig, ax = plt.subplots(figsize=(6, 3.8))
            for column, style in zip(smooth, ["-", "-", "--"]):
                ax.plot(smooth.index, smooth[column], style, label=column)
            ax.set_xlabel("update")
            ax.set_ylabel("MLM loss (nats, 10-step mean)")
            ax.set_title("Continued pre-training from the same BERT")
            ax.legend()
            fig.tight_layout()
            fig.savefig(figures / "02_condenser_vs_mlm_loss.png")
            plt.show()
            """),
        md("""
            *Figure: MLM losses of the two continuations, averaged over 10 updates. The quantity
            comparable to plain MLM is Condenser's late (backbone) loss, which predicts from the
            same late token vectors a BERT would; the head loss starts from the untrained head
            and falls quickly towards it. The wiggles of the curves coincide because both runs
            see the same blocks with the same masks at every update.*
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            ends = curves.tail(20).mean()
            starts = curves.head(5).mean()
            pd.DataFrame({"first 5 updates": starts, "last 20 updates": ends}).round(2)
            """),
        code("""
            gap = ends["Condenser: late MLM (eq. 10)"] - ends["BERT-cont: MLM"]
            head_gap = ends["Condenser: head MLM (eq. 9)"] - ends["Condenser: late MLM (eq. 10)"]
            if check_claims:
                assert (budget.s2_steps, budget.pretrain_batch) == (600, 32)
                assert abs(gap) < 0.05, gap           # the head does not cost the backbone its MLM
                assert abs(head_gap) < 0.05, head_gap  # the head catches up with the backbone
                assert starts["Condenser: head MLM (eq. 9)"] > starts["Condenser: late MLM (eq. 10)"]
            """),
        md("""
            Two things to read off. The backbone's MLM loss under Condenser training stays as low
            as that of plain MLM: the head and its bottleneck do not cost the backbone its
            language modelling, which is the paper's argument for calling Condenser *general*
            pre-training. And the head, which starts a little behind, catches up with the backbone
            within the run.

            ## Does the head use `[CLS]`?

            Catching up is not the same as using `[CLS]`: the head also sees the early token
            vectors, and could have learnt to predict from those alone. A direct test: run the
            trained Condenser on a batch of blocks twice, once as it is and once with every
            block's late `[CLS]` swapped for that of another block, and compare the head's loss.
            If the head relies on `[CLS]`, the wrong `[CLS]` must hurt.
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            from condenser_lite.model import masked_lm_loss

            trained = Condenser.from_pretrained(condenser_dir).to(device).eval()
            torch.manual_seed(seed)
            probe = {k: v.to(device) for k, v in collator([blocks[i] for i in range(min(512, len(blocks)))]).items()}
            with torch.no_grad():
                states = trained.backbone.bert(input_ids=probe["input_ids"], attention_mask=probe["attention_mask"],
                                               output_hidden_states=True)
                early, late_cls = states.hidden_states[trained.skip_from][:, 1:], states.last_hidden_state[:, :1]

                def head_loss_with(cls):
                    hidden = trained.head_forward(cls, early, probe["attention_mask"])
                    return masked_lm_loss(trained.backbone.cls, hidden, probe["labels"]).item()

                own, swapped = head_loss_with(late_cls), head_loss_with(late_cls.roll(1, dims=0))
                cls = late_cls[:, 0]
                cosine = F.cosine_similarity(cls[:, None], cls[None], dim=-1).mean().item()
            print(f"head MLM loss with its own [CLS] {own:.4f}, with another block's {swapped:.4f}; "
                  f"mean cosine between the late [CLS] of different blocks {cosine:.3f}")
            """),
        code("""
            if check_claims:
                assert abs(swapped - own) < 0.01    # at this scale the head ignores [CLS] ...
                assert cosine > 0.9                 # ... which carries almost nothing block-specific
            """),
        md("""
            At this scale it does not: the head's loss is the same with the wrong `[CLS]`, and the
            late `[CLS]` vectors of different blocks point in nearly the same direction. The
            architecture is in place, but the pressure it is meant to create has not yet acted.
            There is little for `[CLS]` to carry: after minutes of training the backbone predicts
            only a little better than word frequencies (chapter 1), so its late layers add almost
            nothing that the early token vectors lack, and the head does as well without `[CLS]`.
            The bottleneck starts to matter once the late layers compute something about the
            whole text, which at BERT-base scale is what the days of pre-training buy. This is
            the first place where the scaled-down book reproduces a paper's mechanics but not its
            effect; the fine-tuning chapters test whether the Condenser arm is a better starting
            point anyway, and the scorecard collects the verdicts.

            What did the head cost? Per update, a Condenser step runs 2 more Transformer layers
            (6 instead of 4 here, 14 instead of 12 for BERT-base) and a second MLM projection at
            the masked positions. The measured time per step (which depends on the machine and on
            what else runs on it):
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            import json

            def seconds_per_step(run_dir):
                record = json.loads((Path(run_dir) / "pretrain_config.json").read_text())
                return record["wall_time"] / record["steps"]

            t_mlm, t_cd = seconds_per_step(cont_dir), seconds_per_step(condenser_dir)
            print(f"MLM {t_mlm:.2f} s/step, Condenser {t_cd:.2f} s/step, ratio {t_cd / t_mlm:.2f} "
                  f"(layers alone: {(config.num_hidden_layers + n_head_layers) / config.num_hidden_layers:.2f})")
            """),
        md("""
            The two stages may have run at different moments on a shared machine, so the ratio is
            indicative only; `benchmarks/bench_pretrain.py` measures both in one run.

            ## Summary

            * Condenser reads an ordinary BERT as early layers (eq. 6) and late layers (eq. 7) and
              adds a short head over $[h^{late}_{cls}; h^{early}]$ (eq. 8): the late layers can
              reach the MLM prediction only through the `[CLS]` vector.
            * It trains with the head's MLM loss plus the backbone's own (eq. 9-11), through one
              shared output layer; both are token means, computed only at masked positions. Our
              step-by-step version and `condenser_lite.model.Condenser` give the same losses.
            * Masking is BERT's whole-word 15% with 80/10/10 replacement, and the training loop
              reseeds every step from (seed, step), so resumed runs are exact and compared runs
              see identical batches.
            * Continued from the same BERT at equal compute, Condenser's backbone MLM loss tracks
              plain MLM's and its head catches up with the backbone. At this scale, though, the
              head does it without `[CLS]` (swapping `[CLS]` between blocks changes nothing): a
              briefly trained backbone has little about the whole text to condense. Chapter 3 adds
              coCondenser's contrastive loss, which acts on `[CLS]` directly.
            """),
    ]
    return name, notebook(cells)


# =============================================================================================
# Chapter 3: coCondenser
# =============================================================================================

def chapter_03():
    name = "03_cocondenser"
    cells = [
        title(name, "3. coCondenser: a contrastive loss on the target corpus, and a gradient cache", """
            Condenser is built to make `[CLS]` carry the meaning of a text, but nothing in it makes
            the dot product of two `[CLS]` vectors mean anything. coCondenser {cite}`gao2022cocondenser`
            adds an unsupervised contrastive loss on the corpus that will later be searched: two
            random spans of one document should score higher with each other than with spans of
            other documents. This chapter builds the span pairs, writes the loss (eq. 6) and the
            total loss (eq. 7) out and checks them against the library, derives the gradient cache
            (eq. 8-12) that lets the loss use very large batches, implements it step by step and
            checks that it gives the full-batch gradient exactly, measures its memory, and finally
            pre-trains coCondenser on the SciFact abstracts from chapter 2's Condenser. **Cost:**
            scaled-down, the demonstrations take about a minute and the pre-training run (250
            updates of 16 documents) about 2 minutes on a quiet 2-core CPU the first time (it is
            cached). At full scale (`full = True`) coCondenser starts from `Luyu/condenser` and
            pre-trains on MS MARCO with 2,000 documents per update; the authors report about 2 days
            on 4 RTX 2080 Ti GPUs or 19 hours on a v3-8 TPU; `max_steps` caps the run.
            """),
        colab_install(),
        parameters(BUDGET_PARAM + "demo_chunk = 4         # spans per chunk in the gradient-cache demonstration\n"),
        validate(BUDGET_CHECK + 'demo_chunk = parse_int(demo_chunk, "demo_chunk", minimum=1)\n'),
        setup(),
        md("""
            ## What Condenser leaves open

            Condenser (chapter 2) is built to make the late `[CLS]` vector informative: its MLM
            head can use the late layers only through it. But even where that works, the head reads `[CLS]` through two Transformer
            layers, a non-linear decoder, so nothing requires that two texts with similar meaning
            get `[CLS]` vectors with a large inner product. A retriever ranks by exactly that inner
            product, and fine-tuning has to build the embedding space from labelled pairs; the
            best fine-tuning pipeline of the time, RocketQA {cite}`qu2021rocketqa`, needed
            thousands of queries per batch and denoised hard negatives to do it well. coCondenser's answer is to shape the
            embedding space *before* fine-tuning, without labels, on the corpus the retriever will
            search: spans of one document are treated as positives of each other, spans of
            other documents as negatives.

            Both stages chain: coCondenser starts from the Condenser checkpoint *including its
            head*, and keeps training both MLM losses next to the new contrastive one.
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            from condenser_lite.model import Condenser
            from condenser_lite import experiments
            from condenser_lite.pretraining import paper_cocondenser, pretrain, read_log, target_documents
            from condenser_lite.tokenizer import load_tokenizer

            budget = experiments.get_budget("full" if full else budget)      # the name becomes the settings
            check_claims = budget.name == "tiny"                              # the prose describes the tiny budget
            if full:
                condenser_dir = "Luyu/condenser"
                co_cfg = paper_cocondenser(max_steps=max_steps)
                demo_cfg = co_cfg.replace(corpus_limit=20_000)   # the span demonstrations need only a slice
            else:
                bert_dir = experiments.pretrain_arm("bert", budget)["checkpoint"]
                condenser_dir = experiments.pretrain_arm("condenser", budget, init=bert_dir)["checkpoint"]
                co_cfg = experiments.arm_config("cocondenser", budget, init=condenser_dir)   # a PretrainConfig
                demo_cfg = co_cfg
            tokenizer = load_tokenizer(condenser_dir)
            condenser = Condenser.from_pretrained(condenser_dir, head="load").to(device).eval()
            print(condenser_dir)
            """),
        md("""
            ## Span pairs

            Given a random list of $n$ documents $[d_1, \\dots, d_n]$, coCondenser cuts two spans
            from each, giving a batch $[s_{11}, s_{12}, s_{21}, s_{22}, \\dots, s_{n1}, s_{n2}]$ in
            which partners sit next to each other. The authors take random non-overlapping
            sequences of about 128 tokens and draw new ones every epoch. `spans.SpanPairs` does
            this on token ids, with spans of at most `max_len - 2` tokens (room for `[CLS]` and
            `[SEP]`; 62 tokens in the scaled-down runs, whose models read 64):

            * a document of at least $2 \\times 62$ tokens gives two full-length spans at random,
              non-overlapping positions;
            * a shorter one is cut once at a random point, so the two spans cover it between them,
              each at least `min_span` = 16 tokens long;
            * a document of fewer than $2 \\times 16$ tokens cannot give two such spans and is
              **skipped** (pairing a span with itself or with an overlapping copy would make the
              positive trivial).

            The draw for epoch $e$ depends only on (seed, $e$), so a resumed run sees the same
            spans. The scaled-down target corpus is SciFact {cite}`wadden2020scifact`: 5,183
            abstracts of scientific papers.
            """),
        code("""
            from condenser_lite.spans import SpanPairCollator, SpanPairs, tokenize_documents

            documents = target_documents(demo_cfg)
            doc_ids = tokenize_documents(documents, tokenizer)      # title + text, no special tokens
            pairs = SpanPairs(doc_ids, max_len=co_cfg.max_len, min_span=co_cfg.min_span, seed=seed)
            lengths = np.array([len(d) for d in doc_ids])
            print(f"{pairs.n_documents} documents, {pairs.n_skipped} skipped, {len(pairs)} kept; "
                  f"median length {int(np.median(lengths))} tokens, {np.mean(lengths >= 2 * pairs.span_len):.0%} "
                  f"long enough for two full spans")
            """),
        md("""
            SciFact's abstracts are long enough that hardly any is skipped. The rule on a toy
            corpus of three documents of 10, 40 and 200 tokens:
            """),
        code("""
            toy = SpanPairs([list(range(5, 15)), list(range(5, 45)), list(range(5, 205))], max_len=64, min_span=16)
            print(f"{toy.n_skipped} of {toy.n_documents} skipped; kept documents {toy.doc_index.tolist()}; "
                  f"span (start, end) per kept document: {toy(0).span_bounds().tolist()}")
            assert toy.n_skipped == 1 and toy.doc_index.tolist() == [1, 2]
            """),
        code("""
            assert pairs.n_skipped == int(np.sum(lengths < 2 * co_cfg.min_span))
            if check_claims:
                assert co_cfg.max_len == 64 and co_cfg.min_span == 16
                assert pairs.n_documents == 5183 and pairs.n_skipped < 20
            """),
        md("""
            Here are the two spans of one document in epoch 0 and the token positions they were
            cut from (spans are cut at token boundaries, so one may start inside a word):
            """),
        code("""
            epoch0 = pairs(0)
            bounds = epoch0.span_bounds()          # [kept documents, 2 spans, (start, end)]
            k = 0
            source = int(pairs.doc_index[k])
            print(f"document {source} (id {documents[source].get('_id', source)}): "
                  f"{len(doc_ids[source])} tokens; spans at {bounds[k].tolist()}")
            for span in epoch0[k]["spans"]:
                print("-", tokenizer.decode(span[:40]), "...")
            """),
        code("""
            first, second = np.sort(bounds, axis=1)[:, 0], np.sort(bounds, axis=1)[:, 1]
            assert np.all(first[:, 1] <= second[:, 0])                    # the two spans never overlap
            assert np.all(bounds[:, :, 1] - bounds[:, :, 0] >= co_cfg.min_span)
            assert not np.array_equal(bounds, pairs(1).span_bounds())      # fresh spans every epoch
            """),
        md("""
            `SpanPairCollator` turns a list of such pairs into one MLM batch of $2n$ rows,
            `[CLS] span [SEP]` each, partners adjacent, every span masked independently with the
            collator of chapter 2 (the MLM half of the loss needs masked tokens in every span).
            """),
        code("""
            from condenser_lite.pretrain_data import MLMCollator

            span_collator = SpanPairCollator(MLMCollator(tokenizer))
            torch.manual_seed(seed)
            batch = {k: v.to(device) for k, v in span_collator([epoch0[i] for i in range(8)]).items()}
            print({k: tuple(v.shape) for k, v in batch.items()})
            print("rows 0 and 1 are the two spans of document", int(pairs.doc_index[0]),
                  "| every row starts with [CLS]:", bool((batch["input_ids"][:, 0] == tokenizer.cls_token_id).all()))
            """),
        md("""
            ## The contrastive loss

            Let $h_{ij}$ be the late `[CLS]` vector of span $s_{ij}$ (the vector fine-tuning will
            use). coCondenser's loss for that span is

            $$\\mathcal{L}^{co}_{ij} = -\\log \\frac{\\exp(\\langle h_{i1}, h_{i2} \\rangle)}
              {\\sum_{k=1}^{n} \\sum_{l=1}^{2} \\mathbb{I}_{ij \\neq kl} \\exp(\\langle h_{ij}, h_{kl} \\rangle)} \\tag{6}$$

            The numerator scores the span against its partner; the denominator sums over every
            other span in the batch, partner included, and leaves out only the span itself (the
            indicator $\\mathbb{I}_{ij \\neq kl}$). It is a softmax cross-entropy over $2n - 1$
            candidates whose correct answer is the partner: SimCLR's loss {cite}`chen2020simclr`
            with random spans as the augmentation, or a "skip-span" language model, as the paper puts it. Following the
            authors' code, $\\langle \\cdot, \\cdot \\rangle$ is the raw dot product: no
            normalisation and no temperature. Leaving the span itself out matters with raw dot
            products, since $\\langle h, h \\rangle = \\lVert h \\rVert^2$ would otherwise usually be
            the largest score.

            First a direct transcription of eq. 6, one term at a time, on the Condenser's vectors
            for the 8-document batch above:
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            def co_loss_by_hand(h):
                \"\"\"L^co_ij of eq. 6 for every span; row 2i + j of h is span s_ij (j = 0, 1).\"\"\"
                n = h.shape[0] // 2
                terms = []
                for i in range(n):
                    for j in range(2):
                        h_ij = h[2 * i + j]
                        positive = h[2 * i] @ h[2 * i + 1]                        # <h_i1, h_i2>
                        others = [h_ij @ h[2 * k + l] for k in range(n) for l in range(2) if (k, l) != (i, j)]
                        terms.append(torch.logsumexp(torch.stack(others), dim=0) - positive)
                return torch.stack(terms)

            with torch.no_grad():
                h = condenser(**batch).cls          # late [CLS], [2n, H]
            by_hand = co_loss_by_hand(h)
            print(np.round(by_hand.cpu().numpy(), 3))
            """),
        md("""
            The same in matrix form: all scores at once as $S = H H^\\top$, the diagonal set to
            $-\\infty$ so that a span never competes with itself, and a cross-entropy whose target
            for row $r$ is its partner, $r \\oplus 1$ (row $2i$ pairs with $2i + 1$). That is what
            `losses.span_contrastive_loss` computes, averaged over the $2n$ spans:
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            import torch.nn.functional as F

            from condenser_lite.losses import span_contrastive_accuracy, span_contrastive_loss

            scores = (h @ h.T).masked_fill(torch.eye(len(h), dtype=torch.bool, device=h.device), float("-inf"))
            partner = torch.arange(len(h), device=h.device) ^ 1
            matrix_form = F.cross_entropy(scores, partner, reduction="none")

            # The scores are dot products of size ~100 here, so float32 rounding alone moves a loss by ~1e-5.
            tolerance = 1e-6 * scores[~scores.isinf()].abs().max().item()
            assert torch.allclose(matrix_form, by_hand, atol=tolerance)
            assert torch.allclose(span_contrastive_loss(h, reduction="none"), by_hand, atol=tolerance)
            assert torch.allclose(span_contrastive_loss(h), by_hand.mean(), atol=tolerance)
            co_before = span_contrastive_loss(h).item()
            acc_before = span_contrastive_accuracy(h)
            print(f"mean L^co {co_before:.3f} (uniform guessing: log(2n - 1) = {np.log(len(h) - 1):.3f}); "
                  f"partner ranked first for {acc_before:.0%} of spans")
            """),
        md("""
            Before any contrastive training the loss is no better than uniform guessing and the
            partner comes first about as often as it would by chance (1 time in $2n - 1 = 15$):
            the Condenser's late `[CLS]` vectors of different texts are nearly parallel (chapter
            2), so their dot products hardly tell the spans apart.
            """),
        code("""
            if check_claims:
                assert abs(co_before - np.log(len(h) - 1)) < 0.5
                assert acc_before < 0.25
            """),
        md("""
            ## The total loss

            Each span also keeps its Condenser MLM loss $\\mathcal{L}^{mlm}_{ij}$ (head plus
            backbone, chapter 2), and the batch loss averages the sum of both over the $2n$ spans,

            $$\\mathcal{L} = \\frac{1}{2n} \\sum_{i=1}^{n} \\sum_{j=1}^{2} \\left[\\mathcal{L}^{mlm}_{ij} + \\mathcal{L}^{co}_{ij}\\right] \\tag{7}$$

            How big is the MLM term? Read literally, $\\mathcal{L}^{mlm}_{ij}$ is a *sum* over the
            span's masked tokens (eq. 5 of the paper, eq. 9 of chapter 2), so its average over
            spans would be the per-token loss times the number of masked tokens per span (15% of
            the span: about 9 for our 62-token spans, 19 for the paper's 126-token ones), and would
            swamp the contrastive term. The authors' code, like BERT's,
            takes the MLM loss as the *mean* over all masked tokens of the batch, and so do we:
            $\\mathcal{L} = \\mathcal{L}_{mlm}^{\\text{token mean}} + \\frac{1}{2n}\\sum_{ij}\\mathcal{L}^{co}_{ij}$,
            two averages whose size does not grow with the span length or the batch size (the MLM
            term is itself the sum of the head and backbone losses, each a token mean).

            That code also has a quirk we do not copy: with its gradient cache switched on, every
            chunk adds its MLM loss scaled as if it were the whole batch, which doubles the MLM
            weight relative to the run without the cache. The loss should not depend on how the
            batch is chunked, and here it does not.
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            masked_per_span = (batch["labels"] != -100).sum(1).float().mean().item()
            tokens_per_span = (batch["attention_mask"].sum(1) - 2).float().mean().item()   # without [CLS], [SEP]
            with torch.no_grad():
                out = condenser(**batch)
            total = out.loss + span_contrastive_loss(out.cls)             # eq. 7, token-mean MLM
            print(f"{masked_per_span:.1f} masked tokens per span; MLM {out.loss.item():.3f} "
                  f"(head {out.head_loss.item():.3f} + late {out.late_loss.item():.3f}), "
                  f"contrastive {span_contrastive_loss(out.cls).item():.3f}, total {total.item():.3f}")
            """),
        md("""
            `gradcache.cocondenser_step` computes this loss and back-propagates it (it is the
            `step_fn` the training loop calls in coCondenser stages). Without chunking it is one
            forward and one backward:
            """),
        code("""
            from condenser_lite.gradcache import cocondenser_step

            metrics = cocondenser_step(condenser, batch, chunk_size=None)
            condenser.zero_grad(set_to_none=True)
            assert abs(metrics["loss"] - total.item()) < 1e-4
            assert abs(metrics["mlm_loss"] - out.loss.item()) < 1e-4
            assert abs(masked_per_span / tokens_per_span - 0.15) < 0.02
            """),
        md("""
            ## The gradient cache

            Eq. 6 ties every span of the batch to every other span, so the usual way to get its
            gradient holds the activations of the whole batch in memory at once. With 4,000 spans
            of 128 tokens through BERT-base, that is far more than a GPU holds. Gradient
            accumulation does not help: splitting the batch would also split the set of negatives.
            The gradient cache {cite}`gao2021gradcache` removes the dependency by the chain rule.
            Write the contrastive part as a sum, $\\mathcal{L}^{co} = \\sum_{ij} \\mathcal{L}^{co}_{ij}$, so that

            $$\\mathcal{L} = \\frac{1}{2n}\\left[\\mathcal{L}^{co} + \\sum_{i}\\sum_{j} \\mathcal{L}^{mlm}_{ij}\\right] \\tag{8}$$

            The contrastive loss depends on the model parameters $\\Theta$ only through the
            vectors $h_{ij}$. Its gradient with respect to each vector,

            $$v_{ij} = \\frac{\\partial \\mathcal{L}^{co}}{\\partial h_{ij}} \\tag{9}$$

            needs only the vectors themselves, not the activations that produced them. Collect
            these $v_{ij}$ in a cache $C$. By the chain rule

            $$\\frac{\\partial \\mathcal{L}^{co}}{\\partial \\Theta} = \\sum_{i}\\sum_{j} \\frac{\\partial \\mathcal{L}^{co}}{\\partial h_{ij}} \\frac{\\partial h_{ij}}{\\partial \\Theta} \\tag{10}$$

            $$= \\sum_{i}\\sum_{j} v_{ij}^\\top \\frac{\\partial h_{ij}}{\\partial \\Theta} \\tag{11}$$

            so the gradient of the whole loss is

            $$\\frac{\\partial \\mathcal{L}}{\\partial \\Theta} = \\frac{1}{2n} \\sum_{i}\\sum_{j} \\left[v_{ij}^\\top \\frac{\\partial h_{ij}}{\\partial \\Theta} + \\frac{\\partial \\mathcal{L}^{mlm}_{ij}}{\\partial \\Theta}\\right] \\tag{12}$$

            Every term of eq. 12 involves one span only. The recipe:

            1. **Pass 1, no gradients.** Encode the batch chunk by chunk, keeping only the vectors
               $h_{ij}$ (a few hundred floats per span) and dropping all activations.
            2. **Cache.** Compute the contrastive loss on the detached vectors and its gradient
               $v_{ij}$ with respect to them (eq. 9).
            3. **Pass 2, per chunk.** Re-encode the chunk with gradients and back-propagate the
               scalar $\\sum \\langle h_{ij}, v_{ij} \\rangle$ (with $v$ a constant its gradient
               with respect to $\\Theta$ is exactly $\\sum v_{ij}^\\top \\partial h_{ij} / \\partial
               \\Theta$) plus the chunk's share of the MLM loss. Gradients add up across chunks.

            Only one chunk's activations live at a time, for one extra forward pass per update.
            Two details make the result *exactly* the full-batch gradient rather than an
            approximation. **Dropout:** pass 2 must draw the same dropout masks as pass 1, or
            $h_{ij}$ in pass 2 is not the vector $v_{ij}$ was computed for; so the random-number
            generator state is recorded before each chunk's first forward and restored for its
            second (on a GPU, the CUDA generators' too). **The MLM share:** with the token-mean MLM
            loss, a chunk contributes its own mean weighted by its share of the batch's masked
            tokens, so the chunks add up to the batch mean whatever the chunk size.

            Let us build it on a very small Condenser with dropout switched on, and compare with
            the gradient of one ordinary backward pass.
            """),
        code("""
            from condenser_lite.model import tiny_bert_config

            torch.manual_seed(seed)
            small_cfg = tiny_bert_config(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, intermediate_size=128, max_position_embeddings=64)
            small = Condenser.from_config(small_cfg, skip_from=1, n_head_layers=1).to(device).train()  # dropout on
            print(f"dropout {small_cfg.hidden_dropout_prob}, {sum(p.numel() for p in small.parameters()):,} parameters")

            short_pairs = SpanPairs(doc_ids, max_len=64, min_span=8, seed=seed)(0)
            torch.manual_seed(seed)
            gc_batch = {k: v.to(device) for k, v in span_collator([short_pairs[i] for i in range(6)]).items()}
            chunks = [{k: v[s:s + demo_chunk] for k, v in gc_batch.items()}
                      for s in range(0, len(gc_batch["input_ids"]), demo_chunk)]
            n_masked = (gc_batch["labels"] != -100).sum()
            print(f"{len(gc_batch['input_ids'])} spans in {len(chunks)} chunks of at most {demo_chunk}")
            """),
        md("""
            **Pass 1**: no graph, only the `[CLS]` vectors, and the generator state before each
            chunk.
            """),
        code("""
            torch.manual_seed(1234)
            rng_states, reps = [], []
            with torch.no_grad():
                for chunk in chunks:
                    rng_states.append(torch.get_rng_state())
                    reps.append(small(input_ids=chunk["input_ids"], attention_mask=chunk["attention_mask"]).cls)
            h_all = torch.cat(reps)
            print(tuple(h_all.shape))
            """),
        md("""
            **The cache**: the gradient of the contrastive loss (here the mean over spans, which
            already holds the $1/2n$ of eq. 12) with respect to the detached vectors.
            """),
        code("""
            h_leaf = h_all.detach().requires_grad_()
            co_loss = span_contrastive_loss(h_leaf)
            (v,) = torch.autograd.grad(co_loss, h_leaf)        # eq. 9, one row per span
            cache = v.split(demo_chunk)
            print(f"L^co {co_loss.item():.4g}; cache {tuple(v.shape)}")
            """),
        md("""
            **Pass 2**: each chunk again, with gradients, under its recorded generator state
            (`fork_rng` keeps the replay from disturbing the generator outside the block), then the
            backward of $\\sum \\langle h, v \\rangle$ plus the chunk's share of the MLM loss.
            """),
        code("""
            def grads_of(model):
                return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}

            def pass_two(replay=True):
                small.zero_grad(set_to_none=True)
                mlm_total, reps_again = 0.0, []
                for chunk, state, v_chunk in zip(chunks, rng_states, cache):
                    with torch.random.fork_rng():
                        if replay:
                            torch.set_rng_state(state)
                        out = small(**chunk)
                    share = out.loss * (chunk["labels"] != -100).sum() / n_masked    # this chunk's MLM share
                    ((out.cls * v_chunk).sum() + share).backward()                   # eq. 12, this chunk's terms
                    mlm_total += share.item()
                    reps_again.append(out.cls.detach())
                return co_loss.item() + mlm_total, grads_of(small), torch.cat(reps_again)

            loss_cached, grads_cached, reps_replayed = pass_two(replay=True)
            assert torch.equal(reps_replayed, h_all)    # same dropout masks: the very same vectors
            print(f"loss {loss_cached:.4g}")
            """),
        md("""
            **The reference**: the same loss as one autograd graph over the whole batch and one
            backward pass. Dropout masks are random, so to compare number for number the reference
            must use the masks pass 1 drew; it replays the same generator states, chunk by chunk,
            but keeps every chunk's graph alive until a single backward of eq. 7.
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            small.zero_grad(set_to_none=True)
            cls_parts, mlm = [], 0.0
            for chunk, state in zip(chunks, rng_states):
                with torch.random.fork_rng():
                    torch.set_rng_state(state)
                    out = small(**chunk)
                cls_parts.append(out.cls)
                mlm = mlm + out.loss * (chunk["labels"] != -100).sum() / n_masked
            loss_full = mlm + span_contrastive_loss(torch.cat(cls_parts))            # eq. 7
            loss_full.backward()
            grads_full = grads_of(small)

            def max_rel_diff(a, b):
                scale = max(g.abs().max().item() for g in b.values())
                return max((a[k] - b[k]).abs().max().item() for k in b) / scale

            print(f"loss: full {loss_full.item():.4g}, cached {loss_cached:.4g}; "
                  f"largest gradient difference {max_rel_diff(grads_cached, grads_full):.1e} of the largest gradient")
            """),
        code("""
            assert abs(loss_full.item() - loss_cached) < 1e-5
            assert grads_cached.keys() == grads_full.keys()
            assert max_rel_diff(grads_cached, grads_full) < 1e-5
            """),
        md("""
            Identical up to float rounding. Without the replay, pass 2 draws fresh dropout masks,
            its vectors are not the ones the cache was computed for, and the gradient is wrong:
            """),
        code("""
            _, grads_no_replay, reps_no_replay = pass_two(replay=False)
            wrong = max_rel_diff(grads_no_replay, grads_full)
            print(f"without replay: largest gradient difference {wrong:.2g} of the largest gradient")
            assert not torch.allclose(reps_no_replay, h_all)
            assert wrong > 1e-3
            """),
        md("""
            The library's `cocondenser_step` is this procedure with the bookkeeping a real run
            needs (mixed precision per forward, CUDA generator states, gathering vectors across
            GPUs, one gradient all-reduce per update). Started from the same generator state, it
            gives the same loss and gradient:
            """),
        code("""
            small.zero_grad(set_to_none=True)
            torch.manual_seed(1234)
            lib = cocondenser_step(small, gc_batch, chunk_size=demo_chunk)
            grads_lib = grads_of(small)
            small.zero_grad(set_to_none=True)
            print({k: float(f"{val:.4g}") for k, val in lib.items()})
            assert abs(lib["loss"] - loss_full.item()) < 1e-5
            assert max_rel_diff(grads_lib, grads_full) < 1e-5

            torch.manual_seed(1234)
            cocondenser_step(small, gc_batch, chunk_size=demo_chunk, replay_rng=False)
            assert max_rel_diff(grads_of(small), grads_full) > 1e-3     # and its replay is what makes it exact
            small.zero_grad(set_to_none=True)
            """),
        md("""
            ## Memory versus batch size

            What the cache buys is memory. The activations a backward pass needs are the tensors
            autograd saves during the forward; PyTorch lets us watch them with
            `saved_tensors_hooks`. We count the bytes saved (weights excluded) for one update of
            the scaled-down model (4 layers, hidden 128, plus the 2-layer head; spans of 64 tokens):
            without the cache, the forward of the whole batch; with it, one chunk of 16 spans in
            pass 2 plus the cache itself (the vectors and their gradients, $2 \\times 2n \\times H$
            floats). Pass 1 keeps nothing.
            """),
        code("""
            def saved_activation_bytes(model, fn):
                \"\"\"Bytes of the tensors autograd keeps for backward while fn() runs (weights excluded).\"\"\"
                weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
                kept = {}

                def pack(t):
                    storage = t.untyped_storage()
                    if storage.data_ptr() not in weights:
                        kept[storage.data_ptr()] = storage.nbytes()
                    return t

                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    fn()
                return sum(kept.values())

            torch.manual_seed(seed)
            mem_cfg = tiny_bert_config(vocab_size=len(tokenizer), max_position_embeddings=64)
            mem_model = Condenser.from_config(mem_cfg, skip_from=2, n_head_layers=2).to(device).train()
            torch.manual_seed(seed)
            n_docs = min(128, len(short_pairs))
            mem_rows = span_collator([short_pairs[i] for i in range(n_docs)])   # 256 spans of <= 64 tokens
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            sizes = [n for n in (16, 32, 64, 128, 256) if n <= 2 * n_docs]
            gc_chunk, hidden = 16, mem_cfg.hidden_size
            memory = {"no cache": [], "gradient cache": []}
            for n_spans in sizes:
                rows = {k: v[:n_spans].to(device) for k, v in mem_rows.items()}

                def whole_batch():
                    out = mem_model(**rows)
                    return out.loss + span_contrastive_loss(out.cls)

                def one_chunk():
                    out = mem_model(**{k: v[:gc_chunk] for k, v in rows.items()})
                    return out.loss + (out.cls * torch.ones_like(out.cls)).sum()

                memory["no cache"].append(saved_activation_bytes(mem_model, whole_batch) / 2**20)
                cache_bytes = 2 * n_spans * hidden * 4
                memory["gradient cache"].append((saved_activation_bytes(mem_model, one_chunk) + cache_bytes) / 2**20)
            memory_table = pd.DataFrame(memory, index=pd.Index(sizes, name="spans per update")).round(1)
            memory_table
            """),
        code("""
            fig, ax = plt.subplots(figsize=(5.5, 3.5))
            for label, values in memory.items():
                ax.plot(sizes, values, marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(sizes, [str(s) for s in sizes])
            ax.set_xlabel("spans per update (64 tokens each)")
            ax.set_ylabel("activations kept for backward (MiB)")
            ax.set_title("Memory of one coCondenser update")
            ax.legend()
            fig.tight_layout()
            fig.savefig(figures / "03_gradient_cache_memory.png")
            plt.show()
            """),
        md("""
            *Figure: activation memory of one update against batch size, on log scales. Without the
            cache it grows in proportion to the batch; with it, it stays at one chunk's worth,
            plus a cache that is tiny next to it.*
            """),
        code("""
            no_cache, cached = memory["no cache"], memory["gradient cache"]
            growth = sizes[-1] / sizes[0]                            # 16x the spans (scaled-down)
            assert no_cache[-1] / no_cache[0] > 0.6 * growth         # no cache: memory grows with the batch
            assert cached[-1] / cached[0] < 1.2                      # the cache: nearly flat
            assert cached[-1] < no_cache[-1] * 2 * gc_chunk / sizes[-1]
            """),
        md("""
            The price is one extra forward pass per update (pass 1), about a third more compute
            for a model whose backward costs twice its forward. On a CPU with a few dozen spans
            per update everything fits anyway, so the scaled-down run below uses no chunks; the
            full-scale preset runs 4,000 spans per update in chunks of 128.

            ## Pre-training coCondenser on SciFact

            Now the real thing, scaled down: the `cocondenser` arm of `condenser_lite.experiments`.
            From chapter 2's Condenser (head included), 250 updates of 16 SciFact abstracts (32
            spans of at most 64 tokens; the run covers about three quarters of the corpus), the same
            optimiser settings as before and the loss of eq. 7. At full scale the same cell
            runs `paper_cocondenser()`: from `Luyu/condenser` on the MS MARCO passages, 2,000
            documents per update through the gradient cache, AdamW with learning rate $10^{-4}$.
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            if full:
                co_dir = pretrain(co_cfg, progress=False)
            else:
                co_dir = experiments.pretrain_arm("cocondenser", budget, init=condenser_dir)["checkpoint"]
            co_log = pd.DataFrame(read_log(co_dir)).set_index("step")
            print(co_dir, f"{len(co_log)} updates in {co_log['elapsed'].iloc[-1]:.0f} s", sep="\\n")
            """),
        code("""
            smooth = co_log[["head_loss", "late_loss", "co_loss", "co_acc"]].rolling(5, min_periods=1).mean()
            chance = 1 / (2 * co_cfg.batch_size - 1)
            fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
            left.plot(smooth.index, smooth["head_loss"], label="head MLM (eq. 9)")
            left.plot(smooth.index, smooth["late_loss"], label="late MLM (eq. 10)")
            left.plot(smooth.index, smooth["co_loss"], label="contrastive (eq. 6)")
            left.set_xlabel("update")
            left.set_ylabel("loss (5-update mean)")
            left.legend()
            right.plot(smooth.index, smooth["co_acc"], color="C2")
            right.axhline(chance, color="grey", linestyle="--", label=f"chance, 1/(2n-1) = {chance:.3f}")
            right.set_xlabel("update")
            right.set_ylabel("partner ranked first")
            right.set_ylim(0, max(0.25, 1.2 * smooth["co_acc"].max()))
            right.legend()
            fig.suptitle("coCondenser on SciFact, from the Condenser checkpoint")
            fig.tight_layout()
            fig.savefig(figures / "03_cocondenser_curves.png")
            plt.show()
            """),
        md("""
            *Figure: left, the three losses of coCondenser pre-training; right, the fraction of
            spans in each batch whose highest-scoring other span is their partner, against the
            chance level of picking one of the $2n - 1$ others at random.*
            """),
        code("""
            # NBVAL_IGNORE_OUTPUT
            start, end = co_log.head(5).mean(), co_log.tail(10).mean()
            pd.DataFrame({"first 5 updates": start, "last 10 updates": end}).loc[
                ["loss", "mlm_loss", "co_loss", "co_acc"]].round(3)
            """),
        code("""
            if check_claims:
                assert (co_cfg.max_steps, co_cfg.batch_size) == (250, 16)
                assert start["co_loss"] > 1.5 * np.log(1 / chance)           # starts far above uniform guessing
                assert end["co_loss"] < np.log(1 / chance)                   # ends below it
                assert 1.5 * chance < end["co_acc"] < 0.3                    # above chance, far from solved
                assert end["mlm_loss"] < start["mlm_loss"] - 1.0             # MLM keeps improving on the new text
            """),
        md("""
            Two phases show. In the first few updates the contrastive loss collapses from far above
            the uniform-guessing level $\\log(2n - 1) \\approx 3.43$ to below it. That is mostly
            the model undoing a bad start: its nearly parallel `[CLS]` vectors have large dot
            products, and tiny differences between large scores make the softmax confidently wrong.
            After that, progress is slow: by the end the partner is ranked first for one span in
            eight to twelve (how many varies between runs), a few times the chance rate of one in
            31 but a long way from a well-formed embedding space. The MLM losses meanwhile keep falling: SciFact's scientific abstracts are new text for a
            model pre-trained on Wikipedia and news, which is the knowledge-readiness half of
            continuing pre-training on the target corpus. The paper's coCondenser spends days on
            this stage, with 4,000 spans per update; ours spends minutes with 32. Chapter 4
            fine-tunes retrievers from the BERT, Condenser and coCondenser checkpoints on SciFact
            and measures what, at this scale, the warm-up is worth.

            ## Summary

            * coCondenser keeps Condenser's architecture and MLM losses and adds a contrastive loss
              over span pairs cut from the target corpus (eq. 6): each span's positive is the other
              span of its document, all other spans in the batch are negatives, scores are raw dot
              products of late `[CLS]` vectors, and the span itself is excluded.
            * The batch loss (eq. 7) is the token-mean MLM loss plus the mean contrastive loss; it
              does not depend on how the batch is split (unlike the authors' code with its cache on).
            * The gradient cache (eq. 8-12) computes $v_{ij} = \\partial \\mathcal{L}^{co} / \\partial h_{ij}$
              on detached vectors, then back-propagates $\\langle h_{ij}, v_{ij} \\rangle$ plus the MLM
              share chunk by chunk; with the dropout generator replayed it reproduces the full-batch
              gradient exactly, and its activation memory stays at one chunk's.
            * Pre-trained for a few minutes on SciFact, the scaled-down coCondenser brings the
              contrastive loss below the uniform-guessing level and ranks a span's partner first
              a few times as often as chance, while its MLM loss on the new text keeps
              falling: a beginning, not yet the paper's warmed-up embedding space.
            """),
    ]
    return name, notebook(cells)


CHAPTERS = {"01": chapter_01, "02": chapter_02, "03": chapter_03}


def main(argv: list[str]) -> None:
    wanted = argv or sorted(CHAPTERS)
    for key in wanted:
        name, nb = CHAPTERS[key]()
        nbformat.validate(nb)
        path = NOTEBOOKS / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        print("wrote", path.relative_to(ROOT))


if __name__ == "__main__":
    main(sys.argv[1:])
