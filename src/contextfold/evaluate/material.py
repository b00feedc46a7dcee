"""Material for planted sessions: real Zotero records, tool results of a chosen size and
user prose that never repeats a sentence (English, Japanese and code).

The Zotero records are the packaged `contextfold.data.zotero` ones (real Web API
responses); keys past them are drawn from Zotero's key alphabet. Everything is seeded.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from importlib import resources
from typing import Any

from ..core.sizing.estimator import estimate_text
from ..core.text.identifiers import ZOTERO_KEY_ALPHABET


def zotero_items() -> list[dict[str, Any]]:
    """The packaged Zotero items (their `data` objects)."""
    text = resources.files("contextfold.data.zotero").joinpath("items_doc.json").read_text(
        encoding="utf-8")
    return [e["data"] for e in json.loads(text)]


SENTENCES = (
    "The chapter returns to the deductive method and the way the narrator frames it.",
    "Letters from the period show how the serial publication shaped the reception.",
    "The author compares stage adaptations with the printed stories in some detail.",
    "Several reviewers of the time read the detective as a figure of imperial order.",
    "The annotated editions disagree on the chronology of the early adventures.",
)


def fulltext(rng: random.Random, key: str, title: str, target_tokens: int) -> str:
    """A tool result of about `target_tokens` (by the estimator): page text and references."""
    head = f"Full text of {key} ({title[:60]}).\n"
    refs = "References:\n" + "\n".join(
        f"[{i + 1}] doi:10.{rng.randint(1000, 9999)}/ref.{rng.randint(10_000, 99_999)}"
        for i in range(8))
    body: list[str] = []
    page = 1
    while estimate_text(head + " ".join(body) + refs, "gpt") < target_tokens:
        body.append(f"[p. {page}] " + " ".join(rng.choice(SENTENCES) for _ in range(6)))
        page += 1
    return head + "\n".join(body) + "\n" + refs


def zotero_key(rng: random.Random) -> str:
    return "".join(rng.choice(ZOTERO_KEY_ALPHABET) for _ in range(8))



# --------------------------------------------------------------------------- long user prose

# Word pools for prose that never repeats a sentence (issue 27: a session built from a few
# repeated sentences compresses unrealistically well). Deliberately free of the words the
# summariser reads as rules, decisions or plans, so only the planted sentences are those.
_SUBJECTS = ("the narrator", "the second edition", "the serial version", "the archive copy",
             "the preface", "the first reviewer", "the stage script", "the translator",
             "the index", "the appendix", "the manuscript", "the frontispiece")
_VERBS = ("describes", "omits", "reframes", "quotes", "contradicts", "dates", "annotates",
          "revises", "echoes", "cites", "mislabels", "compresses")
_OBJECTS = ("the deductive method", "the London fog", "the Baker Street rooms",
            "the Reichenbach episode", "the colonial subplot", "the violin passages",
            "the cocaine references", "the Irregulars", "the final bow", "the dog at night",
            "the speckled band", "the five pips")
_TAILS = ("in a footnote", "across two chapters", "with a marginal sketch", "in passing",
          "at unusual length", "with a date that conflicts", "in the closing paragraph",
          "without attribution", "in a revised table", "in the printer's proof")
_JA_SUBJECTS = ("語り手は", "第二版は", "連載版は", "序文は", "翻訳者は", "索引は", "付録は",
                "原稿は")
_JA_OBJECTS = ("推理の方法を", "ロンドンの霧を", "ベイカー街の部屋を", "ライヘンバッハの場面を",
               "植民地の挿話を", "バイオリンの場面を", "最後の挨拶を", "まだらの紐を")
_JA_VERBS = ("詳しく描いている。", "省略している。", "言い換えている。", "引用している。",
             "脚注で触れている。", "別の日付で記している。", "短くまとめている。",
             "書き直している。")
_CODE_NAMES = ("parse", "collect", "score", "align", "merge", "rank", "clean", "count")
_CODE_OBJECTS = ("citations", "editions", "reviews", "quotes", "dates", "chapters", "notes")


def prose_sentence(rng: random.Random, n: int) -> str:
    return (f"In note {n}, {rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} "
            f"{rng.choice(_OBJECTS)} {rng.choice(_TAILS)} (page {rng.randint(1, 480)}).")


def _ja_sentence(rng: random.Random, n: int) -> str:
    return (f"メモ{n}：{rng.choice(_JA_SUBJECTS)}{rng.randint(1, 480)}ページで"
            f"{rng.choice(_JA_OBJECTS)}{rng.choice(_JA_VERBS)}")


def _code_block(rng: random.Random, n: int) -> str:
    name = f"{rng.choice(_CODE_NAMES)}_{rng.choice(_CODE_OBJECTS)}_{n}"
    lines = [f"def {name}(rows):"]
    for i in range(rng.randint(3, 7)):
        lines.append(f"    rows = [r for r in rows if r.get('v{i}', 0) > {rng.randint(1, 99)}]")
    lines.append(f"    return sorted(rows, key=lambda r: r['k{rng.randint(0, 9)}'])")
    return "```python\n" + "\n".join(lines) + "\n```"


class Prose:
    """Non-repeating user prose: numbered sentences (English or Japanese) and code blocks."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.n = 0

    def paragraph(self, target_tokens: int, planted: Sequence[str] = ()) -> str:
        """About `target_tokens` (estimated) of prose with `planted` sentences in the middle."""
        parts: list[str] = []
        planted_at = max(1, target_tokens // 3)  # well inside the message, not at its ends
        placed = False
        while True:
            text = " ".join(parts)
            size = estimate_text(text, "gpt")
            if not placed and size >= planted_at:
                parts.extend(planted)
                placed = True
                text = " ".join(parts)  # what is returned must hold what was planted
            if size >= target_tokens and placed:
                return text
            self.n += 1
            kind = self.rng.random()
            if kind < 0.15:
                parts.append("\n\n" + _code_block(self.rng, self.n) + "\n\n")
            elif kind < 0.40:
                parts.append(_ja_sentence(self.rng, self.n))
            else:
                parts.append(prose_sentence(self.rng, self.n))


