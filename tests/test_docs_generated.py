"""The benchmark pages are generated from `bench/results/*.json`, never typed by hand
(issue 14): a figure edited on a page, or a results file rerun without re-rendering, fails
here. Re-render with `python -m bench.docs_report` and `python -m bench.peers.report`."""

from __future__ import annotations

import json
from pathlib import Path

from bench import docs_report
from bench.peers import report

ROOT = Path(__file__).resolve().parents[1]


def test_benchmarks_page_is_generated_from_the_results():
    page = (ROOT / "docs" / "benchmarks.md").read_text("utf-8")
    assert page == docs_report.benchmarks_md() + "\n"


def test_store_page_table_is_generated_from_the_results():
    current = (ROOT / "docs" / "store.md").read_text("utf-8")
    assert docs_report.BEGIN in current and docs_report.END in current
    assert docs_report.store_md(current) == current


def test_peers_page_is_generated_from_the_results():
    results = json.loads((ROOT / "bench" / "results" / "peers.json").read_text("utf-8"))
    assert (ROOT / "docs" / "peers.md").read_text("utf-8") == report.markdown(results)
