"""A long, realistic research-agent session built from real Zotero records (for the demo).

The session follows a literature review inside Zotero: search a collection, read item
metadata, read PDF pages, write annotations, hit a failed tool call, take a user correction
(in Japanese), run parallel tool calls and read an EPUB. Item keys, titles, DOIs and
citations come from real Zotero Web API responses shipped as package data; page texts are
generated deterministically, so every run of the demo is the same.
"""

from __future__ import annotations

import json
import random
from functools import cache
from importlib import resources
from typing import Any

from .core.text.identifiers import ZOTERO_KEY_ALPHABET
from .core.values.messages import (
    AnnotationPart,
    CollectionPart,
    EpubLocationPart,
    Message,
    PdfPagePart,
    TagPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ZoteroItemPart,
    text_message,
)

COLLECTION_KEY = "9KH9TNSJ"
FOCUS_KEYS = ("PQKBRC33", "Z8N84QAJ", "B2VNV5Q7", "6XDC27WD", "ICK5M93W", "PG5ZCTJT")

_TOPICS = (
    "the deductive method as a narrative device",
    "the reception of Holmes among mathematicians",
    "serial publication in The Strand Magazine",
    "the ideology of order in late-Victorian crime fiction",
    "stage and screen adaptations between 1899 and 1959",
    "annotated editions and the Sherlockian 'Great Game'",
)


@cache
def _zotero_items() -> dict[str, dict[str, Any]]:
    data = resources.files("contextfold.data.zotero").joinpath("items_doc.json").read_text()
    return {item["key"]: item["data"] for item in json.loads(data)}


def _citation(item: dict[str, Any]) -> str:
    names = [c.get("lastName") or c.get("name") or "" for c in item.get("creators", [])]
    authors = " and ".join(n for n in names[:2] if n) or "Anon."
    year = next((tok for tok in item.get("date", "").replace(",", " ").split()
                 if tok.isdigit() and len(tok) == 4), "n.d.")
    return f"({authors} {year})"


def _zotero_key(rng: random.Random) -> str:
    return "".join(rng.choice(ZOTERO_KEY_ALPHABET) for _ in range(8))


def _page_text(rng: random.Random, title: str, page: int, sentences: int = 22) -> str:
    lines = []
    for i in range(sentences):
        topic = rng.choice(_TOPICS)
        n = rng.randint(3, 97)
        lines.append(
            f"On page {page}, {title} returns to {topic}; the author counts {n} instances "
            f"and argues (claim {page}.{i + 1}) that the pattern is deliberate rather than "
            f"accidental, citing letters from {rng.randint(1887, 1930)}."
        )
    return " ".join(lines)


def _calls(calls: list[tuple[str, str, dict[str, Any]]], text: str = "") -> Message:
    parts: list[Any] = [TextPart(text=text)] if text else []
    parts += [ToolCallPart(id=c, name=n, input=a) for c, n, a in calls]
    return Message(role="assistant", parts=tuple(parts))


def _call(call_id: str, name: str, args: dict[str, Any], text: str = "") -> Message:
    return _calls([(call_id, name, args)], text)


def _result(call_id: str, name: str, output: str, *extra: Any, is_error: bool = False) -> Message:
    part = ToolResultPart(call_id=call_id, name=name, output=output, is_error=is_error)
    return Message(role="tool", parts=(part, *extra))


