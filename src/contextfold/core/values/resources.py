"""One plain-text rendering of the typed research resources (SPEC R6).

Both the provider export and the summariser's serialiser use this, so a resource reads the
same to the chat model and to the summariser; only the content length differs.
"""

from __future__ import annotations

from .messages import (
    AnnotationPart,
    CollectionPart,
    EpubLocationPart,
    PdfPagePart,
    ResourcePart,
    TagPart,
    ZoteroItemPart,
)


def clip_middle(text: str, limit: int | None, *, what: str = "characters") -> str:
    """Keep the head and tail of `text` within `limit` characters, with a visible marker.

    Used for long tool results and long tool arguments (SPEC R3): the start usually says
    what the output is, the end usually holds the outcome, so both are kept.
    """
    if limit is None or len(text) <= limit:
        return text
    head = max(limit * 2 // 3, 1)
    tail = max(limit - head, 1)
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[… {omitted} {what} omitted …]\n{text[-tail:]}"


def render_resource(part: ResourcePart, *, text_limit: int | None = None) -> str:
    """Render a resource with exactly the fields resumption needs, plus optional content."""
    if isinstance(part, ZoteroItemPart):
        line = f"[Zotero item {part.item_key}] {part.title}".rstrip()
        return f"{line}\nCitation: {part.citation}" if part.citation else line
    if isinstance(part, PdfPagePart):
        of = f" of {part.total_pages}" if part.total_pages else ""
        key = f" ({part.attachment_key})" if part.attachment_key else ""
        head = f"[PDF {part.attachment_name}{key}, page {part.page}{of}]"
        return _with_content(head, part.text, text_limit)
    if isinstance(part, EpubLocationPart):
        name = f"{part.attachment_name}, " if part.attachment_name else ""
        head = f"[EPUB {name}section {part.section_index}, href {part.href}, CFI {part.cfi}]"
        return _with_content(head, part.text, text_limit)
    if isinstance(part, AnnotationPart):
        fields = [f"[Annotation {part.annotation_key}"]
        if part.parent_item_key:
            fields.append(f" on item {part.parent_item_key}")
        if part.page:
            fields.append(f", page {part.page}")
        fields.append("]")
        lines = ["".join(fields)]
        if part.text:
            lines.append(f"Text: {clip_middle(part.text, text_limit)}")
        if part.comment:
            lines.append(f"Comment: {part.comment}")
        return "\n".join(lines)
    if isinstance(part, CollectionPart):
        return f"[Zotero collection {part.key}] {part.name}".rstrip()
    if isinstance(part, TagPart):
        name = f" ({part.name})" if part.name and part.name != part.tag else ""
        return f"[Zotero tag {part.tag}]{name}"
    raise TypeError(f"not a resource part: {type(part).__name__}")


def _with_content(head: str, text: str, limit: int | None) -> str:
    return f"{head}\n{clip_middle(text, limit)}" if text else head
