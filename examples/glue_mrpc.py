"""Offline stand-ins for what Ray's BERT/MRPC examples download, so that they run anywhere in a few seconds.

Ray's DeepSpeed and Accelerate examples fine-tune ``bert-base-cased`` (Hugging Face Hub) on GLUE MRPC (the
``datasets`` package), and the Accelerate ones score it with ``evaluate.load("glue", "mrpc")``. The ported
examples (``examples/deepspeed_torch_trainer*.py``, ``examples/accelerate_torch_trainer*.py``) call these
instead, one line each, marked ``# tuneplat port:`` where they do:

- ``load_dataset("glue", "mrpc")`` -> :func:`load_mrpc` (generated sentence pairs, MRPC's columns);
- ``AutoTokenizer.from_pretrained("bert-base-cased")`` -> :func:`bert_tokenizer` (a word-level BERT tokenizer);
- ``AutoModelForSequenceClassification.from_pretrained("bert-base-cased", return_dict=True)`` -> :func:`tiny_bert`
  (a 2-layer BERT from a config);
- ``evaluate.load("glue", "mrpc")`` -> :class:`MrpcMetric` (accuracy and F1, the same keys).

The data are a pure function of ``seed``: each row holds ``sentence1``, ``sentence2`` and ``label`` (1 when
``sentence2`` restates ``sentence1``: the same words in another order with one word swapped for a synonym, 0 when
it is another sentence of the same length), the columns and types of MRPC's rows.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["MrpcMetric", "bert_tokenizer", "load_mrpc", "tiny_bert"]

_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# word -> synonym (both directions), so that a paraphrase need not repeat every word of its sentence
_SYNONYMS = {"shares": "stocks", "rose": "climbed", "fell": "dropped", "company": "firm", "said": "stated",
             "profit": "earnings", "quarter": "period", "large": "big", "small": "little", "today": "now"}
_WORDS = sorted({*_SYNONYMS, *_SYNONYMS.values(), "the", "a", "of", "in", "on", "and", "market", "bank", "report",
                 "court", "judge", "city", "police", "year", "week", "new", "old", "price", "sales", "officials",
                 "government", "plan", "deal", "analysts", "investors", "percent", "million", "after", "before"})
VOCAB: dict[str, int] = {tok: i for i, tok in enumerate(_SPECIAL + _WORDS)}


def _pair(rng: random.Random) -> dict[str, Any]:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 10))]
    label = rng.randint(0, 1)
    if label:
        other = words[:]
        rng.shuffle(other)
        swappable = [i for i, w in enumerate(other) if w in _SYNONYMS or w in _SYNONYMS.values()]
        if swappable:
            i = rng.choice(swappable)
            other[i] = _SYNONYMS.get(other[i]) or next(k for k, v in _SYNONYMS.items() if v == other[i])
    else:
        other = [rng.choice(_WORDS) for _ in words]
    return {"sentence1": " ".join(words), "sentence2": " ".join(other), "label": label}


def load_mrpc(seed: int = 0, train_rows: int = 128, validation_rows: int = 64) -> dict[str, list[dict[str, Any]]]:
    """Generated stand-in for ``datasets.load_dataset("glue", "mrpc")``: ``{"train": rows, "validation": rows}``.

    Each split is a list of row dicts (``sentence1``, ``sentence2``, ``label``): a map-style dataset for
    ``torch.utils.data.DataLoader``, as a Hugging Face split is, and ``pandas.DataFrame(rows)`` gives its frame.

    Example:
        >>> rows = load_mrpc(train_rows=4, validation_rows=2)
        >>> sorted(rows["train"][0]), len(rows["validation"])
        (['label', 'sentence1', 'sentence2'], 2)
    """
    rng = random.Random(seed)
    return {"train": [_pair(rng) for _ in range(train_rows)],
            "validation": [_pair(rng) for _ in range(validation_rows)]}


def bert_tokenizer() -> Any:
    """A cased BERT-style tokenizer over :data:`VOCAB`, built in memory (no download).

    Called as the Hub's tokenizer is: ``tokenizer(first, second, truncation=True, padding="longest",
    return_tensors="pt")`` gives ``input_ids``, ``token_type_ids`` (0 for the first sentence, 1 for the second) and
    ``attention_mask``, each sequence ``[CLS] first [SEP] second [SEP]``.
    """
    from tokenizers import Tokenizer, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(WordLevel(VOCAB, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    cls, sep = VOCAB["[CLS]"], VOCAB["[SEP]"]
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=64,
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def tiny_bert() -> Any:
    """A 2-layer, 32-wide ``BertForSequenceClassification`` (2 labels) from a config, initialised from torch's RNG.

    Stands in for ``AutoModelForSequenceClassification.from_pretrained("bert-base-cased", return_dict=True)``: the
    examples seed torch first (``transformers.set_seed``), so every rank builds the same weights.
    """
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=2)
    return BertForSequenceClassification(config)


class MrpcMetric:
    """Stand-in for ``evaluate.load("glue", "mrpc")``: ``add_batch(predictions=, references=)``, then ``compute()``.

    ``compute()`` returns ``{"accuracy": ..., "f1": ...}`` (F1 of the positive class, 0.0 when nothing is predicted
    or labelled positive) over the batches added since the last ``compute()``, and starts over.

    Example:
        >>> m = MrpcMetric()
        >>> m.add_batch(predictions=[1, 0, 1, 1], references=[1, 0, 0, 1])
        >>> m.compute()
        {'accuracy': 0.75, 'f1': 0.8}
    """

    def __init__(self) -> None:
        self._pairs: list[tuple[int, int]] = []

    def add_batch(self, *, predictions: Any, references: Any) -> None:
        self._pairs.extend(zip((int(p) for p in predictions), (int(r) for r in references), strict=True))

    def compute(self) -> dict[str, float]:
        pairs, self._pairs = self._pairs, []
        if not pairs:
            raise ValueError("MrpcMetric.compute(): no batch was added since the last compute()")
        tp = sum(1 for p, r in pairs if p == r == 1)
        predicted, actual = sum(p for p, _ in pairs), sum(r for _, r in pairs)
        return {"accuracy": sum(1 for p, r in pairs if p == r) / len(pairs),
                "f1": 2 * tp / (predicted + actual) if predicted + actual else 0.0}