def build_research_session(turns: int = 36, seed: int = 7) -> list[Message]:
    """The demo session: about `turns` user turns of Zotero research, oldest first."""
    rng = random.Random(seed)
    items = _zotero_items()
    msgs: list[Message] = []
    counter = iter(range(1, 10_000))

    def cid() -> str:
        return f"call_{next(counter):04d}"

    # Turn 1: the goal and the constraints, in Japanese and English.
    msgs.append(text_message("user", (
        "シャーロック・ホームズの受容史について文献調査を手伝ってください。"
        f"Zoteroの「Sherlock Holmes」コレクション（{COLLECTION_KEY}）を使ってください。\n"
        "Always cite items by their Zotero key, and keep every DOI you find. "
        "Do not use web pages as evidence."
    )))
    c = cid()
    msgs.append(_call(c, "zotero_list_collection", {"collection_key": COLLECTION_KEY},
                      "I'll start by listing the collection."))
    listing = [{"key": k, "itemType": d["itemType"], "title": d["title"], "date": d.get("date", "")}
               for k, d in items.items()]
    msgs.append(_result(c, "zotero_list_collection", json.dumps(listing, ensure_ascii=False),
                        CollectionPart(key=COLLECTION_KEY, name="Sherlock Holmes")))
    msgs.append(text_message("assistant", (
        f"The collection holds {len(listing)} items. Relevant for reception history: "
        + ", ".join(f"{k} ({items[k]['title'][:40]})" for k in FOCUS_KEYS)
        + ". Plan: read metadata for each, then read the journal article PQKBRC33 in full."
    )))

    # Metadata of each focus item.
    for key in FOCUS_KEYS:
        item = items[key]
        msgs.append(text_message("user", f"Get the full record of {key}."))
        c = cid()
        msgs.append(_call(c, "zotero_get_item", {"item_key": key}))
        msgs.append(_result(c, "zotero_get_item", json.dumps(item, ensure_ascii=False, indent=1),
                            ZoteroItemPart(item_key=key, title=item["title"],
                                           citation=_citation(item))))
        doi = f" DOI {item['DOI']}." if item.get("DOI") else ""
        msgs.append(text_message("assistant", (
            f"{key} is a {item['itemType']}: {item['title']} {_citation(item)}.{doi} "
            f"It bears on {rng.choice(_TOPICS)}."
        )))

    # Read the journal article page by page, annotating as we go.
    article = items["PQKBRC33"]
    attachment = ("Buck 1980 - Sherlock Holmes in Babylon.pdf", "TM8QRS36")
    total_pages = 11
    for page in range(1, total_pages + 1):
        msgs.append(text_message("user", f"Read page {page} of the PDF and annotate key claims."))
        c = cid()
        msgs.append(_call(c, "pdf_read_page", {"attachment_key": attachment[1], "page": page}))
        text = _page_text(rng, article["title"], page)
        msgs.append(_result(c, "pdf_read_page", text,
                            PdfPagePart(attachment_name=attachment[0], attachment_key=attachment[1],
                                        page=page, total_pages=total_pages, text=text[:400])))
        c = cid()
        ann_key = _zotero_key(rng)
        quote = text.split(";")[0]
        msgs.append(_call(c, "zotero_create_annotation",
                          {"parent_item": "PQKBRC33", "page": str(page), "text": quote,
                           "comment": f"claim {page}.1 — check against Knight (ICK5M93W)"}))
        msgs.append(_result(c, "zotero_create_annotation", json.dumps({"key": ann_key}),
                            AnnotationPart(annotation_key=ann_key, parent_item_key="PQKBRC33",
                                           text=quote, comment=f"claim {page}.1", page=str(page))))
        msgs.append(text_message("assistant", (
            f"Page {page}: the author links Holmes to {rng.choice(_TOPICS)}. "
            f"Annotation {ann_key} records claim {page}.1."
        )))
        if page == 4:
            # A failed tool call, kept in history and stated explicitly (SPEC R4).
            msgs.append(text_message("user", "Also check the appendix on page 14."))
            c = cid()
            msgs.append(_call(c, "pdf_read_page", {"attachment_key": attachment[1], "page": 14}))
            msgs.append(_result(c, "pdf_read_page",
                                f"Error: page 14 out of range: document has {total_pages} pages",
                                is_error=True))
            msgs.append(text_message("assistant", (
                "The PDF has only 11 pages, so there is no appendix on page 14; "
                "I will continue with page 5."
            )))
        if page == 6:
            # The user corrects the scope (in Japanese): a constraint that must survive.
            msgs.append(text_message("user", (
                "訂正：映画（film）は対象外にしてください。書籍と学術論文だけに絞ってください。"
                " Exclude PG5ZCTJT from the review."
            )))
            msgs.append(text_message("assistant", (
                "Understood: films are out of scope; PG5ZCTJT is excluded. "
                "The review will cover books and journal articles only."
            )))

    # Parallel calls: two books at once, then an EPUB section and the tags.
    msgs.append(text_message("user", "Compare Higham and Earnshaw on Doyle's own view of Holmes."))
    c1, c2 = cid(), cid()
    msgs.append(_calls([(c1, "zotero_fulltext", {"item_key": "B2VNV5Q7"}),
                        (c2, "zotero_fulltext", {"item_key": "6XDC27WD"})],
                       "Fetching both full texts in parallel."))
    for call_id, key in ((c1, "B2VNV5Q7"), (c2, "6XDC27WD")):
        text = _page_text(rng, items[key]["title"], rng.randint(10, 200), sentences=30)
        msgs.append(_result(call_id, "zotero_fulltext", text))
    msgs.append(text_message("assistant", (
        "Higham (B2VNV5Q7) reads Doyle as resenting Holmes; Earnshaw (6XDC27WD) treats the "
        "performances as shaping the reception more than the stories did."
    )))
    msgs.append(text_message("user", "Open the EPUB of the annotated edition at the Babylon note."))
    c = cid()
    msgs.append(_call(c, "epub_open", {"item_key": "Z8N84QAJ", "query": "Babylon"}))
    text = _page_text(rng, items["Z8N84QAJ"]["title"], 1, sentences=12)
    msgs.append(_result(c, "epub_open", text,
                        EpubLocationPart(attachment_name="annotated-holmes.epub", section_index=12,
                                         href="OEBPS/chapter12.xhtml",
                                         cfi="epubcfi(/6/26!/4/2/10)", text=text[:300])))
    msgs.append(text_message("assistant", "Section 12 of the EPUB carries the Babylon note."))
    msgs.append(text_message("user", "Which tags does the library use?"))
    c = cid()
    msgs.append(_call(c, "zotero_tags", {}))
    msgs.append(_result(c, "zotero_tags", "Community / Economic Development",
                        TagPart(tag="Community / Economic Development")))
    msgs.append(text_message("assistant", "Only one tag exists; tagging will not help here."))

    # Writing turns until the requested length is reached.
    done = sum(1 for m in msgs if m.role == "user")
    for i in range(max(0, turns - done)):
        key = FOCUS_KEYS[i % 5]  # never the excluded film
        msgs.append(text_message("user", f"Draft paragraph {i + 1} of the review around {key}."))
        body = _page_text(rng, items[key]["title"], i + 1, sentences=8)
        msgs.append(text_message("assistant", f"Paragraph {i + 1} {_citation(items[key])}: {body}"))
    msgs.append(text_message("user", "Next: assemble the outline and list open questions."))
    msgs.append(text_message("assistant", (
        "Next steps: 1) assemble the outline from paragraphs 1-n; 2) verify claim 4.1 against "
        "Knight (ICK5M93W); 3) list open questions for the user."
    )))
    return msgs
