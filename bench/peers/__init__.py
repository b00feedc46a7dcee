"""Side-by-side benchmark of contextfold against other frameworks' compaction (issue 6).

`python -m bench.peers.run` (project venv) builds the workloads, runs every peer in a
subprocess of its own virtual environment (`bench/peers/.venv-peers`, pinned versions) and
contextfold in the project venv, then writes `bench/results/peers.json`, `docs/peers.md` and
`docs/peers.png`.

Modules that both venvs import (`common`, `synth`) use the standard library only.
"""
