"""`bench/results/checkpoint_room.json` -> its section of `docs/benchmarks.md` (issue 40)."""

from __future__ import annotations

from typing import Any


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def checkpoint_room_section(data: dict[str, Any] | None) -> list[str]:
    """Where the last checkpoint's room goes on the peers bench's planted session, and why
    it holds fewer planted facts than a peer whose summary is a flat list."""
    head = ["## Where a checkpoint's room goes (`bench/checkpoint_room.py` → "
            "`bench/results/checkpoint_room.json`)", ""]
    if data is None:
        return [*head, "Not run yet: `python -m bench.checkpoint_room`.", ""]
    run, budget, last = data["run"], data["budget"], data["last"]
    sections = last["sections"]
    prose = last["summary_estimate"]
    whole = prose + last["ledger_estimate"]
    user = next((s for s in sections if s["user_messages_whole"]), None)
    per = data["per_checkpoint"]
    late = per[len(per) // 2:]
    answered = sum(c["answered"] for c in late)
    kept = sum(c["kept"] for c in late)
    lines = [*head,
             f"The peers bench's planted session ({run['messages']:,} messages, "
             f"{last['planted_in_session']:,} planted facts; docs/peers.md, *Continuity*), "
             "the same fair fake summariser capped at contextfold's summary budget in o200k "
             f"tokens ({budget['summary_cap_o200k']:,}), contextfold with the tail it ships "
             f"({run['tail_tokens']:,} tokens): {data['compactions']} compactions, "
             f"{100 * last['held_at_end']:.1f}% of the planted facts in the request at the end. "
             "The last checkpoint, by section, in contextfold's conservative estimate (what "
             "its budgets are counted in) and in o200k tokens:", "",
             "| part | estimate | o200k | planted facts | user messages whole |",
             "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {s['heading']} | {s['estimate']:,} | {s['o200k']:,} | {s['facts']} | "
              f"{s['user_messages_whole']} |" for s in sections if s["estimate"] > 60]
    small = [s for s in sections if s["estimate"] <= 60]
    if small:
        lines.append(f"| {len(small)} headings with nothing or one line | "
                     f"{sum(s['estimate'] for s in small):,} | "
                     f"{sum(s['o200k'] for s in small):,} | "
                     f"{sum(s['facts'] for s in small)} | - |")
    counted = last.get("ledger_counted")
    lines += [f"| identifier ledger ({last['ledger_entries'] or 0:,} identifiers"
              + (f"; {counted:,} by the model's own tokenizer family, what its cap is "
                 "checked by" if counted is not None else "")
              + f") | {last['ledger_estimate']:,} | {last['ledger_o200k']:,} | - | - |",
              f"| **checkpoint** | **{whole:,}** | "
              f"**{last['summary_o200k'] + last['ledger_o200k']:,}** | **{last['kept']}** | - |",
              "",
              f"Why the checkpoint holds about a fifth of the facts: the summary budget is "
              f"{budget['summary_budget']:,} tokens by the estimate; the identifier ledger takes "
              f"what it needs up to its cap ({budget['ledger_cap']:,}, half, counted with the "
              f"model's own tokenizer family, which the generic estimate in the table puts "
              f"higher), and this session's {last['ledger_entries'] or 0:,} identifiers fill it "
              f"({_share(last['ledger_estimate'], whole)} of the checkpoint). Of the prose's "
              f"{prose:,}, "
              + (f"the user's section (their {user['user_messages_whole']} newest messages "
                 f"carried whole, SPEC S8, and their rules) takes {user['estimate']:,} "
                 f"({_share(user['estimate'], prose)}); " if user else "")
              + f"the rest holds the summariser's other facts. Listing every planted fact the "
              f"way the fake writes them (one bullet each) would take "
              f"{last['every_fact_as_bullets_estimate']:,} tokens by the estimate "
              f"({last['every_fact_as_bullets_o200k']:,} o200k), more than the whole summary "
              f"budget; the flat list a peer's summary is takes "
              f"{last['every_fact_flat_o200k']:,} o200k tokens, within a peer's cap. The loss "
              f"compounds: a summariser reading the session's prefix (SPEC Q3) is shown the "
              f"previous checkpoint, so a fact one checkpoint trims is never listed again. Over "
              f"the second half of the session the answers listed {answered:,} facts in all and "
              f"the checkpoints kept {kept:,} ({_share(kept, answered)}), the oldest trimmed "
              f"first, by priority, with \"earlier items omitted for size\" notes. What a "
              f"checkpoint drops stays in the durable history, where automatic recall (SPEC L5) "
              f"finds it for the turn that asks (docs/peers.md, *Fair continuity*). The estimate "
              f"counts this checkpoint at "
              f"{whole / max(1, last['summary_o200k'] + last['ledger_o200k']):.2f}× o200k "
              "(conservative by design: a request it sizes never overflows). Run "
              f"{run['at']}, {run['seconds']:.0f} s.", ""]
    return lines
