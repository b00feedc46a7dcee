"""`contextfold proxy`: compaction for unmodified agents (SPEC Y1-Y5). See docs/proxy.md."""

from .config import ProxyConfig, llm_summarizer, parse_windows

__all__ = ["ProxyConfig", "llm_summarizer", "parse_windows"]
